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
