package runner_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/bettercompute/computed/internal/cluster"
	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/events"
	"github.com/bettercompute/computed/internal/ids"
	"github.com/bettercompute/computed/internal/instances"
	"github.com/bettercompute/computed/internal/instances/runner"
	"github.com/bettercompute/computed/internal/store"
	"github.com/bettercompute/computed/internal/testkit"
	"github.com/bettercompute/computed/internal/testkit/logbuf"
	"github.com/bettercompute/computed/internal/testkit/pgtest"
	"github.com/bettercompute/computed/internal/testkit/wait"
)

// One replica's job queue against a real database and the sim provider:
// Run drives instances to where they should be, Shutdown leaves nothing
// behind, two replicas share the work, a dead replica's jobs are rescued
// by the other through its liveness lock, the sweep queues what no job
// covers, and the retention jobs delete what they promise and nothing
// else.

func TestMain(m *testing.M) { pgtest.Main(m) }

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// newRunner builds a runner over db (not running), shut down and closed at
// cleanup.
func newRunner(t *testing.T, db *store.DB, log *slog.Logger, cfg runner.Config) *runner.Runner {
	t.Helper()
	if log == nil {
		log = quiet()
	}
	r, err := runner.New(db, log, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Shutdown(context.Background()); r.Close() })
	return r
}

func run(t *testing.T, r *runner.Runner) {
	t.Helper()
	if err := r.Run(context.Background()); err != nil {
		t.Fatalf("run: %v", err)
	}
}

func exec(t *testing.T, db *store.DB, q string, args ...any) {
	t.Helper()
	if _, err := db.Exec(q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// simPool makes tenant acme and a sim provider pool whose VMs are made at
// once, and returns the pool.
func simPool(t *testing.T, db *store.DB) string {
	t.Helper()
	exec(t, db, `INSERT INTO tenants (tenant_id, name) VALUES ('acme', 'Acme') ON CONFLICT DO NOTHING`)
	id := ids.New(ids.Pool)
	exec(t, db, `INSERT INTO pools (pool_id, tenant_id, name, site, gpu_model, sharing_mode, kind, provider, policy)
		VALUES ($1, 'acme', $1, 'fra1', 'H100', 'exclusive', 'vps-provider', 'sim', '{"sim": {"latencyMs": 0}}')`, id)
	return id
}

// create makes an instance through the service (which queues its job in
// the same transaction).
func create(t *testing.T, db *store.DB, r *runner.Runner, pool string) string {
	t.Helper()
	var id string
	err := db.Tx(context.Background(), func(tx *sqlx.Tx) error {
		i, err := r.Service().Create(context.Background(), tx, &instances.CreateInput{TenantID: "acme", PoolID: pool,
			Name: ids.New("vm"), Size: instances.Size{GPUs: 1, VCPUs: 2, MemoryGiB: 4}})
		if i != nil {
			id = i.InstanceID
		}
		return err
	})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	return id
}

func states(t *testing.T, db *store.DB, ids []string) map[string]string {
	t.Helper()
	var rows []struct {
		ID    string `db:"instance_id"`
		State string `db:"state"`
	}
	if err := db.Select(&rows, `SELECT instance_id, state FROM instances WHERE instance_id = ANY($1)`, ids); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, r := range rows {
		out[r.ID] = r.State
	}
	return out
}

// allRunning waits until every instance is running.
func allRunning(t *testing.T, db *store.DB, ids []string) {
	t.Helper()
	wait.Eventually(t, 20*time.Second, func() error {
		for id, st := range states(t, db, ids) {
			if st != instances.Running {
				return fmt.Errorf("%s is %s", id, st)
			}
		}
		return nil
	})
}

// workers are the client ids that attempted the instances' reconcile jobs.
func workers(t *testing.T, db *store.DB, ids []string) []string {
	t.Helper()
	var out []string
	if err := db.Select(&out, `SELECT DISTINCT c FROM river_job, unnest(attempted_by) c WHERE kind = $1 AND args->>'instanceId' = ANY($2) ORDER BY 1`,
		instances.Kind, ids); err != nil {
		t.Fatal(err)
	}
	return out
}

// livenessLocks counts the liveness locks held for client ids.
func livenessLocks(t *testing.T, db *store.DB, clientID string) int {
	t.Helper()
	var n int
	if err := db.Get(&n, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND classid = 72483 AND objsubid = 2
		AND objid = hashtext($1)::oid AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`, clientID); err != nil {
		t.Fatal(err)
	}
	return n
}

// recorder keeps the log records a runner writes, and counts those made
// after it is told to mark.
type recorder struct {
	mu    sync.Mutex
	after bool
	late  []string
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.after {
		r.late = append(r.late, rec.Message)
	}
	return nil
}
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *recorder) WithGroup(string) slog.Handler      { return r }
func (r *recorder) mark()                              { r.mu.Lock(); r.after = true; r.mu.Unlock() }
func (r *recorder) lateRecords() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.late)
}

// A runner queues from its construction (the service's creates) and, once
// run, drives the instances of a sim pool to running and completes their
// jobs. Shutdown releases the liveness lock and the maintenance lease at
// once, and after it the runner works nothing: another replica works
// what is queued next, alone, and the stopped one logs nothing more.
func TestRunDrivesInstancesAndShutdownStopsEverything(t *testing.T) {
	db := pgtest.DB(t)
	pool := simPool(t, db)
	rec := &recorder{}
	a := newRunner(t, db, slog.New(rec), runner.Config{SweepEvery: 50 * time.Millisecond, RescueEvery: 50 * time.Millisecond})
	var first []string
	for k := 0; k < 3; k++ {
		first = append(first, create(t, db, a, pool))
	}
	if st := states(t, db, first); st[first[0]] != instances.Pending {
		t.Fatalf("before Run: %v", st)
	}
	run(t, a)
	allRunning(t, db, first)
	wait.Eventually(t, 10*time.Second, func() error {
		var open int
		if err := db.Get(&open, `SELECT count(*) FROM river_job WHERE kind = $1 AND state <> 'completed'`, instances.Kind); err != nil {
			return err
		}
		if open > 0 {
			return fmt.Errorf("%d reconcile jobs not completed", open)
		}
		return nil
	})
	if w := workers(t, db, first); !slices.Equal(w, []string{a.ClientID()}) {
		t.Fatalf("worked by %v", w)
	}
	if livenessLocks(t, db, a.ClientID()) != 1 {
		t.Fatal("a running replica holds no liveness lock")
	}
	wait.Eventually(t, 10*time.Second, func() error {
		var n int
		if err := db.Get(&n, `SELECT count(*) FROM cluster_leases WHERE name = 'maintenance' AND holder = $1`, a.ClientID()); err != nil || n != 1 {
			return fmt.Errorf("the runner's own maintainer holds no lease (%d, %v)", n, err)
		}
		return nil
	})

	if err := a.Shutdown(context.Background()); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	rec.mark()
	// The lock's session ends (the backend exits a moment after the
	// client hangs up).
	wait.Eventually(t, 5*time.Second, func() error {
		if n := livenessLocks(t, db, a.ClientID()); n != 0 {
			return fmt.Errorf("after Shutdown the liveness lock is held (%d)", n)
		}
		return nil
	})
	var leases int
	if err := db.Get(&leases, `SELECT count(*) FROM cluster_leases WHERE holder = $1`, a.ClientID()); err != nil || leases != 0 {
		t.Fatalf("after Shutdown the lease is held (%d, %v)", leases, err)
	}
	if err := a.Shutdown(context.Background()); err != nil {
		t.Fatalf("a second Shutdown: %v", err)
	}

	// Another replica, whose maintainer the test runs: what is queued now
	// is its alone, while its sweep runs several times.
	m := cluster.New(db, "maintenance", "replica-b", quiet())
	b := newRunner(t, db, nil, runner.Config{Maintainer: m, SweepEvery: 50 * time.Millisecond, RescueEvery: 50 * time.Millisecond})
	// Queued through the stopped runner's service: its client still
	// inserts, it no longer works.
	var next []string
	for k := 0; k < 4; k++ {
		next = append(next, create(t, db, a, pool))
	}
	run(t, b)
	mctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.Run(mctx) }()
	t.Cleanup(func() { stop(); <-done })
	allRunning(t, db, next)
	wait.Eventually(t, 10*time.Second, func() error {
		if n := m.Runs("instances.sweep"); n < 3 {
			return fmt.Errorf("%d sweeps", n)
		}
		return nil
	})
	if w := workers(t, db, next); !slices.Equal(w, []string{b.ClientID()}) {
		t.Fatalf("after Shutdown the jobs were worked by %v (stopped: %s)", w, a.ClientID())
	}
	if late := rec.lateRecords(); len(late) > 0 {
		t.Fatalf("the stopped runner logged %q", late)
	}
}

// The sweep queues a job for every unconverged instance without one (once:
// jobs are unique), and for live instances on hosts removed since shortly
// before its previous run (all removed hosts on its first run).
func TestSweep(t *testing.T) {
	db := pgtest.DB(t)
	pool := simPool(t, db)
	r := newRunner(t, db, nil, runner.Config{})
	sweep := func() int {
		t.Helper()
		n, err := r.Sweep(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	finish := func() {
		exec(t, db, `UPDATE river_job SET state = 'completed', finalized_at = now() WHERE state <> 'completed'`)
	}
	if n := sweep(); n != 0 {
		t.Fatalf("an empty database: %d queued", n)
	}
	lost := ids.New(ids.Instance) // pending, wanting running, with no job
	exec(t, db, `INSERT INTO instances (instance_id, tenant_id, pool_id, name, gpus, vcpus, memory_gib, desired_state)
		VALUES ($1, 'acme', $2, $1, 1, 2, 4, 'running')`, lost, pool)
	if n := sweep(); n != 1 {
		t.Fatalf("a lost instance: %d queued", n)
	}
	if n := sweep(); n != 0 {
		t.Fatalf("again: %d queued", n)
	}
	finish()
	if n := sweep(); n != 1 {
		t.Fatalf("after its job completed, still unconverged: %d queued", n)
	}
	finish()
	exec(t, db, `UPDATE instances SET state = 'provisioning' WHERE instance_id = $1`, lost)
	exec(t, db, `UPDATE instances SET state = 'running' WHERE instance_id = $1`, lost)

	// Hosts: a running (converged) instance on a host removed two hours ago
	// is not looked at again by this runner's next sweep, but is by a new
	// runner's first; one on a host removed now is.
	hosted := ids.New(ids.Pool)
	exec(t, db, `INSERT INTO pools (pool_id, tenant_id, name, site, gpu_model, sharing_mode, kind) VALUES ($1, 'acme', $1, 'fra1', 'H100', 'exclusive', 'vps-hosted')`, hosted)
	onHost := func(removedAgo string) string {
		node, id := ids.New(ids.Node), ids.New(ids.Instance)
		exec(t, db, `INSERT INTO nodes (node_id, tenant_id, pool_id, name, state, attestor, csr_fingerprint, certificate, cert_expires_at)
			VALUES ($1, 'acme', $2, $1, 'ready', 'token', $1, 'x', now() + interval '1 day')`, node, hosted)
		exec(t, db, `INSERT INTO instances (instance_id, tenant_id, pool_id, name, gpus, vcpus, memory_gib, desired_state, host_node_id)
			VALUES ($1, 'acme', $2, $1, 1, 2, 4, 'running', $3)`, id, hosted, node)
		exec(t, db, `UPDATE instances SET state = 'provisioning' WHERE instance_id = $1`, id)
		exec(t, db, `UPDATE instances SET state = 'running' WHERE instance_id = $1`, id)
		exec(t, db, `UPDATE nodes SET state = 'removed', removed_at = now() - $2::interval WHERE node_id = $1`, node, removedAgo)
		return id
	}
	old := onHost("2 hours")
	if n := sweep(); n != 0 {
		t.Fatalf("a host removed before the previous sweep: %d queued", n)
	}
	r2 := newRunner(t, db, nil, runner.Config{})
	if n, err := r2.Sweep(context.Background()); err != nil || n != 1 {
		t.Fatalf("a new runner's first sweep: %d queued, %v", n, err)
	}
	finish()
	fresh := onHost("0 seconds")
	if n := sweep(); n != 1 {
		t.Fatalf("a host removed now: %d queued", n)
	}
	var queued []string
	if err := db.Select(&queued, `SELECT args->>'instanceId' FROM river_job WHERE kind = $1 AND state = 'available' ORDER BY 1`, instances.Kind); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(queued, []string{fresh}) {
		t.Fatalf("queued %v, want %s (not %s)", queued, fresh, old)
	}
}

// Two replicas on one database: while one works a job, the other neither
// takes nor rescues it; once the first is dead (its connections gone,
// with its liveness lock), the other rescues the job within seconds, not
// river's minute, and finishes the instance.
func TestDeadReplicasJobsAreRescued(t *testing.T) {
	url := pgtest.DBURL(t)
	dbB := pgtest.Open(t, url)
	pool := simPool(t, dbB)
	// Replica a reaches the database through a proxy the test freezes: a
	// replica that stopped answering, as a killed process looks once its
	// connections are cut.
	proxy := testkit.NewProxy(t, pgtest.Addr(t))
	dbA, err := store.OpenWith(context.Background(), strings.Replace(url, pgtest.Addr(t), proxy.Addr(), 1), store.Options{Replica: "replica-a"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dbA.Close() })
	seqA := events.Start(dbA, quiet())
	t.Cleanup(seqA.Stop)
	a := newRunner(t, dbA, nil, runner.Config{})
	b := newRunner(t, dbB, nil, runner.Config{})
	t.Cleanup(proxy.Thaw) // first: let replica a's cleanups end

	// The test holds the instance's row lock, so a's step waits in it with
	// its job running.
	id := create(t, dbB, b, pool)
	lock, err := dbB.BeginTxx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback() //nolint:errcheck // released below
	if _, err := lock.Exec(`SELECT 1 FROM instances WHERE instance_id = $1 FOR UPDATE`, id); err != nil {
		t.Fatal(err)
	}
	run(t, a)
	type job struct {
		State       string   `db:"state"`
		Attempted   string   `db:"attempted_by"`
		AttemptedBy []string `db:"-"`
		Running     float64  `db:"running_for"`
		Errors      string   `db:"errors"`
	}
	read := func() job {
		var j job
		if err := dbB.Get(&j, `SELECT state, COALESCE(array_to_string(attempted_by, ','), '') AS attempted_by, COALESCE(extract(epoch FROM now() - attempted_at), 0) AS running_for,
				COALESCE(array_to_string(errors, ' '), '') AS errors
			FROM river_job WHERE kind = $1 AND args->>'instanceId' = $2`, instances.Kind, id); err != nil {
			t.Fatal(err)
		}
		if j.Attempted != "" {
			j.AttemptedBy = strings.Split(j.Attempted, ",")
		}
		return j
	}
	wait.Eventually(t, 10*time.Second, func() error {
		if j := read(); j.State != "running" || j.Running < 1.2 {
			return fmt.Errorf("job %s by %v for %.1fs", j.State, j.AttemptedBy, j.Running)
		}
		return nil
	})
	run(t, b)
	if n, err := b.Rescue(context.Background()); err != nil || n != 0 {
		t.Fatalf("the other replica rescued %d jobs of a live one (%v)", n, err)
	}
	if j := read(); j.State != "running" || !slices.Equal(j.AttemptedBy, []string{a.ClientID()}) {
		t.Fatalf("while a works it: %s by %v", j.State, j.AttemptedBy)
	}

	// a dies: it answers nothing, and PostgreSQL ends its sessions (with
	// its liveness lock and its step's transaction).
	proxy.Freeze()
	exec(t, dbB, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE 'computed/replica-a/%'`)
	wait.Eventually(t, 8*time.Second, func() error {
		if n := livenessLocks(t, dbB, a.ClientID()); n != 0 {
			return errors.New("a's liveness lock is still held")
		}
		return nil
	})
	wait.Eventually(t, 8*time.Second, func() error {
		j := read()
		if len(j.AttemptedBy) < 2 || j.AttemptedBy[len(j.AttemptedBy)-1] != b.ClientID() {
			return fmt.Errorf("job %s by %v", j.State, j.AttemptedBy)
		}
		if !strings.Contains(j.Errors, "rescued: the replica working it is gone") {
			return fmt.Errorf("taken by b without a rescue: %s", j.Errors)
		}
		return nil
	})
	if err := lock.Rollback(); err != nil {
		t.Fatal(err)
	}
	allRunning(t, dbB, []string{id})
}

// The retention jobs run at start (on the leader): events.prune deletes,
// per tenant, the prefix of its stream up to its last event older than the
// event retention and records how far; audit.prune deletes the records
// older than the audit retention and records that it did. Younger events
// and records, and other tenants' streams, stay.
func TestRetentionJobs(t *testing.T) {
	db := pgtest.DB(t)
	simPool(t, db)
	exec(t, db, `INSERT INTO tenants (tenant_id, name) VALUES ('beta', 'Beta')`)
	ctx := store.ForRequest(context.Background())
	for _, tenant := range []string{"acme", "acme", "acme", "acme", "beta", "beta"} {
		if err := db.Tx(ctx, func(tx *sqlx.Tx) error {
			return events.Write(ctx, tx, events.Record{TenantID: tenant, Type: events.Created, ResourceID: ids.New(ids.Instance), Data: map[string]any{}})
		}); err != nil {
			t.Fatal(err)
		}
	}
	// acme's 1 and 3 are older than the retention, 2 (in the prefix) and
	// 4 are not; beta's are all young.
	exec(t, db, `UPDATE events SET occurred_at = now() - interval '3 days' WHERE tenant_id = 'acme' AND seq IN (1, 3)`)
	exec(t, db, `INSERT INTO audit_log (tenant_id, audit_id, principal_id, principal_kind, principal_name,
			method, resource_type, resource_id, outcome, request_id, occurred_at)
		SELECT 'acme', 'aud_' || lpad(g::text, 26, '0'), NULL, 'system', 'test', 'projects.create', 'compute-tenant', 'acme',
			'success', 'r-' || g, now() - g * interval '20 days'
		FROM generate_series(1, 4) g`)
	r := newRunner(t, db, nil, runner.Config{EventRetention: 24 * time.Hour, AuditRetention: 50 * 24 * time.Hour})
	run(t, r)
	wait.Eventually(t, 30*time.Second, func() error {
		var done []string
		if err := db.Select(&done, `SELECT kind FROM river_job WHERE kind IN ('events.prune', 'audit.prune') AND state = 'completed' ORDER BY 1`); err != nil {
			return err
		}
		if !slices.Equal(done, []string{"audit.prune", "events.prune"}) {
			return fmt.Errorf("completed: %v", done)
		}
		return nil
	})
	var left []string
	if err := db.Select(&left, `SELECT tenant_id || ':' || seq FROM events ORDER BY tenant_id, seq`); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(left, []string{"acme:4", "beta:1", "beta:2"}) {
		t.Fatalf("events left %v", left)
	}
	var pruned []string
	if err := db.Select(&pruned, `SELECT tenant_id || ':' || pruned_seq FROM event_streams ORDER BY tenant_id`); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(pruned, []string{"acme:3", "beta:0"}) {
		t.Fatalf("pruned marks %v", pruned)
	}
	var audits []string
	if err := db.Select(&audits, `SELECT request_id FROM audit_log WHERE tenant_id = 'acme' ORDER BY 1`); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(audits, []string{"r-1", "r-2"}) {
		t.Fatalf("audit records left %v", audits)
	}
	var prunes int
	if err := db.Get(&prunes, `SELECT count(*) FROM audit_log WHERE tenant_id = '@platform' AND method = 'audit.prune'`); err != nil || prunes != 1 {
		t.Fatalf("%d audit.prune records, %v", prunes, err)
	}
}

// A retention job runs every tenth of its retention (between 10 s and an
// hour), not only when a replica starts leading: with a one-minute event
// retention, an event that ages past it while the runner runs is gone
// within seconds, as is an audit record past a two-minute audit retention.
func TestRetentionJobsRunEveryTenthOfTheRetention(t *testing.T) {
	for _, c := range []struct{ retention, every time.Duration }{
		{time.Minute, 10 * time.Second}, {3 * time.Minute, 18 * time.Second}, {time.Hour, 6 * time.Minute},
		{10 * time.Hour, time.Hour}, {7 * 24 * time.Hour, time.Hour}, {time.Second, 10 * time.Second},
	} {
		if got := runner.PruneInterval(c.retention); got != c.every {
			t.Errorf("PruneInterval(%v) = %v, want %v", c.retention, got, c.every)
		}
	}
	db := pgtest.DB(t)
	pool := simPool(t, db)
	r := newRunner(t, db, nil, runner.Config{EventRetention: time.Minute, AuditRetention: 2 * time.Minute})
	run(t, r)
	completed := func(kind string) int {
		var n int
		if err := db.Get(&n, `SELECT count(*) FROM river_job WHERE kind = $1 AND state = 'completed'`, kind); err != nil {
			t.Fatal(err)
		}
		return n
	}
	wait.Eventually(t, 30*time.Second, func() error {
		if completed("events.prune") == 0 || completed("audit.prune") == 0 {
			return fmt.Errorf("the runs at start are not done")
		}
		return nil
	})
	// After the runs at start: an event and an audit record older than
	// their retentions.
	ctx := store.ForRequest(context.Background())
	if err := db.Tx(ctx, func(tx *sqlx.Tx) error {
		return events.Write(ctx, tx, events.Record{TenantID: "acme", Type: events.Created, ResourceID: ids.New(ids.Instance), Data: map[string]any{}})
	}); err != nil {
		t.Fatal(err)
	}
	wait.Eventually(t, 10*time.Second, func() error {
		var n int
		if err := db.Get(&n, `SELECT count(*) FROM events WHERE tenant_id = 'acme'`); err != nil || n != 1 {
			return fmt.Errorf("%d events numbered, %v", n, err)
		}
		return nil
	})
	exec(t, db, `UPDATE events SET occurred_at = now() - interval '2 minutes' WHERE tenant_id = 'acme'`)
	// Instances deleted 2 minutes ago (purged with the events' retention),
	// a moment ago, and one running (both kept; converged, so the
	// reconciler leaves them alone and writes no event).
	inst := func(deletedAgo string) string {
		id := ids.New(ids.Instance)
		exec(t, db, `INSERT INTO instances (instance_id, tenant_id, pool_id, name, gpus, vcpus, memory_gib, desired_state, state, deleted_at)
			VALUES ($1, 'acme', $2, $1, 0, 1, 1, CASE WHEN $3 = '' THEN 'running' ELSE 'deleted' END,
				CASE WHEN $3 = '' THEN 'running' ELSE 'deleted' END, now() - NULLIF($3, '')::interval)`, id, pool, deletedAgo)
		return id
	}
	old, recent, live := inst("2 minutes"), inst("1 second"), inst("")
	exec(t, db, `INSERT INTO audit_log (tenant_id, audit_id, principal_id, principal_kind, principal_name,
			method, resource_type, resource_id, outcome, request_id, occurred_at)
		VALUES ('acme', 'aud_' || lpad('1', 26, '0'), NULL, 'system', 'test', 'projects.create', 'compute-tenant', 'acme',
			'success', 'r-old', now() - interval '3 minutes')`)
	wait.Eventually(t, 40*time.Second, func() error {
		var ev, au int
		if err := db.Get(&ev, `SELECT count(*) FROM events WHERE tenant_id = 'acme'`); err != nil {
			return err
		}
		if err := db.Get(&au, `SELECT count(*) FROM audit_log WHERE request_id = 'r-old'`); err != nil {
			return err
		}
		var left []string
		if err := db.Select(&left, `SELECT instance_id FROM instances ORDER BY instance_id`); err != nil {
			return err
		}
		if ev != 0 || au != 0 || slices.Contains(left, old) {
			return fmt.Errorf("left: %d events, %d audit records, instances %v (prune runs: events %d, audit %d)", ev, au, left, completed("events.prune"), completed("audit.prune"))
		}
		if !slices.Contains(left, recent) || !slices.Contains(left, live) {
			t.Fatalf("purged an instance deleted a moment ago or a live one: left %v", left)
		}
		return nil
	})
}

// River's cleaner deletes a job completed more than CompletedJobsKept ago
// (an hour, not River's 24) and keeps a younger one.
func TestCompletedJobsAreKeptAnHour(t *testing.T) {
	db := pgtest.DB(t)
	simPool(t, db)
	exec(t, db, `INSERT INTO river_job (args, kind, max_attempts, queue, state, finalized_at, attempted_at)
		VALUES ('{"instanceId": "inst_old"}', $2, 20, $3, 'completed', now() - $1 * interval '1 second' - interval '5 minutes', now() - interval '2 hours'),
		       ('{"instanceId": "inst_young"}', $2, 20, $3, 'completed', now() - $1 * interval '1 second' + interval '5 minutes', now() - interval '1 hour')`,
		runner.CompletedJobsKept.Seconds(), instances.Kind, instances.Queue)
	r := newRunner(t, db, nil, runner.Config{})
	run(t, r)
	wait.Eventually(t, 30*time.Second, func() error {
		var left []string
		if err := db.Select(&left, `SELECT args->>'instanceId' FROM river_job WHERE kind = $1 ORDER BY 1`, instances.Kind); err != nil {
			return err
		}
		if !slices.Equal(left, []string{"inst_young"}) {
			return fmt.Errorf("completed jobs left: %v", left)
		}
		return nil
	})
}

// When the leader stops, the replica that leads next runs the retention
// jobs at once, not an interval later: with a 10-hour retention (an hourly
// prune), a second run follows the first within seconds.
func TestRetentionJobsRunWhenLeadershipMoves(t *testing.T) {
	db := pgtest.DB(t)
	simPool(t, db)
	cfg := runner.Config{EventRetention: 10 * time.Hour, AuditRetention: 10 * time.Hour}
	a, b := newRunner(t, db, nil, cfg), newRunner(t, db, nil, cfg)
	completed := func(want int) func() error {
		return func() error {
			var n int
			if err := db.Get(&n, `SELECT count(*) FROM river_job WHERE kind = 'events.prune' AND state = 'completed'`); err != nil {
				return err
			}
			if n < want {
				return fmt.Errorf("%d events.prune runs completed, want %d", n, want)
			}
			return nil
		}
	}
	run(t, a)
	wait.Eventually(t, 30*time.Second, completed(1))
	run(t, b)
	if err := a.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	wait.Eventually(t, 30*time.Second, completed(2))
}

// A replica stopping cancels, after its grace period, a reconcile step
// still running (here, waiting for the instance's row): the step is
// retried, and the log says so at info level, not as a failed step's
// warning (a re-probe saw one on half of the SIGTERMs, which alerting on
// warnings would page on at every deploy).
func TestStopInterruptingAStepIsNotAWarning(t *testing.T) {
	db := pgtest.DB(t)
	pool := simPool(t, db)
	var out logbuf.Buffer
	r := newRunner(t, db, slog.New(slog.NewJSONHandler(&out, nil)), runner.Config{})
	id := create(t, db, r, pool)
	// Hold the instance's row: the step waits for it.
	tx, err := db.Beginx()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.Exec(`SELECT 1 FROM instances WHERE instance_id = $1 FOR UPDATE`, id); err != nil {
		t.Fatal(err)
	}
	run(t, r)
	wait.Eventually(t, 10*time.Second, func() error {
		var n int
		if err := db.Get(&n, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%FROM instances WHERE instance_id = $1 FOR UPDATE%'`); err != nil || n == 0 {
			return fmt.Errorf("the step does not wait for the row yet (%v)", err)
		}
		return nil
	})
	if err := r.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	logs := out.String()
	if strings.Contains(logs, `"level":"WARN"`) || !strings.Contains(logs, "reconcile step interrupted") {
		t.Fatalf("the log of a step the stop cancelled:\n%s", logs)
	}
}

// With the server's maintainer (Config.Maintainer), the runner adds its
// sweep and rescue to it while it runs, and Shutdown takes them off: the
// maintainer, still running, calls them no more.
func TestShutdownRemovesDutiesFromTheServersMaintainer(t *testing.T) {
	db := pgtest.DB(t)
	m := cluster.New(db, "maintenance", "server", quiet())
	r := newRunner(t, db, nil, runner.Config{Maintainer: m, SweepEvery: time.Millisecond, RescueEvery: time.Millisecond})
	probe := m.Add("probe", time.Millisecond, func(context.Context) error { return nil })
	defer probe()
	mctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.Run(mctx) }()
	t.Cleanup(func() { stop(); <-done })
	run(t, r)
	wait.Eventually(t, 10*time.Second, func() error {
		if m.Runs("instances.sweep") < 2 || m.Runs("instances.rescue") < 2 {
			return fmt.Errorf("sweeps %d, rescues %d", m.Runs("instances.sweep"), m.Runs("instances.rescue"))
		}
		return nil
	})
	if err := r.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	sweeps, rescues, probes := m.Runs("instances.sweep"), m.Runs("instances.rescue"), m.Runs("probe")
	wait.Eventually(t, 10*time.Second, func() error {
		if n := m.Runs("probe"); n < probes+5 {
			return fmt.Errorf("%d maintainer rounds since Shutdown", n-probes)
		}
		return nil
	})
	// One round may have begun before Shutdown took the duties off.
	if sw, rs := m.Runs("instances.sweep"), m.Runs("instances.rescue"); sw > sweeps+1 || rs > rescues+1 {
		t.Fatalf("after Shutdown the maintainer ran %d sweeps and %d rescues", sw-sweeps, rs-rescues)
	}
}

// Rescue makes available the reconcile jobs left running (for over a
// second) by a client that holds no liveness lock, and nothing else: not
// a job just taken, not one whose client lives, not another kind of job.
func TestRescueTakesOnlyDeadClientsReconcileJobs(t *testing.T) {
	db := pgtest.DB(t)
	pool := simPool(t, db)
	r := newRunner(t, db, nil, runner.Config{})
	// A client that lives: it holds its liveness lock on a session of its own.
	alive, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer alive.Close()
	if _, err := alive.ExecContext(context.Background(), `SELECT pg_advisory_lock(72483, hashtext('alive'))`); err != nil {
		t.Fatal(err)
	}
	running := func(by, since string) int64 {
		t.Helper()
		id := create(t, db, r, pool)
		var job int64
		if err := db.Get(&job, `UPDATE river_job SET state = 'running', attempt = 1, attempted_at = now() - $2::interval,
				attempted_by = ARRAY[$1] WHERE args->>'instanceId' = $3 RETURNING id`, by, since, id); err != nil {
			t.Fatal(err)
		}
		return job
	}
	dead := running("gone", "2 seconds")
	fresh := running("gone", "0 seconds")
	lives := running("alive", "2 seconds")
	var prune int64
	if err := db.Get(&prune, `INSERT INTO river_job (kind, args, queue, state, attempt, attempted_at, attempted_by, max_attempts, priority)
		VALUES ('events.prune', '{}', 'default', 'running', 1, now() - interval '2 seconds', ARRAY['gone'], 25, 1) RETURNING id`); err != nil {
		t.Fatal(err)
	}
	if n, err := r.Rescue(context.Background()); err != nil || n != 1 {
		t.Fatalf("rescued %d, %v", n, err)
	}
	var got []string
	if err := db.Select(&got, `SELECT id || ':' || state FROM river_job WHERE id = ANY($1) ORDER BY id`, []int64{dead, fresh, lives, prune}); err != nil {
		t.Fatal(err)
	}
	want := []string{fmt.Sprint(dead, ":available"), fmt.Sprint(fresh, ":running"), fmt.Sprint(lives, ":running"), fmt.Sprint(prune, ":running")}
	if !slices.Equal(got, want) {
		t.Fatalf("jobs %v, want %v", got, want)
	}
	if n, err := r.Rescue(context.Background()); err != nil || n != 0 {
		t.Fatalf("again: rescued %d, %v", n, err)
	}
}

// Purge removes the instances deleted before its cutoff and nothing else;
// a purged instance is NOT_FOUND, as an id never used.
func TestPurgeRemovesInstancesDeletedBeforeTheCutoff(t *testing.T) {
	db := pgtest.DB(t)
	pool := simPool(t, db)
	inst := func(state, deletedAgo, createdAgo string) string {
		id := ids.New(ids.Instance)
		exec(t, db, `INSERT INTO instances (instance_id, tenant_id, pool_id, name, gpus, vcpus, memory_gib, desired_state, state, deleted_at, created_at)
			VALUES ($1, 'acme', $2, $1, 0, 1, 1, CASE WHEN $3 = 'deleted' THEN 'deleted' ELSE 'running' END, $3,
				now() - NULLIF($4, '')::interval, now() - $5::interval)`, id, pool, state, deletedAgo, createdAgo)
		return id
	}
	old1, old2 := inst("deleted", "2 hours", "3 hours"), inst("deleted", "61 minutes", "3 hours")
	recent, live, failed := inst("deleted", "59 minutes", "3 hours"), inst("running", "", "3 hours"), inst("failed", "", "3 hours")
	ctx := context.Background()
	n, err := instances.Purge(ctx, db, time.Now().Add(-time.Hour))
	if err != nil || n != 2 {
		t.Fatalf("purged %d, %v; want 2", n, err)
	}
	for _, id := range []string{old1, old2} {
		if _, err := instances.Get(ctx, db, &instances.RefInput{TenantID: "acme", InstanceID: id}); errs.CodeOf(err) != errs.NotFound {
			t.Fatalf("a purged instance: %v", err)
		}
	}
	for _, id := range []string{recent, live, failed} {
		if _, err := instances.Get(ctx, db, &instances.RefInput{TenantID: "acme", InstanceID: id}); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
	}
	if n, err := instances.Purge(ctx, db, time.Now().Add(-time.Hour)); err != nil || n != 0 {
		t.Fatalf("again: purged %d, %v", n, err)
	}
}
