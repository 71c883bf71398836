package e2e

import (
	"strings"
	"testing"

	"github.com/bettercompute/computed/internal/testkit"
)

// A GraphQL mutation and the method surface refuse the same input with
// the same error: the resolver hands the registry the method's typed
// input, which is validated by the body decoder's rules (registry.Call),
// so code, details.path and message agree.
func TestGraphQLAndMethodSurfaceRefuseAlike(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	admin, _, _ := e.Tenant("acme")
	pool := must(t, e.Call(admin, "pools/create", map[string]any{"tenantId": "acme", "name": "p", "site": "fra1",
		"gpuModel": "H100", "sharingMode": "exclusive", "kind": "bare-metal"})).Body["poolId"].(string)
	createPool := map[string]any{"tenantId": "acme", "name": "q", "site": "fra1", "gpuModel": "H100"}
	with := func(base map[string]any, k string, v any) map[string]any {
		m := map[string]any{}
		for x, y := range base {
			m[x] = y
		}
		m[k] = v
		return m
	}
	for _, c := range []struct {
		name, method, mutation string
		rest, graph            map[string]any // the same input as each surface spells it
	}{
		{"pattern", "pools/create", `mutation($in: CreatePoolInput!) { createPool(input: $in) { pool { poolId } } }`,
			with(with(with(createPool, "sharingMode", "exclusive"), "kind", "bare-metal"), "name", " q"),
			with(with(with(createPool, "sharingMode", "EXCLUSIVE"), "kind", "BARE_METAL"), "name", " q")},
		{"length", "pools/create", `mutation($in: CreatePoolInput!) { createPool(input: $in) { pool { poolId } } }`,
			with(with(with(createPool, "sharingMode", "exclusive"), "kind", "bare-metal"), "site", strings.Repeat("s", 129)),
			with(with(with(createPool, "sharingMode", "EXCLUSIVE"), "kind", "BARE_METAL"), "site", strings.Repeat("s", 129))},
		{"free-form NUL", "pools/create", `mutation($in: CreatePoolInput!) { createPool(input: $in) { pool { poolId } } }`,
			with(with(with(createPool, "sharingMode", "exclusive"), "kind", "bare-metal"), "policy", map[string]any{"a": []any{"x\u0000"}}),
			with(with(with(createPool, "sharingMode", "EXCLUSIVE"), "kind", "BARE_METAL"), "policy", map[string]any{"a": []any{"x\u0000"}})},
		{"range", "joinTokens/create", `mutation($in: CreateJoinTokenInput!) { createJoinToken(input: $in) { joinToken { joinTokenId } } }`,
			map[string]any{"tenantId": "acme", "poolId": pool, "ttlSeconds": 0}, map[string]any{"tenantId": "acme", "poolId": pool, "ttlSeconds": 0}},
		{"nested", "pools/offer", `mutation($in: OfferPoolInput!) { offerPool(input: $in) { offer { poolId } } }`,
			map[string]any{"tenantId": "acme", "poolId": pool, "toTenantId": "guest", "quota": map[string]any{"gpus": -1, "instances": 1}},
			map[string]any{"tenantId": "acme", "poolId": pool, "toTenantId": "guest", "quota": map[string]any{"gpus": -1, "instances": 1}}},
	} {
		rest := e.Call(admin, c.method, c.rest)
		expect(t, rest, "INVALID_INPUT", anyPath)
		graph := e.GraphQL(admin, c.mutation, map[string]any{"in": c.graph})
		gqlExpect(t, graph, "INVALID_INPUT", rest.Path())
		restMsg, _ := rest.Body["error"].(map[string]any)["message"].(string)
		errsList, _ := graph.Body["errors"].([]any)
		gqlMsg, _ := errsList[0].(map[string]any)["message"].(string)
		if restMsg != gqlMsg {
			t.Errorf("%s: the method surface says %q, GraphQL %q", c.name, restMsg, gqlMsg)
		}
		if rest.Path() == "" {
			t.Errorf("%s: no path: %s", c.name, rest.Raw)
		}
	}
}
