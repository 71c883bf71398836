package events

import (
	"context"

	"github.com/bettercompute/computed/internal/page"
	"github.com/bettercompute/computed/internal/store"
)

// PagesByResource returns, in one statement, up to limit events of each
// resource after sequence number after, in stream order, with each
// resource's total. visible is a predicate over events e whose argument,
// scope, is $1: the caller's read decision, made in the statement.
func PagesByResource(ctx context.Context, q store.Q, resourceIDs []string, after uint64, limit int, visible string, scope any) (page.Rows[Event], error) {
	var rows []struct {
		Parent string `db:"parent_key"`
		Total  int    `db:"total_count"`
		row
	}
	match := `e.resource_id = t.parent AND ` + visible
	// The count is taken once per parent in a materialized CTE, not in the
	// select list, where PostgreSQL would run it once per output row.
	err := q.SelectContext(ctx, &rows, `WITH t AS MATERIALIZED (
			SELECT t.parent, (SELECT count(*) FROM events e WHERE `+match+`) AS total_count
			FROM unnest($2::text[]) AS t(parent))
		SELECT t.parent AS parent_key, t.total_count, x.*
		FROM t
		CROSS JOIN LATERAL (
			SELECT `+Cols+`
			FROM events e
			WHERE `+match+` AND e.seq > $3
			ORDER BY e.seq LIMIT $4) x`,
		scope, resourceIDs, int64(after), limit+1)
	var out page.Rows[Event]
	if err != nil {
		return out, store.Wrap(err)
	}
	for i := range rows {
		out.Parents, out.Totals = append(out.Parents, rows[i].Parent), append(out.Totals, rows[i].Total)
		out.Items = append(out.Items, rows[i].row.event())
	}
	return out, nil
}

// CountByResource counts each resource's events, with the visibility
// predicate of PagesByResource.
func CountByResource(ctx context.Context, q store.Q, resourceIDs []string, visible string, scope any) (map[string]int, error) {
	var rows []struct {
		K string `db:"k"`
		N int    `db:"n"`
	}
	err := q.SelectContext(ctx, &rows, `SELECT t.parent AS k, (SELECT count(*) FROM events e WHERE e.resource_id = t.parent
			AND `+visible+`) AS n
		FROM unnest($2::text[]) AS t(parent)`, scope, resourceIDs)
	if err != nil {
		return nil, store.Wrap(err)
	}
	out := make(map[string]int, len(rows))
	for _, r := range rows {
		out[r.K] = r.N
	}
	return out, nil
}

// PagesByTenant reads, in one statement, up to limit events of each tenant
// after its own number (after[i] for tenants[i]), in stream order, keyed by
// tenant: a replica's reader of the tenants woken together.
func PagesByTenant(ctx context.Context, q store.Q, tenants []string, after []int64, limit int) (map[string][]Event, error) {
	var rows []row
	err := q.SelectContext(ctx, &rows, `SELECT x.* FROM unnest($1::text[], $2::bigint[]) AS t(tenant_id, after)
		CROSS JOIN LATERAL (SELECT `+Cols+` FROM events e WHERE e.tenant_id = t.tenant_id AND e.seq > t.after
			ORDER BY e.seq LIMIT $3) x`, tenants, after, limit)
	if err != nil {
		return nil, store.Wrap(err)
	}
	out := make(map[string][]Event, len(tenants))
	for i := range rows {
		out[rows[i].TenantID] = append(out[rows[i].TenantID], rows[i].event())
	}
	return out, nil
}
