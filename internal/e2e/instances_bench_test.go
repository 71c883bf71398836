package e2e

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bettercompute/computed/internal/store"
	"github.com/bettercompute/computed/internal/testkit"
	"github.com/bettercompute/computed/internal/testkit/wait"
)

// BenchmarkInstances1000ToRunning: 1000 instances created at once (32
// concurrent clients) in a sim pool with zero latency; reports seconds until
// all are running, events written per second, and the SQL statements the
// reconciler sends per state transition (creates' own statements and the
// benchmark's polling excluded).
func BenchmarkInstances1000ToRunning(b *testing.B) {
	e := testkit.Start(b).RunReconciler()
	admin, member, _ := e.Tenant("acme")
	const n, clients = 1000, 32
	var secs, evps, perTransition float64
	for it := 0; it < b.N; it++ {
		pool := e.Must(e.Call(admin, "pools/create", map[string]any{"tenantId": "acme", "name": fmt.Sprintf("bench-%d", it), "site": "fra1",
			"gpuModel": "H100", "sharingMode": "exclusive", "kind": "vps-provider"})).Str("poolId")
		var evBefore int
		_ = e.DB.QueryRow(`SELECT count(*) FROM events`).Scan(&evBefore)
		b.ResetTimer()
		start := time.Now()
		stmtBefore := store.TotalStatements()
		var createStmts, pollStmts atomic.Int64
		var next atomic.Int64
		var wg sync.WaitGroup
		for c := 0; c < clients; c++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					k := next.Add(1)
					if k > n {
						return
					}
					r := e.Call(member, "instances/create", map[string]any{"tenantId": "acme", "poolId": pool,
						"name": fmt.Sprintf("b%d-%d", it, k), "size": map[string]any{"gpus": 1, "vcpus": 2, "memoryGiB": 4}})
					if r.Status != 200 {
						b.Errorf("create: %s", r.Raw)
						return
					}
					createStmts.Add(e.Statements(r))
				}
			}()
		}
		wg.Wait()
		created := time.Since(start)
		wait.Eventually(b, 2*time.Minute-time.Since(start), func() error {
			var running int
			pollStmts.Add(1)
			if err := e.DB.QueryRow(`SELECT count(*) FROM instances WHERE pool_id = $1 AND state = 'running'`, pool).Scan(&running); err != nil {
				b.Fatal(err)
			}
			if running != n {
				return fmt.Errorf("%d of %d running", running, n)
			}
			return nil
		})
		elapsed := time.Since(start)
		b.StopTimer()
		stmts := store.TotalStatements() - stmtBefore - createStmts.Load() - pollStmts.Load()
		var evAfter int
		_ = e.DB.QueryRow(`SELECT count(*) FROM events`).Scan(&evAfter)
		secs = elapsed.Seconds()
		evps = float64(evAfter-evBefore) / elapsed.Seconds()
		perTransition = float64(stmts) / float64(2*n)
		b.Logf("%d instances: created in %s, all running after %s; %d events; %d statements for %d transitions (%.1f each), creates %.1f statements each",
			n, created.Round(time.Millisecond), elapsed.Round(time.Millisecond), evAfter-evBefore, stmts, 2*n, perTransition,
			float64(createStmts.Load())/n)
	}
	b.ReportMetric(secs, "s-to-all-running")
	b.ReportMetric(evps, "events/s")
	b.ReportMetric(perTransition, "statements/transition")
}
