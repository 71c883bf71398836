package graph

// Each rewrite internal/gqlfast makes to gqlgen's executor is held here to
// its purpose: the same answers as gqlgen's own code paths (the rewrites
// turned off through unpatched, which restores exactly the calls they
// replaced), and the allocations it exists to save. A gqlgen upgrade that
// silently undid a rewrite, or changed what gqlgen's own paths write, fails
// these tests.
//
// The executor runs over an in-memory fleet: what is under test is how the
// executor marshals bound values, not how they are read (the e2e tests and
// BenchmarkGraphQLFleet run the same shapes against PostgreSQL).

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/executor"

	"github.com/bettercompute/computed/graph/model"
	"github.com/bettercompute/computed/internal/inventory"
	"github.com/bettercompute/computed/internal/nodes"
	"github.com/bettercompute/computed/internal/pools"
	"github.com/bettercompute/computed/internal/tenants"
)

// A small fleet: 3 pools of 4 nodes, each node with 8 GPUs of 2 MIG devices.
const (
	testPools, testNodesPerPool, testGPUs, testMIGs = 3, 4, 8, 2
	testNodes                                       = testPools * testNodesPerPool
	testGPUsAll                                     = testNodes * testGPUs
)

type testFleet struct {
	tenant   *tenants.Tenant
	pools    []*pools.Pool
	nodes    map[string][]*nodes.Node
	snaps    map[string]*inventory.Snapshot
	failNode string // its inventory fails
}

func newTestFleet(t testing.TB) *testFleet {
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	f := &testFleet{tenant: &tenants.Tenant{TenantID: "acme", Name: "Acme", CreatedAt: at},
		nodes: map[string][]*nodes.Node{}, snaps: map[string]*inventory.Snapshot{}}
	for p := range testPools {
		pool := &pools.Pool{PoolID: fmt.Sprintf("pool-%d", p), TenantID: "acme", Name: fmt.Sprintf("gpu \"%d\"", p), Site: "fra1",
			GPUModel: "H100", SharingMode: pools.Exclusive, Kind: pools.BareMetal, State: pools.Active, RowVersion: 1, CreatedAt: at, UpdatedAt: at}
		f.pools = append(f.pools, pool)
		for n := range testNodesPerPool {
			id := fmt.Sprintf("node-%d-%d", p, n)
			node := &nodes.Node{NodeID: id, TenantID: "acme", PoolID: pool.PoolID, Name: "n" + id, State: nodes.Ready,
				Attestor: nodes.AttestorToken, RowVersion: 3, CreatedAt: at, UpdatedAt: at, LabelsText: `{"rack":"r1"}`}
			if n == 1 {
				node.RemovedAt = &at
			}
			f.nodes[pool.PoolID] = append(f.nodes[pool.PoolID], node)
			var s inventory.Sections
			for g := range testGPUs {
				gpu := inventory.GPU{UUID: fmt.Sprintf("GPU-%s-%d", id, g), Model: "NVIDIA H100 80GB HBM3", PCIBusID: "0000:1b:00.0", MigMode: "enabled"}
				if g%3 != 0 { // some GPUs do not report an index or memory: nulls
					idx, mem := g, 81559
					gpu.Index, gpu.MemoryMiB = &idx, &mem
				}
				for m := range testMIGs {
					gpu.MigDevices = append(gpu.MigDevices, inventory.MIGDevice{Profile: "3g.40gb", UUID: fmt.Sprintf("MIG-%s-%d-%d", id, g, m)})
				}
				s.GPUs = append(s.GPUs, gpu)
			}
			b, err := json.Marshal(s)
			if err != nil {
				t.Fatal(err)
			}
			f.snaps[id] = &inventory.Snapshot{ID: "snap-" + id, NodeID: id, Hash: strings.Repeat("a", 64), SectionsText: string(b),
				Sections: b, CollectedAt: at, CreatedAt: at}
		}
	}
	return f
}

type testRoot struct {
	ResolverRoot
	f *testFleet
}

func (r testRoot) Query() QueryResolver             { return testQuery{f: r.f} }
func (r testRoot) Tenant() TenantResolver           { return testTenant{f: r.f} }
func (r testRoot) Pool() PoolResolver               { return testPool{f: r.f} }
func (r testRoot) ComputeNode() ComputeNodeResolver { return testNode{f: r.f} }

type testQuery struct {
	QueryResolver
	f *testFleet
}

func (q testQuery) Tenant(_ context.Context, id string) (*tenants.Tenant, error) {
	if id != q.f.tenant.TenantID {
		return nil, nil
	}
	return q.f.tenant, nil
}

type testTenant struct {
	TenantResolver
	f *testFleet
}

func (r testTenant) Pools(_ context.Context, _ *tenants.Tenant, _ *int, _ *string) (*model.PoolConnection, error) {
	c := &model.PoolConnection{PageInfo: &model.PageInfo{}, TotalCount: len(r.f.pools)}
	for _, p := range r.f.pools {
		c.Edges = append(c.Edges, &model.PoolEdge{Cursor: "c-" + p.PoolID, Node: p})
	}
	return c, nil
}

type testPool struct {
	PoolResolver
	f *testFleet
}

func (r testPool) Nodes(_ context.Context, p *pools.Pool, _ *int, _ *string) (*model.ComputeNodeConnection, error) {
	c := &model.ComputeNodeConnection{PageInfo: &model.PageInfo{}, TotalCount: len(r.f.nodes[p.PoolID])}
	for _, n := range r.f.nodes[p.PoolID] {
		c.Edges = append(c.Edges, &model.ComputeNodeEdge{Cursor: "c-" + n.NodeID, Node: n})
	}
	return c, nil
}

type testNode struct {
	ComputeNodeResolver
	f *testFleet
}

func (r testNode) Inventory(_ context.Context, n *nodes.Node) (*inventory.Snapshot, error) {
	if n.NodeID == r.f.failNode {
		return nil, fmt.Errorf("inventory of %s unavailable", n.NodeID)
	}
	return r.f.snaps[n.NodeID], nil
}

func testExecutor(f *testFleet, exts ...graphql.HandlerExtension) *executor.Executor {
	e := executor.New(NewExecutableSchema(Config{Resolvers: testRoot{f: f}}))
	for _, x := range exts {
		e.Use(x)
	}
	return e
}

// answer runs query and returns its answer: every response (a deferred
// part is one more), as JSON, errors sorted by path (resolvers run
// concurrently) and deferred parts sorted.
func answer(t testing.TB, e *executor.Executor, query string) string {
	t.Helper()
	ctx := graphql.StartOperationTrace(context.Background())
	oc, errs := e.CreateOperationContext(ctx, &graphql.RawParams{Query: query})
	if errs != nil {
		t.Fatalf("%s: %v", query, errs)
	}
	h, ctx := e.DispatchOperation(ctx, oc)
	var parts []string
	last := ""
	for r := h(ctx); r != nil; r = h(ctx) {
		sort.Slice(r.Errors, func(i, j int) bool { return r.Errors[i].Path.String() < r.Errors[j].Path.String() })
		if len(parts) > 0 && r.HasNext != nil {
			// Deferred parts arrive in any order: which one says
			// hasNext false is told once, for the last one.
			last = fmt.Sprintf("last part: hasNext %v", *r.HasNext)
			r.HasNext = nil
		}
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, string(b))
	}
	if len(parts) > 1 {
		sort.Strings(parts[1:])
		parts = append(parts, last)
	}
	return strings.Join(parts, "\n")
}

// run runs query and fails on any error in its answer.
func run(t testing.TB, e *executor.Executor, query string) {
	t.Helper()
	ctx := graphql.StartOperationTrace(context.Background())
	oc, errs := e.CreateOperationContext(ctx, &graphql.RawParams{Query: query})
	if errs != nil {
		t.Fatal(errs)
	}
	h, ctx := e.DispatchOperation(ctx, oc)
	for r := h(ctx); r != nil; r = h(ctx) {
		if len(r.Errors) > 0 {
			t.Fatal(r.Errors)
		}
	}
}

const (
	// The dashboard's fleet query (internal/e2e's fleetQuery), GPUs with
	// their MIG devices.
	testFleetQuery = `{ tenant(tenantId: "acme") { tenantId name
  pools(first: 50) { totalCount edges { node { poolId name gpuModel sharingMode state
    nodes(first: 40) { totalCount edges { node { nodeId name state labels removedAt
      inventory { snapshotId hash collectedAt gpus { uuid index model memoryMiB migMode migDevices { profile uuid } } } } } } } } } } }`
	// A tenant's pools by name: bound fields only, so the edges go inline.
	testPoolsQuery = `{ tenant(tenantId: "acme") { pools { edges { cursor node { poolId name site } } } } }`
	// Repeated aliases, fragments and __typename on GPUs.
	testAliasQuery = `query { tenant(tenantId: "acme") { pools { edges { node { nodes { edges { node { inventory {
      gpus { __typename a: uuid a: uuid b: model ...G ... on Gpu { b: model c: index } migDevices { x: uuid x: uuid } } } } } } } } } } }
    fragment G on Gpu { a: uuid d: memoryMiB }`
	// @defer on a node's inventory.
	testDeferQuery = `{ tenant(tenantId: "acme") { pools { edges { node { nodes { edges { node { nodeId
      ... @defer(label: "inv") { inventory { hash gpus { uuid model } } } } } } } } } } }`
)

// switches names each rewrite's switch back to gqlgen's code path.
var switches = []struct {
	name string
	off  *bool
}{
	{"direct leaves", &unpatched.leaves},
	{"lazy @defer groups", &unpatched.deferred},
	{"objects without field copies", &unpatched.objects},
	{"lists without a goroutine per element", &unpatched.lists},
	{"list elements in place", &unpatched.elements},
	{"response buffer sized", &unpatched.buffers},
}

func withUnpatched(off *bool, f func()) {
	*off = true
	defer func() { *off = false }()
	f()
}

// Every rewrite, alone and all together, answers representative queries
// (nulls, errors with their paths, repeated aliases, fragments, @defer)
// exactly as gqlgen's own code does.
func TestRewritesAnswerAsGqlgenDoes(t *testing.T) {
	f := newTestFleet(t)
	e := testExecutor(f)
	queries := map[string]string{"fleet": testFleetQuery, "pools": testPoolsQuery, "aliases": testAliasQuery, "defer": testDeferQuery}
	check := func(name string, off []*bool) {
		for q, query := range queries {
			for _, fail := range []string{"", "node-1-2"} {
				f.failNode = fail
				want := func() string {
					for _, o := range off {
						*o = true
					}
					defer func() {
						for _, o := range off {
							*o = false
						}
					}()
					return answer(t, e, query)
				}()
				if got := answer(t, e, query); got != want {
					i := 0
					for i < len(got) && i < len(want) && got[i] == want[i] {
						i++
					}
					t.Errorf("%s, %s query (failing node %q): the rewritten executor answers\n…%.600s\ngqlgen's:\n…%.600s", name, q, fail, got[max(0, i-300):], want[max(0, i-300):])
				}
				if q == "fleet" && fail != "" && !strings.Contains(want, `"path":["tenant","pools","edges",1,"node","nodes","edges",2,"node","inventory"]`) {
					t.Fatalf("%s query: the failing node's error is missing:\n%.2000s", q, want)
				}
			}
		}
		f.failNode = ""
	}
	var all []*bool
	for _, s := range switches {
		check(s.name, []*bool{s.off})
		all = append(all, s.off)
	}
	check("all rewrites", all)
	// The answers are what the fleet holds.
	out := answer(t, e, testFleetQuery)
	for _, want := range []string{`"uuid":"GPU-node-2-3-7"`, `"index":null,"model":"NVIDIA H100 80GB HBM3","memoryMiB":null`, `"name":"gpu \"1\""`,
		`"labels":{"rack":"r1"}`, `"removedAt":"2026-12-01T10:00:00Z"`, `"migDevices":[{"profile":"3g.40gb","uuid":"MIG-node-0-0-0-0"}`} {
		if !strings.Contains(out, want) {
			t.Errorf("the fleet answer lacks %s", want)
		}
	}
	if a := answer(t, e, testAliasQuery); !strings.Contains(a, `{"__typename":"Gpu","a":"GPU-node-0-0-0","b":"NVIDIA H100 80GB HBM3","d":null,"c":null,"migDevices":[{"x":"MIG-node-0-0-0-0"}`) {
		t.Errorf("repeated aliases: %.600s", a)
	}
	if d := answer(t, e, testDeferQuery); !strings.Contains(d, `"label":"inv"`) || !strings.Contains(d, `"hasNext":true`) || !strings.HasSuffix(d, "last part: hasNext false") {
		t.Errorf("@defer: %.600s", d)
	}
}

// Each rewrite saves the allocations it exists for; a gqlgen upgrade that
// silently undid one (or made it pointless) fails here. The figures are
// per unit the rewrite touches (a leaf value, an object, a list element),
// set at about half of what each saved when measured (in parentheses), so
// that they hold whatever the runtime's noise and still fail a rewrite
// that saves nothing.
func TestRewritesSaveTheirAllocations(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation counts take a few seconds")
	}
	f := newTestFleet(t)
	e := testExecutor(f)
	allocs := func(query string) float64 {
		return testing.AllocsPerRun(5, func() { run(t, e, query) })
	}
	// Objects of the fleet answer: a tenant, its pool connection and
	// page info, per pool an edge and a pool, per pool a node connection and
	// page info, per node an edge, a node and a snapshot, GPUs and MIG devices.
	objects := 3 + testPools*4 + testNodes*3 + testGPUsAll*(1+testMIGs)
	// Leaf values marshalled directly: of the GPUs alone, uuid, index,
	// model, memoryMiB, migMode, and each MIG device's profile and uuid.
	gpuLeaves := testGPUsAll * (5 + 2*testMIGs)
	for _, c := range []struct {
		name    string
		off     *bool
		query   string
		units   int
		perUnit float64
	}{
		{"direct leaves", &unpatched.leaves, testFleetQuery, gpuLeaves, 4},                                                      // (8.4 per GPU leaf, with the pools' and nodes' leaves)
		{"lazy @defer groups", &unpatched.deferred, testFleetQuery, objects, 6},                                                 // (14: a path, a field set, a map)
		{"objects without field copies", &unpatched.objects, testFleetQuery, objects, 3},                                        // (6.3: a map and a copy per field)
		{"lists without a goroutine per element", &unpatched.lists, testFleetQuery, testGPUsAll, 6},                             // (13.9 per GPU, its MIG list included)
		{"list elements in place", &unpatched.elements, testFleetQuery, testGPUsAll * (1 + testMIGs), 0.5},                      // (1: the copy)
		{"lists without a goroutine per element (pools asked for their names)", &unpatched.lists, testPoolsQuery, testPools, 2}, // (4.7)
	} {
		on := allocs(c.query)
		var off float64
		withUnpatched(c.off, func() { off = allocs(c.query) })
		saved := (off - on) / float64(c.units)
		t.Logf("%s: %.0f allocations, %.0f without it: %.2f saved per unit (%d units)", c.name, on, off, saved, c.units)
		if saved < c.perUnit {
			t.Errorf("%s saves %.2f allocations per unit, want at least %.1f", c.name, saved, c.perUnit)
		}
	}
	// The response buffer: an answer of this size (about 60 kB) grows a
	// buffer from nothing by doubling about ten times (9 saved).
	on := allocs(testFleetQuery)
	var off float64
	withUnpatched(&unpatched.buffers, func() { off = allocs(testFleetQuery) })
	t.Logf("response buffer sized: %.0f allocations, %.0f without it", on, off)
	if off-on < 5 {
		t.Errorf("the sized response buffer saves %.0f allocations, want at least 5", off-on)
	}
}

// fieldRecorder is a field interceptor installed with Use.
type fieldRecorder struct {
	mu   sync.Mutex
	seen map[string]bool
}

func (r *fieldRecorder) ExtensionName() string                   { return "fieldRecorder" }
func (r *fieldRecorder) Validate(graphql.ExecutableSchema) error { return nil }
func (r *fieldRecorder) InterceptField(ctx context.Context, next graphql.Resolver) (any, error) {
	r.record(ctx)
	return next(ctx)
}

func (r *fieldRecorder) record(ctx context.Context) {
	p := graphql.GetFieldContext(ctx).Path().String()
	r.mu.Lock()
	r.seen[p] = true
	r.mu.Unlock()
}

// leafPaths lists the path of every leaf value in an answer's data.
func leafPaths(t *testing.T, answer string) []string {
	var r struct{ Data any }
	if err := json.Unmarshal([]byte(answer), &r); err != nil {
		t.Fatal(err)
	}
	var out []string
	var walk func(v any, path string)
	walk = func(v any, path string) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				walk(x, strings.TrimPrefix(path+"."+k, "."))
			}
		case []any:
			for i, x := range v {
				walk(x, fmt.Sprintf("%s[%d]", path, i))
			}
		default:
			out = append(out, path)
		}
	}
	walk(r.Data, "")
	return out
}

// A field interceptor sees every leaf field, however it was added: the
// direct leaves are taken only when the operation's field middleware is
// gqlgen's identity.
func TestFieldInterceptorsSeeEveryLeaf(t *testing.T) {
	f := newTestFleet(t)
	// The fleet query without labels (a JSON value: its keys are not fields).
	query := strings.Replace(testFleetQuery, " labels", "", 1)
	around := &fieldRecorder{seen: map[string]bool{}}
	used := &fieldRecorder{seen: map[string]bool{}}
	withAround := testExecutor(f)
	withAround.AroundFields(func(ctx context.Context, next graphql.Resolver) (any, error) {
		around.record(ctx)
		return next(ctx)
	})
	for name, c := range map[string]struct {
		e *executor.Executor
		r *fieldRecorder
	}{"AroundFields": {withAround, around}, "Use": {testExecutor(f, used), used}} {
		out := answer(t, c.e, query)
		paths := leafPaths(t, out)
		if len(paths) < testGPUsAll*5 {
			t.Fatalf("%s: %d leaves in the answer", name, len(paths))
		}
		var missed []string
		for _, p := range paths {
			if !c.r.seen[p] {
				missed = append(missed, p)
			}
		}
		if len(missed) > 0 {
			t.Errorf("%s: the interceptor missed %d of %d leaf fields, e.g. %v", name, len(missed), len(paths), missed[:min(5, len(missed))])
		}
		if want := answer(t, testExecutor(f), query); out != want {
			t.Errorf("%s: the answer differs from the one without an interceptor", name)
		}
	}
}

// Without a field interceptor the direct leaves are taken (were gqlgen's
// identity middleware ever to differ per executor, the fast path would
// silently be lost: this says so); with one, they are not.
func TestDirectLeavesOnlyWithoutInterceptors(t *testing.T) {
	op := func(e *executor.Executor) *graphql.OperationContext {
		oc, errs := e.CreateOperationContext(graphql.StartOperationTrace(context.Background()), &graphql.RawParams{Query: `{ viewer { __typename } }`})
		if errs != nil {
			t.Fatal(errs)
		}
		return oc
	}
	f := newTestFleet(t)
	if !directLeaves(op(testExecutor(f))) || !directLeaves(op(executor.New(NewExecutableSchema(Config{})))) {
		t.Error("an executor without field interceptors does not take the direct leaves")
	}
	around := testExecutor(f)
	around.AroundFields(func(ctx context.Context, next graphql.Resolver) (any, error) { return next(ctx) })
	if directLeaves(op(around)) {
		t.Error("an executor with AroundFields takes the direct leaves")
	}
	if directLeaves(op(testExecutor(f, &fieldRecorder{}))) {
		t.Error("an executor with a field interceptor takes the direct leaves")
	}
	// Other extensions leave them on.
	ops := testExecutor(f)
	ops.AroundOperations(func(ctx context.Context, next graphql.OperationHandler) graphql.ResponseHandler { return next(ctx) })
	ops.AroundRootFields(func(ctx context.Context, next graphql.RootResolver) graphql.Marshaler { return next(ctx) })
	if !directLeaves(op(ops)) {
		t.Error("operation and root field middleware turned the direct leaves off")
	}
}

// The direct-leaves test costs little per field (BenchmarkGraphQLFleet
// runs it 100,000 times per query).
func BenchmarkDirectLeavesDecision(b *testing.B) {
	oc, _ := executor.New(NewExecutableSchema(Config{})).CreateOperationContext(graphql.StartOperationTrace(context.Background()), &graphql.RawParams{Query: `{ viewer { __typename } }`})
	n := 0
	for b.Loop() {
		if directLeaves(oc) {
			n++
		}
	}
	if n == 0 {
		b.Fatal("no direct leaves")
	}
}
