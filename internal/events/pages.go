package events

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/bettercompute/computed/internal/page"
	"github.com/bettercompute/computed/internal/store"
)

// PagesByInstance returns, in one statement, up to limit events of each
// instance after the position, in stream order and below the visibility
// horizon (as Page), with each instance's total below the horizon. visible
// is a predicate over events e whose argument, scope, is $1: the caller's
// read decision, made in the statement (package instances).
func PagesByInstance(ctx context.Context, q store.Q, instanceIDs []string, after Position, limit int, visible string, scope any) (page.Rows[Event], error) {
	var rows []struct {
		Parent string `db:"parent_key"`
		Total  int    `db:"total_count"`
		row
	}
	match := `e.instance_id = t.parent AND e.xid < pg_snapshot_xmin(pg_current_snapshot()) AND ` + visible
	// The count is taken once per parent in a materialized CTE, not in the
	// select list, where PostgreSQL would run it once per output row.
	err := q.SelectContext(ctx, &rows, `WITH t AS MATERIALIZED (
			SELECT t.parent, (SELECT count(*) FROM instance_events e WHERE `+match+`) AS total_count
			FROM unnest($2::text[]) AS t(parent))
		SELECT t.parent AS parent_key, t.total_count, x.*
		FROM t
		CROSS JOIN LATERAL (
			SELECT e.xid::text AS xid, e.seq, e.type, e.tenant_id, e.pool_id, e.instance_id, e.project_id,
				e.state, e.desired_state, e.state_reason, e.occurred_at, e.instance::text AS instance
			FROM instance_events e
			WHERE `+match+` AND (e.xid, e.seq) > ($3::text::xid8, $4::bigint)
			ORDER BY e.xid, e.seq LIMIT $5) x`,
		scope, instanceIDs, strconv.FormatUint(after.XID, 10), int64(after.Seq), limit+1)
	var out page.Rows[Event]
	if err != nil {
		return out, store.Wrap(err)
	}
	for _, r := range rows {
		x, err := strconv.ParseUint(r.XID, 10, 64)
		if err != nil {
			return out, fmt.Errorf("events: stored xid %q: %w", r.XID, err)
		}
		pos := Position{XID: x, Seq: uint64(r.Seq)}
		out.Parents, out.Totals = append(out.Parents, r.Parent), append(out.Totals, r.Total)
		out.Items = append(out.Items, Event{EventID: EncodeID(pos), Type: r.Type, TenantID: r.TenantID, PoolID: r.PoolID, InstanceID: r.InstanceID,
			ProjectID: r.ProjectID, State: r.State, DesiredState: r.DesiredState, StateReason: r.StateReason,
			OccurredAt: r.OccurredAt.UTC(), Instance: json.RawMessage(r.Instance), Position: pos})
	}
	return out, nil
}

// CountByInstance counts each instance's events below the horizon, with
// the visibility predicate of PagesByInstance.
func CountByInstance(ctx context.Context, q store.Q, instanceIDs []string, visible string, scope any) (map[string]int, error) {
	var rows []struct {
		K string `db:"k"`
		N int    `db:"n"`
	}
	err := q.SelectContext(ctx, &rows, `SELECT t.parent AS k, (SELECT count(*) FROM instance_events e WHERE e.instance_id = t.parent
			AND e.xid < pg_snapshot_xmin(pg_current_snapshot()) AND `+visible+`) AS n
		FROM unnest($2::text[]) AS t(parent)`, scope, instanceIDs)
	if err != nil {
		return nil, store.Wrap(err)
	}
	out := make(map[string]int, len(rows))
	for _, r := range rows {
		out[r.K] = r.N
	}
	return out, nil
}
