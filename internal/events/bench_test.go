package events_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgxlisten"
	"github.com/jmoiron/sqlx"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverdatabasesql"

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
	// start starts the cluster under root and opens a handle on it (once
	// more after BENCH_STATEMENTS's restart).
	start := func() (*pgembed.Server, *store.DB) {
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
		return srv, d
	}
	srv, d := start()
	defer func() { d.Close() }() // the one open when durable returns
	if err := db.Migrate(context.Background(), d.DB.DB, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		b.Fatal(err)
	}
	if _, err := d.Exec(`ALTER SYSTEM SET track_wal_io_timing = on`); err != nil {
		b.Fatal(err)
	}
	for _, kv := range strings.Split(os.Getenv("BENCH_PGSET"), ",") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			// ALTER SYSTEM takes no parameters: the name and the value are
			// checked to be words (an identifier; letters, digits, _ and .).
			if !settingName.MatchString(k) || !settingValue.MatchString(v) {
				b.Fatalf("BENCH_PGSET: %q is not <name>=<value>", kv)
			}
			if _, err := d.Exec(`ALTER SYSTEM SET ` + k + ` = '` + v + `'`); err != nil {
				b.Fatal(err)
			}
		}
	}
	if _, err := d.Exec(`SELECT pg_reload_conf()`); err != nil {
		b.Fatal(err)
	}
	if os.Getenv("BENCH_STATEMENTS") != "" {
		if _, err := d.Exec(`ALTER SYSTEM SET shared_preload_libraries = pg_stat_statements`); err != nil {
			b.Fatal(err)
		}
		d.Close()
		srv.Stop()
		srv, d = start()
		if _, err := d.Exec(`CREATE EXTENSION pg_stat_statements`); err != nil {
			b.Fatal(err)
		}
		if _, err := d.Exec(`ALTER SYSTEM SET pg_stat_statements.track_planning = on`); err != nil {
			b.Fatal(err)
		}
		if _, err := d.Exec(`SELECT pg_reload_conf()`); err != nil {
			b.Fatal(err)
		}
	}
	// The outbox before issue 17, for the comparison, as migration 00007
	// made it: an identity shared by every tenant, four indexes, and (in
	// oldWrite) a NOTIFY in the writer's transaction.
	if _, err := d.Exec(`CREATE TABLE old_outbox (
		seq bigint GENERATED ALWAYS AS IDENTITY, xid xid8 NOT NULL DEFAULT pg_current_xact_id(),
		tenant_id text NOT NULL, pool_id text COLLATE "C" NOT NULL, instance_id text COLLATE "C" NOT NULL, project_id text,
		type text NOT NULL, state text NOT NULL, desired_state text NOT NULL, state_reason text,
		occurred_at timestamptz NOT NULL DEFAULT now(), instance jsonb NOT NULL,
		PRIMARY KEY (xid, seq));
		CREATE INDEX old_outbox_tenant_idx ON old_outbox (tenant_id, xid, seq);
		CREATE INDEX old_outbox_instance_idx ON old_outbox (instance_id, xid, seq);
		CREATE INDEX old_outbox_pool_idx ON old_outbox (pool_id, xid, seq);
		CREATE INDEX old_outbox_time_idx ON old_outbox (occurred_at)`); err != nil {
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
		t := time.NewTicker(sampleEvery())
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

var settingName, settingValue = regexp.MustCompile(`^[a-z_]+$`), regexp.MustCompile(`^[A-Za-z0-9_.]+$`)

// envInt is the environment variable's number, or def when it is unset.
func envInt(name string, def int) int {
	if v := os.Getenv(name); v != "" {
		fmt.Sscan(v, &def)
	}
	return def
}

// sampleEvery is waits' interval: 5 ms, or BENCH_SAMPLE_MS.
func sampleEvery() time.Duration {
	return time.Duration(envInt("BENCH_SAMPLE_MS", 5)) * time.Millisecond
}

// openWriters opens a writers' pool: 24 connections, or BENCH_CONNS.
func openWriters(b *testing.B, url string) *store.DB {
	b.Helper()
	d, err := store.OpenWith(context.Background(), url, store.Options{MaxConns: envInt("BENCH_CONNS", 24)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { d.Close() })
	return d
}

const writers = 16

// placement is where a phase's subscribers are (see phase).
type placement int

const (
	none placement = iota
	spread
	every
)

// instanceDoc is an instance.running event's data in both outboxes: the
// instance as the method surface shows it.
const instanceDoc = `{"instanceId": "inst_01m8ysk6gma9fgegsny481v77m", "tenantId": "tenant-00", "poolId": "pool_bench",
	"projectId": null, "name": "web-1", "size": {"gpus": 1, "vcpus": 4, "memoryGiB": 16}, "image": null,
	"desiredState": "running", "state": "running", "stateReason": null, "hostNodeId": "node_01m8ysjf9pcnbxq54z2s38t9yc",
	"rebootGeneration": 0, "rowVersion": 3, "createdAt": "2026-12-03T20:30:06.346412Z",
	"updatedAt": "2026-12-03T20:30:06.708633Z", "deletedAt": null}`

// statements logs the statements that took the most time since the last
// call (BENCH_STATEMENTS=1: pg_stat_statements) and resets them.
func statements(b *testing.B, url string) {
	d, err := store.Open(context.Background(), url)
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	var rows []struct {
		Query string  `db:"query"`
		Calls int64   `db:"calls"`
		Exec  float64 `db:"exec"`
		Plan  float64 `db:"plan"`
	}
	if err := d.Select(&rows, `SELECT left(regexp_replace(query, '\s+', ' ', 'g'), 90) AS query, calls, total_exec_time AS exec, total_plan_time AS plan
		FROM pg_stat_statements ORDER BY total_exec_time + total_plan_time DESC LIMIT 12`); err != nil {
		b.Fatal(err)
	}
	var st struct {
		Dead  int64  `db:"n_dead_tup"`
		Live  int64  `db:"n_live_tup"`
		Vac   string `db:"vac"`
		Size  int64  `db:"size"`
		Index int64  `db:"isize"`
	}
	if err := d.Get(&st, `SELECT n_dead_tup, n_live_tup, coalesce(last_autovacuum::text, '') || '/' || coalesce(last_vacuum::text, '') || ' ' || autovacuum_count || '/' || vacuum_count AS vac,
		pg_relation_size('event_inbox') AS size, pg_relation_size('event_inbox_tenant_inserted_idx') AS isize FROM pg_stat_user_tables WHERE relname = 'event_inbox'`); err == nil {
		b.Logf("   event_inbox: %d dead, %d live, vacuumed %s, heap %d KiB, index %d KiB", st.Dead, st.Live, st.Vac, st.Size/1024, st.Index/1024)
	} else {
		b.Log(err)
	}
	for _, r := range rows {
		b.Logf("   %8d calls %9.1f ms exec %8.1f ms plan  %s", r.Calls, r.Exec, r.Plan, r.Query)
	}
	_, _ = d.Exec(`SELECT pg_stat_statements_reset()`)
}

// cpu is CPU time used: by this process (writers, sequencers, hubs) and
// by the machine's postgres processes.
type cpu struct {
	self, postgres time.Duration
	pids           map[int]time.Duration
}

// cpuNow reads both from the kernel (/proc, getrusage).
func cpuNow() cpu {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	c := cpu{self: time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), pids: map[int]time.Duration{}}
	dirs, _ := os.ReadDir("/proc")
	for _, e := range dirs {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ... utime(14) stime(15), in clock ticks
		open, closing := strings.IndexByte(string(stat), '('), strings.LastIndexByte(string(stat), ')')
		if open < 0 || closing < open || string(stat[open+1:closing]) != "postgres" {
			continue
		}
		f := strings.Fields(string(stat[closing+1:]))
		if len(f) < 13 {
			continue
		}
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		c.pids[pid] = time.Duration(ut+st) * 10 * time.Millisecond // USER_HZ is 100 on Linux
	}
	return c
}

// since is the CPU used from c0 to c: a postgres process started since
// counts from zero; one that ended is lost.
func (c cpu) since(c0 cpu) cpu {
	out := cpu{self: c.self - c0.self}
	for pid, t := range c.pids {
		out.postgres += t - c0.pids[pid]
	}
	return out
}

// wal is pg_stat_wal's counters: records, full-page images, bytes,
// flushes (wal_sync) and the time they took (track_wal_io_timing).
type wal struct {
	Records  int64   `db:"wal_records"`
	FPI      int64   `db:"wal_fpi"`
	Bytes    int64   `db:"wal_bytes"`
	Syncs    int64   `db:"wal_sync"`
	SyncTime float64 `db:"wal_sync_time"`
}

func walNow(url string) wal {
	var w wal
	d, err := store.Open(context.Background(), url)
	if err != nil {
		return w
	}
	defer d.Close()
	_ = d.Get(&w, `SELECT wal_records, wal_fpi, wal_bytes::bigint AS wal_bytes, wal_sync, wal_sync_time FROM pg_stat_wal`)
	return w
}

func (w wal) since(w0 wal) wal {
	return wal{w.Records - w0.Records, w.FPI - w0.FPI, w.Bytes - w0.Bytes, w.Syncs - w0.Syncs, w.SyncTime - w0.SyncTime}
}

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

// benchJob stands for the reconciler's job in the River phase.
type benchJob struct {
	ID string `json:"id"`
}

func (benchJob) Kind() string { return "bench_event_job" }

func (benchJob) InsertOpts() river.InsertOpts { return river.InsertOpts{Queue: "bench"} }

type benchWorker struct{ river.WorkerDefaults[benchJob] }

func (benchWorker) Work(context.Context, *river.Job[benchJob]) error { return nil }

// riverClient is a River client over w as the server's runner makes it
// (the database/sql pool, a pgx listener, FetchCooldown 10 ms), not
// started: it inserts and notifies as the server's does, and works
// nothing.
func riverClient(b *testing.B, w *store.DB) *river.Client[*sql.Tx] {
	b.Helper()
	pcfg, err := pgxpool.ParseConfig(w.URL)
	if err != nil {
		b.Fatal(err)
	}
	pcfg.MaxConns = 1
	listen, err := pgxpool.NewWithConfig(context.Background(), pcfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(listen.Close)
	workers := river.NewWorkers()
	river.AddWorker(workers, &benchWorker{})
	c, err := river.NewClient(riverdatabasesql.NewWithPgxListener(w.DB.DB, listen), &river.Config{
		Logger:            slog.New(slog.NewTextHandler(io.Discard, nil)),
		Queues:            map[string]river.QueueConfig{"bench": {MaxWorkers: 1}},
		Workers:           workers,
		FetchCooldown:     10 * time.Millisecond,
		FetchPollInterval: 500 * time.Millisecond,
	})
	if err != nil {
		b.Fatal(err)
	}
	return c
}

// wanted says whether BENCH_ONLY (parts of phases' names, separated by
// "|"; a part ending in "$" is a whole name) selects the phase; unset,
// every phase runs.
func wanted(name string) bool {
	only := os.Getenv("BENCH_ONLY")
	if only == "" {
		return true
	}
	for _, part := range strings.Split(only, "|") {
		if whole, ok := strings.CutSuffix(part, "$"); ok && name == whole || !ok && strings.Contains(name, part) {
			return true
		}
	}
	return false
}

func metric(name string) string {
	return strings.NewReplacer(" ", "", ",", "_", "(", "", ")", "").Replace(name)
}

// benchRounds is how many rounds the headline comparison runs
// (BENCH_EVENTS_ROUNDS, 4 by default).
func benchRounds() int { return envInt("BENCH_EVENTS_ROUNDS", 4) }

func benchDuration() time.Duration {
	return time.Duration(envInt("BENCH_EVENTS_SECONDS", 5)) * time.Second
}

// BenchmarkEventWriters is issue 17's throughput comparison, side by side
// in one run on one durable PostgreSQL (go test -run '^$' -bench
// EventWriters -benchtime 1x ./internal/events/; BENCH_EVENTS_SECONDS sets
// each phase's length, 5 s by default):
//
//   - old: 16 writers, each transaction the old outbox's statement as it
//     was (an INSERT into the table of migration 00007, keyed by a counter
//     of every tenant, with four indexes, and pg_notify in the same
//     statement), an instance's document as its data;
//   - the same, its statement sent with the COMMIT in one round trip
//     (store.ExecAtCommit, as the new write path sends its insert): what
//     the old outbox makes with today's transactions;
//   - the same statement without its pg_notify, as it was and with its
//     commit: what one row per commit costs on this machine without the
//     notify lock (the issue's own comparison, 700 and 3,300 commits/s
//     when it was filed);
//   - the new outbox's write path (16 writers, 16 tenants, the sequencer
//     numbering, no subscriber), like the old phases, then the old outbox
//     once more (the comparison takes its better phase: a run's first
//     phase is often its slowest);
//   - the new outbox end to end, 16 writers on one replica and on two (8
//     each, two handles with their own sequencer and hub, as two replicas
//     are), 16 tenants, and 16 writers on one tenant: a write counts when
//     it is delivered to its tenant's subscriber. The subscribers are
//     spread over the replicas as a load balancer spreads dashboards (one
//     per tenant, half of them on a replica that does not write the
//     tenant's events), in neighbouring pairs, twice; then one pair each
//     with a subscriber of every tenant on every replica (two replicas
//     then serve twice the subscribers).
//
// Each phase reports events/s and the share of sampled writers waiting on
// the notify lock (Lock: object) and on any lock, and the CPU time per
// event of this process and of PostgreSQL's; BENCH_ONLY=<part of a name>|<part>...
// runs only the phases it names; BENCH_STATEMENTS=1 loads
// pg_stat_statements and logs each phase's costliest statements and the
// inbox's dead rows; BENCH_CONNS=<n> sizes every phase's pool;
// BENCH_SAMPLE_MS=<n> sets the lock sampler's interval (5 ms);
// BENCH_PGSET=<setting>=<value>,... sets PostgreSQL settings for the run.
// Each phase also logs its WAL per event (pg_stat_wal): records, bytes,
// events per flush and a flush's time (track_wal_io_timing).
func BenchmarkEventWriters(b *testing.B) {
	url := durable(b)
	d := benchDuration()
	ctx := context.Background()
	report := func(name string, n int64, notify, locks, seqNotify int64, samples int64, used cpu, wl wal) float64 {
		if n > 0 && wl.Syncs > 0 {
			b.Logf("%-36s WAL per event: %.1f records, %.2f full pages, %d bytes; %.2f events per flush, a flush %.0f µs", "",
				float64(wl.Records)/float64(n), float64(wl.FPI)/float64(n), wl.Bytes/n, float64(n)/float64(wl.Syncs), wl.SyncTime*1000/float64(wl.Syncs))
		}
		b.Logf("%-36s %6.0f events/s  writers waiting on the notify lock %d, on any lock %d; sequencer passes on the notify lock %d (in %d samples of 16 writers); CPU per event: this process %v, PostgreSQL %v",
			name, float64(n)/d.Seconds(), notify, locks, seqNotify, samples, used.self/time.Duration(max(n, 1)), used.postgres/time.Duration(max(n, 1)))
		b.ReportMetric(float64(n)/d.Seconds(), metric(name)+"-events/s")
		return float64(n) / d.Seconds()
	}
	samples := int64(d / sampleEvery())
	appName := func(url string) string { return url + "&application_name=bench-writer" }

	// The old outbox's write, and the same statement without its NOTIFY
	// (the issue's own comparison: ~700 and 3,300 commits/s then).
	// With atCommit the statement goes with the transaction's COMMIT, in
	// one round trip, as the new write path's insert does (store.ExecAtCommit):
	// what the old outbox would make with today's transactions.
	// With listening, the phase holds what every replica of the old
	// server held from its start, subscribers or not: one LISTEN
	// connection on the old channel (jackc/pgxlisten, as the old hub's
	// Run), whose handler looks the notified tenant up among its streams
	// (none here). The new phases run their replica's hub, which listens
	// the same way.
	old := func(name, notify string, atCommit bool, listening ...bool) float64 {
		if !wanted(name) {
			return 0
		}
		w := openWriters(b, appName(url))
		defer w.Close()
		if len(listening) > 0 && listening[0] {
			stopListening := oldListener(b, url)
			defer stopListening()
		}
		stop := make(chan struct{})
		notify0, locks, seqNotify, done := waits(url, stop)
		c0, wal0 := cpuNow(), walNow(url)
		n, err := run(d, func(wr, i int) error {
			return w.Tx(ctx, func(tx *sqlx.Tx) error {
				// The old events.Write's statement, as it was (6d5ba84^).
				stmt := `WITH e AS (
						INSERT INTO old_outbox (tenant_id, pool_id, instance_id, project_id, type, state, desired_state, state_reason, instance)
						VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::jsonb) RETURNING tenant_id)
					` + notify
				args := []any{fmt.Sprintf("tenant-%02d", wr), "pool_bench", fmt.Sprint("inst_", wr, "_", i), nil, "instance.running", "running", "running", nil, instanceDoc}
				if atCommit {
					return store.ExecAtCommit(ctx, tx, stmt, args...)
				}
				_, err := tx.ExecContext(ctx, stmt, args...)
				return err
			})
		})
		used, wl := cpuNow().since(c0), walNow(url).since(wal0)
		close(stop)
		done()
		if err != nil {
			b.Fatal(err)
		}
		return report(name, n, notify0.Load(), locks.Load(), seqNotify.Load(), samples, used, wl)
	}

	// subs places the subscribers: none, one per tenant on one replica
	// (spread, as a load balancer spreads dashboards: tenant i's on
	// replica i/2 mod replicas, so half of them are on the replica that
	// writes the tenant's events and half on another), or one per tenant
	// on every replica (every: two replicas then have twice the
	// subscribers and read every event twice).
	holding := false // phase: a snapshot of this database held through it
	phase := func(name string, replicas int, tenants []string, subs placement, jobs ...bool) float64 {
		if !wanted(name) {
			return 0
		}
		type replica struct {
			db  *store.DB
			hub *live.Hub
		}
		var reps []replica
		var queues []*river.Client[*sql.Tx]
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
			if len(jobs) > 0 {
				queues = append(queues, riverClient(b, w))
			}
			got := &atomic.Int64{}
			if subs == spread && r > 0 {
				got = delivered[0] // one count: each event reaches one subscriber
			} else {
				delivered = append(delivered, got)
			}
			for ti, t := range tenants {
				if subs == none || subs == spread && (ti/2)%replicas != r {
					continue
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
		if holding {
			// Another session of this database holds a snapshot (and an
			// xid) for the whole phase, as a pg_dump or a long report
			// does: no row the passes move can be removed meanwhile.
			hold, err := sql.Open("pgx", url)
			if err != nil {
				b.Fatal(err)
			}
			htx, err := hold.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := htx.Exec(`SELECT pg_current_xact_id()`); err != nil {
				b.Fatal(err)
			}
			defer func() { htx.Rollback(); hold.Close() }()
		}
		stop := make(chan struct{})
		notify, locks, seqNotify, done := waits(url, stop)
		c0, wal0 := cpuNow(), walNow(url)
		t0 := time.Now()
		n, err := run(d, func(wr, i int) error {
			rep := reps[wr%replicas]
			tenant := tenants[wr%len(tenants)]
			return rep.db.Tx(ctx, func(tx *sqlx.Tx) error {
				if queues != nil {
					// As instances.Service.Enqueue does, in the writer's
					// transaction.
					if _, err := queues[wr%replicas].InsertTx(ctx, tx.Tx, benchJob{ID: fmt.Sprint("inst_", wr, "_", i)}, nil); err != nil {
						return err
					}
				}
				return events.Write(ctx, tx, events.Record{TenantID: tenant, Type: events.Running, ResourceID: fmt.Sprint("inst_", wr, "_", i),
					PoolID: "pool_bench", Data: json.RawMessage(instanceDoc)})
			})
		})
		close(stop)
		done()
		if err != nil {
			b.Fatal(err)
		}
		// Delivered to every replica's subscribers: wait for the last.
		for _, got := range delivered {
			if subs == none {
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
		used, wl := cpuNow().since(c0), walNow(url).since(wal0)
		var passes, numbered, reads, forwards, wholes int64
		for _, r := range reps {
			seq := events.Start(r.db, nil) // the running one
			p, nn, _ := seq.Stats()
			passes, numbered, reads, forwards, wholes = passes+p, numbered+nn, reads+r.hub.Reads(), forwards+seq.Forwards(), wholes+seq.Wholes()
		}
		stopHubs()
		for _, r := range reps {
			events.Start(r.db, nil).Stop()
			r.db.Close()
		}
		rate := report(name, n, notify.Load(), locks.Load(), seqNotify.Load(), samples, used, wl)
		if os.Getenv("BENCH_STATEMENTS") != "" {
			statements(b, url)
		}
		b.Logf("%-36s last delivery %v after the writers stopped; %d sequencer passes (%d reading an inbox whole) numbered %d events; %d batches forwarded to the leader; %d hub reads",
			"", tail.Round(time.Millisecond), passes, wholes, numbered, forwards, reads)
		return rate
	}
	var sixteen []string
	for i := 0; i < writers; i++ {
		sixteen = append(sixteen, fmt.Sprintf("tenant-%02d", i))
	}
	const oldNotify, oldBare = `SELECT pg_notify('compute_instance_events', tenant_id) FROM e`, `SELECT tenant_id FROM e`
	// The headline comparison, in rounds of neighbours (the order
	// alternating, as the same phase moves by a quarter from run to run
	// and drifts over a run here): the old outbox as the server ran it
	// (its replica listening, as the new phase's replica's hub listens)
	// and the new write path. The figure is the median of the rounds'
	// ratios.
	var ratios []float64
	for r := 1; r <= benchRounds(); r++ {
		oldName, newName := fmt.Sprintf("old outbox as the server ran it (%d)", r), fmt.Sprintf("new, written and numbered (%d)", r)
		var o, n float64
		if r%2 == 1 {
			o = old(oldName, oldNotify, false, true)
			n = phase(newName, 1, sixteen, none)
		} else {
			n = phase(newName, 1, sixteen, none)
			o = old(oldName, oldNotify, false, true)
		}
		if o > 0 && n > 0 {
			ratios = append(ratios, n/o)
			b.Logf("round %d: the new write path %.2f× the old outbox as the server ran it", r, n/o)
		}
	}
	if len(ratios) > 0 {
		slices.Sort(ratios)
		m := ratios[len(ratios)/2]
		if len(ratios)%2 == 0 {
			m = (ratios[len(ratios)/2-1] + m) / 2
		}
		b.Logf("the new write path: %.2f× the old outbox as the server ran it (median of %d rounds; %.2f–%.2f)", m, len(ratios), ratios[0], ratios[len(ratios)-1])
		b.ReportMetric(m, "new/old")
	}
	// For reference, once each: the old statement with nobody listening
	// (what earlier runs compared against), sent with its COMMIT, and
	// without its notify (the issue's own comparison, 700 and 3,300
	// commits/s when it was filed: the ceiling of one row per commit).
	old("old outbox, nobody listening", oldNotify, false)
	old("old outbox, sent with its commit", oldNotify, true)
	old("old statement without its notify", oldBare, false)
	old("old statement without its notify, with its commit", oldBare, true)
	// River's job insert in the same transactions (the reconciler's
	// queue, configured as the server configures it): River notifies a
	// queue's inserts at most once per FetchCooldown per client, so few
	// writers take the notify lock.
	phase("new, written and numbered, with a River job", 1, sixteen, none, true)
	// With a snapshot of this database held through the phase (the rows
	// passes move stay until it ends: migration 00016), delivered to a
	// subscriber of each tenant; beside it the same phase without.
	phase("new, 1 replica, 16 tenants, delivered", 1, sixteen, spread)
	holding = true
	phase("new, 1 replica, 16 tenants, delivered, a snapshot held", 1, sixteen, spread)
	holding = false
	// One replica and two, in pairs, the second pair in the other order:
	// later phases run on a bigger database, so a pair's ratio compares
	// neighbours. The subscribers are spread over the replicas, as a load
	// balancer spreads dashboards (the same 16 or 1 subscribers as on one
	// replica); then one pair each with every replica subscribing to every
	// tenant (twice the subscribers and reads on two replicas).
	for _, c := range []struct {
		name    string
		tenants []string
		subs    placement
		rounds  int
	}{{"16 tenants", sixteen, spread, 2}, {"1 tenant", sixteen[:1], spread, 2},
		{"16 tenants, every replica subscribing", sixteen, every, 1}, {"1 tenant, every replica subscribing", sixteen[:1], every, 1}} {
		for round := 1; round <= c.rounds; round++ {
			var one, two float64
			if round == 1 {
				one = phase(fmt.Sprintf("new, 1 replica, %s (%d)", c.name, round), 1, c.tenants, c.subs)
				two = phase(fmt.Sprintf("new, 2 replicas, %s (%d)", c.name, round), 2, c.tenants, c.subs)
			} else {
				two = phase(fmt.Sprintf("new, 2 replicas, %s (%d)", c.name, round), 2, c.tenants, c.subs)
				one = phase(fmt.Sprintf("new, 1 replica, %s (%d)", c.name, round), 1, c.tenants, c.subs)
			}
			if one > 0 && two > 0 {
				b.Logf("two replicas / one, %s, pair %d: %.2f", c.name, round, two/one)
				b.ReportMetric(two/one, metric(fmt.Sprintf("2replicas/1_%s_%d", c.name, round)))
			}
		}
	}
}

// BenchmarkEventLatency is the commit-to-subscriber latency of one
// subscriber, one event at a time, first with nothing else open, then with
// an unrelated transaction holding an xid in another database of the
// cluster for the whole phase, then with a snapshot of this database held
// (BENCH_EVENTS_SECONDS each; 60 for the figure).
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
	// phase writes one event at a time through w, as ctx (a client's
	// request waits for its events to be numbered), and times each from
	// just before COMMIT to sub's channel, and to the write's return.
	phase := func(name string, w *store.DB, ctx context.Context, sub *live.Subscription) {
		var lat, ret []time.Duration
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
			ret = append(ret, time.Since(t0))
			select {
			case <-sub.C:
				lat = append(lat, time.Since(t0))
			case <-time.After(10 * time.Second):
				b.Fatalf("%s: no delivery within 10 s", name)
			}
			time.Sleep(10 * time.Millisecond)
		}
		slices.Sort(lat)
		slices.Sort(ret)
		p := func(l []time.Duration, q float64) time.Duration {
			return l[int(q*float64(len(l)-1))].Round(10 * time.Microsecond)
		}
		b.Logf("%-52s %5d events: p50 %v, p99 %v, max %v (the write returned: p50 %v, p99 %v)", name, len(lat), p(lat, 0.5), p(lat, 0.99), p(lat, 1),
			p(ret, 0.5), p(ret, 0.99))
	}
	phase("nothing else open", w, ctx, sub)
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
	phase(fmt.Sprintf("an unrelated transaction open for %v", d), w, ctx, sub)
	_ = hold.Rollback()
	// A snapshot of this database held (with an xid), as a pg_dump or a
	// long report holds one: nothing the passes move can be removed
	// meanwhile (migration 00016).
	snap, err := admin.BeginTxx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := snap.Exec(`SELECT pg_current_xact_id()`); err != nil {
		b.Fatal(err)
	}
	phase(fmt.Sprintf("a snapshot of this database held for %v", d), w, ctx, sub)
	_ = snap.Rollback()

	// A second replica: its sequencer forwards to the first's (the
	// lease's holder), and its hub hears the leader's NOTIFY. Its client
	// requests wait for the leader's acknowledgement.
	w2 := openWriters(b, url)
	seq2 := events.Start(w2, slog.New(slog.NewTextHandler(io.Discard, nil)))
	defer seq2.Stop()
	hub2 := live.New(w2, slog.New(slog.NewTextHandler(io.Discard, nil)), live.Config{})
	seq2.OnNumbered(hub2.Wake)
	hub2.SkipFrom(seq2.ID())
	go hub2.Run(hctx) //nolint:errcheck // ends with hctx
	sub2, err := hub2.Subscribe(hctx, events.Filter{TenantID: "acme"}, nil)
	if err != nil {
		b.Fatal(err)
	}
	go func() {
		for range sub.C { // the first replica's subscriber, not timed now
		}
	}()
	req := store.ForRequest(ctx)
	for seq2.Forwards() == 0 {
		if err := w2.Tx(req, func(tx *sqlx.Tx) error {
			return events.Write(req, tx, events.Record{TenantID: "acme", Type: events.Running, ResourceID: "inst_1", Data: map[string]string{}})
		}); err != nil {
			b.Fatal(err)
		}
		<-sub2.C
		time.Sleep(10 * time.Millisecond)
	}
	phase("a request on a replica that forwards to the leader", w2, req, sub2)
}

// oldListener holds the old server's LISTEN connection on the old
// channel until the returned function is called, as the old hub's Run did
// (6d5ba84^:internal/live/hub.go): pgxlisten, application_name
// computed-events-listener, each notification's tenant looked up among the
// hub's streams under its mutex.
func oldListener(b *testing.B, url string) func() {
	b.Helper()
	var (
		mu      sync.Mutex
		streams = map[string]chan struct{}{}
		up      atomic.Bool
		heard   atomic.Int64
	)
	l := &pgxlisten.Listener{
		Connect: func(ctx context.Context) (*pgx.Conn, error) {
			cfg, err := pgx.ParseConfig(url)
			if err != nil {
				return nil, err
			}
			cfg.RuntimeParams["application_name"] = "computed-events-listener"
			return pgx.ConnectConfig(ctx, cfg)
		},
		ReconnectDelay: time.Second,
	}
	l.Handle("compute_instance_events", oldHandler{func(tenant string) {
		heard.Add(1)
		mu.Lock()
		s := streams[tenant]
		mu.Unlock()
		if s != nil {
			select {
			case s <- struct{}{}:
			default:
			}
		}
	}, &up})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = l.Listen(ctx) }()
	for !up.Load() {
		time.Sleep(10 * time.Millisecond)
	}
	return func() {
		cancel()
		<-done
		b.Logf("   the old listener heard %d notifications", heard.Load())
	}
}

type oldHandler struct {
	wake func(tenant string)
	up   *atomic.Bool
}

func (h oldHandler) HandleNotification(_ context.Context, n *pgconn.Notification, _ *pgx.Conn) error {
	h.wake(n.Payload)
	return nil
}

func (h oldHandler) HandleBacklog(context.Context, string, *pgx.Conn) error {
	h.up.Store(true)
	return nil
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
