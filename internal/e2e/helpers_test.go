package e2e

import (
	"bytes"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/bettercompute/computed/internal/testkit"
)

// statusOf is the contract's code -> HTTP status table ("" is success).
var statusOf = map[string]int{
	"":                  http.StatusOK,
	"INVALID_INPUT":     http.StatusBadRequest,
	"UNAUTHENTICATED":   http.StatusUnauthorized,
	"PERMISSION_DENIED": http.StatusForbidden,
	"NOT_FOUND":         http.StatusNotFound,
	"CONFLICT":          http.StatusConflict,
	"PAYLOAD_TOO_LARGE": http.StatusRequestEntityTooLarge,
}

var projectIDRe = regexp.MustCompile(`^prj_[0-9a-hjkmnp-tv-z]{26,52}$`)

// anyPath means "do not check details.path".
const anyPath = "\x00any"

// env returns a copy of e whose failures are reported on t (so subtests
// never fail their parent from another goroutine).
func env(t testing.TB, e *testkit.Env) *testkit.Env {
	c := *e
	c.T = t
	return &c
}

// expect asserts status, error code and (unless anyPath) details.path, and
// that the response carries X-Request-Id.
func expect(t testing.TB, r testkit.Resp, code, path string) {
	t.Helper()
	want, ok := statusOf[code]
	if !ok {
		t.Fatalf("test bug: no status for code %q", code)
	}
	if r.Status != want || r.Code() != code {
		t.Fatalf("want %d %q, got %d %q: %s", want, code, r.Status, r.Code(), r.Raw)
	}
	if code != "" {
		e, _ := r.Body["error"].(map[string]any)
		if msg, _ := e["message"].(string); msg == "" {
			t.Fatalf("error without a message: %s", r.Raw)
		}
		if _, ok := e["details"].(map[string]any); !ok {
			t.Fatalf("error without details object: %s", r.Raw)
		}
		if path != anyPath && r.Path() != path {
			t.Fatalf("want details.path %q, got %q: %s", path, r.Path(), r.Raw)
		}
	}
	if r.Header.Get("X-Request-Id") == "" {
		t.Fatalf("response without X-Request-Id: %d %s", r.Status, r.Raw)
	}
}

func must(t testing.TB, r testkit.Resp) testkit.Resp {
	t.Helper()
	expect(t, r, "", "")
	return r
}

// obj reads a nested object of a decoded body by keys.
func obj(t testing.TB, v any, keys ...string) map[string]any {
	t.Helper()
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			t.Fatalf("no object at %q in %v", k, v)
		}
		v = m[k]
	}
	m, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("not an object at %v: %v", keys, v)
	}
	return m
}

func str(v any) string { s, _ := v.(string); return s }

// items returns a page's items, failing unless the body is a page.
func items(t testing.TB, r testkit.Resp) []map[string]any {
	t.Helper()
	raw, ok := r.Body["items"].([]any)
	if !ok {
		t.Fatalf("not a page (no items array): %s", r.Raw)
	}
	if _, ok := r.Body["cursor"]; !ok {
		t.Fatalf("page without a cursor key: %s", r.Raw)
	}
	out := make([]map[string]any, len(raw))
	for i, x := range raw {
		out[i] = x.(map[string]any)
	}
	return out
}

// rawCall sends an arbitrary request and decodes the response.
func rawCall(t testing.TB, e *testkit.Env, method, path string, header map[string]string, body []byte) testkit.Resp {
	t.Helper()
	req, err := http.NewRequest(method, e.Server.URL+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	return env(t, e).Do(req)
}

// gqlErr returns errors[0].extensions.code and .details.path of a GraphQL
// response ("" when absent).
func gqlErr(r testkit.Resp) (code, path string) {
	errsList, _ := r.Body["errors"].([]any)
	if len(errsList) == 0 {
		return "", ""
	}
	e, _ := errsList[0].(map[string]any)
	ext, _ := e["extensions"].(map[string]any)
	code, _ = ext["code"].(string)
	if d, ok := ext["details"].(map[string]any); ok {
		path, _ = d["path"].(string)
	}
	return code, path
}

// gqlOK fails unless the GraphQL response is a 200 without errors and
// returns data.
func gqlOK(t testing.TB, r testkit.Resp) map[string]any {
	t.Helper()
	if r.Status != http.StatusOK {
		t.Fatalf("graphql: status %d: %s", r.Status, r.Raw)
	}
	if errsList, ok := r.Body["errors"]; ok {
		t.Fatalf("graphql errors: %v (%s)", errsList, r.Raw)
	}
	d, ok := r.Body["data"].(map[string]any)
	if !ok {
		t.Fatalf("graphql: no data: %s", r.Raw)
	}
	return d
}

// gqlExpect asserts a GraphQL error's extensions.code and details.path.
func gqlExpect(t testing.TB, r testkit.Resp, code, path string) {
	t.Helper()
	c, p := gqlErr(r)
	if c != code {
		t.Fatalf("want extensions.code %q, got %q: %d %s", code, c, r.Status, r.Raw)
	}
	if path != anyPath && p != path {
		t.Fatalf("want extensions.details.path %q, got %q: %s", path, p, r.Raw)
	}
	if r.Header.Get("X-Request-Id") == "" {
		t.Fatalf("graphql response without X-Request-Id")
	}
}

// actor is a bearer token and the principal behind it.
type actor struct {
	Token, PrincipalID, TokenID string
}

// tenant is a tenant with one token per role.
type tenant struct {
	ID                    string
	Admin, Member, Viewer actor
}

// newToken creates a service token through the method surface as caller.
func newToken(t testing.TB, e *testkit.Env, caller, tenantID, name, role string) actor {
	t.Helper()
	r := must(t, env(t, e).Call(caller, "tokens/create", map[string]any{"tenantId": tenantID, "name": name, "role": role}))
	tok := obj(t, r.Body, "token")
	if tok["tenantId"] != tenantID || tok["role"] != role || tok["name"] != name || str(tok["createdAt"]) == "" {
		t.Fatalf("tokens.create output: %s", r.Raw)
	}
	a := actor{Token: r.Str("secret"), PrincipalID: str(tok["principalId"]), TokenID: str(tok["tokenId"])}
	if a.Token == "" || !strings.HasPrefix(a.PrincipalID, "prn_") || !strings.HasPrefix(a.TokenID, "tok_") {
		t.Fatalf("tokens.create output: %s", r.Raw)
	}
	return a
}

// newTenant creates a tenant as the operator and an admin, member and viewer token.
func newTenant(t testing.TB, e *testkit.Env, id string) tenant {
	t.Helper()
	r := must(t, env(t, e).Call(e.Operator, "tenants/create", map[string]any{"tenantId": id, "name": "Tenant " + id}))
	if r.Str("tenantId") != id || r.Str("name") != "Tenant "+id || r.Str("createdAt") == "" {
		t.Fatalf("tenants.create output: %s", r.Raw)
	}
	return tenant{ID: id,
		Admin:  newToken(t, e, e.Operator, id, "admin", "admin"),
		Member: newToken(t, e, e.Operator, id, "member", "member"),
		Viewer: newToken(t, e, e.Operator, id, "viewer", "viewer"),
	}
}

var seq atomic.Int64

// uniq returns a fresh name with a prefix.
func uniq(prefix string) string { return fmt.Sprintf("%s-%d", prefix, seq.Add(1)) }

// newProject creates a project as caller and returns its id.
func newProject(t testing.TB, e *testkit.Env, caller, tenantID, name string) string {
	t.Helper()
	r := must(t, env(t, e).Call(caller, "projects/create", map[string]any{"tenantId": tenantID, "name": name}))
	id := r.Str("projectId")
	if !projectIDRe.MatchString(id) || r.Str("tenantId") != tenantID || r.Str("name") != name {
		t.Fatalf("projects.create output: %s", r.Raw)
	}
	return id
}

// gqlEnum is the graph's spelling of a method surface value of a closed set
// (time-sliced: TIME_SLICED, gpu.missing: GPU_MISSING).
func gqlEnum(s string) string {
	return strings.NewReplacer("-", "_", ".", "_").Replace(strings.ToUpper(s))
}

// holdProject locks a project's row FOR UPDATE in a transaction of its own,
// so that calls on the project wait, until release (or the test's end).
func holdProject(t testing.TB, e *testkit.Env, projectID string) (release func()) {
	t.Helper()
	tx, err := e.DB.Beginx()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback() })
	if _, err := tx.Exec(`SELECT 1 FROM projects WHERE project_id = $1 FOR UPDATE`, projectID); err != nil {
		t.Fatal(err)
	}
	return func() {
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
	}
}
