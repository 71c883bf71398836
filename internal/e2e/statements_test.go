package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/bettercompute/computed/internal/testkit"
)

// The graph batches one statement per level: the count of SQL statements a
// query sends does not grow with the number of tenants, projects or members.
func TestStatementCountDoesNotGrowWithLists(t *testing.T) {
	// Not parallel: counted batches need the CPU to themselves.
	query := `{ viewer { tenants(first: 12) { totalCount edges { node { tenantId projects(first: 15) { totalCount edges { node { name members(first: 2) { totalCount edges { node { principalId relation } } } } } } members(first: 1) { totalCount } } } } } }`
	count := func(tenants, projects int) int64 {
		e := testkit.Start(t)
		for i := 0; i < tenants; i++ {
			id := fmt.Sprintf("t%02d", i)
			e.Must(e.Call(e.Operator, "tenants/create", map[string]any{"tenantId": id, "name": id}))
			for j := 0; j < projects; j++ {
				e.Must(e.Call(e.Operator, "projects/create", map[string]any{"tenantId": id, "name": fmt.Sprintf("p%02d", j)}))
			}
		}
		// Loaders batch keys that arrive within a 2 ms window; on a starved
		// CPU a level can split in two. An N+1 grows on every run, so the
		// best of three is the query's statement count.
		best := int64(-1)
		for i := 0; i < 3; i++ {
			r := e.GraphQL(e.Operator, query, nil)
			if r.Status != 200 || r.Body["errors"] != nil {
				t.Fatalf("%s", r.Raw)
			}
			if n := e.Statements(r); best < 0 || n < best {
				best = n
			}
		}
		return best
	}
	small, large := count(2, 2), count(12, 15)
	if small != large {
		t.Fatalf("statements: %d for 2x2, %d for 12x15", small, large)
	}
	// auth, tenants page, tenants count, projects pages, project members
	// pages, tenant members pages, and the count of the tenants whose
	// members page is empty (the operator created them and holds no role).
	if small > 7 {
		t.Fatalf("%d statements for the query, want at most 7", small)
	}
	t.Logf("%d statements", small)
}

// Instances through the graph batch like the rest: the statement count of
// a query over pools, instances, their events, links, reservations and
// capacity does not grow with the number of pools and instances.
func TestInstanceStatementsDoNotGrow(t *testing.T) {
	// Not parallel: counted batches need the CPU to themselves.
	query := `{ tenant(tenantId: "acme") {
		instances(first: 50) { totalCount edges { node { id name state pool { poolId capacity { free { gpus } } } project { projectId } host { nodeId }
			events(first: 5) { totalCount edges { node { type instance { instanceId } } } } } } }
		pools(first: 20) { edges { node { poolId
			instances(first: 10) { totalCount edges { node { instanceId events(first: 2) { totalCount } } } }
			reservations(first: 5) { totalCount edges { node { reservationId state } } }
			capacity { total { gpus } allocated { gpus } byTenant { tenantId held { gpus } } } } } }
		reservations(first: 5) { totalCount }
		projects(first: 5) { edges { node { instances(first: 5) { totalCount edges { node { instanceId } } } } } } } }`
	count := func(pools, perPool int) int64 {
		e := testkit.Start(t)
		admin, member, _ := e.Tenant("acme")
		prj := e.Must(e.Call(member, "projects/create", map[string]any{"tenantId": "acme", "name": "web"})).Str("projectId")
		for i := 0; i < pools; i++ {
			pool := vpsPool(t, e, admin, "acme", fmt.Sprintf("p%02d", i), map[string]any{"capacity": map[string]any{"gpus": 64}})
			e.Must(e.Call(member, "reservations/create", rsvIn("acme", pool, 1, -time.Minute, time.Hour)))
			for j := 0; j < perPool; j++ {
				in := instanceIn("acme", pool, fmt.Sprintf("i%02d-%02d", i, j), 1)
				in["projectId"] = prj
				e.Must(e.Call(member, "instances/create", in))
			}
		}
		best := int64(-1)
		for i := 0; i < 3; i++ {
			r := e.GraphQL(member, query, nil)
			if r.Status != 200 || r.Body["errors"] != nil {
				t.Fatalf("%s", r.Raw)
			}
			if n := e.Statements(r); best < 0 || n < best {
				best = n
			}
		}
		return best
	}
	small, large := count(2, 2), count(6, 5)
	if small != large {
		t.Fatalf("statements: %d for 2 pools of 2 instances, %d for 6 of 5", small, large)
	}
	t.Logf("%d statements", small)
}
