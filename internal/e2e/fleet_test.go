package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/bettercompute/computed/internal/ids"
	"github.com/bettercompute/computed/internal/inventory"
	"github.com/bettercompute/computed/internal/pki"
	"github.com/bettercompute/computed/internal/testkit"
	"github.com/bettercompute/computed/internal/testkit/tpmsim"
)

// h100 is the realistic 8-GPU report the fleet tests and benchmarks use.
func h100(t testing.TB) map[string]any {
	t.Helper()
	b, err := os.ReadFile("../inventory/testdata/h100-node.json")
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// machineReport is the H100 report with device ids unique to machine n.
func machineReport(t testing.TB, n int) map[string]any {
	r := h100(t)
	for i, g := range r["gpus"].([]any) {
		g.(map[string]any)["uuid"] = fmt.Sprintf("GPU-%08x-0000-4000-8000-%012x", n, i)
	}
	for i, d := range r["disks"].([]any) {
		d.(map[string]any)["wwn"] = fmt.Sprintf("eui.%08x%08x", n, i)
	}
	for i, c := range r["nics"].([]any) {
		c.(map[string]any)["mac"] = fmt.Sprintf("02:%02x:%02x:%02x:%02x:%02x", i, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
	return r
}

// seedFleet makes pools of nodes for the fleet query: the pools through
// pools.create, the nodes and their inventory written in bulk (joining
// thousands of machines over HTTP would only make the test slow; the
// reads under test are the same). Every node has two snapshots.
func seedFleet(t testing.TB, e *testkit.Env, admin, tenantID string, pools, perPool int) {
	t.Helper()
	ctx := context.Background()
	var nodeIDs, poolIDs []string
	for p := 0; p < pools; p++ {
		pool := e.Pool(admin, tenantID, fmt.Sprintf("pool-%02d", p))
		for n := 0; n < perPool; n++ {
			nodeIDs, poolIDs = append(nodeIDs, ids.New(ids.Node)), append(poolIDs, pool)
		}
	}
	if _, err := e.DB.ExecContext(ctx, `INSERT INTO nodes (node_id, tenant_id, pool_id, name, attestor, system_uuid, serial,
			csr_fingerprint, certificate, cert_expires_at)
		SELECT n, $3, p, 'gpu-' || ord, 'token', gen_random_uuid()::text, 'SN' || ord, md5(n), 'fixture', now() + interval '1 year'
		FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS x(n, p, ord)`, nodeIDs, poolIDs, tenantID); err != nil {
		t.Fatal(err)
	}
	var snapIDs, snapNodes, hashes, sections []string
	latest := make([]string, len(nodeIDs))
	for i, node := range nodeIDs {
		for v := 0; v < 2; v++ {
			r := machineReport(t, i)
			if v == 1 {
				r["drivers"].(map[string]any)["nvidia"] = "570.124.06"
			}
			raw, _ := json.Marshal(r)
			_, canonical, hash, err := inventory.Decode(raw)
			if err != nil {
				t.Fatal(err)
			}
			id := ids.New(ids.Inventory)
			snapIDs, snapNodes, hashes, sections = append(snapIDs, id), append(snapNodes, node), append(hashes, hash), append(sections, string(canonical))
			latest[i] = id
		}
	}
	if _, err := e.DB.ExecContext(ctx, `INSERT INTO inventory_snapshots (snapshot_id, node_id, hash, sections, collected_at)
		SELECT s, n, h, j::json, now() FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) AS x(s, n, h, j)`,
		snapIDs, snapNodes, hashes, sections); err != nil {
		t.Fatal(err)
	}
	if _, err := e.DB.ExecContext(ctx, `UPDATE nodes SET latest_snapshot_id = x.s FROM unnest($1::text[], $2::text[]) AS x(n, s)
		WHERE nodes.node_id = x.n`, nodeIDs, latest); err != nil {
		t.Fatal(err)
	}
}

const fleetQuery = `query Fleet($t: String!) { tenant(tenantId: $t) { tenantId name
  pools(first: 50) { totalCount edges { node { poolId name gpuModel sharingMode state
    nodes(first: 40) { totalCount edges { node { nodeId name state labels
      inventory { snapshotId hash collectedAt gpus { uuid index model memoryMiB migMode } } } } } } } } } }`

// The fleet query batches one statement per level: the same count for 2
// pools of 2 nodes as for 50 pools of 40, and at most 6.
func TestFleetQueryStatementCount(t *testing.T) {
	// Not parallel: counted batches need the CPU to themselves.
	count := func(pools, perPool int) int64 {
		e := testkit.Start(t)
		admin, _, _ := e.Tenant("acme")
		seedFleet(t, e, admin, "acme", pools, perPool)
		best := int64(-1)
		for i := 0; i < 3; i++ {
			r := e.GraphQL(admin, fleetQuery, map[string]any{"t": "acme"})
			if r.Status != 200 || r.Body["errors"] != nil {
				t.Fatalf("%.2000s", r.Raw)
			}
			ps := r.Body["data"].(map[string]any)["tenant"].(map[string]any)["pools"].(map[string]any)
			if int(ps["totalCount"].(float64)) != pools {
				t.Fatalf("pools: %v", ps["totalCount"])
			}
			for _, pe := range ps["edges"].([]any) {
				ns := pe.(map[string]any)["node"].(map[string]any)["nodes"].(map[string]any)
				if len(ns["edges"].([]any)) != perPool {
					t.Fatalf("nodes per pool: %d", len(ns["edges"].([]any)))
				}
				for _, ne := range ns["edges"].([]any) {
					inv := ne.(map[string]any)["node"].(map[string]any)["inventory"].(map[string]any)
					if len(inv["gpus"].([]any)) != 8 {
						t.Fatalf("gpus: %v", inv)
					}
				}
			}
			if n := e.Statements(r); best < 0 || n < best {
				best = n
			}
		}
		return best
	}
	small, large := count(2, 2), count(50, 40)
	if small != large {
		t.Fatalf("statements: %d for 2x2, %d for 50x40", small, large)
	}
	// Authentication with the role bindings and the bound tenants (one
	// statement), pools page, nodes pages, latest snapshots.
	if small > 4 {
		t.Fatalf("%d statements for the fleet query, want at most 4", small)
	}
	t.Logf("%d statements", small)
}

// A node joins with each attestor, reports twice with a change, and one
// dashboard query returns tenant, pools, nodes, latest inventory and diff.
func TestDashboardQueryAfterJoinsAndReports(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	admin, _, viewer := e.Tenant("acme")
	other, _, _ := e.Tenant("other")
	pool := e.Pool(admin, "acme", "gpu-a")
	tok := e.JoinToken(admin, "acme", pool, 10)

	joined := map[string]string{} // attestor -> credential
	nodeOf := map[string]string{}
	// token: admitted at once.
	m := testkit.NewMachine(t)
	r := e.Must(e.Call("", "nodes/join", m.JoinBody(tok)))
	joined["token"], nodeOf["token"] = r.Str("credential"), r.Str("nodeId")
	// discovery: deferred, then admitted once the machine is registered.
	m = testkit.NewMachine(t)
	b := joinBody(tok, m, "discovery")
	if r := e.Must(e.Call("", "nodes/join", b)); r.Str("status") != "pending" {
		t.Fatalf("discovery: %s", r.Raw)
	}
	e.Must(e.Call(admin, "machines/register", map[string]any{"tenantId": "acme", "poolId": pool, "systemUuid": m.SystemUUID}))
	m2 := testkit.NewMachine(t)
	m2.SystemUUID = m.SystemUUID
	r = e.Must(e.Call("", "nodes/join", joinBody(tok, m2, "discovery")))
	joined["discovery"], nodeOf["discovery"] = r.Str("credential"), r.Str("nodeId")
	// tpm: proven, deferred, approved, and the retry with the same CSR
	// (proven again) admitted.
	tm := newTPMMachine(t, tpmsim.Open(t, 81), "ecc", tpmsim.AKTemplateECC)
	p := e.Must(tm.exchange(t, e, tok))
	e.Must(e.Call(admin, "joinRequests/approve", map[string]any{"tenantId": "acme", "joinRequestId": p.Str("joinRequestId")}))
	r = e.Must(tm.exchange(t, e, tok))
	joined["tpm"], nodeOf["tpm"] = r.Str("credential"), r.Str("nodeId")
	for a, cred := range joined {
		if cred == "" || nodeOf[a] == "" {
			t.Fatalf("%s: not admitted", a)
		}
	}

	// Each node reports twice; the second report changes the driver and
	// loses a GPU.
	for i, a := range []string{"token", "discovery", "tpm"} {
		rep := machineReport(t, i)
		first := e.Must(e.Call(joined[a], "inventory/report", map[string]any{"nodeId": nodeOf[a], "sections": rep}))
		if first.Body["stored"] != true {
			t.Fatalf("first report: %s", first.Raw)
		}
		rep["drivers"].(map[string]any)["nvidia"] = "570.124.06"
		rep["gpus"] = rep["gpus"].([]any)[:7]
		if r := e.Must(e.Call(joined[a], "inventory/report", map[string]any{"nodeId": nodeOf[a], "sections": rep})); r.Body["stored"] != true {
			t.Fatalf("second report: %s", r.Raw)
		}
	}

	q := `query($t: String!) { tenant(tenantId: $t) { tenantId
	  pools(first: 10) { totalCount edges { node { id poolId name offers { edges { node { toTenantId } } }
	    joinRequests(first: 10) { totalCount edges { node { joinRequestId state attestor reasons } } }
	    nodes(first: 10) { totalCount edges { node { id nodeId state attestor hardware { systemUuid serial macs } pool { poolId }
	      inventory { snapshotId hash gpus { uuid model memoryMiB } disks { wwn slot sizeBytes } nics { mac speedMbps } drivers { name version } }
	      inventoryHistory(first: 5) { totalCount edges { node { snapshotId } } }
	      inventoryDiff { from to changes { type deviceId before after } } } } } } } } } }`
	res := e.GraphQL(viewer, q, map[string]any{"t": "acme"})
	if res.Status != 200 || res.Body["errors"] != nil {
		t.Fatalf("%s", res.Raw)
	}
	tenant := res.Body["data"].(map[string]any)["tenant"].(map[string]any)
	pe := tenant["pools"].(map[string]any)["edges"].([]any)[0].(map[string]any)["node"].(map[string]any)
	if jr := pe["joinRequests"].(map[string]any); jr["totalCount"].(float64) != 2 {
		t.Fatalf("join requests: %v", jr)
	}
	nodesConn := pe["nodes"].(map[string]any)
	if nodesConn["totalCount"].(float64) != 3 {
		t.Fatalf("nodes: %v", nodesConn["totalCount"])
	}
	for _, ne := range nodesConn["edges"].([]any) {
		n := ne.(map[string]any)["node"].(map[string]any)
		inv := n["inventory"].(map[string]any)
		if len(inv["gpus"].([]any)) != 7 || len(inv["drivers"].([]any)) == 0 {
			t.Fatalf("inventory: %v", inv)
		}
		if h := n["inventoryHistory"].(map[string]any); h["totalCount"].(float64) != 2 {
			t.Fatalf("history: %v", h)
		}
		d := n["inventoryDiff"].(map[string]any)
		types := []string{}
		for _, c := range d["changes"].([]any) {
			types = append(types, c.(map[string]any)["type"].(string))
		}
		if strings.Join(types, ",") != "GPU_MISSING,DRIVER_CHANGED" || d["from"] == "" || d["to"] != inv["snapshotId"] {
			t.Fatalf("diff: %v", d)
		}
		// node(id) finds it again; another tenant cannot.
		id := n["id"].(string)
		if g := e.GraphQL(viewer, `query($id: ID!) { node(id: $id) { ... on ComputeNode { nodeId } } }`, map[string]any{"id": id}); g.Body["data"].(map[string]any)["node"] == nil {
			t.Fatalf("node(id): %s", g.Raw)
		}
		if g := e.GraphQL(other, `query($id: ID!) { node(id: $id) { ... on ComputeNode { nodeId } } }`, map[string]any{"id": id}); g.Body["data"].(map[string]any)["node"] != nil {
			t.Fatalf("other tenant reads node(id): %s", g.Raw)
		}
	}
	// A tenant the pool is offered to sees the pool but neither its nodes
	// nor its join requests.
	e.Must(e.Call(admin, "pools/offer", map[string]any{"tenantId": "acme", "poolId": pool, "toTenantId": "other", "quota": map[string]any{"gpus": 8, "instances": 1}}))
	o := e.GraphQL(other, `{ tenant(tenantId: "other") { pools(first: 5) { edges { node { poolId nodes(first: 5) { totalCount } joinRequests(first: 5) { totalCount } } } } } }`, nil)
	pools := o.Body["data"].(map[string]any)["tenant"].(map[string]any)["pools"].(map[string]any)["edges"].([]any)
	if len(pools) != 1 {
		t.Fatalf("offered pools: %s", o.Raw)
	}
	op := pools[0].(map[string]any)["node"].(map[string]any)
	if op["nodes"].(map[string]any)["totalCount"].(float64) != 0 || op["joinRequests"].(map[string]any)["totalCount"].(float64) != 0 {
		t.Fatalf("offered tenant sees nodes: %s", o.Raw)
	}
}

// Dashboards change nodes and pools through mutations that call the same
// methods (decisions, validation, audit).
func TestNodeAndPoolMutations(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	admin, member, _ := e.Tenant("acme")
	pool := e.Pool(admin, "acme", "gpu-a")
	nodeID, _ := e.Node(admin, "acme", pool)
	mut := func(tok, q string, vars map[string]any) map[string]any {
		t.Helper()
		r := e.GraphQL(tok, q, vars)
		if r.Status != 200 || r.Body["errors"] != nil {
			t.Fatalf("%s", r.Raw)
		}
		return r.Body["data"].(map[string]any)
	}
	d := mut(admin, `mutation($in: UpdateNodeInput!) { updateNode(input: $in) { node { name labels rowVersion } } }`,
		map[string]any{"in": map[string]any{"tenantId": "acme", "nodeId": nodeID, "name": "gpu-a-01", "labels": map[string]any{"rack": "r1"}}})
	if n := d["updateNode"].(map[string]any)["node"].(map[string]any); n["name"] != "gpu-a-01" || n["labels"].(map[string]any)["rack"] != "r1" {
		t.Fatalf("updateNode: %v", n)
	}
	// The graph's batch reads write the stored labels as they are: the same
	// object through a pool's nodes and by id.
	d = mut(admin, `query($n: String!) { tenant(tenantId: "acme") { computeNode(nodeId: $n) { labels }
		pools(first: 5) { edges { node { nodes(first: 5) { edges { node { labels } } } } } } } }`, map[string]any{"n": nodeID})
	byID := d["tenant"].(map[string]any)["computeNode"].(map[string]any)["labels"]
	inPool := nodesOf(t, nodesOf(t, dig(t, d, "tenant", "pools"))[0]["nodes"])[0]["labels"]
	if fmt.Sprint(byID) != "map[rack:r1]" || fmt.Sprint(inPool) != "map[rack:r1]" {
		t.Fatalf("labels through the graph's reads: %v, %v", byID, inPool)
	}
	d = mut(admin, `mutation($in: ChangeNodeInput!) { cordonNode(input: $in) { node { state } } }`,
		map[string]any{"in": map[string]any{"tenantId": "acme", "nodeId": nodeID}})
	if d["cordonNode"].(map[string]any)["node"].(map[string]any)["state"] != "CORDONED" {
		t.Fatalf("cordon: %v", d)
	}
	r := e.GraphQL(member, `mutation($in: ChangeNodeInput!) { uncordonNode(input: $in) { node { state } } }`,
		map[string]any{"in": map[string]any{"tenantId": "acme", "nodeId": nodeID}})
	if code := r.Body["errors"].([]any)[0].(map[string]any)["extensions"].(map[string]any)["code"]; code != "PERMISSION_DENIED" {
		t.Fatalf("member uncordons: %s", r.Raw)
	}
	d = mut(admin, `mutation($in: CreateJoinTokenInput!) { createJoinToken(input: $in) { secret joinToken { joinTokenId maxUses state } } }`,
		map[string]any{"in": map[string]any{"tenantId": "acme", "poolId": pool, "maxUses": 3}})
	jt := d["createJoinToken"].(map[string]any)["joinToken"].(map[string]any)
	if jt["maxUses"].(float64) != 3 {
		t.Fatalf("join token: %v", d)
	}
	d = mut(admin, `mutation($in: RevokeJoinTokenInput!) { revokeJoinToken(input: $in) { joinToken { state } } }`,
		map[string]any{"in": map[string]any{"tenantId": "acme", "joinTokenId": jt["joinTokenId"]}})
	if d["revokeJoinToken"].(map[string]any)["joinToken"].(map[string]any)["state"] != "REVOKED" {
		t.Fatalf("revoke: %v", d)
	}
	d = mut(admin, `mutation($in: UpdatePoolInput!) { updatePool(input: $in) { pool { name policy rowVersion } } }`,
		map[string]any{"in": map[string]any{"tenantId": "acme", "poolId": pool, "policy": map[string]any{"maxNodes": 40}, "expectedVersion": 1}})
	if p := d["updatePool"].(map[string]any)["pool"].(map[string]any); p["rowVersion"].(float64) != 2 {
		t.Fatalf("updatePool: %v", p)
	}
	d = mut(admin, `mutation($in: ChangeNodeInput!) { removeNode(input: $in) { node { state } } }`,
		map[string]any{"in": map[string]any{"tenantId": "acme", "nodeId": nodeID}})
	if d["removeNode"].(map[string]any)["node"].(map[string]any)["state"] != "REMOVED" {
		t.Fatalf("remove: %v", d)
	}
	d = mut(admin, `mutation($in: RegisterMachineInput!) { registerMachine(input: $in) { machine { machineId mac } } }`,
		map[string]any{"in": map[string]any{"tenantId": "acme", "poolId": pool, "mac": "02:00:00:00:00:aa"}})
	mach := d["registerMachine"].(map[string]any)["machine"].(map[string]any)
	if mach["mac"] != "02:00:00:00:00:aa" {
		t.Fatalf("registerMachine: %v", d)
	}
	d = mut(admin, `mutation($in: ForgetMachineInput!) { forgetMachine(input: $in) { removed } }`,
		map[string]any{"in": map[string]any{"tenantId": "acme", "machineId": mach["machineId"]}})
	if d["forgetMachine"].(map[string]any)["removed"].(float64) != 1 {
		t.Fatalf("forgetMachine: %v", d)
	}
	_, hash, _ := pki.NewEK()
	d = mut(admin, `mutation($in: AllowTpmKeyInput!) { allowTpmKey(input: $in) { key { ekHash description } } }`,
		map[string]any{"in": map[string]any{"tenantId": "acme", "poolId": pool, "ekHash": hash, "description": "rack 1"}})
	if d["allowTpmKey"].(map[string]any)["key"].(map[string]any)["ekHash"] != hash {
		t.Fatalf("allowTpmKey: %v", d)
	}
	d = mut(admin, `mutation($in: DisallowTpmKeyInput!) { disallowTpmKey(input: $in) { removed } }`,
		map[string]any{"in": map[string]any{"tenantId": "acme", "poolId": pool, "ekHash": hash}})
	if d["disallowTpmKey"].(map[string]any)["removed"].(float64) != 1 {
		t.Fatalf("disallowTpmKey: %v", d)
	}
	d = mut(admin, `mutation($in: ArchivePoolInput!) { archivePool(input: $in) { pool { state } } }`,
		map[string]any{"in": map[string]any{"tenantId": "acme", "poolId": pool}})
	if d["archivePool"].(map[string]any)["pool"].(map[string]any)["state"] != "ARCHIVED" {
		t.Fatalf("archive: %v", d)
	}
}

// The graph reads a snapshot's sections from the database once: later
// queries take them, parsed and as stored, from the cache by snapshot id,
// and answer the same.
func TestSnapshotSectionsFromCache(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	admin, _, _ := e.Tenant("acme")
	seedFleet(t, e, admin, "acme", 1, 2)
	q := `{ tenant(tenantId: "acme") { pools(first: 1) { edges { node { nodes(first: 2) { edges { node {
	  inventory { snapshotId sections gpus { uuid } drivers { name version } } } } } } } } } }`
	first := e.GraphQL(admin, q, nil)
	if first.Status != 200 || first.Body["errors"] != nil || !strings.Contains(string(first.Raw), `"gpus":[{"uuid"`) {
		t.Fatalf("%.2000s", first.Raw)
	}
	for i := 0; i < 2; i++ {
		if again := e.GraphQL(admin, q, nil); string(again.Raw) != string(first.Raw) {
			t.Fatalf("read %d differs:\n%.2000s\n%.2000s", i+2, first.Raw, again.Raw)
		}
	}
}
