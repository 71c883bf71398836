package instances

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/events"
	"github.com/bettercompute/computed/internal/ids"
	"github.com/bettercompute/computed/internal/instances/fit"
	"github.com/bettercompute/computed/internal/page"
	"github.com/bettercompute/computed/internal/pools"
	"github.com/bettercompute/computed/internal/relay"
	"github.com/bettercompute/computed/internal/rfc3339"
	"github.com/bettercompute/computed/internal/store"
)

// Reservation states as read: scheduled (before its window), active (in
// it), expired (after it), canceled.
const (
	ResScheduled = "scheduled"
	ResActive    = "active"
	ResExpired   = "expired"
	ResCanceled  = "canceled"
)

// ReservationStates lists them for the list filter.
var ReservationStates = []string{ResScheduled, ResActive, ResExpired, ResCanceled}

// MaxReservation bounds a reservation's window.
const MaxReservation = 366 * 24 * time.Hour

// Reservation is capacity held in one pool for [startsAt, endsAt).
type Reservation struct {
	ReservationID string        `json:"reservationId" db:"reservation_id" doc:"The reservation's id (rsv_ and a ULID)."`
	TenantID      string        `json:"tenantId" db:"tenant_id" doc:"The tenant the room is held for."`
	PoolID        string        `json:"poolId" db:"pool_id" doc:"The pool the room is held in."`
	Size          fit.Resources `json:"size" db:"-" doc:"The room held."`
	StartsAt      time.Time     `json:"startsAt" db:"starts_at" doc:"When the window starts (included)."`
	EndsAt        time.Time     `json:"endsAt" db:"ends_at" doc:"When the window ends (excluded)."`
	State         string        `json:"state" db:"-" schema:"ReservationState" doc:"Scheduled before its window, active in it, expired after it, or canceled."`
	RowVersion    int           `json:"rowVersion" db:"row_version" doc:"What expectedVersion is compared with: raised when the reservation is canceled (its state moving with the clock raises nothing)."`
	CreatedAt     time.Time     `json:"createdAt" db:"created_at" doc:"When the reservation was made."`
	UpdatedAt     time.Time     `json:"updatedAt" db:"updated_at" doc:"When the reservation last changed."`
	CanceledAt    *time.Time    `json:"canceledAt" db:"canceled_at" doc:"When the reservation was canceled; null unless it was."`

	Stored    string    `json:"-" db:"state"`
	GPUs      int       `json:"-" db:"gpus"`
	VCPUs     int       `json:"-" db:"vcpus"`
	MemoryGiB int       `json:"-" db:"memory_gib"`
	Now       time.Time `json:"-" db:"tx_now"`
}

// GlobalID is the reservation's Relay id.
func (r *Reservation) GlobalID() string { return relay.ID("Reservation", r.ReservationID) }

// Normalize finishes a reservation read from its row: Size from the size
// columns, times in UTC, State from the stored state and the
// transaction's now.
func (r *Reservation) Normalize() *Reservation {
	r.Size = fit.Resources{GPUs: r.GPUs, VCPUs: r.VCPUs, MemoryGiB: r.MemoryGiB}
	r.StartsAt, r.EndsAt, r.CreatedAt, r.UpdatedAt = r.StartsAt.UTC(), r.EndsAt.UTC(), r.CreatedAt.UTC(), r.UpdatedAt.UTC()
	if r.CanceledAt != nil {
		t := r.CanceledAt.UTC()
		r.CanceledAt = &t
	}
	switch {
	case r.Stored == "canceled":
		r.State = ResCanceled
	case !r.Now.Before(r.EndsAt):
		r.State = ResExpired
	case !r.Now.Before(r.StartsAt):
		r.State = ResActive
	default:
		r.State = ResScheduled
	}
	return r
}

const resCols = `reservation_id, tenant_id, pool_id, gpus, vcpus, memory_gib, starts_at, ends_at, state, row_version,
	created_at, updated_at, canceled_at, now() AS tx_now`

type (
	ReservationCreateInput struct {
		TenantID string        `json:"tenantId"`
		PoolID   string        `json:"poolId"`
		Size     fit.Resources `json:"size"`
		StartsAt string        `json:"startsAt"`
		EndsAt   string        `json:"endsAt"`
	}
	ReservationRefInput struct {
		TenantID      string `json:"tenantId"`
		ReservationID string `json:"reservationId"`
	}
	ReservationListInput struct {
		TenantID string `json:"tenantId"`
		PoolID   string `json:"poolId,omitempty"`
		State    string `json:"state,omitempty"`
		Limit    int    `json:"limit"`
		Cursor   string `json:"cursor,omitempty"`
	}
	ReservationCancelInput struct {
		TenantID        string `json:"tenantId"`
		ReservationID   string `json:"reservationId"`
		ExpectedVersion *int   `json:"expectedVersion,omitempty"`
	}
)

func parseTime(path, s string) (time.Time, error) {
	t, err := rfc3339.Field(path, s)
	return t.UTC(), err
}

// windows loads the reservations of a pool that still hold room (active,
// not ended), optionally of one tenant.
func windows(ctx context.Context, q store.Q, poolID, tenantID string) ([]fit.Window, error) {
	var rows []Reservation
	if err := q.SelectContext(ctx, &rows, `SELECT `+resCols+` FROM reservations
		WHERE pool_id = $1 AND state = 'active' AND ends_at > now() AND ($2 = '' OR tenant_id = $2)`, poolID, tenantID); err != nil {
		return nil, store.Wrap(err)
	}
	out := make([]fit.Window, len(rows))
	for k, r := range rows {
		out[k] = fit.Window{TenantID: r.TenantID, Start: r.StartsAt, End: r.EndsAt, Res: fit.Resources{GPUs: r.GPUs, VCPUs: r.VCPUs, MemoryGiB: r.MemoryGiB}}
	}
	return out, nil
}

// CreateReservation holds capacity in a pool: within the offer's GPU quota
// (offered tenants) at every moment of the window, and within the pool's
// capacity (when it has one) given what every tenant holds.
func CreateReservation(ctx context.Context, q store.Q, in *ReservationCreateInput) (*Reservation, error) {
	// Reservations and placements of one pool are decided one at a time,
	// on the pool as it is: locked as it is read (a read before the lock
	// is the pool before an archive, a capacity change or an unoffer that
	// held it committed; a probe's reservations were made in an archived
	// pool and past a lowered capacity).
	p, err := visiblePool(ctx, q, in.TenantID, in.PoolID, "FOR UPDATE OF p")
	if err != nil {
		return nil, err
	}
	if err := p.usable(); err != nil {
		return nil, err
	}
	start, err := parseTime("startsAt", in.StartsAt)
	if err != nil {
		return nil, err
	}
	end, err := parseTime("endsAt", in.EndsAt)
	if err != nil {
		return nil, err
	}
	if !end.After(start) {
		return nil, errs.Invalid("endsAt", "endsAt must be after startsAt")
	}
	if !end.After(time.Now()) {
		return nil, errs.Invalid("endsAt", "endsAt is in the past")
	}
	if end.Sub(start) > MaxReservation {
		return nil, errs.Invalid("endsAt", "a reservation lasts at most 366 days")
	}
	if in.Size == (fit.Resources{}) {
		return nil, errs.Invalid("size", "reserve at least one GPU, vCPU or GiB")
	}
	w := fit.Window{TenantID: in.TenantID, Start: start, End: end, Res: in.Size}
	if p.offered(in.TenantID) {
		quota, err := lockedQuota(ctx, q, in.PoolID, in.TenantID)
		if err != nil {
			return nil, err
		}
		mine, err := windows(ctx, q, in.PoolID, in.TenantID)
		if err != nil {
			return nil, err
		}
		if !fit.ReservationFitsQuota(quota.GPUs, mine, w) {
			peak := fit.PeakReserved(append(mine, w), start, end)
			return nil, errs.E(errs.InvalidState, "the pool's offer allows %s; with this reservation the tenant would reserve %d at once",
				fit.Count(quota.GPUs, "GPU", "GPUs"), peak.GPUs).With("reason", "quota").With("quota", quota).With("peakReservedGpus", peak.GPUs)
		}
	}
	var total fit.Resources
	bounded := true
	if p.Kind == "vps-hosted" {
		hs, err := hosts(ctx, q, in.PoolID, "")
		if err != nil {
			return nil, err
		}
		total = fit.HostedTotal(p.SharingMode, parsePolicy(p.Policy).Slices, hs)
	} else {
		total, bounded = fit.ProviderTotal(p.Policy)
	}
	if bounded {
		alloc, err := allocated(ctx, q, in.PoolID, "")
		if err != nil {
			return nil, err
		}
		all, err := windows(ctx, q, in.PoolID, "")
		if err != nil {
			return nil, err
		}
		if !fit.ReservationFitsCapacity(total, alloc, all, w) {
			return nil, errs.E(errs.InvalidState, "pool %s has no room for this reservation in its window", in.PoolID).
				With("reason", "capacity").With("total", total)
		}
	}
	var r Reservation
	err = q.GetContext(ctx, &r, `INSERT INTO reservations (reservation_id, tenant_id, pool_id, gpus, vcpus, memory_gib, starts_at, ends_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING `+resCols,
		ids.New(ids.Reservation), in.TenantID, in.PoolID, in.Size.GPUs, in.Size.VCPUs, in.Size.MemoryGiB, start, end)
	if err != nil {
		return nil, store.Wrap(err)
	}
	return r.Normalize(), reservationEvent(ctx, q, events.ReservationCreated, &r)
}

// reservationEvent writes a reservation's event in the change's
// transaction.
func reservationEvent(ctx context.Context, q store.Q, typ string, r *Reservation) error {
	return events.Write(ctx, q, events.Record{TenantID: r.TenantID, Type: typ, ResourceID: r.ReservationID, PoolID: r.PoolID, Data: r})
}

// ExpireReservations writes the reservation.expired event of every
// reservation whose window has ended, once (the maintenance lease's holder
// runs it; reads show a reservation expired from its end on). It returns
// how many.
func ExpireReservations(ctx context.Context, db *store.DB) (int, error) {
	var n int
	err := db.Tx(ctx, func(tx *sqlx.Tx) error {
		var rows []Reservation
		if err := tx.SelectContext(ctx, &rows, `UPDATE reservations SET expiry_announced = true
			WHERE reservation_id IN (SELECT reservation_id FROM reservations
				WHERE state = 'active' AND ends_at <= now() AND NOT expiry_announced
				ORDER BY reservation_id LIMIT 500 FOR UPDATE SKIP LOCKED)
			RETURNING `+resCols); err != nil {
			return store.Wrap(err)
		}
		for i := range rows {
			if err := reservationEvent(ctx, tx, events.ReservationExpired, rows[i].Normalize()); err != nil {
				return err
			}
		}
		n = len(rows)
		return nil
	})
	return n, err
}

func resNotFound(id string) error {
	return errs.E(errs.NotFound, "reservation %s not found", id).With("path", "reservationId")
}

// GetReservation returns one of the tenant's reservations.
func GetReservation(ctx context.Context, q store.Q, in *ReservationRefInput) (*Reservation, error) {
	var r Reservation
	err := q.GetContext(ctx, &r, `SELECT `+resCols+` FROM reservations r WHERE reservation_id = $1 AND `+ReservationVisible("ARRAY[$2]"), in.ReservationID, in.TenantID)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, resNotFound(in.ReservationID)
	}
	if err != nil {
		return nil, store.Wrap(err)
	}
	return r.Normalize(), nil
}

// ListReservations pages the tenant's reservations by id, optionally of one
// pool or in one state.
func ListReservations(ctx context.Context, q store.Q, in *ReservationListInput) (*page.Page[Reservation], error) {
	var after string
	if _, err := ReservationCursors.Decode(in.Cursor, &after); err != nil {
		return nil, err
	}
	rows := []Reservation{}
	err := q.SelectContext(ctx, &rows, `SELECT `+resCols+` FROM reservations r
		WHERE `+ReservationVisible("ARRAY[$1]")+` AND reservation_id > $2 AND ($3 = '' OR pool_id = $3)
		  AND CASE $4
		      WHEN '' THEN true
		      WHEN 'canceled' THEN state = 'canceled'
		      WHEN 'expired' THEN state = 'active' AND ends_at <= now()
		      WHEN 'active' THEN state = 'active' AND starts_at <= now() AND ends_at > now()
		      ELSE state = 'active' AND starts_at > now() END
		ORDER BY reservation_id LIMIT $5`, in.TenantID, after, in.PoolID, in.State, in.Limit+1)
	if err != nil {
		return nil, store.Wrap(err)
	}
	for k := range rows {
		rows[k].Normalize()
	}
	items, cur := page.Trim(rows, in.Limit, func(r Reservation) string { return ReservationCursors.Encode(r.ReservationID) })
	return &page.Page[Reservation]{Items: items, Cursor: cur}, nil
}

// CancelReservation frees a reservation's room; a canceled or expired one
// is INVALID_STATE.
func CancelReservation(ctx context.Context, q store.Q, in *ReservationCancelInput) (*Reservation, error) {
	var r Reservation
	err := q.GetContext(ctx, &r, `SELECT `+resCols+` FROM reservations WHERE reservation_id = $1 AND tenant_id = $2 FOR UPDATE`, in.ReservationID, in.TenantID)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, resNotFound(in.ReservationID)
	}
	if err != nil {
		return nil, store.Wrap(err)
	}
	// Expired or not by the clock once the row is held, a statement after
	// the lock: the transaction's start (tx_now) can be before the window's
	// end while the expiry sweep announced it and committed as this call
	// waited, and the reservation was canceled after reservation.expired.
	if err := q.GetContext(ctx, &r.Now, `SELECT clock_timestamp()`); err != nil {
		return nil, store.Wrap(err)
	}
	r.Normalize()
	// A stale expectedVersion is CONFLICT before the state is looked at:
	// of two cancels with the version both read, the second finds the
	// reservation canceled by the first, a change it did not see.
	if in.ExpectedVersion != nil && *in.ExpectedVersion != r.RowVersion {
		return nil, errs.E(errs.Conflict, "reservation %s is at rowVersion %d, not %d", r.ReservationID, r.RowVersion, *in.ExpectedVersion).
			With("rowVersion", r.RowVersion)
	}
	if r.State == ResCanceled || r.State == ResExpired {
		return nil, errs.InState(r.State, "reservation %s is %s", r.ReservationID, r.State)
	}
	var out Reservation
	err = q.GetContext(ctx, &out, `UPDATE reservations SET state = 'canceled', canceled_at = now(), row_version = row_version + 1, updated_at = now()
		WHERE reservation_id = $1 RETURNING `+resCols, r.ReservationID)
	if err != nil {
		return nil, store.Wrap(err)
	}
	return out.Normalize(), reservationEvent(ctx, q, events.ReservationCanceled, &out)
}

func init() { pools.OnAccessEnd(cancelUnusable) }

// cancelUnusable cancels the reservations of a pool that have not ended,
// of one tenant or of every tenant (""), when a change ends their use of
// the pool (an offer withdrawn, the pool archived; pools.OnAccessEnd), in
// that change's transaction: no instance of theirs could be created there
// any more, and the room they held stayed held with nobody able to free it
// (its owner cannot cancel another tenant's reservation). Each one's
// reservation.canceled event reaches its tenant. A reservation whose end
// has passed is left to its expiry (ExpireReservations).
func cancelUnusable(ctx context.Context, q store.Q, poolID, tenantID string) error {
	var rows []Reservation
	if err := q.SelectContext(ctx, &rows, `UPDATE reservations SET state = 'canceled', canceled_at = now(), row_version = row_version + 1, updated_at = now()
		WHERE pool_id = $1 AND ($2 = '' OR tenant_id = $2) AND state = 'active' AND ends_at > clock_timestamp()
		RETURNING `+resCols, poolID, tenantID); err != nil {
		return store.Wrap(err)
	}
	slices.SortFunc(rows, func(a, b Reservation) int { return strings.Compare(a.ReservationID, b.ReservationID) })
	for i := range rows {
		if err := reservationEvent(ctx, q, events.ReservationCanceled, rows[i].Normalize()); err != nil {
			return err
		}
	}
	return nil
}
