package graphread_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/bettercompute/computed/internal/authz"
	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/events"
	"github.com/bettercompute/computed/internal/ids"
	"github.com/bettercompute/computed/internal/instances"
	"github.com/bettercompute/computed/internal/instances/graphread"
	"github.com/bettercompute/computed/internal/inventory"
	"github.com/bettercompute/computed/internal/page"
	"github.com/bettercompute/computed/internal/pools"
	"github.com/bettercompute/computed/internal/projects"
	"github.com/bettercompute/computed/internal/reqctx"
	"github.com/bettercompute/computed/internal/store"
	"github.com/bettercompute/computed/internal/testkit"
	"github.com/bettercompute/computed/internal/testkit/fixture"
)

// The graph's batched reads of instances, reservations, instance events
// and capacity, against a real database: what each caller gets back (the
// instances' visibility predicates bound to the caller's scope), how a
// batch pages and counts, and that a batch of many parents is one
// statement.

func TestMain(m *testing.M) { testkit.Main(m) }

// env: acme owns a provider pool (offered to beta), a second provider
// pool, a hosted pool (offered to beta) with one ready node, and a
// project; gamma holds nothing of them.
type env struct {
	*fixture.F
	acme, beta, gamma    fixture.Tenant
	prov, other, hosted  string
	project, node        string
	gpus                 []string // the node's GPU uuids
	scopeOf              func(p *reqctx.Principal, perm authz.Permission) authz.Scope
	acmeScope, betaScope authz.Scope
}

func newEnv(t *testing.T) *env {
	t.Parallel()
	f := fixture.New(t)
	e := &env{F: f, acme: f.Tenant("acme"), beta: f.Tenant("beta"), gamma: f.Tenant("gamma")}
	pool := func(name, kind, policy string) string {
		return fixture.Must(pools.Create(f.Ctx, f.DB, &pools.CreateInput{TenantID: "acme", Name: name, Site: "fra1",
			GPUModel: "H100-SXM5-80GB", SharingMode: "exclusive", Kind: kind, Policy: json.RawMessage(policy)})).PoolID
	}
	e.prov = pool("prov", "vps-provider", `{"capacity": {"gpus": 16, "vcpus": 256, "memoryGiB": 2048}}`)
	e.other = pool("other", "vps-provider", `{}`)
	e.hosted = pool("hosted", "vps-hosted", `{}`)
	for _, p := range []string{e.prov, e.hosted} {
		fixture.Must(pools.MakeOffer(f.Ctx, f.DB, &pools.OfferInput{TenantID: "acme", PoolID: p, ToTenantID: "beta", Quota: pools.Quota{GPUs: 8, Instances: 50}}))
	}
	e.project = fixture.Must(fixture.Call[projects.Project](f, e.acme.Member, "projects.create", map[string]any{"tenantId": "acme", "name": "web"})).ProjectID
	e.node, e.gpus = e.readyNode(e.hosted)
	e.scopeOf = func(p *reqctx.Principal, perm authz.Permission) authz.Scope {
		c := fixture.Must(authz.LoadCaller(f.As(p), f.DB, p))
		return c.Scope(perm)
	}
	e.acmeScope, e.betaScope = e.scopeOf(e.acme.Viewer, authz.InstancesRead), e.scopeOf(e.beta.Viewer, authz.InstancesRead)
	return e
}

func (e *env) exec(q string, args ...any) {
	e.T.Helper()
	if _, err := e.DB.Exec(q, args...); err != nil {
		e.T.Fatalf("%s: %v", q, err)
	}
}

// readyNode adds a ready node of acme to pool with the H100 inventory as
// its latest snapshot, and returns it with its GPUs' uuids.
func (e *env) readyNode(pool string) (string, []string) {
	e.T.Helper()
	raw, err := os.ReadFile("../../inventory/testdata/h100-node.json")
	if err != nil {
		e.T.Fatal(err)
	}
	_, canonical, hash, err := inventory.Decode(raw)
	if err != nil {
		e.T.Fatal(err)
	}
	var rep struct {
		GPUs []struct {
			UUID string `json:"uuid"`
		} `json:"gpus"`
	}
	if err := json.Unmarshal(raw, &rep); err != nil {
		e.T.Fatal(err)
	}
	var gpus []string
	for _, g := range rep.GPUs {
		gpus = append(gpus, g.UUID)
	}
	id, snap := ids.New(ids.Node), ids.New(ids.Inventory)
	e.exec(`INSERT INTO nodes (node_id, tenant_id, pool_id, name, state, attestor, csr_fingerprint, certificate, cert_expires_at)
		VALUES ($1, 'acme', $2, $1, 'ready', 'token', $1, 'x', now() + interval '1 day')`, id, pool)
	e.exec(`INSERT INTO inventory_snapshots (snapshot_id, node_id, hash, sections, collected_at) VALUES ($1, $2, $3, $4::json, now())`,
		snap, id, hash, string(canonical))
	e.exec(`UPDATE nodes SET latest_snapshot_id = $2 WHERE node_id = $1`, id, snap)
	return id, gpus
}

// pathTo is the states from pending to state, one allowed move each.
var pathTo = map[string][]string{
	instances.Pending: {}, instances.Provisioning: {"provisioning"}, instances.Running: {"provisioning", "running"},
	instances.Stopped: {"provisioning", "running", "stopping", "stopped"}, instances.Failed: {"failed"},
	instances.Deleted: {"deleted"},
}

// inst is an instance of tenant in pool (in project unless ""), moved to
// state through the transition table.
func (e *env) inst(tenant, pool, project, state string) string {
	e.T.Helper()
	id := ids.New(ids.Instance)
	var proj any
	if project != "" {
		proj = project
	}
	e.exec(`INSERT INTO instances (instance_id, tenant_id, pool_id, project_id, name, gpus, vcpus, memory_gib, desired_state)
		VALUES ($1, $2, $3, $4, $1, 1, 4, 16, 'running')`, id, tenant, pool, proj)
	for _, s := range pathTo[state] {
		if s == instances.Deleted {
			e.exec(`UPDATE instances SET state = 'deleted', desired_state = 'deleted', deleted_at = now() WHERE instance_id = $1`, id)
			continue
		}
		e.exec(`UPDATE instances SET state = $2 WHERE instance_id = $1`, id, s)
	}
	return id
}

// counted is a context whose statements c counts.
func (e *env) counted() (context.Context, *store.Counter) {
	var c store.Counter
	return store.WithCounter(e.Ctx, &c), &c
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func sorted(s ...string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// --- instances by id ------------------------------------------------------

// ViewsByID returns the instances the caller reads among the ids, deleted
// ones included (as instances.get), in one statement, with the pool and
// host links' visibility.
func TestViewsByID(t *testing.T) {
	e := newEnv(t)
	a1 := e.inst("acme", e.prov, e.project, instances.Running)
	a2 := e.inst("acme", e.other, "", instances.Pending)
	ad := e.inst("acme", e.prov, "", instances.Deleted)
	b1 := e.inst("beta", e.prov, "", instances.Running)
	onHost := e.inst("beta", e.hosted, "", instances.Running)
	e.exec(`UPDATE instances SET host_node_id = $2 WHERE instance_id = $1`, onHost, e.node)
	all := []string{a1, a2, ad, b1, onHost, ids.New(ids.Instance)}

	op := e.scopeOf(e.Operator(), authz.InstancesRead)
	nodesOf := func(p *reqctx.Principal) authz.Scope { return e.scopeOf(p, authz.NodesRead) }
	for _, c := range []struct {
		who   string
		scope authz.Scope
		want  []string
	}{
		{"acme's viewer", e.acmeScope, []string{a1, a2, ad}},
		{"beta's viewer", e.betaScope, []string{b1, onHost}},
		{"gamma's admin", e.scopeOf(e.gamma.Admin, authz.InstancesRead), nil},
		{"the operator", op, []string{a1, a2, ad, b1, onHost}},
		{"the zero scope", authz.Scope{}, nil},
	} {
		ctx, n := e.counted()
		got := fixture.Must(graphread.ViewsByID(ctx, e.DB, c.scope, authz.Scope{}, all))
		if !slices.Equal(keys(got), sorted(c.want...)) || n.N() != 1 {
			t.Fatalf("%s reads %v in %d statements, want %v", c.who, keys(got), n.N(), sorted(c.want...))
		}
		for id, v := range got {
			if v.InstanceID != id || v.Size.GPUs != 1 || v.Size.VCPUs != 4 || v.Size.MemoryGiB != 16 || v.CreatedAt.Location().String() != "UTC" {
				t.Fatalf("%s: %s read as %+v", c.who, id, v)
			}
		}
	}
	// The links: the pool is followed while the instance's tenant owns it
	// or is offered it; the host while the caller reads the host's tenant.
	got := fixture.Must(graphread.ViewsByID(e.Ctx, e.DB, op, nodesOf(e.acme.Viewer), all))
	for _, c := range []struct {
		id         string
		pool, host bool
	}{{a1, true, false}, {a2, true, false}, {b1, true, false}, {onHost, true, true}} {
		if v := got[c.id]; v.PoolVisible != c.pool || v.HostVisible != c.host {
			t.Fatalf("%s: pool %v host %v, want %v %v", c.id, v.PoolVisible, v.HostVisible, c.pool, c.host)
		}
	}
	if v := fixture.Must(graphread.ViewsByID(e.Ctx, e.DB, e.betaScope, nodesOf(e.beta.Viewer), []string{onHost}))[onHost]; v == nil || v.HostVisible {
		t.Fatalf("beta follows acme's host node: %+v", v)
	}
	if d := got[ad]; d.State != instances.Deleted || d.DeletedAt == nil || d.DeletedAt.Location().String() != "UTC" {
		t.Fatalf("the deleted instance: %+v", d)
	}
	fixture.Must(pools.Unoffer(e.Ctx, e.DB, &pools.UnofferInput{TenantID: "acme", PoolID: e.prov, ToTenantID: "beta"}))
	got = fixture.Must(graphread.ViewsByID(e.Ctx, e.DB, e.betaScope, authz.Scope{}, []string{b1}))
	if v := got[b1]; v == nil || v.PoolVisible {
		t.Fatalf("after the unoffer, beta's instance: %+v", v)
	}
	if got := fixture.Must(graphread.ViewsByID(e.Ctx, e.DB, e.acmeScope, authz.Scope{}, nil)); len(got) != 0 {
		t.Fatalf("no ids: %v", keys(got))
	}
}

// --- pages of instances ---------------------------------------------------

// items groups the page rows by parent key, in the order returned.
func items[T any](r page.Rows[T], id func(T) string) (map[string][]string, map[string]int) {
	if len(r.Parents) != len(r.Items) || len(r.Totals) != len(r.Items) {
		panic(fmt.Sprintf("rows: %d parents, %d totals, %d items", len(r.Parents), len(r.Totals), len(r.Items)))
	}
	out, totals := map[string][]string{}, map[string]int{}
	for k, p := range r.Parents {
		out[p] = append(out[p], id(r.Items[k]))
		totals[p] = r.Totals[k]
	}
	return out, totals
}

func viewID(v graphread.View) string { return v.InstanceID }

func key(parent, pool, project, state string) string {
	return graphread.Scope{Parent: parent, PoolID: pool, ProjectID: project, State: state}.Key()
}

// ViewPages pages each scope's instances by id (after the cursor, up to
// limit+1 each), with each scope's total, in one statement; a caller
// reads only its tenants' instances, even in a pool it owns; deleted
// instances only when the state filter asks for them; CountViews counts
// as the totals do.
func TestViewPagesAndCounts(t *testing.T) {
	e := newEnv(t)
	var live []string
	for k := 0; k < 4; k++ {
		live = append(live, e.inst("acme", e.prov, e.project, instances.Running))
	}
	pend := e.inst("acme", e.other, "", instances.Pending)
	live = append(live, pend)
	del := e.inst("acme", e.prov, e.project, instances.Deleted)
	b1 := e.inst("beta", e.prov, "", instances.Running)
	b2 := e.inst("beta", e.prov, "", instances.Stopped)
	slices.Sort(live)

	tenants := []string{key("acme", "", "", ""), key("beta", "", "", ""), key("gamma", "", "", "")}
	check := func(what string, scope authz.Scope, by graphread.Parent, ks []string, after string, limit int, want map[string][]string, totals map[string]int) {
		t.Helper()
		ctx, n := e.counted()
		r, err := graphread.ViewPages(ctx, e.DB, scope, authz.Scope{}, by, ks, after, limit)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		got, gotTotals := items(r, viewID)
		if n.N() != 1 || !reflect.DeepEqual(got, want) || !reflect.DeepEqual(gotTotals, totals) {
			t.Fatalf("%s: %v (totals %v) in %d statements, want %v (totals %v)", what, got, gotTotals, n.N(), want, totals)
		}
		for _, v := range r.Items {
			if v.Size.GPUs != 1 {
				t.Fatalf("%s: not normalized: %+v", what, v)
			}
		}
		ctx, n = e.counted()
		counts := fixture.Must(graphread.CountViews(ctx, e.DB, scope, by, ks))
		if n.N() != 1 || len(counts) != len(ks) {
			t.Fatalf("%s: counts %v in %d statements", what, counts, n.N())
		}
		for _, k := range ks {
			if want, ok := totals[k]; ok && counts[k] != want {
				t.Fatalf("%s: count of %q %d, total %d", what, k, counts[k], want)
			}
		}
	}
	// Tenants: acme's viewer reads acme's live instances; beta's and
	// gamma's pages are empty to it (and count 0).
	check("acme's tenants", e.acmeScope, graphread.OfTenant, tenants, "", 50,
		map[string][]string{tenants[0]: live}, map[string]int{tenants[0]: 5})
	for _, k := range tenants[1:] {
		if c := fixture.Must(graphread.CountViews(e.Ctx, e.DB, e.acmeScope, graphread.OfTenant, []string{k})); c[k] != 0 {
			t.Fatalf("acme counts %d instances of %q", c[k], k)
		}
	}
	check("the operator's tenants", e.scopeOf(e.Operator(), authz.InstancesRead), graphread.OfTenant, tenants, "", 50,
		map[string][]string{tenants[0]: live, tenants[1]: sorted(b1, b2)}, map[string]int{tenants[0]: 5, tenants[1]: 2})
	check("the zero scope", authz.Scope{}, graphread.OfTenant, tenants, "", 50, map[string][]string{}, map[string]int{})

	// A pool's instances: its owner reads its own tenant's only, the
	// offered tenant its own.
	pk := []string{key(e.prov, "", "", ""), key(e.other, "", "", "")}
	acmeProv := slices.DeleteFunc(slices.Clone(live), func(id string) bool { return id == pend })
	check("acme's pools", e.acmeScope, graphread.OfPool, pk, "", 50,
		map[string][]string{pk[0]: acmeProv, pk[1]: {pend}}, map[string]int{pk[0]: 4, pk[1]: 1})
	check("beta's pools", e.betaScope, graphread.OfPool, pk, "", 50,
		map[string][]string{pk[0]: sorted(b1, b2)}, map[string]int{pk[0]: 2})

	// Filters: project, pool, state; deleted only when asked for.
	proj := key(e.project, "", "", "")
	check("the project", e.acmeScope, graphread.OfProject, []string{proj}, "", 50,
		map[string][]string{proj: acmeProv}, map[string]int{proj: 4})
	f := []string{key("acme", e.other, "", ""), key("acme", "", e.project, ""), key("acme", "", "", "deleted"),
		key("acme", "", "", "pending"), key("acme", e.other, "", "running"), key("beta", "", "", "stopped")}
	check("filters", e.acmeScope, graphread.OfTenant, f, "", 50,
		map[string][]string{f[0]: {pend}, f[1]: acmeProv, f[2]: {del}, f[3]: {pend}}, map[string]int{f[0]: 1, f[1]: 4, f[2]: 1, f[3]: 1})
	check("filters as beta", e.betaScope, graphread.OfTenant, f, "", 50,
		map[string][]string{f[5]: {b2}}, map[string]int{f[5]: 1})

	// Pages: up to limit+1 rows a scope (the extra says there is more),
	// after the cursor, by id; the total is the scope's, not the page's.
	for _, limit := range []int{0, 1, 3, 4, 5, 6} {
		want := live[:min(len(live), limit+1)]
		check(fmt.Sprintf("limit %d", limit), e.acmeScope, graphread.OfTenant, tenants, "", limit,
			map[string][]string{tenants[0]: want}, map[string]int{tenants[0]: 5})
		g := page.Group(fixture.Must(graphread.ViewPages(e.Ctx, e.DB, e.acmeScope, authz.Scope{}, graphread.OfTenant, tenants[:1], "", limit)), limit)
		if c := g[tenants[0]]; c == nil || len(c.Items) != min(limit, 5) || c.HasNext != (limit < 5) || c.Total != 5 {
			t.Fatalf("limit %d: grouped %+v", limit, c)
		}
	}
	for k, after := range live {
		want := map[string][]string{}
		if rest := live[k+1:]; len(rest) > 0 {
			want[tenants[0]] = rest[:min(len(rest), 3)]
		}
		totals := map[string]int{}
		if len(want) > 0 {
			totals[tenants[0]] = 5
		}
		check(fmt.Sprintf("after %d", k), e.acmeScope, graphread.OfTenant, tenants, after, 2, want, totals)
	}
	// The cursor applies to each scope of the batch.
	check("after, two scopes", e.scopeOf(e.Operator(), authz.InstancesRead), graphread.OfTenant, tenants, live[1], 50,
		map[string][]string{tenants[0]: live[2:], tenants[1]: filterAfter(sorted(b1, b2), live[1])},
		map[string]int{tenants[0]: 5, tenants[1]: 2})
}

// filterAfter drops the ids up to after.
func filterAfter(s []string, after string) []string {
	return slices.DeleteFunc(s, func(id string) bool { return id <= after })
}

// A page at the graph's bound: MaxLimit items read with MaxLimit+1 rows,
// and the next page after the last of them holds the rest.
func TestViewPagesAtTheBound(t *testing.T) {
	e := newEnv(t)
	e.exec(`INSERT INTO instances (instance_id, tenant_id, pool_id, name, gpus, vcpus, memory_gib, desired_state)
		SELECT 'inst_' || lpad(g::text, 26, '0'), 'acme', $1, 'i' || g, 0, 1, 1, 'running' FROM generate_series(1, $2) g`, e.prov, page.MaxLimit+2)
	k := []string{key("acme", "", "", "")}
	r := fixture.Must(graphread.ViewPages(e.Ctx, e.DB, e.acmeScope, authz.Scope{}, graphread.OfTenant, k, "", page.MaxLimit))
	if len(r.Items) != page.MaxLimit+1 || r.Totals[0] != page.MaxLimit+2 {
		t.Fatalf("first page: %d rows, total %d", len(r.Items), r.Totals[0])
	}
	g := page.Group(r, page.MaxLimit)[k[0]]
	last := g.Items[len(g.Items)-1].InstanceID
	if len(g.Items) != page.MaxLimit || !g.HasNext || last != fmt.Sprintf("inst_%026d", page.MaxLimit) {
		t.Fatalf("grouped: %d items, next %v, last %s", len(g.Items), g.HasNext, last)
	}
	r = fixture.Must(graphread.ViewPages(e.Ctx, e.DB, e.acmeScope, authz.Scope{}, graphread.OfTenant, k, last, page.MaxLimit))
	if got, _ := items(r, viewID); !slices.Equal(got[k[0]], []string{fmt.Sprintf("inst_%026d", page.MaxLimit+1), fmt.Sprintf("inst_%026d", page.MaxLimit+2)}) {
		t.Fatalf("second page: %v", got)
	}
	r = fixture.Must(graphread.ViewPages(e.Ctx, e.DB, e.acmeScope, authz.Scope{}, graphread.OfTenant, k, fmt.Sprintf("inst_%026d", page.MaxLimit+2), page.MaxLimit))
	if len(r.Items) != 0 {
		t.Fatalf("after the last: %d rows", len(r.Items))
	}
}

// A page of live instances reads the rows it shows, not the deleted ones
// beside them (migration 00021): with 2,000 deleted instances in acme's
// tenant, pool and project, each list (instances.list and the graph's
// pages and counts, by tenant, pool and project) reads a few rows per live
// instance. Before, each read every deleted row of its scope. Asking for
// the deleted ones still reads them.
func TestListsReadNoDeletedRow(t *testing.T) {
	e := newEnv(t)
	const deleted, live = 2000, 30
	e.exec(`INSERT INTO instances (instance_id, tenant_id, pool_id, project_id, name, gpus, vcpus, memory_gib, desired_state, state, deleted_at)
		SELECT 'inst_' || md5(g::text), 'acme', $1, $2, 'd' || g, 0, 1, 1, 'deleted', 'deleted', now() FROM generate_series(1, $3) g`, e.prov, e.project, deleted)
	e.exec(`INSERT INTO instances (instance_id, tenant_id, pool_id, project_id, name, gpus, vcpus, memory_gib, desired_state)
		SELECT 'inst_' || md5('live' || g), 'acme', $1, $2, 'l' || g, 0, 1, 1, 'running' FROM generate_series(1, $3) g`, e.prov, e.project, live)
	e.exec(`ANALYZE instances`)
	// read runs f in a transaction and returns the rows of instances it
	// read (by scans of the table and fetches through its indexes).
	read := func(what string, f func(q store.Q) int) int {
		t.Helper()
		tx := e.DB.MustBeginTx(e.Ctx, nil)
		defer tx.Rollback() //nolint:errcheck // read only
		count := func() int {
			var n int
			if err := tx.Get(&n, `SELECT coalesce(sum(seq_tup_read + idx_tup_fetch), 0) FROM pg_stat_xact_user_tables WHERE relname = 'instances'`); err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			return n
		}
		before := count()
		if got := f(tx); got != live && got != deleted {
			t.Fatalf("%s: %d instances", what, got)
		}
		return count() - before
	}
	for _, state := range []string{"", instances.Deleted} {
		want := live
		if state != "" {
			want = deleted
		}
		cases := map[string]func(q store.Q) int{
			"instances.list": func(q store.Q) int {
				n := 0
				for cur := ""; ; {
					p := fixture.Must(instances.List(e.Ctx, q, &instances.ListInput{TenantID: "acme", State: state, Limit: page.MaxLimit, Cursor: cur}))
					n += len(p.Items)
					if p.Cursor == nil {
						return n
					}
					cur = *p.Cursor
				}
			},
		}
		for _, c := range []struct {
			by  graphread.Parent
			key string
		}{{graphread.OfTenant, key("acme", "", "", state)}, {graphread.OfPool, key(e.prov, "", "", state)}, {graphread.OfProject, key(e.project, "", "", state)}} {
			cases[fmt.Sprintf("a page by %s", c.by)] = func(q store.Q) int {
				r := fixture.Must(graphread.ViewPages(e.Ctx, q, e.acmeScope, authz.Scope{}, c.by, []string{c.key}, "", 20))
				if len(r.Totals) == 0 {
					return 0
				}
				return r.Totals[0]
			}
			cases[fmt.Sprintf("a count by %s", c.by)] = func(q store.Q) int {
				return fixture.Must(graphread.CountViews(e.Ctx, q, e.acmeScope, c.by, []string{c.key}))[c.key]
			}
		}
		for what, f := range cases {
			what = fmt.Sprintf("%s (state %q)", what, state)
			n := read(what, f)
			t.Logf("%s: %d rows of instances read", what, n)
			if state == "" && n > 4*live {
				t.Errorf("%s read %d rows of instances for %d live ones beside %d deleted", what, n, live, deleted)
			}
			if state != "" && n < want {
				t.Errorf("%s read %d rows for %d deleted ones", what, n, want)
			}
		}
	}
}

// --- scopes ---------------------------------------------------------------

// A scope's key is one loader key and decodes to itself; NewScope checks
// the filters as instances.list does.
func TestScopes(t *testing.T) {
	for _, s := range []graphread.Scope{{}, {Parent: "acme"}, {Parent: "acme", PoolID: "pool_x", ProjectID: "prj_y", State: "running"}, {Parent: "acme", State: "deleted"}} {
		if got := graphread.ParseScope(s.Key()); got != s {
			t.Fatalf("%+v decodes as %+v", s, got)
		}
	}
	if got := graphread.ParseScope("acme"); got != (graphread.Scope{Parent: "acme"}) {
		t.Fatalf("a bare parent: %+v", got)
	}
	if (graphread.Scope{Parent: "a", PoolID: "b"}).Key() == (graphread.Scope{Parent: "a", ProjectID: "b"}).Key() {
		t.Fatal("a pool filter and a project filter make one key")
	}
	pool, project := ids.New(ids.Pool), ids.New(ids.Project)
	s, err := graphread.NewScope("acme", &pool, &project, fixture.Ptr("stopped"))
	if err != nil || s != (graphread.Scope{Parent: "acme", PoolID: pool, ProjectID: project, State: "stopped"}) {
		t.Fatalf("%+v %v", s, err)
	}
	if s, err := graphread.NewScope("acme", fixture.Ptr(""), nil, nil); err != nil || s != (graphread.Scope{Parent: "acme"}) {
		t.Fatalf("empty filters: %+v %v", s, err)
	}
	_, err = graphread.NewScope("acme", fixture.Ptr("nope"), nil, nil)
	fixture.Code(t, err, errs.InvalidInput, "poolId")
	_, err = graphread.NewScope("acme", nil, fixture.Ptr(pool), nil)
	fixture.Code(t, err, errs.InvalidInput, "projectId")
}

// --- reservations ---------------------------------------------------------

// res is a reservation of tenant in pool, [start, end) from now, canceled
// when asked.
func (e *env) res(tenant, pool, start, end string, canceled bool) string {
	e.T.Helper()
	id := ids.New(ids.Reservation)
	e.exec(`INSERT INTO reservations (reservation_id, tenant_id, pool_id, gpus, vcpus, memory_gib, starts_at, ends_at, state, canceled_at)
		VALUES ($1, $2, $3, 1, 2, 3, now() + $4::interval, now() + $5::interval,
			CASE WHEN $6 THEN 'canceled' ELSE 'active' END, CASE WHEN $6 THEN now() END)`, id, tenant, pool, start, end, canceled)
	return id
}

func resID(r instances.Reservation) string { return r.ReservationID }

// Reservations page and count by tenant and by pool with the state
// filters of reservations.list; a pool's owner reads only its own
// tenant's; by id, each caller gets its own, with its state.
func TestReservationPagesCountsAndByID(t *testing.T) {
	e := newEnv(t)
	sched := e.res("acme", e.prov, "1 hour", "2 hours", false)
	active := e.res("acme", e.prov, "-1 hour", "1 hour", false)
	expired := e.res("acme", e.other, "-2 hours", "-1 hour", false)
	canceled := e.res("acme", e.prov, "1 hour", "2 hours", true)
	beta := e.res("beta", e.prov, "-1 hour", "1 hour", false)
	acmeAll := sorted(sched, active, expired, canceled)

	check := func(what string, scope authz.Scope, by graphread.Parent, ks []string, after string, limit int, want map[string][]string, totals map[string]int) {
		t.Helper()
		ctx, n := e.counted()
		r, err := graphread.ReservationPages(ctx, e.DB, scope, by, ks, after, limit)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		got, gotTotals := items(r, resID)
		if n.N() != 1 || !reflect.DeepEqual(got, want) || !reflect.DeepEqual(gotTotals, totals) {
			t.Fatalf("%s: %v (totals %v) in %d statements, want %v (totals %v)", what, got, gotTotals, n.N(), want, totals)
		}
		ctx, n = e.counted()
		counts := fixture.Must(graphread.CountReservations(ctx, e.DB, scope, by, ks))
		if n.N() != 1 || len(counts) != len(ks) {
			t.Fatalf("%s: counts %v in %d statements", what, counts, n.N())
		}
		for _, k := range ks {
			// A page after a cursor may be empty where the scope is not.
			if _, ok := totals[k]; (ok || after == "") && counts[k] != totals[k] {
				t.Fatalf("%s: count of %q %d, want %d", what, k, counts[k], totals[k])
			}
		}
	}
	tk := []string{key("acme", "", "", ""), key("beta", "", "", ""), key("gamma", "", "", "")}
	check("tenants as acme", e.acmeScope, graphread.OfTenant, tk, "", 50, map[string][]string{tk[0]: acmeAll}, map[string]int{tk[0]: 4})
	check("tenants as beta", e.betaScope, graphread.OfTenant, tk, "", 50, map[string][]string{tk[1]: {beta}}, map[string]int{tk[1]: 1})
	check("tenants, zero scope", authz.Scope{}, graphread.OfTenant, tk, "", 50, map[string][]string{}, map[string]int{})
	pk := []string{key(e.prov, "", "", ""), key(e.other, "", "", "")}
	check("pools as acme", e.acmeScope, graphread.OfPool, pk, "", 50,
		map[string][]string{pk[0]: sorted(sched, active, canceled), pk[1]: {expired}}, map[string]int{pk[0]: 3, pk[1]: 1})
	check("pools as beta", e.betaScope, graphread.OfPool, pk, "", 50, map[string][]string{pk[0]: {beta}}, map[string]int{pk[0]: 1})
	st := []string{key("acme", "", "", "scheduled"), key("acme", "", "", "active"), key("acme", "", "", "expired"),
		key("acme", "", "", "canceled"), key("acme", e.other, "", ""), key("acme", e.other, "", "active")}
	check("states", e.acmeScope, graphread.OfTenant, st, "", 50,
		map[string][]string{st[0]: {sched}, st[1]: {active}, st[2]: {expired}, st[3]: {canceled}, st[4]: {expired}},
		map[string]int{st[0]: 1, st[1]: 1, st[2]: 1, st[3]: 1, st[4]: 1})
	for _, limit := range []int{0, 1, 3, 4} {
		check(fmt.Sprintf("limit %d", limit), e.acmeScope, graphread.OfTenant, tk[:1], "", limit,
			map[string][]string{tk[0]: acmeAll[:min(4, limit+1)]}, map[string]int{tk[0]: 4})
	}
	check("after the second", e.acmeScope, graphread.OfTenant, tk[:1], acmeAll[1], 1,
		map[string][]string{tk[0]: acmeAll[2:4]}, map[string]int{tk[0]: 4})
	check("after the last", e.acmeScope, graphread.OfTenant, tk[:1], acmeAll[3], 1, map[string][]string{}, map[string]int{})

	all := []string{sched, active, expired, canceled, beta, ids.New(ids.Reservation)}
	for _, c := range []struct {
		who   string
		scope authz.Scope
		want  []string
	}{
		{"acme", e.acmeScope, acmeAll}, {"beta", e.betaScope, []string{beta}},
		{"gamma", e.scopeOf(e.gamma.Viewer, authz.InstancesRead), nil},
		{"the operator", e.scopeOf(e.Operator(), authz.InstancesRead), append(slices.Clone(acmeAll), beta)},
		{"the zero scope", authz.Scope{}, nil},
	} {
		ctx, n := e.counted()
		got := fixture.Must(graphread.ReservationsByID(ctx, e.DB, c.scope, all))
		if !slices.Equal(keys(got), sorted(c.want...)) || n.N() != 1 {
			t.Fatalf("%s reads %v in %d statements", c.who, keys(got), n.N())
		}
	}
	got := fixture.Must(graphread.ReservationsByID(e.Ctx, e.DB, e.acmeScope, all))
	for id, state := range map[string]string{sched: instances.ResScheduled, active: instances.ResActive, expired: instances.ResExpired, canceled: instances.ResCanceled} {
		if r := got[id]; r.State != state || r.Size.GPUs != 1 || r.Size.VCPUs != 2 || r.Size.MemoryGiB != 3 {
			t.Fatalf("%s: %+v, want state %s", id, r, state)
		}
	}
}

// --- capacity -------------------------------------------------------------

// Capacities are instances.capacity's numbers, for the pools the caller
// reads (owner or offered), in one statement; the per-tenant numbers only
// for the owner's readers.
func TestCapacities(t *testing.T) {
	e := newEnv(t)
	e.inst("acme", e.prov, "", instances.Running)
	e.inst("beta", e.prov, "", instances.Stopped)
	e.inst("beta", e.prov, "", instances.Pending) // holds no room
	e.exec(`UPDATE reservations SET gpus = 3 WHERE reservation_id = $1`, e.res("beta", e.prov, "-1 hour", "1 hour", false))
	e.res("acme", e.prov, "1 hour", "2 hours", false) // not yet
	onHost := e.inst("beta", e.hosted, "", instances.Running)
	e.exec(`UPDATE instances SET host_node_id = $2, vcpus = 32, memory_gib = 256 WHERE instance_id = $1`, onHost, e.node)
	e.exec(`INSERT INTO instance_allocations (node_id, device_id, instance_id, gpu_uuid) VALUES ($1, $2, $3, $2)`, e.node, e.gpus[0], onHost)
	unoffered := fixture.Must(pools.Create(e.Ctx, e.DB, &pools.CreateInput{TenantID: "acme", Name: "mine", Site: "fra1",
		GPUModel: "H100-SXM5-80GB", SharingMode: "exclusive", Kind: "vps-provider"})).PoolID
	all := []string{e.prov, e.other, e.hosted, unoffered, ids.New(ids.Pool)}

	for _, c := range []struct {
		who   string
		scope authz.Scope
		want  []string
		owner bool
	}{
		{"acme's viewer", e.scopeOf(e.acme.Viewer, authz.PoolsRead), []string{e.prov, e.other, e.hosted, unoffered}, true},
		{"beta's viewer", e.scopeOf(e.beta.Viewer, authz.PoolsRead), []string{e.prov, e.hosted}, false},
		{"gamma's admin", e.scopeOf(e.gamma.Admin, authz.PoolsRead), nil, false},
		{"the operator", e.scopeOf(e.Operator(), authz.PoolsRead), []string{e.prov, e.other, e.hosted, unoffered}, true},
		{"the zero scope", authz.Scope{}, nil, false},
	} {
		ctx, n := e.counted()
		got := fixture.Must(graphread.Capacities(ctx, e.DB, c.scope, all))
		if !slices.Equal(keys(got), sorted(c.want...)) || n.N() != 1 {
			t.Fatalf("%s reads the capacity of %v in %d statements", c.who, keys(got), n.N())
		}
		for id, cp := range got {
			want := fixture.Must(instances.Capacity(e.Ctx, e.DB, id, c.owner))
			if !reflect.DeepEqual(cp, want) {
				a, _ := json.Marshal(cp)
				b, _ := json.Marshal(want)
				t.Fatalf("%s: pool %s\n graph  %s\n method %s", c.who, id, a, b)
			}
		}
	}
	// The numbers themselves, so that both reading alike cannot hide a
	// wrong rule: the provider pool holds acme's running and beta's stopped
	// instance and beta's active reservation of 3 GPUs beyond (a tenant
	// holds the larger of its instances and its reservations); the hosted
	// pool its node's 8 GPUs less the one taken.
	got := fixture.Must(graphread.Capacities(e.Ctx, e.DB, e.scopeOf(e.acme.Viewer, authz.PoolsRead), all))
	if p := got[e.prov]; !p.Bounded || p.Allocated.GPUs != 2 || p.Reserved.GPUs != 2 || p.Free == nil || p.Free.GPUs != 12 ||
		p.ByTenant["acme"].GPUs != 1 || p.ByTenant["beta"].GPUs != 3 || len(p.ByTenant) != 2 {
		b, _ := json.Marshal(p)
		t.Fatalf("the provider pool: %s", b)
	}
	if h := got[e.hosted]; h.Total == nil || h.Total.GPUs != 8 || h.Allocated.GPUs != 1 || h.Free.GPUs != 7 || h.Free.VCPUs != h.Total.VCPUs-32 {
		b, _ := json.Marshal(h)
		t.Fatalf("the hosted pool: %s", b)
	}
	if o := got[e.other]; o.Bounded || o.Total != nil {
		b, _ := json.Marshal(o)
		t.Fatalf("a pool without a capacity policy: %s", b)
	}
	if b := fixture.Must(graphread.Capacities(e.Ctx, e.DB, e.scopeOf(e.beta.Viewer, authz.PoolsRead), all)); b[e.prov].ByTenant != nil {
		t.Fatalf("the offered tenant reads the per-tenant numbers: %v", b[e.prov].ByTenant)
	}
	// A node that is not ready adds nothing.
	e.exec(`UPDATE nodes SET state = 'cordoned' WHERE node_id = $1`, e.node)
	if h := fixture.Must(graphread.Capacities(e.Ctx, e.DB, e.acmeScope, []string{e.hosted}))[e.hosted]; h.Total == nil || h.Total.GPUs != 0 {
		b, _ := json.Marshal(h)
		t.Fatalf("the hosted pool with a cordoned node: %s", b)
	}
}

// --- events ---------------------------------------------------------------

// event writes one event and returns once it is numbered (as a client's
// request does).
func (e *env) event(tenant, typ, resource string) {
	e.T.Helper()
	ctx := store.ForRequest(e.Ctx)
	if err := e.DB.Tx(ctx, func(tx *sqlx.Tx) error {
		return events.Write(ctx, tx, events.Record{TenantID: tenant, Type: typ, ResourceID: resource, PoolID: e.prov,
			Data: map[string]any{"instanceId": resource, "state": strings.TrimPrefix(typ, "instance.")}})
	}); err != nil {
		e.T.Fatal(err)
	}
}

func eventSeq(ev events.Event) string { return fmt.Sprint(ev.Seq) }

// EventPages pages each readable instance's events oldest first after the
// cursor, with each one's total, in one statement; another tenant's
// instances and events that are not instance events are absent;
// CountEvents counts as the totals do; a cursor is judged against the
// instances' tenant's stream (malformed, another tenant's, past the end:
// INVALID_INPUT; behind retention: INVALID_STATE expired-cursor).
func TestEventPagesAndCounts(t *testing.T) {
	e := newEnv(t)
	a1 := e.inst("acme", e.prov, "", instances.Pending)
	a2 := e.inst("acme", e.prov, "", instances.Pending)
	b1 := e.inst("beta", e.prov, "", instances.Pending)
	// acme's stream: a1 1, a2 2, a1 3, a1 4, a2 5, a node event naming
	// a1's id 6; beta's: b1 1, 2.
	for _, w := range []struct{ tenant, typ, id string }{
		{"acme", events.Created, a1}, {"acme", events.Created, a2}, {"beta", events.Created, b1}, {"acme", events.Provisioning, a1},
		{"acme", events.Running, a1}, {"beta", events.Provisioning, b1}, {"acme", events.Provisioning, a2}, {"acme", events.NodeUpdated, a1},
	} {
		e.event(w.tenant, w.typ, w.id)
	}
	ids3 := []string{a1, a2, b1}
	check := func(what string, scope authz.Scope, after string, limit int, want map[string][]string, totals map[string]int) {
		t.Helper()
		ctx, n := e.counted()
		r, err := graphread.EventPages(ctx, e.DB, scope, ids3, after, limit)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		got, gotTotals := items(r, eventSeq)
		stmts := int64(1)
		if after != "" {
			stmts = 2 // the cursor's stream, then the pages
		}
		if n.N() != stmts || !reflect.DeepEqual(got, want) || !reflect.DeepEqual(gotTotals, totals) {
			t.Fatalf("%s: %v (totals %v) in %d statements, want %v (totals %v)", what, got, gotTotals, n.N(), want, totals)
		}
		for k, ev := range r.Items {
			if ev.ResourceType != events.ResInstance || ev.ResourceID != r.Parents[k] || ev.EventID != events.EncodeID(ev.TenantID, ev.Seq) {
				t.Fatalf("%s: %+v under %s", what, ev, r.Parents[k])
			}
		}
	}
	check("acme", e.acmeScope, "", 50, map[string][]string{a1: {"1", "3", "4"}, a2: {"2", "5"}}, map[string]int{a1: 3, a2: 2})
	check("beta", e.betaScope, "", 50, map[string][]string{b1: {"1", "2"}}, map[string]int{b1: 2})
	check("gamma", e.scopeOf(e.gamma.Admin, authz.InstancesRead), "", 50, map[string][]string{}, map[string]int{})
	check("the zero scope", authz.Scope{}, "", 50, map[string][]string{}, map[string]int{})
	// The operator reads every tenant's instance events, and still only
	// instance events (not the node event naming a1's id).
	check("the operator", e.scopeOf(e.Operator(), authz.InstancesRead), "", 50,
		map[string][]string{a1: {"1", "3", "4"}, a2: {"2", "5"}, b1: {"1", "2"}}, map[string]int{a1: 3, a2: 2, b1: 2})
	check("limit 0", e.acmeScope, "", 0, map[string][]string{a1: {"1"}, a2: {"2"}}, map[string]int{a1: 3, a2: 2})
	check("limit 1", e.acmeScope, "", 1, map[string][]string{a1: {"1", "3"}, a2: {"2", "5"}}, map[string]int{a1: 3, a2: 2})
	check("limit 2", e.acmeScope, "", 2, map[string][]string{a1: {"1", "3", "4"}, a2: {"2", "5"}}, map[string]int{a1: 3, a2: 2})
	check("after 3", e.acmeScope, events.EncodeID("acme", 3), 50, map[string][]string{a1: {"4"}, a2: {"5"}}, map[string]int{a1: 3, a2: 2})
	check("after 5", e.acmeScope, events.EncodeID("acme", 5), 50, map[string][]string{}, map[string]int{})
	check("after 6, the stream's end", e.acmeScope, events.EncodeID("acme", 6), 50, map[string][]string{}, map[string]int{})

	for _, c := range []struct {
		what, tenant string
		seq          uint64
	}{{"an id past the stream's end", "acme", 7}, {"an id of another tenant's stream", "gamma", 1}} {
		_, err := graphread.EventPages(e.Ctx, e.DB, e.acmeScope, []string{a1, a2}, events.EncodeID(c.tenant, c.seq), 50)
		fixture.Code(t, err, errs.InvalidInput, "after")
	}
	_, err := graphread.EventPages(e.Ctx, e.DB, e.acmeScope, []string{a1}, "evt_nope", 50)
	fixture.Code(t, err, errs.InvalidInput, "after")
	// Retention overtook event 2 of acme's stream: a cursor before it is
	// expired, one at it reads on.
	fixture.Must(events.Prune(e.Ctx, e.DB, fixture.Must(lastOccurred(e, "acme", 2))))
	_, err = graphread.EventPages(e.Ctx, e.DB, e.acmeScope, []string{a1, a2}, events.EncodeID("acme", 1), 50)
	if ee := fixture.Code(t, err, errs.InvalidState, "after"); ee.Details["reason"] != "expired-cursor" {
		t.Fatalf("details %v", ee.Details)
	}
	check("after the pruned prefix", e.acmeScope, events.EncodeID("acme", 2), 50, map[string][]string{a1: {"3", "4"}, a2: {"5"}}, map[string]int{a1: 2, a2: 1})

	ctx, n := e.counted()
	counts := fixture.Must(graphread.CountEvents(ctx, e.DB, e.acmeScope, ids3))
	if n.N() != 1 || !reflect.DeepEqual(counts, map[string]int{a1: 2, a2: 1, b1: 0}) {
		t.Fatalf("counts %v in %d statements", counts, n.N())
	}
	if c := fixture.Must(graphread.CountEvents(e.Ctx, e.DB, authz.Scope{}, ids3)); !reflect.DeepEqual(c, map[string]int{a1: 0, a2: 0, b1: 0}) {
		t.Fatalf("the zero scope counts %v", c)
	}
	if c := fixture.Must(graphread.CountEvents(e.Ctx, e.DB, e.scopeOf(e.Operator(), authz.InstancesRead), ids3)); !reflect.DeepEqual(c, map[string]int{a1: 2, a2: 1, b1: 2}) {
		t.Fatalf("the operator counts %v", c)
	}
}

// lastOccurred is a cutoff just after event seq of the tenant's stream.
func lastOccurred(e *env, tenant string, seq int) (time.Time, error) {
	var at time.Time
	err := e.DB.Get(&at, `SELECT occurred_at + interval '1 microsecond' FROM events WHERE tenant_id = $1 AND seq = $2`, tenant, seq)
	return at, err
}
