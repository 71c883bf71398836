package e2e

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"database/sql"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/jackc/pgx/v5"

	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/server"
	"github.com/bettercompute/computed/internal/testkit"
	"github.com/bettercompute/computed/internal/testkit/logbuf"
	"github.com/bettercompute/computed/internal/testkit/wait"
)

// graphql-js's getIntrospectionQuery (16.11, every option on): what
// GraphiQL, Apollo, urql and codegen tools send.
//
//go:embed testdata/introspection.graphql
var introspectionQuery string

// The standard introspection query nests type references about 15 levels
// deep; it is bounded by its own rule, not the data depth limit.
func TestStandardIntrospectionQuery(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	admin, _, _ := e.Tenant("acme")
	r := e.GraphQL(admin, introspectionQuery, nil)
	if r.Status != 200 || r.Body["errors"] != nil {
		t.Fatalf("introspection refused: %d %.300s", r.Status, r.Raw)
	}
	t.Logf("the standard introspection query's answer: %d bytes", len(r.Raw))
	types := obj(t, r.Body, "data", "__schema")["types"].([]any)
	found := false
	for _, ty := range types {
		if ty.(map[string]any)["name"] == "ComputeNode" {
			found = true
		}
	}
	if !found {
		t.Fatalf("ComputeNode is not in the schema's types")
	}
	// Without a token there is no schema either.
	if r := e.GraphQL("", introspectionQuery, nil); r.Status != 401 {
		t.Fatalf("introspection without a token: %d", r.Status)
	}
	// Apollo Kotlin's first introspection query (its feature detection):
	// five __type fields, refused while the bound was 4.
	pre := `{ schema: __type(name: "__Schema") { ...T } type: __type(name: "__Type") { ...T } directive: __type(name: "__Directive") { ...T }
		field: __type(name: "__Field") { ...T } inputValue: __type(name: "__InputValue") { ...T } } fragment T on __Type { fields { name args { name } } }`
	if r := e.GraphQL(admin, pre, nil); r.Status != 200 || r.Body["errors"] != nil {
		t.Fatalf("Apollo Kotlin's pre-introspection query: %d %.300s", r.Status, r.Raw)
	}
	// Introspection still has bounds: many copies of __schema are refused.
	many := "{"
	for i := 0; i < 9; i++ {
		many += fmt.Sprintf(" s%d: __schema { types { name } }", i)
	}
	many += " }"
	if r := e.GraphQL(admin, many, nil); !strings.Contains(string(r.Raw), `"reason":"introspection"`) {
		t.Fatalf("nine __schema fields: %d %s", r.Status, r.Raw)
	}
}

// Errors never name Go types or echo what the client sent.
func assertNoInternals(t *testing.T, what string, body []byte, echoes ...string) {
	t.Helper()
	for _, leak := range []string{"json.Number", "float64", "map[string]", "[]interface", "*errs.", "gqlerror", "struct {", "%!", ".go:"} {
		if bytes.Contains(body, []byte(leak)) {
			t.Fatalf("%s: the answer names Go internals (%q): %s", what, leak, body)
		}
	}
	for _, echo := range echoes {
		if bytes.Contains(body, []byte(echo)) {
			t.Fatalf("%s: the answer echoes the request (%q): %s", what, echo, body)
		}
	}
}

// GraphQL over HTTP: verbs, media types and bodies, as the spec says, in
// the GraphQL error shape and without internals.
func TestGraphQLOverHTTPRequests(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	acme := newTenant(t, e, "acme")
	auth := map[string]string{"Authorization": "Bearer " + acme.Admin.Token}
	send := func(method, path, ct string, body string) testkit.Resp {
		req, _ := http.NewRequest(method, e.Server.URL+path, strings.NewReader(body))
		for k, v := range auth {
			req.Header.Set(k, v)
		}
		if ct != "" {
			req.Header.Set("Content-Type", ct)
		}
		return env(t, e).Do(req)
	}
	// GET's variables are a JSON object too: a key twice is refused.
	r0 := send("GET", "/graphql?query="+url.QueryEscape(`query($t: String!) { tenant(tenantId: $t) { tenantId } }`)+
		"&variables="+url.QueryEscape(`{"t":"acme","t":"beta"}`), "", "")
	if r0.Status != 400 {
		t.Fatalf("GET with a variable twice: %d %s", r0.Status, r0.Raw)
	}
	gqlExpect(t, r0, "INVALID_INPUT", "variables.t")
	// A parameter twice: url.Values kept the first.
	r1 := send("GET", "/graphql?query="+url.QueryEscape(`{ viewer { kind } }`)+"&query="+url.QueryEscape(`{ viewer { name } }`), "", "")
	if r1.Status != 400 {
		t.Fatalf("GET with query twice: %d %s", r1.Status, r1.Raw)
	}
	gqlExpect(t, r1, "INVALID_INPUT", "query")
	// GET is for queries: a mutation is 405 with Allow: POST, at the event
	// stream's path too (it ran there, a helper's probe), and nothing is
	// created.
	var r testkit.Resp
	for _, path := range []string{"/graphql", "/graphql/stream"} {
		r = send("GET", path+"?query="+strings.ReplaceAll(`mutation { createProject(input: {tenantId: "acme", name: "x"}) { project { id } } }`, " ", "%20"), "", "")
		if r.Status != 405 || r.Header.Get("Allow") != "POST" {
			t.Fatalf("GET %s with a mutation: %d %q %s", path, r.Status, r.Header.Get("Allow"), r.Raw)
		}
		gqlExpect(t, r, "METHOD_NOT_ALLOWED", anyPath)
	}
	if n := items(t, e.Call(e.Operator, "projects/list", map[string]any{"tenantId": "acme"})); len(n) != 0 {
		t.Fatalf("a mutation sent with GET created %d projects", len(n))
	}
	if r := send("GET", "/graphql?query=%7Bviewer%7Bkind%7D%7D", "", ""); r.Status != 200 {
		t.Fatalf("GET with a query: %d %s", r.Status, r.Raw)
	}
	for _, m := range []string{"PUT", "DELETE", "PATCH"} {
		r := send(m, "/graphql", "application/json", `{"query":"{ viewer { kind } }"}`)
		if r.Status != 405 || !strings.Contains(r.Header.Get("Allow"), "POST") {
			t.Fatalf("%s: %d %s", m, r.Status, r.Raw)
		}
		gqlExpect(t, r, "METHOD_NOT_ALLOWED", anyPath)
	}
	for _, ct := range []string{"text/plain", "application/x-www-form-urlencoded", "application/xml", ""} {
		r := send("POST", "/graphql", ct, `{"query":"{ viewer { kind } }"}`)
		if r.Status != 415 || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/") {
			t.Fatalf("Content-Type %q: %d %s", ct, r.Status, r.Raw)
		}
		gqlExpect(t, r, "UNSUPPORTED_MEDIA_TYPE", anyPath)
	}
	// Bodies that are not one GraphQL request object.
	for body, path := range map[string]string{
		`{"query": 5, "marker": "ECHO-MARKER-1"}`:            "query",
		`{"query":"{ viewer { kind } }"}}`:                   "",
		`{"query":"{ viewer { kind } }"}]`:                   "",
		`{"query":"{ viewer { kind } }","variables":[1]}`:    "variables",
		`{"query":"{ viewer { kind } }","operationName":{}}`: "operationName",
		`[{"query":"{ viewer { kind } }"}]`:                  "",
		`{"quer": "ECHO-MARKER-2"}`:                          "query",
		"{\"query\":\"\xff\"}":                               "",
		// A key twice: encoding/json kept the last, a proxy may read the first.
		`{"query":"{ viewer { kind } }","query":"mutation { x }"}`:                                                 "query",
		`{"query":"query($t: String!) { tenant(tenantId: $t) { tenantId } }","variables":{"t":"acme","t":"beta"}}`: "variables.t",
		`{"query":"{ viewer { kind } }","extensions":{"a":{"b":1,"b":2}}}`:                                         "extensions.a.b",
	} {
		r := send("POST", "/graphql", "application/json", body)
		if r.Status != 400 {
			t.Fatalf("%s: %d %s", body, r.Status, r.Raw)
		}
		gqlExpect(t, r, "INVALID_INPUT", path)
		assertNoInternals(t, body, r.Raw, "ECHO-MARKER")
	}
}

// Scalars refuse bad values with INVALID_INPUT naming the field, in words a
// client understands: no Go types, no INTERNAL.
func TestGraphQLScalarRefusals(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	acme := newTenant(t, e, "acme")
	q := `query($t: String!) { tenant(tenantId: $t) { tenantId } }`
	for name, vars := range map[string]map[string]any{
		"a number":  {"t": 5},
		"a float":   {"t": 1.5},
		"an object": {"t": map[string]any{"a": 1}},
		"an array":  {"t": []any{"a"}},
		"a boolean": {"t": true},
		"NUL":       {"t": "ac\x00me"},
	} {
		r := e.GraphQL(acme.Admin.Token, q, vars)
		gqlExpect(t, r, "INVALID_INPUT", anyPath)
		assertNoInternals(t, name, r.Raw)
	}
	// A Time literal that is no string is refused in validation (400, the
	// argument named), as a String's or an Int's is: it was the scalar's
	// refusal in execution, 200 with data null.
	for _, lit := range []string{"5", "1.5", "9223372036854775807", "true", "[\"2026-01-01T00:00:00Z\"]", "{a: 1}", "RUNNING"} {
		r := e.GraphQL(acme.Admin.Token, `{ tenant(tenantId: "acme") { auditLog(first: 1, since: `+lit+`) { totalCount } } }`, nil)
		if c, p := gqlErr(r); c != "INVALID_INPUT" || p != "since" || r.Status != http.StatusBadRequest {
			t.Fatalf("since: %s: %d %s", lit, r.Status, r.Raw)
		}
	}
	// in a list where a list goes, one error for the item, not one a level
	for _, q := range []string{
		`query($x: [[Time]] = [[5]]) { tenant(tenantId: "acme") { tenantId } }`,
		`query($x: [Long] = ["a"]) { tenant(tenantId: "acme") { tenantId } }`,
	} {
		r := e.GraphQL(acme.Admin.Token, q, nil) // (and "$x is never used")
		if n := strings.Count(string(r.Raw), "cannot represent"); r.Status != http.StatusBadRequest || n != 1 {
			t.Fatalf("%s: %d %s", q, r.Status, r.Raw)
		}
	}
	// A NUL in a literal, in an input object.
	r := e.GraphQL(acme.Member.Token, `mutation { createProject(input: {tenantId: "acme", name: "a\u0000b"}) { project { id } } }`, nil)
	gqlExpect(t, r, "INVALID_INPUT", anyPath)
	if c, p := gqlErr(r); c != "INVALID_INPUT" || !strings.HasSuffix(p, "name") {
		t.Fatalf("NUL in an input field: path %q: %s", p, r.Raw)
	}
	assertNoInternals(t, "NUL literal", r.Raw)
	// A single value for a list variable is a list of one (the spec's input
	// coercion), as the same literal is: it was "must be a string".
	sub := `subscription($ty: [String!]) { tenantEvents(tenantId: "acme", types: $ty) { eventId } }`
	for _, ty := range []any{"instance.", []any{"instance."}} {
		body, _ := json.Marshal(map[string]any{"query": sub, "variables": map[string]any{"ty": ty}})
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		req, _ := http.NewRequestWithContext(ctx, "POST", e.Server.URL+"/graphql/stream", strings.NewReader(string(body)))
		req.Header.Set("Authorization", "Bearer "+acme.Admin.Token)
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(res.Body) // a refusal comes at once; a live stream until the timeout
		res.Body.Close()
		cancel()
		if res.StatusCode != 200 || strings.Contains(string(raw), "errors") {
			t.Fatalf("types %v: %d %s", ty, res.StatusCode, raw)
		}
	}
	// A null for a defaulted Boolean in @skip or @include (which take
	// Boolean!): gqlgen panicked on it, an INTERNAL error (a helper's probe).
	for _, q := range []string{
		`query($v: Boolean = true) { tenant(tenantId: "acme") { tenantId @skip(if: $v) } }`,
		`query($v: Boolean = true) { tenant(tenantId: "acme") { ... @include(if: $v) { tenantId } } }`,
		`query($v: Boolean = true) { tenant(tenantId: "acme") { ...F } } fragment F on Tenant { tenantId @include(if: $v) }`,
	} {
		r := e.GraphQL(acme.Admin.Token, q, map[string]any{"v": nil})
		gqlExpect(t, r, "INVALID_INPUT", "variable.v")
	}
}

// Documents that cost seconds to validate are refused before validation.
func TestExpensiveDocumentsAreRefused(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	acme := newTenant(t, e, "acme")
	repeated := func(n int) string { return "{" + strings.Repeat(" __typename", n) + " }" }
	doubling := func(levels int) string {
		var b strings.Builder
		b.WriteString("query { ...F0 }\n")
		for i := 0; i < levels; i++ {
			fmt.Fprintf(&b, "fragment F%d on Query { ...F%d ...F%d }\n", i, i+1, i+1)
		}
		fmt.Fprintf(&b, "fragment F%d on Query { viewer { kind } }\n", levels)
		return b.String()
	}
	aliases := func(n int) string {
		var b strings.Builder
		b.WriteString("{")
		for i := 0; i < n; i++ {
			fmt.Fprintf(&b, " a%d: viewer { kind }", i)
		}
		b.WriteString(" }")
		return b.String()
	}
	for name, c := range map[string]struct{ doc, reason string }{
		"4000 repeated fields":               {repeated(4000), "fields"},
		"3000 repeated subselections":        {"{" + strings.Repeat(" viewer { kind }", 3000) + " }", "fields"},
		"20000 repeated fields":              {repeated(20000), "tokens"},
		"22 levels of doubling frags":        {doubling(22), "fields"},
		"60 levels of doubling frags":        {doubling(60), "fields"},
		"2400 aliases":                       {aliases(2400), "fields"},
		"60000 tokens":                       {"{" + strings.Repeat(" __typename", 60000) + " }", "tokens"},
		"complexity over the limit":          {`{ viewer { tenants(first: 200) { edges { node { pools(first: 200) { edges { node { name } } } } } } } }`, "complexity"},
		"deep":                               {"{ viewer {" + strings.Repeat(" tenants { edges { node {", 5) + " tenantId" + strings.Repeat(" } } }", 5) + " } }", "depth"},
		"recursive fragment":                 {"query { ...A } fragment A on Query { ...A }", ""},
		"introspection aliased":              {"{ __schema { a: types { name } b: types { name } } }", "introspection"},
		"introspection aliased in fragments": {"{ __schema { types { ...A ...B } } } fragment A on __Type { a: fields { name } } fragment B on __Type { b: fields { name } }", "introspection"},
		"introspection nested too far":       {"{ __schema { types { fields { type {" + strings.Repeat(" ofType {", 30) + " name" + strings.Repeat(" }", 30) + " } } } } }", "depth"},
	} {
		r := e.GraphQL(acme.Admin.Token, c.doc, nil)
		if r.Status != 400 || r.Body["data"] != nil {
			t.Fatalf("%s: %d %.300s", name, r.Status, r.Raw)
		}
		gqlExpect(t, r, "INVALID_INPUT", anyPath)
		if c.reason != "" && !strings.Contains(string(r.Raw), `"reason":"`+c.reason+`"`) {
			t.Fatalf("%s: want reason %s: %.300s", name, c.reason, r.Raw)
		}
	}
	// A subscription's selection runs for every event: its bound is
	// lower (the same document as a query passes).
	var heavy strings.Builder
	for _, a := range []string{"a", "b", "c", "d"} {
		fmt.Fprintf(&heavy, " %s: nodes(first: 200) { edges { node { id } } }", a)
	}
	sub := `subscription { tenantEvents(tenantId: "acme") { node { pool {` + heavy.String() + ` } } } }`
	if _, raw := postStream(t, e, acme.Admin.Token, sub); !strings.Contains(string(raw), `"reason":"complexity"`) ||
		!strings.Contains(string(raw), "for subscriptions") {
		t.Fatalf("a costly subscription: %.300s", raw)
	}
	// The bounds leave ordinary documents alone: 60 distinct aliases pass.
	gqlOK(t, e.GraphQL(acme.Admin.Token, aliases(60), nil))
}

// A client that waits the Retry-After of a refused operation is then
// served: the wait covers the operation's whole charge, the unit its retry
// pays before its document is read included (it was one unit short, and a
// query charged 10 at 5 a second was refused twice; a helper's probe).
func TestWaitingRetryAfterIsEnough(t *testing.T) {
	t.Parallel()
	e := testkit.StartWith(t, testkit.Options{Config: server.Config{RatePerSecond: 5, RateBurst: 10}})
	acme := newTenant(t, e, "acme")
	heavy := `{ tenant(tenantId: "acme") { pools(first: 100) { edges { node { nodes(first: 50) { edges { node { id } } } } } } } }`
	for i := 0; e.GraphQL(acme.Viewer.Token, `{ viewer { kind } }`, nil).Status != 429; i++ {
		if i > 100 {
			t.Fatal("the budget never ran out")
		}
	}
	time.Sleep(time.Second) // 5 units back: enough to read the document, not to run it
	r := e.GraphQL(acme.Viewer.Token, heavy, nil)
	gqlExpect(t, r, "RATE_LIMITED", anyPath)
	if !strings.Contains(string(r.Raw), `"charge":10`) {
		t.Fatalf("the heavy query's refusal: %s", r.Raw)
	}
	secs, err := strconv.Atoi(r.Header.Get("Retry-After"))
	if err != nil {
		t.Fatalf("Retry-After %q", r.Header.Get("Retry-After"))
	}
	time.Sleep(time.Duration(secs) * time.Second)
	gqlOK(t, e.GraphQL(acme.Viewer.Token, heavy, nil))
	// Over the budget, a body is refused before it is read, however it
	// would have been refused after (it was decoded first, for free).
	for _, body := range []string{`{"query": "{ viewer { kind } }", "query": "{ viewer { kind } }"}`, `not json`, `{}`} {
		// Spent again before each body: the budget gains a unit every
		// 200 ms, which a loaded machine took between two bodies.
		for e.GraphQL(acme.Viewer.Token, `{ viewer { kind } }`, nil).Status != 429 {
		}
		req, _ := http.NewRequest("POST", e.Server.URL+"/graphql", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+acme.Viewer.Token)
		req.Header.Set("Content-Type", "application/json")
		if r := env(t, e).Do(req); r.Status != 429 || r.Header.Get("Retry-After") == "" {
			t.Fatalf("%q over the budget: %d %s", body, r.Status, r.Raw)
		}
	}
}

// Budgets: failed authentications per address, operations on a socket,
// and every mutation of a batch count.
func TestRateLimitsCountEverything(t *testing.T) {
	t.Parallel()
	e := testkit.StartWith(t, testkit.Options{Config: server.Config{RatePerSecond: 1, RateBurst: 20, AuthFailures: 0.5}})
	acme := newTenant(t, e, "acme")
	ops := newToken(t, e, acme.Admin.Token, "acme", "ops", "admin")

	// 300 aliased mutations are 300 calls: over the burst, refused whole.
	var b strings.Builder
	b.WriteString("mutation {")
	for i := 0; i < 300; i++ {
		fmt.Fprintf(&b, ` m%d: createProject(input: {tenantId: "acme", name: "p%d"}) { project { id } }`, i, i)
	}
	b.WriteString(" }")
	r := e.GraphQL(ops.Token, b.String(), nil)
	if !strings.Contains(string(r.Raw), `"reason":"batch"`) {
		t.Fatalf("300 aliased mutations: %d %.300s", r.Status, r.Raw)
	}
	gqlExpect(t, r, "INVALID_INPUT", anyPath)
	if n := items(t, e.Call(acme.Admin.Token, "projects/list", map[string]any{"tenantId": "acme"})); len(n) != 0 {
		t.Fatalf("a refused batch created %d projects", len(n))
	}
	// 15 aliased mutations spend 15 of the 20: the next 6 operations cannot
	// all pass.
	b.Reset()
	b.WriteString("mutation {")
	for i := 0; i < 15; i++ {
		fmt.Fprintf(&b, ` m%d: createProject(input: {tenantId: "acme", name: "q%d"}) { project { id } }`, i, i)
	}
	b.WriteString(" }")
	gqlOK(t, e.GraphQL(ops.Token, b.String(), nil))
	limited := 0
	for i := 0; i < 6; i++ {
		r := e.GraphQL(ops.Token, `{ viewer { kind } }`, nil)
		if r.Status == 429 {
			limited++
			gqlExpect(t, r, "RATE_LIMITED", anyPath)
			if r.Header.Get("Retry-After") == "" {
				t.Fatalf("429 without Retry-After: %s", r.Raw)
			}
		}
	}
	if limited == 0 {
		t.Fatal("a batch of 15 mutations was charged as one")
	}
	// Over the budget, a document that would be refused (unparsable,
	// invalid, too costly) is refused for the budget before it is read: such
	// documents were free, and a credential over its budget had the server
	// parse and validate 700 of them a second.
	for _, doc := range []string{`{ viewer { `, `{ nope }`, `{ tenant(tenantId: "acme") { pools(first: 200) { edges { node { nodes(first: 200) { edges { node { id } } } } } } } }`} {
		if r := e.GraphQL(ops.Token, doc, nil); r.Status != 429 {
			t.Fatalf("%q over the budget: %d %s", doc, r.Status, r.Raw)
		}
	}
	// A query spends one unit per server.CostPerRequest of its cost: with
	// the 20 units of a fresh budget, a query of about 15,300 passes (16),
	// the same query again cannot (4 are left), a cheap one still can. Each
	// was one unit, so a credential could run 20 of the heaviest queries
	// at once within its budget.
	heavy := `{ tenant(tenantId: "acme") { pools(first: 100) { edges { node { nodes(first: 50) { edges { node { id } } } } } } } }`
	reader := newToken(t, e, acme.Admin.Token, "acme", "reader", "viewer")
	gqlOK(t, e.GraphQL(reader.Token, heavy, nil))
	r = e.GraphQL(reader.Token, heavy, nil)
	gqlExpect(t, r, "RATE_LIMITED", anyPath)
	if !strings.Contains(string(r.Raw), `"charge":16`) {
		t.Fatalf("a heavy query over the budget: %s", r.Raw)
	}
	gqlOK(t, e.GraphQL(reader.Token, `{ viewer { kind } }`, nil))

	// The method surface's 429 says how long to wait in its body too, as
	// the graph's does: details.retryAfterSeconds, the header's figure.
	if r := e.Call(ops.Token, "tenants/get", map[string]any{"tenantId": "acme"}); r.Status != 429 ||
		r.Header.Get("Retry-After") == "" || fmt.Sprint(r.Details()["retryAfterSeconds"]) != r.Header.Get("Retry-After") {
		t.Fatalf("the method surface over the budget: %d (Retry-After %q) %s", r.Status, r.Header.Get("Retry-After"), r.Raw)
	}

	// Operations on a socket are charged too.
	w := dialWS(t, e)
	w.init(acme.Viewer.Token)
	refused := 0
	for i := 0; i < 40; i++ {
		if opError(w.op(fmt.Sprint(i), `{ viewer { kind } }`, nil)) == "RATE_LIMITED" {
			refused++
		}
	}
	if refused == 0 {
		t.Fatal("40 operations on one socket were never limited")
	}

	// And on the event stream: over the budget is a 429 with Retry-After
	// before any stream opens, as POST /graphql answers (it was a 200
	// stream of one RATE_LIMITED result).
	streamed := 0
	for i := 0; i < 40 && streamed == 0; i++ {
		res, raw := postStream(t, e, acme.Member.Token, `{ viewer { kind } }`)
		if strings.Contains(string(raw), "RATE_LIMITED") {
			streamed++
			if res.StatusCode != 429 || res.Header.Get("Retry-After") == "" {
				t.Fatalf("the stream over the budget: %d (Retry-After %q) %s", res.StatusCode, res.Header.Get("Retry-After"), raw)
			}
		}
	}
	if streamed == 0 {
		t.Fatal("40 stream requests were never limited")
	}

	// Guessing tokens: failed authentications are counted per address, and
	// refused before the database is asked once the budget is spent.
	codes := map[int]int{}
	for i := 0; i < 40; i++ {
		r := e.Call(fmt.Sprintf("bct_guess-%d", i), "tenants/get", map[string]any{"tenantId": "acme"})
		codes[r.Status]++
	}
	if codes[429] == 0 || codes[401] == 0 {
		t.Fatalf("40 unknown tokens: %v", codes)
	}
	if r := e.GraphQL("bct_guess-x", `{ viewer { kind } }`, nil); r.Status != 429 {
		t.Fatalf("GraphQL with an unknown token past the budget: %d %s", r.Status, r.Raw)
	}
	// Opening a socket is charged to the client's address, as a call
	// without a token is: past the budget the upgrade is a 429.
	upgrades, refusedUpgrades := 0, 0
	for i := 0; i < 30 && refusedUpgrades == 0; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		c, res, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(e.Server.URL, "http")+"/graphql",
			&websocket.DialOptions{Subprotocols: []string{"graphql-transport-ws"}})
		cancel()
		switch {
		case err == nil:
			upgrades++
			defer c.CloseNow()
		case res != nil && res.StatusCode == http.StatusTooManyRequests && res.Header.Get("Retry-After") != "":
			refusedUpgrades++
			// in the graph's error shape, as every other answer at /graphql
			raw, _ := io.ReadAll(res.Body)
			var body struct {
				Errors []struct {
					Extensions struct {
						Code    string         `json:"code"`
						Details map[string]any `json:"details"`
					} `json:"extensions"`
				} `json:"errors"`
			}
			if json.Unmarshal(raw, &body) != nil || len(body.Errors) != 1 || body.Errors[0].Extensions.Code != "RATE_LIMITED" ||
				fmt.Sprint(body.Errors[0].Extensions.Details["retryAfterSeconds"]) != res.Header.Get("Retry-After") {
				t.Fatalf("a refused upgrade's answer: %s", raw)
			}
		default:
			t.Fatalf("upgrade %d: %v", i, err)
		}
	}
	if refusedUpgrades == 0 || upgrades == 0 {
		t.Fatalf("30 upgrades from one address in a moment: %d accepted, %d refused", upgrades, refusedUpgrades)
	}
}

// A frozen database: requests end at their deadline with UNAVAILABLE, a
// client that leaves is not an internal error, and the server recovers.
func TestFrozenDatabase(t *testing.T) {
	t.Parallel()
	var logs logbuf.Buffer
	e := testkit.StartWith(t, testkit.Options{Proxy: true, Logs: &logs, Config: server.Config{RequestTimeout: time.Second}})
	acme := newTenant(t, e, "acme")
	open := dialWS(t, e) // a socket acknowledged before the freeze
	open.init(acme.Admin.Token)
	e.Proxy.Freeze()
	// Its operations sent during the freeze end at their deadline too (an
	// operation authenticates again, on the database): a query and a
	// subscription's start. They waited for the thaw.
	sent := time.Now()
	open.send(map[string]any{"id": "q", "type": "subscribe", "payload": map[string]any{"query": `{ viewer { kind } }`}})
	open.send(map[string]any{"id": "s", "type": "subscribe", "payload": map[string]any{"query": `subscription { tenantEvents(tenantId: "acme") { eventId } }`}})
	for ended := map[any]bool{}; len(ended) < 2; {
		m, err := open.read(8 * time.Second)
		if err != nil {
			t.Fatalf("operations on an open socket during the freeze: %v after %v (ended: %v)", err, time.Since(sent), ended)
		}
		if m["type"] == "error" || m["type"] == "complete" {
			if m["type"] == "error" && !strings.Contains(fmt.Sprint(m["payload"]), "UNAVAILABLE") {
				t.Fatalf("an operation on an open socket during the freeze: %v", m)
			}
			ended[m["id"]] = true
		}
	}
	done := make(chan testkit.Resp, 2)
	go func() {
		done <- e.Call(acme.Admin.Token, "projects/create", map[string]any{"tenantId": "acme", "name": "frozen"})
	}()
	go func() { done <- e.GraphQL(acme.Admin.Token, `{ viewer { kind } }`, nil) }()
	for i := 0; i < 2; i++ {
		select {
		case r := <-done:
			if r.Status != 503 {
				t.Fatalf("during the freeze: %d %s", r.Status, r.Raw)
			}
			if !strings.Contains(string(r.Raw), `"UNAVAILABLE"`) {
				t.Fatalf("during the freeze: %s", r.Raw)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("a request hung while the database was frozen")
		}
	}
	// The event stream's path is bounded too: a query, and an
	// authentication that has to ask the database (an unknown token).
	stream := func(token, query string) (int, string) {
		body, _ := json.Marshal(map[string]any{"query": query})
		req, _ := http.NewRequest("POST", e.Server.URL+"/graphql/stream", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "text/event-stream")
		start := time.Now()
		res, err := (&http.Client{Timeout: 20 * time.Second}).Do(req)
		if err != nil {
			t.Fatalf("event stream during the freeze: %v", err)
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		if err != nil {
			t.Fatalf("event stream during the freeze: %v", err)
		}
		// The request's deadline (1 s here) ends it, not a connection
		// attempt's 5 s or the database's return.
		if took := time.Since(start); took > 4*time.Second {
			t.Fatalf("the event stream answered after %v, past its deadline", took)
		}
		return res.StatusCode, string(b)
	}
	if status, body := stream(acme.Admin.Token, `{ tenant(tenantId: "acme") { name } }`); !strings.Contains(body, "UNAVAILABLE") ||
		(status == 200 && !strings.Contains(body, "event: complete")) {
		t.Fatalf("a query on the event stream during the freeze: %d %s", status, body)
	}
	if status, body := stream("bct_unknown-during-the-freeze", `{ viewer { kind } }`); status != 503 {
		t.Fatalf("an unknown token on the event stream during the freeze: %d %s", status, body)
	}
	// A socket whose connection_init must ask the database: close 1013,
	// try again later (graphql-ws clients give up on 4500), at the
	// deadline, not the init timeout (4408: no connection_init).
	w := dialWS(t, e)
	w.send(map[string]any{"type": "connection_init", "payload": map[string]any{"Authorization": "Bearer bct_unknown-during-the-freeze-2"}})
	if code, reason := w.closed(20 * time.Second); code != 1013 {
		t.Fatalf("connection_init during the freeze: close %d (%s), want 1013", code, reason)
	}
	// A client that gives up while the database is frozen.
	const logged = `"path":"/api/compute/tenants/get"`
	before := strings.Count(logs.String(), logged)
	client := &http.Client{Timeout: 200 * time.Millisecond}
	req, _ := http.NewRequest("POST", e.Server.URL+"/api/compute/tenants/get", strings.NewReader(`{"tenantId":"acme"}`))
	req.Header.Set("Authorization", "Bearer "+acme.Admin.Token)
	if res, err := client.Do(req); err == nil {
		res.Body.Close()
	}
	// The server's side ends at its deadline, and logs the request then.
	wait.Eventually(t, 10*time.Second, func() error {
		if strings.Count(logs.String(), logged) == before {
			return errors.New("the departed client's request has not ended on the server")
		}
		return nil
	})
	e.Proxy.Thaw()
	// Recovered: new requests work.
	wait.Eventually(t, 10*time.Second, func() error {
		r := e.Call(acme.Admin.Token, "tenants/get", map[string]any{"tenantId": "acme"})
		if r.Status == 200 {
			return nil
		}
		return fmt.Errorf("no recovery after the thaw: %d %s", r.Status, r.Raw)
	})
	if strings.Contains(logs.String(), `"msg":"internal error"`) || strings.Contains(logs.String(), `"level":"ERROR"`) {
		t.Fatalf("a frozen database or a departed client was logged as an error:\n%s", logs.String())
	}
}

// The method surface: nothing after the object, document order, and the
// error shape everywhere under /api/compute.
func TestMethodSurfaceBodies(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	acme := newTenant(t, e, "acme")
	for _, body := range []string{`{"tenantId":"acme"}}`, `{"tenantId":"acme"}]`, `{"tenantId":"acme"} {}`, `{"tenantId":"acme"}x`} {
		r := e.Call(acme.Admin.Token, "tenants/get", body)
		expect(t, r, "INVALID_INPUT", "")
	}
	// The first offending field is the first in the document as sent.
	r := e.Call(acme.Member.Token, "projects/create", `{"name":"`+strings.Repeat("x", 300)+`","tenantId":"no spaces"}`)
	expect(t, r, "INVALID_INPUT", "name")
	r = e.Call(acme.Member.Token, "projects/create", `{"tenantId":"no spaces","name":"`+strings.Repeat("x", 300)+`"}`)
	expect(t, r, "INVALID_INPUT", "tenantId")
	pool := e.Pool(acme.Admin.Token, "acme", "p")
	nodeID, cred := e.Node(acme.Admin.Token, "acme", pool)
	r = invReport(t, e, cred, nodeID, `{"system":{"vendor":5},"cpu":{"cores":1.5}}`)
	expect(t, r, "INVALID_INPUT", "sections.system.vendor")
	r = invReport(t, e, cred, nodeID, `{"cpu":{"cores":1.5},"system":{"vendor":5}}`)
	expect(t, r, "INVALID_INPUT", "sections.cpu.cores")
	// An escaped surrogate without its pair is no Unicode character: refused
	// as invalid UTF-8 is, on both surfaces (encoding/json stored U+FFFD);
	// a pair is a character.
	// The refusal names the string (it named the body; a helper's probe).
	r = e.Call(acme.Member.Token, "projects/create", `{"tenantId":"acme","name":"x\ud800y"}`)
	expect(t, r, "INVALID_INPUT", "name")
	if !strings.Contains(string(r.Raw), "surrogate") {
		t.Fatalf("a lone surrogate: %s", r.Raw)
	}
	r = invReport(t, e, cred, nodeID, `{"system":{"vendor":"\udc00"}}`)
	expect(t, r, "INVALID_INPUT", "sections.system.vendor")
	r = e.Call(acme.Member.Token, "projects/create", `{"tenantId":"acme","name":"x","labels\udc00":1}`)
	expect(t, r, "INVALID_INPUT", "")
	g := rawCall(t, e, "POST", "/graphql", map[string]string{"Authorization": "Bearer " + acme.Member.Token, "Content-Type": "application/json"},
		[]byte(`{"query":"mutation($n: String!) { createProject(input: {tenantId: \"acme\", name: $n}) { project { name } } }","variables":{"n":"x\ud800"}}`))
	if g.Status != 400 || !strings.Contains(string(g.Raw), "surrogate") {
		t.Fatalf("a lone surrogate in a GraphQL variable: %d %s", g.Status, g.Raw)
	}
	p := must(t, e.Call(acme.Member.Token, "projects/create", `{"tenantId":"acme","name":"x\ud83d\ude00y"}`))
	if p.Str("name") != "x\U0001F600y" {
		t.Fatalf("a surrogate pair: %s", p.Raw)
	}
	// A body in a content coding is 415 on both surfaces, with the coding
	// taken (a gzip body was read as its bytes, "not valid UTF-8"; a plain
	// one labelled br was accepted); identity is no coding.
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write([]byte(`{"tenantId":"acme"}`))
	_ = zw.Close()
	for _, c := range []struct {
		path, coding string
		body         []byte
	}{
		{"/api/compute/projects/list", "gzip", gz.Bytes()}, {"/api/compute/projects/list", "br", []byte(`{"tenantId":"acme"}`)},
		{"/api/compute/projects/list", "identity, gzip", gz.Bytes()},
		{"/graphql", "gzip", gz.Bytes()}, {"/graphql/stream", "deflate", []byte(`{"query":"{ viewer { kind } }"}`)},
	} {
		r := rawCall(t, e, "POST", c.path, map[string]string{"Authorization": "Bearer " + acme.Admin.Token, "Content-Type": "application/json",
			"Content-Encoding": c.coding}, c.body)
		if r.Status != 415 || r.Header.Get("Accept-Encoding") != "identity" || !strings.Contains(string(r.Raw), "UNSUPPORTED_MEDIA_TYPE") {
			t.Fatalf("%s with Content-Encoding %s: %d %v %s", c.path, c.coding, r.Status, r.Header, r.Raw)
		}
	}
	if r := rawCall(t, e, "POST", "/api/compute/projects/list", map[string]string{"Authorization": "Bearer " + acme.Admin.Token,
		"Content-Encoding": "identity"}, []byte(`{"tenantId":"acme"}`)); r.Status != 200 {
		t.Fatalf("Content-Encoding identity: %d %s", r.Status, r.Raw)
	}
	// A method path with an escaped letter is the same path; a segment
	// the answer cannot name as a method's is not quoted back (NUL came
	// back, and projects%2Flist was "no method at /api/compute/projects/list").
	if r := rawCall(t, e, "POST", "/api/compute/projects/%6cist", map[string]string{"Authorization": "Bearer " + acme.Admin.Token},
		[]byte(`{"tenantId":"acme"}`)); r.Status != 200 {
		t.Fatalf("projects/%%6cist: %d %s", r.Status, r.Raw)
	}
	for _, path := range []string{"/api/compute/projects/list%00", "/api/compute/projects%2Flist", "/api/compute/projects/li%2Fst",
		// decoded once: %256cist is the text %6cist (it was decoded twice, into list)
		"/api/compute/projects/%256cist"} {
		r := rawCall(t, e, "POST", path, map[string]string{"Authorization": "Bearer " + acme.Admin.Token}, []byte(`{"tenantId":"acme"}`))
		if m := r.Message(); r.Code() != "NOT_FOUND" || strings.Contains(m, "\x00") || strings.Contains(m, "projects") || strings.Contains(m, "list") {
			t.Fatalf("%s: %d %s", path, r.Status, r.Raw)
		}
	}
	// Unknown paths and verbs answer in the error shape.
	for _, c := range []struct{ method, path string }{
		{"POST", "/api/compute/tenants"}, {"POST", "/api/compute/a/b/c"}, {"GET", "/api/compute/a/b/c/d"},
		{"POST", "/api/compute"}, {"DELETE", "/api/compute"},
	} {
		r := rawCall(t, e, c.method, c.path, map[string]string{"Authorization": "Bearer " + acme.Admin.Token}, []byte(`{}`))
		if r.Code() == "" || r.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("%s %s: %d %s", c.method, c.path, r.Status, r.Raw)
		}
	}
	// Outside the method surface too (chi's were an empty 405 and a
	// plain-text 404), and HEAD is GET without the body (it was 405).
	for _, c := range []struct {
		method, path, code string
	}{
		{"POST", "/openapi.json", "METHOD_NOT_ALLOWED"}, {"DELETE", "/healthz", "METHOD_NOT_ALLOWED"},
		{"PROPFIND", "/healthz", "METHOD_NOT_ALLOWED"}, {"FOO", "/openapi.json", "METHOD_NOT_ALLOWED"},
		{"DELETE", "/metrics", "METHOD_NOT_ALLOWED"},
		{"GET", "/nothing-here", "NOT_FOUND"}, {"POST", "/graphiql/x/y", "METHOD_NOT_ALLOWED"},
		// Under /graphiql/ too (http.FileServer: a plain-text 404 and a
		// listing of the directory).
		{"GET", "/graphiql/nope", "NOT_FOUND"}, {"GET", "/graphiql/", "NOT_FOUND"}, {"GET", "/graphiql/x/y", "NOT_FOUND"},
	} {
		r := rawCall(t, e, c.method, c.path, nil, []byte(`{}`))
		if r.Code() != c.code || r.Header.Get("Content-Type") != "application/json" || c.code == "METHOD_NOT_ALLOWED" && r.Header.Get("Allow") != "GET, HEAD" {
			t.Fatalf("%s %s: %d %v %s", c.method, c.path, r.Status, r.Header, r.Raw)
		}
	}
	// GraphQL's paths answer such a verb as they answer PUT: in the
	// GraphQL error shape, with the verbs they take.
	for _, path := range []string{"/graphql", "/graphql/stream"} {
		r := rawCall(t, e, "PROPFIND", path, map[string]string{"Authorization": "Bearer " + acme.Admin.Token}, []byte(`{}`))
		if r.Status != 405 || r.Header.Get("Allow") != "GET, POST" || !strings.Contains(string(r.Raw), `"errors"`) {
			t.Fatalf("PROPFIND %s: %d %v %s", path, r.Status, r.Header, r.Raw)
		}
		// the verb's answer whatever the token (it was 401 without one)
		for _, verb := range []string{"PUT", "DELETE", "HEAD"} {
			if r := rawCall(t, e, verb, path, nil, nil); r.Status != 405 || r.Header.Get("Allow") != "GET, POST" {
				t.Fatalf("%s %s without a token: %d %v %s", verb, path, r.Status, r.Header, r.Raw)
			}
		}
		if r := rawCall(t, e, "OPTIONS", path, nil, nil); r.Status != 204 {
			t.Fatalf("OPTIONS %s without a token: %d %s", path, r.Status, r.Raw)
		}
		// a request without a token is told so, not that its header is malformed
		r = rawCall(t, e, "POST", path, map[string]string{"Content-Type": "application/json"}, []byte(`{"query":"{ viewer { kind } }"}`))
		if m, _ := gqlMessage(r); r.Status != 401 || m != "a bearer token is required" {
			t.Fatalf("POST %s without a token: %d %s", path, r.Status, r.Raw)
		}
	}
	for _, path := range []string{"/openapi.json", "/healthz", "/readyz", "/", "/graphiql/graphiql.min.css"} {
		if r := rawCall(t, e, "HEAD", path, nil, nil); r.Status != 200 || len(r.Raw) != 0 {
			t.Fatalf("HEAD %s: %d %s", path, r.Status, r.Raw)
		}
	}
}

// Another tenant's principals are NOT_FOUND, and nothing of them leaks.
func TestForeignPrincipals(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	acme := newTenant(t, e, "acme")
	evil := newTenant(t, e, "evil")
	spy := newToken(t, e, evil.Admin.Token, "evil", "very-secret-name", "viewer")
	r := e.Call(acme.Admin.Token, "members/grant", map[string]any{"tenantId": "acme", "principalId": spy.PrincipalID, "role": "admin"})
	expect(t, r, "NOT_FOUND", anyPath)
	assertNoInternals(t, "members.grant", r.Raw, "very-secret-name")
	prj := newProject(t, e, acme.Member.Token, "acme", "web")
	r = e.Call(acme.Admin.Token, "projects/addMember", map[string]any{"tenantId": "acme", "projectId": prj, "principalId": spy.PrincipalID})
	expect(t, r, "NOT_FOUND", anyPath)
	assertNoInternals(t, "projects.addMember", r.Raw, "very-secret-name")
	// The operator naming a tenant that does not exist: NOT_FOUND, not a 500.
	r = e.Call(e.Operator, "members/grant", map[string]any{"tenantId": "ghost", "principalId": spy.PrincipalID, "role": "viewer"})
	expect(t, r, "NOT_FOUND", anyPath)
}

// Decide first, then the owner's rules: an offered tenant offering the pool
// to itself learns nothing more than NOT_FOUND.
func TestOfferedTenantCannotProbeOwnerRules(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	acme := newTenant(t, e, "acme")
	beta := newTenant(t, e, "beta")
	pool := e.Pool(acme.Admin.Token, "acme", "p")
	must(t, e.Call(acme.Admin.Token, "pools/offer", map[string]any{"tenantId": "acme", "poolId": pool, "toTenantId": "beta", "quota": map[string]any{"gpus": 1, "instances": 1}}))
	for _, c := range []struct {
		method string
		body   map[string]any
	}{
		{"pools/offer", map[string]any{"tenantId": "beta", "poolId": pool, "toTenantId": "beta", "quota": map[string]any{"gpus": 1, "instances": 1}}},
		{"pools/update", map[string]any{"tenantId": "beta", "poolId": pool}},
		{"pools/archive", map[string]any{"tenantId": "beta", "poolId": pool, "expectedVersion": 99}},
		{"joinTokens/create", map[string]any{"tenantId": "beta", "poolId": pool}},
	} {
		expect(t, e.Call(beta.Admin.Token, c.method, c.body), "NOT_FOUND", anyPath)
	}
	// The owner still gets its own rules.
	expect(t, e.Call(acme.Admin.Token, "pools/offer", map[string]any{"tenantId": "acme", "poolId": pool, "toTenantId": "acme", "quota": map[string]any{"gpus": 1, "instances": 1}}), "INVALID_INPUT", "toTenantId")
}

// A denial keeps its reason on the request and in the audit record.
func TestDenyJoinRequestWithReason(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	acme := newTenant(t, e, "acme")
	pool := e.Pool(acme.Admin.Token, "acme", "p")
	tok := e.JoinToken(acme.Admin.Token, "acme", pool, 1)
	body := testkit.NewMachine(t).JoinBody(tok)
	body["hardware"].(map[string]any)["systemUuid"] = "00000000-0000-0000-0000-000000000000"
	r := must(t, e.Call("", "nodes/join", body))
	jr := r.Str("joinRequestId")
	if jr == "" {
		t.Fatalf("placeholder join not deferred: %s", r.Raw)
	}
	expect(t, e.Call(acme.Admin.Token, "joinRequests/deny", map[string]any{"tenantId": "acme", "joinRequestId": jr, "reason": " "}), "INVALID_INPUT", "reason")
	d := must(t, e.Call(acme.Admin.Token, "joinRequests/deny", map[string]any{"tenantId": "acme", "joinRequestId": jr, "reason": "unknown asset tag"}))
	if d.Str("state") != "denied" || d.Str("denyReason") != "unknown asset tag" {
		t.Fatalf("deny: %s", d.Raw)
	}
	g := must(t, e.Call(acme.Viewer.Token, "joinRequests/get", map[string]any{"tenantId": "acme", "joinRequestId": jr}))
	if g.Str("denyReason") != "unknown asset tag" {
		t.Fatalf("get after deny: %s", g.Raw)
	}
	// The record keeps the reason and the join request it denied.
	var detail struct{ Reason, JoinRequestID string }
	if err := e.DB.GetContext(context.Background(), &detail, `SELECT detail->>'reason' AS reason, detail->>'joinRequestId' AS joinrequestid
		FROM audit_log WHERE method = 'joinRequests.deny' AND outcome = 'success'`); err != nil || detail.Reason != "unknown asset tag" || detail.JoinRequestID != jr {
		t.Fatalf("audit detail %+v: %v", detail, err)
	}
	gd := gqlOK(t, e.GraphQL(acme.Admin.Token, `{ tenant(tenantId: "acme") { pools { edges { node { joinRequests { edges { node { denyReason } } } } } } } }`, nil))
	if !strings.Contains(fmt.Sprint(gd), "unknown asset tag") {
		t.Fatalf("graph denyReason: %v", gd)
	}
}

// Every type that implements Node resolves through node(id:) for a reader,
// and is null for another tenant. The list of types comes from the schema:
// a new Node type without a fixture here fails the test.
func TestNodeResolvesEveryNodeType(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	acme := newTenant(t, e, "acme")
	evil := newTenant(t, e, "evil")
	pool := e.Pool(acme.Admin.Token, "acme", "p")
	nodeID, cred := e.Node(acme.Admin.Token, "acme", pool)
	must(t, invReport(t, e, cred, nodeID, `{"drivers":{"nvidia":"570.86.15"}}`))
	// An offer (to a third tenant: evil must read nothing of acme's).
	newTenant(t, e, "third")
	must(t, e.Call(acme.Admin.Token, "pools/offer", map[string]any{"tenantId": "acme", "poolId": pool, "toTenantId": "third",
		"quota": map[string]any{"gpus": 1, "instances": 1}}))
	// A join waiting for approval (a machine no one registered).
	must(t, e.Call("", "nodes/join", joinBody(e.JoinToken(acme.Admin.Token, "acme", pool, 1), testkit.NewMachine(t), "discovery")))
	newProject(t, e, acme.Member.Token, "acme", "web")
	must(t, e.Call(acme.Member.Token, "profiles/create", map[string]any{"tenantId": "acme", "document": profileDoc("base", 1)}))
	must(t, e.Call(acme.Member.Token, "workflows/create", map[string]any{"tenantId": "acme", "nodeId": nodeID, "profileId": "base"}))
	vps := vpsPool(t, e, acme.Admin.Token, "acme", "vps", nil)
	must(t, e.Call(acme.Member.Token, "instances/create", instanceIn("acme", vps, "vm", 0)))
	must(t, e.Call(acme.Member.Token, "reservations/create", rsvIn("acme", vps, 1, time.Hour, 2*time.Hour)))

	d := gqlOK(t, e.GraphQL(acme.Admin.Token, `{ tenant(tenantId: "acme") {
		id projects(first: 5) { edges { node { id } } } profile(profileId: "base") { id } instances(first: 5) { edges { node { id } } } reservations(first: 5) { edges { node { id } } }
		pools(first: 5) { edges { node { id joinTokens(first: 5) { edges { node { id } } } joinRequests(first: 5) { edges { node { id } } }
		offers { edges { node { id } } } nodes(first: 5) { edges { node { id inventory { id } workflows(first: 5) { edges { node { id } } } } } } } } } } }`, nil))
	ids := map[string]string{}
	var walk func(typ string, v any)
	walk = func(typ string, v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, c := range x {
				if k == "id" {
					ids[typ] = c.(string)
					continue
				}
				walk(map[string]string{"projects": "Project", "profile": "Profile", "pools": "Pool", "nodes": "ComputeNode",
					"inventory": "InventorySnapshot", "workflows": "Workflow", "tenant": "Tenant", "instances": "Instance",
					"joinTokens": "JoinToken", "joinRequests": "JoinRequest", "offers": "PoolOffer", "reservations": "Reservation"}[k]+"|"+typ, c)
			}
		case []any:
			for _, c := range x {
				walk(typ, c)
			}
		}
	}
	walk("", d)
	got := map[string]string{}
	for k, v := range ids {
		// the nearest named type on the path
		for _, part := range strings.Split(k, "|") {
			if part != "" {
				got[part] = v
				break
			}
		}
	}
	types := gqlOK(t, e.GraphQL(acme.Admin.Token, `{ __type(name: "Node") { possibleTypes { name } } }`, nil))
	possible := obj(t, types, "__type")["possibleTypes"].([]any)
	if len(possible) < 8 {
		t.Fatalf("Node has %d implementations", len(possible))
	}
	q := `query($id: ID!) { node(id: $id) { __typename id } }`
	for _, p := range possible {
		typ := p.(map[string]any)["name"].(string)
		id, ok := got[typ]
		if !ok {
			t.Fatalf("no fixture for Node type %s: add it to this test", typ)
		}
		n := gqlOK(t, e.GraphQL(acme.Admin.Token, q, map[string]any{"id": id}))["node"]
		if m, _ := n.(map[string]any); m == nil || m["__typename"] != typ || m["id"] != id {
			t.Fatalf("node(id:) for %s: %v", typ, n)
		}
		if n := gqlOK(t, e.GraphQL(evil.Admin.Token, q, map[string]any{"id": id}))["node"]; n != nil {
			t.Fatalf("node(id:) for another tenant's %s: %v", typ, n)
		}
	}
}

// Names are checked with the published pattern ^\S(?:.*\S)?$ read as
// ECMA-262 reads it (the index's JSON Schemas are ECMA-262): a leading or
// trailing NO-BREAK SPACE, IDEOGRAPHIC SPACE or BOM, or a LINE SEPARATOR
// inside, is INVALID_INPUT on both surfaces. Go's regexp let them through,
// and look-alike names passed the uniqueness check.
func TestLookAlikeNamesAreRefused(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	acme := newTenant(t, e, "acme")
	pool := vpsPool(t, e, acme.Admin.Token, "acme", "vps", nil)
	must(t, e.Call(acme.Member.Token, "instances/create", instanceIn("acme", pool, "web", 1)))
	create := `mutation($in: CreateInstanceInput!) { createInstance(input: $in) { instance { name } } }`
	for _, name := range []string{"\u00a0web", "web\u00a0", "\u3000web", "web\u3000", "\ufeffweb", "web\ufeff", "we\u2028b", "we\u2029b", "web\u202f", "\u2003web", "web\u0085"} {
		r := e.Call(acme.Member.Token, "instances/create", instanceIn("acme", pool, name, 1))
		expect(t, r, "INVALID_INPUT", "name")
		in := instanceIn("acme", pool, name, 1)
		g := e.GraphQL(acme.Member.Token, create, map[string]any{"in": in})
		if c, p := gqlErr(g); c != "INVALID_INPUT" || !strings.HasSuffix(p, "name") {
			t.Fatalf("createInstance named %q: %s", name, g.Raw)
		}
		if r := e.Call(acme.Admin.Token, "pools/create", map[string]any{"tenantId": "acme", "name": name, "site": "fra1",
			"gpuModel": "H100", "sharingMode": "exclusive", "kind": "bare-metal"}); r.Code() != "INVALID_INPUT" || r.Path() != "name" {
			t.Fatalf("pools.create named %q: %s", name, r.Raw)
		}
	}
	// Characters that are neither space nor control stay allowed (NEL,
	// a C1 control, is refused since names hold no control character).
	for _, name := range []string{"wé😀b", "w\u200bb"} {
		must(t, e.Call(acme.Member.Token, "instances/create", instanceIn("acme", pool, name, 1)))
	}
}

// The event stream's request deadline bounds authentication and queries;
// a subscription lifts it once it starts and runs past it.
func TestStreamSubscriptionOutlivesTheDeadline(t *testing.T) {
	t.Parallel()
	e := testkit.StartWith(t, testkit.Options{Config: server.Config{RequestTimeout: time.Second}}).RunReconciler()
	acme := newTenant(t, e, "acme")
	pool := vpsPool(t, e, acme.Admin.Token, "acme", "vps", nil)
	s := openSSE(t, e, acme.Admin.Token, `subscription { tenantEvents(tenantId: "acme", types: ["instance."]) { type } }`, nil)
	<-time.After(2 * time.Second) // twice the request's deadline
	must(t, e.Call(acme.Member.Token, "instances/create", instanceIn("acme", pool, "late", 1)))
	if name, data := s.next(); name != "next" || !strings.Contains(fmt.Sprint(data), "instance.created") {
		t.Fatalf("after the deadline: %s %v", name, data)
	}
}

// A body that stalls is bounded by the request's deadline, on both
// surfaces: the client is answered once it passes, not never (or when the
// listener's read timeout does).
func TestStalledBodyEndsAtTheDeadline(t *testing.T) {
	t.Parallel()
	e := testkit.StartWith(t, testkit.Options{Config: server.Config{RequestTimeout: 500 * time.Millisecond}})
	acme := newTenant(t, e, "acme")
	// rawPost sends a request's head and the start of its body, then
	// nothing more, and reads the answer.
	rawPost := func(path, headers, body string) (int, string) {
		c, err := net.Dial("tcp", strings.TrimPrefix(e.Server.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\n%s\r\n%s", path, acme.Admin.Token, headers, body)
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("%s %q: no answer: %v", path, headers, err)
		}
		raw, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(raw)
	}
	for _, path := range []string{"/api/compute/tenants/get", "/graphql", "/graphql/stream"} {
		status, raw := rawPost(path, "Accept: text/event-stream, application/json\r\nContent-Length: 1000\r\n", `{"query"`)
		if status != http.StatusBadRequest || !strings.Contains(raw, "INVALID_INPUT") || !strings.Contains(raw, `"reason":"body-deadline"`) {
			t.Fatalf("%s, a stalled body: %d %s", path, status, raw)
		}
		// A body its Content-Length says is over the limit is refused at
		// once, before it is sent (a client waiting on Expect:
		// 100-continue sends nothing), not held until the deadline.
		status, raw = rawPost(path, "Accept: application/json\r\nExpect: 100-continue\r\nContent-Length: 5000000\r\n", "")
		if status != http.StatusRequestEntityTooLarge || !strings.Contains(raw, "PAYLOAD_TOO_LARGE") {
			t.Fatalf("%s, a declared 5 MB body: %d %s", path, status, raw)
		}
	}
}

// /readyz tells a database that does not answer its check from pending
// migrations: a lock on the migrations' table is not a pending migration.
func TestReadyzWhenTheCheckCannotRun(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	get := func() (int, string) {
		res, err := http.Get(e.Server.URL + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var b struct{ Status string }
		_ = json.NewDecoder(res.Body).Decode(&b)
		return res.StatusCode, b.Status
	}
	if code, status := get(); code != 200 || status != "ready" {
		t.Fatalf("readyz: %d %q", code, status)
	}
	lock, err := e.DB.BeginTxx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback() //nolint:errcheck
	if _, err := lock.Exec(`LOCK TABLE goose_db_version IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	if code, status := get(); code != 503 || status != "database not answering" {
		t.Fatalf("readyz with the migrations' table locked: %d %q", code, status)
	}
}

// /readyz says whether the database answers, not whether the pool has a
// free connection: with every pool connection held by requests (a busy
// replica, a heavy query), it said "database unreachable" after 2 s, and a
// load balancer took every busy replica out at once (a probe's). It checks
// on a connection of its own.
func TestReadyzWhileThePoolIsBusy(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	ctx := context.Background()
	var held []*sql.Conn
	defer func() {
		for _, c := range held {
			_ = c.Close()
		}
	}()
	for range e.DB.Stats().MaxOpenConnections {
		c, err := e.DB.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	// Concurrent checks share one statement.
	var wg sync.WaitGroup
	codes := make([]string, 8)
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := http.Get(e.Server.URL + "/readyz")
			if err != nil {
				codes[i] = err.Error()
				return
			}
			defer res.Body.Close()
			var b struct{ Status string }
			_ = json.NewDecoder(res.Body).Decode(&b)
			codes[i] = fmt.Sprint(res.StatusCode, " ", b.Status)
		}()
	}
	wg.Wait()
	for _, c := range codes {
		if c != "200 ready" {
			t.Fatalf("readyz with every pool connection held: %q", codes)
		}
	}
}

// Every code an answer carries is in the error table (errs) and so in
// docs/api/errors.md and the OpenAPI document's code enum; the HTTP
// layer's 405 and 415 carried codes written as literals, in neither.
func TestHTTPLayerCodesAreDocumented(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	doc, err := os.ReadFile("../../docs/api/errors.md")
	if err != nil {
		t.Fatal(err)
	}
	do := func(method, path, ct, body string) testkit.Resp {
		req, _ := http.NewRequest(method, e.Server.URL+path, strings.NewReader(body))
		if ct != "" {
			req.Header.Set("Content-Type", ct)
		}
		req.Header.Set("Authorization", "Bearer "+e.Operator)
		return e.Do(req)
	}
	for _, r := range []testkit.Resp{
		do("GET", "/api/compute/tenants/get", "", ""),
		do("PUT", "/graphql", "application/json", `{"query":"{ viewer { kind } }"}`),
		do("POST", "/graphql", "text/plain", `{"query":"{ viewer { kind } }"}`),
		do("POST", "/graphql/stream", "text/plain", `{"query":"subscription { tenantEvents(tenantId: \"x\") { type } }"}`),
	} {
		code := r.Code()
		if code == "" {
			code, _ = gqlErr(r)
		}
		if code == "" || !errs.Known(errs.Code(code)) || errs.Code(code).HTTPStatus() != r.Status {
			t.Errorf("%d %q: not a code of the error table with its status: %s", r.Status, code, r.Raw)
		}
		if !strings.Contains(string(doc), `id="`+strings.ToLower(code)+`"`) {
			t.Errorf("%q is not in docs/api/errors.md", code)
		}
	}
}

// A database that takes no writes (a primary become a standby, or
// default_transaction_read_only) is UNAVAILABLE for every write, on both
// surfaces, and /readyz says so: writes answered 500 INTERNAL and readyz
// said ready (a helper's probe). Reads go on.
func TestReadOnlyDatabase(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	acme := newTenant(t, e, "acme")
	ctx := context.Background()
	var dbName string
	if err := e.DB.GetContext(ctx, &dbName, `SELECT current_database()`); err != nil {
		t.Fatal(err)
	}
	// Every session from now on starts read-only: the pool's are ended,
	// and reconnect under the setting.
	if _, err := e.DB.ExecContext(ctx, `ALTER DATABASE `+pgx.Identifier{dbName}.Sanitize()+` SET default_transaction_read_only = on`); err != nil {
		t.Fatal(err)
	}
	admin, err := pgx.Connect(ctx, e.DB.URL) // outside the pool: every pooled session ends
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := e.Call(acme.Member.Token, "projects/create", map[string]any{"tenantId": "acme", "name": "ro"})
		if r.Status == 503 && r.Code() == "UNAVAILABLE" {
			break
		}
		if r.Status != 401 && r.Status != 503 || time.Now().After(deadline) {
			t.Fatalf("a write to a read-only database: %d %s", r.Status, r.Raw)
		}
		time.Sleep(100 * time.Millisecond)
	}
	g := e.GraphQL(acme.Member.Token, `mutation { createProject(input: {tenantId: "acme", name: "ro2"}) { project { projectId } } }`, nil)
	if c, _ := gqlErr(g); c != "UNAVAILABLE" {
		t.Fatalf("a GraphQL write to a read-only database: %d %s", g.Status, g.Raw)
	}
	must(t, e.Call(acme.Member.Token, "projects/list", map[string]any{"tenantId": "acme"}))
	res, err := http.Get(e.Server.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	var b struct{ Status string }
	_ = json.NewDecoder(res.Body).Decode(&b)
	res.Body.Close()
	if res.StatusCode != 503 || b.Status != "database read-only" {
		t.Fatalf("readyz of a read-only database: %d %q", res.StatusCode, b.Status)
	}
	// Writable again: the replica comes back by itself (its pooled
	// sessions kept the setting they began with, and it answered 503 until
	// they were ended by hand). A readiness check that finds it read-only
	// renews them.
	for _, q := range []string{`SET SESSION CHARACTERISTICS AS TRANSACTION READ WRITE`,
		`ALTER DATABASE ` + pgx.Identifier{dbName}.Sanitize() + ` SET default_transaction_read_only = off`} {
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	deadline = time.Now().Add(10 * time.Second)
	for {
		res, err := http.Get(e.Server.URL + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("readyz after the database takes writes again: %d", res.StatusCode)
		}
		time.Sleep(200 * time.Millisecond)
	}
	must(t, e.Call(acme.Member.Token, "projects/create", map[string]any{"tenantId": "acme", "name": "rw"}))
}
