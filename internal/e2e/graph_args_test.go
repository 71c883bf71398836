package e2e

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/bettercompute/computed/internal/testkit"
)

// The graph's arguments follow the rules of the method whose argument they
// are, with the method's words, also where a field reads through the
// loaders instead of calling its method (the root tenant, auditLog), and
// a Time argument is a time the method surface would take: an argument a
// client got wrong is INVALID_INPUT, never INTERNAL, and its value is not
// copied back into the answer.
func TestGraphArgumentsFollowTheMethodRules(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	acme := newTenant(t, e, "acme")
	tok := acme.Admin.Token

	t.Run("the root tenant", func(t *testing.T) {
		q := `query($t: String!) { tenant(tenantId: $t) { name } }`
		for _, bad := range []string{strings.Repeat("a", 129), strings.Repeat("a", 100_000), "<script>alert(1)</script> DROP TABLE", "acme "} {
			r := e.GraphQL(tok, q, map[string]any{"t": bad})
			gqlExpect(t, r, "INVALID_INPUT", "tenantId")
			if strings.Contains(string(r.Raw), bad) || len(r.Raw) > 2000 {
				t.Errorf("%.40q: the answer (%d bytes) copies the argument: %.300s", bad, len(r.Raw), r.Raw)
			}
		}
		// the bound itself passes the rules (no such tenant: denied)
		r := e.GraphQL(tok, q, map[string]any{"t": strings.Repeat("a", 128)})
		gqlExpect(t, r, "PERMISSION_DENIED", anyPath)
		if d := gqlOK(t, e.GraphQL(tok, q, map[string]any{"t": "acme"})); d["tenant"] == nil {
			t.Fatal("acme unreadable")
		}
	})

	t.Run("tenant.computeNode", func(t *testing.T) {
		q := `query($n: String!) { tenant(tenantId: "acme") { computeNode(nodeId: $n) { nodeId } } }`
		for _, bad := range []string{"node_x", strings.Repeat("n", 100_000), "node_01jd0000000000000000000000 "} {
			r := e.GraphQL(tok, q, map[string]any{"n": bad})
			gqlExpect(t, r, "INVALID_INPUT", "nodeId")
		}
		// a well-formed id of no node of the tenant: NOT_FOUND, as
		// nodes.get answers and Tenant.profile does (it was null with no
		// error), the field null beside it
		r := e.GraphQL(tok, q, map[string]any{"n": "node_01jd0000000000000000000000"})
		gqlExpect(t, r, "NOT_FOUND", "")
		if !strings.Contains(string(r.Raw), `"message":"compute-node/node_01jd0000000000000000000000 not found"`) || !strings.Contains(string(r.Raw), `"computeNode":null`) {
			t.Fatalf("%s", r.Raw)
		}
	})

	t.Run("profiles' after", func(t *testing.T) {
		// profiles.list's own cursors, refused in its words as the other
		// connections' are (it said "not a cursor this server returned"
		// for all of these).
		d := gqlOK(t, e.GraphQL(tok, `{ viewer { tenants(first: 1) { pageInfo { endCursor } } } }`, nil))
		other := dig(t, d, "viewer", "tenants", "pageInfo", "endCursor")
		q := `query($a: String) { tenant(tenantId: "acme") { profiles(first: 5, after: $a) { totalCount } } }`
		for _, c := range []struct {
			after any
			words string
		}{
			{strings.Repeat("a", 257), "after is longer than 256 characters"},
			{other, "after is one of another list"},
			{"!!", "after is not one this server returned"},
		} {
			r := e.GraphQL(tok, q, map[string]any{"a": c.after})
			gqlExpect(t, r, "INVALID_INPUT", "after")
			if !strings.Contains(string(r.Raw), c.words) {
				t.Errorf("%.20v: %s", c.after, r.Raw)
			}
		}
	})

	t.Run("auditLog filters", func(t *testing.T) {
		q := `query($r: String, $p: String, $m: String) { tenant(tenantId: "acme") { auditLog(first: 5, resourceId: $r, principalId: $p, method: $m) { totalCount } } }`
		for _, c := range []struct {
			vars map[string]any
			path string
		}{
			{map[string]any{"r": strings.Repeat("x", 257)}, "resourceId"},
			{map[string]any{"r": "a b"}, "resourceId"},
			{map[string]any{"p": "prn_é"}, "principalId"},
			{map[string]any{"p": strings.Repeat("p", 200_000)}, "principalId"},
			{map[string]any{"m": "DROP TABLE"}, "method"},
			{map[string]any{"m": "a." + strings.Repeat("b", 127)}, "method"},
		} {
			r := e.GraphQL(tok, q, c.vars)
			gqlExpect(t, r, "INVALID_INPUT", c.path)
			// audit.list says the same
			in := map[string]any{"tenantId": "acme"}
			for k, v := range c.vars {
				in[map[string]string{"r": "resourceId", "p": "principalId", "m": "method"}[k]] = v
			}
			m := e.Call(tok, "audit/list", in)
			if msg, _ := gqlMessage(r); m.Status != http.StatusBadRequest || m.Path() != c.path || msg != m.Message() {
				t.Errorf("%s: graph says %q, audit.list %d %q %q", c.path, msg, m.Status, m.Path(), m.Message())
			}
		}
		gqlOK(t, e.GraphQL(tok, q, map[string]any{"r": strings.Repeat("x", 256), "m": "projects.update"}))
	})

	t.Run("Time arguments", func(t *testing.T) {
		for _, since := range []string{`"not-a-time"`, `"2027-01-01"`, `"2027-01-01 10:00:00"`, `""`, `5`, `"0000-01-01T00:00:00Z"`, `"2027-13-01T00:00:00Z"`} {
			r := e.GraphQL(tok, `{ tenant(tenantId: "acme") { auditLog(first: 2, since: `+since+`) { totalCount } } }`, nil)
			if c, p := gqlErr(r); c != "INVALID_INPUT" || p != "since" && since != "5" {
				t.Errorf("since: %s: %d %s", since, r.Status, r.Raw)
			}
		}
		// A literal the Time scalar refuses is named as audit.list names
		// it (it was tenant.auditLog.since), the error placed at the
		// field; inside a mutation's input, as the method names it.
		r := e.GraphQL(tok, `{ tenant(tenantId: "acme") { auditLog(until: "2026-12-06") { totalCount } } }`, nil)
		if c, p := gqlErr(r); c != "INVALID_INPUT" || p != "until" || !strings.Contains(string(r.Raw), `"path":["tenant","auditLog"]`) ||
			!strings.Contains(string(r.Raw), `"until must be an RFC 3339 time"`) {
			t.Errorf("until: %d %s", r.Status, r.Raw)
		}
		r = e.GraphQL(tok, `mutation { createReservation(input: {tenantId: "acme", poolId: "pool_x", size: {gpus: 0, vcpus: 1, memoryGiB: 1},
			startsAt: "2027-01-01T00:00:00Z", endsAt: "tomorrow"}) { reservation { reservationId } } }`, nil)
		if c, p := gqlErr(r); c != "INVALID_INPUT" || p != "endsAt" || !strings.Contains(string(r.Raw), `"path":["createReservation"]`) {
			t.Errorf("endsAt literal: %d %s", r.Status, r.Raw)
		}
		q := `query($s: Time) { tenant(tenantId: "acme") { auditLog(first: 2, since: $s) { totalCount } } }`
		for _, s := range []any{"yesterday", "2027-01-01", 5, ""} {
			r := e.GraphQL(tok, q, map[string]any{"s": s})
			if c, p := gqlErr(r); c != "INVALID_INPUT" || p != "variable.s" || r.Status != http.StatusBadRequest {
				t.Errorf("$s = %v: %d %s", s, r.Status, r.Raw)
			}
		}
		gqlOK(t, e.GraphQL(tok, q, map[string]any{"s": "2026-01-01T00:00:00.5+02:00"}))
		// a variable is coerced before the operation runs (a request
		// error), String's as Time's
		for _, v := range []any{5, "ac\x00me"} {
			r := e.GraphQL(tok, `query($t: String!) { tenant(tenantId: $t) { name } }`, map[string]any{"t": v})
			if c, p := gqlErr(r); c != "INVALID_INPUT" || p != "variable.t" || r.Status != http.StatusBadRequest || r.Body["data"] != nil {
				t.Errorf("$t = %q: %d %s", v, r.Status, r.Raw)
			}
		}
		// in an input object
		r = e.GraphQL(tok, `mutation($s: Time!) { createReservation(input: {tenantId: "acme", poolId: "pool_x", size: {gpus: 0, vcpus: 1, memoryGiB: 1},
			startsAt: $s, endsAt: "2027-01-01T02:00:00Z"}) { reservation { reservationId } } }`, map[string]any{"s": "2027-01-01"})
		if c, p := gqlErr(r); c != "INVALID_INPUT" || p != "variable.s" || r.Status != http.StatusBadRequest {
			t.Errorf("startsAt: %d %s", r.Status, r.Raw)
		}
		r = e.GraphQL(tok, `mutation($in: CreateReservationInput!) { createReservation(input: $in) { reservation { reservationId } } }`,
			map[string]any{"in": map[string]any{"tenantId": "acme", "poolId": "pool_x", "size": map[string]any{"gpus": 0, "vcpus": 1, "memoryGiB": 1},
				"startsAt": "2027-01-01T00:00:00Z", "endsAt": "tomorrow"}})
		if c, p := gqlErr(r); c != "INVALID_INPUT" || p != "variable.in.endsAt" || r.Status != http.StatusBadRequest {
			t.Errorf("endsAt in an input variable: %d %s", r.Status, r.Raw)
		}
	})

	t.Run("enum and number variables", func(t *testing.T) {
		// an enum variable is its value's name, exactly; a number is a number
		q := `query($s: InstanceState) { tenant(tenantId: "acme") { instances(first: 1, state: $s) { totalCount } } }`
		for _, s := range []any{"deleted", "Running", "nope", 5} {
			r := e.GraphQL(tok, q, map[string]any{"s": s})
			if c, p := gqlErr(r); c != "INVALID_INPUT" || p != "variable.s" || r.Status != http.StatusBadRequest {
				t.Errorf("$s = %v: %d %s", s, r.Status, r.Raw)
			}
		}
		gqlOK(t, e.GraphQL(tok, q, map[string]any{"s": "RUNNING"}))
		qi := `query($n: Int) { tenant(tenantId: "acme") { instances(first: $n) { totalCount } } }`
		for _, n := range []any{"1", "1.5", 1.5, 2147483648, json.Number("-2147483649"), true, []any{1}, map[string]any{}} {
			r := e.GraphQL(tok, qi, map[string]any{"n": n})
			if c, _ := gqlErr(r); c != "INVALID_INPUT" || r.Status != http.StatusBadRequest {
				t.Errorf("$n = %v: %d %s", n, r.Status, r.Raw)
			}
			if m, _ := gqlMessage(r); !isStringValue(n) && m != "variable.n must be an integer from -2147483648 to 2147483647" {
				t.Errorf("$n = %v: %s", n, r.Raw)
			}
			// every refused variable is a validation error, whoever
			// refused it (2147483648 had no reason; 2^63 had), said at
			// details.path and never at the response's path ("1" had
			// none, 1.5 had ["variable", "n"])
			if reason := gqlDetail(r, "reason"); reason != "validation" {
				t.Errorf("$n = %v: details.reason %v: %s", n, reason, r.Raw)
			}
			if _, p := gqlErr(r); p != "variable.n" || bytes.Contains(r.Raw, []byte(`"path":[`)) {
				t.Errorf("$n = %v: the variable's place: %s", n, r.Raw)
			}
		}
		gqlOK(t, e.GraphQL(tok, qi, map[string]any{"n": 1}))
		// an ID is a string or an integer (5.5 was read as the id "5.5")
		qid := `query($i: ID!) { node(id: $i) { id } }`
		for _, i := range []any{5.5, json.Number("1e-1"), true} {
			r := e.GraphQL(tok, qid, map[string]any{"i": i})
			if m, _ := gqlMessage(r); r.Status != http.StatusBadRequest || m != "variable.i must be a string or an integer" {
				t.Errorf("$i = %v: %d %s", i, r.Status, r.Raw)
			}
		}
		for _, i := range []any{5, json.Number("5.0"), "x"} {
			gqlOK(t, e.GraphQL(tok, qid, map[string]any{"i": i}))
		}
		// an enum's value, however it is wrong, in one wording: the values
		// it takes (a number was quoted as a string; a list was "enums
		// must be ints or strings")
		for _, v := range []any{5, 5.5, true, []any{"RUNNING"}, map[string]any{}, "RUNNING ", "running"} {
			r := e.GraphQL(tok, q, map[string]any{"s": v})
			if m, _ := gqlMessage(r); r.Status != http.StatusBadRequest || !strings.HasPrefix(m, "variable.s must be one of PENDING, PROVISIONING, RUNNING") {
				t.Errorf("$s = %v: %d %s", v, r.Status, r.Raw)
			}
		}
		qin := `mutation($in: CreateInstanceInput!) { createInstance(input: $in) { instance { instanceId } } }`
		r := e.GraphQL(tok, qin, map[string]any{"in": map[string]any{"tenantId": "acme", "poolId": "pool_x", "name": "n",
			"size": map[string]any{"gpus": 0, "vcpus": 1, "memoryGiB": 1}, "desiredState": 1}})
		if m, _ := gqlMessage(r); !strings.HasPrefix(m, "variable.in.desiredState must be one of RUNNING, STOPPED") {
			t.Errorf("an enum inside an input variable: %s", r.Raw)
		}
		// gqlparser's other words for a variable name it, as these do
		for _, c := range []struct {
			q    string
			vars map[string]any
			want string
		}{

			{qid, map[string]any{"i": nil}, "variable.i cannot be null"},
			{qid, map[string]any{}, "variable.i must be defined"},
			{`mutation($in: CreateProjectInput!) { createProject(input: $in) { project { projectId } } }`,
				map[string]any{"in": map[string]any{"tenantId": "acme", "name": "v", "extra": 1}}, "variable.in.extra is not a field of its input type"},
			{`mutation($in: CreateProjectInput!) { createProject(input: $in) { project { projectId } } }`,
				map[string]any{"in": []any{1}}, "variable.in must be a CreateProjectInput, not an array"},
		} {
			r := e.GraphQL(tok, c.q, c.vars)
			if m, _ := gqlMessage(r); r.Status != http.StatusBadRequest || m != c.want {
				t.Errorf("%v: %d %s, want %q", c.vars, r.Status, r.Raw, c.want)
			}
		}
		// an integral number in any spelling is an integer, as the method
		// surface takes it (gqlparser refused 1e3); past 32 bits it is not
		for _, n := range []json.Number{"1e1", "5.0", "2.0E1"} {
			gqlOK(t, e.GraphQL(tok, qi, map[string]any{"n": n}))
		}
		if r := e.GraphQL(tok, qi, map[string]any{"n": json.Number("2.147483648e9")}); r.Status != http.StatusBadRequest {
			t.Errorf("2.147483648e9: %d %s", r.Status, r.Raw)
		}
		// Written in the document, past 32 bits is a validation error too
		// (it reached the resolver below 2^63; a helper's probe); a JSON
		// argument's integers are not Ints.
		for _, n := range []string{"2147483648", "-2147483649", "9223372036854775807"} {
			r := e.GraphQL(tok, `{ tenant(tenantId: "acme") { instances(first: `+n+`) { totalCount } } }`, nil)
			if c, _ := gqlErr(r); c != "INVALID_INPUT" || r.Status != http.StatusBadRequest || !strings.Contains(string(r.Raw), "non 32-bit signed integer value: "+n) {
				t.Errorf("first: %s: %d %s", n, r.Status, r.Raw)
			}
		}
		// A number no 64-bit integer or float holds is one validation
		// error wherever it is written: an Int's (gqlparser's rule and this
		// server's each said it), and a Time's, whose literal gqlparser
		// does not check and then panicked reading (500 INTERNAL, a stack
		// trace in the log), as an argument, a variable's default or inside
		// a list.
		for _, q := range []string{
			`{ tenant(tenantId: "acme") { instances(first: 99999999999999999999) { totalCount } } }`,
			`{ tenant(tenantId: "acme") { auditLog(first: 1, since: 1e400) { totalCount } } }`,
			`{ tenant(tenantId: "acme") { auditLog(first: 1, until: 99999999999999999999) { totalCount } } }`,
			`{ tenant(tenantId: "acme") { auditLog(first: 1, since: [1, {a: -1e400}]) { totalCount } } }`,
			`query($s: Time = 1e400) { tenant(tenantId: "acme") { auditLog(first: 1, since: $s) { totalCount } } }`,
			// inside an input object or a list, and an Int's default: one
			// error, not the object's own beside it quoting it back
			`mutation { createReservation(input: {tenantId: "acme", poolId: "pool_x", size: {gpus: 1, vcpus: 99999999999999999999999999, memoryGiB: 1},
				startsAt: "2027-01-01T00:00:00Z", endsAt: "2027-01-01T01:00:00Z"}) { reservation { reservationId } } }`,
			`{ tenant(tenantId: "acme") { events(first: 1, types: ["instance.", 1e400]) { totalCount } } }`,
			`query($n: Int = 99999999999999999999999999) { tenant(tenantId: "acme") { instances(first: $n) { totalCount } } }`,
			`{ tenant(tenantId: "acme") @include(if: 1e400) { tenantId } }`,
		} {
			r := e.GraphQL(tok, q, nil)
			errList, _ := r.Body["errors"].([]any)
			if c, _ := gqlErr(r); c != "INVALID_INPUT" || r.Status != http.StatusBadRequest || len(errList) != 1 {
				t.Errorf("%s: %d %s", q, r.Status, r.Raw)
			}
		}
		// inside an input object
		r = e.GraphQL(tok, `mutation($in: CreateReservationInput!) { createReservation(input: $in) { reservation { reservationId } } }`,
			map[string]any{"in": map[string]any{"tenantId": "acme", "poolId": "pool_x", "size": map[string]any{"gpus": "1", "vcpus": 1, "memoryGiB": 1},
				"startsAt": "2027-01-01T00:00:00Z", "endsAt": "2027-01-01T01:00:00Z"}})
		if c, p := gqlErr(r); c != "INVALID_INPUT" || p != "variable.in.size.gpus" || r.Status != http.StatusBadRequest {
			t.Errorf("gpus \"1\": %d %s", r.Status, r.Raw)
		}
		// a number that is not an integer, in the same words as at the top
		for _, gpus := range []any{1.5, json.Number("2.5e0"), "abc"} {
			r = e.GraphQL(tok, `mutation($in: CreateReservationInput!) { createReservation(input: $in) { reservation { reservationId } } }`,
				map[string]any{"in": map[string]any{"tenantId": "acme", "poolId": "pool_x", "size": map[string]any{"gpus": gpus, "vcpus": 1, "memoryGiB": 1},
					"startsAt": "2027-01-01T00:00:00Z", "endsAt": "2027-01-01T01:00:00Z"}})
			c, p := gqlErr(r)
			m, _ := gqlMessage(r)
			if c != "INVALID_INPUT" || p != "variable.in.size.gpus" || r.Status != http.StatusBadRequest ||
				!isStringValue(gpus) && m != "variable.in.size.gpus must be an integer from -2147483648 to 2147483647" {
				t.Errorf("gpus %v: %d %s", gpus, r.Status, r.Raw)
			}
		}
	})

	t.Run("literals name their argument", func(t *testing.T) {
		// the validator locates a refused literal only by line and column;
		// details.path names it as for a variable or a method's field (a
		// mutation's input argument is the method's input)
		for _, c := range []struct{ q, path string }{
			{`{ tenant(tenantId: "acme") { instances(first: 1.5) { totalCount } } }`, "first"},
			{`{ tenant(tenantId: "acme") { instances(first: "x") { totalCount } } }`, "first"},
			{`{ tenant(tenantId: "acme") { instances(state: running) { totalCount } } }`, "state"},
			{"query {\n  tenant(tenantId: \"acme\") {\n    a: instances(first: 1) { totalCount }\n    b: instances(first: 2.5) { totalCount }\n  }\n}", "first"},
			{`fragment F on Tenant { instances(first: 2.5) { totalCount } } { tenant(tenantId: "acme") { ...F } }`, "first"},
			{`mutation { createReservation(input: {tenantId: "acme", poolId: "pool_x", size: {gpus: 1.5, vcpus: 1, memoryGiB: 1},
				startsAt: "2027-01-01T00:00:00Z", endsAt: "2027-01-01T02:00:00Z"}) { reservation { reservationId } } }`, "size.gpus"},
			// a field an input object lacks, or does not have
			{`mutation { createReservation(input: {poolId: "pool_x", size: {gpus: 1, vcpus: 1, memoryGiB: 1},
				startsAt: "2027-01-01T00:00:00Z", endsAt: "2027-01-01T02:00:00Z"}) { reservation { reservationId } } }`, "tenantId"},
			{`mutation { createReservation(input: {tenantId: "acme", poolId: "pool_x", size: {gpus: 1, vcpus: 1},
				startsAt: "2027-01-01T00:00:00Z", endsAt: "2027-01-01T02:00:00Z"}) { reservation { reservationId } } }`, "size.memoryGiB"},
			{`mutation { createReservation(input: {tenantId: "acme", poolId: "pool_x", size: {gpus: 1, vcpus: 1, memoryGiB: 1, extra: 1},
				startsAt: "2027-01-01T00:00:00Z", endsAt: "2027-01-01T02:00:00Z"}) { reservation { reservationId } } }`, "size.extra"},
			// an argument a field lacks or does not take, a directive's, a
			// variable's default
			{`{ tenant { name } }`, "tenantId"},
			{`{ tenant(tenantId: "acme") { instances(bogus: 1) { totalCount } } }`, "bogus"},
			{`{ tenant(tenantId: "acme") @include(if: 5) { name } }`, "if"},
			{`query($f: Int = 1.5) { tenant(tenantId: "acme") { instances(first: $f) { totalCount } } }`, "variable.f"},
			{`{ tenant(tenantId: "acme") { instances(first: {a: 1}) { totalCount } } }`, "first.a"}, // gqlparser: field "a" is not defined by type "Int"
		} {
			r := e.GraphQL(tok, c.q, nil)
			code, p := gqlErr(r)
			if list, _ := r.Body["errors"].([]any); code != "INVALID_INPUT" || r.Status != http.StatusBadRequest || c.path != "" && p != c.path || len(list) != 1 {
				t.Errorf("%s: %d %s", c.q, r.Status, r.Raw) // one error each, once (a fragment's was reported twice)
			}
		}
	})

	t.Run("global ids PostgreSQL text cannot hold", func(t *testing.T) {
		for _, raw := range []string{"Pool:\x00", "Instance:acme/inst_\x00x", "ComputeNode:\xff\xfe", "Tenant:acme\x00"} {
			id := base64.RawURLEncoding.EncodeToString([]byte(raw))
			d := gqlOK(t, e.GraphQL(tok, `query($id: ID!) { node(id: $id) { id } }`, map[string]any{"id": id}))
			if d["node"] != nil {
				t.Errorf("%q: %v", raw, d["node"])
			}
		}
	})
}

// gqlDetail returns errors[0].extensions.details[key].
func gqlDetail(r testkit.Resp, key string) any {
	errsList, _ := r.Body["errors"].([]any)
	if len(errsList) == 0 {
		return nil
	}
	e, _ := errsList[0].(map[string]any)
	x, _ := e["extensions"].(map[string]any)
	d, _ := x["details"].(map[string]any)
	return d[key]
}

// gqlMessage returns errors[0].message.
func gqlMessage(r testkit.Resp) (string, bool) {
	errsList, _ := r.Body["errors"].([]any)
	if len(errsList) == 0 {
		return "", false
	}
	e, _ := errsList[0].(map[string]any)
	m, ok := e["message"].(string)
	return m, ok
}

// An operationName that names no operation is refused without copying it
// back, and a document of several operations without one says so.
func TestOperationNameRefusals(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	post := func(body map[string]any) testkit.Resp {
		raw, _ := json.Marshal(body)
		req, _ := http.NewRequest(http.MethodPost, e.Server.URL+"/graphql", bytes.NewReader(raw))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/graphql-response+json")
		req.Header.Set("Authorization", "Bearer "+e.Operator)
		return e.Do(req)
	}
	long := "Op" + strings.Repeat("x", 100_000)
	r := post(map[string]any{"query": "query A { viewer { kind } }", "operationName": long})
	gqlExpect(t, r, "INVALID_INPUT", "operationName")
	if r.Status != http.StatusBadRequest || len(r.Raw) > 1000 || strings.Contains(string(r.Raw), "xxxxxxxx") {
		t.Fatalf("an unknown operationName: %d, %d bytes: %.300s", r.Status, len(r.Raw), r.Raw)
	}
	r = post(map[string]any{"query": "query A { viewer { kind } } query B { viewer { name } }"})
	gqlExpect(t, r, "INVALID_INPUT", "operationName")
	if msg, _ := gqlMessage(r); !strings.Contains(msg, "more than one operation") {
		t.Fatalf("two operations without operationName: %s", r.Raw)
	}
	gqlOK(t, post(map[string]any{"query": "query A { viewer { kind } } query B { viewer { name } }", "operationName": "B"}))
}

// The parser's and validator's messages quote the document's names; a
// name of 50,000 characters came back whole in each. They quote 64.
func TestValidationMessagesQuoteShortly(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	long := "a" + strings.Repeat("b", 50_000)
	for _, q := range []string{
		"{ " + long + " }",
		"query($" + long + ": String) { viewer { kind } }",
		"{ tenant(" + long + ": 1) { name } }",
		"fragment " + long + " on Query { viewer { kind } } { viewer { kind } }",
		"{ viewer @" + long + " { kind } }",
		"{ viewer { ... on " + long + " { kind } } }",
		`{ tenant(tenantId: "acme") { instances(state: ` + strings.ToUpper(long) + `) { totalCount } } }`,
	} {
		r := e.GraphQL(e.Operator, q, nil)
		c, _ := gqlErr(r)
		if c != "INVALID_INPUT" || len(r.Raw) > 1000 || strings.Contains(strings.ToLower(string(r.Raw)), strings.Repeat("b", 100)) {
			t.Errorf("%.30s: %d %q, %d bytes: %.300s", q, r.Status, c, len(r.Raw), r.Raw)
		}
	}
	// literals and a variable's value the validator quotes whole
	digits := strings.Repeat("9", 100_000)
	for _, c := range []struct {
		q    string
		vars map[string]any
	}{
		{`{ tenant(tenantId: "acme") { instances(first: ` + digits + `) { totalCount } } }`, nil},
		{`{ tenant(tenantId: "acme") { instances(first: 1.` + digits + `) { totalCount } } }`, nil},
		{`{ viewer @include(if: ` + long + `) { kind } }`, nil},
		// an input object the validator cannot read (a number past a
		// float), quoted whole in "found {…}": words with spaces
		{`mutation { createProfile(input: {tenantId: "acme", document: {id: "x", version: 1e309, userData: "` + strings.Repeat("word ", 20_000) + `"}}) { profile { profileId } } }`, nil},
		{`query($s: InstanceState) { tenant(tenantId: "acme") { instances(state: $s) { totalCount } } }`, map[string]any{"s": strings.ToUpper(long)}},
		{`query($s: InstanceState) { tenant(tenantId: "acme") { instances(state: $s) { totalCount } } }`, map[string]any{"s": long}},
	} {
		r := e.GraphQL(e.Operator, c.q, c.vars)
		if code, _ := gqlErr(r); code != "INVALID_INPUT" || len(r.Raw) > 1000 {
			t.Errorf("%.40s: %d %q, %d bytes: %.300s", c.q, r.Status, code, len(r.Raw), r.Raw)
		}
	}
	// a schema's own names are quoted whole
	r := e.GraphQL(e.Operator, `{ tenant(tenantId: "acme") { pools(first: 1) { edges { node { status } } } } }`, nil)
	if msg, _ := gqlMessage(r); msg != `Cannot query field "status" on type "Pool". Did you mean "state"?` {
		t.Fatalf("%s", r.Raw)
	}
}

// A key the client made up is quoted at most errs.Quoted characters long,
// in the message and in details.path, on both surfaces.
func TestAnswersQuoteKeysShortly(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	long := "a" + strings.Repeat("b", 50_000)
	newTenant(t, e, "acme") // so that each call gets as far as its key
	check := func(what string, r testkit.Resp) {
		t.Helper()
		if r.Status != http.StatusBadRequest || len(r.Raw) > 1000 || strings.Contains(string(r.Raw), strings.Repeat("b", 100)) {
			t.Errorf("%s: %d, %d bytes: %.300s", what, r.Status, len(r.Raw), r.Raw)
		}
	}
	check("an unknown key", e.Call(e.Operator, "tenants/get", `{"tenantId":"acme","`+long+`":1}`))
	check("an unknown key inside", e.Call(e.Operator, "instances/create", `{"tenantId":"acme","poolId":"pool_x","name":"a","size":{"gpus":0,"`+long+`":1}}`))
	check("an unknown key of a pool's policy", e.Call(e.Operator, "pools/create", `{"tenantId":"acme","name":"x","site":"s","gpuModel":"g","sharingMode":"exclusive","kind":"bare-metal","policy":{"sim":{"`+long+`":1}}}`))
	check("an unknown key of a profile document", e.Call(e.Operator, "profiles/create", `{"tenantId":"acme","document":{"id":"p","version":1,"name":"p","steps":[],"`+long+`":1}}`))
	check("an unknown field of an input variable", e.GraphQL(e.Operator, `mutation($in: CreateTenantInput!) { createTenant(input: $in) { tenant { tenantId } } }`,
		map[string]any{"in": map[string]any{"tenantId": "x", "name": "x", long: 1}}))
	// Values of words with spaces, which the cut of long runs let through
	// whole (100 KB answers): a label value, a value a document's schema
	// error quoted.
	words := strings.Repeat("word ", 20_000)
	wordy := func(what string, r testkit.Resp) {
		t.Helper()
		if r.Code() == "" && r.Body["errors"] == nil || len(r.Raw) > 700 || strings.Contains(string(r.Raw), strings.Repeat("word ", 20)) {
			t.Errorf("%s: %d, %d bytes: %.300s", what, r.Status, len(r.Raw), r.Raw)
		}
	}
	admin := newTenant(t, e, "wordy").Admin.Token
	pool := e.Pool(admin, "wordy", "p")
	nodeID, _ := e.Node(admin, "wordy", pool)
	wordy("an unknown key", e.Call(admin, "projects/create", map[string]any{"tenantId": "wordy", "name": "x", words: 1}))
	wordy("an unknown key of a policy", e.Call(admin, "pools/create", map[string]any{"tenantId": "wordy", "name": "y", "site": "s", "gpuModel": "g",
		"sharingMode": "exclusive", "kind": "bare-metal", "policy": map[string]any{"capacity": map[string]any{words: 1}}}))
	wordy("an enum literal", e.GraphQL(admin, `{ tenant(tenantId: "wordy") { instances(state: "`+words+`") { totalCount } } }`, nil))
	wordy("a label value", e.Call(admin, "nodes/update", map[string]any{"tenantId": "wordy", "nodeId": nodeID, "labels": map[string]any{"k": words}}))
	wordy("a label key", e.Call(admin, "nodes/update", map[string]any{"tenantId": "wordy", "nodeId": nodeID, "labels": map[string]any{words: "v"}}))
	wordy("a document's sha256", e.Call(admin, "profiles/create", map[string]any{"tenantId": "wordy", "document": map[string]any{"id": "p", "version": 1,
		"image": map[string]any{"url": "https://x/y.raw", "sha256": words, "format": "raw"}, "steps": []any{}}}))
	few := strings.Repeat("word ", 2_000) // under a policy's 64 KiB
	wordy("an unknown key of a policy, in its path", e.Call(admin, "pools/create", map[string]any{"tenantId": "wordy", "name": "y", "site": "s", "gpuModel": "g",
		"sharingMode": "exclusive", "kind": "bare-metal", "policy": map[string]any{"capacity": map[string]any{few: 1}}}))
	wordy("an unknown key of a policy in the graph", e.GraphQL(admin, `mutation($p: JSON) { createPool(input: {tenantId: "wordy", name: "z", site: "s", gpuModel: "g", sharingMode: EXCLUSIVE, kind: BARE_METAL, policy: $p}) { pool { poolId } } }`,
		map[string]any{"p": map[string]any{"capacity": map[string]any{few: 1}}}))
	wordy("an enum variable", e.GraphQL(admin, `query($s: InstanceState) { tenant(tenantId: "wordy") { instances(state: $s) { totalCount } } }`, map[string]any{"s": words}))
	wordy("an enum inside an input variable", e.GraphQL(admin, `mutation($in: CreatePoolInput!) { createPool(input: $in) { pool { poolId } } }`,
		map[string]any{"in": map[string]any{"tenantId": "wordy", "name": "z", "site": "s", "gpuModel": "g", "sharingMode": few, "kind": "BARE_METAL"}}))
	// a key of dotted words: each part is short, the whole is not
	dotted := strings.Repeat("word word.", 300)
	wordy("a dotted key of a policy", e.Call(admin, "pools/create", map[string]any{"tenantId": "wordy", "name": "d", "site": "s", "gpuModel": "g",
		"sharingMode": "exclusive", "kind": "bare-metal", "policy": map[string]any{"capacity": map[string]any{dotted: 1}}}))
	wordy("a dotted unknown key", e.Call(admin, "projects/create", map[string]any{"tenantId": "wordy", "name": "x", dotted: 1}))
	// a step's with is the client's: its keys in a profile's issues
	for i, step := range []map[string]any{
		{"use": "host.configure", "with": map[string]any{"sysctl": map[string]any{few: 1}}},
		{"use": "network.configure", "with": map[string]any{few: 1}},
		{"use": "network.configure", "with": map[string]any{dotted: 1}},
	} {
		id := fmt.Sprintf("wordy-%d", i)
		must(t, e.Call(admin, "profiles/create", map[string]any{"tenantId": "wordy", "document": map[string]any{"id": id, "version": 1, "steps": []any{step}}}))
		for _, m := range []string{"profiles/validate", "profiles/render"} {
			r := e.Call(admin, m, map[string]any{"tenantId": "wordy", "profileId": id})
			issues, _ := r.Body["issues"].([]any)
			if d, ok := r.Details()["issues"].([]any); ok {
				issues = d
			}
			if len(issues) == 0 || len(r.Raw) > 3000 {
				t.Errorf("%s of %s: %d, %d bytes: %.300s", m, id, r.Status, len(r.Raw), r.Raw)
			}
		}
		wordy("workflows.create of "+id, e.Call(admin, "workflows/create", map[string]any{"tenantId": "wordy", "nodeId": nodeID, "profileId": id}))
	}
	// Many issues: an error answer carries the first 20 and their count
	// (399 issues made a 92 KB answer); validate answers every one.
	var many []any
	for i := 0; i < 200; i++ {
		many = append(many, map[string]any{"use": "network.configure", "name": "same", "with": map[string]any{fmt.Sprintf("%s%d", dotted[:200], i): 1}})
	}
	must(t, e.Call(admin, "profiles/create", map[string]any{"tenantId": "wordy", "document": map[string]any{"id": "many", "version": 1, "steps": many}}))
	for _, r := range []testkit.Resp{e.Call(admin, "profiles/render", map[string]any{"tenantId": "wordy", "profileId": "many"}),
		e.Call(admin, "workflows/create", map[string]any{"tenantId": "wordy", "nodeId": nodeID, "profileId": "many"})} {
		is, _ := r.Details()["issues"].([]any)
		if r.Code() != "INVALID_INPUT" || len(is) != 20 || r.Details()["issueCount"] != float64(399) || len(r.Raw) > 8000 {
			t.Errorf("many issues: %d, %d issues of %v, %d bytes: %.300s", r.Status, len(is), r.Details()["issueCount"], len(r.Raw), r.Raw)
		}
	}
	if v := must(t, e.Call(admin, "profiles/validate", map[string]any{"tenantId": "wordy", "profileId": "many"})); len(v.Body["issues"].([]any)) != 399 {
		t.Errorf("validate: %d issues", len(v.Body["issues"].([]any)))
	}
	wordy("a label value in the graph", e.GraphQL(admin, `mutation($l: JSON) { updateNode(input: {tenantId: "wordy", nodeId: "`+nodeID+`", labels: $l}) { node { nodeId } } }`,
		map[string]any{"l": map[string]any{"k": words}}))
}

// The server keeps no persisted queries: a hash alone is answered in the
// words Apollo's automatic persisted queries look for, so such a client
// sends the whole query from then on; a query with its hash runs. (The
// extension was on, but the decoder refused every hash-only request as
// "query is required", and each replica kept its own cache.)
func TestPersistedQueriesAreNotSupported(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	ext := map[string]any{"persistedQuery": map[string]any{"version": 1, "sha256Hash": strings.Repeat("ab", 32)}}
	body, _ := json.Marshal(map[string]any{"extensions": ext})
	req, _ := http.NewRequest(http.MethodPost, e.Server.URL+"/graphql", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+e.Operator)
	r := e.Do(req)
	if msg, _ := gqlMessage(r); msg != "PersistedQueryNotSupported" || r.Status != http.StatusBadRequest {
		t.Fatalf("a hash alone: %d %s", r.Status, r.Raw)
	}
	extJSON, _ := json.Marshal(ext)
	req, _ = http.NewRequest(http.MethodGet, e.Server.URL+"/graphql?extensions="+url.QueryEscape(string(extJSON)), nil)
	req.Header.Set("Authorization", "Bearer "+e.Operator)
	if msg, _ := gqlMessage(e.Do(req)); msg != "PersistedQueryNotSupported" {
		t.Fatalf("a hash alone over GET: %s", r.Raw)
	}
	body, _ = json.Marshal(map[string]any{"query": "{ viewer { kind } }", "extensions": ext})
	req, _ = http.NewRequest(http.MethodPost, e.Server.URL+"/graphql", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+e.Operator)
	gqlOK(t, e.Do(req))
}

func isStringValue(v any) bool { _, ok := v.(string); return ok }
