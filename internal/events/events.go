// Package events is the event outbox: one stream per tenant, in commit
// order, of every change a dashboard watches (instances, nodes and their
// inventory, join requests, workflows, reservations).
//
// A writer stores an event with Write in the transaction that makes the
// change: one row of event_inbox, with no lock, notify or counter shared
// with any other writer. After the transaction commits, the Sequencer of
// the replica that wrote it (told through store.DB.Committed) moves the
// tenant's committed inbox rows into events, numbering them after the
// tenant's last number under the lock of its event_streams row, and wakes
// the readers: this replica's at once, the others' with one batched NOTIFY
// sent from the sequencer's own transaction. Sequencers of one tenant take
// turns on that row and each numbers only committed rows, so a tenant's
// readers always see the numbers 1..last without a hole: a reader
// never later finds an event that sorts before one it has seen, whatever
// else runs in the cluster, and an event is readable as soon as its
// sequencer commits (milliseconds after its own commit).
//
// Within one sequencer pass a tenant's rows are numbered in the order their
// inserts ran (inserted_at, clock_timestamp() at the insert; ties by the
// transaction's id, then the order of the write in it). The insert runs
// with its transaction's COMMIT (store.ExecAtCommit), after every wait of
// the transaction, so a transaction that saw another's commit (a later
// change of the same resource, made after waiting for its row lock)
// inserts after it and is numbered after it. The transaction id alone did
// not say so: it is assigned at the first write, which can come before
// the wait.
//
// An event id is "evt_" and 26 lowercase Crockford base32 characters: a
// version bit, 64 bits of a hash of the tenant id and the tenant's
// sequence number. Ids sort in stream order within a tenant and carry no
// count of other tenants' events. Ids issued before the per-tenant stream
// (version bit clear) are answered as expired cursors.
package events

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/page"
	"github.com/bettercompute/computed/internal/registry"
	"github.com/bettercompute/computed/internal/store"
)

// Channel is the NOTIFY channel the sequencers wake other replicas on; the
// payload is a comma-separated list of tenant ids.
const Channel = "compute_events"

// Resource types.
const (
	ResInstance    = "instance"
	ResNode        = "node"
	ResJoinRequest = "joinRequest"
	ResWorkflow    = "workflow"
	ResReservation = "reservation"
)

// ResourceTypes lists the resource types, in the order the docs list them.
var ResourceTypes = []string{ResInstance, ResNode, ResJoinRequest, ResWorkflow, ResReservation}

// Event types: "<resource>.<what happened>", the CloudEvents convention.
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

	NodeJoined     = "node.joined"
	NodeUpdated    = "node.updated"
	NodeCordoned   = "node.cordoned"
	NodeUncordoned = "node.uncordoned"
	NodeRemoved    = "node.removed"

	InventoryChanged = "inventory.changed"

	JoinRequestPending  = "joinRequest.pending"
	JoinRequestApproved = "joinRequest.approved"
	JoinRequestDenied   = "joinRequest.denied"
	JoinRequestExpired  = "joinRequest.expired"

	WorkflowCreated   = "workflow.created"
	WorkflowStep      = "workflow.step"
	WorkflowSucceeded = "workflow.succeeded"
	WorkflowFailed    = "workflow.failed"
	WorkflowCanceled  = "workflow.canceled"

	ReservationCreated  = "reservation.created"
	ReservationCanceled = "reservation.canceled"
	ReservationExpired  = "reservation.expired"
)

// InstanceTypes lists the instance.* event types.
var InstanceTypes = []string{Created, Provisioning, Running, Stopping, Stopped, Rebooting, Deleting, Deleted, Failed}

// Kinds maps every event type to the resource type its resourceId names.
var Kinds = func() map[string]string {
	m := map[string]string{
		NodeJoined: ResNode, NodeUpdated: ResNode, NodeCordoned: ResNode, NodeUncordoned: ResNode, NodeRemoved: ResNode,
		InventoryChanged:   ResNode,
		JoinRequestPending: ResJoinRequest, JoinRequestApproved: ResJoinRequest, JoinRequestDenied: ResJoinRequest, JoinRequestExpired: ResJoinRequest,
		WorkflowCreated: ResWorkflow, WorkflowStep: ResWorkflow, WorkflowSucceeded: ResWorkflow, WorkflowFailed: ResWorkflow, WorkflowCanceled: ResWorkflow,
		ReservationCreated: ResReservation, ReservationCanceled: ResReservation, ReservationExpired: ResReservation,
	}
	for _, t := range InstanceTypes {
		m[t] = ResInstance
	}
	return m
}()

// AllTypes lists every event type, grouped by resource.
var AllTypes = []string{
	Created, Provisioning, Running, Stopping, Stopped, Rebooting, Deleting, Deleted, Failed,
	NodeJoined, NodeUpdated, NodeCordoned, NodeUncordoned, NodeRemoved, InventoryChanged,
	JoinRequestPending, JoinRequestApproved, JoinRequestDenied, JoinRequestExpired,
	WorkflowCreated, WorkflowStep, WorkflowSucceeded, WorkflowFailed, WorkflowCanceled,
	ReservationCreated, ReservationCanceled, ReservationExpired,
}

// TypeEnum names the instance event types for both surfaces (GraphQL
// spells instance.created as INSTANCE_CREATED).
var TypeEnum = registry.DefineEnum("InstanceEventType", "an instance.* event: the state the instance moved to", InstanceTypes...)

// ResourceTypeEnum names the resource types.
var ResourceTypeEnum = registry.DefineEnum("EventResourceType", "the kind of resource an event's resourceId names", ResourceTypes...)

// --- ids ----------------------------------------------------------------

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

// idChars is the length of an encoded id: 26 characters hold 130 bits,
// the version bit (bit 129, bit 128 clear) and 128 bits of (hash, seq).
const idChars = 26

// Prefix starts every event id.
const Prefix = "evt_"

// TenantHash is the 64 bits of a tenant's ids that name its stream.
func TenantHash(tenantID string) uint64 {
	h := sha256.Sum256([]byte("compute-events/" + tenantID))
	return binary.BigEndian.Uint64(h[:8])
}

// EncodeID is the id of the tenant's event number seq.
func EncodeID(tenantID string, seq uint64) string { return encode(TenantHash(tenantID), seq) }

func encode(hash, seq uint64) string {
	var b [idChars]byte
	top, hi, lo := uint64(2), hash, seq
	for i := idChars - 1; i >= 0; i-- {
		b[i] = alphabet[lo&31]
		lo = lo>>5 | hi<<59
		hi = hi>>5 | top<<59
		top >>= 5
	}
	return Prefix + string(b[:])
}

// Cursor errors.
var (
	errNotID  = fmt.Errorf("events: not an event id")
	errLegacy = fmt.Errorf("events: an event id from before the per-tenant streams")
	errOther  = fmt.Errorf("events: an event id of another stream")
)

// DecodeID reads the sequence number of an id of the tenant's stream.
func DecodeID(tenantID, id string) (uint64, error) {
	hash, seq, err := decode(id)
	if err == nil && hash != TenantHash(tenantID) {
		return 0, errOther
	}
	return seq, err
}

// decode reads an id's stream hash and sequence number.
func decode(id string) (hash, seq uint64, err error) {
	if len(id) != len(Prefix)+idChars || id[:len(Prefix)] != Prefix {
		return 0, 0, errNotID
	}
	first := decodeTable[id[len(Prefix)]]
	switch {
	case first < 0, first >= 8 && first < 16:
		// 8-15: bit 129 clear with bit 128 set, which no id has.
		return 0, 0, errNotID
	case first < 8:
		// Bits 129 and 128 clear: the (xid, seq) ids of the old outbox.
		for i := len(Prefix) + 1; i < len(id); i++ {
			if decodeTable[id[i]] < 0 {
				return 0, 0, errNotID
			}
		}
		return 0, 0, errLegacy
	case first >= 24:
		return 0, 0, errNotID // bit 128 set: no id has it
	}
	var hi, lo uint64
	for i := len(Prefix); i < len(id); i++ {
		v := decodeTable[id[i]]
		if v < 0 {
			return 0, 0, errNotID
		}
		hi = hi<<5 | lo>>59
		lo = lo<<5 | uint64(v)
	}
	return hi, lo, nil
}

// IDPattern is what an event id given as a cursor must match before it is
// read (instances.events' cursor, the graph's event connections).
const IDPattern = `^evt_[0-9a-hjkmnp-tv-z]{26,52}$`

// ParseCursor reads an event id given as a cursor of the tenant's stream
// at path; "" is the start (0). A malformed id, or one of another
// tenant's stream, is INVALID_INPUT; an id issued before the per-tenant
// streams is INVALID_STATE, details.reason "expired-cursor".
func ParseCursor(path, tenantID, cursor string) (uint64, error) {
	if cursor == "" {
		return 0, nil
	}
	// Numbers start at 1; the id of 0 is the stream's start (the position
	// Tenant.events answers for an empty page of an empty stream), as no
	// cursor is for a read, and for a subscription a replay from there.
	if err := page.CheckCursorLength(path, cursor); err != nil {
		return 0, err
	}
	seq, err := DecodeID(tenantID, cursor)
	switch err {
	case nil:
		return seq, nil
	case errLegacy:
		return 0, ExpiredCursor(path)
	case errOther:
		return 0, errs.Invalid(path, "%s is not an event id of tenant %s", path, tenantID)
	default:
		return 0, errs.Invalid(path, "%s is not an event id this server returned", path)
	}
}

// Cursor is a parsed cursor whose tenant is not known yet (a connection's
// page over resources of several tenants).
type Cursor struct {
	Hash, Seq uint64
}

// ParseAnyCursor reads an event id given as a cursor at path, of any
// tenant's stream; "" is the zero Cursor. Errors as ParseCursor's.
func ParseAnyCursor(path, cursor string) (Cursor, error) {
	if cursor == "" {
		return Cursor{}, nil
	}
	if err := page.CheckCursorLength(path, cursor); err != nil {
		return Cursor{}, err
	}
	hash, seq, err := decode(cursor) // 0: the stream's start, as ParseCursor reads it
	switch err {
	case nil:
		return Cursor{Hash: hash, Seq: seq}, nil
	case errLegacy:
		return Cursor{}, ExpiredCursor(path)
	default:
		return Cursor{}, errs.Invalid(path, "%s is not an event id this server returned", path)
	}
}

// ExpiredCursor is the error of a cursor older than retention.
func ExpiredCursor(path string) error {
	return errs.E(errs.InvalidState, "the cursor is older than the event retention; start again without a cursor").
		With("reason", "expired-cursor").With("path", path)
}

// --- events -------------------------------------------------------------

// Event is one stored event.
type Event struct {
	EventID      string    `json:"eventId" doc:"The event's id (evt_ and 26 characters), sorting in the tenant's stream order: the resume cursor."`
	Type         string    `json:"type" doc:"The dotted event type (the CloudEvents convention): instance.created … instance.failed, node.joined, node.updated, node.cordoned, node.uncordoned, node.removed, inventory.changed, joinRequest.pending, joinRequest.approved, joinRequest.denied, joinRequest.expired, workflow.created, workflow.step, workflow.succeeded, workflow.failed, workflow.canceled, reservation.created, reservation.canceled, reservation.expired."`
	TenantID     string    `json:"tenantId" doc:"The tenant whose stream holds the event."`
	ResourceType string    `json:"resourceType" schema:"EventResourceType" doc:"The kind of resource resourceId names."`
	ResourceID   string    `json:"resourceId" doc:"The instance, node, join request, workflow or reservation id."`
	PoolID       *string   `json:"poolId" doc:"The pool of the resource, when it is in one."`
	OccurredAt   time.Time `json:"occurredAt" doc:"When the change that wrote the event was made."`
	// Data is the resource as of the event in the method surface's form
	// (inventory.changed: the snapshot's id and the diff's changes).
	Data json.RawMessage `json:"data" schema:"EventData" doc:"The resource as of the event, in the method surface's form (a workflow's without its profileDocument and its steps' with, which never change; inventory.changed: the node, the snapshot id and the diff's changes)."`

	Seq uint64 `json:"-"`
	// Instance holds the instance fields of an instance.* event's data.
	Instance *InstanceFields `json:"-"`
}

// InstanceFields are what an instance event's data says of the instance.
type InstanceFields struct {
	ProjectID    *string `json:"projectId"`
	State        string  `json:"state"`
	DesiredState string  `json:"desiredState"`
	StateReason  *string `json:"stateReason"`
}

// Record is what a change writes.
type Record struct {
	TenantID   string
	Type       string // one of AllTypes; the resource type follows from it
	ResourceID string
	PoolID     string // "" when the resource is in no pool
	// Data is the resource as of the change (marshaled as JSON), or its
	// JSON already.
	Data any
}

// ord orders the writes of one transaction (all made by this process).
var ord atomic.Int64

// Write stores one event in the caller's transaction (the one making the
// change). It becomes readable when that transaction has committed and the
// sequencer has numbered it.
func Write(ctx context.Context, q store.Q, r Record) error {
	kind, ok := Kinds[r.Type]
	if !ok {
		return fmt.Errorf("events: unknown event type %q", r.Type)
	}
	var data []byte
	switch d := r.Data.(type) {
	case json.RawMessage:
		data = d
	case []byte:
		data = d
	default:
		b, err := json.Marshal(d)
		if err != nil {
			return err
		}
		data = b
	}
	var pool *string
	if r.PoolID != "" {
		pool = &r.PoolID
	}
	if err := store.ExecAtCommit(ctx, q, `INSERT INTO event_inbox (tenant_id, ord, type, resource_type, resource_id, pool_id, data)
		VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb)`,
		r.TenantID, ord.Add(1), r.Type, kind, r.ResourceID, pool, string(data)); err != nil {
		return store.Wrap(err)
	}
	store.NoteEvents(ctx, q, r.TenantID)
	return nil
}

// --- reading ------------------------------------------------------------

// Filter selects events of one tenant.
type Filter struct {
	TenantID   string
	ResourceID string // "" for any
	PoolID     string // "" for any
	// Types keeps the events whose type is one of them, or starts with one
	// that ends in "." (a prefix: "node."); empty keeps every type.
	Types []string
	// Resources keeps only events of these resource types (the ones the
	// reader may read); nil keeps every type.
	Resources []string
}

// Matches reports whether the filter keeps the event.
func (f *Filter) Matches(ev *Event) bool {
	if f.ResourceID != "" && ev.ResourceID != f.ResourceID {
		return false
	}
	if f.PoolID != "" && (ev.PoolID == nil || *ev.PoolID != f.PoolID) {
		return false
	}
	if f.Resources != nil && !contains(f.Resources, ev.ResourceType) {
		return false
	}
	if len(f.Types) == 0 {
		return true
	}
	for _, t := range f.Types {
		if t == ev.Type || (strings.HasSuffix(t, ".") && strings.HasPrefix(ev.Type, t)) {
			return true
		}
	}
	return false
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// where is the filter's condition over events e, with its arguments
// numbered from next on.
func (f *Filter) where(args *[]any) string {
	add := func(v any) string {
		*args = append(*args, v)
		return fmt.Sprintf("$%d", len(*args))
	}
	w := "e.tenant_id = " + add(f.TenantID)
	if f.ResourceID != "" {
		w += " AND e.resource_id = " + add(f.ResourceID)
	}
	if f.PoolID != "" {
		w += " AND e.pool_id = " + add(f.PoolID)
	}
	if f.Resources != nil {
		w += " AND e.resource_type = ANY(" + add(f.Resources) + ")"
	}
	if len(f.Types) > 0 {
		var exact, prefixes []string
		for _, t := range f.Types {
			if strings.HasSuffix(t, ".") {
				prefixes = append(prefixes, t)
			} else {
				exact = append(exact, t)
			}
		}
		w += " AND (e.type = ANY(" + add(exact) + ") OR e.type ^@ ANY(" + add(prefixes) + "))"
	}
	return w
}

type row struct {
	TenantID     string    `db:"tenant_id"`
	Seq          int64     `db:"seq"`
	Type         string    `db:"type"`
	ResourceType string    `db:"resource_type"`
	ResourceID   string    `db:"resource_id"`
	PoolID       *string   `db:"pool_id"`
	Data         string    `db:"data"`
	OccurredAt   time.Time `db:"occurred_at"`
}

// Cols are the columns a row reads from events e.
const Cols = `e.tenant_id, e.seq, e.type, e.resource_type, e.resource_id, e.pool_id, e.data::text AS data, e.occurred_at`

func (r *row) event() Event {
	ev := Event{EventID: EncodeID(r.TenantID, uint64(r.Seq)), Type: r.Type, TenantID: r.TenantID, ResourceType: r.ResourceType,
		ResourceID: r.ResourceID, PoolID: r.PoolID, OccurredAt: r.OccurredAt.UTC(), Data: json.RawMessage(r.Data), Seq: uint64(r.Seq)}
	if r.ResourceType == ResInstance {
		var f InstanceFields
		if json.Unmarshal(ev.Data, &f) == nil {
			ev.Instance = &f
		}
	}
	return ev
}

// byType returns the types a filter of types or resource types keeps,
// exactly (its prefixes and resource types expanded over AllTypes), and
// whether its events are read type by type: it narrows the stream by type
// and names no resource (a resource's events are read through their own
// index, as few as they are).
func (f *Filter) byType() ([]string, bool) {
	if (len(f.Types) == 0 && f.Resources == nil) || f.ResourceID != "" {
		return nil, false
	}
	kinds := Filter{Types: f.Types, Resources: f.Resources} // by type alone
	out := []string{}
	for _, t := range AllTypes {
		if kinds.Matches(&Event{Type: t, ResourceType: Kinds[t]}) {
			out = append(out, t)
		}
	}
	return out, true
}

// Page returns up to limit events of the filter after sequence number
// after (0 for the start), in stream order. It does not check retention:
// see CheckCursor.
//
// A stream narrowed only by types (or the reader's resource types) is read
// type by type through events_type_idx, each type's first limit events
// after the cursor merged in order: filtered over the tenant's whole
// stream, a type that matched few events read every row of it (0.5 s over
// 500,000 events, a probe's; a viewer's requests reached the statement
// timeout). A pool's events of some types are read so too, each type's
// filtered by the pool (a pool's instanceEvents replay read the pool's
// whole stream, its hosts' inventory events included). A resource's
// events are read through their own index, as few as they are.
func Page(ctx context.Context, q store.Q, f Filter, after uint64, limit int) ([]Event, error) {
	var rows []row
	var err error
	if types, ok := f.byType(); ok {
		if len(types) == 0 {
			return []Event{}, nil
		}
		// The pool's condition is written only when there is one, so that
		// a cached plan of either statement keeps its own index.
		args, pool := []any{f.TenantID, types, int64(after), limit}, ""
		if f.PoolID != "" {
			args, pool = append(args, f.PoolID), ` AND e.pool_id = $5`
		}
		err = q.SelectContext(ctx, &rows, `SELECT x.* FROM unnest($2::text[]) AS t(type)
			CROSS JOIN LATERAL (SELECT `+Cols+` FROM events e WHERE e.tenant_id = $1 AND e.type = t.type AND e.seq > $3`+pool+`
				ORDER BY e.seq LIMIT $4) x
			ORDER BY x.seq LIMIT $4`, args...)
	} else {
		args := []any{}
		w := f.where(&args)
		args = append(args, int64(after), limit)
		err = q.SelectContext(ctx, &rows, `SELECT `+Cols+` FROM events e WHERE `+w+
			fmt.Sprintf(` AND e.seq > $%d ORDER BY e.seq LIMIT $%d`, len(args)-1, len(args)), args...)
	}
	if err != nil {
		return nil, store.Wrap(err)
	}
	out := make([]Event, len(rows))
	for i := range rows {
		out[i] = rows[i].event()
	}
	return out, nil
}

// Count counts the events of f (the graph's Tenant.events totalCount).
func Count(ctx context.Context, q store.Q, f Filter) (int, error) {
	var n int
	if types, ok := f.byType(); ok && f.PoolID == "" {
		// Through events_type_idx, as Page reads (a pool's count, never
		// asked for, is counted as below).
		err := q.GetContext(ctx, &n, `SELECT count(*) FROM events e WHERE e.tenant_id = $1 AND e.type = ANY($2)`, f.TenantID, types)
		return n, store.Wrap(err)
	}
	args := []any{}
	w := f.where(&args)
	err := q.GetContext(ctx, &n, `SELECT count(*) FROM events e WHERE `+w, args...)
	return n, store.Wrap(err)
}

// LastSeq is the last number of the stream of event_streams s: its last
// event's, or pruned_seq once retention took every event (a pass locks
// the stream's row and does not update it: migration 00016).
const LastSeq = `greatest(s.pruned_seq, coalesce((SELECT max(e.seq) FROM events e WHERE e.tenant_id = s.tenant_id), 0))`

// Last returns the tenant's last sequence number (0 before its first
// event).
func Last(ctx context.Context, q store.Q, tenantID string) (uint64, error) {
	var n []int64
	if err := q.SelectContext(ctx, &n, `SELECT `+LastSeq+` FROM event_streams s WHERE s.tenant_id = $1`, tenantID); err != nil {
		return 0, store.Wrap(err)
	}
	if len(n) == 0 {
		return 0, nil
	}
	return uint64(n[0]), nil
}

// CheckCursor refuses a cursor of the tenant's stream that retention has
// overtaken: events after it may have been pruned (INVALID_STATE,
// details.reason "expired-cursor", naming path); and one after the
// stream's last event, which this server never returned (INVALID_INPUT:
// reading on from it would skip events silently). Call it for a cursor
// given only (no cursor starts at the oldest retained event): the id of
// number 0, the stream's start, is a cursor too, overtaken once retention
// pruned the stream's first event (as every surface answers it; the reads
// took it as no cursor while the subscriptions refused it).
func CheckCursor(ctx context.Context, q store.Q, path, tenantID string, after uint64) error {
	var s []struct {
		Last   int64 `db:"last_seq"`
		Pruned int64 `db:"pruned_seq"`
	}
	if err := q.SelectContext(ctx, &s, `SELECT `+LastSeq+` AS last_seq, s.pruned_seq FROM event_streams s WHERE s.tenant_id = $1`, tenantID); err != nil {
		return store.Wrap(err)
	}
	var last, pruned uint64
	if len(s) > 0 {
		last, pruned = uint64(s[0].Last), uint64(s[0].Pruned)
	}
	return checkCursor(path, after, last, pruned)
}

// checkCursor judges a cursor against its stream's last number and
// retention mark.
func checkCursor(path string, after, last, pruned uint64) error {
	switch {
	case after > last:
		return errs.Invalid(path, "%s is not an event id this server returned", path)
	case after < pruned:
		return ExpiredCursor(path)
	}
	return nil
}

// Retained refuses a position of the tenant's stream that retention has
// overtaken since (INVALID_STATE, details.reason "expired-cursor" at
// "after"): read after a page of events from after, it says whether the
// read may have missed pruned ones (the prune deletes and raises the mark
// in one commit, and the mark only rises). A subscription reads on by
// itself from a cursor, or behind the ring, long after its cursor was
// checked: it skipped what was pruned meanwhile, silently (a probe's slow
// readers, with retention at one minute, missed 2,477 of 6,000 events).
func Retained(ctx context.Context, q store.Q, path, tenantID string, after uint64) error {
	var pruned []int64
	if err := q.SelectContext(ctx, &pruned, `SELECT pruned_seq FROM event_streams WHERE tenant_id = $1`, tenantID); err != nil {
		return store.Wrap(err)
	}
	if len(pruned) > 0 && after < uint64(pruned[0]) {
		return ExpiredCursor(path)
	}
	return nil
}

// CheckCursorOf is CheckCursor for a stream whose last number and
// retention mark the caller has read (a cursor given: 0 is the stream's
// start, overtaken once anything was pruned).
func CheckCursorOf(path string, after, last, pruned uint64) error {
	return checkCursor(path, after, last, pruned)
}

// Prune deletes, per tenant, the events up to the last one that occurred
// before cutoff (a prefix of each stream) and records how far it pruned.
// It returns the number deleted.
func Prune(ctx context.Context, db *store.DB, cutoff time.Time) (int64, error) {
	var n int64
	err := db.GetContext(ctx, &n, `WITH c AS (
			SELECT tenant_id, max(seq) AS upto FROM events WHERE occurred_at < $1 GROUP BY tenant_id),
		d AS (DELETE FROM events e USING c WHERE e.tenant_id = c.tenant_id AND e.seq <= c.upto RETURNING 1),
		m AS (UPDATE event_streams s SET pruned_seq = c.upto FROM c WHERE s.tenant_id = c.tenant_id AND s.pruned_seq < c.upto)
		SELECT count(*) FROM d`, cutoff)
	return n, store.Wrap(err)
}
