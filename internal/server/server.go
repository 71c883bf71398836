// Package server wires the HTTP surface: middleware (request ids, recovery,
// logging, authentication, rate limits), the method surface, GraphQL,
// GraphiQL, health and metrics.
package server

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/singleflight"

	"github.com/bettercompute/computed/db"
	"github.com/bettercompute/computed/internal/audit"
	"github.com/bettercompute/computed/internal/auth"
	"github.com/bettercompute/computed/internal/authz"
	"github.com/bettercompute/computed/internal/clientaddr"
	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/events"
	"github.com/bettercompute/computed/internal/fair"
	"github.com/bettercompute/computed/internal/live"
	"github.com/bettercompute/computed/internal/ratelimit"
	"github.com/bettercompute/computed/internal/registry"
	"github.com/bettercompute/computed/internal/reqctx"
	"github.com/bettercompute/computed/internal/rest"
	"github.com/bettercompute/computed/internal/safe"
	"github.com/bettercompute/computed/internal/store"
)

// Config is the server's tunables; zero values take the defaults.
type Config struct {
	AllowedOrigins []string // WebSocket origins besides the request's own host
	RatePerSecond  float64  // per credential; 0 disables
	RateBurst      int
	// RequestTimeout bounds every request and every operation on a socket
	// (default 15 s); past it the answer is UNAVAILABLE.
	RequestTimeout time.Duration
	// AuthRecheck is how often the credentials of open sockets are checked
	// again (default 2 s).
	AuthRecheck time.Duration
	// AuthFailures bounds failed authentications per client address, per
	// second (default 2, burst 20), whatever the rate limit.
	AuthFailures float64
	// AuthFailureBurst is the failed authentications an address may make
	// at once (default 20).
	AuthFailureBurst int
	WS               WSTimings
	// Live tunes the subscription fan-out.
	Live live.Config
	// GraphQLConcurrency bounds the queries and mutations executing at once
	// on this replica (default 4 per CPU); the others wait their turn (up
	// to their deadline); past half of them (at least one), a tenant (its
	// credentials together: reqctx.ShareKey) takes a free one only while no
	// other waits, and the last free one goes only to a tenant with
	// nothing running (fair.Slots).
	// Subscriptions are not counted. Running more at
	// once than the CPUs can serve only holds more answers in memory at the
	// same time: the collector then works harder and every request costs
	// more CPU.
	GraphQLConcurrency int
	// SessionsPerCredential bounds the WebSockets and event streams one
	// credential holds open on this replica at once (default 256): each
	// holds memory for as long as it stays open, and the rate limit only
	// spaces their opening. A bound on the replica's memory, so per
	// replica by design.
	SessionsPerCredential int
	// ClientAddr decides the client address of a request (the peer's
	// unless the peer is a trusted proxy); the zero value trusts no proxy.
	ClientAddr clientaddr.Resolver
	// Health is the connection /readyz checks the database on, apart from
	// the pool (one connection; nil: the pool). Through the pool the check
	// waited behind the requests that held every connection, and said
	// "database unreachable" of a database that answered.
	Health *store.DB
}

func (c *Config) defaults() {
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = 15 * time.Second
	}
	if c.SessionsPerCredential <= 0 {
		c.SessionsPerCredential = 256
	}
	if c.AuthRecheck <= 0 {
		c.AuthRecheck = 2 * time.Second
	}
	if c.AuthFailures <= 0 {
		c.AuthFailures = 2
	}
	if c.AuthFailureBurst <= 0 {
		c.AuthFailureBurst = 20
	}
	if c.WS.InitTimeout <= 0 {
		c.WS.InitTimeout = 10 * time.Second
	}
	if c.WS.PingInterval == 0 {
		c.WS.PingInterval = 15 * time.Second
	}
	if c.WS.WriteTimeout <= 0 {
		c.WS.WriteTimeout = 10 * time.Second
	}
	if c.WS.PongTimeout <= 0 {
		c.WS.PongTimeout = 30 * time.Second
	}
	if c.GraphQLConcurrency <= 0 {
		c.GraphQLConcurrency = 4 * runtime.GOMAXPROCS(0)
	}
}

// Server is the HTTP handler of the product.
type Server struct {
	Config   Config
	DB       *store.DB
	Registry *registry.Registry
	Log      *slog.Logger
	Metrics  *prometheus.Registry
	// Live fans instance events out to this replica's subscribers; Run
	// holds its LISTEN connection.
	Live *live.Hub

	rest     *rest.Handler
	gqlHist  *prometheus.HistogramVec
	httpReq  *prometheus.CounterVec
	limiter  *ratelimit.Limiter // per credential (per address without one); nil: off
	authFail *ratelimit.Limiter // failed authentications per address
	throttle auth.Throttle      // authFailure at the request's address, for auth.WithThrottle
	sessions sessions
	renders  renders // subscription payloads rendered once per event and operation
	// execSlots admits GraphQL queries and mutations to execution
	// (Config.GraphQLConcurrency).
	execSlots *fair.Slots
	conns     openCount // open WebSockets and event streams
	// readiness runs one database check at a time; the callers that ask
	// meanwhile share its answer (a flood of /readyz, which needs no
	// token, runs one statement at a time).
	readiness singleflight.Group
}

// New builds the server; the registry must have been built with the same
// metrics registry.
func New(cfg Config, database *store.DB, reg *registry.Registry, metrics *prometheus.Registry, log *slog.Logger) *Server {
	cfg.defaults()
	s := &Server{Config: cfg, DB: database, Registry: reg, Log: log, Metrics: metrics, execSlots: fair.New(cfg.GraphQLConcurrency)}
	s.sessions.init(s)
	s.Live = live.New(database, log, cfg.Live)
	// A revocation or a change of a role binding closes or decides again
	// the sockets it concerns at once, on every replica (sessions).
	database.OnAuthorityChanged(s.sessions.changed)
	s.Live.Also(sessionsChannel, s.sessions.heard)
	// This replica's event sequencer wakes its readers the moment it has
	// numbered a tenant's events (the other replicas' hear its NOTIFY).
	seq := events.Start(database, log)
	seq.OnNumbered(s.Live.Wake)
	s.Live.SkipFrom(seq.ID())
	stat := func(pick func(passes, numbered, failures int64) int64) func() float64 {
		return func() float64 { return float64(pick(seq.Stats())) }
	}
	metrics.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "compute_event_sequencer_passes_total", Help: "Event sequencer passes of this replica."},
			stat(func(p, _, _ int64) int64 { return p })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "compute_events_numbered_total", Help: "Events this replica's sequencer numbered."},
			stat(func(_, n, _ int64) int64 { return n })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "compute_event_sequencer_failures_total", Help: "Event sequencer passes that failed (their tenants are retried)."},
			stat(func(_, _, f int64) int64 { return f })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "compute_event_sequencer_forwards_total",
			Help: "Batches of tenants this replica's sequencer forwarded to the leading sequencer and had acknowledged."},
			func() float64 { return float64(seq.Forwards()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "compute_event_sequencer_forwards_unanswered_total",
			Help: "Forwards the leading sequencer did not acknowledge within 500 ms (this replica numbered them itself)."},
			func() float64 { return float64(seq.Unanswered()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "compute_event_sequencer_leading",
			Help: "1 while this replica's sequencer holds the event-sequencer lease and numbers every replica's events."},
			func() float64 {
				if seq.Leading() {
					return 1
				}
				return 0
			}))
	s.rest = &rest.Handler{Registry: reg, Log: log}
	s.gqlHist = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "compute_graphql_operation_duration_seconds", Help: "GraphQL operations by type and name.",
		Buckets: prometheus.DefBuckets,
	}, []string{"type", "operation"})
	s.httpReq = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "compute_http_requests_total", Help: "HTTP requests by route and status.",
	}, []string{"route", "status"})
	metrics.MustRegister(s.gqlHist, s.httpReq, collectors.NewDBStatsCollector(database.DB.DB, "compute"),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "compute_sql_statements_total", Help: "SQL statements sent."},
			func() float64 { return float64(store.TotalStatements()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "compute_sql_request_statements_total", Help: "SQL statements sent for HTTP requests (background work excluded)."},
			func() float64 { return float64(store.RequestStatements()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "compute_subscriptions", Help: "Open instance event subscriptions."},
			func() float64 { return float64(s.Live.Subscribers()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "compute_sessions", Help: "Open WebSockets and event streams."},
			func() float64 { return float64(s.sessions.count()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "compute_graphql_executing", Help: "GraphQL queries and mutations executing (at most COMPUTE_GRAPHQL_CONCURRENCY)."},
			func() float64 { return float64(s.execSlots.InUse()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "compute_graphql_waiting", Help: "GraphQL queries and mutations waiting for an execution slot."},
			func() float64 { return float64(s.WaitingOperations()) }))
	// The limits are shared by the replicas (internal/ratelimit): a
	// credential's requests lease batches sized to what this replica
	// spends, prefetched; failed authentications lease one token at a time
	// (they paid a lookup already), so no token of that small budget sits
	// unused in a replica's hands.
	if cfg.RatePerSecond > 0 {
		s.limiter = ratelimit.New(database, ratelimit.Config{Scope: "requests", Rate: cfg.RatePerSecond, Burst: max(1, cfg.RateBurst),
			MinBatch: 2, Prefetch: true}, log)
	}
	s.authFail = ratelimit.New(database, ratelimit.Config{Scope: "auth-failures", Rate: cfg.AuthFailures, Burst: cfg.AuthFailureBurst, MaxBatch: 1}, log)
	s.throttle = func(ctx context.Context) error { return s.authFailure(ctx, addrOf(ctx)) }
	leases := func(l *ratelimit.Limiter) func() float64 {
		return func() float64 {
			if l == nil {
				return 0
			}
			return float64(l.Leases())
		}
	}
	metrics.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "compute_rate_leases_total", Help: "Leases of request tokens from the shared buckets (one statement each)."}, leases(s.limiter)),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "compute_auth_failure_leases_total", Help: "Failed authentications charged to the shared buckets."}, leases(s.authFail)))
	return s
}

// Run holds the event fan-out's LISTEN connection and gives the limits'
// unused leases back until ctx ends.
func (s *Server) Run(ctx context.Context) error {
	for _, l := range []*ratelimit.Limiter{s.limiter, s.authFail} {
		if l != nil {
			safe.Go(ctx, s.Log, "rate limit lease returns", func() { l.Run(ctx) })
		}
	}
	safe.Go(ctx, s.Log, "session notifications", func() { s.sessions.telling(ctx) })
	return s.Live.Run(ctx)
}

// Shutdown closes the long-lived connections with a code that tells
// clients to reconnect (to another replica), and waits (until ctx ends)
// for their close handshakes; http.Server.Shutdown does not see hijacked
// connections or streams. From its start /readyz says "shutting down",
// and a socket or stream that begins (on a connection accepted before the
// listener closed) is closed as it begins. Call it beside, not before,
// http.Server.Shutdown, which closes the listener: a client that does not
// answer its close frame holds this wait for its length.
func (s *Server) Shutdown(ctx context.Context) {
	s.sessions.closeAll(closeServiceReboot, shutdownReason)
	s.conns.wait(ctx)
}

// openCount counts open connections; wait returns when none is open.
// Unlike a sync.WaitGroup's, its count may rise from zero while someone
// waits: a socket that begins during a shutdown counts, until closed.
type openCount struct {
	mu   sync.Mutex
	n    int
	zero chan struct{} // closed when n reaches zero; nil while nobody waits
}

func (c *openCount) Add(d int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n += d
	if c.n == 0 && c.zero != nil {
		close(c.zero)
		c.zero = nil
	}
}

func (c *openCount) Done() { c.Add(-1) }

// wait returns when no connection is open, or when ctx ends.
func (c *openCount) wait(ctx context.Context) {
	c.mu.Lock()
	if c.n == 0 {
		c.mu.Unlock()
		return
	}
	if c.zero == nil {
		c.zero = make(chan struct{})
	}
	zero := c.zero
	c.mu.Unlock()
	select {
	case <-zero:
	case <-ctx.Done():
	}
}

// Handler returns the root handler.
func (s *Server) Handler() http.Handler {
	r := chi.NewRouter()
	// HEAD is GET without the body on every GET route (chi answered it
	// 405); a path or method no route takes answers in the contract's
	// error shape (chi's were an empty 405 and a plain-text 404).
	r.Use(s.requestID, s.clientAddr, s.recoverer, s.logRequests, s.deadline, middleware.GetHead, otherVerbs)
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		s.rest.WriteError(w, r, errs.E(errs.NotFound, "nothing is served at %s", r.URL.Path))
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		// The routes chi matches by method are all GET routes (the others
		// take every method and answer 405 themselves).
		w.Header().Set("Allow", "GET, HEAD")
		s.rest.WriteError(w, r, errs.E(errs.MethodNotAllowed, "use GET for %s", r.URL.Path))
	})
	r.Get("/healthz", func(w http.ResponseWriter, r *http.Request) {
		rest.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	r.Get("/readyz", s.ready)
	r.With(s.operatorOnly).Method(http.MethodGet, "/metrics", s.MetricsHandler())
	r.Get("/", graphiql)
	r.Get("/graphiql/*", s.graphiqlAssets)
	r.Group(func(r chi.Router) {
		r.Use(s.authenticate)
		s.rest.Mount(r)
	})
	gql := s.graphqlHandler()
	r.Group(func(r chi.Router) {
		r.Use(s.authenticateGraphQL)
		r.Handle("/graphql", limitGraphQLBody(gql, rest.DefaultMaxBody))
		r.Handle(StreamPath, limitGraphQLBody(gql, rest.DefaultMaxBody))
	})
	return r
}

// otherVerbs routes a verb outside HTTP's standard set as TRACE, which no
// route takes, so that each path refuses it as it refuses any other verb it
// does not take: a method path with Allow: POST, GraphQL's paths in their
// error shape with Allow: GET, POST. chi sends a verb it does not know to
// its MethodNotAllowed handler whatever the path, which answered as if every
// path took GET alone. The request's log line keeps the verb as sent.
func otherVerbs(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
			http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		default:
			r = r.Clone(r.Context())
			r.Method = http.MethodTrace
		}
		next.ServeHTTP(w, r)
	})
}

// MetricsHandler serves the Prometheus metrics: the operator address
// (COMPUTE_DEBUG_ADDR) serves it as it is; the public address only behind
// the operator's token (Handler).
func (s *Server) MetricsHandler() http.Handler {
	return promhttp.HandlerFor(s.Metrics, promhttp.HandlerOpts{})
}

// operatorOnly admits the operator's bearer token and no other: what
// /metrics shows (per-method call counts, pool figures) is the operator's
// business. Failed authentications spend the address's budget as anywhere.
func (s *Server) operatorOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := s.bearer(r)
		if err == nil && !p.IsOperator() {
			err = errs.E(errs.PermissionDenied, "only the operator reads the metrics")
		}
		if err != nil {
			if errs.CodeOf(err) == errs.RateLimited {
				w.Header().Set("Retry-After", "1")
			}
			s.rest.WriteError(w, r, err)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (s *Server) ready(w http.ResponseWriter, r *http.Request) {
	if s.sessions.isClosing() {
		// Shutting down: a load balancer stops sending what it still
		// would (a request on a connection it keeps open).
		rest.WriteJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "shutting down"})
		return
	}
	status, _, _ := s.readiness.Do("", func() (any, error) {
		// Its own deadline: a caller that goes away does not fail the
		// check of the others waiting on it.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 2*time.Second)
		defer cancel()
		return s.checkDatabase(ctx), nil
	})
	code := http.StatusOK
	if status != "ready" {
		code = http.StatusServiceUnavailable
	}
	rest.WriteJSON(w, code, map[string]string{"status": status.(string)})
}

// checkDatabase is /readyz's status of the database: "ready", or why not.
func (s *Server) checkDatabase(ctx context.Context) string {
	h := s.Config.Health
	if h == nil {
		h = s.DB
	}
	// A statement, not a ping: it says whether the database takes writes.
	// A primary become a standby, or default_transaction_read_only, answered
	// every write 503 while this said ready, and a load balancer kept
	// sending them.
	var readOnly string
	if err := h.QueryRowContext(ctx, `SELECT current_setting('transaction_read_only')`).Scan(&readOnly); err != nil {
		return "database unreachable"
	}
	if readOnly == "on" {
		// The sessions may be read-only from when they began: the next
		// check, and the writes, run on new ones, which see the database
		// as it is then.
		s.DB.Renew()
		if h != s.DB {
			h.Renew()
		}
		return "database read-only"
	}
	pending, err := db.Pending(ctx, h.DB.DB)
	if err != nil {
		// Not known: the check failed or ran past its 2 s (a lock on the
		// migrations' table, a busy database), which says nothing of the
		// migrations.
		return "database not answering"
	}
	if pending {
		return "migrations pending"
	}
	return "ready"
}

var requestIDPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{8,64}$`)

func (s *Server) requestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("X-Request-Id")
		if !requestIDPattern.MatchString(id) {
			id = newRequestID()
		}
		w.Header().Set("X-Request-Id", id)
		next.ServeHTTP(w, r.WithContext(withLiterals(store.ForRequest(reqctx.WithRequestID(r.Context(), id)))))
	})
}

// clientAddr decides the request's client address once (reqctx.ClientAddr),
// and gives the request the address's failed-authentication budget
// (auth.WithThrottle), which a method charges when the credential in its
// input fails (nodes.join's join token).
func (s *Server) clientAddr(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := s.Config.ClientAddr.Resolve(r.RemoteAddr, r.Header)
		ctx := reqctx.WithClientAddr(r.Context(), a.String())
		next.ServeHTTP(w, r.WithContext(auth.WithThrottle(ctx, s.throttle)))
	})
}

// deadline bounds a request's time (sockets bound each operation
// instead). An event stream's request is bounded too, authentication and
// queries included; a subscription lifts the deadline once it starts
// (withoutDeadline).
func (s *Server) deadline(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isWebSocketUpgrade(r) {
			next.ServeHTTP(w, r)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), s.Config.RequestTimeout)
		defer cancel()
		// Reading the body is bounded by the same deadline: a client whose
		// body stalls is answered when it passes (rest.ReadBody's
		// "body-deadline"), not when the listener's read timeout does
		// (30 s). An event stream lifts it when it takes the connection.
		_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(s.Config.RequestTimeout))
		ctx = context.WithValue(ctx, beforeDeadlineKey{}, r.Context())
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

type beforeDeadlineKey struct{}

// isWebSocketUpgrade says whether r asks for a WebSocket (Upgrade names
// the websocket protocol): the one decision of which requests skip the
// request deadline and bearer authentication (a socket authenticates in
// connection_init) and go to the WebSocket transport. Any other Upgrade
// (h2c, which a server may ignore) is an ordinary request.
func isWebSocketUpgrade(r *http.Request) bool {
	// Only a GET upgrades (RFC 6455 4.1): a POST that a proxy tagged with
	// Upgrade was refused 405, and went without the request deadline.
	if r.Method != http.MethodGet {
		return false
	}
	for _, v := range r.Header.Values("Upgrade") {
		for _, p := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(p), "websocket") {
				return true
			}
		}
	}
	return false
}

// withoutDeadline returns ctx's values with the cancellation ctx had
// before the deadline middleware (the client leaving, the server
// stopping): a subscription outlives the request's deadline.
func withoutDeadline(ctx context.Context) context.Context {
	before, ok := ctx.Value(beforeDeadlineKey{}).(context.Context)
	if !ok {
		return ctx
	}
	return detached{Context: before, values: ctx}
}

type detached struct {
	context.Context                 // Done, Err and Deadline
	values          context.Context // Value
}

func (d detached) Value(key any) any { return d.values.Value(key) }

// AfterFunc lets a context derived from d (an event stream's) be cancelled
// with the request without a goroutine of its own: the context package
// watches a parent it cannot see through with one goroutine per child
// unless the parent has this method.
func (d detached) AfterFunc(f func()) func() bool {
	return context.AfterFunc(d.Context, safe.Func(d.values, nil, "context cancellation", f))
}

func newRequestID() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return "req_" + hex.EncodeToString(b)
}

func (s *Server) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.Log.ErrorContext(r.Context(), "panic", "panic", v, "requestId", reqctx.RequestID(r.Context()))
				s.rest.WriteError(w, r, errs.E(errs.Internal, "internal error"))
			}
		}()
		next.ServeHTTP(w, r)
	})
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (s *Server) logRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		route := chi.RouteContext(r.Context()).RoutePattern()
		if route == "" {
			route = "unmatched"
		}
		s.httpReq.WithLabelValues(route, strconv.Itoa(sw.status)).Inc()
		s.Log.InfoContext(r.Context(), "request", "requestId", reqctx.RequestID(r.Context()),
			"method", r.Method, "path", r.URL.Path, "status", sw.status, "duration", time.Since(start),
			"clientAddr", reqctx.ClientAddr(r.Context()))
	})
}

// authenticate resolves the bearer token, if any, for the method surface.
// A missing token is left to the method. A method whose credential is in
// its input (nodes.join's join token) takes no bearer token, and one sent
// is not read: a daemon re-joining with its removed node's credential was
// refused 401 beside a valid join token, and each refusal spent its
// address's failed-authentication budget until the join was 429.
func (s *Server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := r.Header.Get("Authorization")
		if m := s.methodOf(r); h == "" || m != nil && m.Credential == registry.JoinToken {
			if s.limited(w, r, reqctx.CallerKey(r.Context(), nil)) {
				return
			}
			next.ServeHTTP(w, r)
			return
		}
		p, err := s.bearer(r)
		if err != nil {
			s.rest.WriteError(w, r, err)
			return
		}
		if s.limited(w, r, reqctx.CallerKey(r.Context(), p)) {
			return
		}
		next.ServeHTTP(w, r.WithContext(reqctx.WithPrincipal(r.Context(), p)))
	})
}

// authenticateGraphQL requires a bearer token on GraphQL over HTTP; a
// WebSocket upgrade authenticates in connection_init instead.
func (s *Server) authenticateGraphQL(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isWebSocketUpgrade(r) {
			// The upgrade is charged to the client's address, as a call
			// without a token is (the socket's operations are charged to
			// its credential once connection_init names one): opening
			// sockets costs a goroutine, buffers and a descriptor each
			// until connection_init's deadline, and was free.
			if e := s.overBudget(r.Context(), reqctx.CallerKey(r.Context(), nil)); e != nil {
				writeRequestError(w, responseType(r), e.Code.HTTPStatus(), e) // the graph's error shape
				return
			}
			// Hijacked connections keep the server's deadlines; lift them.
			rc := http.NewResponseController(w)
			_ = rc.SetReadDeadline(time.Time{})
			_ = rc.SetWriteDeadline(time.Time{})
			next.ServeHTTP(w, r)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodPost {
			// OPTIONS, and the verbs answered 405 (HEAD, PUT...): nothing
			// runs, and the answer is the verb's whatever the token (it
			// was 401 without one, 405 with one).
			next.ServeHTTP(w, r)
			return
		}
		p, err := s.bearer(r)
		if err != nil {
			e := rest.PublicError(r.Context(), s.Log, err, "path", r.URL.Path, "step", "authentication")
			writeRequestError(w, responseType(r), e.Code.HTTPStatus(), e)
			return
		}
		// The request pays its first unit before its body is read: a body
		// refused as it is decoded (1 MiB of JSON with a key twice) was
		// free. The operation's cost pays the rest (admit, charge), on
		// sockets for every operation.
		if e := s.overBudget(r.Context(), reqctx.CallerKey(r.Context(), p)); e != nil {
			writeRequestError(w, responseType(r), e.Code.HTTPStatus(), e)
			return
		}
		next.ServeHTTP(w, r.WithContext(reqctx.WithAdmitted(reqctx.WithPrincipal(r.Context(), p))))
	})
}

// bearer authenticates the request's bearer token (authenticateSecret).
func (s *Server) bearer(r *http.Request) (*reqctx.Principal, error) {
	// One credential per request: with two, a proxy that checks one and a
	// server that reads the other would disagree about the caller.
	// A header that names no bearer token is a failed authentication too,
	// charged to the address's budget as an unknown token is: it escaped
	// every per-address limit (a flood of "Authorization: Basic ..." was
	// answered 401 without end).
	if len(r.Header.Values("Authorization")) > 1 {
		return nil, s.failed(r, errs.E(errs.Unauthenticated, "send one Authorization header"))
	}
	if r.Header.Get("Authorization") == "" {
		return nil, s.failed(r, errs.E(errs.Unauthenticated, "a bearer token is required"))
	}
	tok, ok := auth.FromHeader(r.Header.Get("Authorization"))
	if !ok {
		return nil, s.failed(r, errs.E(errs.Unauthenticated, "the Authorization header must be \"Bearer <token>\""))
	}
	return s.authenticateSecret(r.Context(), clientIP(r), tok, s.calledMethod(r))
}

// calledMethod names what a request calls, for the audit record of a
// revoked token's use: a method's key, "graphql" for the graph's endpoints
// (the operation is not read before authentication), "unknown" for any
// other path.
func (s *Server) calledMethod(r *http.Request) string {
	if m := s.methodOf(r); m != nil {
		return m.Key()
	}
	if r.URL.Path == "/graphql" || r.URL.Path == StreamPath {
		return "graphql"
	}
	return "unknown" // the method index, the OpenAPI document, the metrics
}

// methodOf is the method a request's path names on the method surface, or
// nil.
func (s *Server) methodOf(r *http.Request) *registry.Method {
	if g, n, ok := rest.MethodPath(r); ok {
		if m, ok := s.Registry.Lookup(g, n); ok {
			return m
		}
	}
	return nil
}

// failed is err, a failed authentication, once charged to the client
// address's budget: the budget's refusal when it is spent.
func (s *Server) failed(r *http.Request, err error) error {
	if refused := s.authFailure(r.Context(), clientIP(r)); refused != nil {
		return refused
	}
	return err
}

// authenticateSecret looks a secret up; only a failing attempt spends the
// client address's failed-authentication budget. A credential that
// authenticates is never refused because of other callers' failures (one
// script with a stale token behind a NAT or a load balancer would lock
// out everyone behind it), so every attempt is looked up. The failure
// takes its token from the budget atomically when the lookup says no: an
// attempt that finds the budget spent answers RATE_LIMITED instead of
// UNAUTHENTICATED, however many are in flight at once. (Reserving before
// the lookup and giving the reservation back on success decides the same,
// but would spend budget on every request, including the valid ones.)
//
// A revoked token's use is recorded in its principal's tenant's audit trail
// (method what it called, outcome UNAUTHENTICATED, the token's id in the
// detail): its holder is known, and a token used after its revocation may
// have been stolen. Within the budget only, so a flood of them writes no
// more records than the budget lets through; unknown secrets name no one
// and are not recorded.
func (s *Server) authenticateSecret(ctx context.Context, ip, secret, method string) (*reqctx.Principal, error) {
	p, err := auth.Authenticate(ctx, s.DB, secret)
	if auth.IsFailed(err) {
		if refused := s.authFailure(ctx, ip); refused != nil {
			return nil, refused
		}
		s.auditRevoked(ctx, secret, method)
	}
	return p, err
}

// auditRevoked records the use of secret when it is a revoked token's.
func (s *Server) auditRevoked(ctx context.Context, secret, method string) {
	ctx = context.WithoutCancel(ctx)
	holder, err := auth.Revoked(ctx, s.DB, secret)
	if err == nil && holder != nil {
		actor := audit.ActorOf(holder)
		detail, _ := json.Marshal(map[string]string{"tokenId": holder.TokenID, "reason": "revoked-token"})
		err = audit.Write(ctx, s.DB, audit.Entry{TenantID: holder.TenantID, Method: method,
			Resource: audit.Resource{Type: authz.Tenant, ID: holder.TenantID}, Outcome: string(errs.Unauthenticated),
			Detail: detail, Actor: &actor})
	}
	if err != nil {
		s.Log.ErrorContext(ctx, "audit of a revoked token's use failed", "requestId", reqctx.RequestID(ctx), "err", err)
	}
}

// authFailure charges one failed authentication to the address's budget:
// RATE_LIMITED once it is spent. The one rule for every credential that
// fails: bearer tokens here (authenticateSecret), and a credential in a
// method's input (nodes.join's join token), which the registry charges
// through the request's context (clientAddr puts it there, auth.Charge).
func (s *Server) authFailure(ctx context.Context, ip string) error {
	ok, d, err := s.authFail.Allow(ctx, ip, 1)
	if err != nil {
		return store.ClassifyIn(ctx, err)
	}
	if !ok {
		secs := int(d.Seconds()) + 1
		return errs.E(errs.RateLimited, "too many failed authentications from this address; retry in %d s", secs).With("retryAfterSeconds", secs)
	}
	return nil
}

// limitGraphQLBody answers 413 PAYLOAD_TOO_LARGE for a body over limit
// (gqlgen would report a read error as a GraphQL error with status 200).
func limitGraphQLBody(next http.Handler, limit int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil && r.Method == http.MethodPost {
			b, e := rest.ReadBody(w, r, limit)
			if e != nil {
				writeRequestError(w, responseType(r), e.Code.HTTPStatus(), e)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(b))
		}
		next.ServeHTTP(w, r)
	})
}

// clientIP is the client address the clientAddr middleware decided: every
// limit keyed by address uses it.
func clientIP(r *http.Request) string { return addrOf(r.Context()) }

func addrOf(ctx context.Context) string {
	if a := reqctx.ClientAddr(ctx); a != "" {
		return a
	}
	return "unknown"
}

// --- rate limiting --------------------------------------------------------

// limited charges one request to key's budget and, past it, answers the
// method surface's 429.
func (s *Server) limited(w http.ResponseWriter, r *http.Request, key string) bool {
	if e := s.overBudget(r.Context(), key); e != nil {
		s.rest.WriteError(w, r, e)
		return true
	}
	return false
}

// overBudget charges one request to key's budget: nil within it, else the
// RATE_LIMITED refusal (with how long to wait).
func (s *Server) overBudget(ctx context.Context, key string) *errs.Error {
	if s.limiter == nil {
		return nil
	}
	ok, d, err := s.limiter.Allow(ctx, key, 1)
	if err != nil {
		// The deadline passed while the lease was in flight (the database
		// does not answer): the request was not over its budget.
		return store.ClassifyIn(ctx, err)
	}
	if ok {
		return nil
	}
	secs := int(d.Seconds()) + 1
	return errs.E(errs.RateLimited, "over the request budget; retry in %d s", secs).With("retryAfterSeconds", secs)
}
