package pools_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"github.com/bettercompute/computed/internal/authz"
	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/page"
	"github.com/bettercompute/computed/internal/pools"
	"github.com/bettercompute/computed/internal/testkit"
	"github.com/bettercompute/computed/internal/testkit/fixture"
)

func TestMain(m *testing.M) { testkit.Main(m) }

type env struct {
	*fixture.F
	acme, beta, gamma fixture.Tenant
}

func newEnv(t *testing.T) *env {
	t.Parallel()
	f := fixture.New(t)
	return &env{F: f, acme: f.Tenant("acme"), beta: f.Tenant("beta"), gamma: f.Tenant("gamma")}
}

func (e *env) pool(tenant, name string) *pools.Pool {
	e.T.Helper()
	return fixture.Must(pools.Create(e.Ctx, e.DB, &pools.CreateInput{TenantID: tenant, Name: name, Site: "fra1",
		GPUModel: "H100-SXM5-80GB", SharingMode: "exclusive", Kind: "bare-metal"}))
}

func TestCreateRules(t *testing.T) {
	e := newEnv(t)
	p := e.pool("acme", "metal")
	if p.TenantID != "acme" || p.State != pools.Active || p.RowVersion != 1 || p.Provider != nil || string(p.Policy) != "{}" {
		t.Fatalf("created: %+v %s", p, p.Policy)
	}
	_, err := pools.Create(e.Ctx, e.DB, &pools.CreateInput{TenantID: "acme", Name: "metal", Site: "fra1", GPUModel: "x", SharingMode: "exclusive", Kind: "bare-metal"})
	fixture.Code(t, err, errs.Conflict, "name")
	e.pool("beta", "metal") // names are per tenant
	_, err = pools.Create(e.Ctx, e.DB, &pools.CreateInput{TenantID: "acme", Name: "m2", Site: "fra1", GPUModel: "x", SharingMode: "exclusive",
		Kind: "bare-metal", Provider: fixture.Ptr("sim")})
	fixture.Code(t, err, errs.InvalidInput, "provider")
	vps := fixture.Must(pools.Create(e.Ctx, e.DB, &pools.CreateInput{TenantID: "acme", Name: "vps", Site: "fra1", GPUModel: "x", SharingMode: "exclusive", Kind: "vps-provider"}))
	if vps.Provider == nil || *vps.Provider != pools.DefaultProvider {
		t.Fatalf("a vps-provider pool's default provider: %v", vps.Provider)
	}
	for _, bad := range []string{`[1]`, `"x"`, `{"a": "b\u0000"}`} {
		_, err = pools.Create(e.Ctx, e.DB, &pools.CreateInput{TenantID: "acme", Name: "p-" + bad, Site: "fra1", GPUModel: "x",
			SharingMode: "exclusive", Kind: "bare-metal", Policy: json.RawMessage(bad)})
		fixture.Code(t, err, errs.InvalidInput, fixture.AnyPath)
	}
	_, err = pools.Create(e.Ctx, e.DB, &pools.CreateInput{TenantID: "nosuch", Name: "x", Site: "fra1", GPUModel: "x", SharingMode: "exclusive", Kind: "bare-metal"})
	fixture.Code(t, err, errs.NotFound, "")
	// Deciding: a member may not create pools; a viewer of beta may not in acme.
	in := map[string]any{"tenantId": "acme", "name": "m3", "site": "fra1", "gpuModel": "x", "sharingMode": "exclusive", "kind": "bare-metal"}
	_, err = fixture.Call[pools.Pool](e.F, e.acme.Member, "pools.create", in)
	fixture.Code(t, err, errs.PermissionDenied, "")
	_, err = fixture.Call[pools.Pool](e.F, e.beta.Admin, "pools.create", in)
	fixture.Code(t, err, errs.PermissionDenied, "")
	in["sharingMode"] = "shared"
	_, err = fixture.Call[pools.Pool](e.F, e.acme.Admin, "pools.create", in)
	fixture.Code(t, err, errs.InvalidInput, "sharingMode")
}

// A pool is its owner's and, once offered, visible to the offered tenant
// for reads only; anyone else gets NOT_FOUND, on every method.
func TestVisibilityAndOwnerOnlyChanges(t *testing.T) {
	e := newEnv(t)
	p := e.pool("acme", "metal")
	get := func(tenant string) error {
		_, err := pools.Get(e.Ctx, e.DB, &pools.RefInput{TenantID: tenant, PoolID: p.PoolID})
		return err
	}
	fixture.Code(t, get("beta"), errs.NotFound, "")
	fixture.Must(pools.MakeOffer(e.Ctx, e.DB, &pools.OfferInput{TenantID: "acme", PoolID: p.PoolID, ToTenantID: "beta", Quota: pools.Quota{GPUs: 4, Instances: 2}}))
	if err := get("beta"); err != nil {
		t.Fatalf("the offered tenant: %v", err)
	}
	fixture.Code(t, get("gamma"), errs.NotFound, "")
	listed := func(tenant string) int {
		return len(fixture.Must(pools.List(e.Ctx, e.DB, &pools.ListInput{TenantID: tenant, Limit: 10})).Items)
	}
	if listed("beta") != 1 || listed("gamma") != 0 || listed("acme") != 1 {
		t.Fatalf("listed: acme %d, beta %d, gamma %d", listed("acme"), listed("beta"), listed("gamma"))
	}
	// Through the methods: beta reads, but every owner-only change is
	// NOT_FOUND to it, as to gamma, which does not see the pool at all.
	fixture.Must(fixture.Call[pools.Pool](e.F, e.beta.Viewer, "pools.get", map[string]any{"tenantId": "beta", "poolId": p.PoolID}))
	for _, who := range []fixture.Tenant{e.beta, e.gamma} {
		for _, c := range []struct {
			method string
			in     map[string]any
		}{
			{"pools.update", map[string]any{"name": "mine"}},
			{"pools.archive", map[string]any{}},
			{"pools.offer", map[string]any{"toTenantId": "acme", "quota": map[string]any{"gpus": 1, "instances": 1}}},
			{"pools.unoffer", map[string]any{"toTenantId": "beta"}},
		} {
			c.in["tenantId"], c.in["poolId"] = who.ID, p.PoolID
			_, err := fixture.Call[json.RawMessage](e.F, who.Admin, c.method, c.in)
			fixture.Code(t, err, errs.NotFound, fixture.AnyPath)
		}
		_, err := fixture.Call[pools.Pool](e.F, who.Admin, "pools.get", map[string]any{"tenantId": who.ID, "poolId": p.PoolID})
		if who.ID == "gamma" {
			fixture.Code(t, err, errs.NotFound, "")
		} else if err != nil {
			t.Fatal(err)
		}
	}
	// The domain functions themselves refuse the non-owner (NOT_FOUND).
	_, err := pools.Update(e.Ctx, e.DB, &pools.UpdateInput{TenantID: "beta", PoolID: p.PoolID, Name: fixture.Ptr("x")})
	fixture.Code(t, err, errs.NotFound, "")
	_, err = pools.Archive(e.Ctx, e.DB, &pools.ArchiveInput{TenantID: "beta", PoolID: p.PoolID})
	fixture.Code(t, err, errs.NotFound, "")
	// Graph batches: the scope decides; the zero scope reads nothing.
	for _, c := range []struct {
		scope authz.Scope
		want  int
	}{{authz.TenantScope("acme"), 1}, {authz.TenantScope("beta"), 1}, {authz.TenantScope("gamma"), 0}, {authz.Scope{}, 0}} {
		if got := fixture.Must(pools.ByIDs(e.Ctx, e.DB, c.scope, []string{p.PoolID})); len(got) != c.want {
			t.Fatalf("scope %+v reads %d pools", c.scope, len(got))
		}
	}
	// Unoffered: beta no longer sees it.
	fixture.Must(pools.Unoffer(e.Ctx, e.DB, &pools.UnofferInput{TenantID: "acme", PoolID: p.PoolID, ToTenantID: "beta"}))
	fixture.Code(t, get("beta"), errs.NotFound, "")
	_, err = pools.Unoffer(e.Ctx, e.DB, &pools.UnofferInput{TenantID: "acme", PoolID: p.PoolID, ToTenantID: "beta"})
	fixture.Code(t, err, errs.NotFound, "")
}

func TestOfferRules(t *testing.T) {
	e := newEnv(t)
	p := e.pool("acme", "metal")
	offer := func(to string, gpus int) (*pools.Offer, error) {
		return pools.MakeOffer(e.Ctx, e.DB, &pools.OfferInput{TenantID: "acme", PoolID: p.PoolID, ToTenantID: to, Quota: pools.Quota{GPUs: gpus, Instances: 1}})
	}
	_, err := offer("acme", 1)
	fixture.Code(t, err, errs.InvalidInput, "toTenantId")
	_, err = offer(authz.BuiltinTenant, 1)
	fixture.Code(t, err, errs.InvalidInput, "toTenantId")
	_, err = offer("nosuch", 1)
	fixture.Code(t, err, errs.NotFound, "toTenantId")
	fixture.Must(offer("beta", 1))
	// Offering again changes the quota; it is one offer.
	if o := fixture.Must(offer("beta", 8)); o.Quota.GPUs != 8 {
		t.Fatalf("re-offer: %+v", o)
	}
	fixture.Must(offer("gamma", 2))
	// The graph's pages of a pool's offers: by the tenant offered to, one
	// at a time here, and the owner's only.
	var got []string
	after := ""
	for n := 0; n < 5; n++ {
		rows := fixture.Must(pools.OfferPagesByPool(e.Ctx, e.DB, authz.TenantScope("acme"), []string{p.PoolID}, after, 1))
		if len(rows.Items) == 0 || rows.Totals[0] != 2 {
			t.Fatalf("page after %q: %+v", after, rows)
		}
		o := rows.Items[0]
		got = append(got, fmt.Sprintf("%s:%d", o.ToTenantID, o.Quota.GPUs))
		after = o.ToTenantID
		if len(rows.Items) == 1 {
			break
		}
	}
	if fmt.Sprint(got) != "[beta:8 gamma:2]" {
		t.Fatalf("offers: %v", got)
	}
	if n := fixture.Must(pools.CountOffersByPool(e.Ctx, e.DB, authz.TenantScope("acme"), []string{p.PoolID})); n[p.PoolID] != 2 {
		t.Fatalf("counted %v", n)
	}
	// The offered tenants do not read the pool's offers (their own or others').
	for _, tenant := range []string{"beta", "gamma"} {
		rows := fixture.Must(pools.OfferPagesByPool(e.Ctx, e.DB, authz.TenantScope(tenant), []string{p.PoolID}, "", 10))
		n := fixture.Must(pools.CountOffersByPool(e.Ctx, e.DB, authz.TenantScope(tenant), []string{p.PoolID}))
		if len(rows.Items) != 0 || n[p.PoolID] != 0 {
			t.Fatalf("%s reads %d offers, counts %d", tenant, len(rows.Items), n[p.PoolID])
		}
	}
	// An archived pool takes no offers.
	fixture.Must(pools.Archive(e.Ctx, e.DB, &pools.ArchiveInput{TenantID: "acme", PoolID: p.PoolID}))
	_, err = offer("gamma", 1)
	fixture.Code(t, err, errs.InvalidState, "")
}

func TestUpdateAndArchive(t *testing.T) {
	e := newEnv(t)
	p := e.pool("acme", "metal")
	e.pool("acme", "other")
	up := func(in pools.UpdateInput) (*pools.Pool, error) {
		in.TenantID, in.PoolID = "acme", p.PoolID
		return pools.Update(e.Ctx, e.DB, &in)
	}
	_, err := up(pools.UpdateInput{})
	fixture.Code(t, err, errs.InvalidInput, "name")
	_, err = up(pools.UpdateInput{Name: fixture.Ptr("other")})
	fixture.Code(t, err, errs.Conflict, "name")
	_, err = up(pools.UpdateInput{Policy: json.RawMessage(`[]`)})
	fixture.Code(t, err, errs.InvalidInput, "policy")
	got := fixture.Must(up(pools.UpdateInput{Name: fixture.Ptr("renamed"), ExpectedVersion: fixture.Ptr(1)}))
	if got.Name != "renamed" || got.RowVersion != 2 {
		t.Fatalf("updated: %+v", got)
	}
	_, err = up(pools.UpdateInput{Name: fixture.Ptr("again"), ExpectedVersion: fixture.Ptr(1)})
	if fixture.Code(t, err, errs.Conflict, "").Details["rowVersion"] != 2 {
		t.Fatalf("conflict details: %v", err)
	}
	_, err = pools.Archive(e.Ctx, e.DB, &pools.ArchiveInput{TenantID: "acme", PoolID: p.PoolID, ExpectedVersion: fixture.Ptr(1)})
	fixture.Code(t, err, errs.Conflict, "")
	a := fixture.Must(pools.Archive(e.Ctx, e.DB, &pools.ArchiveInput{TenantID: "acme", PoolID: p.PoolID, ExpectedVersion: fixture.Ptr(2)}))
	if a.State != pools.Archived || a.RowVersion != 3 {
		t.Fatalf("archived: %+v", a)
	}
	_, err = pools.Archive(e.Ctx, e.DB, &pools.ArchiveInput{TenantID: "acme", PoolID: p.PoolID})
	fixture.Code(t, err, errs.InvalidState, "")
	_, err = up(pools.UpdateInput{Name: fixture.Ptr("late")})
	fixture.Code(t, err, errs.InvalidState, "")
	// Archived pools stay listed, with their state.
	l := fixture.Must(pools.List(e.Ctx, e.DB, &pools.ListInput{TenantID: "acme", Limit: 10}))
	if len(l.Items) != 2 {
		t.Fatalf("listed %d", len(l.Items))
	}
}

// Racing writers with one expectedVersion: one wins.
func TestExpectedVersionUnderRace(t *testing.T) {
	e := newEnv(t)
	p := e.pool("acme", "metal")
	fixture.OneWins(t, 8, func(i int) error {
		_, err := fixture.Call[pools.Pool](e.F, e.acme.Admin, "pools.update",
			map[string]any{"tenantId": "acme", "poolId": p.PoolID, "name": fmt.Sprint("n", i), "expectedVersion": 1})
		return err
	})
}

// Pages: each pool once across pages of every size; the last page has no
// cursor; the graph's per-tenant pages agree.
func TestListPages(t *testing.T) {
	e := newEnv(t)
	var want []string
	for i := 0; i < 5; i++ {
		want = append(want, e.pool("acme", fmt.Sprint("p", i)).PoolID)
	}
	offered := e.pool("beta", "offered")
	fixture.Must(pools.MakeOffer(e.Ctx, e.DB, &pools.OfferInput{TenantID: "beta", PoolID: offered.PoolID, ToTenantID: "acme", Quota: pools.Quota{GPUs: 1, Instances: 1}}))
	want = append(want, offered.PoolID)
	slices.Sort(want)
	for limit := 1; limit <= 7; limit++ {
		got := fixture.Walk(t, limit, func(cursor string) (*page.Page[pools.Pool], error) {
			return pools.List(e.Ctx, e.DB, &pools.ListInput{TenantID: "acme", Limit: limit, Cursor: cursor})
		}, func(p pools.Pool) string { return p.PoolID })
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("limit %d: %v, want %v", limit, got, want)
		}
	}
	_, err := pools.List(e.Ctx, e.DB, &pools.ListInput{TenantID: "acme", Limit: 1, Cursor: "x"})
	fixture.Code(t, err, errs.InvalidInput, "cursor")
	// The graph's Tenant.pools: the pools each tenant sees (owned or offered).
	rows := fixture.Must(pools.PagesByTenant(e.Ctx, e.DB, []string{"acme", "beta"}, "", 3))
	per := map[string]int{}
	for _, parent := range rows.Parents {
		per[parent]++
	}
	counts := fixture.Must(pools.CountByTenant(e.Ctx, e.DB, []string{"acme", "beta"}))
	if per["acme"] != 4 || per["beta"] != 1 || counts["acme"] != 6 || counts["beta"] != 1 || rows.Totals[0] != counts[rows.Parents[0]] {
		t.Fatalf("pages %v (limit 3, one extra to tell a next page), counts %v", per, counts)
	}
}
