// Package auth turns bearer tokens into principals. Tokens are opaque random
// secrets; only their SHA-256 hashes are stored, so a database read does not
// reveal a usable credential.
package auth

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/jmoiron/sqlx"

	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/ids"
	"github.com/bettercompute/computed/internal/reqctx"
	"github.com/bettercompute/computed/internal/store"
)

// Hash is the stored form of a secret.
func Hash(secret string) []byte {
	h := sha256.Sum256([]byte(secret))
	return h[:]
}

// FromHeader extracts the token of an "Authorization: Bearer <token>" value.
func FromHeader(v string) (string, bool) {
	scheme, tok, ok := strings.Cut(strings.TrimSpace(v), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != "" && len(tok) <= 512
}

// Authenticate looks up the principal of a secret: UNAUTHENTICATED when the
// token is unknown or revoked. Revocation is effective on the next request.
func Authenticate(ctx context.Context, q store.Q, secret string) (*reqctx.Principal, error) {
	var row struct {
		TokenID     string         `db:"token_id"`
		PrincipalID string         `db:"principal_id"`
		Kind        string         `db:"kind"`
		TenantID    sql.NullString `db:"tenant_id"`
		Name        string         `db:"name"`
		NodeID      sql.NullString `db:"node_id"`
	}
	err := q.GetContext(ctx, &row, `
		SELECT t.token_id, p.principal_id, p.kind, p.tenant_id, p.name, p.node_id
		FROM tokens t JOIN principals p ON p.principal_id = t.principal_id
		WHERE t.secret_hash = $1 AND t.revoked_at IS NULL`, Hash(secret))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errs.E(errs.Unauthenticated, "unknown or revoked bearer token")
	}
	if err != nil {
		return nil, store.Wrap(err)
	}
	return &reqctx.Principal{ID: row.PrincipalID, Kind: row.Kind, TenantID: row.TenantID.String,
		Name: row.Name, TokenID: row.TokenID, NodeID: row.NodeID.String}, nil
}

const bootstrapTokenID = "tok_bootstrap"

// EnsureOperator makes sure the operator principal exists and that exactly
// secret authenticates its bootstrap token. It is idempotent and safe to run
// from several replicas at once.
func EnsureOperator(ctx context.Context, db *store.DB, secret string) error {
	return db.Tx(ctx, func(tx *sqlx.Tx) error {
		if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(7248301558)`); err != nil {
			return err
		}
		var pid string
		err := tx.GetContext(ctx, &pid, `SELECT principal_id FROM principals WHERE kind = 'operator' ORDER BY created_at LIMIT 1`)
		if errors.Is(err, sql.ErrNoRows) {
			pid = ids.New(ids.Principal)
			if _, err := tx.ExecContext(ctx, `INSERT INTO principals (principal_id, kind, name) VALUES ($1, 'operator', 'operator')`, pid); err != nil {
				return err
			}
		} else if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `
			INSERT INTO tokens (token_id, principal_id, name, secret_hash) VALUES ($1, $2, 'bootstrap', $3)
			ON CONFLICT (token_id) DO UPDATE SET secret_hash = EXCLUDED.secret_hash, revoked_at = NULL, principal_id = EXCLUDED.principal_id`,
			bootstrapTokenID, pid, Hash(secret))
		return err
	})
}

// BootstrapSecret returns the operator secret: the configured one, or in
// embedded mode the one kept in dataDir/operator-token (generated on first
// start with mode 0600). The secret itself is never logged.
func BootstrapSecret(configured, dataDir string, embedded bool, logger *slog.Logger) (string, error) {
	if configured != "" {
		return configured, nil
	}
	if !embedded {
		return "", nil
	}
	path := filepath.Join(dataDir, "operator-token")
	if b, err := os.ReadFile(path); err == nil {
		if s := strings.TrimSpace(string(b)); s != "" {
			logger.Info("operator token", "file", path)
			return s, nil
		}
	}
	secret := ids.Secret("bco")
	if err := os.WriteFile(path, []byte(secret+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("write operator token: %w", err)
	}
	logger.Info("generated operator token", "file", path)
	return secret, nil
}
