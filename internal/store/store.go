// Package store owns the connection to PostgreSQL: one sqlx handle over the
// pgx driver, a statement counter for tests and benchmarks, transactions with
// retry of serialization failures, and the mapping of driver errors to the
// product's error codes.
package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/jackc/pgxlisten"
	"github.com/jmoiron/sqlx"

	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/fair"
	"github.com/bettercompute/computed/internal/reqctx"
)

// Q is what both *sqlx.DB and *sqlx.Tx offer; domain code takes a Q.
type Q interface {
	sqlx.ExtContext
	GetContext(ctx context.Context, dest any, query string, args ...any) error
	SelectContext(ctx context.Context, dest any, query string, args ...any) error
}

// DB is the product's database handle.
type DB struct {
	*sqlx.DB
	URL string
	// Replica names the replica in application_name (empty: not named).
	Replica string
	// Committed, when set, is told the tenants whose events a transaction
	// of this handle wrote (NoteEvents), right after it commits, on the
	// committing goroutine: package events numbers them there (the
	// sequencer), outside the writer's transaction. took is how long the
	// commit took, from the moment its pipeline (with the statements sent
	// at commit, ExecAtCommit) began to be sent until PostgreSQL answered
	// it; negative when not known (a statement on the handle itself).
	Committed func(ctx context.Context, tenants []string, took time.Duration)

	maxConns int // the pool's size, to keep idle (Renew)
	// statements shares the pool among the credentials whose requests run
	// statements on it (enter).
	statements *fair.Slots

	authorityMu sync.Mutex
	onAuthority []func()
}

// OnAuthorityChanged adds f, called on the committing goroutine right
// after a transaction of this handle commits that revoked a credential or
// changed a role binding (NoteAuthority): the server checks its open
// sockets' credentials again at once rather than at its next sweep.
func (db *DB) OnAuthorityChanged(f func()) {
	db.authorityMu.Lock()
	db.onAuthority = append(db.onAuthority, f)
	db.authorityMu.Unlock()
}

func (db *DB) authorityChanged() {
	db.authorityMu.Lock()
	fs := db.onAuthority
	db.authorityMu.Unlock()
	for _, f := range fs {
		f()
	}
}

// AppName is the application_name of a connection of this replica in the
// given role ("pool", "river", "sim", the event listener's): the replica's
// name and the role, so that pg_stat_activity counts each replica's
// connections by what holds them. Without a replica name it is the role.
func (db *DB) AppName(role string) string { return AppName(db.Replica, role) }

// AppName is application_name for a replica and a role (at most 63 bytes,
// PostgreSQL's limit, keeping the role whole).
func AppName(replica, role string) string {
	if replica == "" {
		return role
	}
	if len(replica)+len(role)+10 > 63 {
		replica = replica[:max(0, 63-len(role)-10)]
	}
	return "computed/" + replica + "/" + role
}

// Options bound the pool and the time a statement may take.
type Options struct {
	// MaxConns is the pool size (default 20); every connection is kept
	// open while idle, so a busy replica does not reconnect continuously.
	MaxConns int
	// StatementTimeout is PostgreSQL's statement_timeout for the pool's
	// sessions (default 10 s; negative: none, for migrations).
	StatementTimeout time.Duration
	// ConnectTimeout bounds opening a connection (default 5 s).
	ConnectTimeout time.Duration
	// IdleInTransactionTimeout is PostgreSQL's
	// idle_in_transaction_session_timeout for the pool's sessions (default
	// 60 s: above a reconciler step's 30 s, which calls its provider inside
	// its transaction; negative: none, for migrations). A replica that
	// stops in the middle of a transaction (SIGSTOP, a partition) holds its
	// row locks until PostgreSQL ends its session; without it, until the
	// TCP keepalive gives up, hours later.
	IdleInTransactionTimeout time.Duration
	// Replica and Role name the connections in application_name (AppName;
	// Role defaults to "pool").
	Replica, Role string
	// CloseOnCancel closes a connection whose statement's context ends at
	// once, as pgx does by default, instead of asking PostgreSQL to cancel
	// the statement and keeping the connection (keepOnCancel): /readyz's
	// check answers at its 2 s, where the cancel's second of grace made a
	// frozen database's first answer take 3.1 s (a probe's), past a load
	// balancer's 2–3 s probe timeout.
	CloseOnCancel bool
}

// Open connects with the default options.
func Open(ctx context.Context, url string) (*DB, error) { return OpenWith(ctx, url, Options{}) }

// OpenWith connects with the pgx driver and a tracer that counts
// statements. Settings the URL names itself (connect_timeout,
// statement_timeout in options) win over opts.
func OpenWith(ctx context.Context, url string, opts Options) (*DB, error) {
	if opts.MaxConns <= 0 {
		opts.MaxConns = 20
	}
	if opts.StatementTimeout == 0 {
		opts.StatementTimeout = 10 * time.Second
	}
	if opts.ConnectTimeout <= 0 {
		opts.ConnectTimeout = 5 * time.Second
	}
	if opts.IdleInTransactionTimeout == 0 {
		opts.IdleInTransactionTimeout = time.Minute
	}
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse database url: %w", err)
	}
	cfg.Tracer = counter{}
	if !opts.CloseOnCancel {
		cfg.BuildContextWatcherHandler = keepOnCancel
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = opts.ConnectTimeout
	}
	if opts.Role == "" {
		opts.Role = "pool"
	}
	if opts.Replica != "" {
		cfg.RuntimeParams["application_name"] = AppName(opts.Replica, opts.Role)
	}
	if _, set := cfg.RuntimeParams["statement_timeout"]; !set && opts.StatementTimeout > 0 {
		cfg.RuntimeParams["statement_timeout"] = fmt.Sprint(opts.StatementTimeout.Milliseconds())
	}
	if _, set := cfg.RuntimeParams["idle_in_transaction_session_timeout"]; !set && opts.IdleInTransactionTimeout > 0 {
		cfg.RuntimeParams["idle_in_transaction_session_timeout"] = fmt.Sprint(opts.IdleInTransactionTimeout.Milliseconds())
	}
	sqldb := sql.OpenDB(connector{stdlib.GetConnector(*cfg)})
	sqldb.SetMaxOpenConns(opts.MaxConns)
	sqldb.SetMaxIdleConns(opts.MaxConns)
	sqldb.SetConnMaxIdleTime(5 * time.Minute)
	db := sqlx.NewDb(sqldb, "pgx")
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := db.PingContext(pctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("connect to database: %w", err)
	}
	return &DB{DB: db, URL: url, Replica: opts.Replica, maxConns: opts.MaxConns, statements: fair.New(opts.MaxConns)}, nil
}

// Renew closes the pool's idle connections, so that the next statements
// run on new sessions, with the database's settings as they are now: a
// session keeps those it started with (default_transaction_read_only
// turned off again left every pooled session read-only, and the replica
// answered 503 until its connections were ended by hand).
func (db *DB) Renew() {
	if db.maxConns > 0 {
		db.DB.SetMaxIdleConns(0)
		db.DB.SetMaxIdleConns(db.maxConns)
	}
}

// --- statement counting -------------------------------------------------

type counterKey struct{}

// Counter counts the statements sent on contexts derived from WithCounter.
// Hook, when set, sees each statement's SQL before it is sent (tests stop
// the database at a chosen statement).
type Counter struct {
	n    atomic.Int64
	Hook func(sql string)
}

// N is the number of statements counted so far.
func (c *Counter) N() int64 { return c.n.Load() }

// WithCounter returns a context whose statements are counted by c.
func WithCounter(ctx context.Context, c *Counter) context.Context {
	return context.WithValue(ctx, counterKey{}, c)
}

var totalStatements, requestStatements atomic.Int64

// TotalStatements counts every statement this process sent.
func TotalStatements() int64 { return totalStatements.Load() }

type requestKey struct{}

// ForRequest marks ctx as serving a client's request: its statements are
// counted in RequestStatements (the load benchmark's statements per
// request, without the reconciler's and the event hub's background work).
func ForRequest(ctx context.Context) context.Context {
	return WithStatementGate(context.WithValue(ctx, requestKey{}, true))
}

// RequestStatementsAtOnce bounds the statements one request (one GraphQL
// operation) has on the database at once: one operation of 90 aliased
// counts, each its own statement, took all 19 of its replica's
// connections for its 15 s, and every other tenant's request on the
// replica, and /readyz, waited behind it (a probe's). A credential runs
// at most half of the GraphQL slots when others wait, so its operations
// hold at most half of a replica's connections.
const RequestStatementsAtOnce = 2

type gateKey struct{}

// WithStatementGate gives ctx's work a gate of its own: the DB handle's
// GetContext, SelectContext and ExecContext, EachRow and SelectSpending on
// it, and each transaction of Tx for its whole length, run at most
// RequestStatementsAtOnce at once; the others wait (or end with ctx).
// Background work has no gate.
func WithStatementGate(ctx context.Context) context.Context {
	return context.WithValue(ctx, gateKey{}, make(chan struct{}, RequestStatementsAtOnce))
}

// enter takes a place at ctx's gate, then, for a request, a share of the
// pool (leave gives both back). The pool's connections are shared among
// the tenants whose requests wait for them (fair.Slots, keyed by
// reqctx.ShareKey): past half the pool, a tenant's statement starts only
// while no other's waits, and the last free connection goes only to a
// tenant that holds none. Each request
// within its own gate, one credential's requests still took every
// connection (its 256 event streams replaying at once, a flood of heavy
// queries), and every other tenant's statements queued behind theirs.
// Background work has no gate and takes no share.
func (db *DB) enter(ctx context.Context) (leave func(), err error) {
	g, _ := ctx.Value(gateKey{}).(chan struct{})
	if g == nil {
		return func() {}, nil
	}
	select {
	case g <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if db.statements == nil { // a handle not made by OpenWith
		return func() { <-g }, nil
	}
	key := reqctx.ShareKey(ctx, reqctx.PrincipalFrom(ctx))
	if !db.statements.Acquire(ctx, key) {
		<-g
		return nil, ctx.Err()
	}
	return func() { db.statements.Release(key); <-g }, nil
}

// gated runs fn with a place at ctx's gate (the error of a ctx that ended
// while it waited, as is).
func (db *DB) gated(ctx context.Context, fn func() error) error {
	leave, err := db.enter(ctx)
	if err != nil {
		return err
	}
	defer leave()
	return fn()
}

// GetContext is sqlx's, through ctx's gate.
func (db *DB) GetContext(ctx context.Context, dest any, query string, args ...any) error {
	return db.gated(ctx, func() error { return db.DB.GetContext(ctx, dest, query, args...) })
}

// SelectContext is sqlx's, through ctx's gate.
func (db *DB) SelectContext(ctx context.Context, dest any, query string, args ...any) error {
	return db.gated(ctx, func() error { return db.DB.SelectContext(ctx, dest, query, args...) })
}

// ExecContext is database/sql's, through ctx's gate.
func (db *DB) ExecContext(ctx context.Context, query string, args ...any) (res sql.Result, err error) {
	err = db.gated(ctx, func() error { res, err = db.DB.ExecContext(ctx, query, args...); return err })
	return res, err
}

// IsRequest says ctx comes from ForRequest: work done for a client's
// request (which waits for what it wrote to be readable) rather than
// background work.
func IsRequest(ctx context.Context) bool { return ctx.Value(requestKey{}) != nil }

// RequestStatements counts the statements sent on contexts from ForRequest.
func RequestStatements() int64 { return requestStatements.Load() }

type counter struct{}

// logSQL prints every statement to stderr (COMPUTE_SQL_LOG=1; for debugging
// statement counts, never in production: it shows the SQL, not the values).
var logSQL = os.Getenv("COMPUTE_SQL_LOG") != ""

func (counter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if logSQL {
		fmt.Fprintf(os.Stderr, "SQL: %s\n", strings.Join(strings.Fields(d.SQL), " "))
	}
	totalStatements.Add(1)
	if ctx.Value(requestKey{}) != nil {
		requestStatements.Add(1)
	}
	if c, ok := ctx.Value(counterKey{}).(*Counter); ok {
		c.n.Add(1)
		if c.Hook != nil {
			c.Hook(d.SQL)
		}
	}
	return ctx
}

func (counter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TraceBatchStart counts a pipeline's statements (a commit's, txconn.go) as
// they are sent.
func (c counter) TraceBatchStart(ctx context.Context, conn *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	for _, q := range d.Batch.QueuedQueries {
		c.TraceQueryStart(ctx, conn, pgx.TraceQueryStartData{SQL: q.SQL, Args: q.Arguments})
	}
	return ctx
}

func (counter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (counter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// --- transactions -------------------------------------------------------

// Tx runs fn in a transaction and commits it when fn returns nil. A
// serialization failure or deadlock retries fn from the start, a few times;
// a session found gone before any of the transaction's work ran
// (txconn.go) retries it on the next session, until a new one.
func (db *DB) Tx(ctx context.Context, fn func(tx *sqlx.Tx) error) (err error) {
	for attempt := 0; ; attempt++ {
		err = db.tx(ctx, fn)
		if err == nil || ctx.Err() != nil {
			return err
		}
		if errors.As(err, new(sessionLost)) && db.freshAfter(attempt) {
			continue // the gone session was discarded: the next is another
		}
		if attempt >= 4 || !retryable(err) {
			return err
		}
		time.Sleep(time.Duration(attempt+1) * 5 * time.Millisecond)
	}
}

func (db *DB) tx(ctx context.Context, fn func(tx *sqlx.Tx) error) error {
	leave, err := db.enter(ctx)
	if err != nil {
		return Wrap(err)
	}
	defer leave()
	notes := &txNotes{}
	tx, err := db.BeginTxx(context.WithValue(ctx, notesKey{}, notes), nil)
	if errors.Is(err, driver.ErrBadConn) {
		// database/sql gave up finding a live connection: every one it
		// took from the pool had been closed under an earlier call (a
		// client's cancel closes its connection), and its last, "new"
		// try can be handed one freed by another call, closed too (its
		// session reset answered ErrBadConn). Nothing of the transaction
		// ran: DB.Tx tries again (a plain transaction was answered
		// UNAVAILABLE in TestExecAtCommitConcurrent, 1 run in 15).
		return sessionLost{Wrap(err)}
	}
	if err != nil {
		return Wrap(err)
	}
	noted.Store(tx, notes)
	defer func() {
		tx.Rollback() //nolint:errcheck // after Commit this is a no-op
		noted.Delete(tx)
	}()
	if err := fn(tx); err != nil {
		return notes.retry(err)
	}
	began := time.Now()
	if err := tx.Commit(); err != nil {
		return notes.retry(Wrap(err))
	}
	if notes.authority {
		db.authorityChanged()
	}
	if len(notes.tenants) > 0 && db.Committed != nil {
		db.Committed(ctx, notes.tenants, time.Since(began))
	}
	return nil
}

// Listener returns a LISTEN of its own (jackc/pgxlisten, reconnecting a
// second after a failure): a connection to db's database outside the
// pool, named role in pg_stat_activity, with no statement timeout (it
// waits for notifications indefinitely). A failure clears listening (the
// owner sets it once it hears again) and is logged as what, unless ctx
// has ended.
func (db *DB) Listener(role string, listening *atomic.Bool, log *slog.Logger, what string) *pgxlisten.Listener {
	return &pgxlisten.Listener{
		Connect: func(ctx context.Context) (*pgx.Conn, error) {
			cfg, err := pgx.ParseConfig(db.URL)
			if err != nil {
				return nil, err
			}
			delete(cfg.RuntimeParams, "statement_timeout")
			cfg.RuntimeParams["application_name"] = db.AppName(role)
			return pgx.ConnectConfig(ctx, cfg)
		},
		LogError: func(ctx context.Context, err error) {
			listening.Store(false)
			if ctx.Err() == nil {
				log.Warn(what, "err", err)
			}
		},
		ReconnectDelay: time.Second,
	}
}

// --- after commit -------------------------------------------------------

// noted holds, per open transaction of DB.Tx, the tenants whose events it
// wrote (NoteEvents) and the statements it defers to its commit
// (ExecAtCommit).
var noted sync.Map // *sqlx.Tx → *txNotes

type txNotes struct {
	mu        sync.Mutex
	tenants   []string
	deferred  []deferredStmt
	lost      bool // the session was gone before any statement ran (txconn.go)
	authority bool // a credential revoked or a role binding changed (NoteAuthority)
}

type deferredStmt struct {
	sql  string
	args []any
}

// ExecAtCommit runs a statement whose result nobody reads (an insert into
// the event outbox): in a transaction of DB.Tx it is sent with the COMMIT,
// in the same round trip, after every statement of the transaction; its
// failure fails the commit. Anywhere else it runs now.
func ExecAtCommit(ctx context.Context, q Q, query string, args ...any) error {
	if tx, ok := q.(*sqlx.Tx); ok {
		if v, ok := noted.Load(tx); ok {
			n := v.(*txNotes)
			n.mu.Lock()
			n.deferred = append(n.deferred, deferredStmt{query, args})
			n.mu.Unlock()
			return nil
		}
	}
	_, err := q.ExecContext(ctx, query, args...)
	return err
}

// Savepoint runs fn in a savepoint of the transaction q: when fn fails,
// what it wrote is undone (ROLLBACK TO SAVEPOINT, which also ends the
// aborted state a failed statement leaves) and so is what it noted for the
// commit (statements deferred to it, tenants with events, a change of
// authority), while what the transaction wrote before stands and it can
// go on or commit. fn's error is returned (or the rollback's, when that
// fails: then the transaction is lost). q must be a transaction.
func Savepoint(ctx context.Context, q Q, fn func() error) error {
	tx, ok := q.(*sqlx.Tx)
	if !ok {
		return errors.New("store: a savepoint needs a transaction")
	}
	n := &txNotes{}
	if v, ok := noted.Load(tx); ok {
		n = v.(*txNotes)
	}
	n.mu.Lock()
	deferred, tenants, authority := len(n.deferred), len(n.tenants), n.authority
	n.mu.Unlock()
	if _, err := tx.ExecContext(ctx, `SAVEPOINT store_savepoint`); err != nil {
		return Wrap(err)
	}
	ferr := fn()
	if ferr == nil {
		return nil
	}
	if _, err := tx.ExecContext(ctx, `ROLLBACK TO SAVEPOINT store_savepoint`); err != nil {
		return Wrap(err)
	}
	n.mu.Lock()
	n.deferred, n.tenants, n.authority = n.deferred[:deferred], n.tenants[:tenants], authority
	n.mu.Unlock()
	return ferr
}

// NoteEvents records that q wrote events of the tenant: inside a
// transaction of DB.Tx, DB.Committed is told after it commits; on the
// handle itself (the statement committed on its own), it is told now.
func NoteEvents(ctx context.Context, q Q, tenantID string) {
	switch x := q.(type) {
	case *sqlx.Tx:
		v, ok := noted.Load(x)
		if !ok {
			return // not DB.Tx's: nobody to tell
		}
		n := v.(*txNotes)
		n.mu.Lock()
		if !slices.Contains(n.tenants, tenantID) {
			n.tenants = append(n.tenants, tenantID)
		}
		n.mu.Unlock()
	case *DB:
		if x.Committed != nil {
			x.Committed(ctx, []string{tenantID}, -1)
		}
	}
}

// NoteAuthority records that q revokes a credential or changes a role
// binding: inside a transaction of DB.Tx, the handle's OnAuthorityChanged
// functions are called after it commits (not if it does not); on the handle
// itself, now.
func NoteAuthority(q Q) {
	switch x := q.(type) {
	case *sqlx.Tx:
		if v, ok := noted.Load(x); ok {
			n := v.(*txNotes)
			n.mu.Lock()
			n.authority = true
			n.mu.Unlock()
		}
	case *DB:
		x.authorityChanged()
	}
}

// sessionLost is the error of a call whose session was gone before any of
// its work ran (a transaction's, txconn.go; a read's, eachRow): the caller
// runs it again on the next session, until a new one (freshAfter).
type sessionLost struct{ error }

func (e sessionLost) Unwrap() error { return e.error }

// retry marks err as sessionLost when the transaction's session was lost
// before any statement of it ran.
func (n *txNotes) retry(err error) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.lost {
		return sessionLost{err}
	}
	return err
}

func retryable(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code == "40001" || pe.Code == "40P01"
	}
	return false
}

// IsUnique reports a unique-constraint violation, optionally of one constraint.
func IsUnique(err error, constraint string) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "23505" {
		return constraint == "" || pe.ConstraintName == constraint
	}
	return false
}

// IsForeignKey reports a foreign-key violation.
func IsForeignKey(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23503"
}

// Wrap maps driver errors: an unreachable database becomes UNAVAILABLE;
// sql.ErrNoRows and domain errors pass; anything else is returned as is and
// becomes INTERNAL at the edge.
func Wrap(err error) error {
	if err == nil || errors.Is(err, sql.ErrNoRows) {
		return err
	}
	if _, ok := errs.As(err); ok {
		return err
	}
	if Unreachable(err) {
		return &unavailable{err}
	}
	return err
}

type unavailable struct{ cause error }

func (u *unavailable) Error() string { return "database unavailable: " + u.cause.Error() }
func (u *unavailable) Unwrap() error { return u.cause }

// keepOnCancel is how a connection meets the end of its statement's
// context (a client that went away, a completed subscription): the
// statement is left to finish for a moment, then PostgreSQL is asked to
// cancel it, and the connection is closed only if even that does not end
// it. pgx's default closed the connection at once: a client's subscribe
// and complete a millisecond apart, 175 a second on one socket, killed a
// pooled connection each (PostgreSQL's "connection to client lost"),
// until the pool could not connect and other tenants' calls answered 503
// and the cluster leases lapsed (a helper's probe).
func keepOnCancel(pc *pgconn.PgConn) ctxwatch.Handler {
	return &pgconn.CancelRequestContextWatcherHandler{Conn: pc, CancelRequestDelay: 50 * time.Millisecond, DeadlineDelay: time.Second}
}

// Unreachable reports errors that mean the database cannot be reached.
func Unreachable(err error) bool {
	if err == nil {
		return false
	}
	var u *unavailable
	if errors.As(err, &u) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return true
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		// class 08: connection exception; 57P01..03: admin shutdown, crash, cannot connect now
		return pe.Code[:2] == "08" || pe.Code == "57P01" || pe.Code == "57P02" || pe.Code == "57P03"
	}
	// A connection that ended mid-statement (its backend killed, the
	// server crash-restarting): the driver reads EOF where a message was
	// due. It answered 500 INTERNAL, where the same loss on another
	// request was 503.
	return errors.Is(err, sql.ErrConnDone) || errors.Is(err, driverBadConn) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed)
}

var driverBadConn = driver.ErrBadConn

// Cancelled reports that err ended a call because its context was
// cancelled (its client went away): context.Canceled itself, or any error
// but a domain one while ctx is cancelled (a statement interrupted by the
// cancellation can leave its connection closed, and the next one fails
// with driver.ErrBadConn, which does not say why).
func Cancelled(ctx context.Context, err error) bool {
	if err == nil {
		return false
	}
	if _, domain := errs.As(err); domain {
		return false
	}
	return errors.Is(err, context.Canceled) || errors.Is(ctx.Err(), context.Canceled)
}

// ClassifyIn is Classify for a call made on ctx: an error of a call whose
// client went away is the cancellation, whatever the database said.
func ClassifyIn(ctx context.Context, err error) *errs.Error {
	if Cancelled(ctx, err) {
		// A context ended with a domain error as its cause (a session
		// closed because its token was revoked) answers that error.
		if e, ok := errs.As(context.Cause(ctx)); ok {
			return e
		}
		return errCancelled()
	}
	if _, domain := errs.As(err); !domain && err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		// The request's own deadline passed: whatever the database did, the
		// request took too long (it may have waited for a slot), and the
		// database need not be down.
		return errs.E(errs.Unavailable, "the request ran past its deadline; retry").With("reason", "deadline")
	}
	return Classify(err)
}

func errCancelled() *errs.Error {
	return errs.E(errs.Unavailable, "the request was cancelled").With("reason", "cancelled")
}

// Classify is the one mapping of database and context errors to contract
// codes, for every surface: domain errors pass; an unreachable database, an
// expired deadline or statement timeout is UNAVAILABLE; a constraint the
// caller's input broke is NOT_FOUND (a foreign key: something it names does
// not exist), CONFLICT (unique) or INVALID_INPUT (check, range, encoding).
// Anything else is nil: a bug, which the edge answers INTERNAL.
func Classify(err error) *errs.Error {
	if err == nil {
		return nil
	}
	if e, ok := errs.As(err); ok {
		return e
	}
	if errors.Is(err, context.Canceled) {
		return errCancelled()
	}
	if Unreachable(err) || errors.Is(err, context.DeadlineExceeded) {
		return errs.E(errs.Unavailable, "the database is unavailable; retry")
	}
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return nil
	}
	switch {
	case pe.Code == "25006":
		// A read-only database: a primary become a standby, or
		// default_transaction_read_only (writes answered 500 INTERNAL).
		return errs.E(errs.Unavailable, "the database takes no writes now; retry")
	case pe.Code[:2] == "53" || pe.Code[:2] == "58":
		// Insufficient resources (disk full, out of memory, too many
		// connections, configuration limits) and system errors (I/O).
		return errs.E(errs.Unavailable, "the database is busy; retry")
	}
	switch pe.Code {
	case "57014", "55P03", "40001", "40P01":
		// statement timeout or cancel, lock timeout, and retries that ran
		// out
		return errs.E(errs.Unavailable, "the database is busy; retry")
	case "23503":
		return errs.E(errs.NotFound, "a resource the request names does not exist")
	case "23505":
		return errs.E(errs.Conflict, "it already exists")
	case "23514", "23502", "22001", "22003", "22P02", "22021", "22007", "22008", "2201B":
		return errs.E(errs.InvalidInput, "the request breaks a constraint of the data")
	}
	return nil
}

// CountBy runs a "SELECT <key> AS k, count(*) AS n ... GROUP BY" query over
// keys and returns the counts by key (absent keys count 0).
func CountBy(ctx context.Context, q Q, query string, keys []string, args ...any) (map[string]int, error) {
	var rows []struct {
		K string `db:"k"`
		N int    `db:"n"`
	}
	if err := q.SelectContext(ctx, &rows, query, append([]any{keys}, args...)...); err != nil {
		return nil, Wrap(err)
	}
	out := make(map[string]int, len(rows))
	for _, r := range rows {
		out[r.K] = r.N
	}
	return out, nil
}

// EachRow runs query and calls row once per result row with the row's scan
// function. Over the pool itself (q is the *DB, not a transaction) it reads
// with pgx directly: pgx scans each column into its destination, where
// database/sql first converts every column to a driver.Value (the largest
// cost of a 50-row page on a busy replica). In a transaction it reads
// through q. Statements are counted either way (the pgx tracer). query is a
// read: over the pool, a session found gone before any row arrived (a
// backend terminated while its connection sat in the pool answers the next
// statement with its FATAL, or the write meets a closed socket) is
// discarded and the read runs again on another connection, as database/sql
// does for its own statements only when nothing was sent.
func EachRow(ctx context.Context, q Q, query string, args []any, row func(scan func(dest ...any) error) error) error {
	if db, ok := q.(*DB); ok {
		leave, err := db.enter(ctx) // the statement gate, as DB's own reads
		if err != nil {
			return Wrap(err)
		}
		defer leave()
		for attempt := 0; ; attempt++ {
			rows := 0
			err := db.eachRow(ctx, query, args, func(scan func(dest ...any) error) error { rows++; return row(scan) })
			var lost sessionLost
			if !errors.As(err, &lost) {
				return err
			}
			if rows > 0 || !db.freshAfter(attempt) || ctx.Err() != nil {
				return lost.error
			}
		}
	}
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	return each(rows, row)
}

// freshAfter says whether a call that found its session gone attempt+1
// times may try again: a restarted database leaves every pooled session
// gone, each is discarded as it is found, and after as many as the pool
// holds the next is a new one.
func (db *DB) freshAfter(attempt int) bool {
	return attempt < db.Stats().MaxOpenConnections+1
}

// eachRow is EachRow's read over one pooled connection with pgx. An error
// after which the connection is closed is a sessionLost; the connection is
// then discarded (driver.ErrBadConn from Raw).
func (db *DB) eachRow(ctx context.Context, query string, args []any, row func(scan func(dest ...any) error) error) error {
	c, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	var gone error
	err = c.Raw(func(dc any) error {
		sc, ok := dc.(*conn)
		if !ok {
			return fmt.Errorf("store: driver connection %T is not pgx's", dc)
		}
		pc := sc.Conn.Conn()
		rows, err := pc.Query(ctx, query, args...)
		if err == nil {
			err = each(rows, row)
			rows.Close()
		}
		if err != nil && pc.IsClosed() {
			gone = sessionLost{err}
			return driver.ErrBadConn
		}
		return err
	})
	if gone != nil {
		return gone
	}
	return err
}

// each calls row for every row of pgx's or database/sql's rows.
func each(rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}, row func(scan func(dest ...any) error) error) error {
	for rows.Next() {
		if err := row(rows.Scan); err != nil {
			return err
		}
	}
	return rows.Err()
}
