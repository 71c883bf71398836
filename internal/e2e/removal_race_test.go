package e2e

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bettercompute/computed/internal/testkit"
)

// deadlockCount reads how many deadlocks PostgreSQL counted in the test's
// database. A deadlock is retried (store.DB.Tx), so answers can hide one;
// the count reaches the view once the backends that counted it have been
// idle for up to 10 s.
func deadlockCount(t *testing.T, e *testkit.Env) func() int64 {
	return func() (n int64) {
		if err := e.DB.Get(&n, `SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()`); err != nil {
			t.Fatal(err)
		}
		return n
	}
}

// A node removed while it reports: nodes.remove revokes the node's
// credential and then cancels its workflow, and each report of a step held
// the workflow's row and asked for the credential at commit, the other
// order (and once reports held the credential first, the removal locked the
// node's row before the credential, and inventory.report the other way): a probe's 80 reports racing a removal deadlocked (202 times in 7
// removals), and 3 removals failed UNAVAILABLE, leaving the node ready and
// its credential working. A node's call now holds its credential first.
// Every report is answered as it ran (OK) or as a revoked credential's
// (UNAUTHENTICATED), and every removal succeeds.
func TestRemovingANodeWhileItReports(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	acme := newTenant(t, e, "acme")
	pool := e.Pool(acme.Admin.Token, "acme", "metal")
	must(t, createProfile(t, e, acme.Member.Token, "acme", profileDoc("gpu-node", 1), ""))
	deadlocks := deadlockCount(t, e)
	before := deadlocks()
	for round := 0; round < 3; round++ {
		nodeID, cred := e.Node(acme.Admin.Token, "acme", pool)
		wf := must(t, e.Call(acme.Member.Token, "workflows/create", map[string]any{"tenantId": "acme", "nodeId": nodeID, "profileId": "gpu-node"})).Str("workflowId")
		// 16 × 12 calls stay within the credential's burst (200): none is
		// RATE_LIMITED, however long the removal takes on a loaded machine.
		const reporters, calls = 16, 12
		var wg sync.WaitGroup
		answers := make(chan string, reporters*calls)
		start := make(chan struct{})
		for g := 0; g < reporters; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for k := 0; k < calls; k++ {
					var r testkit.Resp
					if g%2 == 0 {
						r = e.Call(cred, "workflows/reportStep", map[string]any{"nodeId": nodeID, "workflowId": wf, "index": 0,
							"status": "running", "message": fmt.Sprint("report ", g, "/", k)})
					} else {
						r = e.Call(cred, "inventory/report", map[string]any{"nodeId": nodeID,
							"sections": map[string]any{"drivers": map[string]any{"nvidia": fmt.Sprint("570.", g, ".", k)}}})
					}
					if r.Status == 429 && strings.HasPrefix(r.Message(), "too many failed authentications") {
						// The revoked credential's 401s spend the address's
						// failed-authentication budget (all reporters share
						// 127.0.0.1): past it, a revoked call is 429.
						answers <- "401 UNAUTHENTICATED"
						return
					}
					answers <- fmt.Sprint(r.Status, " ", r.Code())
					if r.Status == 401 {
						return
					}
				}
			}()
		}
		close(start)
		rm := e.Call(acme.Admin.Token, "nodes/remove", map[string]any{"tenantId": "acme", "nodeId": nodeID})
		wg.Wait()
		close(answers)
		if rm.Status != 200 {
			t.Fatalf("round %d: nodes.remove while the node reports: %d %s", round, rm.Status, rm.Raw)
		}
		seen := map[string]int{}
		for a := range answers {
			seen[a]++
		}
		for a, n := range seen {
			if a != "200 " && a != "401 UNAUTHENTICATED" {
				t.Fatalf("round %d: %d reports answered %s (all: %v)", round, n, a, seen)
			}
		}
		got := must(t, e.Call(acme.Admin.Token, "workflows/get", map[string]any{"tenantId": "acme", "workflowId": wf}))
		if got.Str("state") != "failed" && got.Str("state") != "canceled" {
			t.Fatalf("round %d: the removed node's workflow is %s", round, got.Str("state"))
		}
		t.Logf("round %d: %v", round, seen)
	}
	// A deadlock is retried (store.DB.Tx), so the answers above can hide
	// one: PostgreSQL counts them. Its statistics reach the view when the
	// backends that counted them have been idle for up to 10 s.
	time.Sleep(11 * time.Second)
	if n := deadlocks() - before; n != 0 {
		t.Fatalf("%d deadlocks between the removals and the node's reports", n)
	}
}

// Instances created in a project while the project is deleted and the
// reconciler places the pool's pending instances: a create share-locked the
// pool's row and then waited for the project (behind its deletion), the
// deletion waited for an instance row a placement held, and the placement
// for the pool's row: a cycle PostgreSQL broke only after its deadlock
// timeout (a probe's rounds took 2–8 s, and some answered UNAVAILABLE). A
// create now holds the project before it locks the pool: authorities
// first, then rows. Every create is made or NOT_FOUND at projectId, every
// deletion but one NOT_FOUND, and PostgreSQL counts no deadlock.
func TestCreatingInAProjectBesidePlacementsWhileItIsDeleted(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t).RunReconciler()
	acme := newTenant(t, e, "acme")
	member := acme.Member.Token
	// A bounded pool (placements lock its row FOR UPDATE) with instances
	// that wait for room: the reconciler keeps trying to place them.
	pool := vpsPool(t, e, acme.Admin.Token, "acme", "vps", map[string]any{"capacity": map[string]any{"gpus": 2}})
	for k := 0; k < 6; k++ {
		must(t, e.Call(member, "instances/create", instanceIn("acme", pool, fmt.Sprint("waits-", k), 1)))
	}
	deadlocks := deadlockCount(t, e)
	before := deadlocks()
	for round := 0; round < 20; round++ {
		prj := newProject(t, e, member, "acme", fmt.Sprint("doomed-", round))
		var wg sync.WaitGroup
		answers := make(chan string, 32)
		start := make(chan struct{})
		for k := 0; k < 32; k++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				if k%4 == 3 {
					// after the first creates, into the placements of theirs
					time.Sleep(time.Duration(round%5*8+k%8) * time.Millisecond)
					r := e.Call(member, "projects/delete", map[string]any{"tenantId": "acme", "projectId": prj})
					answers <- fmt.Sprint("delete ", r.Status, " ", r.Code())
					return
				}
				in := instanceIn("acme", pool, fmt.Sprint("r", round, "-", k), 0)
				in["projectId"] = prj
				r := e.Call(member, "instances/create", in)
				answers <- fmt.Sprint("create ", r.Status, " ", r.Code(), " ", r.Path())
			}()
		}
		began := time.Now()
		close(start)
		wg.Wait()
		close(answers)
		seen := map[string]int{}
		for a := range answers {
			seen[a]++
		}
		for a, n := range seen {
			switch a {
			case "create 200  ", "create 404 NOT_FOUND projectId", "delete 404 NOT_FOUND":
			case "delete 200 ":
				if n != 1 {
					t.Fatalf("round %d: %d deletions of one project succeeded", round, n)
				}
			default:
				t.Fatalf("round %d: %d answered %s (all: %v)", round, n, a, seen)
			}
		}
		t.Logf("round %d: %v in %v", round, seen, time.Since(began))
	}
	// A deadlock is retried (store.DB.Tx), so the answers above can hide
	// one; PostgreSQL's count reaches the view once its backends have been
	// idle for up to 10 s.
	time.Sleep(11 * time.Second)
	if n := deadlocks() - before; n != 0 {
		t.Fatalf("%d deadlocks between the creates, the deletions and the placements", n)
	}
}
