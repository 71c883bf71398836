package store_test

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jmoiron/sqlx"

	"github.com/bettercompute/computed/internal/store"
	"github.com/bettercompute/computed/internal/testkit"
	"github.com/bettercompute/computed/internal/testkit/pgtest"
)

// one opens a second handle on db's database with a single connection, so
// that every transaction of a test runs on the same session and a session
// left in a transaction would show in the next one.
func one(t *testing.T, db *store.DB) *store.DB {
	t.Helper()
	d, err := store.OpenWith(context.Background(), db.URL, store.Options{MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// single is one over a fresh database with the kv table.
func single(t *testing.T) *store.DB {
	t.Helper()
	db := one(t, testkit.DB(t))
	table(t, db)
	return db
}

// counted returns a context whose statements c counts.
func counted() (*store.Counter, context.Context) {
	c := &store.Counter{}
	return c, store.WithCounter(context.Background(), c)
}

func keys(t *testing.T, db *store.DB) string {
	t.Helper()
	var ks []string
	if err := db.Select(&ks, `SELECT k FROM kv ORDER BY k`); err != nil {
		t.Fatal(err)
	}
	return strings.Join(ks, ",")
}

// A statement deferred to the commit runs after the transaction's other
// statements, is not seen by them, and commits with them; a transaction of
// deferred statements only is one pipeline of just those statements (no
// BEGIN, no COMMIT: the pipeline is PostgreSQL's implicit transaction).
func TestExecAtCommit(t *testing.T) {
	t.Parallel()
	db := single(t)
	ctx := context.Background()
	c, cctx := counted()
	if err := db.Tx(cctx, func(tx *sqlx.Tx) error {
		if err := store.ExecAtCommit(cctx, tx, `INSERT INTO kv VALUES ($1, $2, NULL)`, "a", 1); err != nil {
			return err
		}
		return store.ExecAtCommit(cctx, tx, `INSERT INTO kv VALUES ($1, $2, NULL)`, "b", 2)
	}); err != nil {
		t.Fatal(err)
	}
	if c.N() != 2 || keys(t, db) != "a,b" {
		t.Fatalf("%d statements, rows %q: want the two inserts alone, committed", c.N(), keys(t, db))
	}

	// Deferred statements run after the immediate ones: the update below
	// finds the row the immediate insert made, which the transaction's own
	// read before the commit does not see deferred rows of.
	var seen int
	if err := db.Tx(ctx, func(tx *sqlx.Tx) error {
		if err := store.ExecAtCommit(ctx, tx, `UPDATE kv SET v = v + 10 WHERE k = 'c'`); err != nil {
			return err
		}
		if err := store.ExecAtCommit(ctx, tx, `INSERT INTO kv VALUES ('d', 4, NULL)`); err != nil {
			return err
		}
		if _, err := tx.Exec(`INSERT INTO kv VALUES ('c', 3, NULL)`); err != nil {
			return err
		}
		return tx.Get(&seen, `SELECT count(*) FROM kv WHERE k = 'd'`)
	}); err != nil {
		t.Fatal(err)
	}
	var v int
	if err := db.Get(&v, `SELECT v FROM kv WHERE k = 'c'`); err != nil || v != 13 || seen != 0 || keys(t, db) != "a,b,c,d" {
		t.Fatalf("c = %d (%v), d seen in the transaction %d times, rows %q", v, err, seen, keys(t, db))
	}

	// Outside a transaction of DB.Tx the statement runs at once.
	if err := store.ExecAtCommit(ctx, db, `INSERT INTO kv VALUES ('e', 5, NULL)`); err != nil || keys(t, db) != "a,b,c,d,e" {
		t.Fatalf("%v, rows %q", err, keys(t, db))
	}
	tx, err := db.BeginTxx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.ExecAtCommit(ctx, tx, `INSERT INTO kv VALUES ('f', 6, NULL)`); err != nil {
		t.Fatal(err)
	}
	var f int
	if err := tx.Get(&f, `SELECT count(*) FROM kv WHERE k = 'f'`); err != nil || f != 1 {
		t.Fatalf("in a transaction of its own caller's the statement runs at once: %d, %v", f, err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
}

// A deferred statement that fails fails the commit: nothing of the
// transaction stays, the error is PostgreSQL's, and the session is out of
// the transaction for the next one (a single connection here), whether the
// transaction had sent statements before (an explicit BEGIN) or not (an
// implicit transaction).
func TestExecAtCommitFailureRollsBack(t *testing.T) {
	t.Parallel()
	db := single(t)
	ctx := context.Background()
	for _, immediate := range []bool{true, false} {
		err := db.Tx(ctx, func(tx *sqlx.Tx) error {
			if immediate {
				if _, err := tx.Exec(`INSERT INTO kv VALUES ('x', 1, NULL)`); err != nil {
					return err
				}
			} else if err := store.ExecAtCommit(ctx, tx, `INSERT INTO kv VALUES ('x', 1, NULL)`); err != nil {
				return err
			}
			if err := store.ExecAtCommit(ctx, tx, `INSERT INTO kv VALUES ('y', -1, NULL)`); err != nil {
				return err
			}
			return store.ExecAtCommit(ctx, tx, `INSERT INTO kv VALUES ('z', 1, NULL)`)
		})
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "23514" {
			t.Fatalf("immediate %v: %v, want the check violation", immediate, err)
		}
		if k := keys(t, db); k != "" {
			t.Fatalf("immediate %v: rows %q stayed", immediate, k)
		}
		var status string
		if err := db.Get(&status, `SELECT CASE WHEN pg_current_xact_id_if_assigned() IS NULL THEN 'idle' ELSE 'in a transaction' END`); err != nil || status != "idle" {
			t.Fatalf("immediate %v: the session is %s (%v)", immediate, status, err)
		}
	}
	// A statement that failed inside fn, which fn then ignored: the commit
	// fails rather than committing half of the transaction.
	err := db.Tx(ctx, func(tx *sqlx.Tx) error {
		if _, err := tx.Exec(`INSERT INTO kv VALUES ('p', 1, NULL)`); err != nil {
			return err
		}
		_, _ = tx.Exec(`INSERT INTO kv VALUES ('q', -1, NULL)`)
		return store.ExecAtCommit(ctx, tx, `INSERT INTO kv VALUES ('r', 1, NULL)`)
	})
	if err == nil || keys(t, db) != "" {
		t.Fatalf("%v, rows %q", err, keys(t, db))
	}
	usable(t, db, db, "ok", "ok")
}

// usable commits a row k through db (a deferred insert) and checks that
// check then reads the rows want: db's connections work after whatever the
// test did to them.
func usable(t *testing.T, db, check *store.DB, k, want string) {
	t.Helper()
	ctx := context.Background()
	if err := db.Tx(ctx, func(tx *sqlx.Tx) error {
		return store.ExecAtCommit(ctx, tx, `INSERT INTO kv VALUES ($1, 1, NULL)`, k)
	}); err != nil || keys(t, check) != want {
		t.Fatalf("the next transaction: %v, rows %q", err, keys(t, check))
	}
}

// A transaction's BEGIN goes with its first statement, with the options it
// was opened with, and every statement after it is in the one transaction;
// a transaction that sends nothing costs no statement.
func TestLazyBegin(t *testing.T) {
	t.Parallel()
	db := single(t)
	ctx := context.Background()
	c, cctx := counted()
	if err := db.Tx(cctx, func(tx *sqlx.Tx) error { return nil }); err != nil || c.N() != 0 {
		t.Fatalf("an empty transaction: %v, %d statements", err, c.N())
	}
	tx, err := db.BeginTxx(ctx, &sql.TxOptions{Isolation: sql.LevelSerializable, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	var iso, ro string
	if err := tx.Get(&iso, `SHOW transaction_isolation`); err != nil || iso != "serializable" {
		t.Fatalf("isolation %q, %v", iso, err)
	}
	if err := tx.Get(&ro, `SHOW transaction_read_only`); err != nil || ro != "on" {
		t.Fatalf("read only %q, %v", ro, err)
	}
	var pe *pgconn.PgError
	if _, err := tx.Exec(`INSERT INTO kv VALUES ('a', 1, NULL)`); !errors.As(err, &pe) || pe.Code != "25006" {
		t.Fatalf("a write in a read-only transaction: %v", err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if err := db.Tx(ctx, func(tx *sqlx.Tx) error {
		var a, b string
		if err := tx.Get(&a, `SELECT pg_current_xact_id()::text || now()::text`); err != nil {
			return err
		}
		if err := tx.Get(&b, `SELECT pg_current_xact_id()::text || now()::text`); err != nil {
			return err
		}
		if a != b {
			return fmt.Errorf("two statements in two transactions: %q, %q", a, b)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// A rolled-back transaction that had sent a statement leaves nothing.
	tx, err = db.BeginTxx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(`INSERT INTO kv VALUES ('b', 1, NULL)`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(); err != nil || keys(t, db) != "" {
		t.Fatalf("%v, rows %q", err, keys(t, db))
	}
}

// Many goroutines on a small pool: transactions of deferred statements
// only, of immediate and deferred ones, failing ones (a deferred check
// violation) and ones canceled before their commit. Exactly the committed
// ones' rows are there, and every connection is usable afterwards.
func TestExecAtCommitConcurrent(t *testing.T) {
	t.Parallel()
	base := testkit.DB(t)
	table(t, base)
	db, err := store.OpenWith(context.Background(), base.URL, store.Options{MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var wg sync.WaitGroup
	var committed atomic.Int64
	const n = 400
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			k := fmt.Sprint("k", i)
			err := db.Tx(ctx, func(tx *sqlx.Tx) error {
				if i%3 == 0 {
					if _, err := tx.Exec(`INSERT INTO kv VALUES ($1, 0, NULL)`, k+"-first"); err != nil {
						return err
					}
				}
				v := 1
				if i%5 == 0 {
					v = -1
				}
				if err := store.ExecAtCommit(ctx, tx, `INSERT INTO kv VALUES ($1, $2, NULL)`, k, v); err != nil {
					return err
				}
				if i%7 == 0 {
					cancel()
				}
				return nil
			})
			switch {
			case err == nil:
				if i%5 == 0 || i%7 == 0 {
					t.Errorf("%d committed", i)
				}
				committed.Add(1)
			case i%5 != 0 && i%7 != 0:
				t.Errorf("%d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	var rows, firsts int
	if err := base.Get(&rows, `SELECT count(*) FROM kv WHERE k NOT LIKE '%-first'`); err != nil {
		t.Fatal(err)
	}
	if err := base.Get(&firsts, `SELECT count(*) FROM kv WHERE k LIKE '%-first' AND NOT EXISTS (SELECT 1 FROM kv o WHERE o.k = split_part(kv.k, '-', 1))`); err != nil {
		t.Fatal(err)
	}
	if int64(rows) != committed.Load() || firsts != 0 {
		t.Fatalf("%d rows for %d commits; %d immediate rows without their deferred one", rows, committed.Load(), firsts)
	}
	for range 8 {
		if err := db.Tx(context.Background(), func(tx *sqlx.Tx) error {
			var one int
			return tx.Get(&one, `SELECT 1`)
		}); err != nil {
			t.Fatal(err)
		}
	}
}

// cutter forwards TCP connections to PostgreSQL and, once armed, ends the
// connection right after forwarding the first CommandComplete whose tag is
// tag (PostgreSQL's messages: a type byte, a length, the body): the
// client has PostgreSQL's answer to that statement and loses the rest, as
// when a backend is terminated right after it.
type cutter struct {
	l     net.Listener
	armed atomic.Pointer[string]
	cuts  atomic.Int32
	// hold, when set before arming, delays that message by as much and
	// forwards it instead of ending the connection; onHold is called as
	// the hold begins.
	hold   time.Duration
	onHold atomic.Pointer[func()]
}

func newCutter(t *testing.T, target string) *cutter {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &cutter{l: l}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			client, err := l.Accept()
			if err != nil {
				return
			}
			server, err := net.Dial("tcp", target)
			if err != nil {
				client.Close()
				continue
			}
			go func() { _, _ = io.Copy(server, client); server.Close() }()
			go c.fromServer(client, server)
		}
	}()
	return c
}

func (c *cutter) fromServer(client, server net.Conn) {
	defer client.Close()
	defer server.Close()
	r := bufio.NewReader(server)
	for {
		var head [5]byte
		if _, err := io.ReadFull(r, head[:]); err != nil {
			return
		}
		body := make([]byte, binary.BigEndian.Uint32(head[1:])-4)
		if _, err := io.ReadFull(r, body); err != nil {
			return
		}
		matched := false
		if tag := c.armed.Load(); head[0] == 'C' && tag != nil && string(bytes.TrimRight(body, "\x00")) == *tag && c.armed.CompareAndSwap(tag, nil) {
			matched = true
			if c.hold > 0 {
				if f := c.onHold.Load(); f != nil {
					(*f)()
				}
				time.Sleep(c.hold)
			}
		}
		if _, err := client.Write(append(head[:], body...)); err != nil {
			return
		}
		if matched && c.hold == 0 {
			c.cuts.Add(1)
			return
		}
	}
}

// throughCutter returns a fresh database with the kv table (base, direct)
// and a single-connection handle on it through a cutter.
func throughCutter(t *testing.T) (base, db *store.DB, cut *cutter) {
	t.Helper()
	base = testkit.DB(t)
	table(t, base)
	addr := pgtest.Addr(t)
	cut = newCutter(t, addr)
	db, err := store.OpenWith(context.Background(), strings.Replace(base.URL, addr, cut.l.Addr().String(), 1), store.Options{MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return base, db, cut
}

// A session that ends after PostgreSQL confirmed the pipeline's COMMIT
// (the termination reported when the backend reads the Sync behind it)
// has committed: Tx says so, and the pool goes on with a new session.
// Found by terminating backends under load: such mutations were answered
// UNAVAILABLE, though committed.
func TestCommitConfirmedThenSessionLost(t *testing.T) {
	t.Parallel()
	base, db, cut := throughCutter(t)
	ctx := context.Background()
	commit := "COMMIT"
	var told []string
	db.Committed = func(_ context.Context, tenants []string, _ time.Duration) { told = append(told, tenants...) }
	if err := db.Tx(ctx, func(tx *sqlx.Tx) error {
		if _, err := tx.Exec(`INSERT INTO kv VALUES ('a', 1, NULL)`); err != nil {
			return err
		}
		if err := store.ExecAtCommit(ctx, tx, `INSERT INTO kv VALUES ('b', 1, NULL)`); err != nil {
			return err
		}
		store.NoteEvents(ctx, tx, "t1")
		cut.armed.Store(&commit)
		return nil
	}); err != nil {
		t.Fatalf("a confirmed commit is reported as %v", err)
	}
	if cut.cuts.Load() != 1 || keys(t, base) != "a,b" || strings.Join(told, ",") != "t1" {
		t.Fatalf("%d cuts, rows %q, told %v", cut.cuts.Load(), keys(t, base), told)
	}
	usable(t, db, base, "c", "a,b,c")
}

// A transaction whose pooled session was terminated while idle (a
// restarted or failed-over database, an administrator's
// pg_terminate_backend) learns it from the first thing it sends; nothing
// of it ran, so Tx runs it again on a new session instead of failing the
// request. Both first sends: a statement (its BEGIN) and a commit's
// pipeline of deferred statements only. A read over the pool (EachRow, as
// every request's authentication reads its token) runs again likewise.
func TestTerminatedIdleSessionIsRetried(t *testing.T) {
	t.Parallel()
	db := single(t)
	ctx := context.Background()
	for _, how := range []string{"statement", "deferred", "read"} {
		var pid int
		if err := db.Get(&pid, `SELECT pg_backend_pid()`); err != nil {
			t.Fatal(err)
		}
		used := time.Now()
		// Another connection of the same database terminates it.
		other, err := store.Open(ctx, db.URL)
		if err != nil {
			t.Fatal(err)
		}
		var gone bool
		if err := other.Get(&gone, `SELECT pg_terminate_backend($1)`, pid); err != nil || !gone {
			t.Fatalf("terminate %d: %v %v", pid, gone, err)
		}
		for n := 1; n > 0; {
			if err := other.Get(&n, `SELECT count(*) FROM pg_stat_activity WHERE pid = $1`, pid); err != nil {
				t.Fatal(err)
			}
		}
		other.Close()
		k := "k-" + how
		attempts := 0
		if how == "read" {
			c, cctx := counted()
			err = store.EachRow(cctx, db, `SELECT k FROM kv ORDER BY k`, nil, func(scan func(dest ...any) error) error {
				var s string
				return scan(&s)
			})
			attempts = int(c.N())
		} else {
			err = db.Tx(ctx, func(tx *sqlx.Tx) error {
				attempts++
				if how == "deferred" {
					return store.ExecAtCommit(ctx, tx, `INSERT INTO kv VALUES ($1, 1, NULL)`, k)
				}
				_, err := tx.Exec(`INSERT INTO kv VALUES ($1, 1, NULL)`, k)
				return err
			})
		}
		if err != nil {
			t.Fatalf("%s: %v", how, err)
		}
		var n int
		if err := db.Get(&n, `SELECT count(*) FROM kv WHERE k = $1`, k); err != nil || n != map[bool]int{true: 0, false: 1}[how == "read"] {
			t.Fatalf("%s: %d rows, %v", how, n, err)
		}
		// database/sql pings a session idle for over a second before
		// lending it, which would find it gone first.
		if time.Since(used) < 900*time.Millisecond && attempts != 2 {
			t.Fatalf("%s: %d attempts, want the failed one and its retry", how, attempts)
		}
		t.Logf("%s: %d attempts", how, attempts)
	}
}

// A restarted database leaves every pooled session gone, each recently
// used (so database/sql lends it without a ping): a transaction and a read
// go through every one of them, discarding each, to a new session (a fixed
// number of attempts, three for a read, failed a request now and then); a
// statement outside a transaction goes to a new session at its third
// attempt (database/sql's retry of driver.ErrBadConn, which a statement
// PostgreSQL answered with the end of its session now is).
func TestEveryPooledSessionGone(t *testing.T) {
	t.Parallel()
	base := testkit.DB(t)
	table(t, base)
	const size = 8
	db, err := store.OpenWith(context.Background(), base.URL, store.Options{MaxConns: size})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	for _, how := range []string{"transaction", "read", "statement"} {
		var pids []int
		// Twice: a session lent for the first time is pinged (pgx's
		// stdlib pings one not reset for a second), the second time not.
		for range 2 {
			var conns []*sql.Conn
			pids = nil
			for range size {
				c, err := db.Conn(ctx)
				if err != nil {
					t.Fatal(err)
				}
				var pid int
				if err := c.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
					t.Fatal(err)
				}
				conns, pids = append(conns, c), append(pids, pid)
			}
			for _, c := range conns {
				c.Close()
			}
		}
		used := time.Now()
		var n int
		if err := base.Get(&n, `SELECT count(pg_terminate_backend(pid)) FROM unnest($1::int[]) AS pid`, pids); err != nil || n != size {
			t.Fatalf("terminated %d: %v", n, err)
		}
		for n > 0 {
			if err := base.Get(&n, `SELECT count(*) FROM pg_stat_activity WHERE pid = ANY($1)`, pids); err != nil {
				t.Fatal(err)
			}
		}
		c, cctx := counted()
		switch how {
		case "read":
			err = store.EachRow(cctx, db, `SELECT k FROM kv`, nil, func(scan func(dest ...any) error) error { return nil })
		case "statement":
			// database/sql's own retry: twice on a pooled session, then
			// on a new one.
			_, err = db.ExecContext(cctx, `INSERT INTO kv VALUES ($1, 1, NULL)`, how)
		default:
			err = db.Tx(cctx, func(tx *sqlx.Tx) error {
				_, err := tx.Exec(`INSERT INTO kv VALUES ($1, 1, NULL)`, how)
				return err
			})
		}
		if err != nil {
			t.Fatalf("%s after every session went: %v", how, err)
		}
		if time.Since(used) < 900*time.Millisecond && c.N() < min(size, map[bool]int64{true: 3, false: size}[how == "statement"]) {
			t.Fatalf("%s: %d statements sent: the gone sessions were not all met (database/sql pinged them?)", how, c.N())
		}
		t.Logf("%s: %d statements", how, c.N())
	}
}

// A client that goes away while its transaction commits does not interrupt
// the commit: the change and its answer agree (committed, Tx says so),
// where an interrupted commit may or may not have happened. Found by
// cancelling requests under load: a request could be audited both as a
// success and as a failure.
func TestCommitOutlivesItsClient(t *testing.T) {
	t.Parallel()
	base, db, slow := throughCutter(t)
	slow.hold = 300 * time.Millisecond
	for _, immediate := range []bool{false, true} {
		ctx, cancel := context.WithCancel(context.Background())
		// The client goes away while its commit's answer is held back.
		slow.onHold.Store((*func())(&cancel))
		k := fmt.Sprint("k-", immediate)
		insert := "INSERT 0 1"
		err := db.Tx(ctx, func(tx *sqlx.Tx) error {
			if immediate {
				if _, err := tx.Exec(`INSERT INTO kv VALUES ($1 || '-first', 1, NULL)`, k); err != nil {
					return err
				}
			}
			if err := store.ExecAtCommit(ctx, tx, `INSERT INTO kv VALUES ($1, 1, NULL)`, k); err != nil {
				return err
			}
			slow.armed.Store(&insert) // the commit's answer comes 300 ms late
			return nil
		})
		cancel()
		var n int
		if err := base.Get(&n, `SELECT count(*) FROM kv WHERE k = $1`, k); err != nil {
			t.Fatal(err)
		}
		if err != nil || n != 1 {
			t.Fatalf("immediate %v: Tx says %v, %d rows", immediate, err, n)
		}
	}
}
