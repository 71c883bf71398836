package e2e

import (
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/bettercompute/computed/internal/server"
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

	// Connections are bounded by count too: each alias with its own
	// cursor is a statement of its own (1000 of them were 1000 statements
	// for one request). 100 pass, 101 do not, fragments counted as spread.
	aliases := func(n int, spread bool) string {
		var b strings.Builder
		b.WriteString(`{ tenant(tenantId: "acme") {`)
		for i := 0; i < n; i++ {
			if spread {
				fmt.Fprintf(&b, " a%d: projects(first: 1) { ...P }", i)
			} else {
				fmt.Fprintf(&b, " a%d: projects(first: 1, after: %q) { totalCount }", i, base64.RawURLEncoding.EncodeToString([]byte(fmt.Sprintf(`["project","prj_%026d"]`, i))))
			}
		}
		b.WriteString(" } }")
		if spread {
			b.WriteString(" fragment P on ProjectConnection { totalCount edges { node { tenant { projects(first: 1) { totalCount } } } } }")
		}
		return b.String()
	}
	if r = e.GraphQL(admin, aliases(100, false), nil); r.Status != 200 || r.Body["errors"] != nil {
		t.Fatalf("100 connections: %d %.300s", r.Status, r.Raw)
	}
	for _, q := range []string{aliases(101, false), aliases(51, true)} {
		r = e.GraphQL(admin, q, nil)
		if code, msg := gqlErrorCode(r); code != "INVALID_INPUT" || !strings.Contains(msg, "connections, more than the limit of 100") ||
			!strings.Contains(string(r.Raw), `"reason":"connections"`) || r.Body["data"] != nil {
			t.Fatalf("over 100 connections: %d %.300s", r.Status, r.Raw)
		}
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

// A call that ends at its deadline (here waiting on a row another session
// holds) is answered 503 UNAVAILABLE, and /metrics counts it under that
// code: it was counted INTERNAL (a probe saw timeouts of pools.update,
// tokens.create and projects.create there).
func TestMetricsCountCallsAsAnswered(t *testing.T) {
	t.Parallel()
	e := testkit.StartWith(t, testkit.Options{Config: server.Config{RequestTimeout: time.Second}})
	admin, _, _ := e.Tenant("acme")
	pr := must(t, e.Call(admin, "projects/create", map[string]any{"tenantId": "acme", "name": "m"})).Str("projectId")
	release := holdProject(t, e, pr)
	if r := e.Call(admin, "projects/update", map[string]any{"tenantId": "acme", "projectId": pr, "description": "x"}); r.Status != 503 {
		t.Fatalf("an update past its deadline: %d %s", r.Status, r.Raw)
	}
	release()
	req, _ := http.NewRequest(http.MethodGet, e.Server.URL+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+e.Operator)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if !strings.Contains(string(b), `compute_method_calls_total{code="UNAVAILABLE",method="projects.update"} 1`) ||
		strings.Contains(string(b), `compute_method_calls_total{code="INTERNAL"`) {
		t.Fatalf("/metrics after a call past its deadline:\n%s", grepLines(string(b), "compute_method_calls_total"))
	}
}

// grepLines is the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// /metrics exposes per-method and per-operation counts and latency and the
// database pool. On the public address it is never open: the operator's
// token reads it; no token, an unknown one or a tenant admin's is refused
// (the operator address, COMPUTE_DEBUG_ADDR, serves it without a token:
// TestMetricsOnTheOperatorAddress).
func TestMetrics(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	admin, _, _ := e.Tenant("acme")
	e.Must(e.Call(admin, "projects/create", map[string]any{"tenantId": "acme", "name": "m"}))
	e.Call(admin, "projects/get", map[string]any{"tenantId": "acme", "projectId": "prj_01m8vamkrr6eet1whme2evb1rv"})
	e.GraphQL(admin, `query Fleet { viewer { name } }`, nil)
	get := func(token string) (int, []byte) {
		req, _ := http.NewRequest(http.MethodGet, e.Server.URL+"/metrics", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, b
	}
	for token, want := range map[string]int{"": 401, "bco_not-the-operator": 401, admin: 403} {
		if st, b := get(token); st != want || strings.Contains(string(b), "compute_method_calls_total") {
			t.Fatalf("/metrics with token %.8q: %d %.200s, want %d", token, st, b, want)
		}
	}
	st, b := get(e.Operator)
	if st != 200 {
		t.Fatalf("/metrics with the operator token: %d %.200s", st, b)
	}
	for _, want := range []string{
		`compute_method_calls_total{code="OK",method="projects.create"} 1`,
		`compute_method_calls_total{code="NOT_FOUND",method="projects.get"} 1`,
		`compute_method_duration_seconds_count{method="projects.create"} 1`,
		`compute_graphql_operation_duration_seconds_count{operation="Fleet",type="query"} 1`,
		`go_sql_max_open_connections{db_name="compute"}`,
		`compute_http_requests_total{route="/api/compute/{group}/{method}",status="200"}`,
		"compute_event_sequencer_forwards_total 0", // one replica: it numbers its own
		"compute_event_sequencer_forwards_unanswered_total 0",
		"compute_event_sequencer_leading ",
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// The operator address (COMPUTE_DEBUG_ADDR) serves /metrics and pprof
// without a token; the public address of the same process does not.
func TestMetricsOnTheOperatorAddress(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the server binary")
	}
	t.Parallel()
	e := testkit.StartDB(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	op := l.Addr().String()
	l.Close()
	r := startReplica(t, e.DB.URL, e.Operator, "COMPUTE_DEBUG_ADDR="+op)
	for _, c := range []struct {
		url  string
		want int
	}{{"http://" + op + "/metrics", 200}, {"http://" + op + "/debug/pprof/cmdline", 200}, {"http://" + r.addr + "/metrics", 401}, {"http://" + r.addr + "/debug/pprof/cmdline", 404}} {
		res, err := http.Get(c.url)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != c.want {
			t.Fatalf("GET %s: %d %.200s, want %d", c.url, res.StatusCode, b, c.want)
		}
		if c.want == 200 && strings.HasSuffix(c.url, "/metrics") && !strings.Contains(string(b), "go_sql_max_open_connections") {
			t.Fatalf("GET %s: %.300s", c.url, b)
		}
	}
}
