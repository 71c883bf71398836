package loaders_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/loaders"
	"github.com/bettercompute/computed/internal/nodes"
	"github.com/bettercompute/computed/internal/pools"
	"github.com/bettercompute/computed/internal/projects"
	"github.com/bettercompute/computed/internal/reqctx"
	"github.com/bettercompute/computed/internal/store"
	"github.com/bettercompute/computed/internal/testkit"
	"github.com/bettercompute/computed/internal/testkit/fixture"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// env: acme owns pools (one offered to beta), a node and a project; gamma
// holds nothing of them.
type env struct {
	*fixture.F
	acme, beta, gamma fixture.Tenant
	pools             []string // acme's; pools[0] is offered to beta
	node, project     string
}

func newEnv(t *testing.T) *env {
	t.Parallel()
	f := fixture.New(t)
	e := &env{F: f, acme: f.Tenant("acme"), beta: f.Tenant("beta"), gamma: f.Tenant("gamma")}
	for i := 0; i < 4; i++ {
		p := fixture.Must(pools.Create(f.Ctx, f.DB, &pools.CreateInput{TenantID: "acme", Name: fmt.Sprint("p", i), Site: "fra1",
			GPUModel: "H100-SXM5-80GB", SharingMode: "exclusive", Kind: "bare-metal"}))
		e.pools = append(e.pools, p.PoolID)
	}
	fixture.Must(pools.MakeOffer(f.Ctx, f.DB, &pools.OfferInput{TenantID: "acme", PoolID: e.pools[0], ToTenantID: "beta", Quota: pools.Quota{GPUs: 1, Instances: 1}}))
	tok := fixture.Must(fixture.Call[nodes.CreatedJoinToken](f, e.acme.Admin, "joinTokens.create", map[string]any{"tenantId": "acme", "poolId": e.pools[0]}))
	e.node = fixture.Must(fixture.Call[nodes.JoinResult](f, nil, "nodes.join", testkit.NewMachine(t).JoinBody(tok.Secret))).NodeID
	e.project = fixture.Must(fixture.Call[projects.Project](f, e.acme.Member, "projects.create", map[string]any{"tenantId": "acme", "name": "web"})).ProjectID
	return e
}

// request is one request's loaders for p, with a statement counter.
func (e *env) request(p *reqctx.Principal) (context.Context, *loaders.Loaders, *store.Counter) {
	var c store.Counter
	return store.WithCounter(e.As(p), &c), loaders.New(e.DB), &c
}

// Loaders return only what the caller may read: another tenant's rows are
// absent (nil, no error), a pool offered to the caller is present, a node
// of that pool is not.
func TestLoadersReadWhatTheCallerMayRead(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct {
		who                 string
		p                   *reqctx.Principal
		pool, node, project bool
	}{
		{"acme's viewer", e.acme.Viewer, true, true, true},
		{"beta's admin (offered the pool)", e.beta.Admin, true, false, false},
		{"gamma's admin", e.gamma.Admin, false, false, false},
		{"the operator", e.Operator(), true, true, true},
	} {
		ctx, l, _ := e.request(c.p)
		pool, err := l.Pool.Load(ctx, e.pools[0])()
		if err != nil || (pool != nil) != c.pool {
			t.Fatalf("%s: pool %v, %v", c.who, pool, err)
		}
		n, err := l.Node.Load(ctx, e.node)()
		if err != nil || (n != nil) != c.node {
			t.Fatalf("%s: node %v, %v", c.who, n, err)
		}
		pr, err := l.Project.Load(ctx, e.project)()
		if err != nil || (pr != nil) != c.project {
			t.Fatalf("%s: project %v, %v", c.who, pr, err)
		}
	}
	// TenantNode: a node of another tenant is nil, like a hidden one.
	ctx, l, _ := e.request(e.acme.Viewer)
	if n, err := l.TenantNode(ctx, "beta", e.node); n != nil || err != nil {
		t.Fatalf("a node under another tenant's id: %v %v", n, err)
	}
}

// A node credential reads nothing through the graph, without a statement.
func TestANodeReadsNothing(t *testing.T) {
	e := newEnv(t)
	ctx, l, c := e.request(&reqctx.Principal{ID: "p", Kind: "node", NodeID: e.node})
	before := c.N()
	if n, err := l.Node.Load(ctx, e.node)(); n != nil || err != nil {
		t.Fatalf("its own node through the graph: %v %v", n, err)
	}
	if p, err := l.Pool.Load(ctx, e.pools[0])(); p != nil || err != nil {
		t.Fatalf("a pool: %v %v", p, err)
	}
	if c.N() != before {
		t.Fatalf("%d statements for a node's reads", c.N()-before)
	}
}

// A level of loads (every pool of a list asked at once) is one statement,
// and the caller's bindings are read once per request.
func TestOneStatementPerLevel(t *testing.T) {
	e := newEnv(t)
	ctx, l, c := e.request(e.acme.Viewer)
	if _, err := l.Caller(ctx); err != nil {
		t.Fatal(err)
	}
	before := c.N()
	// As a level's resolvers do: every load asked for, then every result
	// awaited (each pool three times).
	var thunks []func() (*pools.Pool, error)
	for i := 0; i < len(e.pools)*3; i++ {
		thunks = append(thunks, l.Pool.Load(ctx, e.pools[i%len(e.pools)]))
	}
	for i, th := range thunks {
		if p, err := th(); err != nil || p == nil || p.PoolID != e.pools[i%len(e.pools)] {
			t.Fatalf("load %d: %+v %v", i, p, err)
		}
	}
	if n := c.N() - before; n != 1 {
		t.Fatalf("%d statements for one level of %d loads", n, len(thunks))
	}
	// Cached for the request.
	before = c.N()
	if p, _ := l.Pool.Load(ctx, e.pools[1])(); p == nil || c.N() != before {
		t.Fatalf("a second load of a pool sent %d statements", c.N()-before)
	}
}

// A tenant's connections are decided on the tenant: a tenant the caller
// holds no role on is PERMISSION_DENIED for that key, while the caller's
// own keys of the same level are answered.
func TestTenantConnectionsAreDecidedOnTheTenant(t *testing.T) {
	e := newEnv(t)
	ctx, l, _ := e.request(e.beta.Admin)
	var wg sync.WaitGroup
	var own, other error
	var ownConn any
	wg.Add(2)
	go func() {
		defer wg.Done()
		c, err := l.TenantPools.Load(ctx, loaders.PageKey{Parent: "beta", First: 10})()
		own, ownConn = err, c
		if err == nil && (len(c.Items) != 1 || c.Items[0].PoolID != e.pools[0]) {
			t.Errorf("beta's pools: %+v", c.Items)
		}
	}()
	go func() {
		defer wg.Done()
		_, other = l.TenantPools.Load(ctx, loaders.PageKey{Parent: "acme", First: 10})()
	}()
	wg.Wait()
	if own != nil || ownConn == nil {
		t.Fatalf("beta's own pools: %v", own)
	}
	fixture.Code(t, other, errs.PermissionDenied, "")
	// Root field: a tenant the caller has no role on is PERMISSION_DENIED
	// whether or not it exists; the operator gets NOT_FOUND for an unknown one.
	for _, id := range []string{"acme", "nosuch"} {
		_, err := l.NamedTenant(ctx, id)
		fixture.Code(t, err, errs.PermissionDenied, "")
	}
	octx, ol, _ := e.request(e.Operator())
	_, err := ol.NamedTenant(octx, "nosuch")
	fixture.Code(t, err, errs.NotFound, "tenantId")
	// Pages of acme's pools for its viewer: every pool once across pages.
	vctx, vl, _ := e.request(e.acme.Viewer)
	seen := map[string]bool{}
	after := ""
	for n := 0; ; n++ {
		c, err := vl.TenantPools.Load(vctx, loaders.PageKey{Parent: "acme", First: 3, After: after})()
		if err != nil || n > 5 {
			t.Fatal(err)
		}
		if c.Total != len(e.pools) {
			t.Fatalf("total %d", c.Total)
		}
		for _, p := range c.Items {
			seen[p.PoolID] = true
			after = p.PoolID
		}
		if !c.HasNext {
			break
		}
	}
	if len(seen) != len(e.pools) {
		t.Fatalf("paged %d of %d pools", len(seen), len(e.pools))
	}
}
