package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bettercompute/computed/internal/instances"
	"github.com/bettercompute/computed/internal/relay"
	"github.com/bettercompute/computed/internal/testkit"
	"github.com/bettercompute/computed/internal/testkit/wait"
)

// TestCordonedAndRemovedHosts: placement never puts an instance on a
// cordoned or removed host; a cordoned host keeps (and its daemon still
// drives) the instances it has; a failed instance started again is placed
// anew off a host that is not ready; a removed host's instances fail with a
// stateReason naming the host, free their devices, and start again
// elsewhere; uncordoning lets waiting instances in.
func TestCordonedAndRemovedHosts(t *testing.T) {
	t.Parallel()
	e, acme, pool, nodeA, credA := hostedAcme(t)

	get := func(id string) testkit.Resp {
		return must(t, e.Call(acme.Viewer.Token, "instances/get", map[string]any{"tenantId": "acme", "instanceId": id}))
	}
	create := func(name string) string {
		return must(t, e.Call(acme.Member.Token, "instances/create", instanceIn("acme", pool, name, 1))).Str("instanceId")
	}
	ref := func(id string) map[string]any { return map[string]any{"tenantId": "acme", "instanceId": id} }
	node := func(op, id string) {
		must(t, e.Call(acme.Admin.Token, "nodes/"+op, map[string]any{"tenantId": "acme", "nodeId": id}))
	}
	// waiting asserts an instance stays pending, unplaced, with a reason.
	waiting := func(id string) {
		t.Helper()
		wait.Eventually(t, 10*time.Second, func() error {
			if g := get(id); g.Str("stateReason") == "" {
				return fmt.Errorf("instance %s never said why it waits: %s", id, g.Raw)
			}
			return nil
		})
		// The reconciler takes it up twice more (it snoozes in between).
		attempts := func() int {
			var n int
			if err := e.DB.QueryRow(`SELECT COALESCE(sum(cardinality(attempted_by)), 0) FROM river_job WHERE kind = $1 AND args->>'instanceId' = $2`,
				instances.Kind, id).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
		seen := attempts()
		wait.Eventually(t, 10*time.Second, func() error {
			if n := attempts(); n < seen+2 {
				return fmt.Errorf("instance %s was taken up %d times since it said why it waits", id, n-seen)
			}
			return nil
		})
		if g := get(id); g.Str("state") != "pending" || g.Str("hostNodeId") != "" || !strings.Contains(g.Str("stateReason"), "waiting for capacity") {
			t.Fatalf("instance %s was placed: %s", id, g.Raw)
		}
	}

	i1 := create("i1")
	waitState(t, e, acme.Viewer.Token, "acme", i1, "running", 10*time.Second)
	if hostOf(t, e, acme.Viewer.Token, i1) != nodeA {
		t.Fatalf("i1 not on A")
	}

	// Cordoned: A has a free GPU but takes no new instance.
	node("cordon", nodeA)
	i2 := create("i2")
	waiting(i2)
	// What runs on A stays and is still driven by A's daemon.
	must(t, e.Call(acme.Member.Token, "instances/stop", ref(i1)))
	waitState(t, e, acme.Viewer.Token, "acme", i1, "stopped", 10*time.Second)
	must(t, e.Call(acme.Member.Token, "instances/start", ref(i1)))
	waitState(t, e, acme.Viewer.Token, "acme", i1, "running", 10*time.Second)
	if hostOf(t, e, acme.Viewer.Token, i1) != nodeA {
		t.Fatalf("a stopped instance starts where its VM is")
	}
	// The host reports i1 failed: started again, it is placed anew, off
	// the cordoned host, once there is room.
	must(t, e.Call(credA, "instances/report", map[string]any{"nodeId": nodeA, "instanceId": i1, "state": "failed", "message": "GPU fell off the bus"}))
	if g := get(i1); g.Str("state") != "failed" || g.Str("stateReason") != "GPU fell off the bus" {
		t.Fatalf("a reported failure: %s", g.Raw)
	}
	nodeB, credB := hostNode(t, e, acme.Admin.Token, "acme", pool, 2)
	runDaemon(t, e, nodeB, credB)
	waitState(t, e, acme.Viewer.Token, "acme", i2, "running", 10*time.Second)
	if hostOf(t, e, acme.Viewer.Token, i2) != nodeB {
		t.Fatalf("i2 not on B")
	}
	must(t, e.Call(acme.Member.Token, "instances/start", ref(i1)))
	waitState(t, e, acme.Viewer.Token, "acme", i1, "running", 10*time.Second)
	if hostOf(t, e, acme.Viewer.Token, i1) != nodeB {
		t.Fatalf("a failed instance restarted on its cordoned host")
	}
	i3 := create("i3") // B is full, A cordoned
	waiting(i3)
	// The graph's capacity of a hosted pool is the method's: B's GPUs,
	// vCPUs and memory (A is cordoned), two GPUs held.
	c := must(t, e.Call(acme.Viewer.Token, "instances/capacity", map[string]any{"tenantId": "acme", "poolId": pool}))
	d := gqlOK(t, e.GraphQL(acme.Viewer.Token, `{ tenant(tenantId: "acme") { pools(first: 1) { edges { node {
		capacity { bounded total { gpus vcpus memoryGiB } allocated { gpus vcpus memoryGiB } reserved { gpus } free { gpus vcpus memoryGiB } byTenant { tenantId held { gpus } } } } } } } }`, nil))
	gc := dig(t, nodesOf(t, dig(t, d, "tenant", "pools"))[0], "capacity").(map[string]any)
	for _, k := range []string{"total", "allocated", "free"} {
		for _, f := range []string{"gpus", "vcpus", "memoryGiB"} {
			if dig(t, gc, k, f) != obj(t, c.Body, k)[f] {
				t.Fatalf("capacity %s.%s: graph %v, method %s", k, f, gc, c.Raw)
			}
		}
	}
	if dig(t, gc, "total", "gpus") != float64(2) || dig(t, gc, "allocated", "gpus") != float64(2) || dig(t, gc, "byTenant", 0, "held", "gpus") != float64(2) {
		t.Fatalf("hosted capacity: %v", gc)
	}

	// Removed: B's instances fail, naming the host, and free B's GPUs.
	node("remove", nodeB)
	for _, id := range []string{i1, i2} {
		g := waitState(t, e, acme.Viewer.Token, "acme", id, "failed", 10*time.Second)
		if !strings.Contains(str(g["stateReason"]), nodeB) || !strings.Contains(str(g["stateReason"]), "removed") {
			t.Fatalf("failed without a reason naming the host: %v", g)
		}
	}
	var held int
	if err := e.DB.QueryRow(`SELECT count(*) FROM instance_allocations WHERE node_id = $1`, nodeB).Scan(&held); err != nil || held != 0 {
		t.Fatalf("the removed host's devices are still held: %d %v", held, err)
	}
	// The graph shows them failed, with the reason.
	d = gqlOK(t, e.GraphQL(acme.Viewer.Token, `{ tenant(tenantId: "acme") { instances(first: 10, state: FAILED) { totalCount edges { node { instanceId stateReason hostNodeId } } } } }`, nil))
	if dig(t, d, "tenant", "instances", "totalCount") != float64(2) {
		t.Fatalf("failed instances in the graph: %v", d)
	}
	// Uncordoned, A takes the waiting instance and a restarted failed one.
	node("uncordon", nodeA)
	waitState(t, e, acme.Viewer.Token, "acme", i3, "running", 10*time.Second)
	must(t, e.Call(acme.Member.Token, "instances/start", ref(i2)))
	waitState(t, e, acme.Viewer.Token, "acme", i2, "running", 10*time.Second)
	if hostOf(t, e, acme.Viewer.Token, i2) != nodeA || hostOf(t, e, acme.Viewer.Token, i3) != nodeA {
		t.Fatalf("not placed on the uncordoned host")
	}
	// i1 waits for room (A is full now), failed, asking to run.
	if g := get(i1); g.Str("state") != "failed" {
		t.Fatalf("i1: %s", g.Raw)
	}
}

// TestOfferedTenantOnAHost: a tenant a hosted pool is offered to reads its
// instance (placed on the owner's node) without the host node, which
// belongs to the owner, neither its link nor its id (hostNodeId is null on
// both surfaces and in the instance's events: it named the owner's node);
// the host itself still reads its own id; the owner reads the host's
// holdings as numbers and never the instance.
func TestOfferedTenantOnAHost(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t).RunReconciler()
	acme := newTenant(t, e, "acme")
	guest := newTenant(t, e, "guest")
	pool := hostedPool(t, e, acme.Admin.Token, "acme", "hosted", "exclusive", nil)
	must(t, e.Call(acme.Admin.Token, "pools/offer", map[string]any{"tenantId": "acme", "poolId": pool, "toTenantId": "guest",
		"quota": map[string]any{"gpus": 1, "instances": 1}}))
	nodeA, credA := hostNode(t, e, acme.Admin.Token, "acme", pool, 2)
	runDaemon(t, e, nodeA, credA)
	g := must(t, e.Call(guest.Member.Token, "instances/create", instanceIn("guest", pool, "g", 1))).Str("instanceId")
	waitState(t, e, guest.Viewer.Token, "guest", g, "running", 10*time.Second)
	a := must(t, e.Call(acme.Member.Token, "instances/create", instanceIn("acme", pool, "a", 1))).Str("instanceId")
	waitState(t, e, acme.Viewer.Token, "acme", a, "running", 10*time.Second)

	q := `query($t: String!) { tenant(tenantId: $t) { instances(first: 5) { edges { node { id instanceId hostNodeId host { nodeId } pool { poolId } } } }
		pools(first: 5) { edges { node { instances(first: 5) { totalCount edges { node { instanceId } } } capacity { allocated { gpus } byTenant { tenantId held { gpus } } } } } } } }`
	gd := gqlOK(t, e.GraphQL(guest.Viewer.Token, q, map[string]any{"t": "guest"}))
	gi := nodesOf(t, dig(t, gd, "tenant", "instances"))
	if len(gi) != 1 || gi[0]["instanceId"] != g || gi[0]["hostNodeId"] != nil || gi[0]["host"] != nil || dig(t, gi[0], "pool", "poolId") != pool {
		t.Fatalf("guest's instance: %v", gi)
	}
	for _, r := range []testkit.Resp{
		e.Call(guest.Viewer.Token, "instances/get", map[string]any{"tenantId": "guest", "instanceId": g}),
		e.Call(guest.Viewer.Token, "instances/list", map[string]any{"tenantId": "guest"}),
		e.Call(guest.Viewer.Token, "instances/events", map[string]any{"tenantId": "guest", "instanceId": g}),
		e.Call(guest.Viewer.Token, "events/list", map[string]any{"tenantId": "guest"}),
	} {
		if r.Status != 200 || strings.Contains(string(r.Raw), nodeA) {
			t.Fatalf("the guest reads the owner's node id: %d %s", r.Status, r.Raw)
		}
	}
	if r := must(t, e.Call(credA, "instances/assigned", map[string]any{"nodeId": nodeA})); !strings.Contains(string(r.Raw), `"hostNodeId":"`+nodeA) {
		t.Fatalf("the host's own assignments: %s", r.Raw)
	}
	gp := nodesOf(t, dig(t, gd, "tenant", "pools"))[0]
	if dig(t, gp, "instances", "totalCount") != float64(1) || dig(t, gp, "capacity", "byTenant") != nil || dig(t, gp, "capacity", "allocated", "gpus") != float64(2) {
		t.Fatalf("guest's pool: %v", gp)
	}
	ad := gqlOK(t, e.GraphQL(acme.Viewer.Token, q, map[string]any{"t": "acme"}))
	ai := nodesOf(t, dig(t, ad, "tenant", "instances"))
	if len(ai) != 1 || ai[0]["instanceId"] != a || dig(t, ai[0], "host", "nodeId") != nodeA {
		t.Fatalf("acme's instance: %v", ai)
	}
	ap := nodesOf(t, dig(t, ad, "tenant", "pools"))[0]
	if n := nodesOf(t, ap["instances"]); len(n) != 1 || n[0]["instanceId"] != a {
		t.Fatalf("the owner's Pool.instances: %v", ap)
	}
	if len(dig(t, ap, "capacity", "byTenant").([]any)) != 2 || strings.Contains(fmt.Sprint(ad), g) {
		t.Fatalf("the owner's view: %v", ad)
	}
	if n := gqlOK(t, e.GraphQL(acme.Admin.Token, `query($id: ID!) { node(id: $id) { id } }`, map[string]any{"id": gi[0]["id"]}))["node"]; n != nil {
		t.Fatalf("the owner reads the guest's instance: %v", n)
	}

	// A principal with roles in both tenants (acme's admin, made a viewer
	// of guest), and the operator, read under tenant(tenantId: X) what the
	// methods naming X answer: the pool reached through guest holds guest's
	// instance only, none of acme's nodes, tokens, join requests, offers,
	// records or breakdown, and guest's instance shows no host beside its
	// null hostNodeId. Under acme, the pool holds acme's instance only.
	// (They read every tenant's, through either path, before.)
	must(t, e.Call(e.Operator, "members/grant", map[string]any{"tenantId": "guest", "principalId": acme.Admin.PrincipalID, "role": "viewer"}))
	e.Node(acme.Admin.Token, "acme", pool) // a join token and a node more, for the owner's counts
	views := `query($t: String!) { tenant(tenantId: $t) {
		instances(first: 5) { edges { node { instanceId hostNodeId host { nodeId } pool { instances(first: 5) { totalCount } nodes(first: 5) { totalCount } } } } }
		pools(first: 5) { edges { node { instances(first: 5) { totalCount edges { node { instanceId } } } reservations(first: 5) { totalCount }
			nodes(first: 5) { totalCount } joinTokens(first: 5) { totalCount } joinRequests(first: 5) { totalCount } offers(first: 5) { totalCount }
			auditLog(first: 50) { edges { node { tenantId } } } capacity { byTenant { tenantId } } } } } } }`
	for who, token := range map[string]string{"acme's admin, a viewer of guest": acme.Admin.Token, "the operator": e.Operator} {
		gd := gqlOK(t, e.GraphQL(token, views, map[string]any{"t": "guest"}))
		gi := nodesOf(t, dig(t, gd, "tenant", "instances"))
		if len(gi) != 1 || gi[0]["instanceId"] != g || gi[0]["hostNodeId"] != nil || gi[0]["host"] != nil ||
			dig(t, gi[0], "pool", "instances", "totalCount") != float64(1) || dig(t, gi[0], "pool", "nodes", "totalCount") != float64(0) {
			t.Errorf("%s, guest's instances: %v", who, gi)
		}
		gp := nodesOf(t, dig(t, gd, "tenant", "pools"))
		if len(gp) != 1 {
			t.Fatalf("%s, guest's pools: %v", who, gp)
		}
		for _, f := range []string{"nodes", "joinTokens", "joinRequests", "offers"} {
			if n := dig(t, gp[0], f, "totalCount"); n != float64(0) {
				t.Errorf("%s reads %v of acme's %s under guest", who, n, f)
			}
		}
		if n := nodesOf(t, gp[0]["instances"]); len(n) != 1 || n[0]["instanceId"] != g || dig(t, gp[0], "capacity", "byTenant") != nil ||
			strings.Contains(fmt.Sprint(gp[0]["auditLog"]), "acme") {
			t.Errorf("%s, the pool under guest: %v", who, gp[0])
		}
		ad := gqlOK(t, e.GraphQL(token, views, map[string]any{"t": "acme"}))
		ap := nodesOf(t, dig(t, ad, "tenant", "pools"))
		if len(ap) != 1 {
			t.Fatalf("%s, acme's pools: %v", who, ap)
		}
		if n := nodesOf(t, ap[0]["instances"]); len(n) != 1 || n[0]["instanceId"] != a || dig(t, ap[0], "nodes", "totalCount") != float64(2) ||
			dig(t, ap[0], "joinTokens", "totalCount") != float64(2) || dig(t, ap[0], "offers", "totalCount") != float64(1) ||
			len(dig(t, ap[0], "capacity", "byTenant").([]any)) != 2 || strings.Contains(fmt.Sprint(ap[0]["auditLog"]), "guest") {
			t.Errorf("%s, the pool under acme: %v", who, ap[0])
		}
		// Each surface says the same of the pool, under each tenant.
		for _, tid := range []string{"guest", "acme"} {
			if r := must(t, e.Call(token, "instances/list", map[string]any{"tenantId": tid, "poolId": pool})); len(items(t, r)) != 1 {
				t.Errorf("%s, instances.list of %s: %s", who, tid, r.Raw)
			}
		}
	}
	// By node(id:), the pool holds what the caller reads in all its tenants.
	nd := gqlOK(t, e.GraphQL(acme.Admin.Token, `query($id: ID!) { node(id: $id) { ... on Pool { instances(first: 5) { totalCount } nodes(first: 5) { totalCount } } } }`,
		map[string]any{"id": relay.ID("Pool", pool)}))
	if dig(t, nd, "node", "instances", "totalCount") != float64(2) || dig(t, nd, "node", "nodes", "totalCount") != float64(2) {
		t.Errorf("the pool by node(id:): %v", nd)
	}
}
