package e2e

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bettercompute/computed/internal/testkit"
)

// TestCordonedAndRemovedHosts: placement never puts an instance on a
// cordoned or removed host; a cordoned host keeps (and its daemon still
// drives) the instances it has; a failed instance started again is placed
// anew off a host that is not ready; a removed host's instances fail with a
// stateReason naming the host, free their devices, and start again
// elsewhere; uncordoning lets waiting instances in.
func TestCordonedAndRemovedHosts(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t).RunReconciler()
	acme := newTenant(t, e, "acme")
	pool := hostedPool(t, e, acme.Admin.Token, "acme", "hosted", "exclusive", nil)
	nodeA, credA := hostNode(t, e, acme.Admin.Token, "acme", pool, 2)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	defer func() { close(stop); wg.Wait() }()
	wg.Add(1)
	go daemon(t, e, nodeA, credA, stop, &wg)

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
		deadline := time.Now().Add(10 * time.Second)
		for get(id).Str("stateReason") == "" {
			if time.Now().After(deadline) {
				t.Fatalf("instance %s never said why it waits: %s", id, get(id).Raw)
			}
			time.Sleep(30 * time.Millisecond)
		}
		time.Sleep(1500 * time.Millisecond) // more than one sweep and one snooze
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
	wg.Add(1)
	go daemon(t, e, nodeB, credB, stop, &wg)
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
	d := gqlOK(t, e.GraphQL(acme.Viewer.Token, `{ tenant(tenantId: "acme") { instances(first: 10, state: FAILED) { totalCount edges { node { instanceId stateReason hostNodeId } } } } }`, nil))
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
