package live_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/events"
	"github.com/bettercompute/computed/internal/live"
	"github.com/bettercompute/computed/internal/store"
	"github.com/bettercompute/computed/internal/testkit"
	"github.com/bettercompute/computed/internal/testkit/wait"
)

func TestMain(m *testing.M) { testkit.Main(m) }

func write(t testing.TB, db *store.DB, tenant, pool, inst string, hold time.Duration) {
	// A client's request: Tx returns once the event is numbered.
	ctx := store.ForRequest(context.Background())
	err := db.Tx(ctx, func(tx *sqlx.Tx) error {
		if err := events.Write(ctx, tx, events.Record{Type: events.Running, TenantID: tenant, PoolID: pool,
			ResourceID: inst, Data: json.RawMessage(`{"state": "running", "desiredState": "running"}`)}); err != nil {
			return err
		}
		time.Sleep(hold) // transactions commit out of the order they wrote in
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}

// all reads the filter's events from the outbox once the writers are done.
func all(t testing.TB, db *store.DB, f events.Filter) []events.Event {
	var out []events.Event
	var pos uint64
	for {
		page, err := events.Page(context.Background(), db, f, pos, 1000)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, page...)
		if len(page) < 1000 {
			return out
		}
		pos = page[len(page)-1].Seq
	}
}

func collect(sub *live.Subscription, n int, within time.Duration) ([]*events.Event, error) {
	var got []*events.Event
	timeout := time.After(within)
	for len(got) < n {
		select {
		case ev, ok := <-sub.C:
			if !ok {
				return got, fmt.Errorf("ended after %d of %d: %v", len(got), n, sub.Err())
			}
			got = append(got, ev)
		case <-timeout:
			return got, fmt.Errorf("%d of %d within %s", len(got), n, within)
		}
	}
	return got, nil
}

func same(t *testing.T, name string, got []*events.Event, want []events.Event) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d events, want %d", name, len(got), len(want))
	}
	for i := range want {
		if got[i].EventID != want[i].EventID {
			t.Fatalf("%s: event %d is %s, want %s", name, i, got[i].EventID, want[i].EventID)
		}
	}
}

// Concurrent writers (some holding their transactions open) while
// subscribers join live, resume from a cursor at the replay/live switch,
// and filter by instance: each sees exactly the outbox's events of its
// filter after its start, in order, once. Run many rounds.
func TestSubscribersMissNothingAcrossTheSwitch(t *testing.T) {
	db := testkit.DB(t)
	hub := live.New(db, slog.New(slog.NewTextHandler(io.Discard, nil)), live.Config{Buffer: 64, Page: 7})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go hub.Run(ctx)
	for round := 0; round < 12; round++ {
		tenant := fmt.Sprintf("t%d", round)
		// A history before anyone subscribes.
		for i := 0; i < 20; i++ {
			write(t, db, tenant, "pool_a", fmt.Sprintf("inst_%d", i%3), 0)
		}
		history := all(t, db, events.Filter{TenantID: tenant})
		cursor := history[len(history)/2].Seq

		var wg sync.WaitGroup
		const writers, each = 6, 15
		start := make(chan struct{})
		var written atomic.Int32
		for w := 0; w < writers; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				<-start
				r := rand.New(rand.NewPCG(uint64(round), uint64(w)))
				for i := 0; i < each; i++ {
					write(t, db, tenant, []string{"pool_a", "pool_b"}[i%2], fmt.Sprintf("inst_%d", (w+i)%3), time.Duration(r.IntN(4))*time.Millisecond)
					written.Add(1)
				}
			}(w)
		}
		close(start)
		// Join while the writers write: once some of their events committed.
		wait.Eventually(t, 10*time.Second, func() error {
			if n := written.Load(); n < writers {
				return fmt.Errorf("the writers committed %d events", n)
			}
			return nil
		})
		resumed, err := hub.Subscribe(ctx, events.Filter{TenantID: tenant}, &cursor)
		if err != nil {
			t.Fatal(err)
		}
		one, err := hub.Subscribe(ctx, events.Filter{TenantID: tenant, ResourceID: "inst_1"}, new(uint64))
		if err != nil {
			t.Fatal(err)
		}
		pool, err := hub.Subscribe(ctx, events.Filter{TenantID: tenant, PoolID: "pool_b"}, new(uint64))
		if err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		final := all(t, db, events.Filter{TenantID: tenant})
		var after, ofOne, ofPool []events.Event
		for _, ev := range final {
			if cursor < ev.Seq {
				after = append(after, ev)
			}
			if ev.ResourceID == "inst_1" {
				ofOne = append(ofOne, ev)
			}
			if *ev.PoolID == "pool_b" {
				ofPool = append(ofPool, ev)
			}
		}
		for _, c := range []struct {
			name string
			sub  *live.Subscription
			want []events.Event
		}{{"resumed", resumed, after}, {"one instance", one, ofOne}, {"one pool", pool, ofPool}} {
			got, err := collect(c.sub, len(c.want), 10*time.Second)
			if err != nil {
				t.Fatalf("round %d %s: %v", round, c.name, err)
			}
			same(t, fmt.Sprintf("round %d %s", round, c.name), got, c.want)
			// Nothing more arrives.
			select {
			case ev := <-c.sub.C:
				t.Fatalf("round %d %s: an extra event %s", round, c.name, ev.EventID)
			case <-time.After(20 * time.Millisecond):
			}
			c.sub.Stop()
		}
	}
	if hub.Reads() == 0 {
		t.Fatal("no stream read")
	}
}

// Live from now: a subscriber without a cursor gets what is committed
// after it subscribed, not the history.
func TestLiveFromNow(t *testing.T) {
	db := testkit.DB(t)
	hub := live.New(db, slog.New(slog.NewTextHandler(io.Discard, nil)), live.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go hub.Run(ctx)
	write(t, db, "t", "p", "i", 0)
	sub, err := hub.Subscribe(ctx, events.Filter{TenantID: "t"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	write(t, db, "t", "p", "i2", 0)
	got, err := collect(sub, 1, 5*time.Second)
	if err != nil || got[0].ResourceID != "i2" {
		t.Fatalf("%v %v", got, err)
	}
}

// A subscriber that does not read is ended with an error naming the last
// event it was given, and the publisher never waits for it.
func TestSlowConsumerIsEnded(t *testing.T) {
	db := testkit.DB(t)
	hub := live.New(db, slog.New(slog.NewTextHandler(io.Discard, nil)), live.Config{Buffer: 4, Stall: 300 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go hub.Run(ctx)
	slow, _ := hub.Subscribe(ctx, events.Filter{TenantID: "t"}, nil)
	fast, _ := hub.Subscribe(ctx, events.Filter{TenantID: "t"}, nil)
	got := make(chan int)
	go func() {
		n := 0
		for range fast.C {
			n++
			if n == 40 {
				got <- n
			}
		}
	}()
	first := make(chan *events.Event, 1)
	go func() { first <- <-slow.C }() // reads one event, then stops reading
	for i := 0; i < 40; i++ {
		write(t, db, "t", "p", fmt.Sprint(i), 0)
	}
	select {
	case <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("the fast subscriber was held up by the slow one")
	}
	last := <-first
	// Without reading, until the hub ends it (after Stall).
	wait.Eventually(t, 10*time.Second, func() error {
		if slow.Err() == nil {
			return errors.New("the slow subscriber was not ended")
		}
		return nil
	})
	// What was handed to it before the end (a few events, its channel's
	// buffer), then the end: the error names the last of them, so a
	// resume from it loses nothing.
	handed := 0
	for {
		select {
		case ev, ok := <-slow.C:
			if ok {
				handed++
				last = ev
				continue
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the slow subscriber was not ended")
		}
		break
	}
	if handed > 8 {
		t.Fatalf("the slow subscriber held %d events: its buffer is not bounded", handed)
	}
	e, _ := errs.As(slow.Err())
	if e == nil || e.Details["reason"] != "slow-consumer" || e.Details["lastEventId"] != last.EventID {
		t.Fatalf("slow consumer ended with %v after %s", slow.Err(), last.EventID)
	}
}

// A subscriber that reads slower than events arrive falls behind the
// stream's ring (4 events here) and reads on from the outbox: it still gets
// every event once, in order, while a fast one is never held up.
func TestBehindTheRingCatchesUpFromTheOutbox(t *testing.T) {
	db := testkit.DB(t)
	hub := live.New(db, slog.New(slog.NewTextHandler(io.Discard, nil)), live.Config{Buffer: 4, Page: 5})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go hub.Run(ctx)
	slow, _ := hub.Subscribe(ctx, events.Filter{TenantID: "t"}, nil)
	fast, _ := hub.Subscribe(ctx, events.Filter{TenantID: "t"}, nil)
	var wg sync.WaitGroup
	const n = 60
	for w := 0; w < 3; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < n/3; i++ {
				write(t, db, "t", "p", fmt.Sprintf("i%d-%d", w, i), 0)
			}
		}(w)
	}
	gotFast, err := collect(fast, n, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var gotSlow []*events.Event
	for len(gotSlow) < n {
		select {
		case ev := <-slow.C:
			gotSlow = append(gotSlow, ev)
			time.Sleep(5 * time.Millisecond)
		case <-time.After(10 * time.Second):
			t.Fatalf("the slow subscriber got %d of %d", len(gotSlow), n)
		}
	}
	wg.Wait()
	want := all(t, db, events.Filter{TenantID: "t"})
	same(t, "fast", gotFast, want)
	same(t, "slow", gotSlow, want)
	if hub.CatchUps() == 0 {
		t.Fatal("the slow subscriber never fell behind the ring: the test proves nothing")
	}
}

// A lost LISTEN connection (a PostgreSQL restart, a terminated backend) is
// noticed and reopened; the streams then read what was committed while it
// was down. The fallback poll is off here, so only the reconnect delivers.
func TestListenerReconnectsAndCatchesUp(t *testing.T) {
	db := testkit.DB(t)
	hub := live.New(db, slog.New(slog.NewTextHandler(io.Discard, nil)), live.Config{Poll: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go hub.Run(ctx)
	wait.Eventually(t, 10*time.Second, func() error {
		if !hub.Listening() {
			return errors.New("the hub does not listen")
		}
		return nil
	})
	sub, err := hub.Subscribe(ctx, events.Filter{TenantID: "t"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	write(t, db, "t", "p", "before", 0)
	if got, err := collect(sub, 1, 5*time.Second); err != nil || got[0].ResourceID != "before" {
		t.Fatalf("before the loss: %v %v", got, err)
	}
	var n int
	if err := db.GetContext(ctx, &n, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1 AND datname = current_database()`, live.ListenerName); err != nil || n != 1 {
		t.Fatalf("terminate the listener: %d %v", n, err)
	}
	for i := 0; i < 5; i++ {
		write(t, db, "t", "p", fmt.Sprint("during-", i), 0)
	}
	got, err := collect(sub, 5, 10*time.Second)
	if err != nil {
		t.Fatalf("after the loss: %v", err)
	}
	for i, ev := range got {
		if ev.ResourceID != fmt.Sprint("during-", i) {
			t.Fatalf("event %d: %s", i, ev.ResourceID)
		}
	}
}

// heapAfterGC is the live heap once a collection has run.
func heapAfterGC() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// writePadded commits n events of tenant t, each with size bytes of data
// beside its state, and waits until they are numbered.
func writePadded(t *testing.T, db *store.DB, n, size int) {
	t.Helper()
	pad := strings.Repeat("x", size)
	ctx := store.ForRequest(context.Background())
	if err := db.Tx(ctx, func(tx *sqlx.Tx) error {
		for i := 0; i < n; i++ {
			if err := events.Write(ctx, tx, events.Record{Type: events.Running, TenantID: "t", PoolID: "p", ResourceID: fmt.Sprint("i", i),
				Data: json.RawMessage(`{"state": "running", "pad": "` + pad + `"}`)}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	wait.Eventually(t, 10*time.Second, func() error {
		if got := len(all(t, db, events.Filter{TenantID: "t"})); got != n {
			return fmt.Errorf("%d events numbered", got)
		}
		return nil
	})
}

// Subscribers that replay from a cursor and then stop reading hold a
// bounded part of the outbox each (ReplayPage events, ReplayBytes of their
// data), not a whole page of 500: 40 of them over 300 events of 4 KiB
// held about 48 MB; now about 40 × 40 KiB.
func TestStalledReplaysHoldLittle(t *testing.T) {
	db := testkit.DB(t)
	writePadded(t, db, 300, 4096)
	hub := live.New(db, slog.New(slog.NewTextHandler(io.Discard, nil)), live.Config{Stall: time.Minute})
	hctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go hub.Run(hctx)
	before := heapAfterGC()
	var subs []*live.Subscription
	for i := 0; i < 40; i++ {
		var zero uint64
		sub, err := hub.Subscribe(hctx, events.Filter{TenantID: "t"}, &zero)
		if err != nil {
			t.Fatal(err)
		}
		subs = append(subs, sub)
	}
	// Each has read its first page and waits for its client: its channel
	// is full.
	wait.Eventually(t, 10*time.Second, func() error {
		for i, s := range subs {
			if len(s.C) < cap(s.C) {
				return fmt.Errorf("subscriber %d holds %d of %d", i, len(s.C), cap(s.C))
			}
		}
		return nil
	})
	grew := int64(heapAfterGC()) - int64(before)
	t.Logf("40 stalled replays: the heap grew by %d KiB", grew>>10)
	if grew > 16<<20 {
		t.Fatalf("40 stalled replays hold %d MiB", grew>>20)
	}
	runtime.KeepAlive(subs)
}

// A subscriber that reads on by itself from the outbox (a replay from a
// cursor, a catch-up behind the ring) while retention prunes what it has
// not read yet is ended with expired-cursor, after the events it got in
// order, instead of skipping the pruned ones silently (a probe's slow
// readers, with retention at one minute, missed 2,477 of 6,000 events
// and stayed open).
func TestReplayEndsWhereRetentionTookEvents(t *testing.T) {
	db := testkit.DB(t)
	hub := live.New(db, slog.New(slog.NewTextHandler(io.Discard, nil)), live.Config{Buffer: 4, Page: 5, ReplayPage: 4})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go hub.Run(ctx)
	for i := 0; i < 20; i++ {
		write(t, db, "t", "p", fmt.Sprintf("i%d", i), 0)
	}
	evs := all(t, db, events.Filter{TenantID: "t"})
	after := evs[1].Seq
	sub, err := hub.Subscribe(ctx, events.Filter{TenantID: "t"}, &after)
	if err != nil {
		t.Fatal(err)
	}
	// The pump fills the subscriber's channel and waits with the next page.
	wait.Eventually(t, 5*time.Second, func() error {
		if len(sub.C) < cap(sub.C) {
			return fmt.Errorf("%d of %d", len(sub.C), cap(sub.C))
		}
		return nil
	})
	if _, err := events.Prune(context.Background(), db, time.Now()); err != nil {
		t.Fatal(err)
	}
	var got []*events.Event
	for open := true; open; {
		select {
		case ev, ok := <-sub.C:
			if open = ok; ok {
				got = append(got, ev)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("still open after %d events, the pruned ones skipped", len(got))
		}
	}
	for i, ev := range got {
		if ev.Seq != evs[2+i].Seq {
			t.Fatalf("event %d is %d, want %d: a gap", i, ev.Seq, evs[2+i].Seq)
		}
	}
	e, ok := errs.As(sub.Err())
	if !ok || e.Code != errs.InvalidState || e.Details["reason"] != "expired-cursor" {
		t.Fatalf("after %d events: %v, want expired-cursor", len(got), sub.Err())
	}
}

// An event a subscriber received from its own read of the outbox holds
// only itself: whoever keeps it (the server keeps the latest events'
// renderings, keyed by the event) does not keep the page it was read in.
// A probe's closed subscriptions left 61 MB of replayed pages held by a
// few thousand kept events.
func TestAReplayedEventHoldsOnlyItself(t *testing.T) {
	db := testkit.DB(t)
	writePadded(t, db, 256, 16<<10)
	hub := live.New(db, slog.New(slog.NewTextHandler(io.Discard, nil)), live.Config{ReplayPage: 64, ReplayBytes: 4 << 20})
	hctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go hub.Run(hctx)
	before := heapAfterGC()
	var zero uint64
	sub, err := hub.Subscribe(hctx, events.Filter{TenantID: "t"}, &zero)
	if err != nil {
		t.Fatal(err)
	}
	got, err := collect(sub, 256, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	sub.Stop()
	kept := []*events.Event{got[0], got[64], got[128], got[192]} // one of each page
	got = nil
	grew := int64(heapAfterGC()) - int64(before)
	t.Logf("4 kept events of 16 KiB: the heap grew by %d KiB", grew>>10)
	if grew > 1<<20 {
		t.Fatalf("4 kept events hold %d KiB: their pages", grew>>10)
	}
	runtime.KeepAlive(kept)
}
