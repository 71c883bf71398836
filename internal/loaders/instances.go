package loaders

import (
	"context"
	"sync"

	"github.com/bettercompute/computed/internal/authz"
	"github.com/bettercompute/computed/internal/events"
	"github.com/bettercompute/computed/internal/instances"
	"github.com/bettercompute/computed/internal/instances/fit"
	"github.com/bettercompute/computed/internal/instances/graphread"
	"github.com/bettercompute/computed/internal/page"
	"github.com/bettercompute/computed/internal/store"
)

// InstanceLoaders read instances, their events, reservations and pool
// capacity. Their batch functions decide in their SQL (package instances)
// with the caller's scope, as every loader does: they return only what the
// caller may read, so a resolver never sees a row it must hide.
//
// Page loaders of instances and reservations take an graphread.Scope's Key
// as PageKey.Parent (the parent id with the list's filters).
type InstanceLoaders struct {
	Instance           *L[string, *graphread.View]
	TenantInstances    pageLoader[graphread.View]
	PoolInstances      pageLoader[graphread.View]
	ProjectInstances   pageLoader[graphread.View]
	TenantReservations pageLoader[instances.Reservation]
	PoolReservations   pageLoader[instances.Reservation]
	Events             pageLoader[events.Event]
	Capacity           *L[string, *fit.PoolCapacity]
	Reservation        *L[string, *instances.Reservation]

	refs refGroups
}

// refGroups make the byID loads of a level one batch whatever the
// scheduler does (as siblings.go does for pages): a batch of instances
// records the pools, projects and hosts they link to, and a batch of events
// the instances they are of; the first link to resolve loads the links of
// its whole batch and primes the loader's cache.
type refGroups struct {
	mu     sync.Mutex
	groups map[string]*refGroup // member (instance or event id) -> its batch
}

type refGroup struct {
	refs map[string][]string // kind -> ids to load
	mu   sync.Mutex
	once map[string]*sync.Once
}

func (r *refGroups) add(members []string, refs map[string][]string) {
	if len(members) == 0 {
		return
	}
	g := &refGroup{refs: refs, once: map[string]*sync.Once{}}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.groups == nil {
		r.groups = map[string]*refGroup{}
	}
	for _, m := range members {
		if _, seen := r.groups[m]; !seen {
			r.groups[m] = g
		}
	}
}

// prefetch runs load once for the ids of kind in member's batch.
func (r *refGroups) prefetch(member, kind string, load func(ids []string)) {
	r.mu.Lock()
	g := r.groups[member]
	r.mu.Unlock()
	if g == nil {
		return
	}
	g.mu.Lock()
	o := g.once[kind]
	if o == nil {
		o = &sync.Once{}
		g.once[kind] = o
	}
	g.mu.Unlock()
	o.Do(func() { load(g.refs[kind]) })
}

// recordViews records a batch of instances as siblings (for their pages of
// events) and their links (for pool, project and host).
func (l *Loaders) recordViews(views []graphread.View) {
	ids := make([]string, len(views))
	var pls, prjs, hosts []string
	for i := range views {
		v := &views[i]
		ids[i] = v.InstanceID
		if v.PoolVisible {
			pls = append(pls, v.PoolID)
		}
		if v.ProjectID != nil {
			prjs = append(prjs, *v.ProjectID)
		}
		if v.HostVisible && v.Host != nil {
			hosts = append(hosts, *v.Host)
		}
	}
	l.sib.add(ids, nil)
	l.Instances.refs.add(ids, map[string][]string{"pool": uniq(pls), "project": uniq(prjs), "host": uniq(hosts)})
}

// PrefetchInstanceLinks loads the pools (kind "pool"), projects ("project")
// or hosts ("host") of every instance of instanceID's batch. The pools
// loaded become siblings, so their capacity is one batch too.
func (l *Loaders) PrefetchInstanceLinks(ctx context.Context, instanceID, kind string) {
	l.Instances.refs.prefetch(instanceID, kind, func(ids []string) {
		switch kind {
		case "pool":
			l.Pool.prime(ctx, ids)
			l.sib.add(ids, nil)
		case "project":
			l.Project.prime(ctx, ids)
		case "host":
			l.Node.prime(ctx, ids)
		}
	})
}

// PrefetchEventInstances loads the instances of every event of eventID's
// batch.
func (l *Loaders) PrefetchEventInstances(ctx context.Context, eventID string) {
	l.Instances.refs.prefetch(eventID, "instance", func(ids []string) { l.Instances.Instance.prime(ctx, ids) })
}

func newInstanceLoaders(_ store.Q, l *Loaders) *InstanceLoaders {
	// An instance's host link is read under compute:nodes:read.
	hosts := func(ctx context.Context) (authz.Scope, error) { return l.scope(ctx, authz.NodesRead) }
	views := func(by graphread.Parent) pageLoader[graphread.View] {
		return pages(l, authz.InstancesRead, func(ctx context.Context, q store.Q, scope authz.Scope, keys []string, after string, limit int) (page.Rows[graphread.View], error) {
			hs, err := hosts(ctx)
			if err != nil {
				return page.Rows[graphread.View]{}, err
			}
			r, err := graphread.ViewPages(ctx, q, scope, hs, by, keys, after, limit)
			l.recordViews(r.Items)
			return r, err
		}, func(ctx context.Context, q store.Q, scope authz.Scope, keys []string) (map[string]int, error) {
			return graphread.CountViews(ctx, q, scope, by, keys)
		})
	}
	reservations := func(by graphread.Parent) pageLoader[instances.Reservation] {
		return pages(l, authz.InstancesRead, func(ctx context.Context, q store.Q, scope authz.Scope, keys []string, after string, limit int) (page.Rows[instances.Reservation], error) {
			return graphread.ReservationPages(ctx, q, scope, by, keys, after, limit)
		}, func(ctx context.Context, q store.Q, scope authz.Scope, keys []string) (map[string]int, error) {
			return graphread.CountReservations(ctx, q, scope, by, keys)
		})
	}
	return &InstanceLoaders{
		Instance: byID(l, authz.InstancesRead, func(ctx context.Context, q store.Q, scope authz.Scope, ids []string) (map[string]*graphread.View, error) {
			hs, err := hosts(ctx)
			if err != nil {
				return nil, err
			}
			return graphread.ViewsByID(ctx, q, scope, hs, ids)
		}),
		TenantInstances:    views(graphread.OfTenant),
		PoolInstances:      views(graphread.OfPool),
		ProjectInstances:   views(graphread.OfProject),
		TenantReservations: reservations(graphread.OfTenant),
		PoolReservations:   reservations(graphread.OfPool),
		Events: pages(l, authz.InstancesRead, func(ctx context.Context, q store.Q, scope authz.Scope, ids []string, after string, limit int) (page.Rows[events.Event], error) {
			r, err := graphread.EventPages(ctx, q, scope, ids, after, limit)
			evs, insts := make([]string, len(r.Items)), make([]string, len(r.Items))
			for i := range r.Items {
				evs[i], insts[i] = r.Items[i].EventID, r.Items[i].ResourceID
			}
			l.Instances.refs.add(evs, map[string][]string{"instance": uniq(insts)})
			return r, err
		}, graphread.CountEvents),
		Capacity:    byID(l, authz.PoolsRead, graphread.Capacities),
		Reservation: byID(l, authz.InstancesRead, graphread.ReservationsByID),
	}
}

// scopedKind names a scoped page loader and the arguments its siblings
// share.
type scopedKind struct {
	loader       any
	pool, proj   string
	state, after string
	first        int
	view         string
}

// PrefetchScoped asks a scoped page loader for the same page, with the
// same filters, of every sibling of s.Parent, once per loader and
// arguments: a level of instance or reservation pages is one statement.
func PrefetchScoped[T any](ctx context.Context, l *Loaders, ld pageLoader[T], s graphread.Scope, view string, first int, after string) {
	l.sib.once(s.Parent, scopedKind{ld, s.PoolID, s.ProjectID, s.State, after, first, view}, func(g *group) {
		keys := make([]PageKey, len(g.ids))
		for i, id := range g.ids {
			k := s
			k.Parent = id
			keys[i] = PageKey{Parent: k.Key(), First: first, After: after, View: view}
		}
		ld.prime(ctx, keys)
	})
}

// PrefetchCapacity loads the capacity of every sibling of pool.
func (l *Loaders) PrefetchCapacity(ctx context.Context, poolID string) {
	l.sib.once(poolID, "capacity", func(g *group) { l.Instances.Capacity.prime(ctx, g.ids) })
}

// LoadInstanceFresh reads an instance past the request's cache: a
// subscription's loaders live as long as it does, and each event must show
// the instance as it is when the event is sent.
func (l *Loaders) LoadInstanceFresh(ctx context.Context, id string) (*graphread.View, error) {
	l.Instances.Instance.Clear(ctx, id)
	return l.Instances.Instance.Load(ctx, id)()
}

// Fresh reads a value past the request's cache: a subscription's loaders
// live as long as it does, and each event shows its resource as it is when
// the event is sent.
func Fresh[V any](ctx context.Context, l *L[string, V], id string) (V, error) {
	l.Clear(ctx, id)
	return l.Load(ctx, id)()
}
