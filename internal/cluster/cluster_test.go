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
	dead.RenewNow(context.Background())
	if !dead.Holding() {
		t.Fatal("the first replica did not take the free lease")
	}
	dead.Die()
	alive := cluster.New(db, "maintenance", "alive", nil)
	alive.TTL = 500 * time.Millisecond
	alive.RenewNow(context.Background())
	if alive.Holding() {
		t.Fatal("took a lease that has not expired")
	}
	start := time.Now()
	waitFor(t, "the lease to expire", func() bool { alive.RenewNow(context.Background()); return alive.Holding() })
	t.Logf("taken over %s after the holder died (TTL 500 ms)", time.Since(start).Round(time.Millisecond))
}

// A replica not eligible (its Eligible says no) neither takes a free lease
// nor keeps one: a holder that becomes ineligible gives the lease up and
// another replica takes it; once eligible again it may take it back only
// when it is free. HeldElsewhere tells each what the other holds.
func TestIneligibleReplicaGivesTheLeaseUp(t *testing.T) {
	t.Parallel()
	db := testkit.DB(t)
	ctx := context.Background()
	var aOK, bOK atomic.Bool
	a := cluster.New(db, "maintenance", "a", nil)
	a.Eligible = aOK.Load
	b := cluster.New(db, "maintenance", "b", nil)
	b.Eligible = bOK.Load
	a.RenewNow(ctx)
	if a.Holding() {
		t.Fatal("an ineligible replica took the free lease")
	}
	aOK.Store(true)
	a.RenewNow(ctx)
	if !a.Holding() {
		t.Fatal("an eligible replica did not take the free lease")
	}
	bOK.Store(true)
	b.RenewNow(ctx)
	if b.Holding() || !b.HeldElsewhere() {
		t.Fatalf("b holding %v, held elsewhere %v while a holds the lease", b.Holding(), b.HeldElsewhere())
	}
	aOK.Store(false)
	a.RenewNow(ctx) // gives it up
	if a.Holding() {
		t.Fatal("an ineligible holder kept the lease")
	}
	b.RenewNow(ctx)
	if !b.Holding() {
		t.Fatal("the lease an ineligible holder gave up was not taken over at once")
	}
	aOK.Store(true)
	a.RenewNow(ctx)
	if a.Holding() || !a.HeldElsewhere() {
		t.Fatalf("a holding %v, held elsewhere %v while b holds the lease", a.Holding(), a.HeldElsewhere())
	}
}
