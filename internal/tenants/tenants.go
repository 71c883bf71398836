// Package tenants holds tenants: created by the operator, read by anyone
// holding a role on them.
package tenants

import (
	"context"
	"time"

	"github.com/bettercompute/computed/internal/authz"
	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/page"
	"github.com/bettercompute/computed/internal/registry"
	"github.com/bettercompute/computed/internal/reqctx"
	"github.com/bettercompute/computed/internal/store"
)

// Cursors is the kind of the tenant lists' cursors (both surfaces).
var Cursors = page.Keyed("tenant", registry.TenantPattern)

// Tenant is an isolated customer account.
type Tenant struct {
	TenantID  string    `json:"tenantId" db:"tenant_id" doc:"The tenant's id, as tenants.create was given it."`
	Name      string    `json:"name" db:"name" doc:"The tenant's name."`
	CreatedAt time.Time `json:"createdAt" db:"created_at" doc:"When the tenant was created."`
}

// CreateInput is tenants.create's input.
type CreateInput struct {
	TenantID string `json:"tenantId"`
	Name     string `json:"name"`
}

// GetInput is tenants.get's input.
type GetInput struct {
	TenantID string `json:"tenantId"`
}

// ListInput is tenants.list's input.
type ListInput struct {
	Limit  int    `json:"limit"`
	Cursor string `json:"cursor,omitempty"`
}

// Create stores a new tenant; CONFLICT when the id is taken (builtin included).
func Create(ctx context.Context, q store.Q, in *CreateInput) (*Tenant, error) {
	var t Tenant
	err := q.GetContext(ctx, &t, `INSERT INTO tenants (tenant_id, name) VALUES ($1, $2) RETURNING tenant_id, name, created_at`, in.TenantID, in.Name)
	if store.IsUnique(err, "") {
		return nil, errs.E(errs.Conflict, "tenant %s already exists", in.TenantID).With("path", "tenantId")
	}
	return &t, store.Wrap(err)
}

// Get returns a tenant (the decision already said the caller may read it):
// the graph's read (ByIDs) in the tenant the decision named.
func Get(ctx context.Context, q store.Q, in *GetInput) (*Tenant, error) {
	found, err := ByIDs(ctx, q, authz.TenantScope(in.TenantID), []string{in.TenantID})
	if err != nil {
		return nil, err
	}
	if found[in.TenantID] == nil {
		return nil, errs.E(errs.NotFound, "tenant %s not found", in.TenantID)
	}
	return found[in.TenantID], nil
}

// Visible is the one visibility predicate over tenants t: a tenant is
// visible to the principals holding a role on it (the tenants of the
// text[] expression tenants, a caller's scope of compute:tenants:read) and
// to the operator (every tenant). Every read of tenants uses it: list, the
// graph's tenants by id and viewer.tenants.
func Visible(tenants string) string { return `t.tenant_id = ANY(` + tenants + `)` }

// List pages the tenants the caller may read: all for the operator, those it
// holds a role on for anyone else.
func List(ctx context.Context, q store.Q, in *ListInput) (*page.Page[Tenant], error) {
	var after string
	if _, err := Cursors.Decode(in.Cursor, &after); err != nil {
		return nil, err
	}
	c, err := authz.LoadCaller(ctx, q, reqctx.PrincipalFrom(ctx))
	if err != nil {
		return nil, err
	}
	rows, err := Page(ctx, q, c.Scope(authz.TenantsRead), after, in.Limit+1)
	if err != nil {
		return nil, err
	}
	items, cur := page.Trim(rows, in.Limit, func(t Tenant) string { return Cursors.Encode(t.TenantID) })
	return &page.Page[Tenant]{Items: items, Cursor: cur}, nil
}

// Page returns up to limit tenants visible in scope after the id after, by
// id; builtin is not listed (it holds only what modules ship).
func Page(ctx context.Context, q store.Q, scope authz.Scope, after string, limit int) ([]Tenant, error) {
	rows := []Tenant{}
	err := q.SelectContext(ctx, &rows, `
		SELECT t.tenant_id, t.name, t.created_at FROM tenants t
		WHERE t.tenant_id > $1 AND t.tenant_id <> 'builtin' AND `+authz.Where("$2", Visible)+`
		ORDER BY t.tenant_id LIMIT $3`, after, scope.Arg(), limit)
	return rows, store.Wrap(err)
}

// Count counts the tenants Page lists for scope.
func Count(ctx context.Context, q store.Q, scope authz.Scope) (int, error) {
	var n int
	err := q.GetContext(ctx, &n, `SELECT count(*) FROM tenants t WHERE t.tenant_id <> 'builtin' AND `+authz.Where("$1", Visible), scope.Arg())
	return n, store.Wrap(err)
}

// Group describes the tenants group.
var Group = registry.Group{Name: "tenants", Summary: "Tenants are the isolated accounts that own pools, nodes, profiles and projects. The operator creates them; principals holding a role on a tenant read it."}

// Methods are the tenants group's registry entries.
func Methods() []registry.Method {
	return []registry.Method{
		registry.Def(registry.Method{Group: "tenants", Name: "create", Kind: registry.Mutation,
			Summary:    "Creates a tenant.",
			Notes:      []string{"Only the operator creates tenants.", "`CONFLICT` when the id is taken; `builtin` is reserved: naming it is `PERMISSION_DENIED` (the builtin tenant is read-only)."},
			Permission: authz.TenantsCreate, Resource: authz.Platform, Module: "core", Phase: "v0.1",
			Input: []registry.Field{registry.TenantID(), registry.Name(true)}}, nil, Create),
		registry.Def(registry.Method{Group: "tenants", Name: "get", Kind: registry.Read,
			Summary:    "Returns one tenant.",
			Notes:      []string{"Any role on the tenant may read it; a caller with none gets `PERMISSION_DENIED`, whether or not the tenant exists."},
			Permission: authz.TenantsRead, Resource: authz.Tenant, Module: "core", Phase: "v0.1",
			Input: []registry.Field{registry.TenantID()}}, nil, Get),
		registry.Def(registry.Method{Group: "tenants", Name: "list", Kind: registry.Read, Items: true,
			Summary:    "Returns a page of the tenants the caller holds a role on (every tenant for the operator), ordered by id.",
			Notes:      []string{"`limit` defaults to 50 and is at most 200; pass the returned cursor to read the next page."},
			Permission: authz.TenantsRead, Resource: authz.Platform, Module: "core", Phase: "v0.1",
			Input: []registry.Field{registry.PageLimit(), registry.Cursor()}}, nil, List),
	}
}

// ByIDs loads the tenants of ids in scope (compute:tenants:read), keyed by
// id.
func ByIDs(ctx context.Context, q store.Q, scope authz.Scope, ids []string) (map[string]*Tenant, error) {
	var rows []Tenant
	if err := q.SelectContext(ctx, &rows, `SELECT tenant_id, name, created_at FROM tenants t WHERE tenant_id = ANY($1)
		AND `+authz.Where("$2", Visible), ids, scope.Arg()); err != nil {
		return nil, store.Wrap(err)
	}
	out := make(map[string]*Tenant, len(rows))
	for i := range rows {
		out[rows[i].TenantID] = &rows[i]
	}
	return out, nil
}
