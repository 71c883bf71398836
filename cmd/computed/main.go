// Command computed is the Better Compute API server.
//
//	computed serve     serve (the default)
//	computed migrate   apply migrations and exit
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"path"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/bettercompute/computed/db"
	"github.com/bettercompute/computed/internal/app"
	"github.com/bettercompute/computed/internal/auth"
	"github.com/bettercompute/computed/internal/clientaddr"
	"github.com/bettercompute/computed/internal/cluster"
	"github.com/bettercompute/computed/internal/events"
	"github.com/bettercompute/computed/internal/instances"
	"github.com/bettercompute/computed/internal/instances/runner"
	"github.com/bettercompute/computed/internal/nodes"
	"github.com/bettercompute/computed/internal/pgembed"
	"github.com/bettercompute/computed/internal/ratelimit"
	"github.com/bettercompute/computed/internal/server"
	"github.com/bettercompute/computed/internal/store"
)

func main() {
	logger := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	slog.SetDefault(logger)
	gcDefaults()
	m := &Main{Log: logger}
	if err := m.ParseFlags(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := m.Run(ctx)
	m.Close()
	if err != nil {
		logger.Error("computed stopped", "err", err)
		os.Exit(1)
	}
}

// Main holds the program's configuration and what it started.
type Main struct {
	Log       *slog.Logger
	Command   string
	Addr      string
	URL       string
	DataDir   string
	Bootstrap string
	RateLimit float64
	Origins   []string
	// DebugAddr, when set, serves net/http/pprof there (never on Addr).
	DebugAddr string
	// Timeouts and the pool.
	RequestTimeout time.Duration
	// GraphQLConcurrency bounds GraphQL executions at once (server.Config).
	GraphQLConcurrency int
	// SessionsPerCredential bounds one credential's open sockets and
	// streams on this replica (server.Config).
	SessionsPerCredential int
	StatementTimeout      time.Duration
	// DBMaxConns bounds every connection the replica opens (Budget).
	DBMaxConns int
	// ReplicaName names this replica in application_name and in the
	// cluster lease (default host-pid).
	ReplicaName string
	// ClientAddr trusts COMPUTE_TRUSTED_PROXIES' forwarding header.
	ClientAddr clientaddr.Resolver
	// Instances configures the vps.instances reconciler.
	Instances runner.Config

	pg     *pgembed.Server
	db     *store.DB
	health *store.DB // /readyz's connection
	inst   *runner.Runner
}

// ParseFlags reads the environment, then flags that mirror it. A variable
// goes through its flag's own parser, so a value that flag would refuse
// (COMPUTE_RATE_LIMIT=1OO) stops the start instead of turning into the
// zero value, which for the rate limit means "off".
func (m *Main) ParseFlags(args []string) error {
	m.Command = "serve"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		m.Command, args = args[0], args[1:]
	}
	if m.Command != "serve" && m.Command != "migrate" {
		return fmt.Errorf("unknown command %q (serve, migrate)", m.Command)
	}
	fs := flag.NewFlagSet("computed "+m.Command, flag.ContinueOnError)
	vars := map[string]string{} // flag name -> its environment variable
	mirror := func(name, variable string) { vars[name] = variable }
	fs.StringVar(&m.Addr, "addr", "127.0.0.1:8080", "listen address (COMPUTE_ADDR)")
	mirror("addr", "COMPUTE_ADDR")
	fs.StringVar(&m.URL, "database-url", "", "PostgreSQL URL; empty starts the embedded default (DATABASE_URL)")
	mirror("database-url", "DATABASE_URL")
	fs.StringVar(&m.DataDir, "data-dir", ".data", "embedded database and files (COMPUTE_DATA_DIR)")
	mirror("data-dir", "COMPUTE_DATA_DIR")
	fs.Float64Var(&m.RateLimit, "rate-limit", 100, "requests per second per credential, 0 disables (COMPUTE_RATE_LIMIT)")
	mirror("rate-limit", "COMPUTE_RATE_LIMIT")
	fs.DurationVar(&m.RequestTimeout, "request-timeout", 15*time.Second, "deadline of every request and socket operation (COMPUTE_REQUEST_TIMEOUT)")
	mirror("request-timeout", "COMPUTE_REQUEST_TIMEOUT")
	fs.DurationVar(&m.StatementTimeout, "statement-timeout", 10*time.Second, "PostgreSQL statement_timeout of the pool (COMPUTE_STATEMENT_TIMEOUT)")
	mirror("statement-timeout", "COMPUTE_STATEMENT_TIMEOUT")
	fs.IntVar(&m.DBMaxConns, "db-max-conns", 30, "every database connection this replica opens, pool, listeners and provider together (COMPUTE_DB_MAX_CONNS)")
	mirror("db-max-conns", "COMPUTE_DB_MAX_CONNS")
	host, _ := os.Hostname()
	fs.StringVar(&m.ReplicaName, "replica-name", fmt.Sprintf("%s-%d", host, os.Getpid()), "this replica's name in application_name and the cluster lease, unique in the cluster (COMPUTE_REPLICA_NAME)")
	mirror("replica-name", "COMPUTE_REPLICA_NAME")
	origins := fs.String("allowed-origins", "", "comma-separated WebSocket origins besides the server's own (COMPUTE_ALLOWED_ORIGINS)")
	mirror("allowed-origins", "COMPUTE_ALLOWED_ORIGINS")
	retention := fs.String("event-retention", "7d", "how long events, and deleted instances, are kept: a Go duration or a number of days such as 7d (COMPUTE_EVENT_RETENTION)")
	mirror("event-retention", "COMPUTE_EVENT_RETENTION")
	auditRetention := fs.String("audit-retention", "400d", "how long audit records are kept: a Go duration or a number of days such as 400d (COMPUTE_AUDIT_RETENTION)")
	mirror("audit-retention", "COMPUTE_AUDIT_RETENTION")
	fs.StringVar(&m.DebugAddr, "debug-addr", "", "listen address of net/http/pprof; empty: off (COMPUTE_DEBUG_ADDR)")
	mirror("debug-addr", "COMPUTE_DEBUG_ADDR")
	fs.IntVar(&m.GraphQLConcurrency, "graphql-concurrency", 0, "GraphQL queries and mutations executing at once; 0: 4 per CPU (COMPUTE_GRAPHQL_CONCURRENCY)")
	mirror("graphql-concurrency", "COMPUTE_GRAPHQL_CONCURRENCY")
	fs.IntVar(&m.SessionsPerCredential, "sessions-per-credential", 256, "WebSockets and event streams one credential may hold open on this replica (COMPUTE_SESSIONS_PER_CREDENTIAL)")
	mirror("sessions-per-credential", "COMPUTE_SESSIONS_PER_CREDENTIAL")
	trusted := fs.String("trusted-proxies", "", "comma-separated CIDRs of the proxies whose forwarding header names the client address; empty: none (COMPUTE_TRUSTED_PROXIES)")
	mirror("trusted-proxies", "COMPUTE_TRUSTED_PROXIES")
	fwdHeader := fs.String("forwarded-header", "X-Forwarded-For", "the header the trusted proxies write: X-Forwarded-For or Forwarded (COMPUTE_FORWARDED_HEADER)")
	mirror("forwarded-header", "COMPUTE_FORWARDED_HEADER")
	fs.IntVar(&m.Instances.Workers, "reconcile-workers", 10, "instances this replica reconciles at once (COMPUTE_RECONCILE_WORKERS)")
	mirror("reconcile-workers", "COMPUTE_RECONCILE_WORKERS")
	var setErr error
	fs.VisitAll(func(f *flag.Flag) {
		name := vars[f.Name]
		if v := os.Getenv(name); v != "" && setErr == nil {
			if err := fs.Set(f.Name, v); err != nil {
				setErr = fmt.Errorf("%s: %w", name, err)
			}
		}
	})
	if setErr != nil {
		return setErr
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := m.checkBounds(vars); err != nil {
		return err
	}
	d, err := parseRetention("COMPUTE_EVENT_RETENTION", *retention)
	if err != nil {
		return err
	}
	m.Instances.EventRetention = d
	if _, err := Budget(m.DBMaxConns); err != nil {
		return err
	}
	if m.ClientAddr.Trusted, err = clientaddr.ParsePrefixes(*trusted); err != nil {
		return fmt.Errorf("COMPUTE_TRUSTED_PROXIES: %w", err)
	}
	if m.ClientAddr.Header, err = clientaddr.ParseHeader(*fwdHeader); err != nil {
		return fmt.Errorf("COMPUTE_FORWARDED_HEADER: %w", err)
	}
	if m.Instances.AuditRetention, err = parseRetention("COMPUTE_AUDIT_RETENTION", *auditRetention); err != nil {
		return err
	}
	m.Bootstrap = os.Getenv("COMPUTE_BOOTSTRAP_TOKEN")
	for _, o := range strings.Split(*origins, ",") {
		if o = strings.TrimSpace(o); o != "" {
			// Matched as coder/websocket matches them (path.Match, lower case).
			if _, err := path.Match(strings.ToLower(o), ""); err != nil {
				return fmt.Errorf("COMPUTE_ALLOWED_ORIGINS: %q is not a pattern (path.Match syntax: * ? [a-z], \\ escapes): %v", o, err)
			}
			m.Origins = append(m.Origins, o)
		}
	}
	return nil
}

// Run opens (or starts) the database, migrates, and serves until ctx ends.
func (m *Main) Run(ctx context.Context) error {
	ctx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	embedded := m.URL == ""
	if embedded {
		if err := os.MkdirAll(m.DataDir, 0o700); err != nil {
			return err
		}
		start := time.Now()
		pg, err := pgembed.Start(ctx, pgembed.Options{Dir: filepath.Join(m.DataDir, "pg"), Logger: m.Log})
		if err != nil {
			return fmt.Errorf("embedded database: %w", err)
		}
		m.pg = pg
		m.URL = pg.URL()
		m.Log.Info("embedded database started", "dir", filepath.Join(m.DataDir, "pg"), "duration", time.Since(start))
	}
	// Migrations run on their own connection without a statement timeout,
	// closed before the others open (it is one of the budget's).
	mdb, err := store.OpenWith(ctx, m.URL, store.Options{MaxConns: 1, StatementTimeout: -1, IdleInTransactionTimeout: -1, Replica: m.ReplicaName, Role: "migrate"})
	if err != nil {
		return err
	}
	err = db.Migrate(ctx, mdb.DB.DB, m.Log)
	if err == nil && m.Command != "migrate" {
		err = m.prepare(ctx, mdb, embedded)
	}
	mdb.Close()
	if err != nil {
		return err
	}
	budget, err := Budget(m.DBMaxConns)
	if err != nil {
		return err
	}
	if m.Instances.Workers >= budget.Pool {
		m.Log.Warn("the reconciler's workers can hold every pool connection: raise COMPUTE_DB_MAX_CONNS or lower COMPUTE_RECONCILE_WORKERS",
			"workers", m.Instances.Workers, "pool", budget.Pool)
	}
	database, err := store.OpenWith(ctx, m.URL, store.Options{MaxConns: budget.Pool, StatementTimeout: m.StatementTimeout, Replica: m.ReplicaName})
	if err != nil {
		return err
	}
	m.db = database
	if m.Command == "migrate" {
		m.Log.Info("migrations applied")
		return nil
	}
	// The event sequencer numbers the events this replica's writers commit
	// (internal/events); it stops after the reconciler, last.
	seq := events.Start(database, m.Log)
	defer seq.Stop()
	metrics := prometheus.NewRegistry()
	metrics.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// Work that runs once per cluster: the maintenance lease's holder runs
	// the reconciler's sweep and rescue and the limits' pruning.
	maint := cluster.New(database, "maintenance", m.ReplicaName, m.Log)
	maint.Add("rate_buckets.prune", time.Minute, func(ctx context.Context) error {
		_, err := ratelimit.Prune(ctx, database, 10*time.Minute)
		return err
	})
	// Expiries that no write makes: a join request's time running out, a
	// reservation's window ending. Their events are written once, here.
	maint.Add("events.expire", 5*time.Second, func(ctx context.Context) error {
		if _, err := nodes.ExpireJoinRequests(ctx, database); err != nil {
			return err
		}
		_, err := instances.ExpireReservations(ctx, database)
		return err
	})
	mctx, stopMaint := context.WithCancel(ctx)
	maintDone := make(chan struct{})
	go func() { defer close(maintDone); maint.Run(mctx) }()
	defer func() { stopMaint(); <-maintDone }() // it gives the lease up before the pool closes
	m.Instances.Maintainer, m.Instances.ProviderConns = maint, budget.Provider
	inst, err := runner.New(database, m.Log, m.Instances)
	if err != nil {
		return fmt.Errorf("instances: %w", err)
	}
	m.inst = inst
	// The reconciler's start runs River's first statements on the pool,
	// under its statement timeout: one canceled there (a lock held
	// elsewhere for a moment) is tried again, as River's later statements
	// are, rather than stopping the replica.
	if err := retryStart(ctx, m.Log, "instance reconciler", startTries, time.Second, inst.Run); err != nil {
		return fmt.Errorf("instance reconciler: %w", err)
	}
	reg := app.Registry(database, m.Log, metrics, inst.Service())
	// /readyz's connection (budget.Health), apart from the pool.
	health, err := store.OpenWith(ctx, m.URL, store.Options{MaxConns: budget.Health, StatementTimeout: 2 * time.Second, Replica: m.ReplicaName, Role: "health", CloseOnCancel: true})
	if err != nil {
		return err
	}
	m.health = health
	srv := server.New(server.Config{Health: health, AllowedOrigins: m.Origins, RatePerSecond: m.RateLimit, RateBurst: int(m.RateLimit * 2),
		RequestTimeout: m.RequestTimeout, GraphQLConcurrency: m.GraphQLConcurrency,
		SessionsPerCredential: m.SessionsPerCredential, ClientAddr: m.ClientAddr}, database, reg, metrics, m.Log)
	hs := &http.Server{
		Addr:              m.Addr,
		Handler:           srv.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(m.Log.Handler(), slog.LevelWarn),
	}
	go func() {
		if err := srv.Run(ctx); err != nil && ctx.Err() == nil {
			m.Log.Error("event fan-out stopped", "err", err)
		}
	}()
	errc := make(chan error, 2)
	if m.DebugAddr != "" {
		go func() {
			if err := serveDebug(ctx, m.DebugAddr, srv.MetricsHandler()); !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("debug listener: %w", err)
			}
		}()
		m.Log.Info("serving pprof and metrics on the operator address", "addr", m.DebugAddr)
	}
	ln, err := server.Listen(ctx, m.Addr)
	if err != nil {
		return err
	}
	go func() { errc <- hs.Serve(ln) }()
	m.Log.Info("serving", "addr", m.Addr, "embedded", embedded)
	// The embedded database ending under the server (an operator's
	// pg_ctl stop, a crash of the postmaster) ends the server too, with an
	// error: serving on, every request would answer 503 while /healthz said
	// the process is fine, so nothing would restart it. Its supervisor (or
	// the next make run) starts both again; the sockets and streams are
	// closed so that clients reconnect.
	var pgExited <-chan struct{}
	if m.pg != nil {
		pgExited = m.pg.Exited()
	}
	var fatal error
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	case <-pgExited:
		fatal = fmt.Errorf("embedded database: %w; see %s", m.pg.Err(), filepath.Join(m.DataDir, "postgres.log"))
		m.Log.Error("the embedded database stopped: stopping the server", "err", m.pg.Err())
		stopRun() // as a signal does: what runs under ctx ends
	}
	m.Log.Info("shutting down: closing the listener, sockets and streams, draining requests")
	sctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// The listener closes first, at once (a load balancer sends the next
	// connection to another replica), while the sockets' close handshakes
	// take their time: a client that does not answer its close frame
	// holds srv.Shutdown for its 5 s, and the replica, serving on, took
	// new requests and sockets meanwhile (a soak's finding).
	hsDone := make(chan error, 1)
	go func() { hsDone <- hs.Shutdown(sctx) }()
	wctx, wcancel := context.WithTimeout(sctx, 5*time.Second)
	srv.Shutdown(wctx)
	wcancel()
	if err := <-hsDone; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	m.Log.Info("shutting down: stopping the instance reconciler")
	if err := inst.Shutdown(sctx); err != nil && fatal == nil {
		return err
	}
	return fatal
}

// ConnBudget is how a replica's COMPUTE_DB_MAX_CONNS is shared out: every
// connection the replica opens is one of these, so the total is exact.
type ConnBudget struct {
	Total int
	// Listeners: the event hub's LISTEN connection, the event sequencer's
	// and River's.
	Listeners int
	// Health: /readyz's connection, apart from the pool, so that a pool
	// whose connections requests hold all does not read as an unreachable
	// database (server.Config.Health).
	Health int
	// Provider: the sim provider's own pool (a step holds a pool
	// connection while it calls the provider, so the provider's cannot
	// come from the same pool).
	Provider int
	// Pool: everything else (requests, reconcile steps, the reconciler's
	// liveness lock, River's fetches, the limits' leases, the lease).
	Pool int
}

// Budget shares total out: 3 listeners, /readyz's connection, a provider
// pool of a third of the rest up to 8, and the pool the remainder (30
// gives 3 + 1 + 8 + 18).
func Budget(total int) (ConnBudget, error) {
	if total < minConns {
		return ConnBudget{}, fmt.Errorf("COMPUTE_DB_MAX_CONNS %d: a replica needs at least %d (3 listeners, 1 health check, 1 provider, 2 pool)", total, minConns)
	}
	b := ConnBudget{Total: total, Listeners: 3, Health: 1}
	b.Provider = min(8, max(1, (total-b.Listeners-b.Health)/3))
	b.Pool = total - b.Listeners - b.Health - b.Provider
	return b, nil
}

// minConns is the smallest COMPUTE_DB_MAX_CONNS (Budget).
const minConns = 7

// gcDefaults sets the garbage collector's defaults where the environment
// does not (GOGC and GOMEMLIMIT, when set, win). The server's live heap is
// small (caches and in-flight requests) and its requests allocate much (a
// fleet query about 57 MB), so at Go's GOGC=100 it collected several times
// per request: GOGC=400 cut CPU per request by about 30% in make loadtest
// (docs/performance.md). The soft memory limit of 1 GiB makes the collector
// work harder instead of letting the heap grow past it under many
// concurrent large queries; it never refuses memory.
func gcDefaults() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(1 << 30)
	}
}

// serveDebug serves the operator address: the profiler, which is never
// reachable through the public address (it shows the heap and the stacks),
// and /metrics without a token (the public address asks for the operator's).
func serveDebug(ctx context.Context, addr string, metrics http.Handler) error {
	mux := http.NewServeMux()
	mux.Handle("/metrics", metrics)
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	ds := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = ds.Close()
	}()
	return ds.ListenAndServe()
}

// maxRetentionDays bounds a retention given in days: 100 years, well
// inside what a time.Duration holds (about 106,751 days; more wrapped
// around to a negative retention, which pruned everything).
const maxRetentionDays = 36500

// parseRetention reads a retention setting (name, for the error): a Go
// duration of at least a minute or a number of days ("7d"), at most
// maxRetentionDays either way.
// checkBounds refuses values that parse but mean nothing sensible, or
// something else than they say: a negative or infinite rate (only 0 turns
// the limit off), one so large that its burst overflows (1e19 became a
// burst of 1), timeouts below what they can be measured in (a statement
// timeout under 1 ms is sent as 0, which PostgreSQL reads as none), counts
// that are not positive or past what a replica can hold, an address that
// is no host:port, an origin pattern that does not parse (coder/websocket
// then refused every origin after it, logging only per request). (The
// connection budget and the retentions are checked where they are
// parsed.)
func (m *Main) checkBounds(vars map[string]string) error {
	bad := func(name, want string, v any) error {
		return fmt.Errorf("-%s (%s) %v: want %s", name, vars[name], v, want)
	}
	const (
		maxRate    = 1e6
		minRate    = 0.01
		maxTimeout = 24 * time.Hour
	)
	between := func(name string, v, lo, hi int) error {
		if v < lo || v > hi {
			return bad(name, fmt.Sprintf("%d to %d", lo, hi), v)
		}
		return nil
	}
	switch {
	case math.IsNaN(m.RateLimit) || m.RateLimit < 0 || m.RateLimit > maxRate || (m.RateLimit > 0 && m.RateLimit < minRate):
		return bad("rate-limit", fmt.Sprintf("0 (the limit off) or %g to %g requests per second", minRate, maxRate), m.RateLimit)
	case m.RequestTimeout < 100*time.Millisecond || m.RequestTimeout > maxTimeout:
		return bad("request-timeout", "a duration of 100ms to 24h", m.RequestTimeout)
	case m.StatementTimeout < 100*time.Millisecond || m.StatementTimeout > maxTimeout:
		// Under 100ms the replica's own work (leases, the sequencer's
		// passes, the reconciler's queue) is canceled as a request is.
		return bad("statement-timeout", "a duration of 100ms to 24h", m.StatementTimeout)
	}
	for _, err := range []error{
		between("graphql-concurrency", m.GraphQLConcurrency, 0, 10000),
		between("sessions-per-credential", m.SessionsPerCredential, 1, 1_000_000),
		between("reconcile-workers", m.Instances.Workers, 1, 1000),
		between("db-max-conns", m.DBMaxConns, minConns, 10000),
	} {
		if err != nil {
			return err
		}
	}
	if host, port, err := net.SplitHostPort(m.Addr); err != nil || strings.ContainsAny(host, " /") {
		return bad("addr", "host:port, such as 127.0.0.1:8080 or :8080", m.Addr)
	} else if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return bad("addr", "a port of 0 to 65535", m.Addr)
	}
	if m.DebugAddr != "" {
		if _, _, err := net.SplitHostPort(m.DebugAddr); err != nil {
			return bad("debug-addr", "host:port", m.DebugAddr)
		}
	}
	return nil
}

// prepare does a start's own work in the database, on the migrations'
// connection: without the pool's statement timeout, which bounds what a
// request may spend, not what a start must do (a short one stopped the
// start at its first statement).
func (m *Main) prepare(ctx context.Context, db *store.DB, embedded bool) error {
	if err := nodes.RecordNodeKeys(ctx, db, m.Log); err != nil {
		return err
	}
	switch {
	case m.Bootstrap != "":
		if err := auth.EnsureOperator(ctx, db, m.Bootstrap); err != nil {
			return fmt.Errorf("bootstrap operator: %w", err)
		}
	case embedded:
		if err := auth.EmbeddedOperator(ctx, db, m.DataDir, m.Log); err != nil {
			return err
		}
	default:
		ok, err := auth.OperatorCanSignIn(ctx, db)
		if err != nil {
			return fmt.Errorf("bootstrap operator: %w", err)
		}
		if !ok {
			m.Log.Warn("no operator token: nobody can create a tenant; set COMPUTE_BOOTSTRAP_TOKEN (the same on every replica)")
		}
	}
	// The node CA is generated on the first start of any replica and
	// persisted; later starts (and other replicas) load the same one.
	if _, err := nodes.EnsureCA(ctx, db); err != nil {
		return fmt.Errorf("node CA: %w", err)
	}
	return nil
}

// startTries bounds the tries of a start step that meets a database error
// (retryStart): with its waits, about 45 s.
const startTries = 10

// retryStart runs step until it succeeds, ctx ends, or it has failed tries
// times, waiting wait, then twice as long up to 8 s, between tries.
func retryStart(ctx context.Context, log *slog.Logger, what string, tries int, wait time.Duration, step func(context.Context) error) error {
	for try := 1; ; try++ {
		err := step(ctx)
		if err == nil || ctx.Err() != nil || try >= tries {
			return err
		}
		log.Warn(what+" did not start; trying again", "try", try, "of", tries, "in", wait.String(), "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, 8*time.Second)
	}
}

func parseRetention(name, s string) (time.Duration, error) {
	bad := fmt.Errorf("%s %q: want a Go duration of at least 1m or a number of days such as 7d, at most %dd", name, s, maxRetentionDays)
	if n, ok := strings.CutSuffix(s, "d"); ok {
		days, err := strconv.Atoi(n)
		if err != nil || days < 1 || days > maxRetentionDays {
			return 0, bad
		}
		return time.Duration(days) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < time.Minute || d > maxRetentionDays*24*time.Hour {
		return 0, bad
	}
	return d, nil
}

// Close releases the database and stops the embedded server.
func (m *Main) Close() {
	if m.inst != nil {
		_ = m.inst.Shutdown(context.Background())
		m.inst.Close()
	}
	if m.health != nil {
		m.health.Close()
	}
	if m.db != nil {
		m.db.Close()
	}
	if m.pg != nil {
		m.pg.Stop()
		m.Log.Info("embedded database stopped")
	}
}
