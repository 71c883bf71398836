package events_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/bettercompute/computed/db"
	"github.com/bettercompute/computed/internal/events"
	"github.com/bettercompute/computed/internal/live"
	"github.com/bettercompute/computed/internal/pgembed"
	"github.com/bettercompute/computed/internal/store"
)

// durable starts a PostgreSQL cluster with the server's own settings
// (fsync and synchronous commit on, unlike the tests' cluster): commit
// throughput is what the write-ahead log's flushes allow, as in
// production. It returns the URL of a migrated database.
func durable(b *testing.B) string {
	b.Helper()
	root, err := os.MkdirTemp("", "computed-bench-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(root) })
	if err := os.Chmod(root, 0o755); err != nil {
		b.Fatal(err)
	}
	srv, err := pgembed.Start(context.Background(), pgembed.Options{Dir: filepath.Join(root, "pg"), SocketDir: filepath.Join(root, "run"),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { srv.Stop() })
	d, err := store.Open(context.Background(), srv.URL())
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	if err := db.Migrate(context.Background(), d.DB.DB, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		b.Fatal(err)
	}
	// The outbox before issue 17, for the comparison: an identity shared by
	// every tenant and a NOTIFY in the writer's transaction.
	if _, err := d.Exec(`CREATE TABLE old_outbox (seq bigint GENERATED ALWAYS AS IDENTITY, xid xid8 NOT NULL DEFAULT pg_current_xact_id(),
		tenant_id text NOT NULL, instance_id text NOT NULL, type text NOT NULL, instance jsonb NOT NULL, occurred_at timestamptz NOT NULL DEFAULT now(),
		PRIMARY KEY (xid, seq))`); err != nil {
		b.Fatal(err)
	}
	return srv.URL()
}

// waits samples pg_stat_activity every 5 ms until stop and counts the
// samples of a writer (application_name bench-writer) waiting on the
// database-wide notify lock (Lock: object) and on any lock, and of a
// sequencer pass waiting on the notify lock.
func waits(url string, stop <-chan struct{}) (notify, locks, seqNotify *atomic.Int64, done func()) {
	notify, locks, seqNotify = &atomic.Int64{}, &atomic.Int64{}, &atomic.Int64{}
	d, err := store.Open(context.Background(), url)
	if err != nil {
		panic(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			var n struct {
				Notify    int64 `db:"notify"`
				Locks     int64 `db:"locks"`
				SeqNotify int64 `db:"seq_notify"`
			}
			if d.Get(&n, `SELECT count(*) FILTER (WHERE application_name = 'bench-writer' AND wait_event_type = 'Lock' AND wait_event = 'object') AS notify,
				count(*) FILTER (WHERE application_name = 'bench-writer' AND wait_event_type = 'Lock') AS locks,
				count(*) FILTER (WHERE application_name = $1 AND wait_event_type = 'Lock' AND wait_event = 'object') AS seq_notify
				FROM pg_stat_activity`, events.SequencerName) == nil {
				notify.Add(n.Notify)
				locks.Add(n.Locks)
				seqNotify.Add(n.SeqNotify)
			}
		}
	}()
	return notify, locks, seqNotify, func() { wg.Wait(); d.Close() }
}

func openWriters(b *testing.B, url string) *store.DB {
	b.Helper()
	d, err := store.OpenWith(context.Background(), url, store.Options{MaxConns: 24})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { d.Close() })
	return d
}

const writers = 16

// run runs writers goroutines calling write until d has passed and
// returns how many writes committed.
func run(d time.Duration, write func(w, i int) error) (int64, error) {
	var n atomic.Int64
	var first atomic.Pointer[error]
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; time.Now().Before(end); i++ {
				if err := write(w, i); err != nil {
					first.CompareAndSwap(nil, &err)
					return
				}
				n.Add(1)
			}
		}(w)
	}
	wg.Wait()
	if p := first.Load(); p != nil {
		return n.Load(), *p
	}
	return n.Load(), nil
}

func benchDuration() time.Duration {
	if s := os.Getenv("BENCH_EVENTS_SECONDS"); s != "" {
		var n int
		fmt.Sscan(s, &n)
		return time.Duration(n) * time.Second
	}
	return 5 * time.Second
}

// BenchmarkEventWriters is issue 17's throughput comparison, side by side
// in one run on one durable PostgreSQL (go test -run '^$' -bench
// EventWriters -benchtime 1x ./internal/events/; BENCH_EVENTS_SECONDS sets
// each phase's length, 5 s by default):
//
//   - old: 16 writers, each transaction the old outbox's statement (an
//     INSERT into one table keyed by a counter of every tenant, with
//     pg_notify in the same statement);
//   - the new outbox's write path alone (16 writers, 16 tenants, the
//     sequencer numbering, no subscriber), like the old phase;
//   - the new outbox end to end, 16 writers on one replica and on two (8
//     each, two handles with their own sequencer and hub, as two replicas
//     are), 16 tenants, and 16 writers on one tenant: a write counts when
//     it is delivered to a live subscriber of its tenant on every replica.
//
// Each phase reports events/s and the share of sampled writers waiting on
// the notify lock (Lock: object) and on any lock.
func BenchmarkEventWriters(b *testing.B) {
	url := durable(b)
	d := benchDuration()
	ctx := context.Background()
	report := func(name string, n int64, notify, locks, seqNotify int64, samples int64) {
		b.Logf("%-28s %8.0f events/s  writers waiting on the notify lock %d, on any lock %d; sequencer passes on the notify lock %d (in %d samples of 16 writers)",
			name, float64(n)/d.Seconds(), notify, locks, seqNotify, samples)
		b.ReportMetric(float64(n)/d.Seconds(), strings.NewReplacer(" ", "", ",", "_").Replace(name)+"-events/s")
	}
	samples := int64(d / (5 * time.Millisecond))
	appName := func(url string) string { return url + "&application_name=bench-writer" }

	// The old outbox's write.
	{
		w := openWriters(b, appName(url))
		stop := make(chan struct{})
		notify, locks, seqNotify, done := waits(url, stop)
		n, err := run(d, func(wr, i int) error {
			return w.Tx(ctx, func(tx *sqlx.Tx) error {
				_, err := tx.ExecContext(ctx, `WITH e AS (INSERT INTO old_outbox (tenant_id, instance_id, type, instance)
					VALUES ($1, $2, 'instance.running', '{"state": "running", "desiredState": "running"}') RETURNING tenant_id)
					SELECT pg_notify('compute_instance_events', tenant_id) FROM e`, fmt.Sprint("t", wr), fmt.Sprint("i", i))
				return err
			})
		})
		close(stop)
		done()
		if err != nil {
			b.Fatal(err)
		}
		report("old outbox, 16 writers", n, notify.Load(), locks.Load(), seqNotify.Load(), samples)
	}

	phase := func(name string, replicas int, tenants []string, subscribe bool) {
		type replica struct {
			db  *store.DB
			hub *live.Hub
		}
		var reps []replica
		var delivered []*atomic.Int64
		hctx, stopHubs := context.WithCancel(ctx)
		for r := 0; r < replicas; r++ {
			w := openWriters(b, appName(url))
			hub := live.New(w, slog.New(slog.NewTextHandler(io.Discard, nil)), live.Config{})
			seq := events.Start(w, slog.New(slog.NewTextHandler(io.Discard, nil)))
			seq.OnNumbered(hub.Wake)
			hub.SkipFrom(seq.ID())
			go hub.Run(hctx) //nolint:errcheck // ends with hctx
			reps = append(reps, replica{w, hub})
			var got atomic.Int64
			delivered = append(delivered, &got)
			for _, t := range tenants {
				if !subscribe {
					break
				}
				sub, err := hub.Subscribe(hctx, events.Filter{TenantID: t}, nil)
				if err != nil {
					b.Fatal(err)
				}
				go func() {
					for range sub.C {
						got.Add(1)
					}
				}()
			}
		}
		for !reps[len(reps)-1].hub.Listening() {
			time.Sleep(10 * time.Millisecond) // the listeners are up
		}
		stop := make(chan struct{})
		notify, locks, seqNotify, done := waits(url, stop)
		t0 := time.Now()
		n, err := run(d, func(wr, i int) error {
			rep := reps[wr%replicas]
			tenant := tenants[wr%len(tenants)]
			return rep.db.Tx(ctx, func(tx *sqlx.Tx) error {
				return events.Write(ctx, tx, events.Record{TenantID: tenant, Type: events.Running, ResourceID: fmt.Sprint("inst_", wr, "_", i),
					PoolID: "pool_bench", Data: map[string]string{"state": "running", "desiredState": "running"}})
			})
		})
		close(stop)
		done()
		if err != nil {
			b.Fatal(err)
		}
		// Delivered to every replica's subscribers: wait for the last.
		for _, got := range delivered {
			if !subscribe {
				break
			}
			for deadline := time.Now().Add(30 * time.Second); got.Load() < n; {
				if time.Now().After(deadline) {
					b.Fatalf("%s: delivered %d of %d", name, got.Load(), n)
				}
				time.Sleep(time.Millisecond)
			}
		}
		tail := time.Since(t0) - d
		stopHubs()
		for _, r := range reps {
			for _, s := range []*events.Sequencer{events.Start(r.db, nil)} {
				s.Stop()
			}
		}
		report(name, n, notify.Load(), locks.Load(), seqNotify.Load(), samples)
		b.Logf("%-28s last delivery %v after the writers stopped", "", tail.Round(time.Millisecond))
	}
	var sixteen []string
	for i := 0; i < writers; i++ {
		sixteen = append(sixteen, fmt.Sprintf("tenant-%02d", i))
	}
	phase("new, written and numbered", 1, sixteen, false)
	phase("new, 1 replica, 16 tenants", 1, sixteen, true)
	phase("new, 2 replicas, 16 tenants", 2, sixteen, true)
	phase("new, 1 replica, 1 tenant", 1, sixteen[:1], true)
	phase("new, 2 replicas, 1 tenant", 2, sixteen[:1], true)
}

// BenchmarkEventLatency is the commit-to-subscriber latency of one
// subscriber, one event at a time, first with nothing else open, then with
// an unrelated transaction holding an xid in another database of the
// cluster for the whole phase (BENCH_EVENTS_SECONDS each; 60 for the
// issue's figure).
func BenchmarkEventLatency(b *testing.B) {
	url := durable(b)
	d := benchDuration()
	ctx := context.Background()
	w := openWriters(b, url)
	hub := live.New(w, slog.New(slog.NewTextHandler(io.Discard, nil)), live.Config{})
	events.Start(w, slog.New(slog.NewTextHandler(io.Discard, nil))).OnNumbered(hub.Wake)
	hctx, stop := context.WithCancel(ctx)
	defer stop()
	go hub.Run(hctx) //nolint:errcheck // ends with hctx
	sub, err := hub.Subscribe(hctx, events.Filter{TenantID: "acme"}, nil)
	if err != nil {
		b.Fatal(err)
	}
	phase := func(name string) {
		var lat []time.Duration
		for end := time.Now().Add(d); time.Now().Before(end); {
			var t0 time.Time
			if err := w.Tx(ctx, func(tx *sqlx.Tx) error {
				if err := events.Write(ctx, tx, events.Record{TenantID: "acme", Type: events.Running, ResourceID: "inst_1",
					Data: map[string]string{"state": "running", "desiredState": "running"}}); err != nil {
					return err
				}
				t0 = time.Now() // just before COMMIT
				return nil
			}); err != nil {
				b.Fatal(err)
			}
			select {
			case <-sub.C:
				lat = append(lat, time.Since(t0))
			case <-time.After(10 * time.Second):
				b.Fatalf("%s: no delivery within 10 s", name)
			}
			time.Sleep(10 * time.Millisecond)
		}
		slices.Sort(lat)
		p := func(q float64) time.Duration { return lat[int(q*float64(len(lat)-1))] }
		b.Logf("%-44s %5d events: p50 %v, p99 %v, max %v", name, len(lat), p(0.5).Round(10*time.Microsecond), p(0.99).Round(10*time.Microsecond), lat[len(lat)-1].Round(10*time.Microsecond))
	}
	phase("nothing else open")
	// The unrelated transaction: in another database of the cluster.
	admin, err := sqlx.Open("pgx", url)
	if err != nil {
		b.Fatal(err)
	}
	defer admin.Close()
	if _, err := admin.Exec(`CREATE DATABASE unrelated`); err != nil {
		b.Fatal(err)
	}
	other, err := sqlx.Open("pgx", replaceDB(url, "unrelated"))
	if err != nil {
		b.Fatal(err)
	}
	defer other.Close()
	hold, err := other.Beginx()
	if err != nil {
		b.Fatal(err)
	}
	if _, err := hold.Exec(`CREATE TABLE t (x int); INSERT INTO t VALUES (1)`); err != nil {
		b.Fatal(err)
	}
	phase(fmt.Sprintf("an unrelated transaction open for %v", d))
	_ = hold.Rollback()
}

// replaceDB points a postgres URL at another database.
func replaceDB(url, name string) string {
	i := len("postgres://")
	for ; i < len(url) && url[i] != '/'; i++ {
	}
	j := i + 1
	for ; j < len(url) && url[j] != '?'; j++ {
	}
	return url[:i+1] + name + url[j:]
}
