// Package events is the instance event outbox: every instance state move
// writes one row of instance_events in the transaction that makes the move,
// and notifies compute_instance_events with the tenant id in that same
// transaction.
//
// Stream order is (xid, seq): xid is the writing transaction's id
// (pg_current_xact_id(), an xid8), seq an identity. Readers only return rows
// whose xid is below pg_snapshot_xmin(pg_current_snapshot()): every
// transaction with a smaller xid has ended, so no row can later appear before
// a row a reader has already seen. An event id encodes (xid, seq) as 26
// lowercase Crockford base32 characters, so string order is stream order.
package events

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/registry"
	"github.com/bettercompute/computed/internal/store"
)

// Channel is the NOTIFY channel; the payload is the tenant id.
const Channel = "compute_instance_events"

// Types of instance events.
const (
	Created      = "instance.created"
	Provisioning = "instance.provisioning"
	Running      = "instance.running"
	Stopping     = "instance.stopping"
	Stopped      = "instance.stopped"
	Rebooting    = "instance.rebooting"
	Deleting     = "instance.deleting"
	Deleted      = "instance.deleted"
	Failed       = "instance.failed"
)

// Types lists every event type.
var Types = []string{Created, Provisioning, Running, Stopping, Stopped, Rebooting, Deleting, Deleted, Failed}

// TypeEnum names the event types for both surfaces (GraphQL spells
// instance.created as INSTANCE_CREATED).
var TypeEnum = registry.DefineEnum("InstanceEventType", "an instance.* event: the state the instance moved to", Types...)

// Position is a place in the stream: (xid, seq).
type Position struct {
	XID uint64
	Seq uint64
}

// Less orders positions in stream order.
func (p Position) Less(o Position) bool {
	return p.XID < o.XID || (p.XID == o.XID && p.Seq < o.Seq)
}

// IsZero reports the position before every event.
func (p Position) IsZero() bool { return p.XID == 0 && p.Seq == 0 }

const alphabet = "0123456789abcdefghjkmnpqrstvwxyz"

var decodeTable = func() [256]int8 {
	var t [256]int8
	for i := range t {
		t[i] = -1
	}
	for i := 0; i < len(alphabet); i++ {
		t[alphabet[i]] = int8(i)
	}
	return t
}()

// idChars is the length of an encoded position: 26 characters hold 130
// bits, the 128 bits of (xid, seq) with two leading zero bits.
const idChars = 26

// Prefix starts every event id.
const Prefix = "evt_"

// EncodeID turns a position into its event id: "evt_" and the 128-bit
// big-endian value xid||seq in 26 lowercase Crockford base32 characters.
func EncodeID(p Position) string {
	var b [idChars]byte
	hi, lo := p.XID, p.Seq
	for i := idChars - 1; i >= 0; i-- {
		b[i] = alphabet[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
	return Prefix + string(b[:])
}

// DecodeID reads an event id made by EncodeID.
func DecodeID(id string) (Position, error) {
	if len(id) != len(Prefix)+idChars || id[:len(Prefix)] != Prefix {
		return Position{}, fmt.Errorf("events: %q is not an event id", id)
	}
	var hi, lo uint64
	for i := len(Prefix); i < len(id); i++ {
		v := decodeTable[id[i]]
		if v < 0 {
			return Position{}, fmt.Errorf("events: %q is not an event id", id)
		}
		if i == len(Prefix) && v > 7 {
			return Position{}, fmt.Errorf("events: %q is out of range", id)
		}
		hi = hi<<5 | lo>>59
		lo = lo<<5 | uint64(v)
	}
	return Position{XID: hi, Seq: lo}, nil
}

// Event is one stored instance event.
type Event struct {
	EventID      string          `json:"eventId"`
	Type         string          `json:"type" schema:"InstanceEventType"`
	TenantID     string          `json:"tenantId"`
	PoolID       string          `json:"poolId"`
	InstanceID   string          `json:"instanceId"`
	ProjectID    *string         `json:"projectId"`
	State        string          `json:"state"`
	DesiredState string          `json:"desiredState"`
	StateReason  *string         `json:"stateReason"`
	OccurredAt   time.Time       `json:"occurredAt"`
	Instance     json.RawMessage `json:"instance" schema:"InstanceAtEvent"` // the instance as of the event (defined by package instances)

	Position Position `json:"-"`
}

// Record is what a state move writes.
type Record struct {
	Type         string
	TenantID     string
	PoolID       string
	InstanceID   string
	ProjectID    *string
	State        string
	DesiredState string
	StateReason  *string
	// Instance is the instance's method-surface JSON after the move.
	Instance json.RawMessage
}

// Write stores one event and notifies the channel, in one statement, in the
// caller's transaction (the one making the state move).
func Write(ctx context.Context, q store.Q, r Record) error {
	_, err := q.ExecContext(ctx, `WITH e AS (
			INSERT INTO instance_events (tenant_id, pool_id, instance_id, project_id, type, state, desired_state, state_reason, instance)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::jsonb) RETURNING tenant_id)
		SELECT pg_notify('`+Channel+`', tenant_id) FROM e`,
		r.TenantID, r.PoolID, r.InstanceID, r.ProjectID, r.Type, r.State, r.DesiredState, r.StateReason, string(r.Instance))
	return store.Wrap(err)
}

// Filter selects the events of one tenant, optionally of one instance or
// one pool.
type Filter struct {
	TenantID   string
	InstanceID string // "" for any
	PoolID     string // "" for any
}

type row struct {
	XID          string    `db:"xid"`
	Seq          int64     `db:"seq"`
	Type         string    `db:"type"`
	TenantID     string    `db:"tenant_id"`
	PoolID       string    `db:"pool_id"`
	InstanceID   string    `db:"instance_id"`
	ProjectID    *string   `db:"project_id"`
	State        string    `db:"state"`
	DesiredState string    `db:"desired_state"`
	StateReason  *string   `db:"state_reason"`
	OccurredAt   time.Time `db:"occurred_at"`
	Instance     string    `db:"instance"`
}

// Visible is the one visibility predicate over instance events e: the
// readers of the event's tenant. The outbox reads of the method surface
// and the live streams (Page) and the graph's batches use it.
func Visible(tenants string) string { return `e.tenant_id = ANY(` + tenants + `)` }

// Page returns up to limit events of the filter after the cursor position
// (the zero position for the start), in stream order, only below the
// visibility horizon. It does not check retention: see CheckCursor.
func Page(ctx context.Context, q store.Q, f Filter, after Position, limit int) ([]Event, error) {
	var rows []row
	err := q.SelectContext(ctx, &rows, `SELECT xid::text AS xid, seq, type, tenant_id, pool_id, instance_id, project_id,
			state, desired_state, state_reason, occurred_at, instance::text AS instance
		FROM instance_events e
		WHERE `+Visible("ARRAY[$1]")+`
		  AND ($2 = '' OR instance_id = $2)
		  AND ($3 = '' OR pool_id = $3)
		  AND (xid, seq) > ($4::text::xid8, $5::bigint)
		  AND xid < pg_snapshot_xmin(pg_current_snapshot())
		ORDER BY e.xid, seq
		LIMIT $6`, f.TenantID, f.InstanceID, f.PoolID, strconv.FormatUint(after.XID, 10), int64(after.Seq), limit)
	if err != nil {
		return nil, store.Wrap(err)
	}
	out := make([]Event, len(rows))
	for i, r := range rows {
		x, err := strconv.ParseUint(r.XID, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("events: stored xid %q: %w", r.XID, err)
		}
		pos := Position{XID: x, Seq: uint64(r.Seq)}
		out[i] = Event{EventID: EncodeID(pos), Type: r.Type, TenantID: r.TenantID, PoolID: r.PoolID, InstanceID: r.InstanceID,
			ProjectID: r.ProjectID, State: r.State, DesiredState: r.DesiredState, StateReason: r.StateReason,
			OccurredAt: r.OccurredAt.UTC(), Instance: json.RawMessage(r.Instance), Position: pos}
	}
	return out, nil
}

// ParseCursor reads an event id given as a cursor; "" is the start. A
// malformed id is INVALID_INPUT naming path.
func ParseCursor(path, cursor string) (Position, error) {
	if cursor == "" {
		return Position{}, nil
	}
	p, err := DecodeID(cursor)
	if err != nil {
		return Position{}, errs.Invalid(path, "%s is not an event id this server returned", path)
	}
	return p, nil
}

// PrunedThrough returns the last position retention has pruned (the zero
// position when nothing was pruned).
func PrunedThrough(ctx context.Context, q store.Q) (Position, error) {
	var r struct {
		XID string `db:"xid"`
		Seq int64  `db:"seq"`
	}
	err := q.GetContext(ctx, &r, `SELECT xid::text AS xid, seq FROM instance_events_pruned WHERE id`)
	if errors.Is(err, sql.ErrNoRows) {
		return Position{}, nil
	}
	if err != nil {
		return Position{}, store.Wrap(err)
	}
	x, err := strconv.ParseUint(r.XID, 10, 64)
	if err != nil {
		return Position{}, err
	}
	return Position{XID: x, Seq: uint64(r.Seq)}, nil
}

// ExpiredCursor is the error of a cursor older than retention.
func ExpiredCursor(path string) error {
	return errs.E(errs.InvalidState, "the cursor is older than the event retention; start again without a cursor").
		With("reason", "expired-cursor").With("path", path)
}

// CheckCursor refuses a cursor that retention has overtaken: events after
// it may have been pruned (INVALID_STATE, details.reason "expired-cursor").
// The zero position (no cursor) is never expired: it starts at the oldest
// retained event.
func CheckCursor(ctx context.Context, q store.Q, after Position) error {
	if after.IsZero() {
		return nil
	}
	p, err := PrunedThrough(ctx, q)
	if err != nil {
		return err
	}
	if after.Less(p) {
		return ExpiredCursor("cursor")
	}
	return nil
}

// Prune deletes the events that occurred before cutoff, as a prefix of the
// stream: it finds the last such event below the visibility horizon and
// deletes every event up to it, then records that position. It returns the
// number deleted.
func Prune(ctx context.Context, db *store.DB, cutoff time.Time) (int64, error) {
	var n int64
	err := db.Tx(ctx, func(tx *sqlx.Tx) error {
		// One pruner at a time (replicas all run the periodic job's leader,
		// but a manual call may race it).
		if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(7248301559)`); err != nil {
			return store.Wrap(err)
		}
		var last struct {
			XID sql.NullString `db:"xid"`
			Seq sql.NullInt64  `db:"seq"`
		}
		err := tx.GetContext(ctx, &last, `SELECT xid::text AS xid, seq FROM instance_events
			WHERE occurred_at < $1 AND xid < pg_snapshot_xmin(pg_current_snapshot())
			ORDER BY instance_events.xid DESC, seq DESC LIMIT 1`, cutoff)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return store.Wrap(err)
		}
		res, err := tx.ExecContext(ctx, `DELETE FROM instance_events WHERE (xid, seq) <= ($1::text::xid8, $2::bigint)`, last.XID.String, last.Seq.Int64)
		if err != nil {
			return store.Wrap(err)
		}
		n, _ = res.RowsAffected()
		_, err = tx.ExecContext(ctx, `INSERT INTO instance_events_pruned (id, xid, seq, pruned_at) VALUES (true, $1::text::xid8, $2, now())
			ON CONFLICT (id) DO UPDATE SET xid = EXCLUDED.xid, seq = EXCLUDED.seq, pruned_at = now()
			WHERE (instance_events_pruned.xid, instance_events_pruned.seq) < (EXCLUDED.xid, EXCLUDED.seq)`, last.XID.String, last.Seq.Int64)
		return store.Wrap(err)
	})
	return n, err
}
