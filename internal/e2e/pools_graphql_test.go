package e2e

import (
	"fmt"
	"strings"
	"testing"

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
	q := `query($t: String!) { tenant(tenantId: $t) { pools(first: 50) { totalCount edges { node { poolId tenantId name offers { toTenantId quota { gpus } } } } } } }`
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
