package e2e

import (
	"encoding/base64"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/bettercompute/computed/internal/testkit"
)

// pagingFixture: tenant acme with 7 tokens (so 7 role bindings), 7 projects,
// one project with 7 relationships, and 7 tenants visible to the operator.
type pagingFixture struct {
	e                                  *testkit.Env
	acme                               tenant
	tokens, principals, projects, rels []string
	tenants                            []string
	relProject                         string
}

func newPagingFixture(t *testing.T) *pagingFixture {
	e := testkit.Start(t)
	f := &pagingFixture{e: e, acme: newTenant(t, e, "acme")}
	actors := []actor{f.acme.Admin, f.acme.Member, f.acme.Viewer}
	for i := 0; i < 4; i++ {
		actors = append(actors, newToken(t, e, f.acme.Admin.Token, "acme", fmt.Sprintf("svc-%d", i), "viewer"))
	}
	for _, a := range actors {
		f.tokens = append(f.tokens, a.TokenID)
		f.principals = append(f.principals, a.PrincipalID)
	}
	for i := 0; i < 7; i++ {
		f.projects = append(f.projects, newProject(t, e, f.acme.Member.Token, "acme", fmt.Sprintf("project-%d", i)))
	}
	// the first project: its creator (member) is owner; relate the 6 others
	f.relProject = f.projects[0]
	for _, a := range actors {
		if a.PrincipalID == f.acme.Member.PrincipalID {
			continue
		}
		must(t, e.Call(f.acme.Admin.Token, "projects/addMember", map[string]any{"tenantId": "acme", "projectId": f.relProject, "principalId": a.PrincipalID}))
	}
	f.rels = append([]string{}, f.principals...)
	f.tenants = []string{"acme"}
	for i := 0; i < 6; i++ {
		id := fmt.Sprintf("org-%d", i)
		must(t, e.Call(e.Operator, "tenants/create", map[string]any{"tenantId": id, "name": id}))
		f.tenants = append(f.tenants, id)
	}
	return f
}

func sortedCopy(s []string) []string {
	c := append([]string{}, s...)
	sort.Strings(c)
	return c
}

// TestPaginationMethods walks every list method with limit 3: pages of 3, 3
// and 1, cursor null only on the last, no duplicates, ordered by id.
func TestPaginationMethods(t *testing.T) {
	t.Parallel()
	f := newPagingFixture(t)
	admin := f.acme.Admin.Token
	cases := []struct {
		method, caller, key string
		in                  map[string]any
		want                []string
	}{
		{"projects/list", admin, "projectId", map[string]any{"tenantId": "acme"}, f.projects},
		{"tokens/list", admin, "tokenId", map[string]any{"tenantId": "acme"}, f.tokens},
		{"members/list", admin, "principalId", map[string]any{"tenantId": "acme"}, f.principals},
		{"projects/listMembers", admin, "principalId", map[string]any{"tenantId": "acme", "projectId": f.relProject}, f.rels},
		{"tenants/list", f.e.Operator, "tenantId", map[string]any{}, f.tenants},
	}
	for _, c := range cases {
		t.Run(c.method, func(t *testing.T) {
			e := env(t, f.e)
			var got, sizes []string
			var cursor any
			var second testkit.Resp
			for page := 0; ; page++ {
				if page > 5 {
					t.Fatalf("more pages than expected: %v", got)
				}
				in := map[string]any{"limit": 3}
				for k, v := range c.in {
					in[k] = v
				}
				if cursor != nil {
					in["cursor"] = cursor
				}
				r := must(t, e.Call(c.caller, c.method, in))
				if page == 1 {
					second = r
				}
				list := items(t, r)
				sizes = append(sizes, fmt.Sprint(len(list)))
				for _, it := range list {
					got = append(got, str(it[c.key]))
				}
				cursor = r.Body["cursor"]
				if cursor == nil {
					break
				}
				if s, isStr := cursor.(string); !isStr || s == "" {
					t.Fatalf("cursor is not a non-empty string: %s", r.Raw)
				}
			}
			if strings.Join(sizes, ",") != "3,3,1" {
				t.Fatalf("page sizes %v, want 3,3,1", sizes)
			}
			if !sort.StringsAreSorted(got) {
				t.Fatalf("not ordered by %s: %v", c.key, got)
			}
			seen := map[string]bool{}
			for _, id := range got {
				if seen[id] {
					t.Fatalf("duplicate %s across pages: %v", id, got)
				}
				seen[id] = true
			}
			if strings.Join(got, ",") != strings.Join(sortedCopy(c.want), ",") {
				t.Fatalf("walked %v, want %v", got, sortedCopy(c.want))
			}

			// the same cursor gives the same page again
			in := map[string]any{"limit": 3}
			for k, v := range c.in {
				in[k] = v
			}
			first := must(t, e.Call(c.caller, c.method, in))
			in["cursor"] = first.Body["cursor"]
			again := must(t, e.Call(c.caller, c.method, in))
			if string(again.Raw) != string(second.Raw) {
				t.Fatalf("cursor replay differs:\n%s\n%s", again.Raw, second.Raw)
			}
			// a page exactly as large as the rest ends with a null cursor
			in = map[string]any{"limit": 7}
			for k, v := range c.in {
				in[k] = v
			}
			full := must(t, e.Call(c.caller, c.method, in))
			if len(items(t, full)) != 7 || full.Body["cursor"] != nil {
				t.Fatalf("limit 7 of 7: %s", full.Raw)
			}
			// default limit (50) reads everything in one page
			def := must(t, e.Call(c.caller, c.method, c.in))
			if len(items(t, def)) != 7 || def.Body["cursor"] != nil {
				t.Fatalf("default limit: %s", def.Raw)
			}
		})
	}
}

// TestPaginationCursorStaysInTenant: a cursor taken from one tenant's list,
// used on another tenant the caller cannot read, does not open it.
func TestPaginationCursorStaysInTenant(t *testing.T) {
	t.Parallel()
	f := newPagingFixture(t)
	evil := newTenant(t, f.e, "evil")
	newProject(t, f.e, evil.Admin.Token, "evil", "mine")
	r := must(t, f.e.Call(evil.Admin.Token, "projects/list", map[string]any{"tenantId": "evil", "limit": 1}))
	if len(items(t, r)) != 1 || r.Body["cursor"] != nil {
		t.Fatalf("evil's own list: %s", r.Raw)
	}
	// acme's cursor in evil's hands does not open acme
	c := must(t, f.e.Call(f.acme.Viewer.Token, "projects/list", map[string]any{"tenantId": "acme", "limit": 1}))
	expect(t, f.e.Call(evil.Admin.Token, "projects/list", map[string]any{"tenantId": "acme", "cursor": c.Body["cursor"]}), pd, "")
	// and on evil's own tenant it lists only evil's projects: a forged
	// cursor holding a project id that sorts first
	first := base64.RawURLEncoding.EncodeToString([]byte(`["project","prj_00000000000000000000000000"]`))
	o := must(t, f.e.Call(evil.Admin.Token, "projects/list", map[string]any{"tenantId": "evil", "cursor": first}))
	if l := items(t, o); len(l) != 1 || l[0]["tenantId"] != "evil" {
		t.Fatalf("forged cursor on evil: %s", o.Raw)
	}
	// the same on the caller's own tenant lists only its own items
	own := must(t, f.e.Call(f.acme.Viewer.Token, "projects/list", map[string]any{"tenantId": "acme", "cursor": first}))
	if len(items(t, own)) != 7 {
		t.Fatalf("forged cursor: %s", own.Raw)
	}
	// a key no project id has (empty) is no cursor this server returned
	expect(t, f.e.Call(f.acme.Viewer.Token, "projects/list", map[string]any{"tenantId": "acme",
		"cursor": base64.RawURLEncoding.EncodeToString([]byte(`["project",""]`))}), "INVALID_INPUT", "cursor")
}

// A list refuses another list's cursor, saying so, on both surfaces (it
// answered an empty page: a token id sorts after every project id); a
// method's cursor and its graph connection's are one.
func TestCursorsBelongToTheirList(t *testing.T) {
	t.Parallel()
	f := newPagingFixture(t)
	e := f.e
	tok := f.acme.Admin.Token
	tokens := must(t, e.Call(tok, "tokens/list", map[string]any{"tenantId": "acme", "limit": 1}))
	r := e.Call(tok, "projects/list", map[string]any{"tenantId": "acme", "cursor": tokens.Body["cursor"]})
	expect(t, r, "INVALID_INPUT", "cursor")
	if !strings.Contains(string(r.Raw), "cursor is one of another list") {
		t.Fatalf("another list's cursor: %s", r.Raw)
	}
	q := `query($after: String) { tenant(tenantId: "acme") { projects(first: 2, after: $after) { edges { node { projectId } } } } }`
	g := e.GraphQL(tok, q, map[string]any{"after": tokens.Body["cursor"]})
	if m, _ := gqlMessage(g); m != "after is one of another list" {
		t.Fatalf("graph, another list's cursor: %s", g.Raw)
	}
	// projects.list's cursor goes on in the graph's tenant.projects
	projects := must(t, e.Call(tok, "projects/list", map[string]any{"tenantId": "acme", "limit": 3}))
	d := gqlOK(t, e.GraphQL(tok, q, map[string]any{"after": projects.Body["cursor"]}))
	edges := obj(t, d, "tenant", "projects")["edges"].([]any)
	if want := sortedCopy(f.projects)[3]; len(edges) != 2 || obj(t, edges[0].(map[string]any), "node")["projectId"] != want {
		t.Fatalf("the method's cursor in the graph: %v, want %s first", edges, want)
	}
}

const gqlTenantPages = `query($t: String!, $first: Int, $after: String) {
  tenant(tenantId: $t) {
    projects(first: $first, after: $after) { totalCount pageInfo { hasNextPage endCursor } edges { cursor node { projectId tenantId } } }
    tokens(first: $first, after: $after) { totalCount pageInfo { hasNextPage endCursor } edges { cursor node { tokenId } } }
    members(first: $first, after: $after) { totalCount pageInfo { hasNextPage endCursor } edges { cursor node { principalId } } }
  }
}`

// TestPaginationGraphQL walks tenant.projects, tenant.tokens, tenant.members
// and viewer.tenants three at a time.
func TestPaginationGraphQL(t *testing.T) {
	t.Parallel()
	f := newPagingFixture(t)
	cases := []struct {
		field, key, caller, query string
		path                      []string
		want                      []string
	}{
		{"projects", "projectId", f.acme.Viewer.Token,
			`query($t: String!, $first: Int, $after: String) { tenant(tenantId: $t) { projects(first: $first, after: $after) { totalCount pageInfo { hasNextPage endCursor } edges { cursor node { projectId } } } } }`,
			[]string{"tenant", "projects"}, f.projects},
		{"tokens", "tokenId", f.acme.Viewer.Token,
			`query($t: String!, $first: Int, $after: String) { tenant(tenantId: $t) { tokens(first: $first, after: $after) { totalCount pageInfo { hasNextPage endCursor } edges { cursor node { tokenId } } } } }`,
			[]string{"tenant", "tokens"}, f.tokens},
		{"members", "principalId", f.acme.Viewer.Token,
			`query($t: String!, $first: Int, $after: String) { tenant(tenantId: $t) { members(first: $first, after: $after) { totalCount pageInfo { hasNextPage endCursor } edges { cursor node { principalId } } } } }`,
			[]string{"tenant", "members"}, f.principals},
		{"viewer.tenants", "tenantId", f.e.Operator,
			`query($first: Int, $after: String) { viewer { tenants(first: $first, after: $after) { totalCount pageInfo { hasNextPage endCursor } edges { cursor node { tenantId } } } } }`,
			[]string{"viewer", "tenants"}, f.tenants},
	}
	for _, c := range cases {
		t.Run(c.field, func(t *testing.T) {
			e := env(t, f.e)
			var got, sizes []string
			var after any
			for page := 0; page < 5; page++ {
				d := gqlOK(t, e.GraphQL(c.caller, c.query, map[string]any{"t": "acme", "first": 3, "after": after}))
				conn := obj(t, d, c.path...)
				if conn["totalCount"] != float64(7) {
					t.Fatalf("totalCount %v, want 7", conn["totalCount"])
				}
				edges := conn["edges"].([]any)
				sizes = append(sizes, fmt.Sprint(len(edges)))
				var last string
				for _, x := range edges {
					edge := x.(map[string]any)
					got = append(got, str(obj(t, edge, "node")[c.key]))
					last = str(edge["cursor"])
				}
				info := obj(t, conn, "pageInfo")
				if info["endCursor"] != last {
					t.Fatalf("endCursor %v is not the last edge's cursor %s", info["endCursor"], last)
				}
				if info["hasNextPage"] != true {
					break
				}
				after = info["endCursor"]
			}
			if strings.Join(sizes, ",") != "3,3,1" {
				t.Fatalf("page sizes %v, want 3,3,1", sizes)
			}
			if strings.Join(got, ",") != strings.Join(sortedCopy(c.want), ",") {
				t.Fatalf("walked %v, want %v", got, sortedCopy(c.want))
			}
			// past the last item: no edges, the same total, no cursors
			kind := map[string]string{"projects": "project", "tokens": "token", "members": "roleBinding", "viewer.tenants": "tenant"}[c.field]
			lastCursor := base64.RawURLEncoding.EncodeToString([]byte(`["` + kind + `","` + got[len(got)-1] + `"]`))
			d := gqlOK(t, e.GraphQL(c.caller, c.query, map[string]any{"t": "acme", "first": 3, "after": lastCursor}))
			conn := obj(t, d, c.path...)
			info := obj(t, conn, "pageInfo")
			if len(conn["edges"].([]any)) != 0 || conn["totalCount"] != float64(7) || info["hasNextPage"] != false || info["endCursor"] != nil {
				t.Fatalf("after the last item: %v", conn)
			}
		})
	}

	// all three connections of a tenant in one request (one level of loaders)
	d := gqlOK(t, f.e.GraphQL(f.acme.Admin.Token, gqlTenantPages, map[string]any{"t": "acme", "first": 7}))
	for _, field := range []string{"projects", "tokens", "members"} {
		conn := obj(t, d, "tenant", field)
		if conn["totalCount"] != float64(7) || len(conn["edges"].([]any)) != 7 || obj(t, conn, "pageInfo")["hasNextPage"] != false {
			t.Fatalf("%s with first 7: %v", field, conn)
		}
	}

	bad := []struct {
		name string
		vars map[string]any
		path string
	}{
		{"first 201", map[string]any{"t": "acme", "first": 201}, "first"},
		{"first 0", map[string]any{"t": "acme", "first": 0}, "first"},
		{"first -1", map[string]any{"t": "acme", "first": -1}, "first"},
		{"after malformed", map[string]any{"t": "acme", "first": 3, "after": "!!!"}, "after"},
		{"after too long", map[string]any{"t": "acme", "first": 3, "after": strings.Repeat("A", 300)}, "after"},
	}
	q := `query($t: String!, $first: Int, $after: String) { tenant(tenantId: $t) { projects(first: $first, after: $after) { totalCount } } }`
	for _, b := range bad {
		t.Run(b.name, func(t *testing.T) {
			r := env(t, f.e).GraphQL(f.acme.Admin.Token, q, b.vars)
			gqlExpect(t, r, inv, b.path)
		})
	}
	t.Run("first 200 ok", func(t *testing.T) {
		d := gqlOK(t, env(t, f.e).GraphQL(f.acme.Admin.Token, q, map[string]any{"t": "acme", "first": 200}))
		if obj(t, d, "tenant", "projects")["totalCount"] != float64(7) {
			t.Fatalf("first 200: %v", d)
		}
	})
	t.Run("viewer.tenants first 201", func(t *testing.T) {
		r := env(t, f.e).GraphQL(f.e.Operator, `{ viewer { tenants(first: 201) { totalCount } } }`, nil)
		gqlExpect(t, r, inv, "first")
	})
}
