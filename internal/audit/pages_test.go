package audit_test

import (
	"context"
	"testing"

	"github.com/bettercompute/computed/internal/audit"
	"github.com/bettercompute/computed/internal/authz"
	"github.com/bettercompute/computed/internal/testkit/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// A page counts its filter's records only when the filter asks for the
// total (the graph's totalCount, selected): the count reads every record
// of the filter, and a tenant's trail holds 400 days of every call. Keys
// that ask and keys that do not share one statement and each get theirs,
// for pages with records and for empty ones (Counts).
func TestPagesCountOnlyWhenAsked(t *testing.T) {
	ctx := context.Background()
	db := pgtest.DB(t)
	if _, err := db.ExecContext(ctx, `INSERT INTO tenants (tenant_id, name) VALUES ('acme', 'Acme'), ('beta', 'Beta')`); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 7; i++ {
		if err := audit.Write(ctx, db, audit.Entry{TenantID: "acme", Method: "pools.create", Resource: audit.Resource{Type: "pool", ID: "pool_x"}, Outcome: "success"}); err != nil {
			t.Fatal(err)
		}
	}
	scope := authz.TenantScope("acme")
	counted := audit.Filter{Parent: "acme", Counted: true}
	plain := audit.Filter{Parent: "acme"}
	rows, err := audit.Pages(ctx, db, scope, audit.OfTenant, []string{counted.Key(), plain.Key()}, "", 2)
	if err != nil {
		t.Fatal(err)
	}
	totals := map[string]int{}
	items := map[string]int{}
	for i, k := range rows.Parents {
		totals[k] = rows.Totals[i]
		items[k]++
	}
	if totals[counted.Key()] != 7 || items[counted.Key()] != 3 {
		t.Fatalf("the counted key: total %d, %d rows; want 7 and 3 (limit+1)", totals[counted.Key()], items[counted.Key()])
	}
	if totals[plain.Key()] != 0 || items[plain.Key()] != 3 {
		t.Fatalf("the key without a count: total %d, %d rows; want 0 (not counted) and 3", totals[plain.Key()], items[plain.Key()])
	}
	// a filter with no records in scope: audit.Counts answers for it
	emptyCounted := audit.Filter{Parent: "beta", Counted: true}
	emptyPlain := audit.Filter{Parent: "beta"}
	n, err := audit.Counts(ctx, db, authz.TenantScope("beta"), audit.OfTenant, []string{emptyCounted.Key(), emptyPlain.Key(), counted.Key(), plain.Key()})
	if err != nil {
		t.Fatal(err)
	}
	if n[emptyCounted.Key()] != 0 || n[emptyPlain.Key()] != 0 || n[plain.Key()] != 0 || n[counted.Key()] != 0 {
		t.Fatalf("counts in beta's scope: %v", n)
	}
	n, err = audit.Counts(ctx, db, scope, audit.OfTenant, []string{counted.Key(), plain.Key()})
	if err != nil {
		t.Fatal(err)
	}
	if n[counted.Key()] != 7 || n[plain.Key()] != 0 {
		t.Fatalf("counts: %v, want 7 for the counted key and 0 for the other", n)
	}
	// the flag survives the key
	if f := audit.ParseFilter(counted.Key()); !f.Counted || f.Parent != "acme" {
		t.Fatalf("audit.ParseFilter(Key()) = %+v", f)
	}
	if f := audit.ParseFilter(plain.Key()); f.Counted {
		t.Fatalf("audit.ParseFilter(Key()) = %+v", f)
	}
}

// A filter on a method, resource or principal reads the records of its
// filter through an index, not the tenant's whole trail: each read was a
// scan of every record of the tenant (0.5-1.2 s a page over a million
// records, past the statement timeout for a busy tenant's 400 days).
// Counted as the tuples the statement read, in its own transaction.
func TestFiltersReadOnlyTheirRecords(t *testing.T) {
	ctx := context.Background()
	db := pgtest.DB(t)
	if _, err := db.ExecContext(ctx, `INSERT INTO tenants (tenant_id, name) VALUES ('bulk', 'Bulk')`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO audit_log (audit_id, principal_id, method, outcome, request_id, occurred_at, tenant_id,
			principal_kind, principal_name, resource_type, resource_id)
		SELECT 'aud_' || lpad(to_hex(g), 26, '0'), 'prn_' || (g % 50), (ARRAY['instances.create', 'instances.stop', 'instances.start', 'inventory.report', 'nodes.update', 'pools.update', 'projects.create', 'tokens.create'])[1 + g % 8],
			'SUCCESS', 'req_x', now() - make_interval(secs => g), 'bulk', 'service', 'svc', 'compute-instance', 'ins_' || (g % 500)
		FROM generate_series(1, 50000) g`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `ANALYZE audit_log`); err != nil {
		t.Fatal(err)
	}
	scope := authz.TenantScope("bulk")
	read := func(what string, f audit.Filter, graph bool) {
		t.Helper()
		tx, err := db.BeginTxx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		if graph {
			_, err = audit.Pages(ctx, tx, scope, audit.OfTenant, []string{f.Key()}, "", 50)
		} else {
			_, err = audit.Page(ctx, tx, scope, f, "", 50)
		}
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		if err := tx.GetContext(ctx, &n, `SELECT pg_stat_get_xact_tuples_returned('audit_log'::regclass) + pg_stat_get_xact_tuples_fetched('audit_log'::regclass)`); err != nil {
			t.Fatal(err)
		}
		if n > 200 {
			t.Errorf("%s (graph %v): %d records read for a page of at most 50", what, graph, n)
		}
	}
	for _, graph := range []bool{false, true} {
		read("a method no record has", audit.Filter{Parent: "bulk", Method: "nodes.join"}, graph)
		read("a resource no record has", audit.Filter{Parent: "bulk", ResourceID: "nothing"}, graph)
		read("a principal no record has", audit.Filter{Parent: "bulk", PrincipalID: "prn_none"}, graph)
		read("a method", audit.Filter{Parent: "bulk", Method: "pools.update"}, graph)
		read("a method since a time", audit.Filter{Parent: "bulk", Method: "nodes.join", Since: "2020-01-01T00:00:00Z"}, graph)
		read("a principal in a time range", audit.Filter{Parent: "bulk", PrincipalID: "prn_none", Since: "2020-01-01T00:00:00Z", Until: "2100-01-01T00:00:00Z"}, graph)
		read("a time range", audit.Filter{Parent: "bulk", Since: "2020-01-01T00:00:00Z", Until: "2100-01-01T00:00:00Z"}, graph)
	}
	// Several filters of a field in one batch (a method over every pool of
	// a page): each read as its own.
	tx, err := db.BeginTxx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	keys := []string{audit.Filter{Parent: "bulk", Method: "nodes.join"}.Key(), audit.Filter{Parent: "bulk", PrincipalID: "prn_none", Counted: true}.Key(),
		audit.Filter{Parent: "bulk", Method: "nodes.join", Since: "2020-01-01T00:00:00Z"}.Key()}
	if _, err := audit.Pages(ctx, tx, scope, audit.OfTenant, keys, "", 50); err != nil {
		t.Fatal(err)
	}
	if _, err := audit.Counts(ctx, tx, scope, audit.OfTenant, keys); err != nil {
		t.Fatal(err)
	}
	var n int64
	if err := tx.GetContext(ctx, &n, `SELECT pg_stat_get_xact_tuples_returned('audit_log'::regclass) + pg_stat_get_xact_tuples_fetched('audit_log'::regclass)`); err != nil {
		t.Fatal(err)
	}
	if n > 600 {
		t.Errorf("a batch of three filters: %d records read", n)
	}
}
