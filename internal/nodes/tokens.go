package nodes

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/bettercompute/computed/internal/auth"
	"github.com/bettercompute/computed/internal/authz"
	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/ids"
	"github.com/bettercompute/computed/internal/page"
	"github.com/bettercompute/computed/internal/store"
)

// JoinToken is a pool's join token; its secret is shown only when created.
type JoinToken struct {
	JoinTokenID string     `json:"joinTokenId" db:"join_token_id" doc:"The join token's id (jtok_ and a ULID), not its secret."`
	PoolID      string     `json:"poolId" db:"pool_id" doc:"The pool the token admits machines into."`
	TenantID    string     `json:"tenantId" db:"tenant_id" doc:"The tenant that owns the pool."`
	ExpiresAt   time.Time  `json:"expiresAt" db:"expires_at" doc:"When the token stops admitting (ttlSeconds after it was created)."`
	MaxUses     int        `json:"maxUses" db:"max_uses" doc:"How many joins the token may admit by itself."`
	Uses        int        `json:"uses" db:"uses" doc:"How many joins the token admitted by itself (a join admitted by an approved join request spends no use)."`
	State       string     `json:"state" db:"token_state" schema:"JoinTokenState" doc:"Only an active token admits: an exhausted one has no uses left, an expired one is past expiresAt, a revoked one was revoked."`
	CreatedAt   time.Time  `json:"createdAt" db:"created_at" doc:"When the token was created."`
	RevokedAt   *time.Time `json:"revokedAt" db:"revoked_at" doc:"When the token was revoked; null unless it was."`
}

// CreatedJoinToken is joinTokens.create's output.
type CreatedJoinToken struct {
	JoinToken JoinToken `json:"joinToken" doc:"The join token as created."`
	Secret    string    `json:"secret" doc:"The token's secret, which nodes.join takes as joinToken: shown only here."`
}

// Join token defaults and limits.
const (
	DefaultTokenTTL = 3600
	MaxTokenTTL     = 30 * 24 * 3600
	MaxTokenUses    = 10000
)

type (
	JoinTokenCreateInput struct {
		TenantID   string `json:"tenantId"`
		PoolID     string `json:"poolId"`
		TTLSeconds *int   `json:"ttlSeconds"` // defaulted by the registry
		MaxUses    *int   `json:"maxUses"`    // defaulted by the registry
	}
	JoinTokenListInput struct {
		TenantID string `json:"tenantId"`
		PoolID   string `json:"poolId"`
		Limit    int    `json:"limit"`
		Cursor   string `json:"cursor,omitempty"`
	}
	JoinTokenRefInput struct {
		TenantID    string `json:"tenantId"`
		JoinTokenID string `json:"joinTokenId"`
	}
)

// tokenState derives a token's state in SQL: revoked, expired, exhausted or
// active.
const tokenState = `CASE WHEN revoked_at IS NOT NULL THEN 'revoked' WHEN expires_at <= now() THEN 'expired'
	WHEN uses >= max_uses THEN 'exhausted' ELSE 'active' END AS token_state`

const tokenCols = `join_token_id, pool_id, tenant_id, expires_at, max_uses, uses, created_at, revoked_at, ` + tokenState

// CreateJoinToken makes a join token for an active pool the tenant owns.
func CreateJoinToken(ctx context.Context, q store.Q, in *JoinTokenCreateInput) (*CreatedJoinToken, error) {
	if _, err := ownedPool(ctx, q, in.TenantID, in.PoolID, addToPool); err != nil {
		return nil, err
	}
	secret := ids.Secret("bcj")
	var t JoinToken
	err := q.GetContext(ctx, &t, `INSERT INTO join_tokens (join_token_id, pool_id, tenant_id, secret_hash, max_uses, expires_at)
		VALUES ($1, $2, $3, $4, $5, now() + make_interval(secs => $6)) RETURNING `+tokenCols,
		ids.New(ids.JoinToken), in.PoolID, in.TenantID, auth.Hash(secret), *in.MaxUses, *in.TTLSeconds)
	if err != nil {
		return nil, store.Wrap(err)
	}
	return &CreatedJoinToken{JoinToken: t, Secret: secret}, nil
}

// ListJoinTokens pages a pool's join tokens by id, revoked and expired ones
// included (with their state).
func ListJoinTokens(ctx context.Context, q store.Q, in *JoinTokenListInput) (*page.Page[JoinToken], error) {
	var after string
	if _, err := TokenCursors.Decode(in.Cursor, &after); err != nil {
		return nil, err
	}
	if _, err := ownedPool(ctx, q, in.TenantID, in.PoolID, readPool); err != nil {
		return nil, err
	}
	rows := []JoinToken{}
	err := q.SelectContext(ctx, &rows, `SELECT `+tokenCols+` FROM join_tokens
		WHERE pool_id = $1 AND tenant_id = $2 AND join_token_id > $3 ORDER BY join_token_id LIMIT $4`,
		in.PoolID, in.TenantID, after, in.Limit+1)
	if err != nil {
		return nil, store.Wrap(err)
	}
	items, cur := page.Trim(rows, in.Limit, func(t JoinToken) string { return TokenCursors.Encode(t.JoinTokenID) })
	return &page.Page[JoinToken]{Items: items, Cursor: cur}, nil
}

// RevokeJoinToken revokes a token; it admits nothing from then on. Revoking
// a revoked token is INVALID_STATE.
func RevokeJoinToken(ctx context.Context, q store.Q, in *JoinTokenRefInput) (*JoinToken, error) {
	var t JoinToken
	err := q.GetContext(ctx, &t, `SELECT `+tokenCols+` FROM join_tokens WHERE join_token_id = $1 AND tenant_id = $2 FOR UPDATE`,
		in.JoinTokenID, in.TenantID)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errs.E(errs.NotFound, "join token %s not found", in.JoinTokenID)
	}
	if err != nil {
		return nil, store.Wrap(err)
	}
	if t.RevokedAt != nil {
		return nil, errs.E(errs.InvalidState, "join token %s is already revoked", in.JoinTokenID).With("state", t.State)
	}
	err = q.GetContext(ctx, &t, `UPDATE join_tokens SET revoked_at = now() WHERE join_token_id = $1 RETURNING `+tokenCols, in.JoinTokenID)
	return &t, store.Wrap(err)
}

// poolRow is what the join handlers need of a pool.
type poolRow struct {
	PoolID      string `db:"pool_id"`
	TenantID    string `db:"tenant_id"`
	State       string `db:"state"`
	SharingMode string `db:"sharing_mode"`
}

// poolLock is how ownedPool takes the pool's row.
type poolLock int

const (
	// readPool only reads it.
	readPool poolLock = iota
	// addToPool share-locks it and wants it active: an entry is added
	// that joins may decide on (a join token, an expected machine, an
	// allowed key); an archive cannot commit between the check and the
	// change.
	addToPool
	// takeFromPool locks it for update: an entry joins decide on is taken
	// away (a machine forgotten, a key disallowed). A join share-locks its
	// pool from its first statement to its commit, so the removal waits for
	// the joins already deciding on the entry, and a join after it waits for
	// its commit and finds the entry gone (a join that read the entry as
	// the removal committed was admitted after it).
	takeFromPool
)

// ownedPool reads a pool the tenant owns (NOT_FOUND otherwise: an offered
// tenant does not manage the pool's joins), locked as lock says.
func ownedPool(ctx context.Context, q store.Q, tenantID, poolID string, lock poolLock) (*poolRow, error) {
	mode := [...]string{``, `FOR SHARE`, `FOR UPDATE`}[lock]
	if err := authz.LockPool(ctx, q, poolID, mode); err != nil {
		return nil, err
	}
	var p poolRow
	err := q.GetContext(ctx, &p, `SELECT pool_id, tenant_id, state, sharing_mode FROM pools WHERE pool_id = $1 AND tenant_id = $2 `+mode, poolID, tenantID)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errs.E(errs.NotFound, "pool %s not found", poolID)
	}
	if err != nil {
		return nil, store.Wrap(err)
	}
	if lock == addToPool && p.State != "active" {
		return nil, errs.InState(p.State, "pool %s is %s", poolID, p.State)
	}
	return &p, nil
}

type poolTokenRow struct {
	Parent string `db:"parent_key"`
	Total  int    `db:"total_count"`
	JoinToken
}

// tokenVisible is the visibility predicate over join_tokens: the pool
// owner's (compute:joinTokens:read), as joinTokens.list decides; tenants
// the pool is offered to do not see them.
func tokenVisible(tenants string) string { return `join_tokens.tenant_id = ANY(` + tenants + `)` }

// JoinTokenPagesByPool returns one page of each pool's join tokens visible
// in scope (the graph's Pool.joinTokens), in joinTokens.list's order.
func JoinTokenPagesByPool(ctx context.Context, q store.Q, scope authz.Scope, poolIDs []string, after string, limit int) (page.Rows[JoinToken], error) {
	var rows []poolTokenRow
	err := q.SelectContext(ctx, &rows, `
		WITH t AS MATERIALIZED (
			SELECT t.parent, (SELECT count(*) FROM join_tokens WHERE join_tokens.pool_id = t.parent AND `+authz.Where("$4", tokenVisible)+`) AS total_count
			FROM unnest($1::text[]) AS t(parent))
		SELECT t.parent AS parent_key, t.total_count,
		       x.*
		FROM t
		CROSS JOIN LATERAL (
			SELECT `+tokenCols+` FROM join_tokens WHERE join_tokens.pool_id = t.parent AND join_token_id > $2
			  AND `+authz.Where("$4", tokenVisible)+`
			ORDER BY join_token_id LIMIT $3
		) x`, poolIDs, after, limit+1, scope.Arg())
	var r page.Rows[JoinToken]
	for _, x := range rows {
		r.Parents, r.Totals, r.Items = append(r.Parents, x.Parent), append(r.Totals, x.Total), append(r.Items, x.JoinToken)
	}
	return r, store.Wrap(err)
}

// JoinTokensByID loads the join tokens of ids visible in scope (the pool
// owner's readers of join tokens) in one statement, keyed by id.
func JoinTokensByID(ctx context.Context, q store.Q, scope authz.Scope, ids []string) (map[string]*JoinToken, error) {
	var rows []JoinToken
	if err := q.SelectContext(ctx, &rows, `SELECT `+tokenCols+` FROM join_tokens WHERE join_token_id = ANY($1) AND `+authz.Where("$2", tokenVisible), ids, scope.Arg()); err != nil {
		return nil, store.Wrap(err)
	}
	out := make(map[string]*JoinToken, len(rows))
	for i := range rows {
		out[rows[i].JoinTokenID] = &rows[i]
	}
	return out, nil
}

// CountJoinTokensByPool counts each pool's join tokens visible in scope.
func CountJoinTokensByPool(ctx context.Context, q store.Q, scope authz.Scope, poolIDs []string) (map[string]int, error) {
	return store.CountBy(ctx, q, `SELECT t.parent AS k,
			(SELECT count(*) FROM join_tokens WHERE join_tokens.pool_id = t.parent AND `+authz.Where("$2", tokenVisible)+`) AS n
		FROM unnest($1::text[]) AS t(parent)`, poolIDs, scope.Arg())
}
