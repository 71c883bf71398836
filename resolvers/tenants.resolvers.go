package resolvers

import (
	"context"

	"github.com/bettercompute/computed/graph"
	"github.com/bettercompute/computed/graph/model"
	"github.com/bettercompute/computed/internal/iam"
	"github.com/bettercompute/computed/internal/loaders"
	"github.com/bettercompute/computed/internal/projects"
	"github.com/bettercompute/computed/internal/relay"
	"github.com/bettercompute/computed/internal/tenants"
)

// ID is the resolver for the id field.
func (r *tenantResolver) ID(ctx context.Context, obj *tenants.Tenant) (string, error) {
	return relay.ID("Tenant", obj.TenantID), nil
}

// Projects is the resolver for the projects field.
func (r *tenantResolver) Projects(ctx context.Context, obj *tenants.Tenant, first *int, after *string) (*model.ProjectConnection, error) {
	edges, info, total, err := loadConn(ctx, projects.Cursors, loaders.From(ctx).TenantProjects, obj.TenantID, first, after,
		func(p *projects.Project) string { return p.ProjectID },
		func(cur string, p *projects.Project) *model.ProjectEdge {
			return &model.ProjectEdge{Cursor: cur, Node: p}
		})
	if err != nil {
		return nil, err
	}
	return &model.ProjectConnection{Edges: edges, PageInfo: info, TotalCount: total}, nil
}

// Tokens is the resolver for the tokens field.
func (r *tenantResolver) Tokens(ctx context.Context, obj *tenants.Tenant, first *int, after *string) (*model.TokenConnection, error) {
	edges, info, total, err := loadConn(ctx, iam.TokenCursors, loaders.From(ctx).TenantTokens, obj.TenantID, first, after,
		func(t *iam.Token) string { return t.TokenID },
		func(cur string, t *iam.Token) *model.TokenEdge { return &model.TokenEdge{Cursor: cur, Node: t} })
	if err != nil {
		return nil, err
	}
	return &model.TokenConnection{Edges: edges, PageInfo: info, TotalCount: total}, nil
}

// Members is the resolver for the members field.
func (r *tenantResolver) Members(ctx context.Context, obj *tenants.Tenant, first *int, after *string) (*model.RoleBindingConnection, error) {
	edges, info, total, err := loadConn(ctx, iam.BindingCursors, loaders.From(ctx).TenantMembers, obj.TenantID, first, after,
		func(b *iam.Binding) string { return b.PrincipalID },
		func(cur string, b *iam.Binding) *model.RoleBindingEdge {
			return &model.RoleBindingEdge{Cursor: cur, Node: b}
		})
	if err != nil {
		return nil, err
	}
	return &model.RoleBindingConnection{Edges: edges, PageInfo: info, TotalCount: total}, nil
}

// Tenants is the resolver for the viewer's tenants: what tenants.list
// pages, shaped as a connection.
func (r *viewerResolver) Tenants(ctx context.Context, obj *model.Viewer, first *int, after *string) (*model.TenantConnection, error) {
	n, key, err := pageArgs(tenants.Cursors, first, after)
	if err != nil {
		return nil, err
	}
	c, err := loaders.From(ctx).VisibleTenants(ctx, n, key)
	if err != nil {
		return nil, err
	}
	edges, info, total := connection(ctx, tenants.Cursors, c, func(t *tenants.Tenant) string { return t.TenantID },
		func(cur string, t *tenants.Tenant) *model.TenantEdge { return &model.TenantEdge{Cursor: cur, Node: t} })
	return &model.TenantConnection{Edges: edges, PageInfo: info, TotalCount: total}, nil
}

// Tenant returns graph.TenantResolver implementation.
func (r *Resolver) Tenant() graph.TenantResolver { return &tenantResolver{r} }

// Viewer returns graph.ViewerResolver implementation.
func (r *Resolver) Viewer() graph.ViewerResolver { return &viewerResolver{r} }

type tenantResolver struct{ *Resolver }
type viewerResolver struct{ *Resolver }
