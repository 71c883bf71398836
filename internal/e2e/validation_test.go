package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/bettercompute/computed/internal/testkit"
)

// a well-formed project id that names no project (26 and 52 characters of body)
var (
	missingPrj26 = "prj_" + strings.Repeat("0", 25) + "z"
	missingPrj52 = "prj_" + strings.Repeat("0", 51) + "z"
)

// TestValidation: every broken input is INVALID_INPUT naming the first
// offending field; boundary values pass.
func TestValidation(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	acme := newTenant(t, e, "acme")
	prj := newProject(t, e, acme.Admin.Token, "acme", "web")
	op, admin := e.Operator, acme.Admin.Token
	cases := []struct {
		name, caller, method string
		body                 any
		code, path           string
	}{
		// tenantId: ^[A-Za-z0-9._:-]{1,128}$
		{"tenantId 128 characters", op, "tenants/create", map[string]any{"tenantId": strings.Repeat("t", 128), "name": "long"}, ok, ""},
		{"tenantId 129 characters", op, "tenants/create", map[string]any{"tenantId": strings.Repeat("t", 129), "name": "long"}, inv, "tenantId"},
		{"tenantId with underscore", op, "tenants/create", map[string]any{"tenantId": "A-z_0.9:x", "name": "punct"}, ok, ""},
		{"tenantId with dot colon dash", op, "tenants/create", map[string]any{"tenantId": "Org.9:x-1", "name": "punct"}, ok, ""},
		{"tenantId with space", op, "tenants/create", map[string]any{"tenantId": "a b", "name": "x"}, inv, "tenantId"},
		{"tenantId with slash", op, "tenants/create", map[string]any{"tenantId": "a/b", "name": "x"}, inv, "tenantId"},
		{"tenantId with non-ASCII", op, "tenants/create", map[string]any{"tenantId": "café", "name": "x"}, inv, "tenantId"},
		{"tenantId empty", op, "tenants/create", map[string]any{"tenantId": "", "name": "x"}, inv, "tenantId"},
		{"tenantId missing", op, "tenants/create", map[string]any{"name": "x"}, inv, "tenantId"},
		{"tenantId null", op, "tenants/create", map[string]any{"tenantId": nil, "name": "x"}, inv, "tenantId"},
		{"tenantId number", op, "tenants/create", map[string]any{"tenantId": 7, "name": "x"}, inv, "tenantId"},
		{"tenantId with space on a read", admin, "projects/list", map[string]any{"tenantId": "a b"}, inv, "tenantId"},
		{"tenantId 129 on a read", admin, "projects/list", map[string]any{"tenantId": strings.Repeat("t", 129)}, inv, "tenantId"},
		// name
		{"name missing", op, "tenants/create", map[string]any{"tenantId": "x1"}, inv, "name"},
		{"name a number", admin, "projects/create", map[string]any{"tenantId": "acme", "name": 5}, inv, "name"},
		{"name empty", admin, "projects/create", map[string]any{"tenantId": "acme", "name": ""}, inv, "name"},
		{"name leading space", admin, "projects/create", map[string]any{"tenantId": "acme", "name": " web2"}, inv, "name"},
		{"name with a control character", admin, "projects/create", map[string]any{"tenantId": "acme", "name": "a\x01b"}, inv, "name"},
		{"name with DEL", admin, "projects/create", map[string]any{"tenantId": "acme", "name": "a\x7fb"}, inv, "name"},
		{"name with NEL", admin, "projects/create", map[string]any{"tenantId": "acme", "name": "a\u0085b"}, inv, "name"},
		{"name with a tab", admin, "projects/create", map[string]any{"tenantId": "acme", "name": "a\tb"}, inv, "name"},
		{"name with a line separator", admin, "projects/create", map[string]any{"tenantId": "acme", "name": "a\u2028b"}, inv, "name"},
		{"name with accents and a space", admin, "projects/create", map[string]any{"tenantId": "acme", "name": "Équipe Nord"}, ok, ""},
		{"name 200 characters", admin, "projects/create", map[string]any{"tenantId": "acme", "name": strings.Repeat("n", 200)}, ok, ""},
		{"name 201 characters", admin, "projects/create", map[string]any{"tenantId": "acme", "name": strings.Repeat("n", 201)}, inv, "name"},
		{"description a number", admin, "projects/create", map[string]any{"tenantId": "acme", "name": "d1", "description": 1}, inv, "description"},
		{"description 2001 characters", admin, "projects/create", map[string]any{"tenantId": "acme", "name": "d2", "description": strings.Repeat("d", 2001)}, inv, "description"},
		// unknown fields, reported first and in sorted order
		{"unknown field", admin, "projects/create", map[string]any{"tenantId": "acme", "name": "u1", "bogus": true}, inv, "bogus"},
		{"unknown fields sorted", admin, "projects/create", map[string]any{"zeta": 1, "alpha": 1, "name": 5}, inv, "alpha"},
		{"unknown field before a bad known one", admin, "projects/list", map[string]any{"tenantId": "a b", "projectId": prj}, inv, "projectId"},
		{"camelCase only", admin, "projects/list", map[string]any{"tenant_id": "acme"}, inv, "tenant_id"},
		// limit
		{"limit a string", admin, "projects/list", map[string]any{"tenantId": "acme", "limit": "10"}, inv, "limit"},
		{"limit a fraction", admin, "projects/list", map[string]any{"tenantId": "acme", "limit": 1.5}, inv, "limit"},
		{"limit a boolean", admin, "projects/list", map[string]any{"tenantId": "acme", "limit": true}, inv, "limit"},
		{"limit -1", admin, "projects/list", map[string]any{"tenantId": "acme", "limit": -1}, inv, "limit"},
		{"limit 0", admin, "projects/list", map[string]any{"tenantId": "acme", "limit": 0}, inv, "limit"},
		{"limit 1", admin, "projects/list", map[string]any{"tenantId": "acme", "limit": 1}, ok, ""},
		{"limit 200", admin, "projects/list", map[string]any{"tenantId": "acme", "limit": 200}, ok, ""},
		{"limit 201", admin, "projects/list", map[string]any{"tenantId": "acme", "limit": 201}, inv, "limit"},
		{"limit 201 on tokens.list", admin, "tokens/list", map[string]any{"tenantId": "acme", "limit": 201}, inv, "limit"},
		{"limit 201 on members.list", admin, "members/list", map[string]any{"tenantId": "acme", "limit": 201}, inv, "limit"},
		{"limit 201 on tenants.list", admin, "tenants/list", map[string]any{"limit": 201}, inv, "limit"},
		{"limit 201 on projects.listMembers", admin, "projects/listMembers", map[string]any{"tenantId": "acme", "projectId": prj, "limit": 201}, inv, "limit"},
		{"limit null means default", admin, "projects/list", map[string]any{"tenantId": "acme", "limit": nil}, ok, ""},
		// cursor
		{"cursor not base64", admin, "projects/list", map[string]any{"tenantId": "acme", "cursor": "!!!"}, inv, "cursor"},
		{"cursor base64 of garbage", admin, "projects/list", map[string]any{"tenantId": "acme", "cursor": "bm90IGpzb24"}, inv, "cursor"},
		{"cursor of the wrong shape", admin, "projects/list", map[string]any{"tenantId": "acme", "cursor": "WzFd"}, inv, "cursor"},
		{"cursor a number", admin, "projects/list", map[string]any{"tenantId": "acme", "cursor": 3}, inv, "cursor"},
		{"cursor too long", admin, "projects/list", map[string]any{"tenantId": "acme", "cursor": strings.Repeat("A", 257)}, inv, "cursor"},
		{"cursor malformed on tokens.list", admin, "tokens/list", map[string]any{"tenantId": "acme", "cursor": "!!!"}, inv, "cursor"},
		{"cursor malformed on members.list", admin, "members/list", map[string]any{"tenantId": "acme", "cursor": "!!!"}, inv, "cursor"},
		{"cursor malformed on tenants.list", admin, "tenants/list", map[string]any{"cursor": "!!!"}, inv, "cursor"},
		{"cursor malformed on projects.listMembers", admin, "projects/listMembers", map[string]any{"tenantId": "acme", "projectId": prj, "cursor": "!!!"}, inv, "cursor"},
		// projectId: ^prj_[0-9a-hjkmnp-tv-z]{26,52}$
		{"projectId real", admin, "projects/get", map[string]any{"tenantId": "acme", "projectId": prj}, ok, ""},
		{"projectId 26 well-formed, missing", admin, "projects/get", map[string]any{"tenantId": "acme", "projectId": missingPrj26}, nf, ""},
		{"projectId 52 well-formed, missing", admin, "projects/get", map[string]any{"tenantId": "acme", "projectId": missingPrj52}, nf, ""},
		{"projectId 25", admin, "projects/get", map[string]any{"tenantId": "acme", "projectId": "prj_" + strings.Repeat("0", 25)}, inv, "projectId"},
		{"projectId 53", admin, "projects/get", map[string]any{"tenantId": "acme", "projectId": "prj_" + strings.Repeat("0", 53)}, inv, "projectId"},
		{"projectId upper case", admin, "projects/get", map[string]any{"tenantId": "acme", "projectId": strings.ToUpper(prj)}, inv, "projectId"},
		{"projectId with i", admin, "projects/get", map[string]any{"tenantId": "acme", "projectId": "prj_" + strings.Repeat("0", 25) + "i"}, inv, "projectId"},
		{"projectId with l", admin, "projects/get", map[string]any{"tenantId": "acme", "projectId": "prj_" + strings.Repeat("0", 25) + "l"}, inv, "projectId"},
		{"projectId with o", admin, "projects/get", map[string]any{"tenantId": "acme", "projectId": "prj_" + strings.Repeat("0", 25) + "o"}, inv, "projectId"},
		{"projectId with u", admin, "projects/get", map[string]any{"tenantId": "acme", "projectId": "prj_" + strings.Repeat("0", 25) + "u"}, inv, "projectId"},
		{"projectId other prefix", admin, "projects/get", map[string]any{"tenantId": "acme", "projectId": "pool_" + strings.Repeat("0", 26)}, inv, "projectId"},
		{"projectId no prefix", admin, "projects/get", map[string]any{"tenantId": "acme", "projectId": strings.Repeat("0", 26)}, inv, "projectId"},
		{"projectId with newline", admin, "projects/get", map[string]any{"tenantId": "acme", "projectId": prj + "\n"}, inv, "projectId"},
		{"projectId missing", admin, "projects/get", map[string]any{"tenantId": "acme"}, inv, "projectId"},
		{"projectId on update", admin, "projects/update", map[string]any{"tenantId": "acme", "projectId": "prj_x", "name": "n"}, inv, "projectId"},
		{"projectId on delete", admin, "projects/delete", map[string]any{"tenantId": "acme", "projectId": "prj_x"}, inv, "projectId"},
		{"projectId on addMember", admin, "projects/addMember", map[string]any{"tenantId": "acme", "projectId": "prj_x", "principalId": acme.Viewer.PrincipalID}, inv, "projectId"},
		{"principalId malformed", admin, "projects/addMember", map[string]any{"tenantId": "acme", "projectId": prj, "principalId": "bob"}, inv, "principalId"},
		{"principalId well-formed, missing", admin, "projects/addMember", map[string]any{"tenantId": "acme", "projectId": prj, "principalId": "prn_" + strings.Repeat("0", 26)}, nf, ""},
		{"relation not in enum", admin, "projects/addMember", map[string]any{"tenantId": "acme", "projectId": prj, "principalId": acme.Viewer.PrincipalID, "relation": "admin"}, inv, "relation"},
		{"expectedVersion 0", admin, "projects/update", map[string]any{"tenantId": "acme", "projectId": prj, "name": "n", "expectedVersion": 0}, inv, "expectedVersion"},
		{"expectedVersion a string", admin, "projects/update", map[string]any{"tenantId": "acme", "projectId": prj, "name": "n", "expectedVersion": "1"}, inv, "expectedVersion"},
		// role enum
		{"role owner", admin, "tokens/create", map[string]any{"tenantId": "acme", "name": "r", "role": "owner"}, inv, "role"},
		{"role upper case", admin, "tokens/create", map[string]any{"tenantId": "acme", "name": "r", "role": "Admin"}, inv, "role"},
		{"role empty", admin, "tokens/create", map[string]any{"tenantId": "acme", "name": "r", "role": ""}, inv, "role"},
		{"role missing", admin, "tokens/create", map[string]any{"tenantId": "acme", "name": "r"}, inv, "role"},
		{"role a number", admin, "tokens/create", map[string]any{"tenantId": "acme", "name": "r", "role": 1}, inv, "role"},
		{"role on members.grant", admin, "members/grant", map[string]any{"tenantId": "acme", "principalId": acme.Viewer.PrincipalID, "role": "root"}, inv, "role"},
		{"tokenId malformed", admin, "tokens/revoke", map[string]any{"tenantId": "acme", "tokenId": "tok_"}, inv, "tokenId"},
		// the body itself
		{"body not JSON", admin, "projects/list", "tenantId=acme", inv, ""},
		{"body truncated JSON", admin, "projects/list", `{"tenantId": "acme"`, inv, ""},
		{"body an array", admin, "projects/list", `[{"tenantId": "acme"}]`, inv, ""},
		{"body a string", admin, "projects/list", `"acme"`, inv, ""},
		{"body two objects", admin, "projects/list", `{"tenantId": "acme"} {"tenantId": "acme"}`, inv, ""},
		{"body nested too deep", admin, "projects/list", `{"tenantId":"acme","x":` + strings.Repeat("[", 40) + strings.Repeat("]", 40) + `}`, inv, anyPath},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			expect(t, env(t, e).Call(c.caller, c.method, c.body), c.code, c.path)
		})
	}
}

// TestHTTPSurface: size limit, unknown methods, wrong verbs and request ids.
func TestHTTPSurface(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	acme := newTenant(t, e, "acme")
	auth := map[string]string{"Authorization": "Bearer " + acme.Admin.Token}

	// a body of exactly 1 MiB is read; one byte more is PAYLOAD_TOO_LARGE
	pad := func(n int) []byte {
		b := []byte(`{"tenantId": "acme"}`)
		return append(b, bytes.Repeat([]byte(" "), n-len(b))...)
	}
	cases := []struct {
		name, method, path string
		header             map[string]string
		body               []byte
		status             int
		code               string
	}{
		{"body of exactly 1 MiB", http.MethodPost, "/api/compute/projects/list", auth, pad(1 << 20), 200, ""},
		{"body of 1 MiB + 1", http.MethodPost, "/api/compute/projects/list", auth, pad(1<<20 + 1), 413, "PAYLOAD_TOO_LARGE"},
		{"body of 2 MiB on a mutation", http.MethodPost, "/api/compute/projects/create", auth, pad(2 << 20), 413, "PAYLOAD_TOO_LARGE"},
		{"unknown method", http.MethodPost, "/api/compute/projects/explode", auth, []byte(`{}`), 404, "NOT_FOUND"},
		{"unknown group", http.MethodPost, "/api/compute/nothing/list", auth, []byte(`{}`), 404, "NOT_FOUND"},
		{"unknown method without a token", http.MethodPost, "/api/compute/projects/explode", nil, []byte(`{}`), 404, "NOT_FOUND"},
		{"GET on a method path", http.MethodGet, "/api/compute/projects/list", auth, nil, 405, ""},
		{"PUT on a method path", http.MethodPut, "/api/compute/projects/create", auth, []byte(`{}`), 405, ""},
		{"DELETE on a method path", http.MethodDelete, "/api/compute/projects/delete", auth, nil, 405, ""},
		// A verb outside HTTP's standard set is refused as the path refuses
		// any verb it does not take (it was Allow: GET, HEAD everywhere).
		{"PROPFIND on a method path", "PROPFIND", "/api/compute/instances/create", auth, []byte(`{}`), 405, "METHOD_NOT_ALLOWED"},
		{"GET on a method path without a token", http.MethodGet, "/api/compute/tenants/list", nil, nil, 405, ""},
		{"method index", http.MethodGet, "/api/compute", nil, nil, 200, ""},
		// The index answers HEAD too, and its Allow says so (it said GET).
		{"POST on the method index", http.MethodPost, "/api/compute", nil, []byte(`{}`), 405, "METHOD_NOT_ALLOWED"},
		{"healthz", http.MethodGet, "/healthz", nil, nil, 200, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := rawCall(t, e, c.method, c.path, c.header, c.body)
			if r.Status != c.status {
				t.Fatalf("want %d, got %d: %.300s", c.status, r.Status, r.Raw)
			}
			if c.code != "" && r.Code() != c.code {
				t.Fatalf("want %s, got %q: %.300s", c.code, r.Code(), r.Raw)
			}
			allow := http.MethodPost
			if c.path == "/api/compute" {
				allow = "GET, HEAD"
			}
			if c.status == 405 && r.Header.Get("Allow") != allow {
				t.Fatalf("405 without Allow: %s: %v", allow, r.Header)
			}
			if c.status == 200 && strings.HasPrefix(c.path, "/api/compute/") {
				items(t, r)
			}
			if id := r.Header.Get("X-Request-Id"); id == "" {
				t.Fatalf("no X-Request-Id on %s %s (%d)", c.method, c.path, r.Status)
			}
		})
	}

	// request ids are distinct per request, and a well-formed client id is kept
	a := rawCall(t, e, http.MethodPost, "/api/compute/tenants/list", auth, []byte(`{}`))
	b := rawCall(t, e, http.MethodPost, "/api/compute/tenants/list", auth, []byte(`{}`))
	if a.Header.Get("X-Request-Id") == b.Header.Get("X-Request-Id") {
		t.Fatalf("two requests share X-Request-Id %s", a.Header.Get("X-Request-Id"))
	}
	mine := map[string]string{"Authorization": auth["Authorization"], "X-Request-Id": "client-req-0001"}
	if got := rawCall(t, e, http.MethodPost, "/api/compute/tenants/list", mine, []byte(`{}`)).Header.Get("X-Request-Id"); got != "client-req-0001" {
		t.Fatalf("client request id not kept: %q", got)
	}
	bad := map[string]string{"Authorization": auth["Authorization"], "X-Request-Id": "bad id\twith spaces"}
	if got := rawCall(t, e, http.MethodPost, "/api/compute/tenants/list", bad, []byte(`{}`)).Header.Get("X-Request-Id"); got == "" || strings.Contains(got, " ") {
		t.Fatalf("malformed client request id echoed: %q", got)
	}
	// GraphQL responses carry one too, errors included
	if g := e.GraphQL("", `{ viewer { kind } }`, nil); g.Header.Get("X-Request-Id") == "" {
		t.Fatalf("graphql 401 without X-Request-Id")
	}
	if g := e.GraphQL(acme.Admin.Token, `{ viewer { kind } }`, nil); g.Header.Get("X-Request-Id") == "" || g.Status != 200 {
		t.Fatalf("graphql without X-Request-Id: %d", g.Status)
	}
	// error bodies are the contract's JSON
	nfr := rawCall(t, e, http.MethodPost, "/api/compute/projects/explode", auth, []byte(`{}`))
	if ct := nfr.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Fatalf("error Content-Type %q", ct)
	}
}

// TestValidationErrorsAreCapped: a document with hundreds of invalid
// fields gets the first 100 errors and a count, not one error each (2,400
// aliases gave a 469 KB answer; found probing from outside).
func TestValidationErrorsAreCapped(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	acme := newTenant(t, e, "acme")
	var b strings.Builder
	b.WriteString("{ ")
	for i := 0; i < 300; i++ {
		fmt.Fprintf(&b, "a%d: nope ", i)
	}
	b.WriteString("}")
	r := e.GraphQL(acme.Viewer.Token, b.String(), nil)
	var body struct {
		Errors []struct {
			Message    string         `json:"message"`
			Extensions map[string]any `json:"extensions"`
		} `json:"errors"`
	}
	if err := json.Unmarshal(r.Raw, &body); err != nil {
		t.Fatal(err)
	}
	if len(body.Errors) != 101 || !strings.Contains(body.Errors[100].Message, "the first 100 of 300") || body.Errors[100].Extensions["code"] != "INVALID_INPUT" {
		t.Fatalf("%d errors, the last %+v", len(body.Errors), body.Errors[len(body.Errors)-1])
	}
}
