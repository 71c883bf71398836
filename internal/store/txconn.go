package store

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
)

// The pool's driver connections are pgx's, with transactions that send
// nothing until they must: BEGIN goes out just before the transaction's
// first statement, and the statements it defers (ExecAtCommit: the event
// outbox's inserts) go out with its COMMIT, in one pipeline. A transaction
// whose only writes are deferred is one round trip to PostgreSQL instead of
// three; one that reads first saves the deferred statements' round trips;
// one that sends nothing (fn returned nil without a statement) costs none.
// On this machine a round trip is most of a small transaction's cost on
// both sides (docs/performance.md, "One round trip per event").

// connector makes the pool's connections: pgx's connector's, wrapped.
type connector struct{ driver.Connector }

func (c connector) Connect(ctx context.Context) (driver.Conn, error) {
	// A connection is the pool's, not the request's that happened to open
	// it: a client that went away mid-handshake closed it half made
	// (PostgreSQL's "connection to client lost", 37 of 800 aborted
	// requests), and the next request paid for another. It is made whole
	// and pooled, within the request's deadline still (a frozen database
	// is the request's UNAVAILABLE at its deadline, not the connect
	// timeout's 5 s).
	cctx := context.WithoutCancel(ctx)
	if dl, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		cctx, cancel = context.WithDeadline(cctx, dl)
		defer cancel()
	}
	dc, err := c.Connector.Connect(cctx)
	if err != nil {
		return nil, err
	}
	sc, ok := dc.(*stdlib.Conn)
	if !ok {
		dc.Close()
		return nil, fmt.Errorf("store: driver connection %T is not pgx's", dc)
	}
	return &conn{Conn: sc}, nil
}

// conn is one pooled connection. database/sql uses a connection from one
// goroutine at a time, so tx needs no lock.
type conn struct {
	*stdlib.Conn
	tx *lazyTx // the open transaction, nil outside one
}

// lazyTx is an open transaction of conn: begin is its BEGIN statement, sent
// (sent true) with its first statement; notes, from DB.Tx's context, hold
// the statements deferred to its commit.
type lazyTx struct {
	c     *conn
	ctx   context.Context
	begin string
	sent  bool
	notes *txNotes
}

type notesKey struct{}

func (c *conn) Begin() (driver.Tx, error) { return c.BeginTx(context.Background(), driver.TxOptions{}) }

// BeginTx opens a transaction without a round trip (what database/sql asks
// of a driver is that statements until Commit or Rollback belong to it).
func (c *conn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if c.Conn.Conn().IsClosed() {
		return nil, driver.ErrBadConn
	}
	if c.tx != nil {
		return nil, errors.New("store: a transaction is already open on this connection")
	}
	begin, err := beginSQL(opts)
	if err != nil {
		return nil, err
	}
	t := &lazyTx{c: c, ctx: ctx, begin: begin}
	t.notes, _ = ctx.Value(notesKey{}).(*txNotes)
	c.tx = t
	return t, nil
}

// beginSQL is the BEGIN for database/sql's options, as pgx's stdlib writes
// them.
func beginSQL(opts driver.TxOptions) (string, error) {
	s := "begin"
	switch opts.Isolation {
	case driver.IsolationLevel(0): // the default
	case driver.IsolationLevel(1): // sql.LevelReadUncommitted
		s += " isolation level read uncommitted"
	case driver.IsolationLevel(2): // sql.LevelReadCommitted
		s += " isolation level read committed"
	case driver.IsolationLevel(4), driver.IsolationLevel(5): // sql.LevelRepeatableRead, sql.LevelSnapshot
		s += " isolation level repeatable read"
	case driver.IsolationLevel(6): // sql.LevelSerializable
		s += " isolation level serializable"
	default:
		return "", fmt.Errorf("unsupported isolation: %v", opts.Isolation)
	}
	if opts.ReadOnly {
		s += " read only"
	}
	return s, nil
}

// begun sends the open transaction's BEGIN before its first statement.
func (c *conn) begun(ctx context.Context) error {
	if c.tx == nil || c.tx.sent {
		return nil
	}
	c.tx.sent = true
	if _, err := c.Conn.Conn().Exec(ctx, c.tx.begin); err != nil {
		c.fail()
		c.tx.lost()
		return err
	}
	return nil
}

// lost marks the transaction's session as gone before any of its work
// could commit (its BEGIN failed, or PostgreSQL answered its commit's
// pipeline with an error before the first statement completed, and the
// connection is closed: a backend terminated while the connection sat in
// the pool answers the next thing sent with its FATAL): nothing of it
// committed, so DB.Tx runs it again on another connection.
func (t *lazyTx) lost() {
	if t.notes != nil && t.c.Conn.Conn().IsClosed() {
		t.notes.mu.Lock()
		t.notes.lost = true
		t.notes.mu.Unlock()
	}
}

// fail discards the connection after a failure that may leave its session
// in a transaction: database/sql's next ResetSession sees it closed.
func (c *conn) fail() {
	if pc := c.Conn.Conn(); pc.PgConn().TxStatus() != 'I' {
		pc.Close(context.Background()) //nolint:errcheck // discarded either way
	}
}

func (c *conn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	if err := c.begun(ctx); err != nil {
		return nil, err
	}
	res, err := c.Conn.ExecContext(ctx, query, args)
	return res, c.gone(err)
}

func (c *conn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	if err := c.begun(ctx); err != nil {
		return nil, err
	}
	rows, err := c.Conn.QueryContext(ctx, query, args)
	return rows, c.gone(err)
}

// gone turns the error of a statement outside a transaction into
// driver.ErrBadConn, which database/sql retries on another connection
// (the last time on a new one), when PostgreSQL answered it with the end
// of its session (a backend terminated while its connection sat in the
// pool, or a server shutting down or restarting after a crash): the
// statement did not complete, and an autocommit statement that did not
// complete did not commit. pgx's stdlib says so only when nothing was
// sent; this is the case where the statement was sent into a session
// already gone.
func (c *conn) gone(err error) error {
	var pe *pgconn.PgError
	if err != nil && c.tx == nil && c.Conn.Conn().IsClosed() && errors.As(err, &pe) &&
		(pe.Code == "57P01" || pe.Code == "57P02" || pe.Code == "57P03") {
		return driver.ErrBadConn
	}
	return err
}

func (c *conn) Prepare(query string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), query)
}

func (c *conn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	if err := c.begun(ctx); err != nil {
		return nil, err
	}
	return c.Conn.PrepareContext(ctx, query)
}

// errCommitRolledBack is a COMMIT that PostgreSQL answered ROLLBACK (the
// transaction had failed).
var errCommitRolledBack = errors.New("store: commit unexpectedly resulted in rollback")

// Commit sends what the transaction deferred and its COMMIT in one pipeline
// (with its BEGIN if no statement sent it), or nothing if it sent nothing.
func (t *lazyTx) Commit() error {
	c := t.c
	c.tx = nil
	var deferred []deferredStmt
	if t.notes != nil {
		t.notes.mu.Lock()
		deferred = t.notes.deferred
		t.notes.mu.Unlock()
	}
	if !t.sent && len(deferred) == 0 {
		return nil
	}
	pc := c.Conn.Conn()
	// Once database/sql has decided to commit (it rolls back a transaction
	// whose context ended before Commit), the client's going away does not
	// interrupt the commit: interrupted, it may have committed or not, and
	// the caller could only say it does not know (answering a failure, and
	// auditing one, for a change that stays). Its deadline still holds.
	ctx := context.WithoutCancel(t.ctx)
	if d, ok := t.ctx.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d)
		defer cancel()
	}
	if len(deferred) == 0 {
		tag, err := pc.Exec(ctx, "commit")
		if err != nil {
			c.fail()
			return err
		}
		if tag.String() == "ROLLBACK" {
			return errCommitRolledBack
		}
		return nil
	}
	// A pipeline with one Sync is a transaction of its own (PostgreSQL's
	// implicit transaction): when nothing was sent yet and the transaction
	// is a default one, the deferred statements need no BEGIN or COMMIT.
	b := &pgx.Batch{}
	explicit := t.sent || t.begin != "begin"
	if !t.sent && explicit {
		b.Queue(t.begin)
	}
	for _, d := range deferred {
		b.Queue(d.sql, d.args...)
	}
	if explicit {
		b.Queue("commit")
	}
	br := pc.SendBatch(ctx, b)
	var first error
	var tag pgconn.CommandTag
	for i := range b.Len() {
		var err error
		tag, err = br.Exec()
		if err != nil && first == nil {
			first = err
			// PostgreSQL's own error as the first answer (not a broken
			// connection, after which it may have run everything): the
			// first statement did not complete, so nothing after it ran.
			if pe := (*pgconn.PgError)(nil); i == 0 && errors.As(err, &pe) {
				defer t.lost() // once br is closed (and pgx has closed a dead connection)
			}
		}
	}
	if err := br.Close(); err != nil && first == nil {
		if explicit && tag.String() == "COMMIT" {
			// PostgreSQL confirmed the COMMIT (its CommandComplete comes
			// once the commit is durable) and the session ended before
			// the pipeline's Sync was answered (a terminated backend reads
			// the Sync, already in its buffer, and reports the termination
			// then). The transaction committed: the caller must not be told
			// otherwise; the session is dropped.
			pc.Close(context.Background()) //nolint:errcheck // discarded either way
			return nil
		}
		first = err
	}
	if first == nil && explicit && tag.String() == "ROLLBACK" {
		first = errCommitRolledBack
	}
	if first != nil {
		// A deferred statement failed: PostgreSQL skipped the rest and
		// holds the failed transaction open; end it, or drop the session.
		if pc.PgConn().TxStatus() != 'I' {
			ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, err := pc.Exec(ctx, "rollback")
			cancel()
			if err != nil {
				c.fail()
			}
		}
		return first
	}
	return nil
}

// Rollback ends the transaction; one that sent nothing has nothing to end.
func (t *lazyTx) Rollback() error {
	c := t.c
	c.tx = nil
	if !t.sent {
		return nil
	}
	if _, err := c.Conn.Conn().Exec(t.ctx, "rollback"); err != nil {
		c.fail()
		return err
	}
	return nil
}
