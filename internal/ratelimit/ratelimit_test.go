package ratelimit_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bettercompute/computed/internal/ratelimit"
	"github.com/bettercompute/computed/internal/testkit"
	"github.com/bettercompute/computed/internal/testkit/wait"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// Three replicas' limiters on one database, eight goroutines each asking as
// fast as they can: together they admit exactly the burst (the refill is
// negligible), never more; and far fewer leases than admissions.
func TestBurstIsSharedExactly(t *testing.T) {
	t.Parallel()
	db := testkit.DB(t)
	cfg := ratelimit.Config{Scope: "requests", Rate: 0.001, Burst: 200, MinBatch: 2, Prefetch: true}
	var ls []*ratelimit.Limiter
	for i := 0; i < 3; i++ {
		ls = append(ls, ratelimit.New(db, cfg, nil))
	}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for _, l := range ls {
		for g := 0; g < 8; g++ {
			wg.Add(1)
			go func(l *ratelimit.Limiter) {
				defer wg.Done()
				for i := 0; i < 150; i++ {
					if ok, _ := l.Allow(context.Background(), "tok_a", 1); ok {
						admitted.Add(1)
					}
				}
			}(l)
		}
	}
	wg.Wait()
	leases := ls[0].Leases() + ls[1].Leases() + ls[2].Leases()
	t.Logf("admitted %d with %d leases", admitted.Load(), leases)
	if admitted.Load() != 200 {
		t.Fatalf("admitted %d, want the burst of 200", admitted.Load())
	}
	if leases*3 > admitted.Load() {
		t.Fatalf("%d leases for %d admissions: batches do not form", leases, admitted.Load())
	}
	// Another key has its own bucket.
	if ok, _ := ls[1].Allow(context.Background(), "tok_b", 1); !ok {
		t.Fatal("another key was refused")
	}
}

// Tokens a replica leased and stopped using go back to the shared bucket:
// after replica A took a batch and went quiet, B can spend the whole burst.
func TestIdleLeasesGoBack(t *testing.T) {
	t.Parallel()
	db := testkit.DB(t)
	cfg := ratelimit.Config{Scope: "requests", Rate: 0.001, Burst: 40, MinBatch: 5, MaxBatch: 5, Prefetch: true, IdleReturn: 200 * time.Millisecond}
	a, b := ratelimit.New(db, cfg, nil), ratelimit.New(db, cfg, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go a.Run(ctx)
	if ok, _ := a.Allow(ctx, "k", 1); !ok {
		t.Fatal("first call refused")
	}
	// A holds up to 9 tokens (a batch and its prefetch); wait for it to
	// give them back.
	wait.Eventually(t, 10*time.Second, func() error {
		var tokens float64
		if err := db.GetContext(ctx, &tokens, `SELECT tokens FROM rate_buckets WHERE scope = 'requests' AND key = 'k'`); err != nil {
			t.Fatal(err)
		}
		if tokens >= 38.9 {
			return nil
		}
		return fmt.Errorf("replica A kept its lease: the bucket holds %.1f", tokens)
	})
	n := 0
	for i := 0; i < 60; i++ {
		if ok, _ := b.Allow(ctx, "k", 1); ok {
			n++
		}
	}
	if n != 39 {
		t.Fatalf("replica B spent %d, want the 39 left", n)
	}
}

// While the database does not answer, a key is limited by this replica's
// own bucket, and the shared one is used again once it answers.
func TestUnreachableFallsBackPerReplica(t *testing.T) {
	t.Parallel()
	db := testkit.DB(t)
	l := ratelimit.New(db, ratelimit.Config{Scope: "requests", Rate: 0.001, Burst: 10, MaxBatch: 1}, nil)
	if _, err := db.ExecContext(context.Background(), `ALTER TABLE rate_buckets RENAME TO rate_buckets_gone`); err != nil {
		t.Fatal(err)
	}
	n := 0
	for i := 0; i < 20; i++ {
		if ok, _ := l.Allow(context.Background(), "k", 1); ok {
			n++
		}
	}
	if n != 10 {
		t.Fatalf("per-replica fallback admitted %d of 20, want its burst of 10", n)
	}
	if _, err := db.ExecContext(context.Background(), `ALTER TABLE rate_buckets_gone RENAME TO rate_buckets`); err != nil {
		t.Fatal(err)
	}
	wait.Eventually(t, 5*time.Second, func() error {
		ok, _ := l.Allow(context.Background(), fmt.Sprint("fresh-", time.Now().UnixNano()), 1)
		if ok && l.Leases() > 0 {
			return nil
		}
		return fmt.Errorf("the shared bucket was not used again")
	})
}

// A call that needs more than one token is told to wait until the bucket
// will have refilled that much: it was told the wait of the one-token call
// that had found the bucket dry (1 s where 2 were needed), and a client that
// waited as told was refused again (a helper's probe: a GraphQL query
// charged 10 at 5 a second).
func TestRetryAfterCoversTheCharge(t *testing.T) {
	t.Parallel()
	l := ratelimit.New(testkit.DB(t), ratelimit.Config{Scope: "requests", Rate: 5, Burst: 10}, nil)
	ctx := context.Background()
	for i := 0; ; i++ {
		if ok, _ := l.Allow(ctx, "k", 1); !ok {
			break
		}
		if i > 100 {
			t.Fatal("the bucket never ran dry")
		}
	}
	if ok, d := l.Allow(ctx, "k", 10); ok || d < 1500*time.Millisecond {
		t.Fatalf("10 tokens of a dry bucket refilling 5 a second: allowed %v, wait %v", ok, d)
	}
	if ok, d := l.Allow(ctx, "k", 1); ok || d > time.Second {
		t.Fatalf("1 token of the same bucket: allowed %v, wait %v", ok, d)
	}
}
