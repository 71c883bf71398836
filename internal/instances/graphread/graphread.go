// Package graphread is the graph's reads of instances, reservations,
// events and capacity: batch functions for the per-request dataloaders,
// one statement for many parents. Each one decides in its own SQL: the
// loader passes the caller's authz.Scope for the permission the type is
// read under, the statement binds the type's one predicate to it
// (authz.Where), and only the rows the caller may read come back, with the
// same rule as the method surface (instances.get, instances.list,
// reservations.*, instances.events, instances.capacity):
//
//   - an instance, a reservation and an instance's events are readable by
//     the principals holding a role that grants compute:instances:read on
//     the instance's tenant (and by the operator); a pool's owner does not
//     read other tenants' instances in it;
//   - a pool's capacity is readable by whoever reads the pool (its owner's
//     members, the members of tenants it is offered to); the per-tenant
//     numbers only by the owner's members.
//
// Node credentials read nothing here.
//
// It reads rows of package instances (View embeds instances.Instance) and
// binds instances' visibility predicates, the same ones the method surface
// binds; pool arithmetic is package fit's. What changes here is how the
// graph batches its reads (columns, pages, counts), not who may read what.
package graphread

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/bettercompute/computed/internal/authz"
	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/events"
	"github.com/bettercompute/computed/internal/ids"
	"github.com/bettercompute/computed/internal/instances"
	"github.com/bettercompute/computed/internal/instances/fit"
	"github.com/bettercompute/computed/internal/inventory"
	"github.com/bettercompute/computed/internal/page"
	"github.com/bettercompute/computed/internal/pattern"
	"github.com/bettercompute/computed/internal/store"
)

// where binds a predicate to the scope at $1 (authz.Where).
func where(pred func(tenants string) string) string { return authz.Where("$1", pred) }

// View is an instance as the graph shows it: with whether the caller may
// follow it to its pool (the instance's tenant still owns it or is still
// offered it) and to its host node (the caller reads the host's tenant).
type View struct {
	instances.Instance
	PoolVisible bool `json:"-" db:"pool_visible"`
	HostVisible bool `json:"-" db:"host_visible"`
}

// viewCols are the columns of a View over instances i: $1 is the
// instances scope, $2 the nodes scope (the host link).
var viewCols = `i.instance_id, i.tenant_id, i.pool_id, i.project_id, i.name, i.gpus, i.gpu_profile, i.vcpus, i.memory_gib, i.image,
	i.desired_state, i.desired_at, i.state, i.state_reason, i.state_since, i.step_tries, i.reboot_generation, i.rebooted_generation,
	i.host_node_id, i.offered, i.client_token, i.request_hash, i.row_version, i.created_at, i.updated_at, i.deleted_at,
	EXISTS (SELECT 1 FROM pools p WHERE p.pool_id = i.pool_id AND (p.tenant_id = i.tenant_id
		OR EXISTS (SELECT 1 FROM pool_offers o WHERE o.pool_id = p.pool_id AND o.to_tenant_id = i.tenant_id))) AS pool_visible,
	(i.host_node_id IS NOT NULL AND EXISTS (SELECT 1 FROM nodes n WHERE n.node_id = i.host_node_id
		AND ` + authz.Where("$2", func(t string) string { return `n.tenant_id = ANY(` + t + `)` }) + `)) AS host_visible`

// ViewsByID loads the instances the caller may read among ids, in one
// statement, keyed by id.
func ViewsByID(ctx context.Context, q store.Q, scope, hosts authz.Scope, ids []string) (map[string]*View, error) {
	var rows []View
	if err := q.SelectContext(ctx, &rows, `SELECT `+viewCols+` FROM instances i
		WHERE i.instance_id = ANY($3) AND `+where(instances.Visible), scope.Arg(), hosts.Arg(), ids); err != nil {
		return nil, store.Wrap(err)
	}
	out := make(map[string]*View, len(rows))
	for k := range rows {
		rows[k].Normalize()
		out[rows[k].InstanceID] = &rows[k]
	}
	return out, nil
}

// Parent names what a page of instances hangs off.
type Parent string

// Parents of instance pages.
const (
	OfTenant  Parent = "tenant_id"
	OfPool    Parent = "pool_id"
	OfProject Parent = "project_id"
)

// Scope is one parent's page with its filters (as instances.list filters).
type Scope struct {
	Parent    string
	PoolID    string
	ProjectID string
	State     string
}

// Key encodes a scope as one loader key.
func (s Scope) Key() string {
	return strings.Join([]string{s.Parent, s.PoolID, s.ProjectID, s.State}, "\x1f")
}

// ParseScope decodes Key.
func ParseScope(k string) Scope {
	p := strings.SplitN(k, "\x1f", 4)
	for len(p) < 4 {
		p = append(p, "")
	}
	return Scope{p[0], p[1], p[2], p[3]}
}

func scopeArrays(keys []string) (parent, pool, project, state []string) {
	for _, k := range keys {
		s := ParseScope(k)
		parent, pool, project, state = append(parent, s.Parent), append(pool, s.PoolID), append(project, s.ProjectID), append(state, s.State)
	}
	return
}

// scopeMatch is the filter of a scope t over instances i, with one of the
// branches of its state filter (instances.StateBranches, as
// instances.list): deleted instances only when the state asks for them.
func scopeMatch(by Parent, branch string) string {
	return `i.` + string(by) + ` = t.parent AND (t.f_pool = '' OR i.pool_id = t.f_pool)
		AND (t.f_project = '' OR i.project_id = t.f_project)
		AND ` + branch + `
		AND ` + where(instances.Visible)
}

// scopeCount counts a scope t's instances, one count per branch.
func scopeCount(by Parent) string {
	b := instances.StateBranches("t.f_state")
	return `((SELECT count(*) FROM instances i WHERE ` + scopeMatch(by, b[0]) + `) + (SELECT count(*) FROM instances i WHERE ` + scopeMatch(by, b[1]) + `))`
}

// scopesAt unnests the five arrays of scopeArrays, from parameter $n on,
// as t(k, parent, f_pool, f_project, f_state).
func scopesAt(n int) string {
	return fmt.Sprintf(`unnest($%d::text[], $%d::text[], $%d::text[], $%d::text[], $%d::text[]) AS t(k, parent, f_pool, f_project, f_state)`, n, n+1, n+2, n+3, n+4)
}

type viewRow struct {
	Key   string `db:"parent_key"`
	Total int    `db:"total_count"`
	View
}

// ViewPages returns one page of instances (by id) for each scope key of
// one kind of parent, in one statement, with each scope's total.
func ViewPages(ctx context.Context, q store.Q, scope, hosts authz.Scope, by Parent, keys []string, after string, limit int) (page.Rows[View], error) {
	parent, pool, project, state := scopeArrays(keys)
	var rows []viewRow
	args := []any{scope.Arg(), hosts.Arg(), keys, parent, pool, project, state, after, limit + 1}
	b := instances.StateBranches("t.f_state")
	branch := func(state string) string {
		return `(SELECT ` + viewCols + ` FROM instances i WHERE ` + scopeMatch(by, state) + ` AND i.instance_id > $8
			ORDER BY i.instance_id LIMIT $9)`
	}
	// Counts once per scope (a materialized CTE), not once per output row.
	err := q.SelectContext(ctx, &rows, `WITH t AS MATERIALIZED (
			SELECT t.*, `+scopeCount(by)+` AS total_count
			FROM `+scopesAt(3)+`)
		SELECT t.k AS parent_key, t.total_count, x.*
		FROM t
		CROSS JOIN LATERAL (SELECT * FROM (`+branch(b[0])+` UNION ALL `+branch(b[1])+`) u ORDER BY u.instance_id) x`, args...)
	var r page.Rows[View]
	for _, x := range rows {
		x.Normalize()
		r.Parents, r.Totals, r.Items = append(r.Parents, x.Key), append(r.Totals, x.Total), append(r.Items, x.View)
	}
	return r, store.Wrap(err)
}

// CountViews counts each scope's instances (the scopes with an empty page).
func CountViews(ctx context.Context, q store.Q, scope authz.Scope, by Parent, keys []string) (map[string]int, error) {
	parent, pool, project, state := scopeArrays(keys)
	var rows []struct {
		K string `db:"k"`
		N int    `db:"n"`
	}
	args := []any{scope.Arg(), keys, parent, pool, project, state}
	if err := q.SelectContext(ctx, &rows, `SELECT t.k, `+scopeCount(by)+` AS n FROM `+scopesAt(2), args...); err != nil {
		return nil, store.Wrap(err)
	}
	out := make(map[string]int, len(rows))
	for _, r := range rows {
		out[r.K] = r.N
	}
	return out, nil
}

// --- reservations -------------------------------------------------------

// resMatch is the filter of a reservation scope t over reservations r (as
// reservations.list).
func resMatch(by Parent) string {
	return `r.` + string(by) + ` = t.parent AND (t.f_pool = '' OR r.pool_id = t.f_pool)
		AND CASE t.f_state
		      WHEN '' THEN true
		      WHEN 'canceled' THEN r.state = 'canceled'
		      WHEN 'expired' THEN r.state = 'active' AND r.ends_at <= now()
		      WHEN 'active' THEN r.state = 'active' AND r.starts_at <= now() AND r.ends_at > now()
		      ELSE r.state = 'active' AND r.starts_at > now() END
		AND ` + where(instances.ReservationVisible)
}

type resRow struct {
	Key   string `db:"parent_key"`
	Total int    `db:"total_count"`
	instances.Reservation
}

// ReservationPages returns one page of reservations (by id) for each scope
// key of tenants or pools, in one statement; the caller reads only the
// reservations of tenants it holds a role on.
func ReservationPages(ctx context.Context, q store.Q, scope authz.Scope, by Parent, keys []string, after string, limit int) (page.Rows[instances.Reservation], error) {
	parent, pool, project, state := scopeArrays(keys)
	var rows []resRow
	args := []any{scope.Arg(), keys, parent, pool, project, state, after, limit + 1}
	err := q.SelectContext(ctx, &rows, `WITH t AS MATERIALIZED (
			SELECT t.*, (SELECT count(*) FROM reservations r WHERE `+resMatch(by)+`) AS total_count
			FROM `+scopesAt(2)+`)
		SELECT t.k AS parent_key, t.total_count, x.*
		FROM t
		CROSS JOIN LATERAL (SELECT r.reservation_id, r.tenant_id, r.pool_id, r.gpus, r.vcpus, r.memory_gib, r.starts_at, r.ends_at,
				r.state, r.row_version, r.created_at, r.updated_at, r.canceled_at, now() AS tx_now
			FROM reservations r WHERE `+resMatch(by)+` AND r.reservation_id > $7 ORDER BY r.reservation_id LIMIT $8) x`, args...)
	var out page.Rows[instances.Reservation]
	for _, x := range rows {
		x.Normalize()
		out.Parents, out.Totals, out.Items = append(out.Parents, x.Key), append(out.Totals, x.Total), append(out.Items, x.Reservation)
	}
	return out, store.Wrap(err)
}

// CountReservations counts each scope's reservations.
func CountReservations(ctx context.Context, q store.Q, scope authz.Scope, by Parent, keys []string) (map[string]int, error) {
	parent, pool, project, state := scopeArrays(keys)
	var rows []struct {
		K string `db:"k"`
		N int    `db:"n"`
	}
	args := []any{scope.Arg(), keys, parent, pool, project, state}
	if err := q.SelectContext(ctx, &rows, `SELECT t.k, (SELECT count(*) FROM reservations r WHERE `+resMatch(by)+`) AS n FROM `+scopesAt(2), args...); err != nil {
		return nil, store.Wrap(err)
	}
	out := make(map[string]int, len(rows))
	for _, r := range rows {
		out[r.K] = r.N
	}
	return out, nil
}

// --- events -------------------------------------------------------------

// EventPages returns one page of events (oldest first, after the cursor
// event id, "" for the start) for each instance the caller may read, in
// one statement (two with a cursor: its stream's bounds are read first),
// with each instance's total; a cursor older than the retention is
// INVALID_STATE (expired-cursor) as on instances.events.
func EventPages(ctx context.Context, q store.Q, scope authz.Scope, instanceIDs []string, after string, limit int) (page.Rows[events.Event], error) {
	cur, err := events.ParseAnyCursor("after", after)
	if err != nil {
		return page.Rows[events.Event]{}, err
	}
	if after != "" { // the id of 0, the stream's start, is checked too
		// The cursor names its tenant's stream by hash: find it among the
		// instances' tenants, and refuse it once retention overtook it, or
		// when it is past the stream's end (never returned). A cursor of
		// none of their streams is not theirs.
		var streams []struct {
			TenantID string `db:"tenant_id"`
			Last     int64  `db:"last_seq"`
			Pruned   int64  `db:"pruned_seq"`
		}
		if err := q.SelectContext(ctx, &streams, `SELECT s.tenant_id, `+events.LastSeq+` AS last_seq, s.pruned_seq FROM event_streams s
			WHERE s.tenant_id IN (SELECT i.tenant_id FROM instances i WHERE i.instance_id = ANY($1))`, instanceIDs); err != nil {
			return page.Rows[events.Event]{}, store.Wrap(err)
		}
		found := false
		for _, s := range streams {
			if events.TenantHash(s.TenantID) == cur.Hash {
				found = true
				if err := events.CheckCursorOf("after", cur.Seq, uint64(s.Last), uint64(s.Pruned)); err != nil {
					return page.Rows[events.Event]{}, err
				}
			}
		}
		if !found && len(streams) > 0 {
			return page.Rows[events.Event]{}, errs.Invalid("after", "after is not an event id of these instances' tenant")
		}
	}
	return events.PagesByResource(ctx, q, instanceIDs, cur.Seq, limit, eventWhere, scope.Arg())
}

// eventWhere is the instance events the scope at $1 reads.
var eventWhere = instances.InstanceEvents + ` AND ` + where(instances.EventVisible)

// CountEvents counts each readable instance's events.
func CountEvents(ctx context.Context, q store.Q, scope authz.Scope, instanceIDs []string) (map[string]int, error) {
	return events.CountByResource(ctx, q, instanceIDs, eventWhere, scope.Arg())
}

// --- capacity -----------------------------------------------------------

// capRow is one pool's capacity inputs, as one statement reads them.
type capRow struct {
	PoolID      string `db:"pool_id"`
	Kind        string `db:"kind"`
	SharingMode string `db:"sharing_mode"`
	Policy      string `db:"policy"`
	Owner       bool   `db:"owner_view"`
	Hosts       string `db:"hosts"`
	Alloc       string `db:"alloc"`
	Res         string `db:"res"`
}

type capHost struct {
	NodeID    string          `json:"nodeId"`
	Sections  json.RawMessage `json:"sections"`
	Taken     []string        `json:"taken"`
	VCPUs     int             `json:"vcpus"`
	MemoryGiB int             `json:"memoryGiB"`
}

type capTenant struct {
	TenantID  string `json:"tenantId"`
	GPUs      int    `json:"gpus"`
	VCPUs     int    `json:"vcpus"`
	MemoryGiB int    `json:"memoryGiB"`
}

// Capacities computes the capacity of each pool the caller may read among
// poolIDs, in one statement, keyed by pool id; ByTenant is filled only
// where the caller reads the owner's tenant. The numbers are those of
// instances.capacity.
func Capacities(ctx context.Context, q store.Q, scope authz.Scope, poolIDs []string) (map[string]*fit.PoolCapacity, error) {
	var rows []capRow
	err := q.SelectContext(ctx, &rows, `SELECT p.pool_id, p.kind, p.sharing_mode, p.policy::text AS policy,
			`+where(instances.OwnerView)+` AS owner_view,
			COALESCE((SELECT json_agg(json_build_object('nodeId', n.node_id, 'sections', s.sections,
					'taken', ARRAY(SELECT a.device_id FROM instance_allocations a WHERE a.node_id = n.node_id),
					'vcpus', (SELECT COALESCE(sum(h.vcpus), 0) FROM instances h WHERE h.host_node_id = n.node_id AND h.state <> 'deleted'),
					'memoryGiB', (SELECT COALESCE(sum(h.memory_gib), 0) FROM instances h WHERE h.host_node_id = n.node_id AND h.state <> 'deleted'))
					ORDER BY n.node_id)
				FROM nodes n JOIN inventory_snapshots s ON s.snapshot_id = n.latest_snapshot_id
				WHERE p.kind = 'vps-hosted' AND n.pool_id = p.pool_id AND n.state = 'ready'), '[]')::text AS hosts,
			COALESCE((SELECT json_agg(json_build_object('tenantId', a.tenant_id, 'gpus', a.gpus, 'vcpus', a.vcpus, 'memoryGiB', a.memory_gib))
				FROM (SELECT tenant_id, sum(gpus) AS gpus, sum(vcpus) AS vcpus, sum(memory_gib) AS memory_gib FROM instances
					WHERE pool_id = p.pool_id AND `+instances.HoldsRoom+` GROUP BY tenant_id) a), '[]')::text AS alloc,
			COALESCE((SELECT json_agg(json_build_object('tenantId', a.tenant_id, 'gpus', a.gpus, 'vcpus', a.vcpus, 'memoryGiB', a.memory_gib))
				FROM (SELECT tenant_id, sum(gpus) AS gpus, sum(vcpus) AS vcpus, sum(memory_gib) AS memory_gib FROM reservations
					WHERE pool_id = p.pool_id AND state = 'active' AND starts_at <= now() AND ends_at > now() GROUP BY tenant_id) a), '[]')::text AS res
		FROM pools p
		WHERE p.pool_id = ANY($2) AND `+where(instances.CapacityVisible), scope.Arg(), poolIDs)
	if err != nil {
		return nil, store.Wrap(err)
	}
	out := make(map[string]*fit.PoolCapacity, len(rows))
	for _, row := range rows {
		c, err := row.capacity()
		if err != nil {
			return nil, err
		}
		out[row.PoolID] = c
	}
	return out, nil
}

func (row *capRow) capacity() (*fit.PoolCapacity, error) {
	var hs []capHost
	var alloc, res []capTenant
	if err := json.Unmarshal([]byte(row.Hosts), &hs); err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(row.Alloc), &alloc); err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(row.Res), &res); err != nil {
		return nil, err
	}
	var total fit.Resources
	bounded := true
	switch row.Kind {
	case "vps-hosted":
		hosts := make([]fit.Host, 0, len(hs))
		for _, h := range hs {
			sec, err := inventory.Parse(h.Sections)
			if err != nil {
				return nil, fmt.Errorf("host %s inventory: %w", h.NodeID, err)
			}
			hosts = append(hosts, fit.HostOf(h.NodeID, sec, h.Taken, h.VCPUs, h.MemoryGiB))
		}
		total = fit.HostedTotal(row.SharingMode, instances.PolicySlices(row.Policy), hosts)
	case "vps-provider":
		total, bounded = fit.ProviderTotal(row.Policy)
	}
	toMap := func(l []capTenant) map[string]fit.Resources {
		m := map[string]fit.Resources{}
		for _, t := range l {
			m[t.TenantID] = fit.Resources{GPUs: t.GPUs, VCPUs: t.VCPUs, MemoryGiB: t.MemoryGiB}
		}
		return m
	}
	return fit.CapacityOf(row.PoolID, total, bounded, toMap(alloc), toMap(res), row.Owner), nil
}

var (
	poolRe    = pattern.MustCompile(ids.Pattern(ids.Pool))
	projectRe = pattern.MustCompile(ids.Pattern(ids.Project))
)

// NewScope checks a graph list's filters as instances.list and
// reservations.list check theirs (INVALID_INPUT naming the argument) and
// makes the scope of one parent's page.
func NewScope(parent string, poolID, projectID, state *string) (Scope, error) {
	s := Scope{Parent: parent}
	if poolID != nil && *poolID != "" {
		if !poolRe.MatchString(*poolID) {
			return s, errs.Invalid("poolId", "poolId does not match %s", ids.Pattern(ids.Pool))
		}
		s.PoolID = *poolID
	}
	if projectID != nil && *projectID != "" {
		if !projectRe.MatchString(*projectID) {
			return s, errs.Invalid("projectId", "projectId does not match %s", ids.Pattern(ids.Project))
		}
		s.ProjectID = *projectID
	}
	if state != nil {
		s.State = *state
	}
	return s, nil
}

// ReservationsByID loads the reservations of ids visible in scope in one
// statement, keyed by id.
func ReservationsByID(ctx context.Context, q store.Q, scope authz.Scope, ids []string) (map[string]*instances.Reservation, error) {
	var rows []resRow
	if err := q.SelectContext(ctx, &rows, `SELECT '' AS parent_key, 0 AS total_count, r.reservation_id, r.tenant_id, r.pool_id, r.gpus, r.vcpus, r.memory_gib,
			r.starts_at, r.ends_at, r.state, r.row_version, r.created_at, r.updated_at, r.canceled_at, now() AS tx_now
		FROM reservations r WHERE r.reservation_id = ANY($1) AND `+authz.Where("$2", instances.ReservationVisible), ids, scope.Arg()); err != nil {
		return nil, store.Wrap(err)
	}
	out := make(map[string]*instances.Reservation, len(rows))
	for i := range rows {
		rows[i].Normalize()
		out[rows[i].ReservationID] = &rows[i].Reservation
	}
	return out, nil
}
