package cluster_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bettercompute/computed/internal/cluster"
	"github.com/bettercompute/computed/internal/testkit"
	"github.com/bettercompute/computed/internal/testkit/wait"
)

func TestMain(m *testing.M) { testkit.Main(m) }

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	wait.Eventually(t, 10*time.Second, func() error {
		if !cond() {
			return fmt.Errorf("waiting for %s", what)
		}
		return nil
	})
}

// Three replicas with the same duty: it runs on one of them at a time, as
// often as it is due once (not three times); when the holder shuts down
// another takes over at once.
func TestDutiesRunOncePerCluster(t *testing.T) {
	t.Parallel()
	db := testkit.DB(t)
	var runs atomic.Int64
	var ms []*cluster.Maintainer
	var stops []context.CancelFunc
	for i := 0; i < 3; i++ {
		m := cluster.New(db, "maintenance", fmt.Sprintf("replica-%d", i), nil)
		m.TTL = 600 * time.Millisecond
		m.Add("count", 100*time.Millisecond, func(context.Context) error { runs.Add(1); return nil })
		ctx, stop := context.WithCancel(context.Background())
		t.Cleanup(stop)
		go m.Run(ctx)
		ms, stops = append(ms, m), append(stops, stop)
	}
	holders := func() (n int, who int) {
		for i, m := range ms {
			if m.Holding() {
				n, who = n+1, i
			}
		}
		return n, who
	}
	waitFor(t, "a holder", func() bool { n, _ := holders(); return n == 1 })
	// Eight runs of a duty due every 100 ms take at least 700 ms when one
	// replica runs it; three replicas running it would take a third of that.
	runs.Store(0)
	start := time.Now()
	waitFor(t, "eight runs", func() bool { return runs.Load() >= 8 })
	if el := time.Since(start); el < 600*time.Millisecond {
		t.Fatalf("a duty due every 100 ms ran %d times in %s across three replicas", runs.Load(), el)
	}
	if n, _ := holders(); n != 1 {
		t.Fatalf("%d replicas hold the lease", n)
	}
	// A clean shutdown hands the lease over.
	_, first := holders()
	stops[first]()
	waitFor(t, "a new holder after a shutdown", func() bool { n, who := holders(); return n == 1 && who != first })
}

// A holder that dies without giving the lease up keeps it until the TTL:
// nobody else runs its duties twice meanwhile, then one replica does.
func TestDeadHolderIsTakenOverAfterTTL(t *testing.T) {
	t.Parallel()
	db := testkit.DB(t)
	dead := cluster.New(db, "maintenance", "dead", nil)
	dead.TTL = 500 * time.Millisecond
	dead.Renew(context.Background())
	if !dead.Holding() {
		t.Fatal("the first replica did not take the free lease")
	}
	dead.Die()
	alive := cluster.New(db, "maintenance", "alive", nil)
	alive.TTL = 500 * time.Millisecond
	alive.Renew(context.Background())
	if alive.Holding() {
		t.Fatal("took a lease that has not expired")
	}
	start := time.Now()
	waitFor(t, "the lease to expire", func() bool { alive.Renew(context.Background()); return alive.Holding() })
	t.Logf("taken over %s after the holder died (TTL 500 ms)", time.Since(start).Round(time.Millisecond))
}
