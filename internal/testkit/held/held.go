// Package held runs a call while another transaction holds a change open:
// the way to show that a call decides on what the change leaves once it
// commits, rather than on what the call read while the change was still
// running.
package held

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
)

// DB is what While needs of a handle (store.DB has it).
type DB interface {
	BeginTxx(ctx context.Context, opts *sql.TxOptions) (*sqlx.Tx, error)
	Get(dest any, query string, args ...any) error
}

// While runs change in a transaction, then act in a goroutine, which must
// come to wait for a lock of the change's (a session of the database
// waiting on a lock, in pg_stat_activity); then it commits the change and
// returns act's error. A call that finishes without waiting fails the
// test: it decided while the change was open.
func While(t testing.TB, db DB, change func(tx *sqlx.Tx) error, act func() error) error {
	t.Helper()
	return WhileWaiting(t, db, 1, change, act)
}

// WhileWaiting is While committing the change once n sessions wait for a
// lock (act starts n calls that must all queue behind the change).
func WhileWaiting(t testing.TB, db DB, n int, change func(tx *sqlx.Tx) error, act func() error) error {
	t.Helper()
	return Meanwhile(t, db, n, change, act, nil)
}

// Meanwhile is WhileWaiting running between, when given, once the n
// sessions wait and before the change commits: what happens while a call
// is queued behind a change (a revocation of its credential, say).
func Meanwhile(t testing.TB, db DB, n int, change func(tx *sqlx.Tx) error, act func() error, between func()) error {
	t.Helper()
	tx, err := db.BeginTxx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback() //nolint:errcheck // committed below
	if err := change(tx); err != nil {
		t.Fatalf("the change: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- act() }()
	waiting := func() bool {
		var w int
		_ = db.Get(&w, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`)
		return w >= n
	}
	for deadline := time.Now().Add(10 * time.Second); !waiting(); time.Sleep(5 * time.Millisecond) {
		select {
		case err := <-done:
			t.Fatalf("the call did not wait for the change's locks (it answered %v)", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the call never waited for the change's locks")
		}
	}
	if between != nil {
		between()
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	return <-done
}
