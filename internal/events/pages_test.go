package events_test

import (
	"context"
	"slices"
	"testing"

	"github.com/bettercompute/computed/internal/events"
	"github.com/bettercompute/computed/internal/testkit"
)

// A stream read by type reads only the events of its types: a type that
// matched few events read the tenant's whole stream (a probe's
// events.list types:["joinRequest.expired"] took 0.5 s over 500,000
// events, and a viewer's twelve requests at once reached the statement
// timeout). Each page is still the first events of the filter after the
// cursor, in stream order.
func TestATypeFilterReadsOnlyItsTypes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testkit.DB(t)
	// 40,000 events: node.updated, every 1,000th a workflow.step, every
	// 1,500th an instance.running; and the last a joinRequest.expired.
	if _, err := db.ExecContext(ctx, `INSERT INTO events (tenant_id, seq, type, resource_type, resource_id, pool_id, data, occurred_at)
		SELECT 'bulk', g, t.type, t.kind, 'res_' || (g % 97), CASE WHEN g % 3000 = 1500 OR t.kind = 'node' THEN 'pool_b' ELSE 'pool_a' END, '{}', now()
		FROM generate_series(1, 40000) g,
		LATERAL (SELECT CASE WHEN g = 40000 THEN 'joinRequest.expired' WHEN g % 1000 = 0 THEN 'workflow.step'
		                     WHEN g % 1500 = 0 THEN 'instance.running' ELSE 'node.updated' END AS type) t0,
		LATERAL (SELECT t0.type, CASE split_part(t0.type, '.', 1) WHEN 'node' THEN 'node' WHEN 'workflow' THEN 'workflow'
		                     WHEN 'instance' THEN 'instance' ELSE 'joinRequest' END AS kind) t`); err != nil {
		t.Fatal(err)
	}
	// And 5,000 instance.stopped events of pool_a after them.
	if _, err := db.ExecContext(ctx, `INSERT INTO events (tenant_id, seq, type, resource_type, resource_id, pool_id, data, occurred_at)
		SELECT 'bulk', 40000 + g, 'instance.stopped', 'instance', 'ins_' || (g % 97), 'pool_a', '{}', now() FROM generate_series(1, 5000) g`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `ANALYZE events`); err != nil {
		t.Fatal(err)
	}
	read := func(f events.Filter, after uint64, limit int) []uint64 {
		t.Helper()
		tx, err := db.BeginTxx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		page, err := events.Page(ctx, tx, f, after, limit)
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		if err := tx.GetContext(ctx, &n, `SELECT pg_stat_get_xact_tuples_returned('events'::regclass) + pg_stat_get_xact_tuples_fetched('events'::regclass)`); err != nil {
			t.Fatal(err)
		}
		if n > int64(20*limit+100) {
			t.Errorf("%+v after %d: %d events read for a page of at most %d", f, after, n, limit)
		}
		var seqs []uint64
		for _, ev := range page {
			if !f.Matches(&ev) {
				t.Errorf("%+v: read %s", f, ev.Type)
			}
			seqs = append(seqs, ev.Seq)
		}
		return seqs
	}
	mults := func(from, to, every int) []uint64 {
		var out []uint64
		for g := from; g <= to; g++ {
			if g%every == 0 && g != 40000 {
				out = append(out, uint64(g))
			}
		}
		return out
	}
	if got := read(events.Filter{TenantID: "bulk", Types: []string{"joinRequest.expired"}}, 0, 50); !slices.Equal(got, []uint64{40000}) {
		t.Errorf("joinRequest.expired: %v", got)
	}
	if got := read(events.Filter{TenantID: "bulk", Types: []string{"reservation."}}, 0, 50); len(got) != 0 {
		t.Errorf("reservation.: %v", got)
	}
	// A prefix and an exact type, merged in stream order, from a cursor.
	want := slices.Sorted(slices.Values(append(mults(1, 40000, 1000), mults(1, 40000, 1500)...)))
	want = slices.Compact(want) // 3,000 and its multiples are both
	got := read(events.Filter{TenantID: "bulk", Types: []string{"workflow.", "instance.running"}}, 0, 200)
	if !slices.Equal(got, want) {
		t.Errorf("workflow. and instance.running: %v, want %v", got, want)
	}
	if got := read(events.Filter{TenantID: "bulk", Types: []string{"workflow.", "instance.running"}}, 12000, 5); !slices.Equal(got, []uint64{13000, 13500, 14000, 15000, 16000}) {
		t.Errorf("after 12000: %v", got)
	}
	// The reader's resource types narrow alone, and with types.
	if got := read(events.Filter{TenantID: "bulk", Resources: []string{events.ResInstance}}, 0, 3); !slices.Equal(got, []uint64{1500, 4500, 7500}) {
		t.Errorf("instances: %v", got)
	}
	if got := read(events.Filter{TenantID: "bulk", Types: []string{"workflow.", "joinRequest."}, Resources: []string{events.ResJoinRequest}}, 0, 50); !slices.Equal(got, []uint64{40000}) {
		t.Errorf("join requests readable: %v", got)
	}
	// A pool's instance events (instanceEvents(poolId:)): pool_a holds
	// every node event, and only half the instance events.
	if got := read(events.Filter{TenantID: "bulk", PoolID: "pool_b", Resources: []string{events.ResInstance}}, 0, 3); !slices.Equal(got, []uint64{1500, 4500, 7500}) {
		t.Errorf("pool_b's instances: %v", got)
	}
	if got := read(events.Filter{TenantID: "bulk", PoolID: "pool_b", Resources: []string{events.ResInstance}}, 38000, 50); len(got) != 0 {
		t.Errorf("pool_b's instances after 38000: %v", got) // past them, pool_b's node events and pool_a's 5,000 instance events
	}
	if got := read(events.Filter{TenantID: "bulk", PoolID: "pool_a", Resources: []string{events.ResInstance}}, 0, 3); !slices.Equal(got, []uint64{40001, 40002, 40003}) {
		t.Errorf("pool_a's instances: %v", got)
	}
	if got := read(events.Filter{TenantID: "bulk", Resources: []string{}}, 0, 50); len(got) != 0 {
		t.Errorf("no readable kind: %v", got)
	}
	// Counted the same way (Tenant.events' totalCount).
	for _, c := range []struct {
		f    events.Filter
		want int
	}{
		{events.Filter{TenantID: "bulk", Types: []string{"workflow.", "instance.running"}}, 39 + 13},
		{events.Filter{TenantID: "bulk", Types: []string{"joinRequest.expired"}, Resources: []string{events.ResNode}}, 0},
		{events.Filter{TenantID: "bulk", Resources: []string{events.ResNode}}, 40000 - 39 - 13 - 1},
	} {
		if n, err := events.Count(ctx, db, c.f); err != nil || n != c.want {
			t.Errorf("count %+v: %d, want %d (%v)", c.f, n, c.want, err)
		}
	}
}
