package e2e

import (
	"sort"
	"strings"
	"testing"

	"github.com/bettercompute/computed/internal/authz"
	"github.com/bettercompute/computed/internal/registry"
	"github.com/bettercompute/computed/internal/testkit"
)

const (
	ok  = ""
	pd  = "PERMISSION_DENIED"
	nf  = "NOT_FOUND"
	un  = "UNAUTHENTICATED"
	inv = "INVALID_INPUT"
	cfl = "CONFLICT"
)

// world is the cast of the permission matrix: the victim tenant acme with an
// admin, member and viewer; owner, a member of acme who creates acme's
// projects; projectMember, a service principal of acme whose tenant role
// was revoked, related to acme's projects as member; and evil, another
// tenant. (A principal of another tenant cannot be related to acme's
// projects: it is NOT_FOUND to acme.)
type world struct {
	e                    *testkit.Env
	acme, evil, third    tenant
	owner, projectMember actor
}

func newWorld(t testing.TB, e *testkit.Env) *world {
	t.Helper()
	w := &world{e: e, acme: newTenant(t, e, "acme"), evil: newTenant(t, e, "evil"), third: newTenant(t, e, "third")}
	w.owner = newToken(t, e, w.acme.Admin.Token, "acme", "owner", "member")
	w.projectMember = newToken(t, e, w.acme.Admin.Token, "acme", "project-member", "viewer")
	must(t, e.Call(w.acme.Admin.Token, "members/revoke", map[string]any{"tenantId": "acme", "principalId": w.projectMember.PrincipalID}))
	return w
}

// project makes a fresh acme project created by owner, with projectMember
// related to it as member.
func (w *world) project(t testing.TB) string {
	t.Helper()
	id := newProject(t, w.e, w.owner.Token, "acme", uniq("proj"))
	r := must(t, env(t, w.e).Call(w.acme.Admin.Token, "projects/addMember", map[string]any{
		"tenantId": "acme", "projectId": id, "principalId": w.projectMember.PrincipalID}))
	if r.Str("relation") != "member" || r.Str("principalId") != w.projectMember.PrincipalID || r.Str("projectId") != id {
		t.Fatalf("projects.addMember output: %s", r.Raw)
	}
	return id
}

// callers of the matrix: who calls, and which tenant the input names
// ("" keeps the body's tenantId, the victim acme).
type callerSpec struct {
	token  func(w *world) string
	tenant string
}

var callers = map[string]callerSpec{
	"operator":      {token: func(w *world) string { return w.e.Operator }},
	"admin":         {token: func(w *world) string { return w.acme.Admin.Token }},
	"member":        {token: func(w *world) string { return w.acme.Member.Token }},
	"viewer":        {token: func(w *world) string { return w.acme.Viewer.Token }},
	"owner":         {token: func(w *world) string { return w.owner.Token }},
	"projectMember": {token: func(w *world) string { return w.projectMember.Token }},
	// another tenant's admin naming the victim tenant
	"otherAdmin": {token: func(w *world) string { return w.evil.Admin.Token }},
	// another tenant's admin naming its own tenant with the victim's ids
	"otherAdminOwnTenant": {token: func(w *world) string { return w.evil.Admin.Token }, tenant: "evil"},
	// a tenant that does not exist, named by acme's admin
	"ghostTenant": {token: func(w *world) string { return w.acme.Admin.Token }, tenant: "ghost"},
	"noToken":     {token: func(w *world) string { return "" }},
}

type checkFn func(t *testing.T, w *world, caller string, in map[string]any, r testkit.Resp)

type permCase struct {
	method string
	body   func(t *testing.T, w *world) map[string]any // fresh resources per call
	want   map[string]string                           // caller -> code
	check  checkFn                                     // after every call
}

func merge(base map[string]string, over map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range base {
		out[k] = v
	}
	for k, v := range over {
		out[k] = v
	}
	return out
}

var (
	wantTenantRead = map[string]string{
		"operator": ok, "admin": ok, "member": ok, "viewer": ok, "owner": ok,
		"projectMember": pd, "otherAdmin": pd, "otherAdminOwnTenant": ok, "ghostTenant": pd, "noToken": un,
	}
	wantIAMManage = map[string]string{
		"operator": ok, "admin": ok, "member": pd, "viewer": pd, "owner": pd,
		"projectMember": pd, "otherAdmin": pd, "ghostTenant": pd, "noToken": un,
	}
	wantProjectRead = map[string]string{
		"operator": ok, "admin": ok, "member": ok, "viewer": ok, "owner": ok, "projectMember": ok,
		"otherAdmin": pd, "otherAdminOwnTenant": nf, "ghostTenant": pd, "noToken": un,
	}
	wantProjectManage = map[string]string{
		"operator": ok, "admin": ok, "owner": ok, "member": pd, "viewer": pd, "projectMember": pd,
		"otherAdmin": pd, "otherAdminOwnTenant": nf, "ghostTenant": pd, "noToken": un,
	}
)

// itemsOfTenant checks that every item of a page belongs to the named tenant.
func itemsOfTenant(t *testing.T, w *world, caller string, in map[string]any, r testkit.Resp) {
	if r.Status != 200 {
		return
	}
	list := items(t, r)
	if len(list) == 0 {
		t.Fatalf("%s: empty page: %s", caller, r.Raw)
	}
	for _, it := range list {
		if it["tenantId"] != in["tenantId"] {
			t.Fatalf("%s: item of another tenant: %v (named %v)", caller, it, in["tenantId"])
		}
	}
}

// projectUnchanged checks after a refused write that the project is intact.
func projectUnchanged(t *testing.T, w *world, in map[string]any, r testkit.Resp) {
	if r.Status == 200 {
		return
	}
	g := must(t, env(t, w.e).Call(w.acme.Admin.Token, "projects/get", map[string]any{"tenantId": "acme", "projectId": in["projectId"]}))
	if g.Body["rowVersion"].(float64) != 1 || g.Str("description") != "" {
		t.Fatalf("a refused call changed the project: %s", g.Raw)
	}
}

func permCases() []permCase {
	ref := func(t *testing.T, w *world) map[string]any {
		return map[string]any{"tenantId": "acme", "projectId": w.project(t)}
	}
	return []permCase{
		{method: "tenants/create",
			body: func(t *testing.T, w *world) map[string]any {
				return map[string]any{"tenantId": uniq("new"), "name": "New"}
			},
			want: map[string]string{"operator": ok, "admin": pd, "member": pd, "viewer": pd, "owner": pd,
				"projectMember": pd, "otherAdmin": pd, "noToken": un},
			check: func(t *testing.T, w *world, caller string, in map[string]any, r testkit.Resp) {
				g := env(t, w.e).Call(w.e.Operator, "tenants/get", map[string]any{"tenantId": in["tenantId"]})
				if r.Status == 200 {
					if r.Str("tenantId") != in["tenantId"] || r.Str("name") != "New" || r.Str("createdAt") == "" {
						t.Fatalf("tenants.create output: %s", r.Raw)
					}
					expect(t, g, ok, "")
				} else {
					expect(t, g, nf, "tenantId")
				}
			}},
		{method: "tenants/get",
			body: func(t *testing.T, w *world) map[string]any { return map[string]any{"tenantId": "acme"} },
			want: wantTenantRead,
			check: func(t *testing.T, w *world, caller string, in map[string]any, r testkit.Resp) {
				if r.Status == 200 && (r.Str("tenantId") != in["tenantId"] || r.Str("name") != "Tenant "+in["tenantId"].(string)) {
					t.Fatalf("tenants.get output: %s", r.Raw)
				}
			}},
		{method: "tenants/list",
			body: func(t *testing.T, w *world) map[string]any { return map[string]any{} },
			want: map[string]string{"operator": ok, "admin": ok, "member": ok, "viewer": ok, "owner": ok,
				"projectMember": ok, "otherAdmin": ok, "noToken": un},
			check: func(t *testing.T, w *world, caller string, in map[string]any, r testkit.Resp) {
				if r.Status != 200 {
					return
				}
				want := map[string]string{"operator": "acme,evil,third", "admin": "acme", "member": "acme", "viewer": "acme",
					"owner": "acme", "projectMember": "", "otherAdmin": "evil"}[caller]
				var got []string
				for _, it := range items(t, r) {
					got = append(got, str(it["tenantId"]))
				}
				// tenants created by the tenants.create row live in other databases
				if strings.Join(got, ",") != want || r.Body["cursor"] != nil {
					t.Fatalf("%s: tenants.list = %v, want %s: %s", caller, got, want, r.Raw)
				}
			}},
		{method: "tokens/create",
			body: func(t *testing.T, w *world) map[string]any {
				return map[string]any{"tenantId": "acme", "name": uniq("svc"), "role": "viewer"}
			},
			want: wantIAMManage,
			check: func(t *testing.T, w *world, caller string, in map[string]any, r testkit.Resp) {
				if r.Status != 200 {
					return
				}
				tok := obj(t, r.Body, "token")
				if tok["tenantId"] != "acme" || tok["role"] != "viewer" || tok["name"] != in["name"] || r.Str("secret") == "" {
					t.Fatalf("tokens.create output: %s", r.Raw)
				}
				// the secret is a working viewer credential on acme
				expect(t, env(t, w.e).Call(r.Str("secret"), "projects/list", map[string]any{"tenantId": "acme"}), ok, "")
				expect(t, env(t, w.e).Call(r.Str("secret"), "projects/create", map[string]any{"tenantId": "acme", "name": uniq("x")}), pd, "")
			}},
		{method: "tokens/list",
			body:  func(t *testing.T, w *world) map[string]any { return map[string]any{"tenantId": "acme"} },
			want:  wantTenantRead,
			check: itemsOfTenant},
		{method: "tokens/revoke",
			body: func(t *testing.T, w *world) map[string]any {
				a := newToken(t, w.e, w.e.Operator, "acme", uniq("victim"), "viewer")
				return map[string]any{"tenantId": "acme", "tokenId": a.TokenID, "secret": a.Token}
			},
			want: merge(wantIAMManage, map[string]string{"otherAdminOwnTenant": nf}),
			check: func(t *testing.T, w *world, caller string, in map[string]any, r testkit.Resp) {
				after := env(t, w.e).Call(in["secret"].(string), "tenants/get", map[string]any{"tenantId": "acme"})
				if r.Status == 200 {
					if r.Str("tokenId") != in["tokenId"] || r.Str("revokedAt") == "" {
						t.Fatalf("tokens.revoke output: %s", r.Raw)
					}
					expect(t, after, un, "")
				} else {
					expect(t, after, ok, "")
				}
			}},
		{method: "members/grant",
			body: func(t *testing.T, w *world) map[string]any {
				a := newToken(t, w.e, w.e.Operator, "acme", uniq("grantee"), "viewer")
				return map[string]any{"tenantId": "acme", "principalId": a.PrincipalID, "role": "member"}
			},
			want: wantIAMManage,
			check: func(t *testing.T, w *world, caller string, in map[string]any, r testkit.Resp) {
				if r.Status == 200 && (r.Str("role") != "member" || r.Str("principalId") != in["principalId"] ||
					r.Str("tenantId") != "acme" || r.Str("principalKind") != "service") {
					t.Fatalf("members.grant output: %s", r.Raw)
				}
			}},
		{method: "members/revoke",
			body: func(t *testing.T, w *world) map[string]any {
				a := newToken(t, w.e, w.e.Operator, "acme", uniq("revokee"), "viewer")
				return map[string]any{"tenantId": "acme", "principalId": a.PrincipalID, "secret": a.Token}
			},
			want: merge(wantIAMManage, map[string]string{"otherAdminOwnTenant": nf}),
			check: func(t *testing.T, w *world, caller string, in map[string]any, r testkit.Resp) {
				after := env(t, w.e).Call(in["secret"].(string), "tenants/get", map[string]any{"tenantId": "acme"})
				if r.Status == 200 {
					if r.Body["revoked"] != float64(1) {
						t.Fatalf("members.revoke output: %s", r.Raw)
					}
					expect(t, after, pd, "") // authenticated, but no role left
				} else {
					expect(t, after, ok, "")
				}
			}},
		{method: "members/list",
			body:  func(t *testing.T, w *world) map[string]any { return map[string]any{"tenantId": "acme"} },
			want:  wantTenantRead,
			check: itemsOfTenant},
		{method: "projects/create",
			body: func(t *testing.T, w *world) map[string]any {
				return map[string]any{"tenantId": "acme", "name": uniq("created"), "description": "d"}
			},
			want: map[string]string{"operator": ok, "admin": ok, "member": ok, "owner": ok, "viewer": pd,
				"projectMember": pd, "otherAdmin": pd, "ghostTenant": pd, "noToken": un},
			check: func(t *testing.T, w *world, caller string, in map[string]any, r testkit.Resp) {
				if r.Status != 200 {
					return
				}
				if r.Str("tenantId") != "acme" || r.Str("name") != in["name"] || r.Str("description") != "d" ||
					r.Body["rowVersion"] != float64(1) || !projectIDRe.MatchString(r.Str("projectId")) || r.Str("createdAt") == "" {
					t.Fatalf("projects.create output: %s", r.Raw)
				}
			}},
		{method: "projects/get", body: ref, want: wantProjectRead,
			check: func(t *testing.T, w *world, caller string, in map[string]any, r testkit.Resp) {
				if r.Status == 200 && (r.Str("projectId") != in["projectId"] || r.Str("tenantId") != "acme") {
					t.Fatalf("projects.get output: %s", r.Raw)
				}
			}},
		{method: "projects/list",
			body: func(t *testing.T, w *world) map[string]any {
				w.project(t)
				newProject(t, w.e, w.evil.Admin.Token, "evil", uniq("evilproj"))
				return map[string]any{"tenantId": "acme"}
			},
			want:  merge(wantTenantRead, nil),
			check: itemsOfTenant},
		{method: "projects/update",
			body: func(t *testing.T, w *world) map[string]any {
				in := ref(t, w)
				in["description"] = "changed"
				in["expectedVersion"] = 1
				return in
			},
			want: wantProjectManage,
			check: func(t *testing.T, w *world, caller string, in map[string]any, r testkit.Resp) {
				if r.Status == 200 && (r.Str("description") != "changed" || r.Body["rowVersion"] != float64(2) || r.Str("projectId") != in["projectId"]) {
					t.Fatalf("projects.update output: %s", r.Raw)
				}
				projectUnchanged(t, w, in, r)
			}},
		{method: "projects/delete", body: ref, want: wantProjectManage,
			check: func(t *testing.T, w *world, caller string, in map[string]any, r testkit.Resp) {
				if r.Status == 200 {
					if r.Body["deleted"] != float64(1) {
						t.Fatalf("projects.delete output: %s", r.Raw)
					}
					expect(t, env(t, w.e).Call(w.acme.Admin.Token, "projects/get", map[string]any{"tenantId": "acme", "projectId": in["projectId"]}), nf, "")
				}
				projectUnchanged(t, w, in, r)
			}},
		{method: "projects/addMember",
			body: func(t *testing.T, w *world) map[string]any {
				in := ref(t, w)
				in["principalId"] = w.acme.Viewer.PrincipalID
				return in
			},
			want: wantProjectManage,
			check: func(t *testing.T, w *world, caller string, in map[string]any, r testkit.Resp) {
				if r.Status == 200 && (r.Str("relation") != "member" || r.Str("principalId") != in["principalId"]) {
					t.Fatalf("projects.addMember output: %s", r.Raw)
				}
			}},
		{method: "projects/removeMember",
			body: func(t *testing.T, w *world) map[string]any {
				in := ref(t, w)
				in["principalId"] = w.projectMember.PrincipalID
				return in
			},
			want: wantProjectManage,
			check: func(t *testing.T, w *world, caller string, in map[string]any, r testkit.Resp) {
				after := env(t, w.e).Call(w.projectMember.Token, "projects/get", map[string]any{"tenantId": "acme", "projectId": in["projectId"]})
				if r.Status == 200 {
					if r.Body["removed"] != float64(1) {
						t.Fatalf("projects.removeMember output: %s", r.Raw)
					}
					expect(t, after, pd, "") // no relation and no role on acme any more
				} else {
					expect(t, after, ok, "")
				}
			}},
		{method: "projects/listMembers", body: ref, want: wantProjectRead,
			check: func(t *testing.T, w *world, caller string, in map[string]any, r testkit.Resp) {
				if r.Status != 200 {
					return
				}
				got := map[string]string{}
				for _, it := range items(t, r) {
					if it["projectId"] != in["projectId"] {
						t.Fatalf("member of another project: %v", it)
					}
					got[str(it["principalId"])] = str(it["relation"])
				}
				if len(got) != 2 || got[w.owner.PrincipalID] != "owner" || got[w.projectMember.PrincipalID] != "member" {
					t.Fatalf("projects.listMembers = %v: %s", got, r.Raw)
				}
			}},
	}
}

// TestPermissionMatrix calls every method of tenants, tokens, members and
// projects as every kind of principal and checks the decision.
func TestPermissionMatrix(t *testing.T) {
	t.Parallel()
	for _, pc := range permCases() {
		t.Run(strings.ReplaceAll(pc.method, "/", "."), func(t *testing.T) {
			t.Parallel()
			e := testkit.Start(t)
			w := newWorld(t, e)
			names := make([]string, 0, len(pc.want))
			for n := range pc.want {
				names = append(names, n)
			}
			sort.Strings(names)
			for _, name := range names {
				want := pc.want[name]
				t.Run(name, func(t *testing.T) {
					spec, found := callers[name]
					if !found {
						t.Fatalf("test bug: unknown caller %s", name)
					}
					in := pc.body(t, w)
					if spec.tenant != "" {
						in["tenantId"] = spec.tenant
					}
					send := map[string]any{}
					for k, v := range in {
						if k != "secret" { // test bookkeeping, not input
							send[k] = v
						}
					}
					r := env(t, e).Call(spec.token(w), pc.method, send)
					expect(t, r, want, anyPath)
					if pc.check != nil {
						pc.check(t, w, name, in, r)
					}
				})
			}
		})
	}
}

// TestBuiltinTenantIsReadOnly: no principal, the operator included, writes
// to the reserved tenant builtin.
func TestBuiltinTenantIsReadOnly(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	acme := newTenant(t, e, "acme")
	cases := []struct {
		name, caller, method string
		in                   map[string]any
	}{
		{"tenants.create by operator", e.Operator, "tenants/create", map[string]any{"tenantId": "builtin", "name": "again"}},
		{"tokens.create by operator", e.Operator, "tokens/create", map[string]any{"tenantId": "builtin", "name": "x", "role": "admin"}},
		{"tokens.create by admin", acme.Admin.Token, "tokens/create", map[string]any{"tenantId": "builtin", "name": "x", "role": "admin"}},
		{"members.grant by operator", e.Operator, "members/grant", map[string]any{"tenantId": "builtin", "principalId": acme.Admin.PrincipalID, "role": "admin"}},
		{"members.grant by admin", acme.Admin.Token, "members/grant", map[string]any{"tenantId": "builtin", "principalId": acme.Admin.PrincipalID, "role": "admin"}},
		{"projects.create by operator", e.Operator, "projects/create", map[string]any{"tenantId": "builtin", "name": "x"}},
		{"projects.create by member", acme.Member.Token, "projects/create", map[string]any{"tenantId": "builtin", "name": "x"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			expect(t, env(t, e).Call(c.caller, c.method, c.in), pd, anyPath)
		})
	}
	// nothing was written: no binding on builtin
	var n int
	if err := e.DB.GetContext(t.Context(), &n, `SELECT count(*) FROM role_bindings WHERE tenant_id = 'builtin'`); err != nil || n != 0 {
		t.Fatalf("role bindings on builtin: %d %v", n, err)
	}
	// builtin is not listed among tenants, even for the operator
	r := must(t, e.Call(e.Operator, "tenants/list", map[string]any{}))
	if l := items(t, r); len(l) != 1 || l[0]["tenantId"] != "acme" {
		t.Fatalf("tenants.list: %s", r.Raw)
	}
}

// TestOperatorOnMissingTenant: the operator may name any tenant; one that
// does not exist is NOT_FOUND (for the operator existence is no secret).
func TestOperatorOnMissingTenant(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	cases := []struct {
		method string
		in     map[string]any
	}{
		{"tenants/get", map[string]any{"tenantId": "ghost"}},
		{"tokens/create", map[string]any{"tenantId": "ghost", "name": "x", "role": "viewer"}},
		{"projects/create", map[string]any{"tenantId": "ghost", "name": "x"}},
		{"projects/get", map[string]any{"tenantId": "ghost", "projectId": "prj_01jd0000000000000000000000"}},
	}
	for _, c := range cases {
		t.Run(c.method, func(t *testing.T) {
			expect(t, env(t, e).Call(e.Operator, c.method, c.in), nf, anyPath)
		})
	}
	// Every read decided on the tenant, the lists above all, whose input
	// needs nothing but the tenant: a list of a tenant that does not exist
	// is NOT_FOUND at tenantId, not an empty page (it was).
	checked := 0
	for _, m := range e.Srv.Registry.Methods() {
		if m.Credential != registry.Bearer || m.Resource != authz.Tenant || m.Kind != registry.Read {
			continue
		}
		r := env(t, e).Call(e.Operator, m.Group+"/"+m.Name, map[string]any{"tenantId": "ghost"})
		if r.Code() == "INVALID_INPUT" && r.Path() != "tenantId" {
			continue // it needs more than the tenant
		}
		checked++
		if r.Code() != "NOT_FOUND" || r.Path() != "tenantId" {
			t.Errorf("%s by the operator on a tenant that does not exist: %d %s", m.Key(), r.Status, r.Raw)
		}
	}
	if checked < 8 {
		t.Fatalf("only %d reads checked", checked)
	}
	// A resource every tenant sees (a builtin profile) is no exception:
	// profiles.get, validate and render answered it for "ghost".
	for _, m := range []string{"profiles/get", "profiles/validate", "profiles/render"} {
		r := env(t, e).Call(e.Operator, m, map[string]any{"tenantId": "ghost", "profileId": "rocky-9-base"})
		if r.Code() != "NOT_FOUND" || r.Path() != "tenantId" {
			t.Errorf("%s of a builtin profile by the operator on a tenant that does not exist: %d %s", m, r.Status, r.Raw)
		}
		if r := env(t, e).Call(e.Operator, m, map[string]any{"tenantId": "builtin", "profileId": "rocky-9-base"}); r.Status != 200 {
			t.Errorf("%s of a builtin profile by the operator in builtin: %d %s", m, r.Status, r.Raw)
		}
	}
	// The graph's root says so at the same place.
	gqlExpect(t, e.GraphQL(e.Operator, `{ tenant(tenantId: "ghost") { name } }`, nil), "NOT_FOUND", "tenantId")
}
