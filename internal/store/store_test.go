package store_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jmoiron/sqlx"

	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/reqctx"
	"github.com/bettercompute/computed/internal/store"
	"github.com/bettercompute/computed/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

func table(t *testing.T, db *store.DB) {
	t.Helper()
	if _, err := db.Exec(`CREATE TABLE kv (k text PRIMARY KEY, v int NOT NULL CHECK (v >= 0), ref text REFERENCES tenants (tenant_id))`); err != nil {
		t.Fatal(err)
	}
}

func TestTxCommitsOrRollsBack(t *testing.T) {
	t.Parallel()
	db := testkit.DB(t)
	table(t, db)
	ctx := context.Background()
	boom := errs.E(errs.Conflict, "no")
	err := db.Tx(ctx, func(tx *sqlx.Tx) error {
		if _, err := tx.Exec(`INSERT INTO kv VALUES ('a', 1, NULL)`); err != nil {
			return err
		}
		return boom
	})
	if err != boom {
		t.Fatalf("fn's error is returned as it is: %v", err)
	}
	if err := db.Tx(ctx, func(tx *sqlx.Tx) error { _, err := tx.Exec(`INSERT INTO kv VALUES ('b', 1, NULL)`); return err }); err != nil {
		t.Fatal(err)
	}
	var keys []string
	if err := db.Select(&keys, `SELECT k FROM kv ORDER BY k`); err != nil || fmt.Sprint(keys) != "[b]" {
		t.Fatalf("committed %v, %v", keys, err)
	}
}

// Two transactions that lock two rows in opposite orders deadlock; the
// database aborts one, and Tx runs its function again from the start, so
// both commit.
func TestTxRetriesADeadlock(t *testing.T) {
	t.Parallel()
	db := testkit.DB(t)
	table(t, db)
	if _, err := db.Exec(`INSERT INTO kv VALUES ('a', 0, NULL), ('b', 0, NULL)`); err != nil {
		t.Fatal(err)
	}
	var attempts atomic.Int32
	var both sync.WaitGroup
	both.Add(2)
	var wg sync.WaitGroup
	res := make([]error, 2)
	for i, order := range [][2]string{{"a", "b"}, {"b", "a"}} {
		wg.Add(1)
		go func(i int, order [2]string) {
			defer wg.Done()
			first := true
			res[i] = db.Tx(context.Background(), func(tx *sqlx.Tx) error {
				attempts.Add(1)
				if _, err := tx.Exec(`UPDATE kv SET v = v + 1 WHERE k = $1`, order[0]); err != nil {
					return err
				}
				if first {
					// Both hold their first row before either asks for its second.
					first = false
					both.Done()
					both.Wait()
				}
				if _, err := tx.Exec(`UPDATE kv SET v = v + 1 WHERE k = $1`, order[1]); err != nil {
					return err
				}
				// A statement deferred to the commit is sent once, by the
				// attempt that commits (twice would be a duplicate key).
				return store.ExecAtCommit(context.Background(), tx, `INSERT INTO kv VALUES ($1, 1, NULL)`, "done-"+order[0])
			})
		}(i, order)
	}
	wg.Wait()
	for _, err := range res {
		if err != nil {
			t.Fatalf("a transaction failed: %v", err)
		}
	}
	var sum int
	if err := db.Get(&sum, `SELECT sum(v) FROM kv WHERE k IN ('a', 'b')`); err != nil || sum != 4 {
		t.Fatalf("sum %d, %v: each transaction's two updates commit once", sum, err)
	}
	var done int
	if err := db.Get(&done, `SELECT count(*) FROM kv WHERE k LIKE 'done-%'`); err != nil || done != 2 {
		t.Fatalf("%d deferred rows, %v", done, err)
	}
	if attempts.Load() < 3 {
		t.Fatalf("%d attempts: no deadlock was retried", attempts.Load())
	}
}

// Classify maps what the database says to the contract's codes.
func TestClassify(t *testing.T) {
	t.Parallel()
	db := testkit.DB(t)
	table(t, db)
	ctx := context.Background()
	exec := func(q string) error { _, err := db.ExecContext(ctx, q); return err }
	if err := exec(`INSERT INTO kv VALUES ('a', 1, NULL)`); err != nil {
		t.Fatal(err)
	}
	dup := exec(`INSERT INTO kv VALUES ('a', 1, NULL)`)
	if !store.IsUnique(dup, "") || !store.IsUnique(dup, "kv_pkey") || store.IsUnique(dup, "other") || store.IsForeignKey(dup) {
		t.Fatalf("unique: %v", dup)
	}
	fk := exec(`INSERT INTO kv VALUES ('b', 1, 'nosuch')`)
	if !store.IsForeignKey(fk) || store.IsUnique(fk, "") {
		t.Fatalf("foreign key: %v", fk)
	}
	timeout := db.Tx(ctx, func(tx *sqlx.Tx) error {
		if _, err := tx.Exec(`SET LOCAL statement_timeout = 10`); err != nil {
			return err
		}
		_, err := tx.Exec(`SELECT pg_sleep(1)`)
		return err
	})
	readOnly := db.Tx(ctx, func(tx *sqlx.Tx) error {
		if _, err := tx.Exec(`SET TRANSACTION READ ONLY`); err != nil {
			return err
		}
		_, err := tx.Exec(`INSERT INTO kv VALUES ('r', 1, NULL)`)
		return err
	})
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	for _, c := range []struct {
		name string
		err  error
		code errs.Code
	}{
		{"unique", dup, errs.Conflict},
		{"foreign key", fk, errs.NotFound},
		{"check", exec(`INSERT INTO kv VALUES ('c', -1, NULL)`), errs.InvalidInput},
		{"not null", exec(`INSERT INTO kv VALUES ('c', NULL, NULL)`), errs.InvalidInput},
		{"bad text", exec(`SELECT 'x'::int`), errs.InvalidInput},
		{"statement timeout", timeout, errs.Unavailable},
		{"cancelled", db.QueryRowContext(cctx, `SELECT 1`).Scan(new(int)), errs.Unavailable},
		{"a domain error", errs.E(errs.InvalidState, "x"), errs.InvalidState},
		// a database that takes no writes (a primary become a standby), a
		// full disk, a connection that ended mid-statement: 503, not 500
		{"read-only", readOnly, errs.Unavailable},
		{"disk full", &pgconn.PgError{Code: "53100"}, errs.Unavailable},
		{"out of memory", fmt.Errorf("query: %w", &pgconn.PgError{Code: "53200"}), errs.Unavailable},
		{"I/O error", &pgconn.PgError{Code: "58030"}, errs.Unavailable},
		{"a connection ended mid-statement", fmt.Errorf("receive message: %w", io.ErrUnexpectedEOF), errs.Unavailable},
	} {
		got := store.Classify(c.err)
		if got == nil || got.Code != c.code {
			t.Fatalf("%s (%v): classified %v, want %s", c.name, c.err, got, c.code)
		}
	}
	if got := store.Classify(exec(`SELECT * FROM no_such_table`)); got != nil {
		t.Fatalf("a bug is no contract error: %v", got)
	}
	if store.Classify(nil) != nil || store.Wrap(nil) != nil {
		t.Fatal("nil")
	}
}

// A database that cannot be reached, or that ended the session, is
// UNAVAILABLE, never INTERNAL.
func TestUnreachable(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := store.Open(ctx, "postgres://nobody@127.0.0.1:1/none?sslmode=disable&connect_timeout=1")
	if err == nil || !store.Unreachable(err) || store.Classify(err).Code != errs.Unavailable {
		t.Fatalf("no server on the port: %v", err)
	}
	db := testkit.DB(t)
	err = db.Tx(ctx, func(tx *sqlx.Tx) error {
		if _, err := tx.Exec(`SELECT pg_terminate_backend(pg_backend_pid())`); err != nil {
			return err
		}
		_, err := tx.Exec(`SELECT 1`)
		return err
	})
	if err == nil || !store.Unreachable(err) || store.Classify(err).Code != errs.Unavailable {
		t.Fatalf("a terminated session: %v (classified %v)", err, store.Classify(err))
	}
	// The pool recovers with a new session.
	var one int
	if err := db.Get(&one, `SELECT 1`); err != nil || one != 1 {
		t.Fatalf("after the termination: %v", err)
	}
}

// CountBy counts by key (keys without rows are absent: zero); EachRow reads
// the same rows over the pool (pgx directly) and in a transaction.
func TestCountByAndEachRow(t *testing.T) {
	t.Parallel()
	db := testkit.DB(t)
	table(t, db)
	ctx := context.Background()
	if _, err := db.Exec(`INSERT INTO kv VALUES ('a', 1, NULL), ('b', 2, NULL), ('c', 2, NULL)`); err != nil {
		t.Fatal(err)
	}
	counts, err := store.CountBy(ctx, db, `SELECT v::text AS k, count(*) AS n FROM kv WHERE v::text = ANY($1) GROUP BY v`, []string{"1", "2", "9"})
	if err != nil || counts["1"] != 1 || counts["2"] != 2 || len(counts) != 2 {
		t.Fatalf("counts %v, %v", counts, err)
	}
	read := func(q store.Q) string {
		var out []string
		err := store.EachRow(ctx, q, `SELECT k, v FROM kv WHERE v >= $1 ORDER BY k`, []any{2}, func(scan func(dest ...any) error) error {
			var k string
			var v int
			if err := scan(&k, &v); err != nil {
				return err
			}
			out = append(out, fmt.Sprint(k, v))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprint(out)
	}
	var inTx string
	if err := db.Tx(ctx, func(tx *sqlx.Tx) error { inTx = read(tx); return nil }); err != nil {
		t.Fatal(err)
	}
	if pool := read(db); pool != "[b2 c2]" || inTx != pool {
		t.Fatalf("over the pool %s, in a transaction %s", pool, inTx)
	}
	// A row function's error ends the read with it.
	stop := errors.New("stop")
	if err := store.EachRow(ctx, db, `SELECT k FROM kv`, nil, func(func(...any) error) error { return stop }); err != stop {
		t.Fatalf("row error: %v", err)
	}
}

// TestCommittedIsToldHowLongTheCommitTook: the duration Committed is told
// covers what ran with the COMMIT (ExecAtCommit's statements), from before
// the first was sent: package events reads a tenant's whole inbox after a
// commit at least that long.
func TestCommittedIsToldHowLongTheCommitTook(t *testing.T) {
	t.Parallel()
	db := testkit.DB(t)
	var took []time.Duration
	db.Committed = func(_ context.Context, _ []string, d time.Duration) { took = append(took, d) }
	ctx := context.Background()
	for _, sleep := range []float64{0, 0.3} {
		if err := db.Tx(ctx, func(tx *sqlx.Tx) error {
			if _, err := tx.Exec(`SELECT 1`); err != nil {
				return err
			}
			time.Sleep(time.Second) // before the commit: not counted
			store.NoteEvents(ctx, tx, "t1")
			return store.ExecAtCommit(ctx, tx, `SELECT pg_sleep($1)`, sleep)
		}); err != nil {
			t.Fatal(err)
		}
	}
	if len(took) != 2 || took[0] >= time.Second || took[1] < 300*time.Millisecond {
		t.Fatalf("told %v: want under 1s, then at least 300ms", took)
	}
	// A statement on the handle itself: not known.
	took = nil
	store.NoteEvents(ctx, db, "t1")
	if len(took) != 1 || took[0] >= 0 {
		t.Fatalf("told %v for a statement of its own: want a negative duration", took)
	}
}

// OnAuthorityChanged's functions hear of a transaction that noted a change
// of authority once it has committed, on the committing goroutine, and not
// of one that rolled back; a note on the handle itself is heard at once.
func TestAuthorityChangesAreToldAfterCommit(t *testing.T) {
	t.Parallel()
	db := testkit.DB(t)
	table(t, db)
	var told []int
	db.OnAuthorityChanged(func() {
		var n int
		if err := db.Get(&n, `SELECT count(*) FROM kv`); err != nil {
			t.Error(err)
		}
		told = append(told, n) // what a sweep run now would see
	})
	ctx := context.Background()
	write := func(k string, fail bool) error {
		return db.Tx(ctx, func(tx *sqlx.Tx) error {
			if _, err := tx.Exec(`INSERT INTO kv VALUES ($1, 1, NULL)`, k); err != nil {
				return err
			}
			store.NoteAuthority(tx)
			if fail {
				return errs.E(errs.Conflict, "no")
			}
			return nil
		})
	}
	if err := write("a", true); err == nil {
		t.Fatal("the failing transaction committed")
	}
	if len(told) != 0 {
		t.Fatalf("told of a transaction that rolled back: %v", told)
	}
	if err := write("b", false); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(told) != "[1]" {
		t.Fatalf("told %v: want once, after the commit (1 row visible)", told)
	}
	store.NoteAuthority(db)
	if fmt.Sprint(told) != "[1 1]" {
		t.Fatalf("told %v after a note on the handle itself", told)
	}
}

// A savepoint's failure undoes what its function wrote, a failed
// statement included, and drops what it deferred to the commit and the
// tenants it noted, while what the transaction wrote before stands and
// commits (nodes.join keeps a TPM challenge spent this way when the join
// after the proof is refused).
func TestSavepoint(t *testing.T) {
	t.Parallel()
	db := testkit.DB(t)
	table(t, db)
	var told [][]string
	db.Committed = func(_ context.Context, tenants []string, _ time.Duration) { told = append(told, tenants) }
	ctx := context.Background()
	refused := errs.E(errs.Conflict, "refused")
	if err := db.Tx(ctx, func(tx *sqlx.Tx) error {
		if _, err := tx.Exec(`INSERT INTO kv VALUES ('kept', 1, NULL)`); err != nil {
			return err
		}
		store.NoteEvents(ctx, tx, "acme")
		err := store.Savepoint(ctx, tx, func() error {
			if _, err := tx.Exec(`INSERT INTO kv VALUES ('undone', 1, NULL)`); err != nil {
				return err
			}
			if err := store.ExecAtCommit(ctx, tx, `INSERT INTO kv VALUES ('deferred', 1, NULL)`); err != nil {
				return err
			}
			store.NoteEvents(ctx, tx, "beta")
			if _, err := tx.Exec(`INSERT INTO kv VALUES ('bad', -1, NULL)`); err == nil {
				return errors.New("the check let -1 in")
			}
			return refused
		})
		if err != refused {
			return fmt.Errorf("the savepoint answered %v", err)
		}
		// The transaction goes on after the failed statement.
		_, err = tx.Exec(`INSERT INTO kv VALUES ('after', 1, NULL)`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var keys []string
	if err := db.Select(&keys, `SELECT k FROM kv ORDER BY k`); err != nil || fmt.Sprint(keys) != "[after kept]" {
		t.Fatalf("committed %v, %v", keys, err)
	}
	if fmt.Sprint(told) != "[[acme]]" {
		t.Fatalf("told of %v", told)
	}
	// A savepoint that succeeds keeps all.
	if err := db.Tx(ctx, func(tx *sqlx.Tx) error {
		return store.Savepoint(ctx, tx, func() error {
			return store.ExecAtCommit(ctx, tx, `INSERT INTO kv VALUES ('later', 1, NULL)`)
		})
	}); err != nil {
		t.Fatal(err)
	}
	if err := db.Select(&keys, `SELECT k FROM kv ORDER BY k`); err != nil || fmt.Sprint(keys) != "[after kept later]" {
		t.Fatalf("committed %v, %v", keys, err)
	}
}

// A statement whose context ends (its client went away) leaves its pooled
// connection alive: pgx's default closed it, and a client cancelling a
// subscription a millisecond after starting it, 175 times a second, cost
// the pool a connection each (PostgreSQL's sessions_abandoned).
func TestCancelledStatementsKeepTheirConnections(t *testing.T) {
	t.Parallel()
	db := testkit.DB(t)
	ctx := context.Background()
	abandoned := func() int64 {
		var n int64
		if _, err := db.ExecContext(ctx, `SELECT pg_stat_clear_snapshot()`); err != nil {
			t.Fatal(err)
		}
		if err := db.GetContext(ctx, &n, `SELECT sessions_abandoned + sessions_killed FROM pg_stat_database WHERE datname = current_database()`); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := abandoned()
	for i := 0; i < 40; i++ {
		cctx, cancel := context.WithCancel(ctx)
		go func() { time.Sleep(2 * time.Millisecond); cancel() }()
		var x int
		err := db.GetContext(cctx, &x, `SELECT 1 FROM pg_sleep(0.02)`)
		cancel()
		if err == nil {
			continue // it finished first
		}
		if !errors.Is(err, context.Canceled) && store.Classify(err) == nil {
			t.Fatalf("a cancelled statement: %v", err)
		}
	}
	// a backend's end is counted when it has exited
	time.Sleep(300 * time.Millisecond)
	if n := abandoned() - before; n != 0 {
		t.Fatalf("%d sessions lost their client for 40 cancelled statements", n)
	}
	var one int
	if err := db.GetContext(ctx, &one, `SELECT 1`); err != nil || one != 1 {
		t.Fatalf("the pool after the cancellations: %v", err)
	}
}

// A request's statements run at most RequestStatementsAtOnce at once
// (one GraphQL operation of 90 aliased counts took every connection of
// its replica); a transaction holds its place for its whole length; work
// without a gate (the replica's own) is not bounded so.
func TestARequestsStatementsAreGated(t *testing.T) {
	t.Parallel()
	d := testkit.DB(t)
	running := func(ctx context.Context, n int) int {
		t.Helper()
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var err error
				switch i % 4 {
				case 0:
					err = d.Tx(ctx, func(tx *sqlx.Tx) error {
						_, err := tx.ExecContext(ctx, `SELECT pg_sleep(0.4), 'gated'`)
						return err
					})
				case 1:
					err = store.EachRow(ctx, d, `SELECT 'gated' FROM pg_sleep(0.4)`, nil, func(func(...any) error) error { return nil })
				case 2:
					var x []sized
					err = store.SelectSpending(ctx, d, &x, `SELECT 'gated' AS s FROM pg_sleep(0.4)`)
				default:
					var x []string
					err = d.SelectContext(ctx, &x, `SELECT 'gated' FROM pg_sleep(0.4)`)
				}
				if err != nil {
					t.Error(err)
				}
			}()
		}
		// Sampled until every statement has ended (a window of fixed
		// length missed them on a loaded machine, where they started late).
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		most := 0
		for {
			var k int
			if err := d.DB.DB.QueryRow(`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND state = 'active' AND query LIKE '%''gated''%' AND pid <> pg_backend_pid()`).Scan(&k); err != nil {
				t.Fatal(err)
			}
			most = max(most, k)
			select {
			case <-done:
				return most
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	if most := running(store.ForRequest(context.Background()), 9); most != store.RequestStatementsAtOnce {
		t.Errorf("a request ran %d statements at once, want %d", most, store.RequestStatementsAtOnce)
	}
	if most := running(context.Background(), 6); most <= store.RequestStatementsAtOnce {
		t.Errorf("background work ran %d statements at once: gated", most)
	}
}

// The pool's connections are shared among tenants: requests of one
// credential, each within its own gate, took every connection of the
// replica (256 event streams replaying, a flood of heavy queries), and
// another tenant's statements waited their turn among all of theirs.
// Past half the pool, a tenant's statement starts only while no other
// tenant's waits, and one tenant never holds the last connection: with the
// pool full of one tenant's statements (40 tokens of it) and eight times as
// many waiting, another tenant's three statements, one after the other,
// each start at once or in the next round of freed connections.
func TestRequestStatementsAreSharedAmongTenants(t *testing.T) {
	t.Parallel()
	d := testkit.DB(t)
	var mu sync.Mutex
	var started []string
	hook := func(sql string) {
		if i := strings.Index(sql, "'fair-"); i >= 0 {
			mu.Lock()
			started = append(started, sql[i+6:i+7])
			mu.Unlock()
		}
	}
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(started) }
	request := func(tenant, token string) context.Context {
		ctx := store.ForRequest(reqctx.WithPrincipal(context.Background(), &reqctx.Principal{TenantID: tenant, TokenID: token}))
		return store.WithCounter(ctx, &store.Counter{Hook: hook})
	}
	sleep := func(ctx context.Context, key string) {
		if _, err := d.ExecContext(ctx, `SELECT pg_sleep(0.2), 'fair-`+key+`'`); err != nil {
			t.Error(err)
		}
	}
	var wg sync.WaitGroup
	pool := d.Stats().MaxOpenConnections
	for i := range 9 * pool {
		wg.Add(1)
		go func() { defer wg.Done(); sleep(request("acme", fmt.Sprint("tok_a", i%40)), "a") }()
	}
	for count() < pool-1 {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // a's others are queued by now
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range 3 {
			sleep(request("beta", "tok_b"), "b")
		}
	}()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	all := strings.Join(started, "")
	if third := strings.LastIndex(all, "b"); strings.Count(all, "b") != 3 || third >= 4*pool {
		t.Fatalf("b's third statement started %dth of %d (the pool holds %d): %s", third+1, len(all), pool, all)
	}
}

// sized is a row SelectSpending reads.
type sized struct {
	S string `db:"s"`
}

func (s *sized) ReadSize() int { return len(s.S) }
