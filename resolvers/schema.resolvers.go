package resolvers

import (
	"context"
	"strconv"

	"github.com/bettercompute/computed/graph"
	"github.com/bettercompute/computed/graph/model"
	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/iam"
	"github.com/bettercompute/computed/internal/loaders"
	"github.com/bettercompute/computed/internal/profiles"
	"github.com/bettercompute/computed/internal/projects"
	"github.com/bettercompute/computed/internal/registry"
	"github.com/bettercompute/computed/internal/relay"
	"github.com/bettercompute/computed/internal/reqctx"
	"github.com/bettercompute/computed/internal/tenants"
)

// CreateTenant is the resolver for the createTenant field.
func (r *mutationResolver) CreateTenant(ctx context.Context, input tenants.CreateInput) (*model.CreateTenantPayload, error) {
	t, err := call[tenants.Tenant](ctx, r.Resolver, "tenants.create", &input)
	if err != nil {
		return nil, err
	}
	return &model.CreateTenantPayload{Tenant: t}, nil
}

// CreateToken is the resolver for the createToken field.
func (r *mutationResolver) CreateToken(ctx context.Context, input iam.TokenCreateInput) (*iam.CreatedToken, error) {
	return call[iam.CreatedToken](ctx, r.Resolver, "tokens.create", &input)
}

// RevokeToken is the resolver for the revokeToken field.
func (r *mutationResolver) RevokeToken(ctx context.Context, input iam.TokenRefInput) (*model.RevokeTokenPayload, error) {
	t, err := call[iam.Token](ctx, r.Resolver, "tokens.revoke", &input)
	if err != nil {
		return nil, err
	}
	return &model.RevokeTokenPayload{Token: t}, nil
}

// GrantMember is the resolver for the grantMember field.
func (r *mutationResolver) GrantMember(ctx context.Context, input iam.GrantInput) (*model.GrantMemberPayload, error) {
	b, err := call[iam.Binding](ctx, r.Resolver, "members.grant", &input)
	if err != nil {
		return nil, err
	}
	return &model.GrantMemberPayload{Binding: b}, nil
}

// RevokeMember is the resolver for the revokeMember field.
func (r *mutationResolver) RevokeMember(ctx context.Context, input iam.MemberRefInput) (*iam.Revoked, error) {
	return call[iam.Revoked](ctx, r.Resolver, "members.revoke", &input)
}

// CreateProject is the resolver for the createProject field.
func (r *mutationResolver) CreateProject(ctx context.Context, input projects.CreateInput) (*model.CreateProjectPayload, error) {
	p, err := call[projects.Project](ctx, r.Resolver, "projects.create", &input)
	if err != nil {
		return nil, err
	}
	return &model.CreateProjectPayload{Project: p}, nil
}

// UpdateProject is the resolver for the updateProject field.
func (r *mutationResolver) UpdateProject(ctx context.Context, input projects.UpdateInput) (*model.UpdateProjectPayload, error) {
	p, err := call[projects.Project](ctx, r.Resolver, "projects.update", &input)
	if err != nil {
		return nil, err
	}
	return &model.UpdateProjectPayload{Project: p}, nil
}

// DeleteProject is the resolver for the deleteProject field.
func (r *mutationResolver) DeleteProject(ctx context.Context, input projects.RefInput) (*projects.Deleted, error) {
	return call[projects.Deleted](ctx, r.Resolver, "projects.delete", &input)
}

// AddProjectMember is the resolver for the addProjectMember field.
func (r *mutationResolver) AddProjectMember(ctx context.Context, input projects.MemberInput) (*model.AddProjectMemberPayload, error) {
	m, err := call[projects.Member](ctx, r.Resolver, "projects.addMember", &input)
	if err != nil {
		return nil, err
	}
	return &model.AddProjectMemberPayload{Member: m}, nil
}

// RemoveProjectMember is the resolver for the removeProjectMember field.
func (r *mutationResolver) RemoveProjectMember(ctx context.Context, input projects.MemberInput) (*projects.Removed, error) {
	return call[projects.Removed](ctx, r.Resolver, "projects.removeMember", &input)
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
	// tenants.get's argument, by its rules (read through the loaders, so
	// that the tenant's connections batch with it).
	if err := registry.Validate(r.Registry, "tenants.get", &tenants.GetInput{TenantID: tenantID}); err != nil {
		return nil, err
	}
	return loaders.From(ctx).NamedTenant(ctx, tenantID)
}

// Node is the resolver for the node field: the object when the caller may
// read it, null otherwise (a hidden object and a missing one look the
// same); an error when the read failed.
func (r *queryResolver) Node(ctx context.Context, id string) (relay.Node, error) {
	typ, key, ok := relay.Parse(id)
	if !ok {
		return nil, nil
	}
	l := loaders.From(ctx)
	switch {
	case typ == "Profile" && len(key) == 3:
		// The version as the id writes it, no other spelling of it: "01",
		// "+1" and "0001" named version 1 under ids that are not its id, so
		// one object had many ids in a client's cache.
		v, err := strconv.Atoi(key[2])
		if err != nil || strconv.Itoa(v) != key[2] {
			return nil, nil
		}
		return nodeOf(l.Profile.Load(ctx, profiles.Key{TenantID: key[0], ProfileID: key[1], ProfileVersion: v})())
	case typ == "Workflow" && len(key) == 2:
		return nodeOf(l.TenantWorkflow(ctx, key[0], key[1]))
	case typ == "PoolOffer" && len(key) == 2:
		return nodeOf(l.Offer.Load(ctx, [2]string{key[0], key[1]})())
	case len(key) != 1:
		return nil, nil
	case typ == "Tenant":
		return nodeOf(l.Tenant.Load(ctx, key[0])())
	case typ == "Project":
		return nodeOf(l.Project.Load(ctx, key[0])())
	case typ == "Pool":
		return nodeOf(l.Pool.Load(ctx, key[0])())
	case typ == "ComputeNode":
		return nodeOf(l.Node.Load(ctx, key[0])())
	case typ == "Instance":
		return nodeOf(l.Instances.Instance.Load(ctx, key[0])())
	case typ == "InventorySnapshot":
		return nodeOf(l.Snapshot.Load(ctx, key[0])())
	case typ == "JoinRequest":
		return nodeOf(l.JoinRequest.Load(ctx, key[0])())
	case typ == "Reservation":
		return nodeOf(l.Instances.Reservation.Load(ctx, key[0])())
	case typ == "JoinToken":
		return nodeOf(l.JoinToken.Load(ctx, key[0])())
	}
	return nil, nil
}

// Mutation returns graph.MutationResolver implementation.
func (r *Resolver) Mutation() graph.MutationResolver { return &mutationResolver{r} }

// Query returns graph.QueryResolver implementation.
func (r *Resolver) Query() graph.QueryResolver { return &queryResolver{r} }

type mutationResolver struct{ *Resolver }
type queryResolver struct{ *Resolver }
