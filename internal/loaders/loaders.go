// Package loaders holds the per-request dataloaders that batch the graph's
// SQL: every edge of a level resolves through one loader, whose batch
// function runs one statement (= ANY($1), or unnest + LATERAL for pages).
//
// The loaders are the graph's only way to rows, and they decide: each one
// is declared with the permission its resource type is read under, turns
// the request's Caller (principal and bindings, loaded once) into a scope,
// and the domain's batch SQL returns only rows visible in that scope
// (authz.Where with the type's one predicate). A row the caller may not
// read is absent (nil, or missing from a page); a failure is an error on
// the field. Connections of a tenant (its projects, pools, tokens, members,
// profiles) are decided on the tenant: a tenant the caller holds no
// permission on is PERMISSION_DENIED, as on the method surface.
package loaders

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/graph-gophers/dataloader/v7"

	"github.com/bettercompute/computed/internal/authz"
	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/events"
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

// PageKey asks for one page of a parent's connection. View, when set, is
// the tenant the parent was reached through (a pool's View): the page then
// holds what the caller reads of that tenant only (authz.Scope.Within).
type PageKey struct {
	Parent string
	First  int
	After  string
	View   string
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
	TenantProfiles *L[PageKey, *page.Conn[profiles.Profile]]
	PoolOffers     *L[PageKey, *page.Conn[pools.Offer]]
	Offer          *L[[2]string, *pools.Offer] // by pool id and the tenant offered to
	Pool           *L[string, *pools.Pool]
	Node           *L[string, *nodes.Node]
	PoolNodes      *L[PageKey, *page.Conn[nodes.Node]]
	poolJoinReqs   map[string]*L[PageKey, *page.Conn[nodes.JoinRequest]] // by state, "" every state (PoolJoinRequests)
	PoolJoinTokens *L[PageKey, *page.Conn[nodes.JoinToken]]
	PoolMachines   *L[PageKey, *page.Conn[nodes.ExpectedMachine]]
	PoolTpmKeys    *L[PageKey, *page.Conn[nodes.AllowedKey]]
	JoinRequest    *L[string, *nodes.JoinRequest]
	JoinToken      *L[string, *nodes.JoinToken]
	Snapshot       *L[string, *inventory.Snapshot]
	NodeHistory    *L[PageKey, *page.Conn[inventory.Snapshot]]
	NodeDiff       *L[inventory.DiffKey, *inventory.DiffPair]
	NodeWorkflows  *L[PageKey, *page.Conn[workflows.Workflow]]
	Workflow       *L[string, *workflows.Workflow]
	Profile        *L[profiles.Key, *profiles.Profile]
	Versions       *L[PageKey, *page.Conn[profiles.Profile]]
	Instances      *InstanceLoaders // instances.go
	Audit          *AuditLoaders    // audit.go

	q          store.Q
	callerOnce sync.Once
	caller     *authz.Caller
	callerErr  error

	sib siblings

	mu          sync.Mutex // over the loaders made on demand (poolJoinReqs) and eventCounts
	eventCounts map[string]*eventCount
}

// set is ss sorted without repeats, in a copy.
func set(ss []string) []string {
	out := slices.Clone(ss)
	slices.Sort(out)
	return slices.Compact(out)
}

type eventCount struct {
	once sync.Once
	n    int
	err  error
}

// EventCount is events.Count of f, counted once per request: the aliases
// of one query that ask the same totalCount of a tenant's events share one
// statement, as the audit trail's do through their loader. 90 aliases of
// Tenant.events { totalCount } counted a 300,000-event stream 90 times
// (10 s), and a caller's few such queries held every GraphQL slot of a
// replica until their deadline (a probe's).
func (l *Loaders) EventCount(ctx context.Context, f events.Filter) (int, error) {
	kinds := "all"
	if f.Resources != nil {
		kinds = "only:" + strings.Join(set(f.Resources), ",")
	}
	// The filters are sets: their orders and repeats name one count (a
	// probe's 90 aliases of one set in 24 orders were counted 90 times).
	key := strings.Join([]string{f.TenantID, f.ResourceID, f.PoolID, strings.Join(set(f.Types), ","), kinds}, "\x00")
	l.mu.Lock()
	c, ok := l.eventCounts[key]
	if !ok {
		if l.eventCounts == nil {
			l.eventCounts = map[string]*eventCount{}
		}
		c = &eventCount{}
		l.eventCounts[key] = c
	}
	l.mu.Unlock()
	c.once.Do(func() { c.n, c.err = events.Count(ctx, l.q, f) })
	return c.n, c.err
}

// PoolJoinRequests is the loader of pools' join requests in one state
// ("" every state), made at its first use: keys of one state and page
// share a statement.
func (l *Loaders) PoolJoinRequests(state string) *L[PageKey, *page.Conn[nodes.JoinRequest]] {
	l.mu.Lock()
	defer l.mu.Unlock()
	if ld, ok := l.poolJoinReqs[state]; ok {
		return ld
	}
	ld := pages(l, authz.JoinTokensRead, nodes.JoinRequestPagesIn(state), nodes.CountJoinRequestsIn(state))
	if l.poolJoinReqs == nil {
		l.poolJoinReqs = map[string]*L[PageKey, *page.Conn[nodes.JoinRequest]]{}
	}
	l.poolJoinReqs[state] = ld
	return ld
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

// New makes a request's loaders over q; they read for the principal of the
// context their first batch runs in (the operation's).
func New(q store.Q) *Loaders {
	l := &Loaders{q: q}
	// A tenant the caller is bound to is answered from what authentication
	// read with the token, at once and without a statement.
	l.Tenant = withKnown(byID(l, authz.TenantsRead, tenants.ByIDs), boundTenant)
	l.Project = byID(l, authz.ProjectsRead, projects.ByIDs)
	l.TenantProjects = tenantPages(l, authz.ProjectsRead, func(ctx context.Context, q store.Q, parents []string, after string, limit int) (page.Rows[projects.Project], error) {
		r, err := projects.PagesByTenant(ctx, q, parents, after, limit)
		ids := make([]string, len(r.Items))
		for i := range r.Items {
			ids[i] = r.Items[i].ProjectID
		}
		l.sib.add(ids, nil)
		return r, err
	}, projects.CountByTenant)
	l.ProjectMembers = pages(l, authz.ProjectsRead, projects.MemberPagesByProject, projects.CountMembersByProject)
	l.TenantTokens = tenantPages(l, authz.IAMRead, iam.TokenPagesByTenant, iam.CountTokensByTenant)
	l.TenantMembers = tenantPages(l, authz.IAMRead, iam.BindingPagesByTenant, iam.CountBindingsByTenant)
	l.TenantPools = tenantPages(l, authz.PoolsRead, func(ctx context.Context, q store.Q, parents []string, after string, limit int) (page.Rows[pools.Pool], error) {
		r, err := pools.PagesByTenant(ctx, q, parents, after, limit)
		for i := range r.Items {
			r.Items[i].View = r.Parents[i] // a tenant's pools are seen as that tenant sees them
		}
		l.recordPools(r)
		return r, err
	}, pools.CountByTenant)
	l.TenantProfiles = tenantPages(l, authz.ProfilesRead, func(ctx context.Context, q store.Q, parents []string, after string, limit int) (page.Rows[profiles.Profile], error) {
		r, err := profiles.PagesByTenant(ctx, q, parents, after, limit)
		l.recordProfiles(r)
		return r, err
	}, profiles.CountByTenant)
	l.PoolOffers = pages(l, authz.PoolsRead, pools.OfferPagesByPool, pools.CountOffersByPool)
	l.Offer = byKey(l, authz.PoolsRead, pools.OffersByKey)
	l.Pool = byID(l, authz.PoolsRead, pools.ByIDs)
	l.Node = byID(l, authz.NodesRead, nodes.NodesByID)
	l.PoolNodes = pages(l, authz.NodesRead, func(ctx context.Context, q store.Q, scope authz.Scope, parents []string, after string, limit int) (page.Rows[nodes.Node], error) {
		r, err := nodes.NodePagesByPool(ctx, q, scope, parents, after, limit)
		l.recordNodes(r)
		return r, err
	}, nodes.CountNodesByPool)
	l.PoolJoinTokens = pages(l, authz.JoinTokensRead, nodes.JoinTokenPagesByPool, nodes.CountJoinTokensByPool)
	l.PoolMachines = pages(l, authz.NodesRead, nodes.MachinePagesByPool, nodes.CountMachinesByPool)
	l.PoolTpmKeys = pages(l, authz.NodesRead, nodes.KeyPagesByPool, nodes.CountKeysByPool)
	l.JoinRequest = byID(l, authz.JoinTokensRead, nodes.JoinRequestsByID)
	l.JoinToken = byID(l, authz.JoinTokensRead, nodes.JoinTokensByID)
	l.Snapshot = byID(l, authz.NodesRead, inventory.ByID)
	l.NodeHistory = pages(l, authz.NodesRead, inventory.PagesByNode, inventory.CountByNode)
	l.NodeDiff = loader(func(ctx context.Context, keys []inventory.DiffKey) []*dataloader.Result[*inventory.DiffPair] {
		out := make([]*dataloader.Result[*inventory.DiffPair], len(keys))
		scope, err := l.scope(ctx, authz.NodesRead)
		pairs := make([]inventory.DiffPair, len(keys))
		if err == nil && !scope.Nothing() {
			pairs, err = inventory.Pairs(ctx, q, scope, keys)
		} else if err == nil {
			for i, k := range keys {
				pairs[i].Err = errs.E(errs.NotFound, "node %s not found", k.NodeID)
			}
		}
		for i := range keys {
			out[i] = &dataloader.Result[*inventory.DiffPair]{Error: err}
			if err == nil {
				out[i].Data = &pairs[i]
			}
		}
		return out
	})
	l.NodeWorkflows = pages(l, authz.WorkflowsRead, func(ctx context.Context, q store.Q, scope authz.Scope, parents []string, after string, limit int) (page.Rows[workflows.Workflow], error) {
		r, err := workflows.PagesByNode(ctx, q, scope, parents, after, limit)
		l.recordWorkflows(r)
		return r, err
	}, workflows.CountByNode)
	l.Workflow = byID(l, authz.WorkflowsRead, workflows.ByIDs)
	l.Profile = loader(func(ctx context.Context, keys []profiles.Key) []*dataloader.Result[*profiles.Profile] {
		out := make([]*dataloader.Result[*profiles.Profile], len(keys))
		scope, err := l.scope(ctx, authz.ProfilesRead)
		var found map[profiles.Key]*profiles.Profile
		if err == nil && !scope.Nothing() {
			found, err = profiles.ByKeys(ctx, q, scope, keys)
		}
		for i, k := range keys {
			out[i] = &dataloader.Result[*profiles.Profile]{Data: found[k], Error: err}
		}
		return out
	})
	l.Versions = pages(l, authz.ProfilesRead, profiles.VersionPages, profiles.CountVersions)
	l.Instances = newInstanceLoaders(q, l)
	l.Audit = newAuditLoaders(l)
	return l
}

// Caller is the request's caller; its bindings are loaded on first use,
// once per request.
func (l *Loaders) Caller(ctx context.Context) (*authz.Caller, error) {
	l.callerOnce.Do(func() { l.caller, l.callerErr = authz.LoadCaller(ctx, l.q, reqctx.PrincipalFrom(ctx)) })
	return l.caller, l.callerErr
}

// scope is what the caller may read under perm.
func (l *Loaders) scope(ctx context.Context, perm authz.Permission) (authz.Scope, error) {
	c, err := l.Caller(ctx)
	if err != nil {
		return authz.Scope{}, err
	}
	return c.Scope(perm), nil
}

// TenantNode is one of the tenant's nodes that the caller may read; nil
// for a node of another tenant, as for a hidden one.
func (l *Loaders) TenantNode(ctx context.Context, tenantID, nodeID string) (*nodes.Node, error) {
	n, err := l.Node.Load(ctx, nodeID)()
	if err != nil || n == nil || n.TenantID != tenantID {
		return nil, err
	}
	return n, nil
}

// TenantWorkflow is one of the tenant's workflows that the caller may
// read (a workflow's global id names its tenant); nil otherwise.
func (l *Loaders) TenantWorkflow(ctx context.Context, tenantID, workflowID string) (*workflows.Workflow, error) {
	w, err := l.Workflow.Load(ctx, workflowID)()
	if err != nil || w == nil || w.TenantID != tenantID {
		return nil, err
	}
	return w, nil
}

// VisibleTenants is the viewer's page of tenants (what tenants.list
// pages, through the same predicate) and their total.
func (l *Loaders) VisibleTenants(ctx context.Context, first int, after string) (*page.Conn[tenants.Tenant], error) {
	c, err := l.Caller(ctx)
	if err != nil {
		return nil, err
	}
	if err := authz.Decide(ctx, l.q, c.P, authz.TenantsRead, authz.Resource{Type: authz.Platform}); err != nil {
		return nil, err
	}
	scope := c.Scope(authz.TenantsRead)
	rows, err := tenants.Page(ctx, l.q, scope, after, first+1)
	if err != nil {
		return nil, err
	}
	conn := &page.Conn[tenants.Tenant]{Items: rows, HasNext: len(rows) > first}
	if conn.HasNext {
		conn.Items = rows[:first]
	}
	ids := make([]string, len(conn.Items))
	for i := range conn.Items {
		ids[i] = conn.Items[i].TenantID
	}
	l.sib.add(ids, nil)
	if conn.Total, err = tenants.Count(ctx, l.q, scope); err != nil {
		return nil, err
	}
	return conn, nil
}

// NamedTenant is the tenant a root field names: PERMISSION_DENIED without
// compute:tenants:read on it (whether or not it exists, as the contract
// says), NOT_FOUND when it does not exist.
func (l *Loaders) NamedTenant(ctx context.Context, tenantID string) (*tenants.Tenant, error) {
	c, err := l.Caller(ctx)
	if err != nil {
		return nil, err
	}
	if err := c.Check(authz.TenantsRead, tenantID); err != nil {
		return nil, err
	}
	t, err := l.Tenant.Load(ctx, tenantID)()
	if err == nil && t == nil {
		return nil, errs.E(errs.NotFound, "tenant %s not found", tenantID).With("path", "tenantId")
	}
	if err == nil {
		// A root field's tenant is a level of its own: its connections
		// (pools, projects, ...) are read at once, without waiting for the
		// batch window for siblings it has none of.
		l.sib.add([]string{tenantID}, nil)
	}
	return t, err
}

// L is a dataloader that keeps its batch function, so that the sibling
// prefetches (siblings.go) can run one batch for a whole level and prime
// the cache with it. The dataloader itself (its cache, options and batch
// state) is built on first use: a request uses a few of its loaders, and a
// subscription keeps its loaders as long as it is open.
type L[K comparable, V any] struct {
	once  sync.Once
	ld    *dataloader.Loader[K, V]
	batch dataloader.BatchFunc[K, V]
	// known answers a key without a batch when it can (the tenants the
	// caller is bound to, read with its token): no wait for the batch
	// window.
	known func(ctx context.Context, key K) (V, bool)
}

// loader is the dataloader, built on first use.
func (l *L[K, V]) loader() *dataloader.Loader[K, V] {
	l.once.Do(func() { l.ld = dataloader.NewBatchedLoader(l.batch, opts[K, V]()...) })
	return l.ld
}

// Load is the dataloader's Load, answering at once what known knows.
func (l *L[K, V]) Load(ctx context.Context, key K) dataloader.Thunk[V] {
	if l.known != nil {
		if v, ok := l.known(ctx, key); ok {
			return func() (V, error) { return v, nil }
		}
	}
	return l.loader().Load(ctx, key)
}

// Prime puts a value in the cache (the dataloader's Prime).
func (l *L[K, V]) Prime(ctx context.Context, key K, value V) dataloader.Interface[K, V] {
	return l.loader().Prime(ctx, key, value)
}

// Clear drops key from the cache (the dataloader's Clear).
func (l *L[K, V]) Clear(ctx context.Context, key K) dataloader.Interface[K, V] {
	return l.loader().Clear(ctx, key)
}

func loader[K comparable, V any](fn dataloader.BatchFunc[K, V]) *L[K, V] {
	return &L[K, V]{batch: fn}
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

// byID builds a loader from a function loading the ids visible in a scope
// (perm's); results go back in key order, nil for ids that do not exist or
// that the caller may not read.
func byID[V any](l *Loaders, perm authz.Permission, fetch func(ctx context.Context, q store.Q, scope authz.Scope, ids []string) (map[string]V, error)) *L[string, V] {
	return byKey(l, perm, fetch)
}

// byKey is byID over keys of any comparable type.
func byKey[K comparable, V any](l *Loaders, perm authz.Permission, fetch func(ctx context.Context, q store.Q, scope authz.Scope, keys []K) (map[K]V, error)) *L[K, V] {
	return loader(func(ctx context.Context, keys []K) []*dataloader.Result[V] {
		scope, err := l.scope(ctx, perm)
		var found map[K]V
		if err == nil && !scope.Nothing() {
			found, err = fetch(ctx, l.q, scope, keys)
		}
		out := make([]*dataloader.Result[V], len(keys))
		for i, k := range keys {
			out[i] = &dataloader.Result[V]{Data: found[k], Error: err}
		}
		return out
	})
}

type pageFetch[T any] func(ctx context.Context, q store.Q, scope authz.Scope, parents []string, after string, limit int) (page.Rows[T], error)
type countFetch func(ctx context.Context, q store.Q, scope authz.Scope, parents []string) (map[string]int, error)

// pages builds a connection loader whose batch SQL keeps the rows visible
// in perm's scope. Keys of one level share first/after, so a level is one
// statement; parents with an empty page are counted apart (count nil:
// the connection has no total).
func pages[T any](l *Loaders, perm authz.Permission, fetch pageFetch[T], count countFetch) *L[PageKey, *page.Conn[T]] {
	return pagesOf(l, perm, nil, fetch, count)
}

// tenantPages builds the loader of a tenant's connection: decided on the
// parent tenant (no perm on it: PERMISSION_DENIED for that key), then one
// statement for the allowed parents.
func tenantPages[T any](l *Loaders, perm authz.Permission,
	fetch func(ctx context.Context, q store.Q, parents []string, after string, limit int) (page.Rows[T], error),
	count func(ctx context.Context, q store.Q, parents []string) (map[string]int, error)) *L[PageKey, *page.Conn[T]] {
	var c countFetch
	if count != nil {
		c = func(ctx context.Context, q store.Q, _ authz.Scope, parents []string) (map[string]int, error) {
			return count(ctx, q, parents)
		}
	}
	return pagesOf(l, perm, func(parent string) string { return parent }, func(ctx context.Context, q store.Q, _ authz.Scope, parents []string, after string, limit int) (page.Rows[T], error) {
		return fetch(ctx, q, parents, after, limit)
	}, c)
}

// pagesOf builds a connection loader. gate, when not nil, names the tenant
// a key's page is decided on (the caller needs perm on it, else
// PERMISSION_DENIED for that key).
func pagesOf[T any](l *Loaders, perm authz.Permission, gate func(parent string) string, fetch pageFetch[T], count countFetch) *L[PageKey, *page.Conn[T]] {
	return loader(func(ctx context.Context, keys []PageKey) []*dataloader.Result[*page.Conn[T]] {
		out := make([]*dataloader.Result[*page.Conn[T]], len(keys))
		c, err := l.Caller(ctx)
		if err != nil {
			for i := range out {
				out[i] = &dataloader.Result[*page.Conn[T]]{Error: err}
			}
			return out
		}
		whole := c.Scope(perm)
		type args struct {
			first int
			after string
			view  string
		}
		groups := map[args][]string{}
		results := map[PageKey]*dataloader.Result[*page.Conn[T]]{}
		// A tenant's own connection is decided on that tenant: a view
		// changes nothing in it.
		norm := func(k PageKey) PageKey {
			if gate != nil {
				k.View = ""
			}
			return k
		}
		for _, k := range keys {
			k = norm(k)
			if gate != nil {
				if err := c.Check(perm, gate(k.Parent)); err != nil {
					results[k] = &dataloader.Result[*page.Conn[T]]{Error: err}
					continue
				}
			}
			a := args{k.First, k.After, k.View}
			groups[a] = append(groups[a], k.Parent)
		}
		for a, parents := range groups {
			scope := whole.Within(a.view)
			if scope.Nothing() {
				for _, p := range parents {
					results[PageKey{p, a.first, a.after, a.view}] = &dataloader.Result[*page.Conn[T]]{Data: &page.Conn[T]{Items: []T{}}}
				}
				continue
			}
			rows, err := fetch(ctx, l.q, scope, parents, a.after, a.first)
			conns := page.Group(rows, a.first)
			var missing []string
			for _, p := range parents {
				if conns[p] == nil {
					missing = append(missing, p)
				}
			}
			var totals map[string]int
			if err == nil && len(missing) > 0 && count != nil {
				totals, err = count(ctx, l.q, scope, missing)
			}
			for _, p := range parents {
				c := conns[p]
				if c == nil {
					c = &page.Conn[T]{Items: []T{}, Total: totals[p]}
				}
				results[PageKey{p, a.first, a.after, a.view}] = &dataloader.Result[*page.Conn[T]]{Data: c, Error: err}
			}
		}
		for i, k := range keys {
			out[i] = results[norm(k)]
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

type ctxKey struct{}

// holder builds an operation's loaders when a resolver first asks for them:
// a subscription whose selection loads nothing (most of them) holds none
// for as long as it is open.
type holder struct {
	once sync.Once
	q    store.Q
	l    *Loaders
}

// With returns ctx carrying the operation's loaders over q, built on first
// use.
func With(ctx context.Context, q store.Q) context.Context {
	return context.WithValue(ctx, ctxKey{}, &holder{q: q})
}

// From returns the request's loaders.
func From(ctx context.Context) *Loaders {
	h := ctx.Value(ctxKey{}).(*holder)
	h.once.Do(func() { h.l = New(h.q) })
	return h.l
}
