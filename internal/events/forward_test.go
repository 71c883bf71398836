package events_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/bettercompute/computed/internal/events"
	"github.com/bettercompute/computed/internal/store"
	"github.com/bettercompute/computed/internal/testkit"
	"github.com/bettercompute/computed/internal/testkit/wait"
)

// replica opens a handle on url as another replica would, with its own
// sequencer.
func replica(t *testing.T, dbURL, name string) (*store.DB, *events.Sequencer) {
	t.Helper()
	d, err := store.OpenWith(context.Background(), dbURL, store.Options{Replica: name})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	seq := events.Start(d, slog.New(slog.NewTextHandler(io.Discard, nil)))
	t.Cleanup(seq.Stop)
	return d, seq
}

// leads waits until seq holds the sequencer lease.
func leads(t *testing.T, seq *events.Sequencer, within time.Duration) {
	t.Helper()
	wait.Eventually(t, within, func() error {
		if !seq.Leading() {
			return fmt.Errorf("the sequencer does not hold the lease")
		}
		return nil
	})
}

// forwards writes through its replica (write) until seq has forwarded a
// batch to the leader: once its listener is up and it saw the lease held.
func forwards(t *testing.T, seq *events.Sequencer, write func() error) {
	t.Helper()
	wait.Eventually(t, 10*time.Second, func() error {
		if err := write(); err != nil {
			return err
		}
		if seq.Forwards() == 0 {
			return fmt.Errorf("the replica has not forwarded to the leader")
		}
		return nil
	})
}

// leaderBehindProxy starts replica a on a new database through a proxy
// the test can freeze (SIGSTOP, a partition), and waits until it leads.
func leaderBehindProxy(t *testing.T) (dbURL string, a *store.DB, seqA *events.Sequencer, proxy *testkit.Proxy) {
	t.Helper()
	dbURL = testkit.DBURL(t)
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	proxy = testkit.NewProxy(t, u.Host)
	a, seqA = replica(t, strings.Replace(dbURL, u.Host, proxy.Addr(), 1), "replica-a")
	t.Cleanup(proxy.Thaw) // first: let replica a's cleanups end
	leads(t, seqA, 10*time.Second)
	return dbURL, a, seqA, proxy
}

// TestReplicasForwardToTheLeader: of three replicas on one database, the
// sequencer holding the lease numbers every replica's events; the others
// forward their tenants to it. Writers on every replica commit events of
// the same tenants concurrently, with random delays; each client's Tx
// returns only once its events are readable, from any replica, and every
// tenant's stream is 1, 2, 3, ... with each committed event once. Then
// the leader shuts down mid-stream: another sequencer takes the lease and
// no write is lost or left unreadable at its return.
func TestReplicasForwardToTheLeader(t *testing.T) {
	dbURL := testkit.DBURL(t)
	ctx := store.ForRequest(context.Background())
	a, seqA := replica(t, dbURL, "replica-a")
	leads(t, seqA, 10*time.Second)
	b, seqB := replica(t, dbURL, "replica-b")
	c, seqC := replica(t, dbURL, "replica-c")
	reps := []*store.DB{a, b, c}
	tenants := []string{"acme", "globex"}

	var mu sync.Mutex
	committed := map[string]bool{}
	// write commits one event through replica r and checks, at once, that
	// a replica it did not write through reads it.
	write := func(r int, name string, rnd *rand.Rand) error {
		tenant := tenants[rnd.IntN(len(tenants))]
		if err := reps[r].Tx(ctx, func(tx *sqlx.Tx) error {
			if err := write(ctx, tx, tenant, name); err != nil {
				return err
			}
			if rnd.IntN(4) == 0 {
				time.Sleep(time.Duration(rnd.IntN(15)) * time.Millisecond)
			}
			if rnd.IntN(12) == 0 {
				// A commit that takes longer than the commit margin after
				// its event's insert: its replica passes the tenant's
				// whole inbox itself, forwarding or not.
				return store.ExecAtCommit(ctx, tx, `SELECT pg_sleep(0.3)`)
			}
			return nil
		}); err != nil {
			return err
		}
		var n int
		if err := reps[(r+1)%len(reps)].Get(&n, `SELECT count(*) FROM events WHERE tenant_id = $1 AND resource_id = $2`, tenant, name); err != nil {
			return err
		}
		if n != 1 {
			return fmt.Errorf("%s: %d events readable when its write returned", name, n)
		}
		mu.Lock()
		committed[name] = true
		mu.Unlock()
		return nil
	}
	run := func(phase string, replicas []int, per int) {
		var wg sync.WaitGroup
		for _, r := range replicas {
			for w := 0; w < 4; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rnd := rand.New(rand.NewPCG(uint64(r), uint64(w)))
					for i := 0; i < per; i++ {
						if err := write(r, fmt.Sprintf("%s-r%d-w%d-%d", phase, r, w, i), rnd); err != nil {
							t.Error(err)
							return
						}
					}
				}()
			}
		}
		wg.Wait()
	}
	// b and c forward once their listeners are up and they saw the lease
	// held.
	for r, seq := range map[int]*events.Sequencer{1: seqB, 2: seqC} {
		rnd := rand.New(rand.NewPCG(uint64(r), 99))
		i := 0
		forwards(t, seq, func() error {
			i++
			return write(r, fmt.Sprintf("warm-r%d-%d", r, i), rnd)
		})
	}
	fb, fc := seqB.Forwards(), seqC.Forwards()
	wholes := seqA.Wholes() + seqB.Wholes() + seqC.Wholes()
	run("led", []int{0, 1, 2}, 25)
	if t.Failed() {
		return
	}
	if seqA.Wholes()+seqB.Wholes()+seqC.Wholes() == wholes {
		t.Fatal("no pass read an inbox whole after the slow commits")
	}
	if seqB.Forwards() == fb || seqC.Forwards() == fc {
		t.Fatalf("replicas b and c forwarded %d and %d batches to the leader while writing", seqB.Forwards()-fb, seqC.Forwards()-fc)
	}
	if seqB.Leading() || seqC.Leading() {
		t.Fatal("two sequencers lead")
	}

	// The leader shuts down while b and c write: one of them takes the
	// lease (the leader gives it up as it stops).
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		run("handover", []int{1, 2}, 25)
	}()
	time.Sleep(50 * time.Millisecond)
	seqA.Stop()
	wg.Wait()
	wait.Eventually(t, 10*time.Second, func() error {
		if !seqB.Leading() && !seqC.Leading() {
			return fmt.Errorf("nobody took the lease over")
		}
		return nil
	})
	run("after", []int{1, 2}, 10)
	if t.Failed() {
		return
	}

	// Every tenant's stream: 1, 2, 3, ..., each committed event once.
	seen := map[string]bool{}
	for _, tenant := range tenants {
		var after uint64
		for {
			page, err := events.Page(ctx, b, events.Filter{TenantID: tenant}, after, 100)
			if err != nil {
				t.Fatal(err)
			}
			if len(page) == 0 {
				break
			}
			for _, e := range page {
				if e.Seq != after+1 {
					t.Fatalf("%s: event %d after %d", tenant, e.Seq, after)
				}
				if seen[e.ResourceID] || !committed[e.ResourceID] {
					t.Fatalf("%s: event %s seen twice or never committed", tenant, e.ResourceID)
				}
				seen[e.ResourceID] = true
				after = e.Seq
			}
		}
	}
	if len(seen) != len(committed) {
		t.Fatalf("read %d events of %d committed", len(seen), len(committed))
	}
}

// TestFrozenLeader: the leader stops answering (SIGSTOP, a partition),
// its lease still unexpired. A forwarder's writes go unacknowledged; it
// numbers them itself after forwardWait, so its clients' writes still
// return readable, and it takes the lease once the frozen one's expires.
func TestFrozenLeader(t *testing.T) {
	ctx := store.ForRequest(context.Background())
	dbURL, _, _, proxy := leaderBehindProxy(t)
	b, seqB := replica(t, dbURL, "replica-b")
	// b forwards once its listener is up and it saw the lease held.
	i := 0
	forwards(t, seqB, func() error {
		i++
		return b.Tx(ctx, func(tx *sqlx.Tx) error { return write(ctx, tx, "acme", fmt.Sprint("warm-", i)) })
	})
	proxy.Freeze()
	for k := 0; k < 20; k++ {
		name := fmt.Sprint("frozen-", k)
		if err := b.Tx(ctx, func(tx *sqlx.Tx) error { return write(ctx, tx, "acme", name) }); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := b.Get(&n, `SELECT count(*) FROM events WHERE tenant_id = 'acme' AND resource_id = $1`, name); err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			t.Fatalf("%s: %d events readable when its write returned, the leader frozen", name, n)
		}
	}
	leads(t, seqB, 15*time.Second) // the frozen leader's lease expired
}

// TestLeaderLeavingTellsItsForwarders: a leader that shuts down (a rolling
// deploy) tells the forwarders, which number their tenants themselves at
// once until one of them holds the lease: none of their forwards waits out
// the acknowledgement it will not get, and every write still returns
// readable.
func TestLeaderLeavingTellsItsForwarders(t *testing.T) {
	dbURL := testkit.DBURL(t)
	ctx := store.ForRequest(context.Background())
	_, seqA := replica(t, dbURL, "replica-a")
	leads(t, seqA, 10*time.Second)
	b, seqB := replica(t, dbURL, "replica-b")
	i := 0
	writeB := func() error {
		i++
		name := fmt.Sprint("w-", i)
		if err := b.Tx(ctx, func(tx *sqlx.Tx) error { return write(ctx, tx, "acme", name) }); err != nil {
			return err
		}
		var n int
		if err := b.Get(&n, `SELECT count(*) FROM events WHERE tenant_id = 'acme' AND resource_id = $1`, name); err != nil {
			return err
		}
		if n != 1 {
			return fmt.Errorf("%s: %d events readable when its write returned", name, n)
		}
		return nil
	}
	forwards(t, seqB, writeB)
	before := seqB.Unanswered()
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		time.Sleep(20 * time.Millisecond)
		seqA.Stop()
	}()
	// b writes through the hand-over until it leads.
	for !seqB.Leading() {
		if err := writeB(); err != nil {
			t.Fatal(err)
		}
	}
	<-stopped
	if n := seqB.Unanswered() - before; n != 0 {
		t.Fatalf("%d forwards waited out their acknowledgement across the leader's shutdown", n)
	}
}

// TestLeaderWithoutItsListenerStepsDown: a leader whose LISTEN connection
// is down cannot hear forwards (its forwarders would wait out every
// acknowledgement and number locally, again and again); it gives the
// lease up, and a replica that hears takes it. Here the leader's listener
// is terminated as often as it reconnects.
func TestLeaderWithoutItsListenerStepsDown(t *testing.T) {
	dbURL := testkit.DBURL(t)
	a, seqA := replica(t, dbURL, "replica-a")
	leads(t, seqA, 10*time.Second)
	_, seqB := replica(t, dbURL, "replica-b")
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			_, _ = a.Exec(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1`, a.AppName(events.ListenerName))
		}
	}()
	defer func() { close(stop); <-done }()
	leads(t, seqB, 15*time.Second)
	if seqA.Leading() {
		t.Fatal("two sequencers lead")
	}
}
