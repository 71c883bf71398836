// Package runner runs the instances' background work in one replica:
// the river client (its construction, the workers it registers, the
// periodic retention jobs, the retry policy), the replica's liveness lock,
// and the cluster's maintenance duties that keep the reconciler going (the
// sweep that queues unconverged instances, the rescue of a dead replica's
// jobs). What the reconciler does to an instance is package instances';
// what changes here is how and when jobs run, never what a step does.
// runner depends on instances (the service, its worker and its job),
// never the other way: the service reaches the queue only through the
// client UseQueue hands it.
package runner

import (
	"context"
	"crypto/rand"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jmoiron/sqlx"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverdatabasesql"
	"github.com/riverqueue/river/rivertype"

	"github.com/bettercompute/computed/internal/audit"
	"github.com/bettercompute/computed/internal/cluster"
	"github.com/bettercompute/computed/internal/events"
	"github.com/bettercompute/computed/internal/instances"
	"github.com/bettercompute/computed/internal/safe"
	"github.com/bettercompute/computed/internal/store"
)

// Config tunes the reconciler.
type Config struct {
	// Workers is how many instances one replica reconciles at once; each
	// step holds one database connection (of the 20 a replica opens).
	Workers int
	// EventRetention is how long instance events are kept (default 7 days).
	EventRetention time.Duration
	// AuditRetention is how long audit records are kept (default 400
	// days); the replicas' river client runs its retention job too.
	AuditRetention time.Duration
	// SweepEvery is how often the cluster looks for instances that are
	// not converged and have no queued job (default 5 s).
	SweepEvery time.Duration
	// RescueEvery is how often the cluster looks for jobs left running
	// by a dead replica (default 1 s).
	RescueEvery time.Duration
	// Maintainer runs the sweep and the rescue on the replica holding the
	// cluster's maintenance lease; nil: the runner makes its own (its
	// lease is still the cluster's, so one replica at a time sweeps).
	Maintainer *cluster.Maintainer
	// ProviderConns is the database connections the sim provider may open
	// (instances.Config's; default 8, part of the replica's
	// COMPUTE_DB_MAX_CONNS).
	ProviderConns int
}

func (c *Config) defaults() {
	if c.Workers <= 0 {
		c.Workers = 10
	}
	if c.EventRetention <= 0 {
		c.EventRetention = 7 * 24 * time.Hour
	}
	if c.AuditRetention <= 0 {
		c.AuditRetention = audit.DefaultRetention
	}
	if c.SweepEvery <= 0 {
		c.SweepEvery = 5 * time.Second
	}
	if c.RescueEvery <= 0 {
		c.RescueEvery = time.Second
	}
}

// Runner is one replica's job queue for the instances service: the river
// client (the service queues through it from the start) and, once Run,
// the workers, the liveness lock and the maintenance duties.
type Runner struct {
	svc      *instances.Service
	db       *store.DB
	log      *slog.Logger
	cfg      Config
	client   *river.Client[*sql.Tx]
	listen   *pgxpool.Pool
	clientID string

	mu      sync.Mutex
	live    *sql.Conn
	cancel  context.CancelFunc
	stopped chan struct{}
	// ownMaint is the maintainer the runner runs itself (Config's nil).
	ownMaint bool
	// removeDuties unregisters the sweep and the rescue.
	removeDuties func()
	// swept is the database time of the last sweep's start (zero: none
	// yet); the next one looks at nodes removed since shortly before it.
	sweptMu sync.Mutex
	swept   time.Time
}

// New builds the instances service and its queue: the river client, with
// the reconciler's worker and the retention jobs registered, is handed to
// the service (it may queue jobs before Run).
func New(db *store.DB, log *slog.Logger, cfg Config) (*Runner, error) {
	if db == nil {
		return nil, errors.New("instances runner: no database")
	}
	cfg.defaults()
	if log == nil {
		log = slog.Default()
	}
	svc, err := instances.NewService(db, log, instances.Config{ProviderConns: cfg.ProviderConns})
	if err != nil {
		return nil, err
	}
	s := &Runner{svc: svc, db: db, log: log, cfg: cfg}
	host, _ := os.Hostname()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	s.clientID = fmt.Sprintf("computed-%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b))
	if s.cfg.Maintainer == nil {
		s.cfg.Maintainer = cluster.New(db, "maintenance", s.clientID, log)
		s.ownMaint = true
	}
	// LISTEN needs a pgx connection of its own; everything else goes
	// through the product's database/sql pool, so InsertTx joins its
	// transactions.
	pcfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		return nil, err
	}
	// River's LISTEN holds one connection (part of COMPUTE_DB_MAX_CONNS).
	pcfg.MaxConns, pcfg.MinConns = 1, 0
	pcfg.ConnConfig.RuntimeParams["application_name"] = db.AppName("river")
	if s.listen, err = pgxpool.NewWithConfig(context.Background(), pcfg); err != nil {
		return nil, err
	}
	workers := river.NewWorkers()
	svc.AddWorkers(workers)
	river.AddWorker(workers, &pruneWorker{s: s})
	river.AddWorker(workers, &auditPruneWorker{s: s})
	s.client, err = river.NewClient(riverdatabasesql.NewWithPgxListener(db.DB.DB, s.listen), &river.Config{
		ID:                   s.clientID,
		Logger:               slog.New(warnOnly{log.Handler()}).With("component", "river"),
		Queues:               map[string]river.QueueConfig{instances.Queue: {MaxWorkers: cfg.Workers}, river.QueueDefault: {MaxWorkers: 2}},
		Workers:              workers,
		FetchCooldown:        10 * time.Millisecond,
		FetchPollInterval:    500 * time.Millisecond,
		JobTimeout:           30 * time.Second,
		RescueStuckJobsAfter: time.Minute,
		// A completed job is kept an hour, not River's 24: nothing reads
		// it (uniqueness counts only unfinished jobs), and a busy fleet's
		// day of reconcile steps is millions of rows (a soak grew the table
		// by 100 rows a minute at 10 calls a second).
		CompletedJobRetentionPeriod: CompletedJobsKept,
		RetryPolicy:                 retryPolicy{},
		PeriodicJobs:                []*river.PeriodicJob{retentionJob(pruneArgs{}, cfg.EventRetention), retentionJob(auditPruneArgs{}, cfg.AuditRetention)},
	})
	if err != nil {
		s.listen.Close()
		return nil, err
	}
	svc.UseQueue(s.client)
	return s, nil
}

// Service is the instances service whose jobs this runner runs.
func (s *Runner) Service() *instances.Service { return s.svc }

// warnOnly passes river's warnings and errors on; its per-job info lines
// (a retried step, a snooze) would drown the server's log. A record logged
// under a context already ended is its caller's end, not river's failure
// (a request's client went away in the middle of InsertTx: "Failed to send
// job insert notification"; the server stopping): the caller reports it
// where it happened (the request's log line and audit record), so it goes
// on at debug level.
type warnOnly struct{ slog.Handler }

func (h warnOnly) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn && h.Handler.Enabled(ctx, l)
}

func (h warnOnly) Handle(ctx context.Context, r slog.Record) error {
	if ctx.Err() != nil {
		if !h.Handler.Enabled(ctx, slog.LevelDebug) {
			return nil
		}
		r.Level = slog.LevelDebug
	}
	if r.Level >= slog.LevelError && unreachable(r) {
		// The database out of reach (stopped, frozen, restarting): river
		// retries on its own, and the server logs the outage at warning
		// level wherever it meets it, as here. An outage of 40 s was 30
		// river ERROR lines, the only ones in the log.
		r.Level = slog.LevelWarn
	}
	return h.Handler.Handle(ctx, r)
}

// outage are words of the errors river logs (as strings) when the
// database cannot be reached or is going away: pgx's connect and network
// errors, PostgreSQL's connection-exception and shutdown codes, deadlines.
var outage = []string{"failed to connect", "connection refused", "no such file or directory", "conn closed",
	"connection reset", "broken pipe", "i/o timeout", "unexpected EOF", "context deadline exceeded", "timeout: ",
	"SQLSTATE 08", "SQLSTATE 57P01", "SQLSTATE 57P02", "SQLSTATE 57P03", "SQLSTATE 57014", "the database system is"}

// unreachable says whether the record's error (river's "err" attribute)
// is one of an outage.
func unreachable(r slog.Record) bool {
	found := false
	r.Attrs(func(a slog.Attr) bool {
		if a.Key != "err" && a.Key != "error" {
			return true
		}
		msg := a.Value.String()
		for _, w := range outage {
			if strings.Contains(msg, w) {
				found = true
				return false
			}
		}
		return true
	})
	return found
}
func (h warnOnly) WithAttrs(a []slog.Attr) slog.Handler { return warnOnly{h.Handler.WithAttrs(a)} }
func (h warnOnly) WithGroup(n string) slog.Handler      { return warnOnly{h.Handler.WithGroup(n)} }

// retryPolicy retries a failed job run quickly with exponential backoff
// (river's default waits attempt^4 seconds); the instance's own tries bound
// what a step does.
type retryPolicy struct{}

func (retryPolicy) NextRetry(job *rivertype.JobRow) time.Time {
	return time.Now().Add(instances.Backoff(job.Attempt))
}

// Run starts the reconciler in this replica: it takes the liveness lock
// (other replicas rescue this one's jobs once it is released), starts the
// river client, and the sweep and rescue loops.
func (s *Runner) Run(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	live, err := s.db.DB.DB.Conn(ctx)
	if err != nil {
		return store.Wrap(err)
	}
	if _, err := live.ExecContext(ctx, `SELECT pg_advisory_lock($1, hashtext($2))`, livenessClass, s.clientID); err != nil {
		release(live)
		return store.Wrap(err)
	}
	if err := s.client.Start(ctx); err != nil {
		release(live)
		return err
	}
	s.live = live
	lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.cancel, s.stopped = cancel, make(chan struct{})
	rescue := s.cfg.Maintainer.Add("instances.rescue", s.cfg.RescueEvery, func(ctx context.Context) error {
		n, err := s.Rescue(ctx)
		if n > 0 {
			s.log.Info("rescued jobs of a dead replica", "jobs", n)
		}
		return err
	})
	sweep := s.cfg.Maintainer.Add("instances.sweep", s.cfg.SweepEvery, func(ctx context.Context) error {
		n, err := s.Sweep(ctx)
		if n > 0 {
			s.log.Info("reconciler sweep queued instances", "instances", n)
		}
		return err
	})
	s.removeDuties = func() { rescue(); sweep() }
	safe.Go(lctx, s.log, "instance maintenance duties", func() {
		defer close(s.stopped)
		if s.ownMaint {
			s.cfg.Maintainer.Run(lctx)
		} else {
			<-lctx.Done()
		}
	})
	s.log.Info("instance reconciler started", "clientId", s.clientID, "workers", s.cfg.Workers)
	return nil
}

// Shutdown stops the duties and the river client (running steps finish or are
// cancelled after a few seconds) and releases the liveness lock.
func (s *Runner) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cancel == nil {
		return nil
	}
	s.removeDuties()
	s.cancel()
	<-s.stopped
	s.cancel = nil
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err := s.client.Stop(sctx)
	if errors.Is(err, context.DeadlineExceeded) {
		err = s.client.StopAndCancel(ctx)
	}
	if s.live != nil {
		release(s.live)
		s.live = nil
	}
	return err
}

// release ends the liveness lock's session. The lock is a session's, so
// closing the *sql.Conn (which hands the session back to the pool) would
// keep it held for as long as the pool keeps that connection, and other
// replicas would take this one for alive; the connection is discarded
// instead, and PostgreSQL drops the lock with it, as for a dead replica.
func release(live *sql.Conn) {
	_ = live.Raw(func(any) error { return driver.ErrBadConn })
	_ = live.Close()
}

// Close releases the listener pool and the service's drivers (after
// Shutdown).
func (s *Runner) Close() {
	if s.listen != nil {
		s.listen.Close()
	}
	s.svc.Close()
}

// ClientID is this replica's river client id.
func (s *Runner) ClientID() string { return s.clientID }

// livenessClass is the first key of the replicas' liveness locks.
const livenessClass = 72483

// Rescue makes the reconcile jobs that a dead replica left running
// available again. A replica holds its liveness lock (a session advisory
// lock keyed by its river client id) for as long as it lives; PostgreSQL
// releases it when the replica's connection dies, so a running job whose
// client holds no lock has nobody working it. River's own rescuer does the
// same by age, but only every 30 seconds and after RescueStuckJobsAfter;
// this one notices within RescueEvery. Steps hold the instance's row lock,
// so a job run twice never works one instance twice at once.
func (s *Runner) Rescue(ctx context.Context) (int64, error) {
	res, err := s.db.ExecContext(ctx, `UPDATE river_job j SET state = 'available', scheduled_at = now(),
			errors = array_append(errors, jsonb_build_object('at', now(), 'attempt', j.attempt,
				'error', 'rescued: the replica working it is gone', 'trace', ''))
		WHERE j.kind = $1 AND j.state = 'running' AND j.attempted_at < now() - interval '1 second'
		  AND NOT EXISTS (SELECT 1 FROM pg_locks l
			WHERE l.locktype = 'advisory' AND l.granted AND l.classid = $2 AND l.objsubid = 2
			  AND l.objid = hashtext(j.attempted_by[array_upper(j.attempted_by, 1)])::oid
			  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()))`, instances.Kind, livenessClass)
	if err != nil {
		return 0, store.Wrap(err)
	}
	return res.RowsAffected()
}

// SweepSQL is the sweep's read: $1 is the time from which removed nodes
// are looked at (NULL: every removed node).
const SweepSQL = `
	SELECT instance_id FROM instances WHERE NOT converged
	UNION
	SELECT i.instance_id FROM nodes n JOIN instances i ON i.host_node_id = n.node_id
	WHERE n.state = 'removed' AND ($1::timestamptz IS NULL OR n.removed_at > $1::timestamptz)
	  AND i.state NOT IN ('deleted', 'failed')
	ORDER BY 1 LIMIT 5000`

// Sweep queues a reconciliation for every instance that is not converged
// (level-triggered: a lost wake-up, a pending instance whose room
// appeared, a job discarded by a bug) or whose host was removed, and
// returns how many it queued anew. It runs on one replica at a time (the
// maintenance lease), and what it reads does not grow with the fleet when
// nothing changes: the unconverged instances come from a partial index
// (empty when all are where they should be), and hosts from the nodes
// removed since shortly before the previous sweep (all of them on this
// replica's first sweep), through nodes_removed_idx and the instances'
// host index.
func (s *Runner) Sweep(ctx context.Context) (int, error) {
	s.sweptMu.Lock()
	defer s.sweptMu.Unlock()
	var queued int
	var started time.Time
	err := s.db.Tx(ctx, func(tx *sqlx.Tx) error {
		if err := tx.GetContext(ctx, &started, `SELECT now()`); err != nil {
			return store.Wrap(err)
		}
		var since *time.Time
		if !s.swept.IsZero() {
			// A removal whose transaction began before the last sweep
			// and committed after it has removed_at before that sweep:
			// look a minute further back (transactions end within their
			// request deadline).
			t := s.swept.Add(-time.Minute)
			since = &t
		}
		var list []string
		if err := tx.SelectContext(ctx, &list, SweepSQL, since); err != nil {
			return store.Wrap(err)
		}
		if len(list) == 0 {
			return nil
		}
		params := make([]river.InsertManyParams, len(list))
		for i, id := range list {
			params[i] = river.InsertManyParams{Args: instances.ReconcileJob(id)}
		}
		res, err := s.client.InsertManyTx(ctx, tx.Tx, params)
		if err != nil {
			return store.Wrap(err)
		}
		queued = 0
		for _, r := range res {
			if !r.UniqueSkippedAsDuplicate {
				queued++
			}
		}
		return nil
	})
	if err == nil {
		s.swept = started
	}
	return queued, err
}

// CompletedJobsKept is how long River keeps a completed job before its
// cleaner, on the leader every 30 s, deletes it.
const CompletedJobsKept = time.Hour

// --- event retention ----------------------------------------------------

// PruneInterval is how often a retention job runs: a tenth of its
// retention, at least 10 s and at most an hour. What is older than the
// retention is gone within that much more (a 3-minute retention keeps
// nothing past 3 min 18 s; the default 7 days, past 7 days and an hour).
func PruneInterval(retention time.Duration) time.Duration {
	return min(max(retention/10, 10*time.Second), time.Hour)
}

// retentionJob runs the job every PruneInterval of the retention, and once
// when a replica starts leading. The runs are not unique by period: a new
// leader's first run, within the period of the old leader's last, was
// skipped as a duplicate, and the retention overshot by two intervals (a
// re-probe's finding). Two runs at once are harmless: a prune deletes what
// is older than its cutoff, and records only what it deleted.
func retentionJob(args river.JobArgs, retention time.Duration) *river.PeriodicJob {
	return river.NewPeriodicJob(river.PeriodicInterval(PruneInterval(retention)), func() (river.JobArgs, *river.InsertOpts) {
		return args, nil
	}, &river.PeriodicJobOpts{RunOnStart: true})
}

type pruneArgs struct{}

func (pruneArgs) Kind() string { return "events.prune" }

type pruneWorker struct {
	river.WorkerDefaults[pruneArgs]
	s *Runner
}

// Work prunes events older than the retention, then the instances deleted
// before it (instances.Purge).
func (w *pruneWorker) Work(ctx context.Context, _ *river.Job[pruneArgs]) error {
	cutoff := time.Now().Add(-w.s.cfg.EventRetention)
	n, err := events.Prune(ctx, w.s.db, cutoff)
	if err == nil && n > 0 {
		w.s.log.Info("pruned events", "events", n, "retention", w.s.cfg.EventRetention)
	}
	if err != nil {
		return err
	}
	n, err = instances.Purge(ctx, w.s.db, cutoff)
	if n > 0 {
		w.s.log.Info("purged deleted instances", "instances", n, "retention", w.s.cfg.EventRetention)
	}
	return err
}

// --- audit retention ------------------------------------------------------

type auditPruneArgs struct{}

func (auditPruneArgs) Kind() string { return "audit.prune" }

type auditPruneWorker struct {
	river.WorkerDefaults[auditPruneArgs]
	s *Runner
}

// Work prunes audit records older than the retention; audit.Prune records
// each deletion in the platform's trail.
func (w *auditPruneWorker) Work(ctx context.Context, _ *river.Job[auditPruneArgs]) error {
	n, err := audit.Prune(ctx, w.s.db, time.Now().Add(-w.s.cfg.AuditRetention))
	if err == nil && n > 0 {
		w.s.log.Info("pruned audit records", "records", n, "retention", w.s.cfg.AuditRetention)
	}
	return err
}
