// Package nodes holds the machines of the fleet: join tokens on pools, the
// attestors that admit or defer a join (token, discovery, tpm), the approval
// queue of deferred joins, and the nodes themselves. A node belongs to the
// tenant that owns its pool; decisions are made on compute-pool/{poolId}
// for joins and on compute-node/{nodeId} for nodes.
package nodes

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/bettercompute/computed/internal/auth"
	"github.com/bettercompute/computed/internal/authz"
	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/events"
	"github.com/bettercompute/computed/internal/ids"
	"github.com/bettercompute/computed/internal/page"
	"github.com/bettercompute/computed/internal/pattern"
	"github.com/bettercompute/computed/internal/registry"
	"github.com/bettercompute/computed/internal/relay"
	"github.com/bettercompute/computed/internal/store"
	"github.com/bettercompute/computed/internal/workflows"
)

// The kinds of the package's lists' cursors (both surfaces).
var (
	Cursors        = page.Keyed("node", ids.Pattern(ids.Node))
	RequestCursors = page.Keyed("joinRequest", ids.Pattern(ids.JoinRequest))
	TokenCursors   = page.Keyed("joinToken", ids.Pattern(ids.JoinToken))
	MachineCursors = page.Keyed("expectedMachine", ids.Pattern(ids.Machine))
	KeyCursors     = page.Keyed("allowedKey", `^[0-9a-f]{64}$`)
)

// Node states.
const (
	Ready    = "ready"
	Cordoned = "cordoned"
	Removed  = "removed"
)

// Node is one machine admitted into a pool.
type Node struct {
	NodeID           string            `json:"nodeId" db:"node_id" doc:"The node's id (node_ and a ULID)."`
	TenantID         string            `json:"tenantId" db:"tenant_id" doc:"The tenant that owns the node: its pool's owner."`
	PoolID           string            `json:"poolId" db:"pool_id" doc:"The pool the node joined."`
	Name             string            `json:"name" db:"name" doc:"The node's name: the one its join gave or nodes.update set, else its nodeId."`
	Labels           map[string]string `json:"labels" db:"-" doc:"Label keys to values, as nodes.update sets them."`
	State            string            `json:"state" db:"state" schema:"NodeState" doc:"Ready nodes take work; cordoned ones take no new work; removed ones have lost their credential."`
	Attestor         string            `json:"attestor" db:"attestor" schema:"Attestor" doc:"The attestor that admitted it."`
	Hardware         Hardware          `json:"hardware" db:"-" doc:"The hardware ids the machine joined with."`
	CertExpiresAt    time.Time         `json:"certificateExpiresAt" db:"cert_expires_at" doc:"When the node certificate issued at its join expires (a year after the join)."`
	JoinRequestID    *string           `json:"joinRequestId" db:"join_request_id" doc:"The join request whose approval admitted the node; null when its join was admitted at once."`
	LatestSnapshotID *string           `json:"latestSnapshotId" db:"latest_snapshot_id" doc:"The latest inventory snapshot's id; null before the first report."`
	RowVersion       int               `json:"rowVersion" db:"row_version" doc:"The node's version, one more at every change of its name, labels or state (an inventory report changes none): pass it as expectedVersion to change it only if nobody changed it since."`
	CreatedAt        time.Time         `json:"createdAt" db:"created_at" doc:"When the node joined."`
	UpdatedAt        time.Time         `json:"updatedAt" db:"updated_at" doc:"When the node last changed."`
	RemovedAt        *time.Time        `json:"removedAt" db:"removed_at" doc:"When the node was removed; null unless it was."`

	LabelsText string         `json:"-" db:"labels"`
	SystemUUID sql.NullString `json:"-" db:"system_uuid"`
	Serial     sql.NullString `json:"-" db:"serial"`
	MACsText   string         `json:"-" db:"macs"`
}

func (n *Node) fix() *Node {
	n.Labels = map[string]string{}
	_ = json.Unmarshal([]byte(n.LabelsText), &n.Labels)
	return n.fixGraph()
}

// fixGraph is fix for the graph's batch reads: the labels stay the stored
// JSON (LabelsValue writes it as it is), so 2,000 nodes of a fleet query
// build no map each.
func (n *Node) fixGraph() *Node {
	n.Hardware = Hardware{SystemUUID: n.SystemUUID.String, Serial: n.Serial.String, MACs: []string{}}
	_ = json.Unmarshal([]byte(n.MACsText), &n.Hardware.MACs)
	return n
}

const nodeCols = `node_id, tenant_id, pool_id, name, labels::text AS labels, state, attestor, cert_expires_at, join_request_id,
	latest_snapshot_id, row_version, created_at, updated_at, removed_at, system_uuid, serial, array_to_json(macs)::text AS macs`

type (
	NodeRefInput struct {
		TenantID string `json:"tenantId"`
		NodeID   string `json:"nodeId"`
	}
	NodeListInput struct {
		TenantID string         `json:"tenantId"`
		PoolID   *string        `json:"poolId,omitempty"`
		State    *string        `json:"state,omitempty"`
		Labels   map[string]any `json:"labels,omitempty"`
		Limit    int            `json:"limit"`
		Cursor   string         `json:"cursor,omitempty"`
	}
	NodeUpdateInput struct {
		TenantID        string         `json:"tenantId"`
		NodeID          string         `json:"nodeId"`
		Name            *string        `json:"name,omitempty"`
		Labels          map[string]any `json:"labels,omitempty"`
		ExpectedVersion *int           `json:"expectedVersion,omitempty"`
	}
	NodeChangeInput struct {
		TenantID        string `json:"tenantId"`
		NodeID          string `json:"nodeId"`
		ExpectedVersion *int   `json:"expectedVersion,omitempty"`
	}
)

// Label rules (Kubernetes-style keys and values).
var (
	labelKey   = pattern.MustCompile(`^([a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$`)
	labelValue = pattern.MustCompile(`^([A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?)?$`)
)

// MaxLabels bounds a node's labels.
const MaxLabels = 64

// LabelsSchema is the labels' schema in the OpenAPI document: a map of
// strings, with checkLabels' rules.
var LabelsSchema = registry.DefineSchema("NodeLabels", `{"type": "object", "maxProperties": `+strconv.Itoa(MaxLabels)+`,
	"description": "label keys (an optional DNS prefix and /, then a name of at most 63 characters) to values (at most 63 alphanumeric, '.', '_' or '-' characters)",
	"propertyNames": {"pattern": `+strconv.Quote(labelKey.String())+`},
	"additionalProperties": {"type": "string", "pattern": `+strconv.Quote(labelValue.String())+`}}`)

func checkLabels(path string, labels map[string]any) (string, error) {
	if len(labels) > MaxLabels {
		return "", errs.Invalid(path, "at most %d labels", MaxLabels)
	}
	for _, k := range sortedKeys(labels) {
		if !labelKey.MatchString(k) {
			return "", errs.Invalid(path+"."+errs.Cut(k), "label key %q must be a DNS-style key (prefix/name, name at most 63 characters)", errs.Cut(k))
		}
		v, ok := labels[k].(string)
		if !ok {
			return "", errs.Invalid(path+"."+k, "label %s must be a string", k)
		}
		if !labelValue.MatchString(v) {
			return "", errs.Invalid(path+"."+k, "label value %q must be at most 63 alphanumeric, '.', '_' or '-' characters", errs.Cut(v))
		}
	}
	b, _ := json.Marshal(labels)
	return string(b), nil
}

// Visible is the one visibility predicate over nodes n: a node is visible
// to the tenant that owns it (the owner of its pool; tenants the pool is
// offered to do not see nodes). tenants is a text[] expression.
func Visible(tenants string) string { return `n.tenant_id = ANY(` + tenants + `)` }

func nodeNotFound(id string) error { return errs.E(errs.NotFound, "node %s not found", id) }

// GetNode returns a node the tenant owns.
func GetNode(ctx context.Context, q store.Q, in *NodeRefInput) (*Node, error) {
	var n Node
	err := q.GetContext(ctx, &n, `SELECT `+nodeCols+` FROM nodes n WHERE node_id = $1 AND `+Visible("ARRAY[$2]"), in.NodeID, in.TenantID)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nodeNotFound(in.NodeID)
	}
	if err != nil {
		return nil, store.Wrap(err)
	}
	return n.fix(), nil
}

// ListNodes pages the tenant's nodes by id, filtered by pool, state and
// labels (every given label must match). Removed nodes are listed only
// when state asks for them.
func ListNodes(ctx context.Context, q store.Q, in *NodeListInput) (*page.Page[Node], error) {
	var after string
	if _, err := Cursors.Decode(in.Cursor, &after); err != nil {
		return nil, err
	}
	var labels *string
	if in.Labels != nil {
		l, err := checkLabels("labels", in.Labels)
		if err != nil {
			return nil, err
		}
		labels = &l
	}
	rows := []Node{}
	err := q.SelectContext(ctx, &rows, `SELECT `+nodeCols+` FROM nodes n
		WHERE `+Visible("ARRAY[$1]")+` AND node_id > $2
		  AND ($3::text IS NULL OR pool_id = $3)
		  AND (CASE WHEN $4::text IS NULL THEN state <> 'removed' ELSE state = $4 END)
		  AND ($5::jsonb IS NULL OR labels @> $5::jsonb)
		ORDER BY node_id LIMIT $6`, in.TenantID, after, in.PoolID, in.State, labels, in.Limit+1)
	if err != nil {
		return nil, store.Wrap(err)
	}
	for i := range rows {
		rows[i].fix()
	}
	items, cur := page.Trim(rows, in.Limit, func(n Node) string { return Cursors.Encode(n.NodeID) })
	return &page.Page[Node]{Items: items, Cursor: cur}, nil
}

// lockNode locks a node the tenant owns and checks expectedVersion; a
// removed node is INVALID_STATE.
func lockNode(ctx context.Context, q store.Q, tenantID, nodeID string, expected *int) (*Node, error) {
	if err := authz.ChangingAuthority(ctx, q, authz.NodeState(nodeID)); err != nil {
		return nil, err
	}
	var n Node
	err := q.GetContext(ctx, &n, `SELECT `+nodeCols+` FROM nodes WHERE node_id = $1 AND tenant_id = $2 FOR UPDATE`, nodeID, tenantID)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nodeNotFound(nodeID)
	}
	if err != nil {
		return nil, store.Wrap(err)
	}
	if n.State == Removed {
		return nil, errs.E(errs.InvalidState, "node %s is removed", nodeID).With("state", n.State)
	}
	if expected != nil && *expected != n.RowVersion {
		return nil, errs.E(errs.Conflict, "node %s is at rowVersion %d, not %d", nodeID, n.RowVersion, *expected).
			With("rowVersion", n.RowVersion)
	}
	return n.fix(), nil
}

// UpdateNode changes a node's name and/or labels (labels are replaced).
func UpdateNode(ctx context.Context, q store.Q, in *NodeUpdateInput) (*Node, error) {
	if in.Name == nil && in.Labels == nil {
		return nil, errs.Invalid("name", "pass name, labels or both")
	}
	var labels *string
	if in.Labels != nil {
		l, err := checkLabels("labels", in.Labels)
		if err != nil {
			return nil, err
		}
		labels = &l
	}
	cur, err := lockNode(ctx, q, in.TenantID, in.NodeID, in.ExpectedVersion)
	if err != nil {
		return nil, err
	}
	// Values equal to the node's change nothing: no new rowVersion (another
	// writer's expectedVersion still holds) and no node.updated event.
	var n Node
	err = q.GetContext(ctx, &n, `UPDATE nodes SET name = COALESCE($2, name), labels = COALESCE($3::jsonb, labels),
			row_version = row_version + 1, updated_at = now()
		WHERE node_id = $1 AND (name IS DISTINCT FROM COALESCE($2, name) OR labels IS DISTINCT FROM COALESCE($3::jsonb, labels))
		RETURNING `+nodeCols, in.NodeID, in.Name, labels)
	if errors.Is(err, sql.ErrNoRows) {
		return cur, nil
	}
	if err != nil {
		return nil, store.Wrap(err)
	}
	return nodeEvent(ctx, q, events.NodeUpdated, n.fix())
}

// nodeEvent writes the node's event in the change's transaction and
// returns the node.
func nodeEvent(ctx context.Context, q store.Q, typ string, n *Node) (*Node, error) {
	if err := events.Write(ctx, q, events.Record{TenantID: n.TenantID, Type: typ, ResourceID: n.NodeID, PoolID: n.PoolID, Data: n}); err != nil {
		return nil, err
	}
	return n, nil
}

// setState moves a node from one state to another.
func setState(ctx context.Context, q store.Q, in *NodeChangeInput, from, to string) (*Node, error) {
	n, err := lockNode(ctx, q, in.TenantID, in.NodeID, in.ExpectedVersion)
	if err != nil {
		return nil, err
	}
	if n.State != from {
		return nil, errs.E(errs.InvalidState, "node %s is %s, not %s", in.NodeID, n.State, from).With("state", n.State)
	}
	err = q.GetContext(ctx, n, `UPDATE nodes SET state = $2, row_version = row_version + 1, updated_at = now()
		WHERE node_id = $1 RETURNING `+nodeCols, in.NodeID, to)
	if err != nil {
		return nil, store.Wrap(err)
	}
	typ := events.NodeCordoned
	if to == Ready {
		typ = events.NodeUncordoned
	}
	return nodeEvent(ctx, q, typ, n.fix())
}

// Cordon stops new work landing on a ready node.
func Cordon(ctx context.Context, q store.Q, in *NodeChangeInput) (*Node, error) {
	return setState(ctx, q, in, Ready, Cordoned)
}

// Uncordon returns a cordoned node to ready.
func Uncordon(ctx context.Context, q store.Q, in *NodeChangeInput) (*Node, error) {
	return setState(ctx, q, in, Cordoned, Ready)
}

// RemoveNode retires a node: its credential is revoked in the same
// transaction, so it can report nothing more, and its unfinished workflow
// is canceled in it too (nothing could end it afterwards); its inventory
// history stays.
//
// The node's credential is taken first, before the node's row: a node's
// calls hold their credential before they lock anything (auth.HoldCredential),
// so every transaction takes the credential, then the rows. (Taken after
// the node's row, a removal deadlocked with the node's inventory.report,
// which holds the credential and then locks the row.)
func RemoveNode(ctx context.Context, q store.Q, in *NodeChangeInput) (*Node, error) {
	creds, err := auth.RevokingCredentials(ctx, q, `SELECT token_id FROM tokens
		WHERE revoked_at IS NULL AND principal_id IN (SELECT principal_id FROM principals WHERE kind = 'node' AND node_id = $1 AND tenant_id = $2)`,
		in.NodeID, in.TenantID)
	if err != nil {
		return nil, err
	}
	if _, err := lockNode(ctx, q, in.TenantID, in.NodeID, in.ExpectedVersion); err != nil {
		return nil, err
	}
	var n Node
	err = q.GetContext(ctx, &n, `UPDATE nodes SET state = 'removed', removed_at = now(), row_version = row_version + 1, updated_at = now()
		WHERE node_id = $1 RETURNING `+nodeCols, in.NodeID)
	if err != nil {
		return nil, store.Wrap(err)
	}
	if _, err := q.ExecContext(ctx, `UPDATE tokens SET revoked_at = now() WHERE token_id = ANY($1) AND revoked_at IS NULL`, creds); err != nil {
		return nil, store.Wrap(err)
	}
	out, err := nodeEvent(ctx, q, events.NodeRemoved, n.fix())
	if err != nil {
		return nil, err
	}
	// Under the node's row lock (taken by lockNode; workflows.create shares
	// it), after the credential is revoked.
	if err := workflows.CancelForRemovedNode(ctx, q, in.NodeID); err != nil {
		return nil, err
	}
	return out, nil
}

// --- batched reads for the graph --------------------------------------------

// NodePagesByPool returns one page of each pool's live nodes visible in
// scope (compute:nodes:read: the owner's; a tenant the pool is offered to
// gets an empty page) in one statement. The rows are scanned column by
// column into one slice sized for the pages (a fleet query reads 2,000
// nodes here; sqlx's reflection grew the slice of rows by doubling).
func NodePagesByPool(ctx context.Context, q store.Q, scope authz.Scope, poolIDs []string, after string, limit int) (page.Rows[Node], error) {
	var r page.Rows[Node]
	size := min(len(poolIDs)*(limit+1), 4096)
	r.Parents, r.Totals, r.Items = make([]string, 0, size), make([]int, 0, size), make([]Node, 0, size)
	var parent string
	var total int
	var n Node
	dest := append([]any{&parent, &total}, n.columns()...)
	err := store.EachRow(ctx, q, `
		WITH t AS MATERIALIZED (
			SELECT t.parent, (SELECT count(*) FROM nodes n WHERE n.pool_id = t.parent AND n.state <> 'removed' AND `+authz.Where("$4", Visible)+`) AS total_count
			FROM unnest($1::text[]) AS t(parent))
		SELECT t.parent AS parent_key, t.total_count,
		       x.*
		FROM t
		CROSS JOIN LATERAL (
			SELECT `+nodeCols+` FROM nodes n WHERE n.pool_id = t.parent AND n.state <> 'removed' AND n.node_id > $2
			  AND `+authz.Where("$4", Visible)+`
			ORDER BY n.node_id LIMIT $3
		) x`, []any{poolIDs, after, limit + 1, scope.Arg()}, func(scan func(dest ...any) error) error {
		n = Node{}
		if err := scan(dest...); err != nil {
			return err
		}
		r.Items = append(r.Items, *n.fixGraph())
		r.Parents, r.Totals = append(r.Parents, parent), append(r.Totals, total)
		return nil
	})
	if err != nil {
		return page.Rows[Node]{}, store.Wrap(err)
	}
	return r, nil
}

// columns are the scan targets of nodeCols, in its order.
func (n *Node) columns() []any {
	return []any{&n.NodeID, &n.TenantID, &n.PoolID, &n.Name, &n.LabelsText, &n.State, &n.Attestor, &n.CertExpiresAt,
		&n.JoinRequestID, &n.LatestSnapshotID, &n.RowVersion, &n.CreatedAt, &n.UpdatedAt, &n.RemovedAt, &n.SystemUUID,
		&n.Serial, &n.MACsText}
}

// CountNodesByPool counts each pool's live nodes.
func CountNodesByPool(ctx context.Context, q store.Q, scope authz.Scope, poolIDs []string) (map[string]int, error) {
	return store.CountBy(ctx, q, `SELECT t.parent AS k,
			(SELECT count(*) FROM nodes n WHERE n.pool_id = t.parent AND n.state <> 'removed' AND `+authz.Where("$2", Visible)+`) AS n
		FROM unnest($1::text[]) AS t(parent)`, poolIDs, scope.Arg())
}

// NodesByID loads the nodes of nodeIDs visible in scope in one statement,
// keyed by id.
func NodesByID(ctx context.Context, q store.Q, scope authz.Scope, nodeIDs []string) (map[string]*Node, error) {
	var rows []Node
	if err := q.SelectContext(ctx, &rows, `SELECT `+nodeCols+` FROM nodes n WHERE node_id = ANY($1) AND `+authz.Where("$2", Visible), nodeIDs, scope.Arg()); err != nil {
		return nil, store.Wrap(err)
	}
	out := make(map[string]*Node, len(rows))
	for i := range rows {
		out[rows[i].NodeID] = rows[i].fixGraph()
	}
	return out, nil
}

type poolReqRow struct {
	Parent string `db:"parent_key"`
	Total  int    `db:"total_count"`
	JoinRequest
}

// requestVisible is the visibility predicate over join requests r: the
// pool owner's (compute:joinTokens:read); tenants the pool is offered to do
// not see them.
func requestVisible(tenants string) string { return `r.tenant_id = ANY(` + tenants + `)` }

// JoinRequestPagesByPool returns one page of each pool's join requests
// visible in scope.
func JoinRequestPagesByPool(ctx context.Context, q store.Q, scope authz.Scope, poolIDs []string, after string, limit int) (page.Rows[JoinRequest], error) {
	return JoinRequestPagesIn("")(ctx, q, scope, poolIDs, after, limit)
}

// JoinRequestPagesIn is JoinRequestPagesByPool of the requests in one state
// (as joinRequests.list filters: "expired" is a pending or approved request
// past its time too); "" is every state.
func JoinRequestPagesIn(state string) func(ctx context.Context, q store.Q, scope authz.Scope, poolIDs []string, after string, limit int) (page.Rows[JoinRequest], error) {
	return func(ctx context.Context, q store.Q, scope authz.Scope, poolIDs []string, after string, limit int) (page.Rows[JoinRequest], error) {
		var rows []poolReqRow
		err := q.SelectContext(ctx, &rows, `
		WITH t AS MATERIALIZED (
			SELECT t.parent, (SELECT count(*) FROM (SELECT `+reqState+` FROM join_requests r WHERE r.pool_id = t.parent AND `+authz.Where("$4", requestVisible)+`) c
				WHERE $5 = '' OR c.req_state = $5) AS total_count
			FROM unnest($1::text[]) AS t(parent))
		SELECT t.parent AS parent_key, t.total_count,
		       x.*
		FROM t
		CROSS JOIN LATERAL (
			SELECT * FROM (SELECT `+reqCols+` FROM join_requests r WHERE r.pool_id = t.parent AND r.join_request_id > $2
			  AND `+authz.Where("$4", requestVisible)+`) r
			WHERE $5 = '' OR r.req_state = $5
			ORDER BY r.join_request_id LIMIT $3
		) x`, poolIDs, after, limit+1, scope.Arg(), state)
		var r page.Rows[JoinRequest]
		for _, x := range rows {
			x.JoinRequest.fix()
			r.Parents, r.Totals, r.Items = append(r.Parents, x.Parent), append(r.Totals, x.Total), append(r.Items, x.JoinRequest)
		}
		return r, store.Wrap(err)
	}
}

// CountJoinRequestsByPool counts each pool's join requests.
func CountJoinRequestsByPool(ctx context.Context, q store.Q, scope authz.Scope, poolIDs []string) (map[string]int, error) {
	return CountJoinRequestsIn("")(ctx, q, scope, poolIDs)
}

// CountJoinRequestsIn is CountJoinRequestsByPool of the requests in one
// state ("" is every state).
func CountJoinRequestsIn(state string) func(ctx context.Context, q store.Q, scope authz.Scope, poolIDs []string) (map[string]int, error) {
	return func(ctx context.Context, q store.Q, scope authz.Scope, poolIDs []string) (map[string]int, error) {
		return store.CountBy(ctx, q, `SELECT t.parent AS k,
			(SELECT count(*) FROM (SELECT `+reqState+` FROM join_requests r WHERE r.pool_id = t.parent AND `+authz.Where("$2", requestVisible)+`) c
				WHERE $3 = '' OR c.req_state = $3) AS n
		FROM unnest($1::text[]) AS t(parent)`, poolIDs, scope.Arg(), state)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	for i := 1; i < len(keys); i++ {
		for j := i; j > 0 && keys[j] < keys[j-1]; j-- {
			keys[j], keys[j-1] = keys[j-1], keys[j]
		}
	}
	return keys
}

// GlobalID is the node's Relay id (the graph binds it directly).
func (n *Node) GlobalID() string { return relay.ID("ComputeNode", n.NodeID) }

// GlobalID is the join request's Relay id.
func (r *JoinRequest) GlobalID() string { return relay.ID("JoinRequest", r.JoinRequestID) }

// GlobalID is the join token's Relay id.
func (t *JoinToken) GlobalID() string { return relay.ID("JoinToken", t.JoinTokenID) }

// LabelsValue is the labels as a JSON value for the graph: the stored JSON
// object itself when the node was read by the graph's batches (they do not
// build the Labels map), else the map.
func (n *Node) LabelsValue() any {
	if n.Labels == nil && n.LabelsText != "" {
		return json.RawMessage(n.LabelsText)
	}
	out := make(map[string]any, len(n.Labels))
	for k, v := range n.Labels {
		out[k] = v
	}
	return out
}

// JoinRequestsByID loads the join requests of ids visible in scope (the
// pool owner's readers of join requests) in one statement, keyed by id.
func JoinRequestsByID(ctx context.Context, q store.Q, scope authz.Scope, ids []string) (map[string]*JoinRequest, error) {
	var rows []JoinRequest
	if err := q.SelectContext(ctx, &rows, `SELECT `+reqCols+` FROM join_requests r WHERE r.join_request_id = ANY($1) AND `+authz.Where("$2", requestVisible), ids, scope.Arg()); err != nil {
		return nil, store.Wrap(err)
	}
	out := make(map[string]*JoinRequest, len(rows))
	for i := range rows {
		rows[i].fix()
		out[rows[i].JoinRequestID] = &rows[i]
	}
	return out, nil
}
