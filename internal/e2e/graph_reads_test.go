package e2e

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bettercompute/computed/graph"
	"github.com/bettercompute/computed/internal/relay"
	"github.com/bettercompute/computed/internal/server"
	"github.com/bettercompute/computed/internal/testkit"
	"github.com/bettercompute/computed/internal/testkit/logbuf"
	"github.com/bettercompute/computed/internal/testkit/wait"
)

// crossTenantWorld is what the graph's read tests look at: acme owns two
// pools (one offered to guest), a node with inventory and a workflow, a
// project, a private and a public profile (the public one with a private
// second version); guest is offered one pool; other holds nothing of acme.
type crossTenantWorld struct {
	e                   *testkit.Env
	acme, guest, other  tenant
	offered, private    string // pool ids
	node, cred          string
	snapshot, workflow  string
	instance            string
	project             string
	privProf, pubProf   string // profile ids (version 1)
	globalIDs           map[string][]string
	allIDs              []string
	visibleTo           map[string]map[string]bool // actor name -> global id -> visible
	actors              map[string]string          // actor name -> token
	offeredID, publicID string
}

func newCrossTenantWorld(t *testing.T, e *testkit.Env) *crossTenantWorld {
	w := &crossTenantWorld{e: e, acme: newTenant(t, e, "acme"), guest: newTenant(t, e, "guest"), other: newTenant(t, e, "other")}
	admin := w.acme.Admin.Token
	w.offered = e.Pool(admin, "acme", "offered")
	w.private = vpsPool(t, e, admin, "acme", "private", nil) // a VPS pool, for an instance
	e.Must(e.Call(admin, "pools/offer", map[string]any{"tenantId": "acme", "poolId": w.offered, "toTenantId": "guest",
		"quota": map[string]any{"gpus": 1, "instances": 1}}))
	w.node, w.cred = e.Node(admin, "acme", w.offered)
	w.snapshot = e.Must(e.Call(w.cred, "inventory/report", map[string]any{"nodeId": w.node, "sections": machineReport(t, 1)})).
		Body["snapshot"].(map[string]any)["id"].(string)
	// A join waiting for approval: a machine no one registered.
	joinReq := e.Must(e.Call("", "nodes/join", joinBody(e.JoinToken(admin, "acme", w.offered, 1), testkit.NewMachine(t), "discovery")))
	if joinReq.Str("status") != "pending" {
		t.Fatalf("discovery join: %s", joinReq.Raw)
	}
	joinTokens := items(t, e.Must(e.Call(admin, "joinTokens/list", map[string]any{"tenantId": "acme", "poolId": w.offered})))
	w.project = newProject(t, e, admin, "acme", "web")
	w.privProf, w.pubProf = "acme-private", "acme-public"
	e.Must(createProfile(t, e, admin, "acme", profileDoc(w.privProf, 1), "private"))
	e.Must(createProfile(t, e, admin, "acme", profileDoc(w.pubProf, 1), "public"))
	e.Must(createProfile(t, e, admin, "acme", profileDoc(w.pubProf, 2), "private"))
	w.workflow = e.Must(e.Call(admin, "workflows/create", map[string]any{"tenantId": "acme", "nodeId": w.node, "profileId": w.privProf})).Str("workflowId")
	w.instance = e.Must(e.Call(w.acme.Member.Token, "instances/create", instanceIn("acme", w.private, "vm", 0))).Str("instanceId")
	reservation := e.Must(e.Call(w.acme.Member.Token, "reservations/create", rsvIn("acme", w.private, 1, time.Hour, 2*time.Hour))).Str("reservationId")

	w.globalIDs = map[string][]string{
		"Tenant":            {relay.ID("Tenant", "acme")},
		"Project":           {relay.ID("Project", w.project)},
		"Pool":              {relay.ID("Pool", w.offered), relay.ID("Pool", w.private)},
		"ComputeNode":       {relay.ID("ComputeNode", w.node)},
		"InventorySnapshot": {relay.ID("InventorySnapshot", w.snapshot)},
		"Profile":           {relay.ID("Profile", "acme", w.privProf, "1"), relay.ID("Profile", "acme", w.pubProf, "1"), relay.ID("Profile", "acme", w.pubProf, "2")},
		"Workflow":          {relay.ID("Workflow", "acme", w.workflow)},
		"Instance":          {relay.ID("Instance", w.instance)},
		"JoinRequest":       {relay.ID("JoinRequest", joinReq.Str("joinRequestId"))},
		"JoinToken":         {relay.ID("JoinToken", joinTokens[0]["joinTokenId"].(string))},
		"PoolOffer":         {relay.ID("PoolOffer", w.offered, "guest")},
		"Reservation":       {relay.ID("Reservation", reservation)},
	}
	w.offeredID, w.publicID = relay.ID("Pool", w.offered), relay.ID("Profile", "acme", w.pubProf, "1")
	for _, ids := range w.globalIDs {
		w.allIDs = append(w.allIDs, ids...)
	}
	sort.Strings(w.allIDs)
	w.actors = map[string]string{
		"operator": e.Operator, "acme admin": admin, "acme member": w.acme.Member.Token, "acme viewer": w.acme.Viewer.Token,
		"guest admin": w.guest.Admin.Token, "guest viewer": w.guest.Viewer.Token, "other admin": w.other.Admin.Token,
		"acme's node": w.cred,
	}
	// Who may read what: acme's readers and the operator everything;
	// guest the pool offered to it and the public version; other the
	// public version; a node credential nothing.
	w.visibleTo = map[string]map[string]bool{}
	for name := range w.actors {
		v := map[string]bool{}
		for _, id := range w.allIDs {
			switch {
			case name == "operator" || strings.HasPrefix(name, "acme "):
				v[id] = true
			case strings.HasPrefix(name, "guest "):
				v[id] = id == w.offeredID || id == w.publicID
			case name == "other admin":
				v[id] = id == w.publicID
			}
		}
		w.visibleTo[name] = v
	}
	return w
}

// nodeFields asks node(id:) for every type's id fields.
const nodeFields = `__typename
	... on Tenant { tenantId } ... on Project { projectId tenantId } ... on Pool { poolId tenantId }
	... on ComputeNode { nodeId tenantId } ... on InventorySnapshot { snapshotId nodeId }
	... on Profile { profileId profileVersion tenantId } ... on Workflow { workflowId tenantId nodeId }
	... on Instance { instanceId tenantId poolId }
	... on JoinRequest { joinRequestId poolId tenantId } ... on JoinToken { joinTokenId poolId tenantId }
	... on PoolOffer { poolId toTenantId } ... on Reservation { reservationId tenantId poolId }`

// The permission matrix of the graph's reads, over every type the schema
// says implements Node: through node(id:) a caller who may read an object
// gets all of it, anyone else null and nothing else; the same holds on the
// paths that reach another tenant's objects (offered pools, public
// profiles, a node's workflows).
func TestGraphReadMatrix(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	w := newCrossTenantWorld(t, e)

	// Generated from the schema: a type implementing Node without an id in
	// the world fails here, so a new type gets its row.
	schema := graph.NewExecutableSchema(graph.Config{}).Schema()
	for _, def := range schema.GetPossibleTypes(schema.Types["Node"]) {
		if len(w.globalIDs[def.Name]) == 0 {
			t.Errorf("type %s implements Node but the read matrix has no object of it: add one to crossTenantWorld", def.Name)
		}
	}

	// node(id:) for every id and every caller, in one query per caller.
	var q strings.Builder
	q.WriteString("{")
	for i, id := range w.allIDs {
		fmt.Fprintf(&q, " n%d: node(id: %q) { id %s }", i, id, nodeFields)
	}
	q.WriteString(" }")
	for name, token := range w.actors {
		r := e.GraphQL(token, q.String(), nil)
		data, _ := r.Body["data"].(map[string]any)
		if name == "acme's node" {
			// A node credential reads nothing: null, or the request refused.
			for i := range w.allIDs {
				if data != nil && data[fmt.Sprintf("n%d", i)] != nil {
					t.Errorf("a node credential read %s: %s", w.allIDs[i], r.Raw)
				}
			}
			continue
		}
		if r.Status != 200 || r.Body["errors"] != nil {
			t.Fatalf("%s: %s", name, r.Raw)
		}
		for i, id := range w.allIDs {
			got, _ := data[fmt.Sprintf("n%d", i)].(map[string]any)
			typ, key, _ := relay.Parse(id)
			switch {
			case w.visibleTo[name][id] && (got == nil || got["id"] != id || got["__typename"] != typ):
				t.Errorf("%s cannot read %s %v: %v", name, typ, key, got)
			case !w.visibleTo[name][id] && got != nil:
				t.Errorf("%s reads %s %v: %v", name, typ, key, got)
			}
		}
	}

	// A workflow's id names its tenant: the same workflow under another
	// tenant's name is no object.
	r := e.GraphQL(w.acme.Admin.Token, fmt.Sprintf(`{ node(id: %q) { id } }`, relay.ID("Workflow", "guest", w.workflow)), nil)
	if gqlOK(t, r)["node"] != nil {
		t.Fatalf("a workflow under another tenant's id: %s", r.Raw)
	}
	// An object has one id: another spelling of a profile's version is none.
	for _, v := range []string{"01", "+1", "0001", " 1", "1.0"} {
		r := e.GraphQL(w.acme.Admin.Token, fmt.Sprintf(`{ node(id: %q) { id } }`, relay.ID("Profile", "acme", w.privProf, v)), nil)
		if gqlOK(t, r)["node"] != nil {
			t.Fatalf("profile version %q: %s", v, r.Raw)
		}
	}

	// viewer.tenants: the tenants the caller holds a role on, all of them
	// for the operator (through the predicate tenants.list uses).
	tenantsQ := `{ viewer { tenants(first: 10) { totalCount edges { node { tenantId } } } } }`
	if raw := string(mustJSON(t, gqlOK(t, e.GraphQL(w.guest.Viewer.Token, tenantsQ, nil)))); raw != `{"viewer":{"tenants":{"edges":[{"node":{"tenantId":"guest"}}],"totalCount":1}}}` {
		t.Fatalf("guest's tenants: %s", raw)
	}
	if raw := string(mustJSON(t, gqlOK(t, e.GraphQL(e.Operator, tenantsQ, nil)))); !strings.Contains(raw, `"totalCount":3`) {
		t.Fatalf("the operator's tenants: %s", raw)
	}
	if l := items(t, e.Must(e.Call(w.other.Admin.Token, "tenants/list", map[string]any{}))); len(l) != 1 || l[0]["tenantId"] != "other" {
		t.Fatalf("other's tenants.list: %v", l)
	}

	// Offered pools: guest reads the pool, and nothing of the owner's view
	// of it (nodes, join requests, offers); acme reads everything.
	poolsQ := `query($t: String!) { tenant(tenantId: $t) { pools(first: 10) { totalCount edges { node { poolId
		nodes(first: 5) { totalCount edges { node { nodeId } } } joinRequests(first: 5) { totalCount } offers { totalCount edges { node { toTenantId } } }
		pendingRequests: joinRequests(first: 5, state: PENDING) { totalCount edges { node { state } } }
		joinTokens(first: 5) { totalCount edges { node { joinTokenId poolId state } } } } } } } }`
	type poolView struct {
		Tenant struct {
			Pools struct {
				TotalCount int
				Edges      []struct {
					Node struct {
						PoolID string
						Nodes  struct {
							TotalCount int
							Edges      []any
						}
						JoinRequests    struct{ TotalCount int }
						PendingRequests struct {
							TotalCount int
							Edges      []struct{ Node struct{ State string } }
						}
						Offers struct {
							TotalCount int
							Edges      []struct{ Node struct{ ToTenantID string } }
						}
						JoinTokens struct {
							TotalCount int
							Edges      []struct {
								Node struct{ JoinTokenID, PoolID, State string }
							}
						}
					}
				}
			}
		}
	}
	read := func(token, tenantID string) poolView {
		var v poolView
		if err := json.Unmarshal(mustJSON(t, gqlOK(t, e.GraphQL(token, poolsQ, map[string]any{"t": tenantID}))), &v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, tok := range []string{w.guest.Admin.Token, w.guest.Viewer.Token} {
		v := read(tok, "guest")
		if v.Tenant.Pools.TotalCount != 1 || len(v.Tenant.Pools.Edges) != 1 || v.Tenant.Pools.Edges[0].Node.PoolID != w.offered {
			t.Fatalf("guest's pools: %+v", v)
		}
		p := v.Tenant.Pools.Edges[0].Node
		if p.Nodes.TotalCount != 0 || len(p.Nodes.Edges) != 0 || p.Offers.TotalCount != 0 || len(p.Offers.Edges) != 0 || p.JoinTokens.TotalCount != 0 || len(p.JoinTokens.Edges) != 0 {
			t.Fatalf("guest sees the owner's view of the offered pool: %+v", p)
		}
	}
	for _, tok := range []string{w.acme.Admin.Token, w.acme.Viewer.Token} {
		v := read(tok, "acme")
		if v.Tenant.Pools.TotalCount != 2 {
			t.Fatalf("acme's pools: %+v", v)
		}
		for _, edge := range v.Tenant.Pools.Edges {
			if p := edge.Node; p.PoolID == w.offered && (p.Nodes.TotalCount != 1 || len(p.Nodes.Edges) != 1 || p.Offers.TotalCount != 1 || len(p.Offers.Edges) != 1 || p.Offers.Edges[0].Node.ToTenantID != "guest") {
				t.Fatalf("acme's offered pool: %+v", p)
			}
			// Its join tokens, as joinTokens.list gives them.
			p := edge.Node
			listed := items(t, e.Must(e.Call(tok, "joinTokens/list", map[string]any{"tenantId": "acme", "poolId": p.PoolID})))
			if p.JoinTokens.TotalCount != len(listed) || len(p.JoinTokens.Edges) != len(listed) || (p.PoolID == w.offered && len(listed) == 0) {
				t.Fatalf("acme's pool %s: %d join tokens listed, the graph %+v", p.PoolID, len(listed), p.JoinTokens)
			}
			pending := items(t, e.Must(e.Call(tok, "joinRequests/list", map[string]any{"tenantId": "acme", "poolId": p.PoolID, "state": "pending"})))
			if p.PendingRequests.TotalCount != len(pending) || len(p.PendingRequests.Edges) != len(pending) || (p.PoolID == w.offered && len(pending) != 1) {
				t.Fatalf("acme's pool %s: %d pending join requests listed, the graph %+v", p.PoolID, len(pending), p.PendingRequests)
			}
			for _, r := range p.PendingRequests.Edges {
				if r.Node.State != "PENDING" {
					t.Fatalf("acme's pool %s: a %s request under state: PENDING", p.PoolID, r.Node.State)
				}
			}
			for k, l := range listed {
				if n := p.JoinTokens.Edges[k].Node; n.JoinTokenID != l["joinTokenId"] || n.PoolID != p.PoolID || n.State != strings.ToUpper(l["state"].(string)) {
					t.Fatalf("acme's pool %s: join token %d is %+v, listed %v", p.PoolID, k, n, l)
				}
			}
		}
	}
	// Naming a tenant the caller holds no role on is PERMISSION_DENIED.
	gqlExpect(t, e.GraphQL(w.guest.Admin.Token, poolsQ, map[string]any{"t": "acme"}), "PERMISSION_DENIED", anyPath)

	// Public profiles: other lists acme's public version and no private
	// one, and its versions are the public ones; acme reads both versions.
	profQ := `query($t: String!) { tenant(tenantId: $t) { profiles(first: 200) { edges { node { tenantId profileId profileVersion } } } } }`
	raw := string(mustJSON(t, gqlOK(t, e.GraphQL(w.other.Admin.Token, profQ, map[string]any{"t": "other"}))))
	if !strings.Contains(raw, `"profileId":"`+w.pubProf+`","profileVersion":1`) || strings.Contains(raw, w.privProf) ||
		strings.Contains(raw, `"profileId":"`+w.pubProf+`","profileVersion":2`) {
		t.Fatalf("other's profiles: %s", raw)
	}
	// Totals count what the caller may read: acme's three versions are in
	// acme's total, only the public one in other's; builtins in both.
	totalQ := `query($t: String!) { tenant(tenantId: $t) { profiles(first: 1) { totalCount } } }`
	total := func(token, tenantID string) int {
		d := gqlOK(t, e.GraphQL(token, totalQ, map[string]any{"t": tenantID}))
		return int(d["tenant"].(map[string]any)["profiles"].(map[string]any)["totalCount"].(float64))
	}
	if a, o := total(w.acme.Viewer.Token, "acme"), total(w.other.Admin.Token, "other"); a-o != 2 || o < 1 {
		t.Fatalf("profiles totalCount: acme %d, other %d", a, o)
	}
	versionsQ := fmt.Sprintf(`{ node(id: %q) { ... on Profile { versions(first: 10) { totalCount edges { node { profileVersion } } } } } }`, w.publicID)
	for token, want := range map[string]string{w.other.Admin.Token: `"totalCount":1`, w.acme.Viewer.Token: `"totalCount":2`} {
		if raw := string(mustJSON(t, gqlOK(t, e.GraphQL(token, versionsQ, nil)))); !strings.Contains(raw, want) {
			t.Fatalf("versions of the public profile: want %s, got %s", want, raw)
		}
	}

	// Workflows of acme's node: acme's readers get them, with their node
	// and profile; no one else reaches them (the node is hidden, and so is
	// the workflow by id, covered above).
	wfQ := fmt.Sprintf(`{ node(id: %q) { ... on ComputeNode { workflows(first: 5) { totalCount edges { node { workflowId
		node { nodeId } profile { profileId } } } } inventory { snapshotId } } } }`, relay.ID("ComputeNode", w.node))
	raw = string(mustJSON(t, gqlOK(t, e.GraphQL(w.acme.Viewer.Token, wfQ, nil))))
	if !strings.Contains(raw, `"totalCount":1`) || !strings.Contains(raw, `"nodeId":"`+w.node+`"`) ||
		!strings.Contains(raw, `"profileId":"`+w.privProf+`"`) || !strings.Contains(raw, `"snapshotId":"`+w.snapshot+`"`) {
		t.Fatalf("acme's node's workflows: %s", raw)
	}
	for _, tok := range []string{w.guest.Admin.Token, w.other.Admin.Token} {
		if raw := string(mustJSON(t, gqlOK(t, e.GraphQL(tok, wfQ, nil)))); raw != `{"node":null}` {
			t.Fatalf("another tenant reads acme's node: %s", raw)
		}
	}
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// PostgreSQL stopped in the middle of a query: the fields that needed it
// answer UNAVAILABLE, on the field, with the data that was read before;
// never an empty list or a null that looks like real data.
func TestGraphOutageIsAnErrorNotEmpty(t *testing.T) {
	t.Parallel()
	var logs logbuf.Buffer
	e := testkit.StartWith(t, testkit.Options{Proxy: true, Logs: &logs, Config: server.Config{RequestTimeout: time.Second}})
	w := newCrossTenantWorld(t, e)
	admin := w.acme.Admin.Token

	// stopAt freezes the database when the request sends its first
	// statement whose SQL holds one of marks, runs the query, thaws, and
	// waits until the database answers again.
	stopAt := func(token, query string, marks ...string) testkit.Resp {
		t.Helper()
		var once sync.Once
		e.OnStatement(func(sql string) {
			for _, m := range marks {
				if strings.Contains(sql, m) {
					once.Do(e.Proxy.Freeze)
				}
			}
		})
		r := e.GraphQL(token, query, nil)
		e.OnStatement(nil)
		e.Proxy.Thaw()
		wait.Eventually(t, 10*time.Second, func() error {
			if r := e.Call(admin, "tenants/get", map[string]any{"tenantId": "acme"}); r.Status != 200 {
				return fmt.Errorf("no recovery after the thaw: %d %s", r.Status, r.Raw)
			}
			return nil
		})
		return r
	}
	// unavailable checks that every error is UNAVAILABLE, that the fields
	// named failed, and returns data.
	unavailable := func(r testkit.Resp, fields ...string) map[string]any {
		t.Helper()
		list, _ := r.Body["errors"].([]any)
		if len(list) == 0 {
			t.Fatalf("no error during the outage: %s", r.Raw)
		}
		failed := map[string]bool{}
		for _, x := range list {
			m := x.(map[string]any)
			ext, _ := m["extensions"].(map[string]any)
			if ext["code"] != "UNAVAILABLE" {
				t.Fatalf("an error other than UNAVAILABLE during the outage: %s", r.Raw)
			}
			path, _ := m["path"].([]any)
			if len(path) > 0 {
				failed[fmt.Sprint(path[len(path)-1])] = true
			}
		}
		for _, f := range fields {
			if !failed[f] {
				t.Fatalf("%s did not fail during the outage: %s", f, r.Raw)
			}
		}
		data, _ := r.Body["data"].(map[string]any)
		if data == nil {
			t.Fatalf("no data for the rest of the query: %s", r.Raw)
		}
		return data
	}

	// The owner's view of a pool: the database stops once the pools are
	// read, before their nodes, join requests and offers.
	poolsQ := `{ viewer { kind } tenant(tenantId: "acme") { name pools(first: 5) { edges { node { poolId
		offers { edges { node { toTenantId } } } joinRequests(first: 5) { totalCount } nodes(first: 5) { totalCount edges { node { nodeId } } } } } } } }`
	r := stopAt(admin, poolsQ, "FROM pool_offers o WHERE o.pool_id = t.parent", "FROM join_requests r WHERE", "FROM nodes n WHERE n.pool_id")
	data := unavailable(r, "offers")
	if data["viewer"] == nil {
		t.Fatalf("the fields read before the outage are missing: %s", r.Raw)
	}
	if strings.Contains(string(r.Raw), `"totalCount":0`) || strings.Contains(string(r.Raw), `"edges":[]`) || strings.Contains(string(r.Raw), `"offers":[]`) {
		t.Fatalf("an empty list during the outage: %s", r.Raw)
	}

	// node(id:) of every type: each field is an error, none a null
	// without one.
	var q strings.Builder
	q.WriteString("{ viewer { kind }")
	var names []string
	bound := relay.ID("Tenant", "acme") // authentication read it with the token: no statement
	for i, id := range w.allIDs {
		fmt.Fprintf(&q, " n%d: node(id: %q) { id }", i, id)
		if id != bound {
			names = append(names, fmt.Sprintf("n%d", i))
		}
	}
	q.WriteString(" }")
	// (Authentication reads the role bindings with the token, before any
	// field: the database stops after it, at the first object read.)
	r = stopAt(admin, q.String(), "FROM tenants t", "FROM pools p", "FROM nodes n", "FROM projects pr",
		"FROM inventory_snapshots s", "FROM profiles p", "FROM workflows w", "FROM join_tokens", "FROM join_requests r", "FROM pool_offers o", "FROM reservations")
	unavailable(r, names...)

	// A node's children: the database stops once the node is read.
	nodeQ := fmt.Sprintf(`{ node(id: %q) { id ... on ComputeNode { inventory { hash } pool { poolId }
		inventoryHistory(first: 2) { totalCount } workflows(first: 2) { totalCount } } } }`, relay.ID("ComputeNode", w.node))
	r = stopAt(admin, nodeQ, "FROM inventory_snapshots s", "FROM pools p", "FROM workflows w")
	unavailable(r)
	if strings.Contains(string(r.Raw), `"totalCount":0`) {
		t.Fatalf("an empty list during the outage: %s", r.Raw)
	}

	// Every connection of a tenant: stopped at the first page batch (they
	// all select from their parents, page.Parents: an unnest, or one
	// tenant as a scalar), each field is an error.
	r = stopAt(admin, `{ viewer { kind } tenant(tenantId: "acme") { name projects(first: 5) { totalCount } tokens(first: 5) { totalCount }
		members(first: 5) { totalCount } pools(first: 5) { totalCount } profiles(first: 5) { totalCount } } }`, "AS t(parent)", "AS parent) AS t")
	unavailable(r, "projects", "tokens", "members", "pools", "profiles")

	// Tenant.profiles: stopped at the profiles batch.
	r = stopAt(admin, `{ viewer { kind } tenant(tenantId: "acme") { profiles(first: 5) { edges { node { profileId } } } } }`, "FROM profiles p")
	unavailable(r, "profiles")

	// Tenant.instances: stopped at the instances batch.
	r = stopAt(admin, `{ viewer { kind } tenant(tenantId: "acme") { instances(first: 5) { totalCount edges { node { instanceId events(first: 2) { totalCount } } } } } }`, "FROM instances i")
	unavailable(r, "instances")
	if strings.Contains(string(r.Raw), `"totalCount":0`) || strings.Contains(string(r.Raw), `"edges":[]`) {
		t.Fatalf("an empty list during the outage: %s", r.Raw)
	}

	// Tenant.auditLog and a pool's: stopped at the audit batch.
	r = stopAt(admin, `{ viewer { kind } tenant(tenantId: "acme") { auditLog(first: 5) { totalCount edges { node { auditId } } }
		pools(first: 5) { edges { node { auditLog(first: 2) { totalCount } } } } } }`, "FROM audit_log a")
	unavailable(r, "auditLog")
	if strings.Contains(string(r.Raw), `"totalCount":0`) || strings.Contains(string(r.Raw), `"edges":[]`) {
		t.Fatalf("an empty list during the outage: %s", r.Raw)
	}

	// After the outage the same queries read everything again.
	raw := string(mustJSON(t, gqlOK(t, e.GraphQL(admin, poolsQ, nil))))
	if !strings.Contains(raw, `"toTenantId":"guest"`) || !strings.Contains(raw, `"nodeId":"`+w.node+`"`) {
		t.Fatalf("after the outage: %s", raw)
	}
	if strings.Contains(logs.String(), `"level":"ERROR"`) {
		t.Fatalf("the outage was logged as an internal error:\n%s", logs.String())
	}
}

// A mutation is decided inside its transaction, on the role binding it
// rests on, locked: a revocation in flight when the mutation starts is
// waited for, and once it commits the mutation is PERMISSION_DENIED (a
// decision taken before the transaction would have let it write).
func TestMutationDecidedInItsTransaction(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	acme := newTenant(t, e, "acme")
	ctx := t.Context()
	tx, err := e.DB.BeginTxx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback() //nolint:errcheck // committed below
	// The revocation of the member's role, in flight.
	if _, err := tx.ExecContext(ctx, `SELECT 1 FROM role_bindings WHERE tenant_id = 'acme' AND principal_id = $1 FOR UPDATE`, acme.Member.PrincipalID); err != nil {
		t.Fatal(err)
	}
	done := make(chan testkit.Resp, 1)
	go func() {
		done <- e.Call(acme.Member.Token, "projects/create", map[string]any{"tenantId": "acme", "name": "racing"})
	}()
	select {
	case r := <-done:
		t.Fatalf("the mutation did not wait for the revocation in flight: %d %s", r.Status, r.Raw)
	case <-time.After(500 * time.Millisecond):
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM role_bindings WHERE tenant_id = 'acme' AND principal_id = $1`, acme.Member.PrincipalID); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		expect(t, r, "PERMISSION_DENIED", anyPath)
	case <-time.After(10 * time.Second):
		t.Fatal("the mutation hung")
	}
	var n int
	if err := e.DB.GetContext(ctx, &n, `SELECT count(*) FROM projects WHERE tenant_id = 'acme' AND name = 'racing'`); err != nil || n != 0 {
		t.Fatalf("the project was written after the revocation: %d %v", n, err)
	}
}

// An internal error's details.requestId finds its log line, which names
// the method or the operation and field: on both surfaces.
func TestInternalErrorsNameTheirLogLine(t *testing.T) {
	t.Parallel()
	var logs logbuf.Buffer
	e := testkit.StartWith(t, testkit.Options{Logs: &logs})
	acme := newTenant(t, e, "acme")
	e.Pool(acme.Admin.Token, "acme", "fra1")
	// A bug's stand-in: a table the pools' reads join is gone.
	if _, err := e.DB.ExecContext(t.Context(), `ALTER TABLE pool_offers RENAME TO pool_offers_gone`); err != nil {
		t.Fatal(err)
	}
	line := func(requestID string) map[string]any {
		t.Helper()
		for _, l := range strings.Split(logs.String(), "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(l), &m) == nil && m["requestId"] == requestID && m["msg"] == "internal error" {
				return m
			}
		}
		t.Fatalf("no internal error line with requestId %s:\n%s", requestID, logs.String())
		return nil
	}
	r := e.GraphQL(acme.Admin.Token, `query Fleet { tenant(tenantId: "acme") { name pools(first: 5) { totalCount } } }`, nil)
	list, _ := r.Body["errors"].([]any)
	if len(list) != 1 {
		t.Fatalf("graph: %s", r.Raw)
	}
	ext := list[0].(map[string]any)["extensions"].(map[string]any)
	id, _ := ext["details"].(map[string]any)["requestId"].(string)
	if ext["code"] != "INTERNAL" || id == "" || id != r.Header.Get("X-Request-Id") || strings.Contains(string(r.Raw), "pool_offers") {
		t.Fatalf("graph: %s", r.Raw)
	}
	if m := line(id); m["operation"] != "Fleet" || m["field"] != "tenant.pools" {
		t.Fatalf("the graph's log line does not name the operation and field: %v", m)
	}
	r = e.Call(acme.Admin.Token, "pools/list", map[string]any{"tenantId": "acme"})
	d, _ := r.Body["error"].(map[string]any)
	details, _ := d["details"].(map[string]any)
	id, _ = details["requestId"].(string)
	if r.Code() != "INTERNAL" || id == "" || id != r.Header.Get("X-Request-Id") {
		t.Fatalf("method surface: %d %s", r.Status, r.Raw)
	}
	if m := line(id); m["method"] != "pools.list" {
		t.Fatalf("the method surface's log line does not name the method: %v", m)
	}
}

// The same for a decision resting on a project relation: the owner's
// update waits for the removal of its ownership in flight, then is refused.
func TestProjectMutationWaitsForItsRelation(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	acme := newTenant(t, e, "acme")
	// The member creates the project and owns it; its role alone does not
	// grant compute:projects:manage.
	prj := newProject(t, e, acme.Member.Token, "acme", "web")
	ctx := t.Context()
	tx, err := e.DB.BeginTxx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback() //nolint:errcheck // committed below
	if _, err := tx.ExecContext(ctx, `SELECT 1 FROM project_relations WHERE project_id = $1 AND principal_id = $2 FOR UPDATE`, prj, acme.Member.PrincipalID); err != nil {
		t.Fatal(err)
	}
	done := make(chan testkit.Resp, 1)
	go func() {
		done <- e.Call(acme.Member.Token, "projects/update", map[string]any{"tenantId": "acme", "projectId": prj, "name": "renamed"})
	}()
	select {
	case r := <-done:
		t.Fatalf("the update did not wait for the removal in flight: %d %s", r.Status, r.Raw)
	case <-time.After(500 * time.Millisecond):
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM project_relations WHERE project_id = $1 AND principal_id = $2`, prj, acme.Member.PrincipalID); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		expect(t, r, "PERMISSION_DENIED", anyPath)
	case <-time.After(10 * time.Second):
		t.Fatal("the update hung")
	}
}

// Both surfaces read through the same visibility code, so for every caller
// they agree: a project is readable by projects.get exactly when node(id:)
// returns it, and a tenant's tokens, members and projects are listed by the
// method exactly when the graph's Tenant connection answers (same items).
// The project member without a tenant role reads the project but not the
// tenant's lists; once its relation is removed, neither surface shows the
// project.
func TestReadsAgreeOnBothSurfaces(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	w := newWorld(t, e)
	prj := w.project(t)
	gid := relay.ID("Project", prj)
	type who struct {
		name, token string
	}
	whos := []who{{"operator", e.Operator}, {"admin", w.acme.Admin.Token}, {"member", w.acme.Member.Token},
		{"viewer", w.acme.Viewer.Token}, {"owner", w.owner.Token}, {"projectMember", w.projectMember.Token},
		{"otherAdmin", w.evil.Admin.Token}, {"otherViewer", w.evil.Viewer.Token}}
	project := func(c who) (method, graph bool) {
		t.Helper()
		r := e.Call(c.token, "projects/get", map[string]any{"tenantId": "acme", "projectId": prj})
		if r.Status != 200 && r.Code() != "PERMISSION_DENIED" && r.Code() != "NOT_FOUND" {
			t.Fatalf("%s: projects.get: %d %s", c.name, r.Status, r.Raw)
		}
		d := gqlOK(t, e.GraphQL(c.token, `query($id: ID!) { node(id: $id) { ... on Project { projectId } } }`, map[string]any{"id": gid}))
		return r.Status == 200 && r.Str("projectId") == prj, d["node"] != nil
	}
	lists := map[string]struct{ method, field, key string }{
		"tokens":   {"tokens/list", "tokens { edges { node { tokenId } } }", "tokenId"},
		"members":  {"members/list", "members { edges { node { principalId } } }", "principalId"},
		"projects": {"projects/list", "projects { edges { node { projectId } } }", "projectId"},
	}
	for _, c := range whos {
		m, g := project(c)
		if m != g {
			t.Errorf("%s: projects.get says %v, node(id:) says %v", c.name, m, g)
		}
		if want := c.name != "otherAdmin" && c.name != "otherViewer"; m != want {
			t.Errorf("%s reads the project: %v, want %v", c.name, m, want)
		}
		for name, l := range lists {
			r := e.Call(c.token, l.method, map[string]any{"tenantId": "acme", "limit": 200})
			gr := e.GraphQL(c.token, `{ tenant(tenantId: "acme") { `+l.field+` } }`, nil)
			code, _ := gqlErr(gr)
			if (r.Status == 200) != (code == "") || r.Status != 200 && r.Code() != code {
				t.Errorf("%s: %s: method %d %s, graph %q", c.name, name, r.Status, r.Code(), code)
				continue
			}
			if r.Status != 200 {
				continue
			}
			var fromMethod, fromGraph []string
			for _, it := range r.Body["items"].([]any) {
				fromMethod = append(fromMethod, str(it.(map[string]any)[l.key]))
			}
			for _, n := range nodesOf(t, dig(t, gqlOK(t, gr), "tenant", name)) {
				fromGraph = append(fromGraph, str(n[l.key]))
			}
			if fmt.Sprint(fromMethod) != fmt.Sprint(fromGraph) || len(fromMethod) == 0 {
				t.Errorf("%s: %s: method %v, graph %v", c.name, name, fromMethod, fromGraph)
			}
		}
	}
	must(t, e.Call(w.acme.Admin.Token, "projects/removeMember", map[string]any{"tenantId": "acme", "projectId": prj, "principalId": w.projectMember.PrincipalID}))
	if m, g := project(who{"projectMember", w.projectMember.Token}); m || g {
		t.Fatalf("after its relation is removed: projects.get %v, node(id:) %v", m, g)
	}
}

// Pool.machines and Pool.tpmKeys are machines.list's and tpmKeys.list's
// pages in the graph (the two lists had no connection): the same items in
// the same order, paged by the same cursors, for the owner's readers; empty
// under a tenant the pool is offered to, whose methods answer NOT_FOUND.
func TestPoolMachinesAndTpmKeysInTheGraph(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	w := newCrossTenantWorld(t, e)
	admin := w.acme.Admin.Token
	for k := 0; k < 3; k++ {
		e.Must(e.Call(admin, "machines/register", map[string]any{"tenantId": "acme", "poolId": w.offered, "serial": fmt.Sprintf("SN-%d", k)}))
		e.Must(e.Call(admin, "tpmKeys/allow", map[string]any{"tenantId": "acme", "poolId": w.offered,
			"ekHash": strings.Repeat(fmt.Sprint(k+1), 64), "description": fmt.Sprint("key ", k)}))
	}
	q := `query($t: String!, $after: String, $first: Int) { tenant(tenantId: $t) { pools(first: 10) { edges { node { poolId
		machines(first: $first, after: $after) { totalCount edges { cursor node { machineId serial } } pageInfo { hasNextPage endCursor } }
		tpmKeys(first: 50) { totalCount edges { node { ekHash kind description } } } } } } } }`
	poolOf := func(d map[string]any) map[string]any {
		for _, p := range nodesOf(t, dig(t, d, "tenant", "pools")) {
			if p["poolId"] == w.offered {
				return p
			}
		}
		t.Fatalf("no offered pool: %v", d)
		return nil
	}
	for _, reader := range []string{admin, w.acme.Viewer.Token} {
		p := poolOf(gqlOK(t, e.GraphQL(reader, q, map[string]any{"t": "acme", "first": 50})))
		ms := items(t, e.Must(e.Call(reader, "machines/list", map[string]any{"tenantId": "acme", "poolId": w.offered})))
		ks := items(t, e.Must(e.Call(reader, "tpmKeys/list", map[string]any{"tenantId": "acme", "poolId": w.offered})))
		gm, gk := nodesOf(t, p["machines"]), nodesOf(t, p["tpmKeys"])
		if len(ms) != 3 || len(gm) != 3 || dig(t, p, "machines", "totalCount") != float64(3) || len(ks) != 3 || len(gk) != 3 {
			t.Fatalf("machines %v / %v, keys %v / %v", ms, gm, ks, gk)
		}
		for i := range ms {
			if gm[i]["machineId"] != ms[i]["machineId"] || gk[i]["ekHash"] != ks[i]["ekHash"] || gk[i]["kind"] != "EK" {
				t.Fatalf("item %d: %v %v, %v %v", i, gm[i], ms[i], gk[i], ks[i])
			}
		}
		// Paged one at a time by the graph's cursors: the same walk.
		var walked []any
		var after any
		for range 4 {
			p := poolOf(gqlOK(t, e.GraphQL(reader, q, map[string]any{"t": "acme", "first": 1, "after": after})))
			for _, m := range nodesOf(t, p["machines"]) {
				walked = append(walked, m["machineId"])
			}
			if dig(t, p, "machines", "pageInfo", "hasNextPage") != true {
				break
			}
			after = dig(t, p, "machines", "pageInfo", "endCursor")
		}
		if fmt.Sprint(walked) != fmt.Sprint([]any{ms[0]["machineId"], ms[1]["machineId"], ms[2]["machineId"]}) {
			t.Fatalf("paged: %v", walked)
		}
	}
	// The tenant the pool is offered to: none of them, as its methods say.
	p := poolOf(gqlOK(t, e.GraphQL(w.guest.Admin.Token, q, map[string]any{"t": "guest", "first": 50})))
	if dig(t, p, "machines", "totalCount") != float64(0) || dig(t, p, "tpmKeys", "totalCount") != float64(0) {
		t.Fatalf("the offered tenant reads the owner's machines or keys: %v", p)
	}
	expect(t, e.Call(w.guest.Admin.Token, "machines/list", map[string]any{"tenantId": "guest", "poolId": w.offered}), "NOT_FOUND", anyPath)
}
