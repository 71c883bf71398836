package loaders

import (
	"context"

	"github.com/bettercompute/computed/internal/events"
	"github.com/bettercompute/computed/internal/instances"
	"github.com/bettercompute/computed/internal/page"
	"github.com/bettercompute/computed/internal/store"
)

// InstanceLoaders read instances, their events, reservations and pool
// capacity. Their batch functions decide in their SQL (package instances):
// they read the caller from the request's context and return only what it
// may read, so a resolver never sees a row it must hide.
//
// Page loaders of instances and reservations take an instances.Scope's Key
// as PageKey.Parent (the parent id with the list's filters).
type InstanceLoaders struct {
	Instance           *L[string, *instances.View]
	TenantInstances    pageLoader[instances.View]
	PoolInstances      pageLoader[instances.View]
	ProjectInstances   pageLoader[instances.View]
	TenantReservations pageLoader[instances.Reservation]
	PoolReservations   pageLoader[instances.Reservation]
	Events             pageLoader[events.Event]
	Capacity           *L[string, *instances.PoolCapacity]
}

func newInstanceLoaders(q store.Q, l *Loaders) *InstanceLoaders {
	views := func(by instances.Parent) pageLoader[instances.View] {
		return pages(q, func(ctx context.Context, q store.Q, keys []string, after string, limit int) (page.Rows[instances.View], error) {
			r, err := instances.ViewPages(ctx, q, by, keys, after, limit)
			ids := make([]string, len(r.Items))
			for i := range r.Items {
				ids[i] = r.Items[i].InstanceID
			}
			l.sib.add(ids, nil)
			return r, err
		}, func(ctx context.Context, q store.Q, keys []string) (map[string]int, error) {
			return instances.CountViews(ctx, q, by, keys)
		})
	}
	reservations := func(by instances.Parent) pageLoader[instances.Reservation] {
		return pages(q, func(ctx context.Context, q store.Q, keys []string, after string, limit int) (page.Rows[instances.Reservation], error) {
			return instances.ReservationPages(ctx, q, by, keys, after, limit)
		}, func(ctx context.Context, q store.Q, keys []string) (map[string]int, error) {
			return instances.CountReservations(ctx, q, by, keys)
		})
	}
	return &InstanceLoaders{
		Instance: byID(func(ctx context.Context, ids []string) (map[string]*instances.View, error) {
			return instances.ViewsByID(ctx, q, ids)
		}),
		TenantInstances:    views(instances.OfTenant),
		PoolInstances:      views(instances.OfPool),
		ProjectInstances:   views(instances.OfProject),
		TenantReservations: reservations(instances.OfTenant),
		PoolReservations:   reservations(instances.OfPool),
		Events:             pages(q, instances.EventPages, instances.CountEvents),
		Capacity: byID(func(ctx context.Context, ids []string) (map[string]*instances.PoolCapacity, error) {
			return instances.Capacities(ctx, q, ids)
		}),
	}
}

// scopedKind names a scoped page loader and the arguments its siblings
// share.
type scopedKind struct {
	loader       any
	pool, proj   string
	state, after string
	first        int
}

// PrefetchScoped asks a scoped page loader for the same page, with the
// same filters, of every sibling of s.Parent, once per loader and
// arguments: a level of instance or reservation pages is one statement.
func PrefetchScoped[T any](ctx context.Context, l *Loaders, ld pageLoader[T], s instances.Scope, first int, after string) {
	l.sib.once(s.Parent, scopedKind{ld, s.PoolID, s.ProjectID, s.State, after, first}, func(g *group) {
		keys := make([]PageKey, len(g.ids))
		for i, id := range g.ids {
			k := s
			k.Parent = id
			keys[i] = PageKey{Parent: k.Key(), First: first, After: after}
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
func (l *Loaders) LoadInstanceFresh(ctx context.Context, id string) (*instances.View, error) {
	l.Instances.Instance.Clear(ctx, id)
	return l.Instances.Instance.Load(ctx, id)()
}
