// Package inventory keeps each node's hardware and software inventory as the
// daemon reports it: an append-only history of snapshots, a new one stored
// each time the hash of the canonical JSON (RFC 8785) of the reported
// sections changes. Reads decide compute:nodes:read on compute-node/{nodeId}
// and answer only for nodes the calling tenant owns.
package inventory

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/oklog/ulid/v2"

	"github.com/bettercompute/computed/internal/authz"
	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/events"
	"github.com/bettercompute/computed/internal/ids"
	"github.com/bettercompute/computed/internal/nodes"
	"github.com/bettercompute/computed/internal/page"
	"github.com/bettercompute/computed/internal/pattern"
	"github.com/bettercompute/computed/internal/registry"
	"github.com/bettercompute/computed/internal/relay"
	"github.com/bettercompute/computed/internal/reqctx"
	"github.com/bettercompute/computed/internal/rfc3339"
	"github.com/bettercompute/computed/internal/store"
)

// Names of the inventory's schemas for the OpenAPI document: sections are
// described by the Go type the report decoder fills, with the decoder's
// bounds (schema.go).
var (
	SectionsSchema = registry.DefineSchemaOf[Sections]("InventorySections")
	ChangeTypeEnum = registry.DefineEnum("InventoryChangeType", "what changed between two snapshots", GPUMissing, GPUAdded, DiskReplaced, DriverChanged, MIGLayoutChanged)
	ChangeValue    = registry.DefineAnyOf("InventoryChangeValue", "a GPU (gpu.*), a disk (disk.replaced), a version string (driver.changed), a MIG layout (mig.layout.changed), or null where the device or driver was absent",
		reflect.TypeFor[GPU](), reflect.TypeFor[Disk](), reflect.TypeFor[string](), reflect.TypeFor[MIGLayout](), nil)
)

// MaxReport is the largest inventory.report body accepted.
const MaxReport = 256 << 10

// Snapshot is one stored report.
type Snapshot struct {
	ID          string          `json:"id" db:"snapshot_id" doc:"The snapshot's id (inv_ and a ULID)."`
	NodeID      string          `json:"nodeId" db:"node_id" doc:"The node that reported it."`
	Hash        string          `json:"hash" db:"hash" doc:"SHA-256 (hex) of the RFC 8785 canonical JSON of sections."`
	Sections    json.RawMessage `json:"sections" db:"-" schema:"InventorySections" doc:"The report's sections as stored (canonical JSON)."`
	CollectedAt time.Time       `json:"collectedAt" db:"collected_at" doc:"When the node collected the report: the report's collectedAt, or when it was received when it gave none."`
	CreatedAt   time.Time       `json:"createdAt" db:"created_at" doc:"When the snapshot was stored."`

	SectionsText string `json:"-" db:"sections"`

	typed *typedCache
}

// ReadSize is what reading the snapshot spends of a request's read budget
// (store.SelectSpending): its sections.
func (s *Snapshot) ReadSize() int { return len(s.SectionsText) }

// typedCache parses a snapshot's sections once however many typed fields
// (gpus, disks, nics, drivers) a query reads.
type typedCache struct {
	once sync.Once
	s    *Sections
	err  error
}

func (s *Snapshot) fix() *Snapshot {
	s.typed = &typedCache{}
	s.Sections = json.RawMessage(s.SectionsText)
	s.CollectedAt, s.CreatedAt = s.CollectedAt.UTC(), s.CreatedAt.UTC()
	return s
}

// Typed parses the snapshot's sections (stored canonical JSON).
//
// Snapshots are append-only, so a snapshot id always names the same
// sections: parsed sections are kept in a process-wide LRU keyed by id, and
// a dashboard polling the fleet parses each snapshot once. Callers must not
// modify what Typed returns.
func (s *Snapshot) Typed() (*Sections, error) {
	parse := func() (*Sections, error) {
		if c, ok := parsed.Get(s.ID); ok && s.ID != "" {
			return c.s, nil
		}
		v, err := Parse([]byte(s.SectionsText))
		if err == nil && s.ID != "" {
			parsed.Add(s.ID, &cachedSections{s: v, raw: s.Sections})
		}
		return v, err
	}
	if s.typed == nil {
		return parse()
	}
	s.typed.once.Do(func() { s.typed.s, s.typed.err = parse() })
	return s.typed.s, s.typed.err
}

// parsed caches sections by snapshot id, parsed and as stored (about 10 KiB
// parsed and 2.5 KiB stored for an 8-GPU node; 20000 entries bound it near
// 250 MiB at worst).
var parsed, _ = lru.New[string, *cachedSections](20000)

// cachedSections is one snapshot's sections: parsed, and the stored JSON
// (read-only, shared by every request that reads the snapshot).
type cachedSections struct {
	s   *Sections
	raw json.RawMessage
}

const snapCols = `snapshot_id, node_id, hash, sections::text AS sections, collected_at, created_at`

type (
	ReportInput struct {
		NodeID      string          `json:"nodeId"`
		Sections    json.RawMessage `json:"sections"`
		CollectedAt *string         `json:"collectedAt,omitempty"`
	}
	Reported struct {
		Snapshot *Snapshot `json:"snapshot" doc:"The snapshot stored, or the node's latest when the report equals it."`
		Stored   bool      `json:"stored" doc:"False when the report's hash equals the latest snapshot's: nothing new was stored."`
	}
	GetInput struct {
		TenantID string `json:"tenantId"`
		NodeID   string `json:"nodeId"`
	}
	HistoryInput struct {
		TenantID string `json:"tenantId"`
		NodeID   string `json:"nodeId"`
		Limit    int    `json:"limit"`
		Cursor   string `json:"cursor,omitempty"`
	}
	DiffInput struct {
		TenantID string `json:"tenantId"`
		NodeID   string `json:"nodeId"`
		From     string `json:"from,omitempty"`
		To       string `json:"to,omitempty"`
	}
	DiffResult struct {
		From    string   `json:"from" doc:"The snapshot compared from; empty when the node has a single snapshot."`
		To      string   `json:"to" doc:"The snapshot compared to."`
		Changes []Change `json:"changes" doc:"The differences, by type (gpu.missing, gpu.added, disk.replaced, driver.changed, mig.layout.changed) then device id."`
	}
)

// maxSkew bounds how far in the future a report's collectedAt may be.
const maxSkew = time.Hour

// MaxHistory is how many snapshots a node's history keeps: storing one
// more drops the oldest.
const MaxHistory = 1000

// Report stores a snapshot when the sections' hash differs from the node's
// latest; an equal report stores nothing and says stored: false. The node
// row is locked so that concurrent reports of one node are ordered.
func Report(ctx context.Context, q store.Q, in *ReportInput) (*Reported, error) {
	_, canonical, hash, err := Decode(in.Sections)
	if err != nil {
		return nil, err
	}
	collected := time.Now().UTC()
	if in.CollectedAt != nil {
		t, err := rfc3339.Field("collectedAt", *in.CollectedAt)
		if err != nil {
			return nil, err
		}
		if t.After(time.Now().Add(maxSkew)) {
			return nil, errs.Invalid("collectedAt", "collectedAt is more than an hour in the future")
		}
		collected = t.UTC()
	}
	var node struct {
		State    string         `db:"state"`
		Latest   sql.NullString `db:"latest_snapshot_id"`
		TenantID string         `db:"tenant_id"`
		PoolID   string         `db:"pool_id"`
	}
	err = q.GetContext(ctx, &node, `SELECT state, latest_snapshot_id, tenant_id, pool_id FROM nodes WHERE node_id = $1 FOR UPDATE`, in.NodeID)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errs.E(errs.NotFound, "node %s not found", in.NodeID)
	}
	if err != nil {
		return nil, store.Wrap(err)
	}
	if node.State == nodes.Removed {
		return nil, errs.E(errs.InvalidState, "node %s is removed", in.NodeID).With("state", node.State)
	}
	var before *Sections // a first snapshot has no changes, as inventory.diff says
	if node.Latest.Valid {
		var latest Snapshot
		if err := q.GetContext(ctx, &latest, `SELECT `+snapCols+` FROM inventory_snapshots WHERE snapshot_id = $1`, node.Latest.String); err != nil {
			return nil, store.Wrap(err)
		}
		if latest.Hash == hash {
			return &Reported{Snapshot: latest.fix(), Stored: false}, nil
		}
		if before, err = latest.Typed(); err != nil {
			return nil, err
		}
	}
	id := after(node.Latest.String)
	var s Snapshot
	err = q.GetContext(ctx, &s, `INSERT INTO inventory_snapshots (snapshot_id, node_id, hash, sections, collected_at)
		VALUES ($1, $2, $3, $4::json, $5) RETURNING `+snapCols, id, in.NodeID, hash, string(canonical), collected)
	if err != nil {
		return nil, store.Wrap(err)
	}
	if _, err := q.ExecContext(ctx, `UPDATE nodes SET latest_snapshot_id = $2 WHERE node_id = $1`, in.NodeID, id); err != nil {
		return nil, store.Wrap(err)
	}
	// The history keeps the node's MaxHistory newest snapshots: a node
	// alternating two reports stored one each time, without end. Ids sort
	// in report order (after), and the node's row is locked.
	if _, err := q.ExecContext(ctx, `DELETE FROM inventory_snapshots WHERE node_id = $1 AND snapshot_id <
			(SELECT snapshot_id FROM inventory_snapshots WHERE node_id = $1 ORDER BY snapshot_id DESC OFFSET $2 LIMIT 1)`,
		in.NodeID, MaxHistory-1); err != nil {
		return nil, store.Wrap(err)
	}
	now, err := s.Typed()
	if err != nil {
		return nil, err
	}
	// The diff against the previous snapshot reaches dashboards with the
	// snapshot (a gpu.missing the moment the daemon reports it).
	change := Changed{NodeID: in.NodeID, SnapshotID: id, Previous: nullable(node.Latest), Changes: Diff(before, now)}
	if err := events.Write(ctx, q, events.Record{TenantID: node.TenantID, Type: events.InventoryChanged, ResourceID: in.NodeID,
		PoolID: node.PoolID, Data: change}); err != nil {
		return nil, err
	}
	return &Reported{Snapshot: s.fix(), Stored: true}, nil
}

// Changed is an inventory.changed event's data: the snapshot stored and
// its changes against the node's previous one (none for a node's first
// snapshot).
type Changed struct {
	NodeID     string   `json:"nodeId"`
	SnapshotID string   `json:"snapshotId"`
	Previous   *string  `json:"previousSnapshotId"`
	Changes    []Change `json:"changes"`
}

func nullable(s sql.NullString) *string {
	if !s.Valid {
		return nil
	}
	return &s.String
}

// after returns a new snapshot id that sorts after prev, so that history
// (ordered by id) stays in report order even when replicas' clocks or
// millisecond ties disagree.
func after(prev string) string {
	id := ids.New(ids.Inventory)
	if prev == "" || id > prev {
		return id
	}
	u, err := ulid.ParseStrict(strings.ToUpper(strings.TrimPrefix(prev, ids.Inventory+"_")))
	if err != nil {
		return id
	}
	b := u[:]
	for i := len(b) - 1; i >= 0; i-- { // prev + 1
		b[i]++
		if b[i] != 0 {
			break
		}
	}
	return ids.Inventory + "_" + strings.ToLower(u.String())
}

func noInventory(nodeID string) error {
	return errs.E(errs.NotFound, "node %s has no inventory yet", nodeID)
}

// visible is the visibility predicate over snapshots s: a snapshot is
// visible where its node is (nodes.Visible). tenants is a text[] expression.
func visible(tenants string) string {
	return `EXISTS (SELECT 1 FROM nodes n WHERE n.node_id = s.node_id AND ` + nodes.Visible(tenants) + `)`
}

// Get returns the node's latest snapshot.
func Get(ctx context.Context, q store.Q, in *GetInput) (*Snapshot, error) {
	var s Snapshot
	err := q.GetContext(ctx, &s, `SELECT `+snapCols+` FROM inventory_snapshots s
		WHERE snapshot_id = (SELECT latest_snapshot_id FROM nodes WHERE node_id = $1) AND `+visible("ARRAY[$2]"), in.NodeID, in.TenantID)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, noInventory(in.NodeID)
	}
	if err != nil {
		return nil, store.Wrap(err)
	}
	return s.fix(), nil
}

// History pages the node's snapshots newest first; the cursor is the id of
// the last snapshot returned.
func History(ctx context.Context, q store.Q, in *HistoryInput) (*page.Page[Snapshot], error) {
	cursor := in.Cursor
	if cursor == "" {
		cursor = "~" // sorts after every id
	} else {
		// The cursor is the id of a snapshot of this node (the last one
		// read): any other id was taken as a place to cut the page, another
		// tenant's snapshot's included, where events.list refuses another
		// stream's cursor.
		var ok bool
		if err := q.GetContext(ctx, &ok, `SELECT EXISTS (SELECT 1 FROM inventory_snapshots WHERE snapshot_id = $1 AND node_id = $2)`, in.Cursor, in.NodeID); err != nil {
			return nil, store.Wrap(err)
		}
		if !ok {
			return nil, errs.Invalid("cursor", "cursor is not a snapshot of node %s", in.NodeID)
		}
	}
	rows := []Snapshot{}
	err := store.SelectSpending(ctx, q, &rows, `SELECT `+snapCols+` FROM inventory_snapshots s
		WHERE s.node_id = $1 AND s.snapshot_id < $2
		  AND `+visible("ARRAY[$3]")+`
		ORDER BY s.snapshot_id DESC LIMIT $4`, in.NodeID, cursor, in.TenantID, in.Limit+1)
	if err != nil {
		return nil, store.Wrap(err)
	}
	for i := range rows {
		rows[i].fix()
	}
	items, cur := page.Trim(rows, in.Limit, func(s Snapshot) string { return s.ID })
	return &page.Page[Snapshot]{Items: items, Cursor: cur}, nil
}

// DiffKey names one diff: a node and optional from and to references
// (snapshot id or hash; "" for the defaults).
type DiffKey struct{ NodeID, From, To string }

// DiffPair is what a diff compares: the resolved snapshots (From nil when
// the node has a single snapshot before To), or a NOT_FOUND error.
type DiffPair struct {
	From, To *Snapshot
	Err      error
}

type pairRow struct {
	Ord      int            `db:"ord"`
	Any      bool           `db:"has_any"`
	ToID     sql.NullString `db:"to_id"`
	ToHash   sql.NullString `db:"to_hash"`
	ToSec    sql.NullString `db:"to_sections"`
	ToAt     sql.NullTime   `db:"to_collected"`
	ToMade   sql.NullTime   `db:"to_created"`
	FromID   sql.NullString `db:"from_id"`
	FromHash sql.NullString `db:"from_hash"`
	FromSec  sql.NullString `db:"from_sections"`
	FromAt   sql.NullTime   `db:"from_collected"`
	FromMade sql.NullTime   `db:"from_created"`
}

// Pairs resolves many diffs in one statement. Without to, the latest
// snapshot is used; without from, the snapshot before to. A reference by
// hash names the newest of the node's snapshots with that hash. A node not
// visible in scope has no inventory.
func Pairs(ctx context.Context, q store.Q, scope authz.Scope, keys []DiffKey) ([]DiffPair, error) {
	nodeIDs, froms, tos := make([]string, len(keys)), make([]string, len(keys)), make([]string, len(keys))
	for i, k := range keys {
		nodeIDs[i], froms[i], tos[i] = k.NodeID, k.From, k.To
	}
	var rows []pairRow
	err := q.SelectContext(ctx, &rows, `
		SELECT k.ord,
		       EXISTS (SELECT 1 FROM inventory_snapshots s WHERE s.node_id = k.node_id AND `+authz.Where("$4", visible)+`) AS has_any,
		       t.snapshot_id AS to_id, t.hash AS to_hash, t.sections::text AS to_sections, t.collected_at AS to_collected, t.created_at AS to_created,
		       f.snapshot_id AS from_id, f.hash AS from_hash, f.sections::text AS from_sections, f.collected_at AS from_collected, f.created_at AS from_created
		FROM unnest($1::text[], $2::text[], $3::text[]) WITH ORDINALITY AS k(node_id, from_ref, to_ref, ord)
		LEFT JOIN LATERAL (
			SELECT * FROM inventory_snapshots s
			WHERE s.node_id = k.node_id AND (k.to_ref = '' OR s.snapshot_id = k.to_ref OR s.hash = k.to_ref)
			ORDER BY s.snapshot_id DESC LIMIT 1
		) t ON true
		LEFT JOIN LATERAL (
			SELECT * FROM inventory_snapshots s
			WHERE s.node_id = k.node_id AND t.snapshot_id IS NOT NULL
			  AND CASE WHEN k.from_ref = '' THEN s.snapshot_id < t.snapshot_id
			           ELSE s.snapshot_id = k.from_ref OR s.hash = k.from_ref END
			ORDER BY s.snapshot_id DESC LIMIT 1
		) f ON true
		ORDER BY k.ord`, nodeIDs, froms, tos, scope.Arg())
	if err != nil {
		return nil, store.Wrap(err)
	}
	out := make([]DiffPair, len(keys))
	for _, r := range rows {
		i := r.Ord - 1
		k := keys[i]
		switch {
		case !r.Any:
			out[i].Err = noInventory(k.NodeID)
			continue
		case !r.ToID.Valid:
			out[i].Err = errs.E(errs.NotFound, "snapshot %s not found for node %s", k.To, k.NodeID).With("path", "to")
			continue
		case k.From != "" && !r.FromID.Valid:
			out[i].Err = errs.E(errs.NotFound, "snapshot %s not found for node %s", k.From, k.NodeID).With("path", "from")
			continue
		}
		out[i].To = (&Snapshot{ID: r.ToID.String, NodeID: k.NodeID, Hash: r.ToHash.String, SectionsText: r.ToSec.String,
			CollectedAt: r.ToAt.Time, CreatedAt: r.ToMade.Time}).fix()
		if r.FromID.Valid {
			out[i].From = (&Snapshot{ID: r.FromID.String, NodeID: k.NodeID, Hash: r.FromHash.String, SectionsText: r.FromSec.String,
				CollectedAt: r.FromAt.Time, CreatedAt: r.FromMade.Time}).fix()
		}
	}
	return out, nil
}

// Compare diffs a resolved pair.
func (p DiffPair) Compare() (*DiffResult, error) {
	if p.Err != nil {
		return nil, p.Err
	}
	to, err := p.To.Typed()
	if err != nil {
		return nil, err
	}
	res := &DiffResult{To: p.To.ID, Changes: []Change{}}
	if p.From == nil {
		return res, nil
	}
	from, err := p.From.Typed()
	if err != nil {
		return nil, err
	}
	res.From, res.Changes = p.From.ID, Diff(from, to)
	return res, nil
}

// DiffSnapshots compares two of the node's snapshots. That the tenant owns
// the node is the decision's (compute:nodes:read on compute-node/{nodeId}
// resolves only nodes of the named tenant).
func DiffSnapshots(ctx context.Context, q store.Q, in *DiffInput) (*DiffResult, error) {
	pairs, err := Pairs(ctx, q, authz.TenantScope(in.TenantID), []DiffKey{{NodeID: in.NodeID, From: in.From, To: in.To}})
	if err != nil {
		return nil, err
	}
	return pairs[0].Compare()
}

// History pages are smaller than others (the seed page's bounds); the
// graph's inventoryHistory keeps the same ones.
const (
	HistoryDefaultLimit = 20
	HistoryMaxLimit     = 100
)

// --- batched reads for the graph --------------------------------------------

// ByID loads the snapshots of snapshotIDs visible in scope in one
// statement.
func ByID(ctx context.Context, q store.Q, scope authz.Scope, snapshotIDs []string) (map[string]*Snapshot, error) {
	// Snapshots never change: the sections of those already cached are not
	// read again (about 2.5 KB a snapshot, 5 MB per fleet query).
	cached := make(map[string]*cachedSections)
	var known []string
	for _, id := range snapshotIDs {
		if c, ok := parsed.Get(id); ok && c.raw != nil {
			cached[id] = c
			known = append(known, id)
		}
	}
	var rows []Snapshot
	if err := store.SelectSpending(ctx, q, &rows, `SELECT snapshot_id, node_id, hash,
		       CASE WHEN snapshot_id = ANY($2) THEN '' ELSE sections::text END AS sections, collected_at, created_at
		FROM inventory_snapshots s WHERE snapshot_id = ANY($1) AND `+authz.Where("$3", visible),
		snapshotIDs, known, scope.Arg()); err != nil {
		return nil, store.Wrap(err)
	}
	out := make(map[string]*Snapshot, len(rows))
	for i := range rows {
		s := &rows[i]
		if c := cached[s.ID]; c != nil && s.SectionsText == "" {
			s.typed = &typedCache{}
			s.typed.once.Do(func() { s.typed.s = c.s })
			s.Sections = c.raw
			s.CollectedAt, s.CreatedAt = s.CollectedAt.UTC(), s.CreatedAt.UTC()
			out[s.ID] = s
			continue
		}
		out[s.ID] = s.fix()
	}
	return out, nil
}

type nodeSnapRow struct {
	Parent string `db:"parent_key"`
	Total  int    `db:"total_count"`
	Snapshot
}

// PagesByNode returns one page of each node's history, newest first, in one
// statement; after is a snapshot id ("" for the first page).
func PagesByNode(ctx context.Context, q store.Q, scope authz.Scope, nodeIDs []string, after string, limit int) (page.Rows[Snapshot], error) {
	if after == "" {
		after = "~"
	}
	var rows []nodeSnapRow
	err := store.SelectSpending(ctx, q, &rows, `
		WITH t AS MATERIALIZED (
			SELECT t.parent, (SELECT count(*) FROM inventory_snapshots s WHERE s.node_id = t.parent AND `+authz.Where("$4", visible)+`) AS total_count
			FROM unnest($1::text[]) AS t(parent))
		SELECT t.parent AS parent_key, t.total_count,
		       x.*
		FROM t
		CROSS JOIN LATERAL (
			SELECT `+snapCols+` FROM inventory_snapshots s WHERE s.node_id = t.parent AND s.snapshot_id < $2
			  AND `+authz.Where("$4", visible)+`
			ORDER BY s.snapshot_id DESC LIMIT $3
		) x`, nodeIDs, after, limit+1, scope.Arg())
	var r page.Rows[Snapshot]
	for _, x := range rows {
		x.Snapshot.fix()
		r.Parents, r.Totals, r.Items = append(r.Parents, x.Parent), append(r.Totals, x.Total), append(r.Items, x.Snapshot)
	}
	return r, store.Wrap(err)
}

// CountByNode counts each node's snapshots.
func CountByNode(ctx context.Context, q store.Q, scope authz.Scope, nodeIDs []string) (map[string]int, error) {
	return store.CountBy(ctx, q, `SELECT t.parent AS k,
			(SELECT count(*) FROM inventory_snapshots s WHERE s.node_id = t.parent AND `+authz.Where("$2", visible)+`) AS n
		FROM unnest($1::text[]) AS t(parent)`, nodeIDs, scope.Arg())
}

// --- registry ------------------------------------------------------------------

// Group describes the inventory group.
var Group = registry.Group{Name: "inventory", Summary: "A node's hardware and software inventory as the daemon reports it, kept as an append-only history of snapshots: a new snapshot is stored each time the node's reported section set changes. Every method decides `compute:nodes:read` on `compute-node/{nodeId}` and only answers for nodes the calling tenant owns. See [Inventory and health](../guides/nodes/inventory-and-health.md)."}

var RefPattern = `^(inv_[0-9a-hjkmnp-tv-z]{26,52}|[0-9a-f]{64})$`

var refRe = pattern.MustCompile(RefPattern)

// ValidRef reports a well-formed snapshot reference (id or hash).
func ValidRef(s string) bool { return refRe.MatchString(s) }

// Methods are the inventory group's registry entries.
func Methods() []registry.Method {
	m := func(name string, kind registry.Kind, perm authz.Permission, phase, summary string, notes []string, in ...registry.Field) registry.Method {
		return registry.Method{Group: "inventory", Name: name, Kind: kind, Permission: perm, Resource: authz.Node,
			Summary: summary, Notes: notes, Module: "inventory", Phase: phase, Input: in}
	}
	node := func(more ...registry.Field) []registry.Field {
		return append([]registry.Field{registry.TenantID(), registry.ID("nodeId", ids.Node)}, more...)
	}
	report := m("report", registry.Mutation, authz.InventoryReport, "v0.1",
		"Stores the node's report as a new snapshot when its canonical hash differs from the latest; returns the snapshot and whether it was stored.",
		[]string{"Called with the node's own credential (the one `nodes.join` returned); any other token is `PERMISSION_DENIED`.",
			"`sections` holds `system`, `cpu`, `memory`, `gpus`, `disks`, `nics`, `drivers`, `firmware` and `os`; unknown sections or fields, wrong types, more than 64 GPUs or 256 disks or NICs, duplicate device ids (GPU and MIG UUIDs, one namespace: a MIG device may not carry a GPU's UUID; disk WWN; MAC: compared regardless of case, as the diff compares them; a disk slot exactly) and nesting deeper than 8 levels are `INVALID_INPUT` with the path.",
			"The hash is the SHA-256 (hex) of the RFC 8785 canonical JSON of `sections`; a report equal to the latest stores nothing and returns the latest with `stored: false`. Snapshots are never updated; the history keeps the node's " + strconv.Itoa(MaxHistory) + " newest (see `inventory.history`).",
			"`collectedAt` (RFC 3339) defaults to now and may be at most an hour in the future."},
		registry.ID("nodeId", ids.Node),
		registry.Field{Name: "sections", Type: registry.Object, Required: true, Open: true, Schema: SectionsSchema, Description: "the daemon's report (contract section 6)"},
		registry.Field{Name: "collectedAt", Type: registry.String, MaxLength: 64, Description: "when the daemon collected the report (RFC 3339)"})
	report.Credential = registry.NodeCred
	report.MaxBody = MaxReport
	report.Quiet = func(out any) bool { r, ok := out.(*Reported); return ok && !r.Stored }
	locateReport := func(ctx context.Context, _ store.Q, in *ReportInput) (authz.Resource, error) {
		r := authz.Resource{Type: authz.Node, ID: in.NodeID}
		if p := reqctx.PrincipalFrom(ctx); p != nil {
			r.TenantID = p.TenantID
		}
		return r, nil
	}
	return []registry.Method{
		registry.Def(report, locateReport, Report),
		registry.Def(m("get", registry.Read, authz.NodesRead, "v0.1",
			"Returns the node's latest inventory snapshot: its hash, its sections and when it was collected.",
			[]string{"NOT_FOUND when the node has no inventory yet or is not owned by the tenant."}, node()...), nil, Get),
		registry.Def(m("history", registry.Read, authz.NodesRead, "v0.2",
			"Lists the node's inventory snapshots newest first; returns a page with a cursor.",
			[]string{"limit is at most 100 (20 by default). The cursor is the id of the last snapshot returned; the id of a snapshot of another node is `INVALID_INPUT`. NOT_FOUND when the node is not owned by the tenant.",
				"The history keeps the node's " + strconv.Itoa(MaxHistory) + " newest snapshots: storing one more drops the oldest, and a cursor naming a dropped snapshot is `INVALID_INPUT` as any id that is not the node's (start again without a cursor)."},
			node(registry.Limit(HistoryDefaultLimit, HistoryMaxLimit), registry.Field{Name: "cursor", Type: registry.String, Pattern: ids.Pattern(ids.Inventory)})...), nil, History),
		registry.Def(m("diff", registry.Read, authz.NodesRead, "v0.2",
			"Compares two of the node's snapshots, named by snapshot id or hash, and returns the changes between them with their stable device ids (GPU UUID, disk WWN or MAC).",
			[]string{"Without `to`, the latest snapshot is used; without `from`, the snapshot before `to`. A node with a single snapshot diffs against nothing: `from` is empty and there are no changes.",
				"Change types are `gpu.missing`, `gpu.added`, `disk.replaced`, `driver.changed` and `mig.layout.changed`, each with `before` and `after` values where they apply.",
				"`NOT_FOUND` when the node has no inventory, a named snapshot does not exist for the node, or the node is not owned by the tenant.",
				"A hash names the newest of the node's snapshots with that hash.",
				"The history keeps the node's " + strconv.Itoa(MaxHistory) + " newest snapshots (see `inventory.history`): the oldest one kept diffs against nothing, as a first snapshot does, and a dropped snapshot named is `NOT_FOUND`."},
			node(registry.Field{Name: "from", Type: registry.String, Pattern: RefPattern},
				registry.Field{Name: "to", Type: registry.String, Pattern: RefPattern})...), nil, DiffSnapshots),
	}
}

// --- graph fields --------------------------------------------------------------
// The graph binds these methods directly: gqlgen runs methods inline, where a
// resolver field costs a goroutine per object (16000 GPUs in a fleet query).

// Driver is one entry of the drivers section.
type Driver struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// GlobalID is the snapshot's Relay id.
func (s *Snapshot) GlobalID() string { return relay.ID("InventorySnapshot", s.ID) }

// GPUList is the typed gpus section.
func (s *Snapshot) GPUList() ([]GPU, error) {
	t, err := s.Typed()
	if err != nil {
		return nil, err
	}
	return t.GPUs, nil
}

// DiskList is the typed disks section.
func (s *Snapshot) DiskList() ([]Disk, error) {
	t, err := s.Typed()
	if err != nil {
		return nil, err
	}
	return t.Disks, nil
}

// NICList is the typed nics section.
func (s *Snapshot) NICList() ([]NIC, error) {
	t, err := s.Typed()
	if err != nil {
		return nil, err
	}
	return t.NICs, nil
}

// DriverList is the drivers section by name.
func (s *Snapshot) DriverList() ([]Driver, error) {
	t, err := s.Typed()
	if err != nil {
		return nil, err
	}
	out := make([]Driver, 0, len(t.Drivers))
	for name, v := range t.Drivers {
		out = append(out, Driver{Name: name, Version: v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// SectionsValue is the raw sections as a JSON value for the graph, spent
// from the request's read budget each time the answer holds it (aliases of
// one loaded page answered it again for nothing).
func (s *Snapshot) SectionsValue(ctx context.Context) (any, error) {
	if err := store.Spend(ctx, len(s.Sections)); err != nil {
		return nil, err
	}
	var v any
	err := json.Unmarshal(s.Sections, &v)
	return v, err
}
