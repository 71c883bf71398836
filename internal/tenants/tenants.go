// Package tenants holds tenants: created by the operator, read by anyone
// holding a role on them.
package tenants

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/bettercompute/computed/internal/authz"
	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/page"
	"github.com/bettercompute/computed/internal/registry"
	"github.com/bettercompute/computed/internal/reqctx"
	"github.com/bettercompute/computed/internal/store"
)

// Tenant is an isolated customer account.
type Tenant struct {
	TenantID  string    `json:"tenantId" db:"tenant_id"`
	Name      string    `json:"name" db:"name"`
	CreatedAt time.Time `json:"createdAt" db:"created_at"`
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
		return nil, errs.E(errs.Conflict, "tenant %s already exists", in.TenantID)
	}
	return &t, store.Wrap(err)
}

// Get returns a tenant (the decision already said the caller may read it).
func Get(ctx context.Context, q store.Q, in *GetInput) (*Tenant, error) {
	var t Tenant
	err := q.GetContext(ctx, &t, `SELECT tenant_id, name, created_at FROM tenants WHERE tenant_id = $1`, in.TenantID)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errs.E(errs.NotFound, "tenant %s not found", in.TenantID)
	}
	return &t, store.Wrap(err)
}

// List pages the tenants the caller may read: all for the operator, those it
// holds a role on for anyone else.
func List(ctx context.Context, q store.Q, in *ListInput) (*page.Page[Tenant], error) {
	var after string
	if _, err := page.Decode(in.Cursor, &after); err != nil {
		return nil, err
	}
	p := reqctx.PrincipalFrom(ctx)
	rows := []Tenant{}
	err := q.SelectContext(ctx, &rows, `
		SELECT t.tenant_id, t.name, t.created_at FROM tenants t
		WHERE t.tenant_id > $1 AND t.tenant_id <> 'builtin'
		  AND ($2 OR EXISTS (SELECT 1 FROM role_bindings b WHERE b.tenant_id = t.tenant_id AND b.principal_id = $3))
		ORDER BY t.tenant_id LIMIT $4`, after, p.IsOperator(), p.ID, in.Limit+1)
	if err != nil {
		return nil, store.Wrap(err)
	}
	items, cur := page.Trim(rows, in.Limit, func(t Tenant) string { return page.Encode(t.TenantID) })
	return &page.Page[Tenant]{Items: items, Cursor: cur}, nil
}

// Group describes the tenants group.
var Group = registry.Group{Name: "tenants", Summary: "Tenants are the isolated accounts that own pools, nodes, profiles and projects. The operator creates them; principals holding a role on a tenant read it."}

// Methods are the tenants group's registry entries.
func Methods() []registry.Method {
	return []registry.Method{
		registry.Def(registry.Method{Group: "tenants", Name: "create", Kind: registry.Mutation,
			Summary:    "Creates a tenant.",
			Notes:      []string{"Only the operator creates tenants.", "`CONFLICT` when the id is taken; `builtin` is reserved."},
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
		AND `+authz.Where("$2", func(ts string) string { return `t.tenant_id = ANY(` + ts + `)` }), ids, scope.Arg()); err != nil {
		return nil, store.Wrap(err)
	}
	out := make(map[string]*Tenant, len(rows))
	for i := range rows {
		out[rows[i].TenantID] = &rows[i]
	}
	return out, nil
}

// CountVisible counts the tenants the caller may read (what List pages).
func CountVisible(ctx context.Context, q store.Q) (int, error) {
	p := reqctx.PrincipalFrom(ctx)
	var n int
	err := q.GetContext(ctx, &n, `SELECT count(*) FROM tenants t WHERE t.tenant_id <> 'builtin'
		AND ($1 OR EXISTS (SELECT 1 FROM role_bindings b WHERE b.tenant_id = t.tenant_id AND b.principal_id = $2))`, p.IsOperator(), p.ID)
	return n, store.Wrap(err)
}
