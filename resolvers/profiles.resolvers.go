package resolvers

import (
	"context"
	"strconv"

	"github.com/bettercompute/computed/graph"
	"github.com/bettercompute/computed/graph/model"
	"github.com/bettercompute/computed/internal/loaders"
	"github.com/bettercompute/computed/internal/profiles"
	"github.com/bettercompute/computed/internal/relay"
	"github.com/bettercompute/computed/internal/tenants"
)

// CreateProfile is the resolver for the createProfile field.
func (r *mutationResolver) CreateProfile(ctx context.Context, input model.CreateProfileInput) (*model.CreateProfilePayload, error) {
	doc, err := jsonArg(input.Document)
	if err != nil {
		return nil, err
	}
	p, err := call[profiles.Profile](ctx, r.Resolver, "profiles.create", &profiles.CreateInput{
		TenantID: input.TenantID, Document: doc, Visibility: input.Visibility})
	if err != nil {
		return nil, err
	}
	return &model.CreateProfilePayload{Profile: p}, nil
}

// UpdateProfile is the resolver for the updateProfile field.
func (r *mutationResolver) UpdateProfile(ctx context.Context, input model.UpdateProfileInput) (*model.UpdateProfilePayload, error) {
	doc, err := jsonArg(input.Document)
	if err != nil {
		return nil, err
	}
	p, err := call[profiles.Profile](ctx, r.Resolver, "profiles.update", &profiles.UpdateInput{
		TenantID: input.TenantID, ProfileID: input.ProfileID, ProfileVersion: input.ProfileVersion,
		Document: doc, Visibility: input.Visibility, ExpectedVersion: input.ExpectedVersion})
	if err != nil {
		return nil, err
	}
	return &model.UpdateProfilePayload{Profile: p}, nil
}

// DeleteProfile is the resolver for the deleteProfile field.
func (r *mutationResolver) DeleteProfile(ctx context.Context, input model.DeleteProfileInput) (*profiles.Deleted, error) {
	return call[profiles.Deleted](ctx, r.Resolver, "profiles.delete", &profiles.RefInput{
		TenantID: input.TenantID, ProfileID: input.ProfileID, ProfileVersion: input.ProfileVersion})
}

// ID is the resolver for the id field: owner tenant, profile id and version.
func (r *profileResolver) ID(ctx context.Context, obj *profiles.Profile) (string, error) {
	return relay.ID("Profile", obj.TenantID, obj.ProfileID, strconv.Itoa(obj.ProfileVersion)), nil
}

// Document is the resolver for the document field.
func (r *profileResolver) Document(ctx context.Context, obj *profiles.Profile) (any, error) {
	return largeJSON(ctx, obj.Document)
}

// Validation is the resolver for the validation field: the loaded document
// expanded in memory, no statement.
func (r *profileResolver) Validation(ctx context.Context, obj *profiles.Profile) (*model.ProfileValidation, error) {
	_, issues := profiles.Expand(obj.Document)
	out := &model.ProfileValidation{Valid: len(issues) == 0, Issues: make([]*profiles.Issue, len(issues))}
	for i := range issues {
		out.Issues[i] = &issues[i]
	}
	return out, nil
}

// Rendered is the resolver for the rendered field.
func (r *profileResolver) Rendered(ctx context.Context, obj *profiles.Profile) ([]*profiles.Rendered, error) {
	steps, issues := profiles.Expand(obj.Document)
	if len(issues) > 0 {
		return nil, nil
	}
	out := make([]*profiles.Rendered, len(steps))
	for i := range steps {
		out[i] = &steps[i]
	}
	return out, nil
}

// With is the resolver for the with field.
func (r *profileStepResolver) With(ctx context.Context, obj *profiles.Rendered) (any, error) {
	if obj.With == nil {
		return map[string]any{}, nil
	}
	return obj.With, nil
}

// Profiles is the resolver for the profiles field: what profiles.list
// pages (own, public and builtin under one keyset), batched across tenants.
func (r *tenantResolver) Profiles(ctx context.Context, obj *tenants.Tenant, first *int, after *string) (*model.ProfileConnection, error) {
	n, _, err := pageArgs(nil, first, nil) // after: the profiles' own cursors, below
	if err != nil {
		return nil, err
	}
	var cursor string
	if after != nil {
		cursor = *after
	}
	if err := checkAfter(cursor, profiles.CheckCursor); err != nil {
		return nil, err
	}
	l := loaders.From(ctx)
	loaders.PrefetchPages(ctx, l, l.TenantProfiles, obj.TenantID, "", n, cursor)
	c, err := l.TenantProfiles.Load(ctx, loaders.PageKey{Parent: obj.TenantID, First: n, After: cursor})()
	if err != nil {
		return nil, err
	}
	conn := &model.ProfileConnection{Edges: make([]*model.ProfileEdge, len(c.Items)), PageInfo: &model.PageInfo{HasNextPage: c.HasNext}, TotalCount: c.Total}
	for i := range c.Items {
		cur := profiles.CursorOf(&c.Items[i])
		conn.Edges[i] = &model.ProfileEdge{Cursor: cur, Node: &c.Items[i]}
		if i == 0 {
			conn.PageInfo.StartCursor = &cur
		}
		conn.PageInfo.EndCursor = &cur
	}
	return conn, nil
}

// Profile is the resolver for the profile field.
func (r *tenantResolver) Profile(ctx context.Context, obj *tenants.Tenant, profileID string, profileVersion *int) (*profiles.Profile, error) {
	return call[profiles.Profile](ctx, r.Resolver, "profiles.get", &profiles.RefInput{TenantID: obj.TenantID, ProfileID: profileID, ProfileVersion: profileVersion})
}

// Profile returns graph.ProfileResolver implementation.
func (r *Resolver) Profile() graph.ProfileResolver { return &profileResolver{r} }

// ProfileStep returns graph.ProfileStepResolver implementation.
func (r *Resolver) ProfileStep() graph.ProfileStepResolver { return &profileStepResolver{r} }

type profileResolver struct{ *Resolver }
type profileStepResolver struct{ *Resolver }
