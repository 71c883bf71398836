package instances

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/ids"
	"github.com/bettercompute/computed/internal/instances/fit"
	"github.com/bettercompute/computed/internal/pools"
	"github.com/bettercompute/computed/internal/testkit/held"
	"github.com/bettercompute/computed/internal/testkit/storm"
)

// Placements and reservations decide on the pool as it is once they hold
// its lock, not as they read it before waiting for it: an owner's change
// of the pool (archive, capacity, unoffer) holds the pool's row while the
// call reads, and commits while the call waits. Each case holds the change
// in an open transaction, starts the call, waits until the call waits for
// a lock, then commits the change (a probe's reservations were made in an
// archived pool and past a lowered capacity, placements went past it, and
// a reservation racing an unoffer answered INTERNAL).

// whileChanged runs the statements of a change in a transaction held open
// until act waits for its locks (held.While).
func (r *rig) whileChanged(change []string, args []any, act func() error) error {
	r.t.Helper()
	return held.While(r.t, r.db, func(tx *sqlx.Tx) error {
		for _, stmt := range change {
			if _, err := tx.Exec(stmt, args...); err != nil {
				return err
			}
		}
		return nil
	}, act)
}

func (r *rig) reserve(tenant, pool string, gpus int) error {
	in := &ReservationCreateInput{TenantID: tenant, PoolID: pool, Size: fit.Resources{GPUs: gpus},
		StartsAt: time.Now().Add(time.Hour).UTC().Format(time.RFC3339), EndsAt: time.Now().Add(2 * time.Hour).UTC().Format(time.RFC3339)}
	return r.db.Tx(r.ctx, func(tx *sqlx.Tx) error {
		_, err := CreateReservation(r.ctx, tx, in)
		return err
	})
}

func TestReservationsDecideOnThePoolAsItIs(t *testing.T) {
	r := newRig(t)
	r.exec(`INSERT INTO tenants (tenant_id, name) VALUES ('beta', 'Beta')`)

	t.Run("archived while waiting", func(t *testing.T) {
		pool := r.pool("vps-provider", "sim", instant)
		err := r.whileChanged([]string{`UPDATE pools SET state = 'archived' WHERE pool_id = $1`}, []any{pool},
			func() error { return r.reserve("acme", pool, 1) })
		if e, ok := errs.As(err); !ok || e.Code != errs.InvalidState || e.Details["reason"] != "archived" {
			t.Fatalf("a reservation in a pool archived while it waited: %v", err)
		}
	})
	t.Run("capacity lowered while waiting", func(t *testing.T) {
		pool := r.pool("vps-provider", "sim", `{"capacity": {"gpus": 2}, "sim": {"latencyMs": 0}}`)
		if err := r.reserve("acme", pool, 1); err != nil {
			t.Fatal(err)
		}
		err := r.whileChanged([]string{`UPDATE pools SET policy = '{"capacity": {"gpus": 1}, "sim": {"latencyMs": 0}}' WHERE pool_id = $1`}, []any{pool},
			func() error { return r.reserve("acme", pool, 1) })
		if e, ok := errs.As(err); !ok || e.Code != errs.InvalidState || e.Details["reason"] != "capacity" {
			t.Fatalf("a reservation past a capacity lowered while it waited: %v", err)
		}
	})
	t.Run("unoffered while waiting", func(t *testing.T) {
		pool := r.pool("vps-provider", "sim", instant)
		r.exec(`INSERT INTO pool_offers (pool_id, to_tenant_id, quota_gpus, quota_instances) VALUES ($1, 'beta', 4, 4)`, pool)
		// As pools.unoffer: the pool's row locked, then the offer deleted.
		err := r.whileChanged([]string{`SELECT 1 FROM pools WHERE pool_id = $1 FOR UPDATE`, `DELETE FROM pool_offers WHERE pool_id = $1`}, []any{pool},
			func() error { return r.reserve("beta", pool, 1) })
		if e, ok := errs.As(err); !ok || e.Code != errs.NotFound {
			t.Fatalf("a reservation in a pool unoffered while it waited: %v", err)
		}
	})
}

// The reconciler's placement decides on the pool's capacity as it is once
// it holds the pool: lowered while the step waited, or set on a pool that
// had none (whose placements take a share lock).
func TestPlacementDecidesOnThePoolAsItIs(t *testing.T) {
	r := newRig(t)
	for name, before := range map[string]string{
		"capacity lowered": `{"capacity": {"gpus": 2}, "sim": {"latencyMs": 0}}`,
		"capacity set":     instant,
	} {
		t.Run(name, func(t *testing.T) {
			pool := r.pool("vps-provider", "sim", before)
			first := r.instance(pool, Running)
			r.converge(first, Provisioning, Running)
			second := r.instance(pool, Running)
			err := r.whileChanged([]string{`UPDATE pools SET policy = '{"capacity": {"gpus": 1}, "sim": {"latencyMs": 0}}' WHERE pool_id = $1`}, []any{pool},
				func() error {
					return r.db.Tx(r.ctx, func(tx *sqlx.Tx) error {
						_, err := r.s.stepTx(r.ctx, tx, second, nil)
						return err
					})
				})
			if err != nil {
				t.Fatal(err)
			}
			if i := r.get(second); i.State != Pending || !strings.HasPrefix(deref(i.StateReason), "waiting for capacity") {
				t.Fatalf("placed past a capacity of 1 GPU set while the step waited (1 GPU held): %s %q", i.State, deref(i.StateReason))
			}
			// The next step decides under the capacity, and waits.
			if res := r.step(second); res.outcome != wait || r.get(second).State != Pending {
				t.Fatalf("the next step: outcome %d, %s", res.outcome, r.get(second).State)
			}
		})
	}
}

// A cancel that waited while the reservation's window ended decides on the
// clock once it holds the reservation, not on its transaction's start: it
// is INVALID_STATE expired once the expiry was announced, not canceled
// after it (a probe's suspicion; the transaction here begins before the
// end and reads after the announcement).
func TestCancelAfterTheExpiryIsExpired(t *testing.T) {
	r := newRig(t)
	pool := r.pool("vps-provider", "sim", instant)
	end := time.Now().Add(300 * time.Millisecond)
	var res *Reservation
	if err := r.db.Tx(r.ctx, func(tx *sqlx.Tx) (err error) {
		res, err = CreateReservation(r.ctx, tx, &ReservationCreateInput{TenantID: "acme", PoolID: pool, Size: fit.Resources{GPUs: 1},
			StartsAt: time.Now().Add(-time.Minute).UTC().Format(time.RFC3339Nano), EndsAt: end.UTC().Format(time.RFC3339Nano)})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	tx, err := r.db.BeginTxx(r.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()                            //nolint:errcheck // only read
	if _, err := tx.Exec(`SELECT 1`); err != nil { // the cancel's transaction has begun
		t.Fatal(err)
	}
	time.Sleep(time.Until(end) + 50*time.Millisecond)
	if n, err := ExpireReservations(r.ctx, r.db); err != nil || n != 1 {
		t.Fatalf("expired %d: %v", n, err)
	}
	_, err = CancelReservation(r.ctx, tx, &ReservationCancelInput{TenantID: "acme", ReservationID: res.ReservationID})
	if e, ok := errs.As(err); !ok || e.Code != errs.InvalidState || e.Details["state"] != ResExpired {
		t.Fatalf("a cancel whose transaction began before the end, after the expiry was announced: %v", err)
	}
}

// An offered tenant making creates without pause does not keep the pool's
// owner from withdrawing the offer. Each create share-locks the pool until
// it commits (so that the pool is not archived or unoffered under it), and
// a new share lock of a row overtakes a waiting update: 16 creates at a
// time, all refused by a quota of 0, kept pools.unoffer waiting until its
// statement timed out.
func TestUnofferIsNotStarvedByTheOfferedTenantsCreates(t *testing.T) {
	r := newRig(t)
	r.exec(`INSERT INTO tenants (tenant_id, name) VALUES ('beta', 'Beta')`)
	pool := r.pool("vps-provider", "sim", instant)
	r.exec(`INSERT INTO pool_offers (pool_id, to_tenant_id, quota_gpus, quota_instances) VALUES ($1, 'beta', 0, 0)`, pool)
	storm.Start(t, 16, 100, func(i, j int) {
		r.db.Tx(r.ctx, func(tx *sqlx.Tx) error { //nolint:errcheck // every create is refused (quota 0)
			_, err := r.s.Create(r.ctx, tx, &CreateInput{TenantID: "beta", PoolID: pool, Name: fmt.Sprint("i", i, "-", j),
				Size: Size{GPUs: 1, VCPUs: 1, MemoryGiB: 1}})
			return err
		})
	})
	if err := r.db.Tx(r.ctx, func(tx *sqlx.Tx) error {
		_, err := pools.Unoffer(r.ctx, tx, &pools.UnofferInput{TenantID: "acme", PoolID: pool, ToTenantID: "beta"})
		return err
	}); err != nil {
		t.Fatalf("pools.unoffer while the offered tenant makes creates: %v", err)
	}
}

// A pending instance is placed only while its pool takes it: not once the
// pool is archived or no longer offered to its tenant (it fails, saying
// why), and within the offer's quota as it is now, counting what is
// placed (it waits for quota). A probe saw an instance that waited for
// room started in an archived pool for a tenant without an offer, and one
// placed at four times a lowered quota.
func TestPlacementOnlyWhileThePoolTakesTheInstance(t *testing.T) {
	r := newRig(t)
	r.exec(`INSERT INTO tenants (tenant_id, name) VALUES ('beta', 'Beta')`)
	offered := func(pool string, gpus int) string {
		id := ids.New(ids.Instance)
		r.exec(`INSERT INTO instances (instance_id, tenant_id, pool_id, name, gpus, vcpus, memory_gib, desired_state, offered)
			VALUES ($1, 'beta', $2, $1, $3, 4, 16, 'running', true)`, id, pool, gpus)
		return id
	}
	// waiting has beta's instance wait for room in a pool whose one GPU
	// acme's instance holds.
	waiting := func() (pool, holder, id string) {
		pool = r.pool("vps-provider", "sim", `{"capacity": {"gpus": 1}, "sim": {"latencyMs": 0}}`)
		r.exec(`INSERT INTO pool_offers (pool_id, to_tenant_id, quota_gpus, quota_instances) VALUES ($1, 'beta', 4, 4)`, pool)
		holder = r.instance(pool, Running)
		r.converge(holder, Provisioning, Running)
		id = offered(pool, 1)
		if _, res := r.run(id); res.outcome != wait || r.get(id).State != Pending {
			t.Fatalf("no room: %s %q", r.get(id).State, deref(r.get(id).StateReason))
		}
		return pool, holder, id
	}
	for what, c := range map[string]struct{ change, reason string }{
		"archived":  {`UPDATE pools SET state = 'archived' WHERE pool_id = $1`, "the pool was archived before the instance was placed"},
		"unoffered": {`DELETE FROM pool_offers WHERE pool_id = $1`, "the pool is no longer offered to the instance's tenant"},
	} {
		pool, holder, id := waiting()
		r.exec(c.change, pool)
		r.want(holder, Deleted)
		r.converge(holder, Deleting, Deleted) // room made
		r.converge(id, Failed)
		if got := deref(r.get(id).StateReason); got != c.reason {
			t.Fatalf("%s: %q", what, got)
		}
		// Never placed, it holds no room (a probe's owner's instance
		// waited beside it until the offered tenant deleted it).
		if what == "unoffered" {
			next := r.instance(pool, Running)
			r.converge(next, Provisioning, Running)
		}
	}
	// A quota lowered below what is placed: the pending instance waits
	// until there is room in it again.
	pool := r.pool("vps-provider", "sim", instant)
	r.exec(`INSERT INTO pool_offers (pool_id, to_tenant_id, quota_gpus, quota_instances) VALUES ($1, 'beta', 2, 4)`, pool)
	first := offered(pool, 1)
	r.converge(first, Provisioning, Running)
	second := offered(pool, 1)
	r.exec(`UPDATE pool_offers SET quota_gpus = 1 WHERE pool_id = $1`, pool)
	states, res := r.run(second)
	if i := r.get(second); len(states) != 0 || res.outcome != wait || i.State != Pending || deref(i.StateReason) != quotaLowered {
		t.Fatalf("past the lowered quota: %v, outcome %d: %s %q", states, res.outcome, i.State, deref(i.StateReason))
	}
	r.exec(`UPDATE pool_offers SET quota_gpus = 2 WHERE pool_id = $1`, pool)
	r.converge(second, Provisioning, Running)
}

// A change that ends a tenant's use of a pool cancels its reservations
// there that have not ended, in the change's transaction, with their
// reservation.canceled events: an offer withdrawn cancels that tenant's
// (a probe: the guest's reservation kept the pool's room for a year, and
// neither it, without access, nor the owner could cancel it), an archive
// every tenant's. An ended reservation is left to its expiry. A stale
// expectedVersion on a cancel is CONFLICT before the reservation's state.
func TestReservationsEndWithTheirUseOfThePool(t *testing.T) {
	r := newRig(t)
	r.exec(`INSERT INTO tenants (tenant_id, name) VALUES ('beta', 'Beta')`)
	pool := r.pool("vps-provider", "sim", `{"capacity": {"gpus": 4}, "sim": {"latencyMs": 0}}`)
	r.exec(`INSERT INTO pool_offers (pool_id, to_tenant_id, quota_gpus, quota_instances) VALUES ($1, 'beta', 4, 4)`, pool)
	reserve := func(tenant string, from, to time.Duration) *Reservation {
		t.Helper()
		var res *Reservation
		if err := r.db.Tx(r.ctx, func(tx *sqlx.Tx) (err error) {
			res, err = CreateReservation(r.ctx, tx, &ReservationCreateInput{TenantID: tenant, PoolID: pool, Size: fit.Resources{GPUs: 1},
				StartsAt: time.Now().Add(from).UTC().Format(time.RFC3339Nano), EndsAt: time.Now().Add(to).UTC().Format(time.RFC3339Nano)})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return res
	}
	state := func(id string) string {
		t.Helper()
		var s string
		if err := r.db.Get(&s, `SELECT CASE WHEN state = 'canceled' THEN 'canceled' WHEN ends_at <= now() THEN 'expired' ELSE 'live' END
			FROM reservations WHERE reservation_id = $1`, id); err != nil {
			t.Fatal(err)
		}
		return s
	}
	canceledEvents := func(id string) int {
		t.Helper()
		var n int
		if err := r.db.Get(&n, `SELECT (SELECT count(*) FROM event_inbox WHERE resource_id = $1 AND type = 'reservation.canceled')
			+ (SELECT count(*) FROM events WHERE resource_id = $1 AND type = 'reservation.canceled')`, id); err != nil {
			t.Fatal(err)
		}
		return n
	}
	betaScheduled := reserve("beta", time.Hour, 2*time.Hour)
	betaActive := reserve("beta", -time.Minute, time.Hour)
	betaEnding := reserve("beta", -time.Minute, time.Hour)
	acmeActive := reserve("acme", -time.Minute, time.Hour)
	// betaEnding has ended (made so in the database: one created to end
	// 300 ms later was refused "endsAt is in the past" when its create
	// came later than that under make test's load).
	r.exec(`UPDATE reservations SET ends_at = now() - interval '1 millisecond' WHERE reservation_id = $1`, betaEnding.ReservationID)

	if err := r.db.Tx(r.ctx, func(tx *sqlx.Tx) error {
		_, err := pools.Unoffer(r.ctx, tx, &pools.UnofferInput{TenantID: "acme", PoolID: pool, ToTenantID: "beta"})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]string{betaScheduled.ReservationID: "canceled", betaActive.ReservationID: "canceled",
		betaEnding.ReservationID: "expired", acmeActive.ReservationID: "live"} {
		if got := state(id); got != want {
			t.Fatalf("after the unoffer, reservation %s is %s, not %s", id, got, want)
		}
		if n, canceled := canceledEvents(id), want == "canceled"; (n == 1) != canceled || n > 1 {
			t.Fatalf("after the unoffer, reservation %s (%s) has %d reservation.canceled events", id, want, n)
		}
	}
	// The room is free again: three more GPUs besides acme's one.
	reserve("acme", -time.Minute, time.Hour)
	reserve("acme", -time.Minute, time.Hour)
	reserve("acme", -time.Minute, time.Hour)

	// A stale version: CONFLICT, though the reservation is canceled.
	_, err := CancelReservation(r.ctx, r.db, &ReservationCancelInput{TenantID: "beta", ReservationID: betaActive.ReservationID, ExpectedVersion: &betaActive.RowVersion})
	if e, ok := errs.As(err); !ok || e.Code != errs.Conflict {
		t.Fatalf("a cancel at the version before the unoffer's: %v", err)
	}

	var version int
	if err := r.db.Get(&version, `SELECT row_version FROM pools WHERE pool_id = $1`, pool); err != nil {
		t.Fatal(err)
	}
	if err := r.db.Tx(r.ctx, func(tx *sqlx.Tx) error {
		_, err := pools.Archive(r.ctx, tx, &pools.ArchiveInput{TenantID: "acme", PoolID: pool, ExpectedVersion: &version})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var live int
	if err := r.db.Get(&live, `SELECT count(*) FROM reservations WHERE pool_id = $1 AND state = 'active' AND ends_at > now()`, pool); err != nil {
		t.Fatal(err)
	}
	if live != 0 || state(acmeActive.ReservationID) != "canceled" || canceledEvents(acmeActive.ReservationID) != 1 {
		t.Fatalf("after the archive: %d live reservations; acme's first is %s", live, state(acmeActive.ReservationID))
	}
}
