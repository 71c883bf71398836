// Package loaders holds the per-request dataloaders that batch the graph's
// SQL: every edge of a level resolves through one loader, whose batch
// function runs one statement (= ANY($1), or unnest + LATERAL for pages).
package loaders

import (
	"context"
	"time"

	"github.com/graph-gophers/dataloader/v7"

	"github.com/bettercompute/computed/internal/iam"
	"github.com/bettercompute/computed/internal/page"
	"github.com/bettercompute/computed/internal/pools"
	"github.com/bettercompute/computed/internal/projects"
	"github.com/bettercompute/computed/internal/store"
	"github.com/bettercompute/computed/internal/tenants"
)

// PageKey asks for one page of a parent's connection.
type PageKey struct {
	Parent string
	First  int
	After  string
}

// Loaders is one request's set.
type Loaders struct {
	Tenant         *dataloader.Loader[string, *tenants.Tenant]
	Project        *dataloader.Loader[string, *projects.Project]
	TenantProjects *dataloader.Loader[PageKey, *page.Conn[projects.Project]]
	ProjectMembers *dataloader.Loader[PageKey, *page.Conn[projects.Member]]
	TenantTokens   *dataloader.Loader[PageKey, *page.Conn[iam.Token]]
	TenantMembers  *dataloader.Loader[PageKey, *page.Conn[iam.Binding]]
	TenantPools    *dataloader.Loader[PageKey, *page.Conn[pools.Pool]]
	PoolOffers     *dataloader.Loader[string, []pools.Offer]
}

// wait is how long a loader collects keys before it runs its batch: long
// enough for every resolver of a level to ask, on a loaded 2-core machine.
const wait = 2 * time.Millisecond

// capacity bounds a batch; it is above the largest level a query may ask
// for (the complexity limit bounds the product of page sizes), so a level
// is one statement.
const capacity = 5000

// New makes a request's loaders over q.
func New(q store.Q) *Loaders {
	return &Loaders{
		Tenant: byID(func(ctx context.Context, ids []string) (map[string]*tenants.Tenant, error) {
			return tenants.ByIDs(ctx, q, ids)
		}),
		Project: byID(func(ctx context.Context, ids []string) (map[string]*projects.Project, error) {
			return projects.ByIDs(ctx, q, ids)
		}),
		TenantProjects: pages(q, projects.PagesByTenant, projects.CountByTenant),
		ProjectMembers: pages(q, projects.MemberPagesByProject, projects.CountMembersByProject),
		TenantTokens:   pages(q, iam.TokenPagesByTenant, iam.CountTokensByTenant),
		TenantMembers:  pages(q, iam.BindingPagesByTenant, iam.CountBindingsByTenant),
		TenantPools:    pages(q, pools.PagesByTenant, pools.CountByTenant),
		PoolOffers: byID(func(ctx context.Context, ids []string) (map[string][]pools.Offer, error) {
			return pools.OffersByPool(ctx, q, ids)
		}),
	}
}

func opts[K comparable, V any]() []dataloader.Option[K, V] {
	return []dataloader.Option[K, V]{
		dataloader.WithWait[K, V](wait),
		dataloader.WithBatchCapacity[K, V](capacity),
	}
}

// byID builds a loader from a function loading many ids; results go back in
// key order, nil for ids that do not exist.
func byID[V any](fetch func(ctx context.Context, ids []string) (map[string]V, error)) *dataloader.Loader[string, V] {
	return dataloader.NewBatchedLoader(func(ctx context.Context, keys []string) []*dataloader.Result[V] {
		found, err := fetch(ctx, keys)
		out := make([]*dataloader.Result[V], len(keys))
		for i, k := range keys {
			out[i] = &dataloader.Result[V]{Data: found[k], Error: err}
		}
		return out
	}, opts[string, V]()...)
}

type pageFetch[T any] func(ctx context.Context, q store.Q, parents []string, after string, limit int) (page.Rows[T], error)
type countFetch func(ctx context.Context, q store.Q, parents []string) (map[string]int, error)

// pages builds a connection loader. Keys of one level share first/after, so
// a level is one statement; parents with an empty page are counted apart.
func pages[T any](q store.Q, fetch pageFetch[T], count countFetch) *dataloader.Loader[PageKey, *page.Conn[T]] {
	return dataloader.NewBatchedLoader(func(ctx context.Context, keys []PageKey) []*dataloader.Result[*page.Conn[T]] {
		type args struct {
			first int
			after string
		}
		groups := map[args][]string{}
		for _, k := range keys {
			a := args{k.First, k.After}
			groups[a] = append(groups[a], k.Parent)
		}
		results := map[PageKey]*dataloader.Result[*page.Conn[T]]{}
		for a, parents := range groups {
			rows, err := fetch(ctx, q, parents, a.after, a.first)
			conns := page.Group(rows, a.first)
			var missing []string
			for _, p := range parents {
				if conns[p] == nil {
					missing = append(missing, p)
				}
			}
			var totals map[string]int
			if err == nil && len(missing) > 0 {
				totals, err = count(ctx, q, missing)
			}
			for _, p := range parents {
				c := conns[p]
				if c == nil {
					c = &page.Conn[T]{Items: []T{}, Total: totals[p]}
				}
				results[PageKey{p, a.first, a.after}] = &dataloader.Result[*page.Conn[T]]{Data: c, Error: err}
			}
		}
		out := make([]*dataloader.Result[*page.Conn[T]], len(keys))
		for i, k := range keys {
			out[i] = results[k]
		}
		return out
	}, opts[PageKey, *page.Conn[T]]()...)
}

type ctxKey struct{}

// With returns ctx carrying the loaders.
func With(ctx context.Context, l *Loaders) context.Context {
	return context.WithValue(ctx, ctxKey{}, l)
}

// From returns the request's loaders.
func From(ctx context.Context) *Loaders { return ctx.Value(ctxKey{}).(*Loaders) }
