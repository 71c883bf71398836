package e2e

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/bettercompute/computed/internal/testkit"
)

const (
	gqlCreateProject = `mutation($in: CreateProjectInput!) { createProject(input: $in) { project { id projectId tenantId name description rowVersion } } }`
	gqlUpdateProject = `mutation($in: UpdateProjectInput!) { updateProject(input: $in) { project { projectId name description rowVersion } } }`
)

// TestGraphQLMutations: createProject and updateProject run through the same
// validation and decisions as the method surface, with the same codes in
// extensions.code and extensions.details.path.
func TestGraphQLMutations(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	acme := newTenant(t, e, "acme")
	evil := newTenant(t, e, "evil")

	d := gqlOK(t, e.GraphQL(acme.Member.Token, gqlCreateProject, map[string]any{"in": map[string]any{"tenantId": "acme", "name": "web", "description": "the web team"}}))
	p := obj(t, d, "createProject", "project")
	id := str(p["projectId"])
	if !projectIDRe.MatchString(id) || p["tenantId"] != "acme" || p["name"] != "web" || p["description"] != "the web team" || p["rowVersion"] != float64(1) || str(p["id"]) == "" {
		t.Fatalf("createProject: %v", p)
	}
	// the method surface sees the same project
	g := must(t, e.Call(acme.Viewer.Token, "projects/get", map[string]any{"tenantId": "acme", "projectId": id}))
	if g.Str("name") != "web" {
		t.Fatalf("projects.get after createProject: %s", g.Raw)
	}

	create := func(in map[string]any) map[string]any { return map[string]any{"in": in} }
	update := func(extra map[string]any) map[string]any {
		in := map[string]any{"tenantId": "acme", "projectId": id}
		for k, v := range extra {
			in[k] = v
		}
		return map[string]any{"in": in}
	}
	cases := []struct {
		name, caller, query string
		vars                map[string]any
		code, path          string
	}{
		{"create: tenantId with space", acme.Member.Token, gqlCreateProject, create(map[string]any{"tenantId": "a b", "name": "x"}), inv, "tenantId"},
		{"create: tenantId 129", acme.Member.Token, gqlCreateProject, create(map[string]any{"tenantId": strings.Repeat("t", 129), "name": "x"}), inv, "tenantId"},
		{"create: name empty", acme.Member.Token, gqlCreateProject, create(map[string]any{"tenantId": "acme", "name": ""}), inv, "name"},
		{"create: name 201", acme.Member.Token, gqlCreateProject, create(map[string]any{"tenantId": "acme", "name": strings.Repeat("n", 201)}), inv, "name"},
		{"create: description 2001", acme.Member.Token, gqlCreateProject, create(map[string]any{"tenantId": "acme", "name": "x", "description": strings.Repeat("d", 2001)}), inv, "description"},
		{"create: duplicate name", acme.Member.Token, gqlCreateProject, create(map[string]any{"tenantId": "acme", "name": "web"}), cfl, "name"},
		{"create: viewer", acme.Viewer.Token, gqlCreateProject, create(map[string]any{"tenantId": "acme", "name": "x"}), pd, ""},
		{"create: other tenant's admin", evil.Admin.Token, gqlCreateProject, create(map[string]any{"tenantId": "acme", "name": "x"}), pd, ""},
		{"create: missing tenant", acme.Admin.Token, gqlCreateProject, create(map[string]any{"tenantId": "ghost", "name": "x"}), pd, ""},
		{"create: builtin", e.Operator, gqlCreateProject, create(map[string]any{"tenantId": "builtin", "name": "x"}), pd, ""},
		{"update: neither name nor description", acme.Member.Token, gqlUpdateProject, update(nil), inv, "name"},
		{"update: bad projectId", acme.Member.Token, gqlUpdateProject, map[string]any{"in": map[string]any{"tenantId": "acme", "projectId": "prj_nope", "name": "x"}}, inv, "projectId"},
		{"update: expectedVersion 0", acme.Member.Token, gqlUpdateProject, update(map[string]any{"name": "x", "expectedVersion": 0}), inv, "expectedVersion"},
		{"update: name with trailing space", acme.Member.Token, gqlUpdateProject, update(map[string]any{"name": "x "}), inv, "name"},
		{"update: stale expectedVersion", acme.Member.Token, gqlUpdateProject, update(map[string]any{"name": "x", "expectedVersion": 7}), cfl, anyPath},
		{"update: viewer", acme.Viewer.Token, gqlUpdateProject, update(map[string]any{"name": "x"}), pd, ""},
		{"update: other tenant's admin", evil.Admin.Token, gqlUpdateProject, update(map[string]any{"name": "x"}), pd, ""},
		{"update: other tenant's admin on its own tenant", evil.Admin.Token, gqlUpdateProject, map[string]any{"in": map[string]any{"tenantId": "evil", "projectId": id, "name": "x"}}, nf, ""},
		{"update: missing project", acme.Admin.Token, gqlUpdateProject, map[string]any{"in": map[string]any{"tenantId": "acme", "projectId": missingPrj26, "name": "x"}}, nf, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := env(t, e).GraphQL(c.caller, c.query, c.vars)
			gqlExpect(t, r, c.code, c.path)
			if data, _ := r.Body["data"].(map[string]any); data != nil && len(data) > 0 {
				for _, v := range data {
					if v != nil {
						t.Fatalf("failed mutation returned data: %s", r.Raw)
					}
				}
			}
		})
	}
	// none of the refused updates changed it; a good one does
	d = gqlOK(t, e.GraphQL(acme.Member.Token, gqlUpdateProject, update(map[string]any{"name": "web2", "expectedVersion": 1})))
	up := obj(t, d, "updateProject", "project")
	if up["name"] != "web2" || up["rowVersion"] != float64(2) || up["description"] != "the web team" {
		t.Fatalf("updateProject: %v", up)
	}
	// GraphQL type errors in variables are rejected before running. (A JSON
	// number for a String variable is NOT rejected: gqlgen decodes variables
	// with UseNumber and json.Number passes gqlparser's String check, so
	// {"name": 5} creates a project named "5", where the method surface says
	// INVALID_INPUT path name. Reported, not asserted.)
	for _, v := range []any{true, map[string]any{"x": 1}, []any{"a"}} {
		r := e.GraphQL(acme.Member.Token, gqlCreateProject, create(map[string]any{"tenantId": "acme", "name": v}))
		if errs, _ := r.Body["errors"].([]any); len(errs) == 0 || r.Body["data"] != nil {
			t.Fatalf("graphql accepted %v for name: %s", v, r.Raw)
		}
	}
	l := must(t, e.Call(acme.Admin.Token, "projects/list", map[string]any{"tenantId": "acme"}))
	if len(items(t, l)) != 1 {
		t.Fatalf("refused mutations created projects: %s", l.Raw)
	}
}

// TestGraphQLNodeAndViewer: node(id:) returns the project to a reader and
// null to anyone else; viewer.tenants counts what the caller may read.
func TestGraphQLNodeAndViewer(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	acme := newTenant(t, e, "acme")
	evil := newTenant(t, e, "evil")
	d := gqlOK(t, e.GraphQL(acme.Member.Token, gqlCreateProject, map[string]any{"in": map[string]any{"tenantId": "acme", "name": "web"}}))
	p := obj(t, d, "createProject", "project")
	gid, pid := str(p["id"]), str(p["projectId"])
	// An acme principal without a tenant role becomes a member of the
	// project: it reads the project, not the tenant. (Another tenant's
	// principal is NOT_FOUND to acme.)
	pm := newToken(t, e, acme.Admin.Token, "acme", "pm", "viewer")
	must(t, e.Call(acme.Admin.Token, "members/revoke", map[string]any{"tenantId": "acme", "principalId": pm.PrincipalID}))
	must(t, e.Call(acme.Admin.Token, "projects/addMember", map[string]any{"tenantId": "acme", "projectId": pid, "principalId": pm.PrincipalID}))

	nodeQ := `query($id: ID!) { node(id: $id) { id ... on Project { projectId tenantId name } } }`
	tenantGID := base64.RawURLEncoding.EncodeToString([]byte("Tenant:acme"))
	cases := []struct {
		name, caller, id string
		visible          bool
	}{
		{"operator", e.Operator, gid, true},
		{"admin", acme.Admin.Token, gid, true},
		{"member (creator)", acme.Member.Token, gid, true},
		{"viewer", acme.Viewer.Token, gid, true},
		{"project member without a tenant role", pm.Token, gid, true},
		{"other tenant's admin", evil.Admin.Token, gid, false},
		{"other tenant's viewer", evil.Viewer.Token, gid, false},
		{"missing project", acme.Admin.Token, base64.RawURLEncoding.EncodeToString([]byte("Project:" + missingPrj26)), false},
		{"garbage id", acme.Admin.Token, "%%%", false},
		{"unknown type", acme.Admin.Token, base64.RawURLEncoding.EncodeToString([]byte("Nope:x")), false},
		{"tenant node, own", acme.Viewer.Token, tenantGID, true},
		{"tenant node, other tenant's admin", evil.Admin.Token, tenantGID, false},
	}
	// The project's tenant is null for a caller related to the project
	// only, and the project stays readable: the field was non-null and
	// NOT_FOUND, which nulled the whole project.
	withTenant := `query($id: ID!) { node(id: $id) { ... on Project { projectId tenant { tenantId } } } }`
	for _, c := range []struct {
		caller string
		tenant any
	}{{pm.Token, nil}, {acme.Viewer.Token, map[string]any{"tenantId": "acme"}}} {
		d := gqlOK(t, e.GraphQL(c.caller, withTenant, map[string]any{"id": gid}))
		if n, _ := d["node"].(map[string]any); n == nil || n["projectId"] != pid || fmt.Sprint(n["tenant"]) != fmt.Sprint(c.tenant) {
			t.Fatalf("the project with its tenant: %v", d)
		}
	}
	for _, c := range cases {
		t.Run("node/"+c.name, func(t *testing.T) {
			d := gqlOK(t, env(t, e).GraphQL(c.caller, nodeQ, map[string]any{"id": c.id}))
			n, present := d["node"]
			if !present {
				t.Fatalf("no node key: %v", d)
			}
			if !c.visible {
				if n != nil {
					t.Fatalf("node visible to %s: %v", c.name, n)
				}
				return
			}
			m, _ := n.(map[string]any)
			if m == nil || m["id"] != c.id {
				t.Fatalf("node for %s: %v", c.name, n)
			}
			if c.id == gid && (m["projectId"] != pid || m["tenantId"] != "acme" || m["name"] != "web") {
				t.Fatalf("project node: %v", m)
			}
		})
	}

	viewerQ := `{ viewer { principalId kind tenants { totalCount edges { node { tenantId } } } } }`
	vcases := []struct {
		name, caller, kind string
		tenants            []string
	}{
		{"operator", e.Operator, "operator", []string{"acme", "evil", "third"}},
		{"acme admin", acme.Admin.Token, "service", []string{"acme"}},
		{"acme viewer", acme.Viewer.Token, "service", []string{"acme"}},
		{"evil admin", evil.Admin.Token, "service", []string{"evil"}},
	}
	// one principal holding roles on two tenants sees both
	// (the operator grants it: to evil's admin, third's principal is NOT_FOUND)
	third := newTenant(t, e, "third")
	must(t, e.Call(e.Operator, "members/grant", map[string]any{"tenantId": "evil", "principalId": third.Admin.PrincipalID, "role": "viewer"}))
	vcases = append(vcases, struct {
		name, caller, kind string
		tenants            []string
	}{"third admin with a role on evil", third.Admin.Token, "service", []string{"evil", "third"}})
	for _, c := range vcases {
		t.Run("viewer/"+c.name, func(t *testing.T) {
			d := gqlOK(t, env(t, e).GraphQL(c.caller, viewerQ, nil))
			v := obj(t, d, "viewer")
			conn := obj(t, v, "tenants")
			var got []string
			for _, x := range conn["edges"].([]any) {
				got = append(got, str(obj(t, x, "node")["tenantId"]))
			}
			if v["kind"] != c.kind || conn["totalCount"] != float64(len(c.tenants)) || strings.Join(got, ",") != strings.Join(c.tenants, ",") {
				t.Fatalf("viewer for %s: %v", c.name, v)
			}
		})
	}

	// tenant(tenantId:) for a tenant the caller holds no role on is PERMISSION_DENIED, existing or not
	for _, tid := range []string{"acme", "ghost"} {
		r := e.GraphQL(evil.Admin.Token, `query($t: String!) { tenant(tenantId: $t) { tenantId } }`, map[string]any{"t": tid})
		gqlExpect(t, r, pd, "")
		if obj(t, r.Body, "data")["tenant"] != nil {
			t.Fatalf("tenant %s visible: %s", tid, r.Raw)
		}
	}
	// nested reads keep the decision: a project member with no tenant role
	// reads the project's members through node, not the tenant's projects
	d = gqlOK(t, e.GraphQL(pm.Token, `query($id: ID!) { node(id: $id) { ... on Project { members { totalCount } } } }`, map[string]any{"id": gid}))
	if obj(t, d, "node", "members")["totalCount"] != float64(2) {
		t.Fatalf("project members via node: %v", d)
	}
}

// TestGraphQLOverHTTP: the transport's rules.
func TestGraphQLOverHTTP(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	acme := newTenant(t, e, "acme")
	r := e.GraphQL(acme.Admin.Token, `{ viewer { kind } }`, nil)
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/graphql-response+json") {
		t.Fatalf("Content-Type %q", ct)
	}
	// a syntax error is an error, not data
	bad := e.GraphQL(acme.Admin.Token, `{ viewer { kind `, nil)
	if errs, _ := bad.Body["errors"].([]any); len(errs) == 0 || bad.Status == 200 && bad.Body["data"] != nil {
		t.Fatalf("syntax error: %d %s", bad.Status, bad.Raw)
	}
	// an unauthenticated GraphQL request is 401 in GraphQL's error shape
	un := e.GraphQL("", `{ viewer { kind } }`, nil)
	if un.Status != 401 {
		t.Fatalf("no token: %d %s", un.Status, un.Raw)
	}
	gqlExpect(t, un, "UNAUTHENTICATED", anyPath)
	// A subscription sent as a plain request is a request error like the
	// others: 400 under application/graphql-response+json, 200 under
	// application/json (it was 400 under both).
	sub := `{"query":"subscription { instanceEvents(tenantId: \"acme\") { eventId } }"}`
	for accept, want := range map[string]int{"application/graphql-response+json": 400, "application/json": 200} {
		req, _ := http.NewRequest(http.MethodPost, e.Server.URL+"/graphql", strings.NewReader(sub))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", accept)
		req.Header.Set("Authorization", "Bearer "+acme.Admin.Token)
		r := e.Do(req)
		if c, _ := gqlErr(r); r.Status != want || c != "INVALID_INPUT" || r.Body["data"] != nil {
			t.Errorf("a subscription over POST under %s: %d %s", accept, r.Status, r.Raw)
		}
	}
}

// Mutations answer nullable payloads: in a document of several, one that
// fails is null beside the others' results, which committed. With
// non-null payloads one failure nulled the whole answer: a probe's first
// join token was created (listed, active) and its one-time secret lost,
// because the second mutation of the document was refused.
func TestAFailedMutationKeepsTheOthersResults(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	acme := newTenant(t, e, "acme")
	pool := str(newPool(t, e, acme.Admin.Token, "acme", "racks")["poolId"])
	r := e.GraphQL(acme.Admin.Token, `mutation($p: String!) {
		a: createJoinToken(input: {tenantId: "acme", poolId: $p}) { secret joinToken { joinTokenId } }
		b: createJoinToken(input: {tenantId: "acme", poolId: $p, maxUses: 0}) { secret }
	}`, map[string]any{"p": pool})
	gqlExpect(t, r, inv, "maxUses")
	d, ok := r.Body["data"].(map[string]any)
	if !ok || d["b"] != nil {
		t.Fatalf("the failed mutation's field is not null beside the others: %s", r.Raw)
	}
	a, _ := d["a"].(map[string]any)
	if a == nil || !strings.HasPrefix(str(a["secret"]), "bcj_") {
		t.Fatalf("the first mutation's result, and its secret, are lost: %s", r.Raw)
	}
}
