package e2e

import (
	"bytes"
	"math"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bettercompute/computed/internal/server"
	"github.com/bettercompute/computed/internal/testkit"
)

// flood sends requests round-robin over the replicas from several
// goroutines for d, and counts the answers that were not 429.
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
			for time.Since(start) < d {
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
// each within 15% of burst + rate × time (the measurement at the
// documented values is in docs/scaling.md).
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
			if math.Abs(float64(r.ok)-want) > 0.15*want {
				t.Fatalf("%d replicas, %s: %d admitted, want %.0f within 15%%", n, r.name, r.ok, want)
			}
		}
	}
}
