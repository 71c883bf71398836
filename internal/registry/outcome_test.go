package registry

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/bettercompute/computed/internal/audit"
	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/store"
)

// An audit record's outcome is the code the client was answered: a request
// the client abandoned was answered UNAVAILABLE and was recorded INTERNAL,
// a unique violation answered CONFLICT was recorded INTERNAL.
func TestOutcomeIsTheClientsCode(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{nil, audit.Success},
		{errs.E(errs.Conflict, "taken"), string(errs.Conflict)},
		{fmt.Errorf("commit: %w", context.Canceled), string(errs.Unavailable)},
		{context.DeadlineExceeded, string(errs.Unavailable)},
		{&pgconn.PgError{Code: "23505"}, string(errs.Conflict)},
		{&pgconn.PgError{Code: "57P01"}, string(errs.Unavailable)},
		{errors.New("a bug"), string(errs.Internal)},
	} {
		if got := outcome(context.Background(), c.err); got != c.want {
			t.Errorf("%v: %s, want %s", c.err, got, c.want)
		}
	}
	// A call whose client went away: the connection its cancellation
	// closed fails the next statement with driver.ErrBadConn, which was
	// recorded as an unreachable database (and not at all).
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	if got := outcome(gone, driver.ErrBadConn); got != string(errs.Unavailable) {
		t.Errorf("bad connection after a cancellation: %s", got)
	}
	if got := outcome(gone, errs.E(errs.NotFound, "no")); got != string(errs.NotFound) {
		t.Errorf("a domain error stays: %s", got)
	}
	if !store.Cancelled(gone, driver.ErrBadConn) || store.Cancelled(context.Background(), driver.ErrBadConn) {
		t.Error("Cancelled")
	}
}
