package e2e

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"regexp"
	"testing"

	"github.com/bettercompute/computed/internal/testkit"
)

func init() { statusOf["INVALID_STATE"] = http.StatusUnprocessableEntity }

var poolIDRe = regexp.MustCompile(`^pool_[0-9a-hjkmnp-tv-z]{26,52}$`)

func poolInput(tenantID, name string) map[string]any {
	return map[string]any{"tenantId": tenantID, "name": name, "site": "fra-1", "gpuModel": "H100",
		"sharingMode": "exclusive", "kind": "bare-metal"}
}

func newPool(t testing.TB, e *testkit.Env, token, tenantID, name string) map[string]any {
	t.Helper()
	r := must(t, env(t, e).Call(token, "pools/create", poolInput(tenantID, name)))
	if !poolIDRe.MatchString(r.Str("poolId")) {
		t.Fatalf("pools.create output: %s", r.Raw)
	}
	return r.Body
}

func poolIDs(t testing.TB, r testkit.Resp) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, it := range items(t, r) {
		out[str(it["poolId"])] = true
	}
	return out
}

func TestPoolsCreateGetList(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	admin, _, viewer := e.Tenant("acme")

	in := poolInput("acme", "gpu-a")
	in["policy"] = map[string]any{"maxGpusPerInstance": 8}
	r := must(t, e.Call(admin, "pools/create", in))
	id := r.Str("poolId")
	if !poolIDRe.MatchString(id) || r.Str("tenantId") != "acme" || r.Str("name") != "gpu-a" || r.Str("site") != "fra-1" ||
		r.Str("gpuModel") != "H100" || r.Str("sharingMode") != "exclusive" || r.Str("kind") != "bare-metal" ||
		r.Str("state") != "active" || r.Body["rowVersion"] != float64(1) || r.Str("createdAt") == "" || r.Str("updatedAt") == "" {
		t.Fatalf("pools.create output: %s", r.Raw)
	}
	if r.Body["provider"] != nil || r.Body["providerAccount"] != nil {
		t.Fatalf("bare-metal pool has a provider: %s", r.Raw)
	}
	if obj(t, r.Body, "policy")["maxGpusPerInstance"] != float64(8) {
		t.Fatalf("policy not kept: %s", r.Raw)
	}

	// A vps-provider pool defaults its provider to sim; policy defaults to {}.
	vin := poolInput("acme", "vps")
	vin["kind"], vin["providerAccount"] = "vps-provider", "acct-1"
	v := must(t, e.Call(admin, "pools/create", vin))
	if v.Str("provider") != "sim" || v.Str("providerAccount") != "acct-1" || len(obj(t, v.Body, "policy")) != 0 {
		t.Fatalf("vps-provider pool: %s", v.Raw)
	}

	expect(t, e.Call(admin, "pools/create", poolInput("acme", "gpu-a")), "CONFLICT", "name")

	g := must(t, e.Call(viewer, "pools/get", map[string]any{"tenantId": "acme", "poolId": id}))
	if g.Str("poolId") != id || g.Str("name") != "gpu-a" {
		t.Fatalf("pools.get output: %s", g.Raw)
	}
	expect(t, e.Call(viewer, "pools/get", map[string]any{"tenantId": "acme", "poolId": "pool_01jd0000000000000000000000"}), "NOT_FOUND", anyPath)

	l := must(t, e.Call(viewer, "pools/list", map[string]any{"tenantId": "acme"}))
	ids := poolIDs(t, l)
	if len(ids) != 2 || !ids[id] || !ids[v.Str("poolId")] || l.Body["cursor"] != nil {
		t.Fatalf("pools.list output: %s", l.Raw)
	}
}

func TestPoolsValidation(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	admin, member, _ := e.Tenant("acme")

	for _, c := range []struct{ field, value string }{
		{"sharingMode", "shared"}, {"kind", "cloud"},
	} {
		in := poolInput("acme", uniq("bad"))
		in[c.field] = c.value
		expect(t, e.Call(admin, "pools/create", in), "INVALID_INPUT", c.field)
	}
	in := poolInput("acme", "p")
	in["provider"] = "sim"
	expect(t, e.Call(admin, "pools/create", in), "INVALID_INPUT", "provider")
	in = poolInput("acme", "p")
	in["policy"] = []any{1}
	expect(t, e.Call(admin, "pools/create", in), "INVALID_INPUT", "policy")
	in = poolInput("acme", "p")
	delete(in, "site")
	expect(t, e.Call(admin, "pools/create", in), "INVALID_INPUT", "site")

	expect(t, e.Call(member, "pools/create", poolInput("acme", "p")), "PERMISSION_DENIED", anyPath)

	p := newPool(t, e, admin, "acme", "p")
	id := str(p["poolId"])
	expect(t, e.Call(admin, "pools/update", map[string]any{"tenantId": "acme", "poolId": id}), "INVALID_INPUT", "name")
	e.Tenant("beta")
	for _, q := range []map[string]any{
		{"gpus": -1, "instances": 1}, {"gpus": 1, "instances": 1.5},
	} {
		expect(t, e.Call(admin, "pools/offer", map[string]any{"tenantId": "acme", "poolId": id, "toTenantId": "beta", "quota": q}),
			"INVALID_INPUT", anyPath)
	}
	expect(t, e.Call(admin, "pools/offer", map[string]any{"tenantId": "acme", "poolId": id, "toTenantId": "acme",
		"quota": map[string]any{"gpus": 1, "instances": 1}}), "INVALID_INPUT", "toTenantId")
	expect(t, e.Call(admin, "pools/offer", map[string]any{"tenantId": "acme", "poolId": id, "toTenantId": "nobody",
		"quota": map[string]any{"gpus": 1, "instances": 1}}), "NOT_FOUND", "toTenantId")
}

func TestPoolsOffer(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	admin, _, _ := e.Tenant("acme")
	badmin, _, bviewer := e.Tenant("beta")
	cadmin, _, _ := e.Tenant("gamma")

	id := str(newPool(t, e, admin, "acme", "shared")["poolId"])
	own := str(newPool(t, e, badmin, "beta", "own")["poolId"])
	get := map[string]any{"tenantId": "beta", "poolId": id}

	expect(t, e.Call(bviewer, "pools/get", get), "NOT_FOUND", anyPath)
	if ids := poolIDs(t, must(t, e.Call(bviewer, "pools/list", map[string]any{"tenantId": "beta"}))); ids[id] || !ids[own] {
		t.Fatalf("beta sees %v before the offer", ids)
	}

	offer := map[string]any{"tenantId": "acme", "poolId": id, "toTenantId": "beta", "quota": map[string]any{"gpus": 4, "instances": 2}}
	o := must(t, e.Call(admin, "pools/offer", offer))
	if o.Str("poolId") != id || o.Str("toTenantId") != "beta" || o.Str("createdAt") == "" {
		t.Fatalf("pools.offer output: %s", o.Raw)
	}
	if q := obj(t, o.Body, "quota"); q["gpus"] != float64(4) || q["instances"] != float64(2) {
		t.Fatalf("pools.offer quota: %s", o.Raw)
	}
	offer["quota"] = map[string]any{"gpus": 8, "instances": 0}
	o2 := must(t, e.Call(admin, "pools/offer", offer))
	if q := obj(t, o2.Body, "quota"); q["gpus"] != float64(8) || q["instances"] != float64(0) || o2.Str("createdAt") != o.Str("createdAt") {
		t.Fatalf("second offer did not change the quota: %s", o2.Raw)
	}

	g := must(t, e.Call(bviewer, "pools/get", get))
	if g.Str("poolId") != id || g.Str("tenantId") != "acme" {
		t.Fatalf("offered pools.get: %s", g.Raw)
	}
	if ids := poolIDs(t, must(t, e.Call(bviewer, "pools/list", map[string]any{"tenantId": "beta"}))); !ids[id] || !ids[own] || len(ids) != 2 {
		t.Fatalf("beta sees %v after the offer", ids)
	}

	// Only the owner changes a pool: the offered-to admin gets NOT_FOUND.
	for method, body := range map[string]map[string]any{
		"pools/update":  {"tenantId": "beta", "poolId": id, "name": "mine"},
		"pools/archive": {"tenantId": "beta", "poolId": id},
		"pools/offer":   {"tenantId": "beta", "poolId": id, "toTenantId": "gamma", "quota": map[string]any{"gpus": 1, "instances": 1}},
		"pools/unoffer": {"tenantId": "beta", "poolId": id, "toTenantId": "beta"},
	} {
		t.Run(method, func(t *testing.T) {
			expect(t, env(t, e).Call(badmin, method, body), "NOT_FOUND", anyPath)
		})
	}
	// A tenant the pool is not offered to does not see it.
	expect(t, e.Call(cadmin, "pools/get", map[string]any{"tenantId": "gamma", "poolId": id}), "NOT_FOUND", anyPath)
	expect(t, e.Call(cadmin, "pools/archive", map[string]any{"tenantId": "gamma", "poolId": id}), "NOT_FOUND", anyPath)

	un := map[string]any{"tenantId": "acme", "poolId": id, "toTenantId": "beta"}
	r := must(t, e.Call(admin, "pools/unoffer", un))
	if r.Body["removed"] != float64(1) {
		t.Fatalf("pools.unoffer output: %s", r.Raw)
	}
	expect(t, e.Call(admin, "pools/unoffer", un), "NOT_FOUND", anyPath)
	expect(t, e.Call(bviewer, "pools/get", get), "NOT_FOUND", anyPath)
	if ids := poolIDs(t, must(t, e.Call(bviewer, "pools/list", map[string]any{"tenantId": "beta"}))); ids[id] {
		t.Fatalf("beta still sees the pool after unoffer: %v", ids)
	}
}

func TestPoolsUpdateArchive(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	admin, _, _ := e.Tenant("acme")
	e.Tenant("beta")
	id := str(newPool(t, e, admin, "acme", "p1")["poolId"])
	newPool(t, e, admin, "acme", "p2")

	u := must(t, e.Call(admin, "pools/update", map[string]any{"tenantId": "acme", "poolId": id, "name": "renamed",
		"policy": map[string]any{"k": "v"}, "expectedVersion": 1}))
	if u.Str("name") != "renamed" || u.Body["rowVersion"] != float64(2) || obj(t, u.Body, "policy")["k"] != "v" {
		t.Fatalf("pools.update output: %s", u.Raw)
	}
	r := e.Call(admin, "pools/update", map[string]any{"tenantId": "acme", "poolId": id, "name": "again", "expectedVersion": 1})
	expect(t, r, "CONFLICT", anyPath)
	// The same values again change nothing: the same rowVersion, so
	// another writer's expectedVersion still holds.
	for _, body := range []map[string]any{
		{"name": "renamed", "policy": map[string]any{"k": "v"}, "expectedVersion": 2},
		{"name": "renamed"},
		{"policy": map[string]any{"k": "v"}},
	} {
		body["tenantId"], body["poolId"] = "acme", id
		same := must(t, e.Call(admin, "pools/update", body))
		if same.Str("name") != "renamed" || same.Body["rowVersion"] != float64(2) || same.Str("updatedAt") != u.Str("updatedAt") {
			t.Fatalf("pools.update with the same values: %s, was %s", same.Raw, u.Raw)
		}
	}
	expect(t, e.Call(admin, "pools/update", map[string]any{"tenantId": "acme", "poolId": id, "name": "p2"}), "CONFLICT", "name")

	a := must(t, e.Call(admin, "pools/archive", map[string]any{"tenantId": "acme", "poolId": id}))
	if a.Str("state") != "archived" || a.Body["rowVersion"] != float64(3) {
		t.Fatalf("pools.archive output: %s", a.Raw)
	}
	expect(t, e.Call(admin, "pools/archive", map[string]any{"tenantId": "acme", "poolId": id}), "INVALID_STATE", anyPath)
	expect(t, e.Call(admin, "pools/update", map[string]any{"tenantId": "acme", "poolId": id, "name": "x"}), "INVALID_STATE", anyPath)
	expect(t, e.Call(admin, "pools/offer", map[string]any{"tenantId": "acme", "poolId": id, "toTenantId": "beta",
		"quota": map[string]any{"gpus": 1, "instances": 1}}), "INVALID_STATE", anyPath)

	// Archived pools stay in the list, with their state.
	found := false
	for _, it := range items(t, must(t, e.Call(admin, "pools/list", map[string]any{"tenantId": "acme"}))) {
		if it["poolId"] == id {
			found = it["state"] == "archived"
		}
	}
	if !found {
		t.Fatal("archived pool missing from the list")
	}
}

func TestPoolsPagination(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	admin, _, viewer := e.Tenant("acme")
	badmin, _, _ := e.Tenant("beta")
	want := map[string]bool{}
	for i := 0; i < 4; i++ {
		want[str(newPool(t, e, admin, "acme", uniq("pool"))["poolId"])] = true
	}
	// One pool offered by another tenant joins the list.
	off := str(newPool(t, e, badmin, "beta", "offered")["poolId"])
	must(t, e.Call(badmin, "pools/offer", map[string]any{"tenantId": "beta", "poolId": off, "toTenantId": "acme",
		"quota": map[string]any{"gpus": 1, "instances": 1}}))
	want[off] = true

	got := map[string]bool{}
	last := ""
	cursor := ""
	pages := 0
	for {
		in := map[string]any{"tenantId": "acme", "limit": 2}
		if cursor != "" {
			in["cursor"] = cursor
		}
		r := must(t, e.Call(viewer, "pools/list", in))
		its := items(t, r)
		if len(its) > 2 {
			t.Fatalf("page of %d items with limit 2", len(its))
		}
		for _, it := range its {
			id := str(it["poolId"])
			if id <= last || got[id] {
				t.Fatalf("page order broken at %s after %s", id, last)
			}
			got[id], last = true, id
		}
		pages++
		c, _ := r.Body["cursor"].(string)
		if c == "" {
			break
		}
		cursor = c
		if pages > 10 {
			t.Fatal("pagination does not end")
		}
	}
	if pages != 3 || len(got) != len(want) {
		t.Fatalf("got %d pools over %d pages, want %d over 3", len(got), pages, len(want))
	}
	for id := range want {
		if !got[id] {
			t.Fatalf("pool %s missing from the pages", id)
		}
	}
	expect(t, e.Call(viewer, "pools/list", map[string]any{"tenantId": "acme", "limit": 201}), "INVALID_INPUT", "limit")
	expect(t, e.Call(viewer, "pools/list", map[string]any{"tenantId": "acme", "cursor": "junk!"}), "INVALID_INPUT", "cursor")
}

// A cursor of a list's own kind whose key this server never writes (a
// hand-made ["joinRequest", "x' OR 1=1 --"]) is refused on every list, as
// a cursor of another kind or of bad base64 is: it was read as a place in
// the list and answered an empty page.
func TestForgedCursorsOfTheListsOwnKind(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	admin, _, _ := e.Tenant("acme")
	pool := e.Pool(admin, "acme", "p")
	nodeID, _ := e.Node(admin, "acme", pool)
	prj := e.Must(e.Call(admin, "projects/create", map[string]any{"tenantId": "acme", "name": "web"})).Str("projectId")
	forged := func(kind string, key ...any) string {
		b, _ := json.Marshal(append([]any{kind}, key...))
		return base64.RawURLEncoding.EncodeToString(b)
	}
	for _, c := range []struct {
		method, kind string
		in           map[string]any
	}{
		{"pools/list", "pool", map[string]any{"tenantId": "acme"}},
		{"nodes/list", "node", map[string]any{"tenantId": "acme"}},
		{"joinRequests/list", "joinRequest", map[string]any{"tenantId": "acme", "poolId": pool}},
		{"joinTokens/list", "joinToken", map[string]any{"tenantId": "acme", "poolId": pool}},
		{"machines/list", "expectedMachine", map[string]any{"tenantId": "acme", "poolId": pool}},
		{"tpmKeys/list", "allowedKey", map[string]any{"tenantId": "acme", "poolId": pool}},
		{"workflows/list", "workflow", map[string]any{"tenantId": "acme", "nodeId": nodeID}},
		{"instances/list", "instance", map[string]any{"tenantId": "acme"}},
		{"reservations/list", "reservation", map[string]any{"tenantId": "acme"}},
		{"projects/list", "project", map[string]any{"tenantId": "acme"}},
		{"projects/listMembers", "projectMember", map[string]any{"tenantId": "acme", "projectId": prj}},
		{"tokens/list", "token", map[string]any{"tenantId": "acme"}},
		{"members/list", "roleBinding", map[string]any{"tenantId": "acme"}},
		{"tenants/list", "tenant", map[string]any{}},
	} {
		in := map[string]any{"cursor": forged(c.kind, "x' OR 1=1 --")}
		for k, v := range c.in {
			in[k] = v
		}
		tok := admin
		if c.method == "tenants/list" {
			tok = e.Operator
		}
		expect(t, e.Call(tok, c.method, in), "INVALID_INPUT", "cursor")
	}
	// keys of other shapes: a profile version this server never writes, an
	// audit time in another offset, finer than a record's or before any
	for _, c := range []struct {
		method string
		cursor string
	}{
		{"profiles/list", forged("profile", "gpu-node", 0, "53bce4f1dfa0fe8e7ca126f91b35d3a6")},
		{"profiles/list", forged("profile", "gpu-node", -5, "53bce4f1dfa0fe8e7ca126f91b35d3a6")},
		{"audit/list", forged("audit", "2026-12-07T16:40:01.123456+02:00 aud_01m98nvr6ydameqvamz1s5yxym")},
		{"audit/list", forged("audit", "2026-12-07T16:40:01.1234567891Z aud_01m98nvr6ydameqvamz1s5yxym")},
		{"audit/list", forged("audit", "0001-01-01T00:00:00Z aud_01m98nvr6ydameqvamz1s5yxym")},
	} {
		expect(t, e.Call(admin, c.method, map[string]any{"tenantId": "acme", "cursor": c.cursor}), "INVALID_INPUT", "cursor")
	}
	// and a real one still reads on
	first := e.Must(e.Call(admin, "audit/list", map[string]any{"tenantId": "acme", "limit": 1}))
	e.Must(e.Call(admin, "audit/list", map[string]any{"tenantId": "acme", "limit": 1, "cursor": first.Body["cursor"]}))
}
