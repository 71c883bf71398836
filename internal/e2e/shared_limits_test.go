package e2e

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bettercompute/computed/internal/server"
	"github.com/bettercompute/computed/internal/testkit"
)

// flood sends requests round-robin over the replicas from several
// goroutines for d, and on until the first 429 (at most 5d: on a loaded
// machine four clients may send slower than the rate, and a flood that
// never reached the limit proves nothing), and counts the answers that
// were not 429.
func flood(t *testing.T, urls []string, path, token string, d time.Duration) (admitted, refused int64, elapsed time.Duration) {
	t.Helper()
	var ok, limited atomic.Int64
	var next atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Since(start) < d || limited.Load() == 0 && time.Since(start) < 5*d {
				u := urls[int(next.Add(1))%len(urls)]
				req, _ := http.NewRequest(http.MethodPost, u+path, bytes.NewReader([]byte(`{"tenantId":"acme"}`)))
				if token != "" {
					req.Header.Set("Authorization", "Bearer "+token)
				}
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				res.Body.Close()
				if res.StatusCode == 429 {
					limited.Add(1)
				} else {
					ok.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return ok.Load(), limited.Load(), time.Since(start)
}

// Issue 18: the limits hold across replicas. With 1, 2 and 3 replicas on
// one database, a credential calling all of them round-robin, as fast as
// it can, gets its rate and burst (not N times them); so do the failed
// authentications of one address and the anonymous calls of one address,
// each at most 15% over burst + rate × time, and at least 60% of it (the
// measurement at the documented values is in docs/scaling.md).
func TestLimitsHoldAcrossReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("floods several servers for seconds")
	}
	t.Parallel()
	cfg := server.Config{RatePerSecond: 20, RateBurst: 40, AuthFailures: 4, AuthFailureBurst: 20}
	const d = 2 * time.Second
	for n := 1; n <= 3; n++ {
		first := testkit.StartWith(t, testkit.Options{Config: cfg})
		urls := []string{first.Server.URL}
		for i := 1; i < n; i++ {
			urls = append(urls, testkit.StartWith(t, testkit.Options{Config: cfg, DatabaseURL: first.DB.URL}).Server.URL)
		}
		admin, _, _ := first.Tenant("acme")
		type result struct {
			name        string
			ok, refused int64
			elapsed     time.Duration
			rate, burst float64
		}
		results := make([]result, 3)
		var wg sync.WaitGroup
		for i, c := range []struct {
			name, token string
			rate, burst float64
		}{
			{"credential", admin, cfg.RatePerSecond, float64(cfg.RateBurst)},
			{"failed authentications", "bct_unknown", cfg.AuthFailures, float64(cfg.AuthFailureBurst)},
			{"anonymous", "", cfg.RatePerSecond, float64(cfg.RateBurst)},
		} {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				ok, refused, el := flood(t, urls, "/api/compute/tenants/get", c.token, d)
				results[i] = result{c.name, ok, refused, el, c.rate, c.burst}
			}(i)
		}
		wg.Wait()
		for _, r := range results {
			want := r.burst + r.rate*r.elapsed.Seconds()
			t.Logf("%d replicas, %s: %d admitted, %d refused in %s; burst + rate x time = %.0f (%.2fx)", n, r.name, r.ok, r.refused,
				r.elapsed.Round(time.Millisecond), want, float64(r.ok)/want)
			if r.refused == 0 {
				t.Fatalf("%d replicas, %s: never limited (the flood did not reach the limit)", n, r.name)
			}
			// The limit must not multiply with the replicas: at most 15%
			// over. Under it is the tokens still in the shared bucket when
			// the flood stops (a lease's round trip of refill), more on a
			// loaded machine: 61 of 80 once, with a probe and the other
			// tests running (load average 9).
			if float64(r.ok) > 1.15*want || float64(r.ok) < 0.6*want {
				t.Fatalf("%d replicas, %s: %d admitted, want %.0f (at most 15%% over, at least 60%%)", n, r.name, r.ok, want)
			}
		}
	}
}

// TestMeasureLimitsAtDocumentedValues measures the limits at their
// documented values (100 requests/s, burst 200; 2 failed authentications/s,
// burst 20) with 1, 2 and 3 `computed serve` processes on one database,
// for docs/scaling.md: a 6 s flood round-robin over the replicas, and a
// client at 80 requests/s (under its limit), with the leases the replicas
// took. It takes about a minute: COMPUTE_MEASURE_LIMITS=1 runs it.
func TestMeasureLimitsAtDocumentedValues(t *testing.T) {
	if os.Getenv("COMPUTE_MEASURE_LIMITS") == "" {
		t.Skip("a measurement: COMPUTE_MEASURE_LIMITS=1")
	}
	const d = 6 * time.Second
	for n := 1; n <= 3; n++ {
		e := testkit.StartDB(t)
		var urls []string
		var rs []*replica
		for i := 0; i < n; i++ {
			r := startReplica(t, e.DB.URL, testkit.OperatorToken, "COMPUTE_RATE_LIMIT=100")
			rs = append(rs, r)
			urls = append(urls, "http://"+r.addr)
		}
		rs[0].call(t, testkit.OperatorToken, "tenants/create", map[string]any{"tenantId": "acme", "name": "Acme"})
		_, tok := rs[0].call(t, testkit.OperatorToken, "tokens/create", map[string]any{"tenantId": "acme", "name": "ops", "role": "admin"})
		admin := tok["secret"].(string)
		_, tok = rs[0].call(t, testkit.OperatorToken, "tokens/create", map[string]any{"tenantId": "acme", "name": "steady", "role": "admin"})
		steady := tok["secret"].(string)
		leases := func() float64 {
			s := 0.0
			for _, r := range rs {
				s += metric(t, r.addr, "compute_rate_leases_total")
			}
			return s
		}
		for _, c := range []struct {
			name, token string
			rate, burst float64
		}{{"credential", admin, 100, 200}, {"failed authentications", "bct_unknown", 2, 20}, {"anonymous", "", 100, 200}} {
			l0 := leases()
			ok, refused, el := flood(t, urls, "/api/compute/tenants/get", c.token, d)
			want := c.burst + c.rate*el.Seconds()
			t.Logf("%d replicas, %s: %d admitted, %d refused in %s; burst + rate x time = %.0f (%.3fx); request leases %.0f",
				n, c.name, ok, refused, el.Round(time.Millisecond), want, float64(ok)/want, leases()-l0)
		}
		// A client under its limit: 80 requests/s paced, round-robin.
		l0 := leases()
		var ok, limited int
		start := time.Now()
		for i := 0; i < 480; i++ {
			time.Sleep(time.Until(start.Add(time.Duration(i) * time.Second / 80)))
			req, _ := http.NewRequest(http.MethodPost, urls[i%n]+"/api/compute/tenants/get", bytes.NewReader([]byte(`{"tenantId":"acme"}`)))
			req.Header.Set("Authorization", "Bearer "+steady)
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode == 429 {
				limited++
			} else {
				ok++
			}
		}
		t.Logf("%d replicas, 80 requests/s for 6 s: %d admitted, %d refused; %.0f leases (%.3f per request)", n, ok, limited, leases()-l0, (leases()-l0)/480)
		// The burst at once: 200 requests fired together round-robin by a
		// credential that was quiet (each round a fresh one).
		for round := 0; round < 3; round++ {
			_, tok = rs[0].call(t, testkit.OperatorToken, "tokens/create", map[string]any{"tenantId": "acme", "name": fmt.Sprint("burst-", round), "role": "admin"})
			secret := tok["secret"].(string)
			var admitted atomic.Int64
			var wg sync.WaitGroup
			gate := make(chan struct{})
			for i := 0; i < 200; i++ {
				wg.Add(1)
				go func(i int) {
					defer wg.Done()
					req, _ := http.NewRequest(http.MethodPost, urls[i%n]+"/api/compute/tenants/get", bytes.NewReader([]byte(`{"tenantId":"acme"}`)))
					req.Header.Set("Authorization", "Bearer "+secret)
					<-gate
					res, err := http.DefaultClient.Do(req)
					if err != nil {
						t.Error(err)
						return
					}
					res.Body.Close()
					if res.StatusCode != 429 {
						admitted.Add(1)
					}
				}(i)
			}
			close(gate)
			wg.Wait()
			t.Logf("%d replicas, a burst of 200 requests at once (round %d): %d admitted", n, round+1, admitted.Load())
		}
	}
}
