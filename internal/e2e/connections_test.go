package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bettercompute/computed/internal/events"
	"github.com/bettercompute/computed/internal/testkit"
)

// Issue 18: COMPUTE_DB_MAX_CONNS bounds every connection a replica opens.
// Three replicas with a budget of 10 each (3 listeners, /readyz's
// connection, 2 for the sim provider, a pool of 4) under load that needs more than that at once
// (concurrent queries, instances reconciling through the sim provider):
// pg_stat_activity, sampled throughout, never shows a replica holding more
// than 10 connections, nor a role more than its share; each replica's
// connections are named by replica and role (application_name).
func TestConnectionBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the server binary")
	}
	t.Parallel()
	e := testkit.StartDB(t)
	const token = "bco_connections-operator"
	share := map[string]int{"pool": 4, "health": 1, "river": 1, "computed-events-listener": 1, events.ListenerName: 1, "sim": 2}
	var rs []*replica
	for i := 1; i <= 3; i++ {
		rs = append(rs, startReplica(t, e.DB.URL, token, "COMPUTE_DB_MAX_CONNS=10", fmt.Sprintf("COMPUTE_REPLICA_NAME=r%d", i),
			"COMPUTE_RECONCILE_WORKERS=3"))
	}
	a := rs[0]
	a.call(t, token, "tenants/create", map[string]any{"tenantId": "acme", "name": "Acme"})
	_, tok := a.call(t, token, "tokens/create", map[string]any{"tenantId": "acme", "name": "ops", "role": "admin"})
	admin := tok["secret"].(string)
	_, p := a.call(t, admin, "pools/create", map[string]any{"tenantId": "acme", "name": "vps", "site": "fra1", "gpuModel": "H100",
		"sharingMode": "exclusive", "kind": "vps-provider", "policy": map[string]any{"sim": map[string]any{"latencyMs": 20}}})
	pool := p["poolId"].(string)

	// Sample pg_stat_activity until the load ends.
	type sample map[string]map[string]int // replica -> role -> connections
	var samples []sample
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			rows, err := e.DB.QueryContext(context.Background(), `SELECT application_name, count(*) FROM pg_stat_activity
				WHERE datname = current_database() AND application_name LIKE 'computed/%' GROUP BY 1`)
			if err != nil {
				t.Error(err)
				return
			}
			s := sample{}
			for rows.Next() {
				var name string
				var n int
				_ = rows.Scan(&name, &n)
				parts := strings.SplitN(name, "/", 3)
				if s[parts[1]] == nil {
					s[parts[1]] = map[string]int{}
				}
				role := parts[2]
				if role == events.SequencerName {
					role = "pool" // a pool connection names itself during an event sequencer pass
				}
				s[parts[1]][role] += n
			}
			rows.Close()
			samples = append(samples, s)
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()

	var wg sync.WaitGroup
	ids := make(chan string, 30)
	for k := 0; k < 30; k++ {
		wg.Add(1)
		go func(k int) {
			defer wg.Done()
			_, out := rs[k%3].call(t, admin, "instances/create", instanceIn("acme", pool, fmt.Sprintf("i-%d", k), 1))
			ids <- out["instanceId"].(string)
		}(k)
	}
	q, _ := json.Marshal(map[string]any{"query": `{ tenant(tenantId: "acme") { pools(first: 5) { edges { node { name instances(first: 50) { totalCount edges { node { name state } } } } } } } }`})
	for g := 0; g < 40; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 4; i++ {
				req, _ := http.NewRequest(http.MethodPost, "http://"+rs[(g+i)%3].addr+"/graphql", bytes.NewReader(q))
				req.Header.Set("Authorization", "Bearer "+admin)
				req.Header.Set("Content-Type", "application/json")
				if res, err := http.DefaultClient.Do(req); err == nil {
					res.Body.Close()
				}
			}
		}(g)
	}
	wg.Wait()
	close(ids)
	var all []string
	for id := range ids {
		all = append(all, id)
	}
	waitAll(t, e, all, "running", 60*time.Second)
	close(stop)
	<-sampled

	maxTotal, maxRole := map[string]int{}, map[string]int{}
	for _, s := range samples {
		for r, roles := range s {
			total := 0
			for role, n := range roles {
				total += n
				maxRole[role] = max(maxRole[role], n)
				if want, ok := share[role]; !ok || n > want {
					t.Fatalf("replica %s: %d connections as %q (share %d): %v", r, n, role, want, s)
				}
			}
			maxTotal[r] = max(maxTotal[r], total)
			if total > 10 {
				t.Fatalf("replica %s holds %d connections, over its budget of 10: %v", r, total, roles)
			}
		}
	}
	t.Logf("%d samples; most connections per replica %v; most per role %v", len(samples), maxTotal, maxRole)
	if len(maxTotal) != 3 || maxRole["pool"] < 4 || maxRole["river"] != 1 || maxRole["computed-events-listener"] != 1 ||
		maxRole[events.ListenerName] != 1 || maxRole["sim"] < 1 {
		t.Fatalf("the load did not use the budget (per replica %v, per role %v)", maxTotal, maxRole)
	}
}
