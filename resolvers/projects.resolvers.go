package resolvers

import (
	"context"

	"github.com/bettercompute/computed/graph"
	"github.com/bettercompute/computed/graph/model"
	"github.com/bettercompute/computed/internal/loaders"
	"github.com/bettercompute/computed/internal/projects"
	"github.com/bettercompute/computed/internal/relay"
	"github.com/bettercompute/computed/internal/tenants"
)

// ID is the resolver for the id field.
func (r *projectResolver) ID(ctx context.Context, obj *projects.Project) (string, error) {
	return relay.ID("Project", obj.ProjectID), nil
}

// Tenant is the resolver for the tenant field.
func (r *projectResolver) Tenant(ctx context.Context, obj *projects.Project) (*tenants.Tenant, error) {
	// nil when the caller may not read the tenant (a principal related
	// to the project only): the project stays readable. It was NOT_FOUND,
	// which nulled the whole project, as the field was non-null.
	return loaders.From(ctx).Tenant.Load(ctx, obj.TenantID)()
}

// Members is the resolver for the members field.
func (r *projectResolver) Members(ctx context.Context, obj *projects.Project, first *int, after *string) (*model.ProjectMemberConnection, error) {
	edges, info, total, err := loadConn(ctx, projects.MemberCursors, loaders.From(ctx).ProjectMembers, obj.ProjectID, first, after,
		func(m *projects.Member) string { return m.PrincipalID },
		func(cur string, m *projects.Member) *model.ProjectMemberEdge {
			return &model.ProjectMemberEdge{Cursor: cur, Node: m}
		})
	if err != nil {
		return nil, err
	}
	return &model.ProjectMemberConnection{Edges: edges, PageInfo: info, TotalCount: total}, nil
}

// Project returns graph.ProjectResolver implementation.
func (r *Resolver) Project() graph.ProjectResolver { return &projectResolver{r} }

type projectResolver struct{ *Resolver }
