package e2e

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/bettercompute/computed/internal/testkit"
)

func gqlErrorCode(r testkit.Resp) (string, string) {
	errs, _ := r.Body["errors"].([]any)
	if len(errs) == 0 {
		return "", ""
	}
	e := errs[0].(map[string]any)
	ext, _ := e["extensions"].(map[string]any)
	code, _ := ext["code"].(string)
	msg, _ := e["message"].(string)
	return code, msg
}

// Queries that ask for too much are refused before they run.
func TestGraphQLLimits(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	admin, _, _ := e.Tenant("acme")

	deep := `{ tenant(tenantId: "acme") { projects(first: 1) { edges { node { tenant { projects(first: 1) { edges { node { tenant { projects(first: 1) { edges { node { name } } } } } } } } } } } } }`
	r := e.GraphQL(admin, deep, nil)
	if code, msg := gqlErrorCode(r); code != "INVALID_INPUT" || !strings.Contains(msg, "limit of 12") || r.Body["data"] != nil {
		t.Fatalf("deep query: %d %s", r.Status, r.Raw)
	}

	heavy := `{ viewer { tenants(first: 200) { edges { node { projects(first: 200) { edges { node { name } } } } } } } }`
	r = e.GraphQL(admin, heavy, nil)
	if code, msg := gqlErrorCode(r); code != "INVALID_INPUT" || !strings.Contains(msg, "complexity") ||
		!strings.Contains(string(r.Raw), `"reason":"complexity"`) || !strings.Contains(string(r.Raw), `"limit":50000`) {
		t.Fatalf("complex query: %d %s", r.Status, r.Raw)
	}

	ok := `{ viewer { tenants(first: 10) { edges { node { projects(first: 10) { totalCount } } } } } }`
	if r = e.GraphQL(admin, ok, nil); r.Status != 200 || r.Body["errors"] != nil {
		t.Fatalf("modest query refused: %d %s", r.Status, r.Raw)
	}

	big := `{"query":"{ viewer { name } }","variables":{"x":"` + strings.Repeat("a", 1<<20) + `"}}`
	req, _ := http.NewRequest("POST", e.Server.URL+"/graphql", strings.NewReader(big))
	req.Header.Set("Authorization", "Bearer "+admin)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 413 || !strings.Contains(string(b), `"PAYLOAD_TOO_LARGE"`) {
		t.Fatalf("a body over 1 MiB to /graphql: %d %s", res.StatusCode, b)
	}
}

// /metrics exposes per-method and per-operation counts and latency and the
// database pool.
func TestMetrics(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	admin, _, _ := e.Tenant("acme")
	e.Must(e.Call(admin, "projects/create", map[string]any{"tenantId": "acme", "name": "m"}))
	e.Call(admin, "projects/get", map[string]any{"tenantId": "acme", "projectId": "prj_01m8vamkrr6eet1whme2evb1rv"})
	e.GraphQL(admin, `query Fleet { viewer { name } }`, nil)
	res, err := http.Get(e.Server.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	for _, want := range []string{
		`compute_method_calls_total{code="OK",method="projects.create"} 1`,
		`compute_method_calls_total{code="NOT_FOUND",method="projects.get"} 1`,
		`compute_method_duration_seconds_count{method="projects.create"} 1`,
		`compute_graphql_operation_duration_seconds_count{operation="Fleet",type="query"} 1`,
		`go_sql_max_open_connections{db_name="compute"}`,
		`compute_http_requests_total{route="/api/compute/{group}/{method}",status="200"}`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
