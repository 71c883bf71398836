package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/bettercompute/computed/internal/relay"
	"github.com/bettercompute/computed/internal/testkit"
)

// Pools through the graph: the owner sees its pools with their offers; a
// tenant a pool is offered to sees the pool but not the offers; the query's
// statement count does not grow with pools.
func TestPoolsGraphQL(t *testing.T) {
	// Not parallel: counted batches need the CPU to themselves.
	e := testkit.Start(t)
	admin, _, _ := e.Tenant("acme")
	guest, _, _ := e.Tenant("guest")
	create := `mutation($in: CreatePoolInput!) { createPool(input: $in) { pool { poolId state policy } } }`
	var ids []string
	for i := 0; i < 6; i++ {
		r := e.GraphQL(admin, create, map[string]any{"in": map[string]any{"tenantId": "acme", "name": fmt.Sprintf("p%d", i), "site": "fra1",
			"gpuModel": "H100", "sharingMode": "EXCLUSIVE", "kind": "BARE_METAL", "policy": map[string]any{"maxNodes": 40}}})
		if r.Status != 200 || r.Body["errors"] != nil {
			t.Fatalf("createPool: %s", r.Raw)
		}
		ids = append(ids, r.Body["data"].(map[string]any)["createPool"].(map[string]any)["pool"].(map[string]any)["poolId"].(string))
	}
	r := e.GraphQL(admin, create, map[string]any{"in": map[string]any{"tenantId": "acme", "name": "x", "site": "fra1", "gpuModel": "H100", "sharingMode": "shared", "kind": "BARE_METAL"}})
	// sharingMode is an enum: GraphQL validation refuses other values
	// before the method runs.
	if code, _ := gqlErrorCode(r); code != "INVALID_INPUT" || !strings.Contains(string(r.Raw), `"path":"variable.in.sharingMode"`) {
		t.Fatalf("bad sharingMode: %s", r.Raw)
	}
	offer := `mutation($in: OfferPoolInput!) { offerPool(input: $in) { offer { poolId toTenantId quota { gpus instances } } } }`
	r = e.GraphQL(admin, offer, map[string]any{"in": map[string]any{"tenantId": "acme", "poolId": ids[0], "toTenantId": "guest", "quota": map[string]any{"gpus": 8, "instances": 2}}})
	if r.Status != 200 || !strings.Contains(string(r.Raw), `"gpus":8`) {
		t.Fatalf("offerPool: %s", r.Raw)
	}
	q := `query($t: String!) { tenant(tenantId: $t) { pools(first: 50) { totalCount edges { node { poolId tenantId name offers { totalCount edges { node { toTenantId quota { gpus } } } } } } } } }`
	r = e.GraphQL(admin, q, map[string]any{"t": "acme"})
	if r.Status != 200 || !strings.Contains(string(r.Raw), `"totalCount":6`) || !strings.Contains(string(r.Raw), `"toTenantId":"guest"`) {
		t.Fatalf("owner's pools: %s", r.Raw)
	}
	few := e.Statements(r)
	for i := 0; i < 2; i++ {
		if n := e.Statements(e.GraphQL(admin, q, map[string]any{"t": "acme"})); n < few {
			few = n
		}
	}
	r = e.GraphQL(guest, q, map[string]any{"t": "guest"})
	if r.Status != 200 || !strings.Contains(string(r.Raw), `"totalCount":1`) || strings.Contains(string(r.Raw), `"toTenantId"`) {
		t.Fatalf("guest's pools: %s", r.Raw)
	}
	r = e.GraphQL(guest, q, map[string]any{"t": "acme"})
	if code, _ := gqlErrorCode(r); code != "PERMISSION_DENIED" {
		t.Fatalf("guest naming acme: %s", r.Raw)
	}
	for i := 0; i < 20; i++ {
		e.Must(e.Call(admin, "pools/create", map[string]any{"tenantId": "acme", "name": fmt.Sprintf("q%d", i), "site": "ams1",
			"gpuModel": "A100", "sharingMode": "mig", "kind": "bare-metal"}))
	}
	best := int64(-1)
	for i := 0; i < 5; i++ {
		r = e.GraphQL(admin, q, map[string]any{"t": "acme"})
		if n := e.Statements(r); best < 0 || n < best {
			best = n
		}
	}
	if best > few {
		t.Fatalf("statements grew with pools: %d for 6, %d for 26", few, best)
	}
	t.Logf("%d statements for 6 pools, %d for 26", few, best)
}

// The graph's JSON fields answer stored JSON as the method surface does: a
// number past float64's range failed the field with INTERNAL (and a
// createPool that had committed answered INTERNAL), and an integer past
// 2^53 came back rounded (a helper's probe). Free-form numbers are bounded
// on both surfaces (jsonnum.MaxDigits: written out in full, 1e131071 was
// 131,072 digits on every read).
func TestJSONFieldsKeepTheirNumbers(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	admin, member, _ := e.Tenant("acme")
	const policy = `{"x": 1e63, "y": 18446744073709551617, "z": 0.1, "w": -1e-62}`
	r := e.GraphQL(admin, `mutation($in: CreatePoolInput!) { createPool(input: $in) { pool { poolId policy } } }`,
		map[string]any{"in": json.RawMessage(`{"tenantId": "acme", "name": "big", "site": "fra1", "gpuModel": "H100", "sharingMode": "EXCLUSIVE", "kind": "BARE_METAL", "policy": ` + policy + `}`)})
	if r.Status != 200 || strings.Contains(string(r.Raw), `"errors"`) || strings.Contains(string(r.Raw), "\n") || bytes.Contains(r.Raw, []byte("}\n")) {
		t.Fatalf("createPool: %s", r.Raw)
	}
	var created struct {
		Data struct {
			CreatePool struct{ Pool struct{ PoolID string } }
		}
	}
	if err := json.Unmarshal(r.Raw, &created); err != nil {
		t.Fatal(err)
	}
	pool := created.Data.CreatePool.Pool.PoolID
	// number reads the JSON at path in raw, its numbers as written.
	number := func(raw []byte, path ...string) any {
		t.Helper()
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("%v: %s", err, raw)
		}
		for _, p := range path {
			m, ok := v.(map[string]any)
			if !ok {
				t.Fatalf("no %s in %s", p, raw)
			}
			v = m[p]
		}
		return v
	}
	rest := e.Call(admin, "pools/get", map[string]any{"tenantId": "acme", "poolId": pool})
	if rest.Status != 200 {
		t.Fatalf("pools.get: %s", rest.Raw)
	}
	want := number(rest.Raw, "policy")
	if want.(map[string]any)["y"] != json.Number("18446744073709551617") {
		t.Fatalf("the method surface's policy: %s", rest.Raw)
	}
	for _, q := range []string{
		`query($id: ID!) { node(id: $id) { ... on Pool { policy } } }`,
		`query { tenant(tenantId: "acme") { pools(first: 10) { edges { node { policy } } } } }`,
	} {
		var vars map[string]any
		path := []string{"data", "tenant", "pools", "edges"}
		if strings.Contains(q, "$id") {
			vars = map[string]any{"id": relay.ID("Pool", pool)}
			path = []string{"data", "node", "policy"}
		}
		r := e.GraphQL(admin, q, vars)
		if r.Status != 200 || strings.Contains(string(r.Raw), `"errors"`) {
			t.Fatalf("%s: %s", q, r.Raw)
		}
		got := number(r.Raw, path...)
		if edges, ok := got.([]any); ok {
			got = edges[0].(map[string]any)["node"].(map[string]any)["policy"]
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: policy %v, the method surface's %v", q, got, want)
		}
	}
	// A profile's document, and a workflow's copy of it.
	e.Must(e.Call(member, "profiles/create", `{"tenantId": "acme", "document": {"id": "big-numbers", "version": 1,
		"steps": [{"use": "disk.wipe", "with": {"devices": ["/dev/x"], "n": 18446744073709551617}}]}}`))
	rest = e.Must(e.Call(member, "profiles/get", map[string]any{"tenantId": "acme", "profileId": "big-numbers"}))
	r = e.GraphQL(member, `query { tenant(tenantId: "acme") { profile(profileId: "big-numbers") { document } } }`, nil)
	if r.Status != 200 || strings.Contains(string(r.Raw), `"errors"`) {
		t.Fatalf("profile: %s", r.Raw)
	}
	if got, want := number(r.Raw, "data", "tenant", "profile", "document"), number(rest.Raw, "document"); !reflect.DeepEqual(got, want) {
		t.Fatalf("document %v, the method surface's %v", got, want)
	}

	// Past the bound: INVALID_INPUT naming the number, on both surfaces,
	// as a variable and written in the document; nothing is stored.
	for _, n := range []string{"1e64", "1e131071", "-1e-64", "0e-99999", "-0.0e400", "1" + strings.Repeat("0", 64)} {
		r := e.Call(admin, "pools/update", `{"tenantId": "acme", "poolId": "`+pool+`", "policy": {"ok": 1, "deep": [{"n": `+n+`}]}}`)
		if r.Status != 400 || r.Code() != "INVALID_INPUT" || !strings.Contains(string(r.Raw), `"path":"policy.deep[0].n"`) {
			t.Fatalf("pools.update with %s: %d %s", n, r.Status, r.Raw)
		}
		r = e.GraphQL(admin, `mutation($p: JSON) { updatePool(input: {tenantId: "acme", poolId: "`+pool+`", policy: $p}) { pool { rowVersion } } }`,
			map[string]any{"p": json.RawMessage(`{"ok": 1, "deep": [{"n": ` + n + `}]}`)})
		// the method's path and words (the graph said path "policy")
		if code, _ := gqlErrorCode(r); code != "INVALID_INPUT" || !strings.Contains(string(r.Raw), `"policy.deep[0].n has more than 64 digits`) ||
			!strings.Contains(string(r.Raw), `"path":"policy.deep[0].n"`) {
			t.Fatalf("updatePool with %s: %s", n, r.Raw)
		}
		r = e.GraphQL(admin, `mutation($p: JSON) { updatePool(input: {tenantId: "acme", poolId: "`+pool+`", policy: $p}) { pool { rowVersion } } }`,
			map[string]any{"p": json.RawMessage(n)})
		if code, _ := gqlErrorCode(r); code != "INVALID_INPUT" || !strings.Contains(string(r.Raw), `"path":"policy"`) {
			t.Fatalf("updatePool with the policy %s: %s", n, r.Raw)
		}
		r = e.Call(member, "profiles/create", `{"tenantId": "acme", "document": {"id": "huge", "version": 1,
			"steps": [{"use": "disk.wipe", "with": {"devices": ["/dev/x"], "n": `+n+`}}]}}`)
		if r.Status != 400 || !strings.Contains(string(r.Raw), "digits written out in full") || !strings.Contains(string(r.Raw), `"path":"document.steps[0].with.n"`) {
			t.Fatalf("profiles.create with %s: %d %s", n, r.Status, r.Raw)
		}
		r = e.GraphQL(member, `mutation($d: JSON!) { createProfile(input: {tenantId: "acme", document: $d}) { profile { profileId } } }`,
			map[string]any{"d": json.RawMessage(`{"id": "huge", "version": 1, "steps": [{"use": "disk.wipe", "with": {"devices": ["/dev/x"], "n": ` + n + `}}]}`)})
		if code, _ := gqlErrorCode(r); code != "INVALID_INPUT" || !strings.Contains(string(r.Raw), `"path":"document.steps[0].with.n"`) {
			t.Fatalf("createProfile with %s: %s", n, r.Raw)
		}
	}
	// Written in the document, a float past it (gqlparser reads 1e300).
	r = e.GraphQL(admin, `mutation { updatePool(input: {tenantId: "acme", poolId: "`+pool+`", policy: {n: 1e300}}) { pool { rowVersion } } }`, nil)
	if code, _ := gqlErrorCode(r); code != "INVALID_INPUT" {
		t.Fatalf("updatePool with a literal 1e300: %s", r.Raw)
	}
	// Literals a 64-bit float does not hold exactly are refused (they were
	// stored rounded: 123456789012345678.5 as 123456789012345680), as are
	// integers past 64 bits (in gqlparser's words before); what it holds
	// is kept.
	for lit, words := range map[string]string{
		`{a: 123456789012345678.5}`:               "is not kept exactly",
		`{a: [1, {b: 1.0000000000000000000001}]}`: "the number at a[1].b",
		`{a: 18446744073709551617}`:               "is out of range: no 64-bit integer or float holds it",
		`{a: [1, 1e400]}`:                         "the number 1e400 is out of range",
		`{a: 1e-400}`:                             "more than 64 digits",
	} {
		r = e.GraphQL(admin, `mutation { updatePool(input: {tenantId: "acme", poolId: "`+pool+`", policy: `+lit+`}) { pool { rowVersion } } }`, nil)
		if code, _ := gqlErrorCode(r); code != "INVALID_INPUT" || !strings.Contains(string(r.Raw), words) {
			t.Fatalf("updatePool with the literal %s: %s", lit, r.Raw)
		}
	}
	rest = e.Must(e.Call(admin, "pools/get", map[string]any{"tenantId": "acme", "poolId": pool}))
	if got := number(rest.Raw, "policy"); !reflect.DeepEqual(got, want) {
		t.Fatalf("a refused update changed the policy: %v", got)
	}
	// A Float variable in a JSON literal is refused (coerced to a float,
	// 9007199254740993 was stored as ...992); a JSON variable is kept.
	r = e.GraphQL(admin, `mutation($n: Float) { updatePool(input: {tenantId: "acme", poolId: "`+pool+`", policy: {a: [$n]}}) { pool { policy } } }`,
		map[string]any{"n": json.Number("9007199254740993")})
	if code, _ := gqlErrorCode(r); code != "INVALID_INPUT" || !strings.Contains(string(r.Raw), "Float variable $n") {
		t.Fatalf("a Float variable in a JSON literal: %s", r.Raw)
	}
	r = e.GraphQL(admin, `mutation($n: JSON) { updatePool(input: {tenantId: "acme", poolId: "`+pool+`", policy: {a: [$n]}}) { pool { policy } } }`,
		map[string]any{"n": json.Number("9007199254740993")})
	if code, _ := gqlErrorCode(r); code != "" || !strings.Contains(string(r.Raw), `"policy":{"a":[9007199254740993]}`) {
		t.Fatalf("a JSON variable in a JSON literal: %s", r.Raw)
	}
	r = e.GraphQL(admin, `mutation { updatePool(input: {tenantId: "acme", poolId: "`+pool+`", policy: {a: 12.5, b: -3, c: [0.1, 9007199254740993]}}) { pool { policy } } }`, nil)
	if code, _ := gqlErrorCode(r); code != "" || !strings.Contains(string(r.Raw), `"policy":{"a":12.5,"b":-3,"c":[0.1,9007199254740993]}`) {
		t.Fatalf("updatePool with literals a float holds: %s", r.Raw)
	}
}
