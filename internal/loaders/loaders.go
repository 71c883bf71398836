// Package loaders holds the per-request dataloaders that batch the graph's
// SQL: every edge of a level resolves through one loader, whose batch
// function runs one statement (= ANY($1), or unnest + LATERAL for pages).
package loaders

import (
	"context"
	"time"

	"github.com/graph-gophers/dataloader/v7"

	"github.com/bettercompute/computed/internal/iam"
	"github.com/bettercompute/computed/internal/inventory"
	"github.com/bettercompute/computed/internal/nodes"
	"github.com/bettercompute/computed/internal/page"
	"github.com/bettercompute/computed/internal/pools"
	"github.com/bettercompute/computed/internal/profiles"
	"github.com/bettercompute/computed/internal/projects"
	"github.com/bettercompute/computed/internal/reqctx"
	"github.com/bettercompute/computed/internal/store"
	"github.com/bettercompute/computed/internal/tenants"
	"github.com/bettercompute/computed/internal/workflows"
)

// PageKey asks for one page of a parent's connection.
type PageKey struct {
	Parent string
	First  int
	After  string
}

// Loaders is one request's set.
type Loaders struct {
	Tenant         *L[string, *tenants.Tenant]
	Project        *L[string, *projects.Project]
	TenantProjects *L[PageKey, *page.Conn[projects.Project]]
	ProjectMembers *L[PageKey, *page.Conn[projects.Member]]
	TenantTokens   *L[PageKey, *page.Conn[iam.Token]]
	TenantMembers  *L[PageKey, *page.Conn[iam.Binding]]
	TenantPools    *L[PageKey, *page.Conn[pools.Pool]]
	PoolOffers     *L[string, []pools.Offer]
	Pool           *L[string, *pools.Pool]
	Node           *L[string, *nodes.Node]
	PoolNodes      *L[PageKey, *page.Conn[nodes.Node]]
	PoolJoinReqs   *L[PageKey, *page.Conn[nodes.JoinRequest]]
	Snapshot       *L[string, *inventory.Snapshot]
	NodeHistory    *L[PageKey, *page.Conn[inventory.Snapshot]]
	NodeDiff       *L[inventory.DiffKey, *inventory.DiffPair]
	NodeWorkflows  *L[PageKey, *page.Conn[workflows.Workflow]]
	Profile        *L[profiles.Key, *profiles.Profile]
	Versions       *L[PageKey, *page.Conn[profiles.Profile]]

	sib siblings
}

type pageLoader[T any] = *L[PageKey, *page.Conn[T]]

// DiffKeyArgs names one node's diff.
type DiffKeyArgs = inventory.DiffKey

// wait is how long a loader collects keys before it runs its batch: long
// enough for every resolver of a level to ask, on a loaded 2-core machine.
const wait = 2 * time.Millisecond

// capacity bounds a batch; it is above the largest level a query may ask
// for (the complexity limit bounds the product of page sizes), so a level
// is one statement.
const capacity = 5000

// New makes a request's loaders over q.
func New(q store.Q) *Loaders {
	l := &Loaders{}
	*l = Loaders{
		Tenant: withKnown(byID(func(ctx context.Context, ids []string) (map[string]*tenants.Tenant, error) {
			return tenantsByID(ctx, q, ids)
		}), boundTenant),
		Project: byID(func(ctx context.Context, ids []string) (map[string]*projects.Project, error) {
			return projects.ByIDs(ctx, q, ids)
		}),
		TenantProjects: pages(q, func(ctx context.Context, q store.Q, parents []string, after string, limit int) (page.Rows[projects.Project], error) {
			r, err := projects.PagesByTenant(ctx, q, parents, after, limit)
			ids := make([]string, len(r.Items))
			for i := range r.Items {
				ids[i] = r.Items[i].ProjectID
			}
			l.sib.add(ids, nil)
			return r, err
		}, projects.CountByTenant),
		ProjectMembers: pages(q, projects.MemberPagesByProject, projects.CountMembersByProject),
		TenantTokens:   pages(q, iam.TokenPagesByTenant, iam.CountTokensByTenant),
		TenantMembers:  pages(q, iam.BindingPagesByTenant, iam.CountBindingsByTenant),
		TenantPools: pages(q, func(ctx context.Context, q store.Q, parents []string, after string, limit int) (page.Rows[pools.Pool], error) {
			r, err := pools.PagesByTenant(ctx, q, parents, after, limit)
			l.recordPools(r)
			return r, err
		}, pools.CountByTenant),
		PoolOffers: byID(func(ctx context.Context, ids []string) (map[string][]pools.Offer, error) {
			return pools.OffersByPool(ctx, q, ids)
		}),
		Pool: byID(func(ctx context.Context, ids []string) (map[string]*pools.Pool, error) {
			return pools.ByIDs(ctx, q, ids)
		}),
		Node: byID(func(ctx context.Context, ids []string) (map[string]*nodes.Node, error) {
			return nodes.NodesByID(ctx, q, ids)
		}),
		PoolNodes: pages(q, func(ctx context.Context, q store.Q, parents []string, after string, limit int) (page.Rows[nodes.Node], error) {
			r, err := nodes.NodePagesByPool(ctx, q, parents, after, limit)
			l.recordNodes(r)
			return r, err
		}, nodes.CountNodesByPool),
		PoolJoinReqs: pages(q, nodes.JoinRequestPagesByPool, nodes.CountJoinRequestsByPool),
		Snapshot: byID(func(ctx context.Context, ids []string) (map[string]*inventory.Snapshot, error) {
			return inventory.ByID(ctx, q, ids)
		}),
		NodeHistory: pages(q, inventory.PagesByNode, inventory.CountByNode),
		NodeDiff: loader(func(ctx context.Context, keys []inventory.DiffKey) []*dataloader.Result[*inventory.DiffPair] {
			pairs, err := inventory.Pairs(ctx, q, keys)
			out := make([]*dataloader.Result[*inventory.DiffPair], len(keys))
			for i := range keys {
				out[i] = &dataloader.Result[*inventory.DiffPair]{Error: err}
				if err == nil {
					out[i].Data = &pairs[i]
				}
			}
			return out
		}),
		NodeWorkflows: pages(q, workflows.PagesByNode, workflows.CountByNode),
		Profile: loader(func(ctx context.Context, keys []profiles.Key) []*dataloader.Result[*profiles.Profile] {
			found, err := profiles.ByKeys(ctx, q, keys)
			out := make([]*dataloader.Result[*profiles.Profile], len(keys))
			for i, k := range keys {
				out[i] = &dataloader.Result[*profiles.Profile]{Data: found[k], Error: err}
			}
			return out
		}),
		Versions: pages(q, profiles.VersionPages, profiles.CountVersions),
	}
	return l
}

// L is a dataloader that keeps its batch function, so that the sibling
// prefetches (siblings.go) can run one batch for a whole level and prime
// the cache with it.
type L[K comparable, V any] struct {
	*dataloader.Loader[K, V]
	batch dataloader.BatchFunc[K, V]
	// known answers a key without a batch when it can (the tenants the
	// caller is bound to, read with its token): no wait for the batch
	// window.
	known func(ctx context.Context, key K) (V, bool)
}

// Load is the dataloader's Load, answering at once what known knows.
func (l *L[K, V]) Load(ctx context.Context, key K) dataloader.Thunk[V] {
	if l.known != nil {
		if v, ok := l.known(ctx, key); ok {
			return func() (V, error) { return v, nil }
		}
	}
	return l.Loader.Load(ctx, key)
}

func loader[K comparable, V any](fn dataloader.BatchFunc[K, V]) *L[K, V] {
	return &L[K, V]{Loader: dataloader.NewBatchedLoader(fn, opts[K, V]()...), batch: fn}
}

// prime runs one batch for keys and puts the results in the cache.
func (l *L[K, V]) prime(ctx context.Context, keys []K) {
	if len(keys) == 0 {
		return
	}
	res := l.batch(ctx, keys)
	for i, k := range keys {
		if i < len(res) && res[i] != nil && res[i].Error == nil {
			l.Prime(ctx, k, res[i].Data)
		}
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
func byID[V any](fetch func(ctx context.Context, ids []string) (map[string]V, error)) *L[string, V] {
	return loader(func(ctx context.Context, keys []string) []*dataloader.Result[V] {
		found, err := fetch(ctx, keys)
		out := make([]*dataloader.Result[V], len(keys))
		for i, k := range keys {
			out[i] = &dataloader.Result[V]{Data: found[k], Error: err}
		}
		return out
	})
}

type pageFetch[T any] func(ctx context.Context, q store.Q, parents []string, after string, limit int) (page.Rows[T], error)
type countFetch func(ctx context.Context, q store.Q, parents []string) (map[string]int, error)

// pages builds a connection loader. Keys of one level share first/after, so
// a level is one statement; parents with an empty page are counted apart.
func pages[T any](q store.Q, fetch pageFetch[T], count countFetch) *L[PageKey, *page.Conn[T]] {
	return loader(func(ctx context.Context, keys []PageKey) []*dataloader.Result[*page.Conn[T]] {
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
	})
}

func withKnown[K comparable, V any](l *L[K, V], known func(ctx context.Context, key K) (V, bool)) *L[K, V] {
	l.known = known
	return l
}

// boundTenant is a tenant the caller is bound to, as authentication read it.
func boundTenant(ctx context.Context, id string) (*tenants.Tenant, bool) {
	t, ok := reqctx.PrincipalFrom(ctx).BoundTenant(id)
	if !ok {
		return nil, false
	}
	return &tenants.Tenant{TenantID: id, Name: t.Name, CreatedAt: t.CreatedAt}, true
}

// tenantsByID loads tenants, taking those the caller is bound to from what
// authentication read with its token in this request (no statement), and
// the others from the database.
func tenantsByID(ctx context.Context, q store.Q, ids []string) (map[string]*tenants.Tenant, error) {
	p := reqctx.PrincipalFrom(ctx)
	out := make(map[string]*tenants.Tenant, len(ids))
	var missing []string
	for _, id := range ids {
		if t, ok := p.BoundTenant(id); ok {
			out[id] = &tenants.Tenant{TenantID: id, Name: t.Name, CreatedAt: t.CreatedAt}
		} else {
			missing = append(missing, id)
		}
	}
	if len(missing) == 0 {
		return out, nil
	}
	found, err := tenants.ByIDs(ctx, q, missing)
	for id, t := range found {
		out[id] = t
	}
	return out, err
}

type ctxKey struct{}

// With returns ctx carrying the loaders.
func With(ctx context.Context, l *Loaders) context.Context {
	return context.WithValue(ctx, ctxKey{}, l)
}

// From returns the request's loaders.
func From(ctx context.Context) *Loaders { return ctx.Value(ctxKey{}).(*Loaders) }
