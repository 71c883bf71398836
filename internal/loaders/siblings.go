package loaders

import (
	"context"
	"sync"

	"github.com/bettercompute/computed/internal/nodes"
	"github.com/bettercompute/computed/internal/page"
	"github.com/bettercompute/computed/internal/pools"
	"github.com/bettercompute/computed/internal/profiles"
	"github.com/bettercompute/computed/internal/workflows"
)

// Siblings makes a level one batch whatever the scheduler does. A loader's
// wait window batches the keys that arrive within it; with thousands of
// resolvers on two cores, the last ones can miss the window and the level
// splits into several statements. So a batch that returns parents (pools,
// nodes) records them as siblings, and the first child field to resolve
// asks for the children of every sibling in one LoadMany; the others then
// find their keys in the loader's cache. The children of a level are one
// statement, deterministically.
type siblings struct {
	mu     sync.Mutex
	groups map[string]*group // parent id -> the batch it came in
}

type group struct {
	ids     []string
	latest  []string       // for nodes: their latest snapshot ids
	keys    map[string]any // kind -> the keys ([]K) of the siblings' by-id children of that kind
	mu      sync.Mutex
	fetched map[any]*sync.Once
}

func (s *siblings) add(ids, latest []string) { s.addKeys(ids, latest, nil) }

// addKeys records siblings and, per kind, the keys of the objects they
// point to (a node's pool, a workflow's node), for PrefetchKeys.
func (s *siblings) addKeys(ids, latest []string, keys map[string]any) {
	if len(ids) == 0 {
		return
	}
	g := &group{ids: ids, latest: latest, keys: keys, fetched: map[any]*sync.Once{}}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.groups == nil {
		s.groups = map[string]*group{}
	}
	for _, id := range ids {
		if _, seen := s.groups[id]; !seen {
			s.groups[id] = g
		}
	}
}

// once runs fetch for the parent's group the first time kind is asked
// for any of its members; concurrent callers wait for it to finish, so
// their loads then hit the primed cache.
func (s *siblings) once(parent string, kind any, fetch func(g *group)) {
	s.mu.Lock()
	g := s.groups[parent]
	s.mu.Unlock()
	if g == nil {
		return
	}
	g.mu.Lock()
	o := g.fetched[kind]
	if o == nil {
		o = &sync.Once{}
		g.fetched[kind] = o
	}
	g.mu.Unlock()
	o.Do(func() { fetch(g) })
}

// pageKind names a page loader and the arguments its siblings share.
type pageKind struct {
	loader any
	first  int
	after  string
	view   string
}

// recordPools groups pools by owner: a pool's children (nodes, join
// requests) are the owner's view, so siblings of another owner (pools
// offered to the caller) are not fetched along.
func (l *Loaders) recordPools(r page.Rows[pools.Pool]) {
	byOwner := map[string][]string{}
	for i := range r.Items {
		byOwner[r.Items[i].TenantID] = append(byOwner[r.Items[i].TenantID], r.Items[i].PoolID)
	}
	for _, ids := range byOwner {
		l.sib.add(ids, nil)
	}
}

func (l *Loaders) recordNodes(r page.Rows[nodes.Node]) {
	ids := make([]string, len(r.Items))
	var latest []string
	poolIDs := make([]string, len(r.Items))
	for i := range r.Items {
		ids[i], poolIDs[i] = r.Items[i].NodeID, r.Items[i].PoolID
		if s := r.Items[i].LatestSnapshotID; s != nil {
			latest = append(latest, *s)
		}
	}
	l.sib.addKeys(ids, latest, map[string]any{KindPool: uniq(poolIDs)})
}

func (l *Loaders) recordWorkflows(r page.Rows[workflows.Workflow]) {
	ids := make([]string, len(r.Items))
	nodeIDs := make([]string, len(r.Items))
	profileKeys := make([]profiles.Key, len(r.Items))
	for i, w := range r.Items {
		ids[i], nodeIDs[i] = w.WorkflowID, w.NodeID
		profileKeys[i] = profiles.Key{TenantID: w.ProfileTenantID, ProfileID: w.ProfileID, ProfileVersion: w.ProfileVersion}
	}
	l.sib.addKeys(ids, nil, map[string]any{KindNode: uniq(nodeIDs), KindProfile: uniq(profileKeys)})
}

// recordProfiles makes the profiles of a Tenant.profiles level siblings,
// under their versions' parent keys.
func (l *Loaders) recordProfiles(r page.Rows[profiles.Profile]) {
	keys := make([]string, len(r.Items))
	for i := range r.Items {
		keys[i] = profiles.VersionsParent(r.Items[i].TenantID, r.Items[i].ProfileID)
	}
	l.sib.add(uniq(keys), nil)
}

// Kinds of by-id children PrefetchKeys loads for a level's siblings.
const (
	KindPool    = "pool"
	KindNode    = "node"
	KindProfile = "profile"
)

// PrefetchKeys loads, once, the kind of by-id child of every sibling of
// parent through ld (a node's pool, a workflow's node or profile), so the
// level is one batch whatever the scheduler does.
func PrefetchKeys[K comparable, V any](ctx context.Context, l *Loaders, ld *L[K, V], parent, kind string) {
	l.sib.once(parent, kind, func(g *group) {
		if keys, ok := g.keys[kind].([]K); ok {
			ld.prime(ctx, keys)
		}
	})
}

func uniq[K comparable](keys []K) []K {
	seen := make(map[K]bool, len(keys))
	out := keys[:0:0]
	for _, k := range keys {
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	return out
}

// PrefetchPages asks a page loader for the same page of every sibling of
// parent, once per loader and arguments (view is PageKey's).
func PrefetchPages[T any](ctx context.Context, l *Loaders, ld pageLoader[T], parent, view string, first int, after string) {
	l.sib.once(parent, pageKind{ld, first, after, view}, func(g *group) {
		keys := make([]PageKey, len(g.ids))
		for i, id := range g.ids {
			keys[i] = PageKey{Parent: id, First: first, After: after, View: view}
		}
		ld.prime(ctx, keys)
	})
}

// PrefetchSnapshots loads the latest snapshot of every sibling of node.
func (l *Loaders) PrefetchSnapshots(ctx context.Context, nodeID string) {
	l.sib.once(nodeID, "snapshots", func(g *group) { l.Snapshot.prime(ctx, g.latest) })
}

// PrefetchDiffs loads the same diff of every sibling of node.
func (l *Loaders) PrefetchDiffs(ctx context.Context, k DiffKeyArgs) {
	l.sib.once(k.NodeID, diffKind{k.From, k.To}, func(g *group) {
		keys := make([]DiffKeyArgs, len(g.ids))
		for i, id := range g.ids {
			keys[i] = DiffKeyArgs{NodeID: id, From: k.From, To: k.To}
		}
		l.NodeDiff.prime(ctx, keys)
	})
}

type diffKind struct{ from, to string }

// Siblings records parents that one resolver returned together (the
// tenants of viewer.tenants), so their children batch as one level.
func (l *Loaders) Siblings(ids []string) { l.sib.add(ids, nil) }
