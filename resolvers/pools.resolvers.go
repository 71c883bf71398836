package resolvers

import (
	"context"

	"github.com/bettercompute/computed/graph"
	"github.com/bettercompute/computed/graph/model"
	"github.com/bettercompute/computed/internal/loaders"
	"github.com/bettercompute/computed/internal/pools"
	"github.com/bettercompute/computed/internal/relay"
	"github.com/bettercompute/computed/internal/tenants"
)

// CreatePool is the resolver for the createPool field.
func (r *mutationResolver) CreatePool(ctx context.Context, input model.CreatePoolInput) (*model.CreatePoolPayload, error) {
	policy, err := jsonArg(input.Policy)
	if err != nil {
		return nil, err
	}
	p, err := call[pools.Pool](ctx, r.Resolver, "pools.create", &pools.CreateInput{
		TenantID: input.TenantID, Name: input.Name, Site: input.Site, GPUModel: input.GpuModel,
		SharingMode: input.SharingMode, Kind: input.Kind, Provider: input.Provider,
		ProviderAccount: input.ProviderAccount, Policy: policy})
	if err != nil {
		return nil, err
	}
	return &model.CreatePoolPayload{Pool: p}, nil
}

// OfferPool is the resolver for the offerPool field.
func (r *mutationResolver) OfferPool(ctx context.Context, input model.OfferPoolInput) (*model.OfferPoolPayload, error) {
	in := &pools.OfferInput{TenantID: input.TenantID, PoolID: input.PoolID, ToTenantID: input.ToTenantID}
	if input.Quota != nil {
		in.Quota = pools.Quota{GPUs: input.Quota.Gpus, Instances: input.Quota.Instances}
	}
	o, err := call[pools.Offer](ctx, r.Resolver, "pools.offer", in)
	if err != nil {
		return nil, err
	}
	return &model.OfferPoolPayload{Offer: o}, nil
}

// ID is the resolver for the id field.
func (r *poolResolver) ID(ctx context.Context, obj *pools.Pool) (string, error) {
	return relay.ID("Pool", obj.PoolID), nil
}

// Policy is the resolver for the policy field.
func (r *poolResolver) Policy(ctx context.Context, obj *pools.Pool) (any, error) {
	if len(obj.Policy) == 0 {
		return map[string]any{}, nil
	}
	return largeJSON(ctx, obj.Policy)
}

// Offers is the resolver for the offers field: the owner's members see
// them; a tenant the pool is offered to sees none (the loader's rule).
func (r *poolResolver) Offers(ctx context.Context, obj *pools.Pool, first *int, after *string) (*model.PoolOfferConnection, error) {
	edges, info, total, err := loadConnIn(ctx, pools.OfferCursors, loaders.From(ctx).PoolOffers, obj.PoolID, obj.View, first, after,
		func(o *pools.Offer) string { return o.ToTenantID },
		func(cur string, o *pools.Offer) *model.PoolOfferEdge {
			return &model.PoolOfferEdge{Cursor: cur, Node: o}
		})
	if err != nil {
		return nil, err
	}
	return &model.PoolOfferConnection{Edges: edges, PageInfo: info, TotalCount: total}, nil
}

// Pools is the resolver for the pools field.
func (r *tenantResolver) Pools(ctx context.Context, obj *tenants.Tenant, first *int, after *string) (*model.PoolConnection, error) {
	edges, info, total, err := loadConn(ctx, pools.Cursors, loaders.From(ctx).TenantPools, obj.TenantID, first, after,
		func(p *pools.Pool) string { return p.PoolID },
		func(cur string, p *pools.Pool) *model.PoolEdge { return &model.PoolEdge{Cursor: cur, Node: p} })
	if err != nil {
		return nil, err
	}
	return &model.PoolConnection{Edges: edges, PageInfo: info, TotalCount: total}, nil
}

// Pool returns graph.PoolResolver implementation.
func (r *Resolver) Pool() graph.PoolResolver { return &poolResolver{r} }

type poolResolver struct{ *Resolver }
