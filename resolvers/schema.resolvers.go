package resolvers

import (
	"context"
	"strconv"

	"github.com/bettercompute/computed/graph"
	"github.com/bettercompute/computed/graph/model"
	"github.com/bettercompute/computed/internal/authz"
	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/iam"
	"github.com/bettercompute/computed/internal/loaders"
	"github.com/bettercompute/computed/internal/profiles"
	"github.com/bettercompute/computed/internal/projects"
	"github.com/bettercompute/computed/internal/relay"
	"github.com/bettercompute/computed/internal/reqctx"
	"github.com/bettercompute/computed/internal/tenants"
	"github.com/bettercompute/computed/internal/workflows"
)

// CreateTenant is the resolver for the createTenant field.
func (r *mutationResolver) CreateTenant(ctx context.Context, input tenants.CreateInput) (*model.CreateTenantPayload, error) {
	t, err := call[tenants.Tenant](ctx, r.Resolver, "tenants.create", input)
	if err != nil {
		return nil, err
	}
	return &model.CreateTenantPayload{Tenant: t}, nil
}

// CreateToken is the resolver for the createToken field.
func (r *mutationResolver) CreateToken(ctx context.Context, input iam.TokenCreateInput) (*iam.CreatedToken, error) {
	return call[iam.CreatedToken](ctx, r.Resolver, "tokens.create", input)
}

// RevokeToken is the resolver for the revokeToken field.
func (r *mutationResolver) RevokeToken(ctx context.Context, input iam.TokenRefInput) (*model.RevokeTokenPayload, error) {
	t, err := call[iam.Token](ctx, r.Resolver, "tokens.revoke", input)
	if err != nil {
		return nil, err
	}
	return &model.RevokeTokenPayload{Token: t}, nil
}

// GrantMember is the resolver for the grantMember field.
func (r *mutationResolver) GrantMember(ctx context.Context, input iam.GrantInput) (*model.GrantMemberPayload, error) {
	b, err := call[iam.Binding](ctx, r.Resolver, "members.grant", input)
	if err != nil {
		return nil, err
	}
	return &model.GrantMemberPayload{Binding: b}, nil
}

// RevokeMember is the resolver for the revokeMember field.
func (r *mutationResolver) RevokeMember(ctx context.Context, input iam.MemberRefInput) (*iam.Revoked, error) {
	return call[iam.Revoked](ctx, r.Resolver, "members.revoke", input)
}

// CreateProject is the resolver for the createProject field.
func (r *mutationResolver) CreateProject(ctx context.Context, input projects.CreateInput) (*model.CreateProjectPayload, error) {
	p, err := call[projects.Project](ctx, r.Resolver, "projects.create", input)
	if err != nil {
		return nil, err
	}
	return &model.CreateProjectPayload{Project: p}, nil
}

// UpdateProject is the resolver for the updateProject field.
func (r *mutationResolver) UpdateProject(ctx context.Context, input projects.UpdateInput) (*model.UpdateProjectPayload, error) {
	p, err := call[projects.Project](ctx, r.Resolver, "projects.update", input)
	if err != nil {
		return nil, err
	}
	return &model.UpdateProjectPayload{Project: p}, nil
}

// DeleteProject is the resolver for the deleteProject field.
func (r *mutationResolver) DeleteProject(ctx context.Context, input projects.RefInput) (*projects.Deleted, error) {
	return call[projects.Deleted](ctx, r.Resolver, "projects.delete", input)
}

// AddProjectMember is the resolver for the addProjectMember field.
func (r *mutationResolver) AddProjectMember(ctx context.Context, input projects.MemberInput) (*model.AddProjectMemberPayload, error) {
	m, err := call[projects.Member](ctx, r.Resolver, "projects.addMember", input)
	if err != nil {
		return nil, err
	}
	return &model.AddProjectMemberPayload{Member: m}, nil
}

// RemoveProjectMember is the resolver for the removeProjectMember field.
func (r *mutationResolver) RemoveProjectMember(ctx context.Context, input projects.MemberInput) (*projects.Removed, error) {
	return call[projects.Removed](ctx, r.Resolver, "projects.removeMember", input)
}

// Viewer is the resolver for the viewer field.
func (r *queryResolver) Viewer(ctx context.Context) (*model.Viewer, error) {
	p := reqctx.PrincipalFrom(ctx)
	if p == nil {
		return nil, errs.E(errs.Unauthenticated, "a bearer token is required")
	}
	v := &model.Viewer{PrincipalID: p.ID, Kind: p.Kind, Name: p.Name}
	if p.TenantID != "" {
		v.TenantID = &p.TenantID
	}
	return v, nil
}

// Tenant is the resolver for the tenant field.
func (r *queryResolver) Tenant(ctx context.Context, tenantID string) (*tenants.Tenant, error) {
	if err := r.decide(ctx, "compute:tenants:read", authz.Resource{Type: authz.Tenant, TenantID: tenantID}); err != nil {
		return nil, err
	}
	t, err := loaders.From(ctx).Tenant.Load(ctx, tenantID)()
	if err == nil && t == nil {
		return nil, errs.E(errs.NotFound, "tenant %s not found", tenantID)
	}
	return t, err
}

// Node is the resolver for the node field: the object when the caller may
// read it, null otherwise (a hidden object and a missing one look the same).
func (r *queryResolver) Node(ctx context.Context, id string) (relay.Node, error) {
	typ, key, ok := relay.Parse(id)
	if !ok {
		return nil, nil
	}
	if typ == "Profile" && len(key) == 3 {
		// Read as its owner tenant names it: visible to principals holding a
		// role there (public and builtin ones are also visible to everyone
		// through tenant(tenantId:) { profile(...) }).
		v, err := strconv.Atoi(key[2])
		if err != nil {
			return nil, nil
		}
		p, err := call[profiles.Profile](ctx, r.Resolver, "profiles.get", profiles.RefInput{TenantID: key[0], ProfileID: key[1], ProfileVersion: &v})
		if err != nil || p.TenantID != key[0] {
			return nil, nil
		}
		return p, nil
	}
	if typ == "Workflow" && len(key) == 2 {
		w, err := call[workflows.Workflow](ctx, r.Resolver, "workflows.get", workflows.RefInput{TenantID: key[0], WorkflowID: key[1]})
		if err == nil {
			return w, nil
		}
		switch errs.CodeOf(err) {
		case errs.NotFound, errs.PermissionDenied, errs.InvalidInput:
			return nil, nil
		}
		return nil, err
	}
	if len(key) != 1 {
		return nil, nil
	}
	l := loaders.From(ctx)
	switch typ {
	case "Tenant":
		if r.decide(ctx, "compute:tenants:read", authz.Resource{Type: authz.Tenant, TenantID: key[0]}) != nil {
			return nil, nil
		}
		t, err := l.Tenant.Load(ctx, key[0])()
		if err != nil || t == nil {
			return nil, err
		}
		return t, nil
	case "Project":
		p, err := l.Project.Load(ctx, key[0])()
		if err != nil || p == nil {
			return nil, err
		}
		if r.decide(ctx, "compute:projects:read", authz.Resource{Type: authz.Project, TenantID: p.TenantID, ID: p.ProjectID}) != nil {
			return nil, nil
		}
		return p, nil
	case "Pool":
		p, err := l.Pool.Load(ctx, key[0])()
		if err != nil || p == nil {
			return nil, err
		}
		// The owner's members, or the caller's own tenant when the pool is
		// offered to it.
		if r.decide(ctx, "compute:pools:read", authz.Resource{Type: authz.Pool, TenantID: p.TenantID, ID: p.PoolID}) == nil {
			return p, nil
		}
		if pr := reqctx.PrincipalFrom(ctx); pr != nil && pr.TenantID != "" &&
			r.decide(ctx, "compute:pools:read", authz.Resource{Type: authz.Pool, TenantID: pr.TenantID, ID: p.PoolID}) == nil {
			return p, nil
		}
		return nil, nil
	case "ComputeNode":
		n, err := l.Node.Load(ctx, key[0])()
		if err != nil || n == nil {
			return nil, err
		}
		if r.decide(ctx, "compute:nodes:read", authz.Resource{Type: authz.Node, TenantID: n.TenantID, ID: n.NodeID}) != nil {
			return nil, nil
		}
		return n, nil
	case "Instance":
		// The loader's batch SQL returns only instances the caller reads.
		v, err := l.Instances.Instance.Load(ctx, key[0])()
		if err != nil || v == nil {
			return nil, err
		}
		return v, nil
	case "InventorySnapshot":
		snap, err := l.Snapshot.Load(ctx, key[0])()
		if err != nil || snap == nil {
			return nil, err
		}
		n, err := l.Node.Load(ctx, snap.NodeID)()
		if err != nil || n == nil {
			return nil, err
		}
		if r.decide(ctx, "compute:nodes:read", authz.Resource{Type: authz.Node, TenantID: n.TenantID, ID: n.NodeID}) != nil {
			return nil, nil
		}
		return snap, nil
	}
	return nil, nil
}

// Mutation returns graph.MutationResolver implementation.
func (r *Resolver) Mutation() graph.MutationResolver { return &mutationResolver{r} }

// Query returns graph.QueryResolver implementation.
func (r *Resolver) Query() graph.QueryResolver { return &queryResolver{r} }

type mutationResolver struct{ *Resolver }
type queryResolver struct{ *Resolver }
