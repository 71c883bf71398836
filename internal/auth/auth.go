// Package auth turns bearer tokens into principals. Tokens are opaque random
// secrets; only their SHA-256 hashes are stored, so a database read does not
// reveal a usable credential.
package auth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
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

// Authenticate looks up the principal of a secret: UNAUTHENTICATED, a
// failed authentication (Failed), when the token is unknown or revoked.
// Revocation is effective on the next request: nothing about a token is
// remembered between requests.
//
// The same statement reads the principal's role bindings (up to
// maxBindings) with the name of each bound tenant, so that a request's
// decisions on those tenants, and its reads of them, send no statement of
// their own: authentication and the bindings are one round trip instead of
// two, and the tenant of tenant(tenantId:) a third less.
func Authenticate(ctx context.Context, q store.Q, secret string) (*reqctx.Principal, error) {
	var row struct {
		TokenID     string         `db:"token_id"`
		PrincipalID string         `db:"principal_id"`
		Kind        string         `db:"kind"`
		TenantID    sql.NullString `db:"tenant_id"`
		Name        string         `db:"name"`
		NodeID      sql.NullString `db:"node_id"`
		Bindings    sql.NullString `db:"bindings"`
	}
	found := false
	// Every request runs this statement: read by pgx itself (store.EachRow).
	err := store.EachRow(ctx, q, `
		SELECT t.token_id, p.principal_id, p.kind, p.tenant_id, p.name, p.node_id,
		       CASE WHEN p.kind IN ('user', 'service') THEN (
		           SELECT json_agg(json_build_array(b.tenant_id, b.role, tn.name, tn.created_at))
		           FROM (SELECT tenant_id, role FROM role_bindings
		                 WHERE principal_id = p.principal_id LIMIT `+maxBindingsSQL+`) b
		           JOIN tenants tn ON tn.tenant_id = b.tenant_id) END AS bindings
		FROM tokens t JOIN principals p ON p.principal_id = t.principal_id
		WHERE t.secret_hash = $1 AND t.revoked_at IS NULL`, []any{Hash(secret)}, func(scan func(dest ...any) error) error {
		found = true
		return scan(&row.TokenID, &row.PrincipalID, &row.Kind, &row.TenantID, &row.Name, &row.NodeID, &row.Bindings)
	})
	if err != nil {
		return nil, store.Wrap(err)
	}
	if !found {
		return nil, Failed(errs.E(errs.Unauthenticated, "unknown or revoked bearer token"))
	}
	p := &reqctx.Principal{ID: row.PrincipalID, Kind: row.Kind, TenantID: row.TenantID.String,
		Name: row.Name, TokenID: row.TokenID, NodeID: row.NodeID.String}
	if row.Kind == "user" || row.Kind == "service" {
		if err := cacheBindings(p, row.Bindings); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// Revoked is the principal behind a revoked bearer token, as it was, with
// the token's id; nil for a secret that names no token at all. It is read
// only after Authenticate failed, to record who used a revoked token
// (audit): a stolen token used after its revocation is worth knowing of.
func Revoked(ctx context.Context, q store.Q, secret string) (*reqctx.Principal, error) {
	var p *reqctx.Principal
	err := store.EachRow(ctx, q, `
		SELECT t.token_id, p.principal_id, p.kind, COALESCE(p.tenant_id, ''), p.name
		FROM tokens t JOIN principals p ON p.principal_id = t.principal_id
		WHERE t.secret_hash = $1 AND t.revoked_at IS NOT NULL`, []any{Hash(secret)}, func(scan func(dest ...any) error) error {
		p = &reqctx.Principal{}
		return scan(&p.TokenID, &p.ID, &p.Kind, &p.TenantID, &p.Name)
	})
	return p, store.Wrap(err)
}

// HoldCredential makes the commit of a mutation's transaction q depend on
// p's token being unrevoked as it commits, not only as the request
// arrived: the commit runs credential_in_use (migration 00019) first, in
// the same round trip (store.ExecAtCommit), and fails if a revocation got
// there first; a revocation that comes while the commit holds the token
// waits for it (RevokingCredentials). So once tokens.revoke has answered,
// nothing more of the token's commits. A principal without a token (none
// here but in tests) holds nothing.
//
// A node's credential is held from the start instead, before the call
// locks anything: its revocation (nodes.remove) takes the credential
// before it locks the node's rows, and a call that locked one of them first
// (workflows.reportStep, its workflow row) and asked for the credential at
// commit closed a cycle: a probe's reports racing a removal deadlocked 202
// times in 7 removals, and 3 removals failed. Held first, a call either
// runs before the revocation, which waits for it, or after, and finds the
// credential revoked before it reads anything. (A user's or service's
// revocation locks none of the rows their calls lock, and their hold stays
// in the commit's round trip.)
func HoldCredential(ctx context.Context, q store.Q, p *reqctx.Principal) error {
	if p == nil || p.TokenID == "" {
		return nil
	}
	if p.Kind == "node" {
		_, err := q.ExecContext(ctx, `SELECT credential_in_use($1)`, p.TokenID)
		return err
	}
	return store.ExecAtCommit(ctx, q, `SELECT credential_in_use($1)`, p.TokenID)
}

// RevokedInFlight is the answer to a mutation whose commit found its token
// revoked (HoldCredential): what any call of a revoked token is answered.
// Other errors are returned as they are.
func RevokedInFlight(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == revokedInFlight {
		return errs.E(errs.Unauthenticated, "unknown or revoked bearer token")
	}
	return err
}

// RevokedWhileRunning answers a mutation of p's that failed with err: when
// p's token was revoked while the call ran, the call is answered as a
// revoked token's are (UNAUTHENTICATED), not with what its handler found.
// The commit's check (HoldCredential) catches a revocation only when the
// handler gets that far, and a revocation that changes what the handler
// reads stops it earlier: nodes.remove revokes the node's credential and
// marks the node removed, so a report in flight answered INVALID_STATE
// "node is removed" to a daemon whose credential no longer existed. Read
// after the rollback, on q (a connection of the pool); when it cannot be
// read, err stands.
func RevokedWhileRunning(ctx context.Context, q store.Q, p *reqctx.Principal, err error) error {
	if err == nil || p == nil || p.TokenID == "" || errs.CodeOf(err) == errs.Unauthenticated {
		return err
	}
	var revoked bool
	if qerr := q.GetContext(ctx, &revoked, `SELECT NOT EXISTS (SELECT 1 FROM tokens WHERE token_id = $1 AND revoked_at IS NULL)`, p.TokenID); qerr != nil || !revoked {
		return err
	}
	return errs.E(errs.Unauthenticated, "unknown or revoked bearer token")
}

// revokedInFlight is credential_in_use's SQLSTATE.
const revokedInFlight = "CR401"

// RevokingCredentials takes, in a revocation's transaction q, the lock of
// every token the query's rows name (their token_id column) before the
// revocation writes: it waits for the commits that hold them
// (HoldCredential), and later ones wait for it. The caller's own token,
// which its commit holds, is held here already, and every lock is taken
// in the order of the tokens' ids: two admins revoking each other's tokens
// at once each took the other's and then, at commit, asked for its own,
// and deadlocked (a probe: 12 of 24 pairs, each resolved after
// PostgreSQL's deadlock timeout). Now the second waits for the first, and
// its commit finds its own token revoked. It returns the ids of the tokens
// to revoke.
func RevokingCredentials(ctx context.Context, q store.Q, tokenIDs string, args ...any) ([]string, error) {
	var ids []string
	if err := q.SelectContext(ctx, &ids, `SELECT token_id FROM (`+tokenIDs+`) t`, args...); err != nil {
		return nil, store.Wrap(err)
	}
	toRevoke := slices.Clone(ids)
	revoked := map[string]bool{}
	for _, id := range ids {
		revoked[id] = true
	}
	if p := reqctx.PrincipalFrom(ctx); p != nil && p.TokenID != "" && !revoked[p.TokenID] {
		ids = append(ids, p.TokenID)
	}
	slices.Sort(ids)
	for _, id := range ids {
		lock := `SELECT credential_in_use($1)`
		if revoked[id] {
			lock = `SELECT credential_revoking($1)`
		}
		if _, err := q.ExecContext(ctx, lock, id); err != nil {
			return nil, RevokedInFlight(store.Wrap(err))
		}
	}
	if len(toRevoke) > 0 {
		// Once it commits, every replica closes the revoked tokens' sockets
		// at once (store.NoteAuthority), not at its next sweep.
		store.NoteAuthority(q)
	}
	return toRevoke, nil
}

// maxBindings is how many bindings authentication reads; a principal with
// more has its roles looked up tenant by tenant (authz.RoleOf).
const (
	maxBindings    = 1000
	maxBindingsSQL = "1001"
)

// cacheBindings memoises the bindings read with the token for the request:
// [[tenantId, role, tenantName, tenantCreatedAt], ...].
func cacheBindings(p *reqctx.Principal, raw sql.NullString) error {
	var rows [][4]string
	if raw.Valid {
		if err := json.Unmarshal([]byte(raw.String), &rows); err != nil {
			return fmt.Errorf("auth: role bindings: %w", err)
		}
	}
	if len(rows) > maxBindings {
		return nil
	}
	roles := make(map[string]string, len(rows))
	tenants := make(map[string]reqctx.BoundTenant, len(rows))
	for _, r := range rows {
		created, err := time.Parse(time.RFC3339Nano, r[3])
		if err != nil {
			return fmt.Errorf("auth: tenant created_at %q: %w", r[3], err)
		}
		roles[r[0]] = r[1]
		tenants[r[0]] = reqctx.BoundTenant{Name: r[2], CreatedAt: created.UTC()}
	}
	p.CacheAllRoles(roles)
	p.SetBoundTenants(tenants)
	return nil
}

const bootstrapTokenID = "tok_bootstrap"

// EnsureOperator makes sure the operator principal exists and that exactly
// secret authenticates its bootstrap token (COMPUTE_BOOTSTRAP_TOKEN: it
// replaces the token on each start). It is idempotent and safe to run from
// several replicas at once.
func EnsureOperator(ctx context.Context, db *store.DB, secret string) error {
	_, err := ensureOperator(ctx, db, secret, true)
	return err
}

// KeepOperator is EnsureOperator for the embedded default's kept secret
// (dataDir/operator-token): it makes the bootstrap token when the database
// has none, and otherwise changes nothing. It reports whether secret
// authenticates the bootstrap token afterwards. Replacing as
// EnsureOperator does, one restart of an embedded replica revived a file's
// token that a COMPUTE_BOOTSTRAP_TOKEN had replaced (or that was revoked
// because it leaked), and revoked the token the other replicas were
// started with (a probe's).
func KeepOperator(ctx context.Context, db *store.DB, secret string) (bool, error) {
	return ensureOperator(ctx, db, secret, false)
}

func ensureOperator(ctx context.Context, db *store.DB, secret string, replace bool) (ok bool, err error) {
	err = db.Tx(ctx, func(tx *sqlx.Tx) error {
		if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(7248301558)`); err != nil {
			return err
		}
		if !replace {
			var current struct {
				Hash    []byte `db:"secret_hash"`
				Revoked bool   `db:"revoked"`
			}
			err := tx.GetContext(ctx, &current, `SELECT secret_hash, revoked_at IS NOT NULL AS revoked FROM tokens WHERE token_id = $1`, bootstrapTokenID)
			if err == nil {
				ok = !current.Revoked && subtle.ConstantTimeCompare(current.Hash, Hash(secret)) == 1
				return nil
			}
			if !errors.Is(err, sql.ErrNoRows) {
				return err
			}
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
		ok = err == nil
		return err
	})
	return ok, err
}

// EmbeddedOperator bootstraps the operator of the embedded default, which
// runs without COMPUTE_BOOTSTRAP_TOKEN: its token is kept in
// dataDir/operator-token (generated on the first start, mode 0600) and
// installed only on a database that has no bootstrap token (KeepOperator).
// When the database has another one (a COMPUTE_BOOTSTRAP_TOKEN replaced
// it, or it was revoked) the start warns that the file does not sign in,
// and writes no file it would not sign in with (a start whose file was
// deleted generated one that never worked, and blamed a replacement). The
// secret itself is never logged.
func EmbeddedOperator(ctx context.Context, db *store.DB, dataDir string, logger *slog.Logger) error {
	path := filepath.Join(dataDir, "operator-token")
	var secret string
	if b, err := os.ReadFile(path); err == nil {
		secret = strings.TrimSpace(string(b))
	}
	generated := secret == ""
	if generated {
		secret = ids.Secret("bco")
	}
	ok, err := KeepOperator(ctx, db, secret)
	switch {
	case err != nil:
		return fmt.Errorf("bootstrap operator: %w", err)
	case !ok && generated:
		logger.Warn("no operator token in the data directory (the file is missing or empty), and the database has an operator token from an earlier start: none written; set COMPUTE_BOOTSTRAP_TOKEN to choose the operator's token",
			"file", path)
	case !ok:
		logger.Warn("the operator token in the data directory no longer signs in: it was replaced (COMPUTE_BOOTSTRAP_TOKEN on a start of a replica) or revoked; set COMPUTE_BOOTSTRAP_TOKEN to choose the operator's token",
			"file", path)
	case generated:
		if err := os.WriteFile(path, []byte(secret+"\n"), 0o600); err != nil {
			return fmt.Errorf("write operator token: %w", err)
		}
		logger.Info("generated operator token", "file", path)
	default:
		logger.Info("operator token", "file", path)
	}
	return nil
}

// OperatorCanSignIn reports whether some token of the operator is not
// revoked: a server on an external database started without
// COMPUTE_BOOTSTRAP_TOKEN, and without such a token from an earlier
// start, has nobody who can create a tenant.
func OperatorCanSignIn(ctx context.Context, db *store.DB) (bool, error) {
	var ok bool
	err := db.GetContext(ctx, &ok, `
		SELECT EXISTS (SELECT 1 FROM tokens t JOIN principals p USING (principal_id)
		               WHERE p.kind = 'operator' AND t.revoked_at IS NULL)`)
	return ok, err
}
