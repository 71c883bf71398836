package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/bettercompute/computed/internal/instances/runner"
	"github.com/bettercompute/computed/internal/testkit"
)

// Issue 18: the reconciler's sweep does not read the fleet when nothing
// changes. With 3,000 instances all where they should be, the sweep's read
// (after its first run) touches no instance row: the plan reads the
// unconverged partial index and the recently removed nodes, and finds
// nothing. (It used to check every live instance's host on every replica
// every 5 s.)
func TestSweepDoesNotReadTheFleet(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	admin, _, _ := e.Tenant("acme")
	pool := e.Must(e.Call(admin, "pools/create", map[string]any{"tenantId": "acme", "name": "vps", "site": "fra1", "gpuModel": "H100",
		"sharingMode": "exclusive", "kind": "vps-provider"})).Str("poolId")
	if _, err := e.DB.Exec(`INSERT INTO instances (instance_id, tenant_id, pool_id, name, gpus, vcpus, memory_gib, desired_state, state)
		SELECT 'inst_' || lpad(g::text, 26, '0'), 'acme', $1, 'i-' || g, 1, 4, 16, 'running', 'running' FROM generate_series(1, 3000) g`, pool); err != nil {
		t.Fatal(err)
	}
	if _, err := e.DB.Exec(`ANALYZE instances; ANALYZE nodes`); err != nil {
		t.Fatal(err)
	}
	var raw string
	if err := e.DB.QueryRow(`EXPLAIN (ANALYZE, FORMAT JSON) `+runner.SweepSQL, time.Now().Add(-time.Minute)).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	var plan []struct{ Plan map[string]any }
	if err := json.Unmarshal([]byte(raw), &plan); err != nil {
		t.Fatal(err)
	}
	var walk func(n map[string]any)
	walk = func(n map[string]any) {
		rel, _ := n["Relation Name"].(string)
		typ, _ := n["Node Type"].(string) // nodes is empty here: a scan of it reads nothing either way
		if rel == "instances" || rel == "nodes" {
			if rel == "instances" && strings.Contains(typ, "Seq Scan") {
				t.Fatalf("the sweep scans %s whole: %s", rel, raw)
			}
			removed, _ := n["Rows Removed by Filter"].(float64)
			if rows, _ := n["Actual Rows"].(float64); rows+removed > 0 {
				t.Fatalf("the sweep reads %v rows of %s with nothing to do: %s", rows, rel, raw)
			}
		}
		kids, _ := n["Plans"].([]any)
		for _, k := range kids {
			walk(k.(map[string]any))
		}
	}
	walk(plan[0].Plan)
	// And the sweep itself finds nothing to queue.
	if n, err := e.Instances.Sweep(t.Context()); err != nil || n != 0 {
		t.Fatalf("sweep queued %d (%v)", n, err)
	}
}
