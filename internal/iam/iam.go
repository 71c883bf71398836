// Package iam holds service tokens and role bindings on tenants.
package iam

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
	"github.com/bettercompute/computed/internal/registry"
	"github.com/bettercompute/computed/internal/reqctx"
	"github.com/bettercompute/computed/internal/store"
)

// TokenCursors and BindingCursors are the kinds of the token and role
// binding lists' cursors (both surfaces).
var (
	TokenCursors   = page.Keyed("token", ids.Pattern(ids.Token))
	BindingCursors = page.Keyed("roleBinding", ids.Pattern(ids.Principal))
)

// Token describes a service token (never its secret).
type Token struct {
	TokenID     string     `json:"tokenId" db:"token_id" doc:"The token's id (tok_ and a ULID), not its secret."`
	TenantID    string     `json:"tenantId" db:"tenant_id" doc:"The tenant the token's service principal holds its role on."`
	PrincipalID string     `json:"principalId" db:"principal_id" doc:"The service principal the token authenticates."`
	Name        string     `json:"name" db:"name" doc:"The token's name."`
	Role        string     `json:"role" db:"role" schema:"Role" doc:"The role the token's principal holds on the tenant now (members.grant changes it); the role the token was created with once members.revoke left it none."`
	CreatedAt   time.Time  `json:"createdAt" db:"created_at" doc:"When the token was created."`
	RevokedAt   *time.Time `json:"revokedAt" db:"revoked_at" doc:"When the token was revoked; null while it is in use."`
}

// CreatedToken is tokens.create's output: the secret is shown only here.
type CreatedToken struct {
	Token  Token  `json:"token" doc:"The token as created."`
	Secret string `json:"secret" doc:"The bearer secret, shown only here."`
}

// TokenCreateInput is tokens.create's input.
type TokenCreateInput struct {
	TenantID string `json:"tenantId"`
	Name     string `json:"name"`
	Role     string `json:"role"`
}

// TokenRefInput names one token.
type TokenRefInput struct {
	TenantID string `json:"tenantId"`
	TokenID  string `json:"tokenId"`
}

// ListInput pages a tenant's tokens or members.
type ListInput struct {
	TenantID string `json:"tenantId"`
	Limit    int    `json:"limit"`
	Cursor   string `json:"cursor,omitempty"`
}

// tokenCols are a token's columns; its role is its principal's binding on
// the tenant now (members.grant changes it: tokens.list showed the role a
// token was created with beside members.list's admin), or the role it was
// created with once members.revoke left it none.
const tokenCols = `token_id, tenant_id, principal_id, name, ` + tokenRole + ` AS role, created_at, revoked_at`

const tokenRole = `COALESCE((SELECT b.role FROM role_bindings b WHERE b.tenant_id = tokens.tenant_id AND b.principal_id = tokens.principal_id), tokens.role)`

// CreateToken makes a service principal holding role on the tenant and a
// bearer token for it; only the hash of the secret is stored.
func CreateToken(ctx context.Context, q store.Q, in *TokenCreateInput) (*CreatedToken, error) {
	pid := ids.New(ids.Principal)
	if _, err := q.ExecContext(ctx, `INSERT INTO principals (principal_id, kind, tenant_id, name) VALUES ($1, 'service', $2, $3)`, pid, in.TenantID, in.Name); err != nil {
		if store.IsForeignKey(err) {
			return nil, errs.E(errs.NotFound, "tenant %s not found", in.TenantID)
		}
		return nil, store.Wrap(err)
	}
	if _, err := q.ExecContext(ctx, `INSERT INTO role_bindings (tenant_id, principal_id, role) VALUES ($1, $2, $3)`, in.TenantID, pid, in.Role); err != nil {
		return nil, store.Wrap(err)
	}
	secret := ids.Secret("bct")
	var t Token
	err := q.GetContext(ctx, &t, `INSERT INTO tokens (token_id, principal_id, tenant_id, name, role, secret_hash)
		VALUES ($1, $2, $3, $4, $5, $6) RETURNING `+tokenCols, ids.New(ids.Token), pid, in.TenantID, in.Name, in.Role, auth.Hash(secret))
	if err != nil {
		return nil, store.Wrap(err)
	}
	return &CreatedToken{Token: t, Secret: secret}, nil
}

// ListTokens pages the tenant's service tokens, revoked ones included: the
// graph's page (TokenPagesByTenant) of the tenant the decision named.
func ListTokens(ctx context.Context, q store.Q, in *ListInput) (*page.Page[Token], error) {
	var after string
	if _, err := TokenCursors.Decode(in.Cursor, &after); err != nil {
		return nil, err
	}
	rows, err := TokenPagesByTenant(ctx, q, []string{in.TenantID}, after, in.Limit)
	if err != nil {
		return nil, err
	}
	items, cur := page.Trim(rows.Items, in.Limit, func(t Token) string { return TokenCursors.Encode(t.TokenID) })
	return &page.Page[Token]{Items: items, Cursor: cur}, nil
}

// RevokeToken revokes a token: it stops authenticating on the next request.
// Revoking twice is harmless and returns the token as revoked.
func RevokeToken(ctx context.Context, q store.Q, in *TokenRefInput) (*Token, error) {
	if _, err := auth.RevokingCredentials(ctx, q, `SELECT token_id FROM tokens WHERE tenant_id = $1 AND token_id = $2`, in.TenantID, in.TokenID); err != nil {
		return nil, err
	}
	var t Token
	err := q.GetContext(ctx, &t, `UPDATE tokens SET revoked_at = COALESCE(revoked_at, now())
		WHERE tenant_id = $1 AND token_id = $2 RETURNING `+tokenCols, in.TenantID, in.TokenID)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errs.E(errs.NotFound, "token %s not found", in.TokenID)
	}
	return &t, store.Wrap(err)
}

// Binding is a role a principal holds on a tenant.
type Binding struct {
	TenantID      string    `json:"tenantId" db:"tenant_id" doc:"The tenant the role is on."`
	PrincipalID   string    `json:"principalId" db:"principal_id" doc:"The principal holding the role."`
	PrincipalKind string    `json:"principalKind" db:"kind" doc:"The principal's kind: user or service."`
	PrincipalName string    `json:"principalName" db:"name" doc:"The principal's name."`
	Role          string    `json:"role" db:"role" schema:"Role" doc:"The role the principal holds on the tenant."`
	CreatedAt     time.Time `json:"createdAt" db:"created_at" doc:"When the role was granted."`
}

// GrantInput is members.grant's input.
type GrantInput struct {
	TenantID    string `json:"tenantId"`
	PrincipalID string `json:"principalId"`
	Role        string `json:"role"`
}

// MemberRefInput names one binding.
type MemberRefInput struct {
	TenantID    string `json:"tenantId"`
	PrincipalID string `json:"principalId"`
}

// Revoked is what a revoke returns.
type Revoked struct {
	Revoked int `json:"revoked" doc:"How many role bindings were removed."`
}

const bindingSelect = `SELECT b.tenant_id, b.principal_id, p.kind, p.name, b.role, b.created_at
	FROM role_bindings b JOIN principals p ON p.principal_id = b.principal_id`

// VisiblePrincipal finds a user or service principal that the tenant may
// name: one whose home is the tenant, or one already bound to it. Any other
// principal (another tenant's, a node, the operator) is NOT_FOUND, and
// nothing of it is returned. The operator, platform-wide, may name any user
// or service principal (to give one principal roles on several tenants).
func VisiblePrincipal(ctx context.Context, q store.Q, tenantID, principalID string) error {
	var ok bool
	err := q.GetContext(ctx, &ok, `SELECT true FROM principals p
		WHERE p.principal_id = $1 AND p.kind IN ('user', 'service')
		  AND ($3 OR p.tenant_id = $2 OR EXISTS (SELECT 1 FROM role_bindings b WHERE b.principal_id = p.principal_id AND b.tenant_id = $2))`,
		principalID, tenantID, reqctx.PrincipalFrom(ctx).IsOperator())
	if errors.Is(err, sql.ErrNoRows) {
		return errs.E(errs.NotFound, "principal %s not found", principalID)
	}
	return store.Wrap(err)
}

// Grant gives a principal a role on the tenant, replacing any role it held.
func Grant(ctx context.Context, q store.Q, in *GrantInput) (*Binding, error) {
	if err := VisiblePrincipal(ctx, q, in.TenantID, in.PrincipalID); err != nil {
		return nil, err
	}
	if in.Role != "admin" {
		if err := keepAnAdmin(ctx, q, in.TenantID, in.PrincipalID, "demoted"); err != nil {
			return nil, err
		}
	}
	if err := authz.ChangingAuthority(ctx, q, authz.Binding(in.TenantID, in.PrincipalID)); err != nil {
		return nil, err
	}
	if _, err := q.ExecContext(ctx, `INSERT INTO role_bindings (tenant_id, principal_id, role) VALUES ($1, $2, $3)
		ON CONFLICT (tenant_id, principal_id) DO UPDATE SET role = EXCLUDED.role`, in.TenantID, in.PrincipalID, in.Role); err != nil {
		return nil, store.Wrap(err)
	}
	var b Binding
	err := q.GetContext(ctx, &b, bindingSelect+` WHERE b.tenant_id = $1 AND b.principal_id = $2`, in.TenantID, in.PrincipalID)
	return &b, store.Wrap(err)
}

// keepAnAdmin refuses a change that takes the admin role from the tenant's
// last admin: a tenant without one could no longer manage its members,
// tokens, pools or nodes, and only the operator could give one back. The
// tenant's row is locked first (FOR NO KEY UPDATE: inserts referencing the
// tenant go on), so its membership changes take turns and the check, a
// statement of its own, reads the bindings as the change before it left
// them: two admins demoting each other at once leave one.
func keepAnAdmin(ctx context.Context, q store.Q, tenantID, principalID, how string) error {
	if _, err := q.ExecContext(ctx, `SELECT 1 FROM tenants WHERE tenant_id = $1 FOR NO KEY UPDATE`, tenantID); err != nil {
		return store.Wrap(err)
	}
	var last bool
	if err := q.GetContext(ctx, &last, `SELECT coalesce(bool_and(principal_id = $2), false) FROM role_bindings
		WHERE tenant_id = $1 AND role = 'admin'`, tenantID, principalID); err != nil {
		return store.Wrap(err)
	}
	if last {
		return errs.E(errs.InvalidState, "principal %s is the last admin of tenant %s and cannot be %s: grant admin to another principal first", principalID, tenantID, how).
			With("path", "principalId").With("reason", "last-admin")
	}
	return nil
}

// membershipTurn locates a membership change (members.grant and
// members.revoke) on its tenant and takes the tenant's turn for it (the
// row lock keepAnAdmin takes) before the decision. The decision
// share-locks the caller's own binding, and the change then needs the
// tenant's turn and its target's binding: two admins changing each other
// at once each held what the other waited for (a probe's four admins had
// up to 30 of 32 calls fail UNAVAILABLE on deadlocks). Taken first, the
// turn orders them. A caller the decision then refuses held the turn only
// for its refusal.
func membershipTurn(ctx context.Context, q store.Q, tenantID string) (authz.Resource, error) {
	if _, err := q.ExecContext(ctx, `SELECT 1 FROM tenants WHERE tenant_id = $1 FOR NO KEY UPDATE`, tenantID); err != nil {
		return authz.Resource{}, store.Wrap(err)
	}
	return authz.Resource{Type: authz.Tenant, TenantID: tenantID}, nil
}

func grantTurn(ctx context.Context, q store.Q, in *GrantInput) (authz.Resource, error) {
	return membershipTurn(ctx, q, in.TenantID)
}

func revokeTurn(ctx context.Context, q store.Q, in *MemberRefInput) (authz.Resource, error) {
	return membershipTurn(ctx, q, in.TenantID)
}

// RevokeMember removes a principal's role on the tenant.
func RevokeMember(ctx context.Context, q store.Q, in *MemberRefInput) (*Revoked, error) {
	if err := keepAnAdmin(ctx, q, in.TenantID, in.PrincipalID, "revoked"); err != nil {
		return nil, err
	}
	if err := authz.ChangingAuthority(ctx, q, authz.Binding(in.TenantID, in.PrincipalID)); err != nil {
		return nil, err
	}
	res, err := q.ExecContext(ctx, `DELETE FROM role_bindings WHERE tenant_id = $1 AND principal_id = $2`, in.TenantID, in.PrincipalID)
	if err != nil {
		return nil, store.Wrap(err)
	}
	n, _ := res.RowsAffected()
	if n == 0 {
		return nil, errs.E(errs.NotFound, "principal %s holds no role on tenant %s", in.PrincipalID, in.TenantID)
	}
	return &Revoked{Revoked: int(n)}, nil
}

// ListMembers pages the tenant's role bindings by principal id: the graph's
// page (BindingPagesByTenant) of the tenant the decision named.
func ListMembers(ctx context.Context, q store.Q, in *ListInput) (*page.Page[Binding], error) {
	var after string
	if _, err := BindingCursors.Decode(in.Cursor, &after); err != nil {
		return nil, err
	}
	rows, err := BindingPagesByTenant(ctx, q, []string{in.TenantID}, after, in.Limit)
	if err != nil {
		return nil, err
	}
	items, cur := page.Trim(rows.Items, in.Limit, func(b Binding) string { return BindingCursors.Encode(b.PrincipalID) })
	return &page.Page[Binding]{Items: items, Cursor: cur}, nil
}

// Groups of this package.
var (
	TokensGroup  = registry.Group{Name: "tokens", Summary: "Service tokens: bearer secrets for service principals, each created holding one role on its tenant (only the operator can give one a role on another tenant, members.grant). The secret is shown once, stored only as a hash, and a revoked token stops working at once."}
	MembersGroup = registry.Group{Name: "members", Summary: "Role bindings on a tenant: which principal holds viewer, member or admin."}
)

// RoleEnum names the roles of authz's table for the documents.
var RoleEnum = registry.DefineEnum("Role", "a role on a tenant: viewer reads, member also manages profiles, projects, instances and workflows, admin also pools, nodes, joins and IAM", authz.Roles...)

func role() registry.Field { return registry.EnumField("role", RoleEnum, true) }

func principalID() registry.Field { return registry.ID("principalId", ids.Principal) }

func list() []registry.Field {
	return []registry.Field{registry.TenantID(), registry.PageLimit(), registry.Cursor()}
}

// Methods are the tokens and members groups' registry entries.
func Methods() []registry.Method {
	m := func(group, name string, kind registry.Kind, perm authz.Permission, summary string, notes []string, in []registry.Field) registry.Method {
		return registry.Method{Group: group, Name: name, Kind: kind, Permission: perm, Resource: authz.Tenant,
			Summary: summary, Notes: notes, Module: "iam", Phase: "v0.1", Input: in}
	}
	return []registry.Method{
		registry.Def(m("tokens", "create", registry.Mutation, authz.IAMManage,
			"Creates a service principal holding `role` on the tenant and returns a bearer token for it.",
			[]string{"The secret is in this response only; the server keeps its SHA-256 hash."},
			[]registry.Field{registry.TenantID(), registry.Name(true), role()}), nil, CreateToken).WithAuditOutput("token.tokenId", "token.principalId"),
		registry.Def(m("tokens", "list", registry.Read, authz.IAMRead,
			"Returns a page of the tenant's service tokens, revoked ones included, ordered by id.",
			[]string{"`limit` defaults to 50 and is at most 200."}, list()), nil, ListTokens),
		registry.Def(m("tokens", "revoke", registry.Mutation, authz.IAMManage,
			"Revokes a token; it stops authenticating on the next request.",
			[]string{"`NOT_FOUND` when the tenant has no such token. Revoking a revoked token returns it unchanged."},
			[]registry.Field{registry.TenantID(), registry.ID("tokenId", ids.Token)}), nil, RevokeToken),
		registry.Def(m("members", "grant", registry.Mutation, authz.IAMManage,
			"Gives a principal a role on the tenant, replacing the role it held.",
			[]string{"`NOT_FOUND` when no such user or service principal exists, or when it is another tenant's and holds no role on this one (the same answer: nothing of another tenant's principals shows). The operator may name any user or service principal: that is how one principal comes to hold roles on several tenants.",
				"`INVALID_STATE` with `details.reason: \"last-admin\"` when it would take the admin role from the tenant's last admin: grant admin to another principal first."},
			[]registry.Field{registry.TenantID(), principalID(), role()}), grantTurn, Grant),
		registry.Def(m("members", "revoke", registry.Mutation, authz.IAMManage,
			"Removes a principal's role on the tenant and returns the number removed.",
			[]string{"`NOT_FOUND` when the principal holds no role on the tenant.",
				"`INVALID_STATE` with `details.reason: \"last-admin\"` when the principal is the tenant's last admin.",
				"Only the role goes. Relations to projects are relationships of their own (the contract's `owner`/`member` on `compute-project`), and a principal keeps what its relations grant on those projects, as a project-only collaborator does: `projects.removeMember` takes a relation away, and revoking its tokens (`tokens.revoke`, each one `tokens.list` shows for it) ends every access it had."},
			[]registry.Field{registry.TenantID(), principalID()}), revokeTurn, RevokeMember),
		registry.Def(m("members", "list", registry.Read, authz.IAMRead,
			"Returns a page of the tenant's role bindings, ordered by principal id.",
			[]string{"`limit` defaults to 50 and is at most 200."}, list()), nil, ListMembers),
	}
}

type tokenRow struct {
	Parent string `db:"parent_key"`
	Total  int    `db:"total_count"`
	Token
}

// TokenPagesByTenant returns one page of tokens for each tenant in one statement.
func TokenPagesByTenant(ctx context.Context, q store.Q, tenantIDs []string, after string, limit int) (page.Rows[Token], error) {
	var rows []tokenRow
	parents, arg := page.Parents(tenantIDs)
	err := q.SelectContext(ctx, &rows, `
		WITH t AS MATERIALIZED (
			SELECT t.parent, (SELECT count(*) FROM tokens c WHERE c.tenant_id = t.parent) AS total_count
			FROM `+parents+`)
		SELECT t.parent AS parent_key, t.total_count,
		       k.token_id, k.tenant_id, k.principal_id, k.name, k.role, k.created_at, k.revoked_at
		FROM t
		CROSS JOIN LATERAL (SELECT `+tokenCols+` FROM tokens WHERE tenant_id = t.parent AND token_id > $2 ORDER BY token_id LIMIT $3) k`,
		arg, after, limit+1)
	var r page.Rows[Token]
	for _, x := range rows {
		r.Parents, r.Totals, r.Items = append(r.Parents, x.Parent), append(r.Totals, x.Total), append(r.Items, x.Token)
	}
	return r, store.Wrap(err)
}

// CountTokensByTenant counts each tenant's tokens.
func CountTokensByTenant(ctx context.Context, q store.Q, tenantIDs []string) (map[string]int, error) {
	return store.CountBy(ctx, q, `SELECT tenant_id AS k, count(*) AS n FROM tokens WHERE tenant_id = ANY($1) GROUP BY tenant_id`, tenantIDs)
}

type bindingRow struct {
	Parent string `db:"parent_key"`
	Total  int    `db:"total_count"`
	Binding
}

// BindingPagesByTenant returns one page of role bindings for each tenant.
func BindingPagesByTenant(ctx context.Context, q store.Q, tenantIDs []string, after string, limit int) (page.Rows[Binding], error) {
	var rows []bindingRow
	parents, arg := page.Parents(tenantIDs)
	err := q.SelectContext(ctx, &rows, `
		WITH t AS MATERIALIZED (
			SELECT t.parent, (SELECT count(*) FROM role_bindings c WHERE c.tenant_id = t.parent) AS total_count
			FROM `+parents+`)
		SELECT t.parent AS parent_key, t.total_count,
		       b.tenant_id, b.principal_id, b.kind, b.name, b.role, b.created_at
		FROM t
		CROSS JOIN LATERAL (
			SELECT rb.tenant_id, rb.principal_id, p.kind, p.name, rb.role, rb.created_at
			FROM role_bindings rb JOIN principals p ON p.principal_id = rb.principal_id
			WHERE rb.tenant_id = t.parent AND rb.principal_id > $2 ORDER BY rb.principal_id LIMIT $3) b`,
		arg, after, limit+1)
	var r page.Rows[Binding]
	for _, x := range rows {
		r.Parents, r.Totals, r.Items = append(r.Parents, x.Parent), append(r.Totals, x.Total), append(r.Items, x.Binding)
	}
	return r, store.Wrap(err)
}

// CountBindingsByTenant counts each tenant's role bindings.
func CountBindingsByTenant(ctx context.Context, q store.Q, tenantIDs []string) (map[string]int, error) {
	return store.CountBy(ctx, q, `SELECT tenant_id AS k, count(*) AS n FROM role_bindings WHERE tenant_id = ANY($1) GROUP BY tenant_id`, tenantIDs)
}
