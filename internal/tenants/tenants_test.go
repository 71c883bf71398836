package tenants_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/bettercompute/computed/internal/authz"
	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/page"
	"github.com/bettercompute/computed/internal/reqctx"
	"github.com/bettercompute/computed/internal/tenants"
	"github.com/bettercompute/computed/internal/testkit"
	"github.com/bettercompute/computed/internal/testkit/fixture"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// Only the operator creates tenants; an id is taken once, builtin is
// reserved; the id's form is checked.
func TestCreate(t *testing.T) {
	t.Parallel()
	f := fixture.New(t)
	acme := f.Tenant("acme")
	op := f.Operator()
	got := fixture.Must(fixture.Call[tenants.Tenant](f, op, "tenants.create", map[string]any{"tenantId": "beta", "name": "Beta"}))
	if got.TenantID != "beta" || got.Name != "Beta" || got.CreatedAt.IsZero() {
		t.Fatalf("created: %+v", got)
	}
	_, err := fixture.Call[tenants.Tenant](f, op, "tenants.create", map[string]any{"tenantId": "beta", "name": "again"})
	fixture.Code(t, err, errs.Conflict, "tenantId")
	// builtin is reserved: no principal writes to it, the operator included.
	_, err = fixture.Call[tenants.Tenant](f, op, "tenants.create", map[string]any{"tenantId": authz.BuiltinTenant, "name": "again"})
	fixture.Code(t, err, errs.PermissionDenied, "")
	_, err = fixture.Call[tenants.Tenant](f, acme.Admin, "tenants.create", map[string]any{"tenantId": "gamma", "name": "G"})
	fixture.Code(t, err, errs.PermissionDenied, "")
	_, err = fixture.Call[tenants.Tenant](f, op, "tenants.create", map[string]any{"tenantId": "has space", "name": "G"})
	fixture.Code(t, err, errs.InvalidInput, "tenantId")
	_, err = fixture.Call[tenants.Tenant](f, nil, "tenants.create", map[string]any{"tenantId": "gamma", "name": "G"})
	fixture.Code(t, err, errs.Unauthenticated, "")
	// Racing creates of one id: one wins.
	var wg sync.WaitGroup
	res := make([]error, 8)
	for i := range res {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			_, res[i] = tenants.Create(f.Ctx, f.DB, &tenants.CreateInput{TenantID: "raced", Name: fmt.Sprint(i)})
		}(i)
	}
	wg.Wait()
	won := 0
	for _, err := range res {
		if err == nil {
			won++
		} else if errs.CodeOf(err) != errs.Conflict {
			t.Fatalf("a loser: %v", err)
		}
	}
	if won != 1 {
		t.Fatalf("%d won", won)
	}
}

// A tenant is read by the principals holding a role on it and by the
// operator (builtin, which holds the shipped profiles, by every reader);
// anyone else is PERMISSION_DENIED, whether or not it exists; lists show
// each caller its own tenants, never builtin.
func TestReadsAndLists(t *testing.T) {
	t.Parallel()
	f := fixture.New(t)
	acme, beta := f.Tenant("acme"), f.Tenant("beta")
	fixture.Must(fixture.Call[tenants.Tenant](f, acme.Viewer, "tenants.get", map[string]any{"tenantId": "acme"}))
	fixture.Must(fixture.Call[tenants.Tenant](f, acme.Viewer, "tenants.get", map[string]any{"tenantId": authz.BuiltinTenant}))
	for _, id := range []string{"beta", "nosuch"} {
		_, err := fixture.Call[tenants.Tenant](f, acme.Viewer, "tenants.get", map[string]any{"tenantId": id})
		fixture.Code(t, err, errs.PermissionDenied, "")
	}
	op := f.Operator()
	fixture.Must(fixture.Call[tenants.Tenant](f, op, "tenants.get", map[string]any{"tenantId": "beta"}))
	_, err := fixture.Call[tenants.Tenant](f, op, "tenants.get", map[string]any{"tenantId": "nosuch"})
	fixture.Code(t, err, errs.NotFound, "tenantId")

	for i := 0; i < 4; i++ {
		f.Tenant(fmt.Sprint("t", i))
	}
	list := func(p *reqctx.Principal, limit int) []string {
		return fixture.Walk(t, limit, func(cursor string) (*page.Page[tenants.Tenant], error) {
			in := map[string]any{"limit": limit}
			if cursor != "" {
				in["cursor"] = cursor
			}
			return fixture.Call[page.Page[tenants.Tenant]](f, p, "tenants.list", in)
		}, func(x tenants.Tenant) string { return x.TenantID })
	}
	if got := fmt.Sprint(list(acme.Viewer, 50)); got != "[acme]" {
		t.Fatalf("acme's viewer lists %s", got)
	}
	if got := fmt.Sprint(list(beta.Admin, 1)); got != "[beta]" {
		t.Fatalf("beta's admin lists %s", got)
	}
	want := "[acme beta t0 t1 t2 t3]"
	for limit := 1; limit <= 7; limit++ {
		if got := fmt.Sprint(list(op, limit)); got != want {
			t.Fatalf("the operator lists %s with limit %d", got, limit)
		}
	}
	if n := fixture.Must(tenants.Count(f.Ctx, f.DB, authz.TenantScope("acme"))); n != 1 {
		t.Fatalf("count %d", n)
	}
	// The graph's read: scope decides; the zero scope reads nothing.
	for _, c := range []struct {
		scope       authz.Scope
		acme, count int
	}{{authz.TenantScope("acme"), 1, 1}, {authz.TenantScope("beta"), 0, 1}, {authz.Scope{}, 0, 0}} {
		if got := fixture.Must(tenants.ByIDs(f.Ctx, f.DB, c.scope, []string{"acme"})); len(got) != c.acme {
			t.Fatalf("scope %+v reads acme %d times", c.scope, len(got))
		}
		if n := fixture.Must(tenants.Count(f.Ctx, f.DB, c.scope)); n != c.count {
			t.Fatalf("scope %+v counts %d", c.scope, n)
		}
	}
}
