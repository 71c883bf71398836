package e2e

import (
	"encoding/base64"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bettercompute/computed/internal/testkit"
	"github.com/bettercompute/computed/internal/testkit/wait"
)

// hostedPool creates a vps-hosted pool.
func hostedPool(t testing.TB, e *testkit.Env, admin, tenantID, name, mode string, policy map[string]any) string {
	t.Helper()
	in := map[string]any{"tenantId": tenantID, "name": name, "site": "fra1", "gpuModel": "H100",
		"sharingMode": mode, "kind": "vps-hosted"}
	if policy != nil {
		in["policy"] = policy
	}
	return must(t, env(t, e).Call(admin, "pools/create", in)).Str("poolId")
}

// host joins a node to the pool and reports an inventory of n GPUs, 32
// threads and 128 GiB; it returns the node id and its credential.
func hostNode(t testing.TB, e *testkit.Env, admin, tenantID, poolID string, n int) (string, string) {
	t.Helper()
	nodeID, cred := env(t, e).Node(admin, tenantID, poolID)
	gpus := make([]any, n)
	for k := range gpus {
		gpus[k] = map[string]any{"uuid": fmt.Sprintf("GPU-%s-%d", nodeID[len(nodeID)-8:], k), "index": k, "model": "NVIDIA H100 80GB HBM3", "memoryMiB": 81559}
	}
	must(t, env(t, e).Call(cred, "inventory/report", map[string]any{"nodeId": nodeID, "sections": map[string]any{
		"cpu": map[string]any{"threads": 32}, "memory": map[string]any{"totalBytes": 128 << 30}, "gpus": gpus}}))
	return nodeID, cred
}

// daemon is a host daemon: it reads its node's instances and reports each
// transitional one done, until stop is closed.
func daemon(t testing.TB, e *testkit.Env, nodeID, cred string, stop chan struct{}, wg *sync.WaitGroup) {
	defer wg.Done()
	done := map[string]string{"provisioning": "running", "rebooting": "running", "stopping": "stopped", "deleting": "deleted"}
	for {
		select {
		case <-stop:
			return
		case <-time.After(30 * time.Millisecond):
		}
		r := e.Call(cred, "instances/assigned", map[string]any{"nodeId": nodeID, "limit": 200})
		if r.Status == 401 {
			return // a removed node's credential is revoked: the daemon stops
		}
		if r.Status != 200 {
			continue
		}
		for _, it := range r.Body["items"].([]any) {
			i := it.(map[string]any)
			if to, ok := done[str(i["state"])]; ok {
				e.Call(cred, "instances/report", map[string]any{"nodeId": nodeID, "instanceId": i["instanceId"], "state": to})
			}
		}
	}
}

// hostedAcme starts a server with its reconciler, tenant acme, an
// exclusive hosted pool and one host of two GPUs whose daemon runs until
// the test ends; it returns the pool, the host and its credential.
func hostedAcme(t *testing.T) (e *testkit.Env, acme tenant, pool, node, cred string) {
	t.Helper()
	e = testkit.Start(t).RunReconciler()
	acme = newTenant(t, e, "acme")
	pool = hostedPool(t, e, acme.Admin.Token, "acme", "hosted", "exclusive", nil)
	node, cred = hostNode(t, e, acme.Admin.Token, "acme", pool, 2)
	runDaemon(t, e, node, cred)
	return e, acme, pool, node, cred
}

// runDaemon runs a host daemon for the node until the test ends.
func runDaemon(t testing.TB, e *testkit.Env, nodeID, cred string) {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go daemon(t, e, nodeID, cred, stop, &wg)
	t.Cleanup(func() { close(stop); wg.Wait() })
}

func hostOf(t testing.TB, e *testkit.Env, token, id string) string {
	g := must(t, env(t, e).Call(token, "instances/get", map[string]any{"tenantId": "acme", "instanceId": id}))
	return g.Str("hostNodeId")
}

// TestHostedPlacement: instances are placed on ready hosts with room, never
// two on one GPU however many are created at once; the rest wait in pending
// and are placed when room appears; a removed host's instances fail.
func TestHostedPlacement(t *testing.T) {
	t.Parallel()
	e, acme, pool, nodeA, credA := hostedAcme(t)

	// Six one-GPU instances at once on a two-GPU host.
	ids := make([]string, 6)
	var cw sync.WaitGroup
	for k := range ids {
		cw.Add(1)
		go func(k int) {
			defer cw.Done()
			r := e.Call(acme.Member.Token, "instances/create", instanceIn("acme", pool, fmt.Sprintf("h%d", k), 1))
			if r.Status == 200 {
				ids[k] = r.Str("instanceId")
			}
		}(k)
	}
	cw.Wait()
	running := func() (run, pend []string) {
		for _, id := range ids {
			g := must(t, e.Call(acme.Viewer.Token, "instances/get", map[string]any{"tenantId": "acme", "instanceId": id}))
			switch g.Str("state") {
			case "running":
				run = append(run, id)
			case "pending":
				if g.Str("stateReason") != "" { // waiting for room, once looked at
					pend = append(pend, id)
				}
			}
		}
		return
	}
	var run, pend []string
	wait.Eventually(t, 15*time.Second, func() error {
		run, pend = running()
		if len(run) == 2 && len(pend) == 4 {
			return nil
		}
		return fmt.Errorf("want 2 running and 4 pending, got %d and %d", len(run), len(pend))
	})
	// Distinct GPUs, as the host sees them, read with their instances in
	// one statement: read in two, a deleted report committing between them
	// left an instance still deleting with no devices in the answer. Every
	// read of a host's instances (this call's, and the host daemon's that
	// poll meanwhile: the hook sees the whole server) holds their devices.
	var reads []string
	var mu sync.Mutex
	e.OnStatement(func(sql string) {
		if strings.Contains(sql, "host_node_id = $1") {
			mu.Lock()
			reads = append(reads, sql)
			mu.Unlock()
		}
	})
	a := must(t, e.Call(credA, "instances/assigned", map[string]any{"nodeId": nodeA}))
	e.OnStatement(nil)
	mu.Lock()
	for _, sql := range reads {
		if !strings.Contains(sql, "instance_allocations") {
			t.Fatalf("instances.assigned read its instances without their devices: %q", reads)
		}
	}
	if len(reads) == 0 {
		t.Fatal("instances.assigned read no instances")
	}
	mu.Unlock()
	seen := map[string]bool{}
	for _, it := range items(t, a) {
		for _, d := range it["devices"].([]any) {
			id := str(d.(map[string]any)["deviceId"])
			if seen[id] {
				t.Fatalf("GPU %s held twice: %s", id, a.Raw)
			}
			seen[id] = true
		}
	}
	if len(seen) != 2 {
		t.Fatalf("devices: %s", a.Raw)
	}

	// Room appears: a second host takes two more.
	nodeB, credB := hostNode(t, e, acme.Admin.Token, "acme", pool, 2)
	runDaemon(t, e, nodeB, credB)
	wait.Eventually(t, 15*time.Second, func() error {
		run, pend = running()
		if len(run) == 4 && len(pend) == 2 {
			return nil
		}
		return fmt.Errorf("after a second host: %d running, %d pending", len(run), len(pend))
	})
	// Deleting one frees its GPU for a pending one.
	must(t, e.Call(acme.Member.Token, "instances/delete", map[string]any{"tenantId": "acme", "instanceId": run[0]}))
	waitState(t, e, acme.Viewer.Token, "acme", run[0], "deleted", 10*time.Second)
	wait.Eventually(t, 15*time.Second, func() error {
		r2, p2 := running()
		if len(r2) == 4 && len(p2) == 1 {
			return nil
		}
		return fmt.Errorf("after a delete: %d running, %d pending", len(r2), len(p2))
	})
	var n, distinct int
	if err := e.DB.QueryRow(`SELECT count(*), count(DISTINCT (node_id, device_id)) FROM instance_allocations`).Scan(&n, &distinct); err != nil || n != 4 || distinct != 4 {
		t.Fatalf("allocations %d, distinct %d, %v", n, distinct, err)
	}

	// A removed host's instances fail; their devices are freed.
	must(t, e.Call(acme.Admin.Token, "nodes/remove", map[string]any{"tenantId": "acme", "nodeId": nodeB}))
	wait.Eventually(t, 15*time.Second, func() error {
		failed := 0
		for _, id := range ids {
			g := must(t, e.Call(acme.Viewer.Token, "instances/get", map[string]any{"tenantId": "acme", "instanceId": id}))
			if g.Str("state") == "failed" && g.Str("hostNodeId") == nodeB {
				failed++
			}
		}
		if failed == 2 {
			return nil
		}
		return fmt.Errorf("instances of the removed host did not fail (%d)", failed)
	})

	// Node-side refusals.
	expect(t, e.Call(acme.Member.Token, "instances/assigned", map[string]any{"nodeId": nodeA}), "PERMISSION_DENIED", anyPath)
	expect(t, e.Call(credA, "instances/assigned", map[string]any{"nodeId": nodeB}), "PERMISSION_DENIED", anyPath)
	expect(t, e.Call(credA, "instances/report", map[string]any{"nodeId": nodeA, "instanceId": run[1], "state": "bogus"}), "INVALID_INPUT", "state")
	var other string
	for _, id := range ids {
		if hostOf(t, e, acme.Viewer.Token, id) != nodeA {
			other = id
		}
	}
	expect(t, e.Call(credA, "instances/report", map[string]any{"nodeId": nodeA, "instanceId": other, "state": "running"}), "NOT_FOUND", "instanceId")
	var onA string
	for _, id := range ids {
		g := must(t, e.Call(acme.Viewer.Token, "instances/get", map[string]any{"tenantId": "acme", "instanceId": id}))
		if g.Str("hostNodeId") == nodeA && g.Str("state") == "running" {
			onA = id
		}
	}
	r := e.Call(credA, "instances/report", map[string]any{"nodeId": nodeA, "instanceId": onA, "state": "stopped"})
	expect(t, r, "INVALID_STATE", "state")
	same := must(t, e.Call(credA, "instances/report", map[string]any{"nodeId": nodeA, "instanceId": onA, "state": "running"}))
	if same.Body["changed"] != false {
		t.Fatalf("a report of the current state: %s", same.Raw)
	}
	// The capacity method: the owner sees totals and who holds what.
	c := must(t, e.Call(acme.Viewer.Token, "instances/capacity", map[string]any{"tenantId": "acme", "poolId": pool}))
	if obj(t, c.Body, "total")["gpus"] != float64(2) || obj(t, c.Body, "allocated")["gpus"] == nil {
		t.Fatalf("capacity: %s", c.Raw)
	}
}

// A GPU that vanishes from a host's inventory under an instance stays
// counted, held, until the instance lets it go; a GPU that appears is free
// at once. (The pool's total fell below what its instances held: free room
// went negative, and a waiting instance was told the room was held by
// others while the new GPU sat idle.)
func TestVanishedGPUStaysHeldAndANewOneIsFree(t *testing.T) {
	t.Parallel()
	e, acme, pool, node, cred := hostedAcme(t)
	state := func(id string) (string, string) {
		g := must(t, e.Call(acme.Viewer.Token, "instances/get", map[string]any{"tenantId": "acme", "instanceId": id}))
		return g.Str("state"), g.Str("stateReason")
	}
	var ids []string
	for k := 0; k < 3; k++ {
		ids = append(ids, must(t, e.Call(acme.Member.Token, "instances/create", instanceIn("acme", pool, fmt.Sprintf("v%d", k), 1))).Str("instanceId"))
		if k < 2 {
			wait.Eventually(t, 15*time.Second, func() error {
				if s, _ := state(ids[k]); s != "running" {
					return fmt.Errorf("%s is %s", ids[k], s)
				}
				return nil
			})
		}
	}
	wait.Eventually(t, 15*time.Second, func() error {
		if s, why := state(ids[2]); s != "pending" || why != "waiting for capacity: the pool's room is held by its instances or reserved, now or by a reservation still to come" {
			return fmt.Errorf("the third is %s (%s), want pending with a reason", s, why)
		}
		return nil
	})
	// GPU 1 vanishes, GPU 2 appears.
	suffix := node[len(node)-8:]
	gpus := []any{}
	for _, k := range []int{0, 2} {
		gpus = append(gpus, map[string]any{"uuid": fmt.Sprintf("GPU-%s-%d", suffix, k), "index": len(gpus), "model": "NVIDIA H100 80GB HBM3", "memoryMiB": 81559})
	}
	must(t, e.Call(cred, "inventory/report", map[string]any{"nodeId": node, "sections": map[string]any{
		"cpu": map[string]any{"threads": 32}, "memory": map[string]any{"totalBytes": 128 << 30}, "gpus": gpus}}))
	wait.Eventually(t, 15*time.Second, func() error {
		if s, why := state(ids[2]); s != "running" {
			return fmt.Errorf("the third is %s (%s), want running on the new GPU", s, why)
		}
		return nil
	})
	a := must(t, e.Call(cred, "instances/assigned", map[string]any{"nodeId": node}))
	for _, it := range items(t, a) {
		if it["instanceId"] == ids[2] {
			if d := it["devices"].([]any); len(d) != 1 || d[0].(map[string]any)["deviceId"] != fmt.Sprintf("GPU-%s-2", suffix) {
				t.Fatalf("the third's devices: %v", d)
			}
		}
	}
	c := must(t, e.Call(acme.Viewer.Token, "instances/capacity", map[string]any{"tenantId": "acme", "poolId": pool}))
	if obj(t, c.Body, "total")["gpus"] != float64(3) || obj(t, c.Body, "free")["gpus"] != float64(0) {
		t.Fatalf("capacity: two GPUs present, one held that vanished, three held: %s", c.Raw)
	}
	// The host then reports fewer vCPUs and less memory than its instances
	// hold: its total is what they hold; nothing is free, nothing negative.
	must(t, e.Call(cred, "inventory/report", map[string]any{"nodeId": node, "sections": map[string]any{
		"cpu": map[string]any{"threads": 1}, "memory": map[string]any{"totalBytes": 1 << 30}, "gpus": gpus}}))
	c = must(t, e.Call(acme.Viewer.Token, "instances/capacity", map[string]any{"tenantId": "acme", "poolId": pool}))
	if free, held := obj(t, c.Body, "free"), obj(t, c.Body, "allocated"); free["vcpus"] != float64(0) || free["memoryGiB"] != float64(0) ||
		obj(t, c.Body, "total")["vcpus"] != held["vcpus"] || obj(t, c.Body, "total")["memoryGiB"] != held["memoryGiB"] {
		t.Fatalf("capacity after the host shrank: %s", c.Raw)
	}
	// The graph's capacity says the same.
	d := gqlOK(t, e.GraphQL(acme.Viewer.Token, `query($id: ID!) { node(id: $id) { ... on Pool { capacity { total { gpus } free { gpus vcpus memoryGiB } } } } }`,
		map[string]any{"id": base64.RawURLEncoding.EncodeToString([]byte("Pool:" + pool))}))
	if cp := obj(t, d, "node", "capacity"); obj(t, cp, "total")["gpus"] != float64(3) || obj(t, cp, "free")["gpus"] != float64(0) ||
		obj(t, cp, "free")["vcpus"] != float64(0) || obj(t, cp, "free")["memoryGiB"] != float64(0) {
		t.Fatalf("graph capacity: %v", cp)
	}
}
