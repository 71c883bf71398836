package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bettercompute/computed/internal/testkit"
	"github.com/bettercompute/computed/internal/testkit/wait"
)

// dig walks a decoded GraphQL answer by keys and list indexes.
func dig(t testing.TB, v any, path ...any) any {
	t.Helper()
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				t.Fatalf("dig %v: %v is no object", path, v)
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				t.Fatalf("dig %v: %v has no item %d", path, v, k)
			}
			v = l[k]
		}
	}
	return v
}

// nodesOf returns the nodes of a connection.
func nodesOf(t testing.TB, conn any) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, e := range dig(t, conn, "edges").([]any) {
		out = append(out, e.(map[string]any)["node"].(map[string]any))
	}
	return out
}

const instFields = `id instanceId tenantId poolId projectId name state desiredState rowVersion rebootGeneration
	size { gpus vcpus memoryGiB } pool { poolId } project { projectId } host { nodeId }`

// gqlWaitState polls an instance through node(id:) until it is in state.
func gqlWaitState(t testing.TB, e *testkit.Env, token, gid, state string) map[string]any {
	t.Helper()
	var m map[string]any
	wait.Eventually(t, 15*time.Second, func() error {
		d := gqlOK(t, e.GraphQL(token, `query($id: ID!) { node(id: $id) { ... on Instance { state rowVersion desiredState } } }`, map[string]any{"id": gid}))
		if m, _ = d["node"].(map[string]any); m == nil || m["state"] != state {
			return fmt.Errorf("instance %s not %s: %v", gid, state, d["node"])
		}
		return nil
	})
	return m
}

// TestInstancesGraphQL: instances, their events, reservations and pool
// capacity through the graph, with the method surface's visibility: a
// tenant reads its own instances (also in a pool it is offered), a pool's
// owner sees other tenants' holdings as numbers only, and another tenant's
// instance id is null through node(id:).
func TestInstancesGraphQL(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t).RunReconciler()
	acme := newTenant(t, e, "acme")
	guest := newTenant(t, e, "guest")
	pool := vpsPool(t, e, acme.Admin.Token, "acme", "vps", map[string]any{"sim": map[string]any{"latencyMs": 20}, "capacity": map[string]any{"gpus": 16}})
	must(t, e.Call(acme.Admin.Token, "pools/offer", map[string]any{"tenantId": "acme", "poolId": pool, "toTenantId": "guest",
		"quota": map[string]any{"gpus": 4, "instances": 2}}))
	prj := newProject(t, e, acme.Member.Token, "acme", "web")

	create := `mutation($in: CreateInstanceInput!) { createInstance(input: $in) { instance { ` + instFields + ` } } }`
	mk := func(token, tenantID, name string, gpus int, more map[string]any) map[string]any {
		in := map[string]any{"tenantId": tenantID, "poolId": pool, "name": name, "size": map[string]any{"gpus": gpus, "vcpus": 2, "memoryGiB": 8}}
		for k, v := range more {
			in[k] = v
		}
		return dig(t, gqlOK(t, e.GraphQL(token, create, map[string]any{"in": in})), "createInstance", "instance").(map[string]any)
	}
	a1 := mk(acme.Member.Token, "acme", "a1", 1, map[string]any{"projectId": prj, "clientToken": "a1-try"})
	if a1["state"] != "PENDING" || a1["desiredState"] != "RUNNING" || a1["tenantId"] != "acme" || a1["projectId"] != prj ||
		dig(t, a1, "pool", "poolId") != pool || dig(t, a1, "project", "projectId") != prj || a1["host"] != nil ||
		dig(t, a1, "size", "gpus") != float64(1) || !instIDRe.MatchString(str(a1["instanceId"])) {
		t.Fatalf("createInstance: %v", a1)
	}
	// A retry with the same clientToken is the same instance.
	if again := mk(acme.Member.Token, "acme", "a1", 1, map[string]any{"projectId": prj, "clientToken": "a1-try"}); again["instanceId"] != a1["instanceId"] {
		t.Fatalf("clientToken retry: %v", again)
	}
	a2 := mk(acme.Member.Token, "acme", "a2", 2, map[string]any{"desiredState": "STOPPED"})
	a3 := mk(acme.Member.Token, "acme", "a3", 0, nil)
	// A hyphenated name: no generated id can contain it (a bare "g1" can
	// appear inside a random ULID and made this check flaky).
	g1 := mk(guest.Member.Token, "guest", "guest-only-vm", 2, nil)
	// The method's rules, through the graph: the offer's quota.
	r := e.GraphQL(guest.Member.Token, create, map[string]any{"in": map[string]any{"tenantId": "guest", "poolId": pool, "name": "g2",
		"size": map[string]any{"gpus": 3, "vcpus": 2, "memoryGiB": 8}}})
	gqlExpect(t, r, "INVALID_STATE", anyPath)
	if !strings.Contains(string(r.Raw), `"reason":"quota"`) {
		t.Fatalf("quota: %s", r.Raw)
	}
	gqlExpect(t, e.GraphQL(acme.Viewer.Token, create, map[string]any{"in": map[string]any{"tenantId": "acme", "poolId": pool, "name": "v",
		"size": map[string]any{"gpus": 0, "vcpus": 2, "memoryGiB": 8}}}), "PERMISSION_DENIED", anyPath)
	gqlExpect(t, e.GraphQL(acme.Member.Token, create, map[string]any{"in": map[string]any{"tenantId": "acme", "poolId": pool, "name": "x",
		"size": map[string]any{"gpus": 0, "vcpus": 0, "memoryGiB": 8}}}), "INVALID_INPUT", "size.vcpus")
	gqlExpect(t, e.GraphQL(acme.Member.Token, create, map[string]any{"in": map[string]any{"tenantId": "acme", "poolId": pool, "name": "x",
		"desiredState": "DELETED", "size": map[string]any{"gpus": 0, "vcpus": 1, "memoryGiB": 8}}}), "INVALID_INPUT", "desiredState")
	gqlWaitState(t, e, acme.Viewer.Token, str(a1["id"]), "RUNNING")
	gqlWaitState(t, e, acme.Viewer.Token, str(a2["id"]), "STOPPED")
	gqlWaitState(t, e, acme.Viewer.Token, str(a3["id"]), "RUNNING")
	gqlWaitState(t, e, guest.Viewer.Token, str(g1["id"]), "RUNNING")

	// Tenant.instances pages by id with the list's filters.
	list := `query($t: String!, $after: String, $pool: String, $prj: String, $state: InstanceState) { tenant(tenantId: $t) {
		instances(first: 2, after: $after, poolId: $pool, projectId: $prj, state: $state) {
			totalCount pageInfo { hasNextPage endCursor } edges { cursor node { instanceId name } } } } }`
	page1 := dig(t, gqlOK(t, e.GraphQL(acme.Viewer.Token, list, map[string]any{"t": "acme"})), "tenant", "instances")
	if dig(t, page1, "totalCount") != float64(3) || dig(t, page1, "pageInfo", "hasNextPage") != true || len(nodesOf(t, page1)) != 2 {
		t.Fatalf("page 1: %v", page1)
	}
	page2 := dig(t, gqlOK(t, e.GraphQL(acme.Viewer.Token, list, map[string]any{"t": "acme", "after": dig(t, page1, "pageInfo", "endCursor")})), "tenant", "instances")
	if dig(t, page2, "pageInfo", "hasNextPage") != false || len(nodesOf(t, page2)) != 1 {
		t.Fatalf("page 2: %v", page2)
	}
	seen := map[any]bool{}
	for _, n := range append(nodesOf(t, page1), nodesOf(t, page2)...) {
		if seen[n["instanceId"]] || n["instanceId"] == g1["instanceId"] {
			t.Fatalf("pages: %v %v", page1, page2)
		}
		seen[n["instanceId"]] = true
	}
	// Past the end: an empty page that still counts.
	page3 := dig(t, gqlOK(t, e.GraphQL(acme.Viewer.Token, list, map[string]any{"t": "acme", "after": dig(t, page2, "pageInfo", "endCursor")})), "tenant", "instances")
	if len(nodesOf(t, page3)) != 0 || dig(t, page3, "totalCount") != float64(3) || dig(t, page3, "pageInfo", "hasNextPage") != false {
		t.Fatalf("page 3: %v", page3)
	}
	gqlExpect(t, e.GraphQL(acme.Viewer.Token, list, map[string]any{"t": "acme", "after": "bogus"}), "INVALID_INPUT", "after")
	for _, n := range []int{0, 201} {
		gqlExpect(t, e.GraphQL(acme.Viewer.Token, `query($n: Int) { tenant(tenantId: "acme") { instances(first: $n) { totalCount } } }`, map[string]any{"n": n}), "INVALID_INPUT", "first")
	}
	gqlExpect(t, e.GraphQL(acme.Viewer.Token, list, map[string]any{"t": "acme", "pool": "nope"}), "INVALID_INPUT", "poolId")
	byPrj := dig(t, gqlOK(t, e.GraphQL(acme.Viewer.Token, list, map[string]any{"t": "acme", "prj": prj})), "tenant", "instances")
	if n := nodesOf(t, byPrj); len(n) != 1 || n[0]["instanceId"] != a1["instanceId"] {
		t.Fatalf("projectId filter: %v", byPrj)
	}
	stopped := dig(t, gqlOK(t, e.GraphQL(acme.Viewer.Token, list, map[string]any{"t": "acme", "state": "STOPPED", "pool": pool})), "tenant", "instances")
	if n := nodesOf(t, stopped); len(n) != 1 || n[0]["instanceId"] != a2["instanceId"] {
		t.Fatalf("state filter: %v", stopped)
	}
	// Another tenant's list is refused as on the method surface.
	gqlExpect(t, e.GraphQL(guest.Viewer.Token, list, map[string]any{"t": "acme"}), "PERMISSION_DENIED", anyPath)

	// Pool.instances: each tenant sees only its own instances in the pool,
	// the owner included; Project.instances the project's.
	pools := `query($t: String!) { tenant(tenantId: $t) { pools(first: 10) { edges { node { poolId
		instances(first: 10) { totalCount edges { node { instanceId tenantId host { nodeId } } } }
		capacity { poolId bounded total { gpus } allocated { gpus } reserved { gpus } free { gpus } byTenant { tenantId held { gpus vcpus memoryGiB } } } } } }
		projects(first: 5) { edges { node { projectId instances(first: 5) { totalCount edges { node { instanceId } } } } } } } }`
	own := gqlOK(t, e.GraphQL(acme.Viewer.Token, pools, map[string]any{"t": "acme"}))
	p := nodesOf(t, dig(t, own, "tenant", "pools"))[0]
	if dig(t, p, "instances", "totalCount") != float64(3) {
		t.Fatalf("owner's Pool.instances: %v", p)
	}
	for _, n := range nodesOf(t, p["instances"]) {
		if n["tenantId"] != "acme" {
			t.Fatalf("the owner sees another tenant's instance: %v", p)
		}
	}
	c := p["capacity"].(map[string]any)
	// a1 (1 GPU) and a3 run, a2 is stopped but holds its 2 GPUs; guest's g1 holds 2.
	if dig(t, c, "total", "gpus") != float64(16) || dig(t, c, "allocated", "gpus") != float64(5) || dig(t, c, "free", "gpus") != float64(11) || c["bounded"] != true {
		t.Fatalf("capacity: %v", c)
	}
	held := map[string]float64{}
	for _, h := range c["byTenant"].([]any) {
		held[str(dig(t, h, "tenantId"))] = dig(t, h, "held", "gpus").(float64)
	}
	if held["acme"] != 3 || held["guest"] != 2 || len(held) != 2 {
		t.Fatalf("byTenant: %v", c)
	}
	if strings.Contains(fmt.Sprint(own), str(g1["instanceId"])) || strings.Contains(fmt.Sprint(own), "guest-only-vm") {
		t.Fatalf("the owner's view names guest's instance: %v", own)
	}
	pr := nodesOf(t, dig(t, own, "tenant", "projects"))[0]
	if n := nodesOf(t, pr["instances"]); len(n) != 1 || n[0]["instanceId"] != a1["instanceId"] {
		t.Fatalf("Project.instances: %v", pr)
	}
	theirs := gqlOK(t, e.GraphQL(guest.Viewer.Token, pools, map[string]any{"t": "guest"}))
	gp := nodesOf(t, dig(t, theirs, "tenant", "pools"))[0]
	if n := nodesOf(t, gp["instances"]); len(n) != 1 || n[0]["instanceId"] != g1["instanceId"] {
		t.Fatalf("guest's Pool.instances: %v", gp)
	}
	if dig(t, gp, "capacity", "byTenant") != nil || dig(t, gp, "capacity", "allocated", "gpus") != float64(5) {
		t.Fatalf("guest's capacity: %v", gp["capacity"])
	}

	// node(id:): the tenant's own instance, null for anyone else.
	nq := `query($id: ID!) { node(id: $id) { __typename id ... on Instance { instanceId } } }`
	if n := gqlOK(t, e.GraphQL(acme.Viewer.Token, nq, map[string]any{"id": a1["id"]}))["node"]; dig(t, n, "instanceId") != a1["instanceId"] {
		t.Fatalf("node(id:): %v", n)
	}
	for _, tok := range []string{guest.Admin.Token, guest.Viewer.Token} {
		if n := gqlOK(t, e.GraphQL(tok, nq, map[string]any{"id": a1["id"]}))["node"]; n != nil {
			t.Fatalf("another tenant reads an instance through node(id:): %v", n)
		}
	}
	if n := gqlOK(t, e.GraphQL(acme.Admin.Token, nq, map[string]any{"id": g1["id"]}))["node"]; n != nil {
		t.Fatalf("the pool's owner reads an offered tenant's instance: %v", n)
	}

	// Desired-state mutations: expectedVersion, another tenant's instance.
	change := func(token, op, tenantID string, inst map[string]any, version any) testkit.Resp {
		in := map[string]any{"tenantId": tenantID, "instanceId": inst["instanceId"]}
		if version != nil {
			in["expectedVersion"] = version
		}
		return e.GraphQL(token, `mutation($in: ChangeInstanceInput!) { `+op+`(input: $in) { instance { instanceId state desiredState rowVersion rebootGeneration } } }`,
			map[string]any{"in": in})
	}
	cur := gqlWaitState(t, e, acme.Viewer.Token, str(a1["id"]), "RUNNING")
	gqlExpect(t, change(acme.Member.Token, "stopInstance", "acme", a1, 999), "CONFLICT", anyPath)
	gqlExpect(t, change(guest.Member.Token, "stopInstance", "guest", a1, nil), "NOT_FOUND", anyPath)
	gqlExpect(t, change(guest.Member.Token, "stopInstance", "acme", a1, nil), "PERMISSION_DENIED", anyPath)
	gqlExpect(t, change(acme.Viewer.Token, "stopInstance", "acme", a1, nil), "PERMISSION_DENIED", anyPath)
	s := dig(t, gqlOK(t, change(acme.Member.Token, "stopInstance", "acme", a1, cur["rowVersion"])), "stopInstance", "instance")
	if dig(t, s, "desiredState") != "STOPPED" || dig(t, s, "state") != "RUNNING" {
		t.Fatalf("stopInstance changes only desiredState: %v", s)
	}
	gqlWaitState(t, e, acme.Viewer.Token, str(a1["id"]), "STOPPED")
	gqlExpect(t, change(acme.Member.Token, "rebootInstance", "acme", a1, nil), "INVALID_STATE", anyPath)
	gqlOK(t, change(acme.Member.Token, "startInstance", "acme", a1, nil))
	gqlWaitState(t, e, acme.Viewer.Token, str(a1["id"]), "RUNNING")
	rb := dig(t, gqlOK(t, change(acme.Member.Token, "rebootInstance", "acme", a1, nil)), "rebootInstance", "instance")
	if dig(t, rb, "rebootGeneration") != float64(1) {
		t.Fatalf("rebootInstance: %v", rb)
	}
	// The reboot is done once its instance.running is readable (nine events).
	wait.Eventually(t, 10*time.Second, func() error {
		d := gqlOK(t, e.GraphQL(acme.Viewer.Token, `query($id: ID!) { node(id: $id) { ... on Instance { events(first: 1) { totalCount } } } }`, map[string]any{"id": a1["id"]}))
		if dig(t, d, "node", "events", "totalCount").(float64) < 9 {
			return fmt.Errorf("reboot not done: %v", d)
		}
		return nil
	})
	gqlOK(t, change(acme.Member.Token, "deleteInstance", "acme", a1, nil))
	gqlWaitState(t, e, acme.Viewer.Token, str(a1["id"]), "DELETED")

	// Instance.events: the whole story, paged oldest first, each event
	// with its instance (as it is now).
	evq := `query($id: ID!, $after: String) { node(id: $id) { ... on Instance { events(first: 3, after: $after) {
		totalCount pageInfo { hasNextPage endCursor } edges { cursor node { eventId type state instanceId instance { instanceId state } } } } } } }`
	want := []string{"INSTANCE_CREATED", "INSTANCE_PROVISIONING", "INSTANCE_RUNNING", "INSTANCE_STOPPING", "INSTANCE_STOPPED",
		"INSTANCE_PROVISIONING", "INSTANCE_RUNNING", "INSTANCE_REBOOTING", "INSTANCE_RUNNING", "INSTANCE_DELETING", "INSTANCE_DELETED"}
	var got []string
	wait.Eventually(t, 10*time.Second, func() error {
		got = got[:0]
		var after any
		last := ""
		for {
			conn := dig(t, gqlOK(t, e.GraphQL(acme.Viewer.Token, evq, map[string]any{"id": a1["id"], "after": after})), "node", "events")
			for _, n := range nodesOf(t, conn) {
				if str(n["eventId"]) <= last || n["instanceId"] != a1["instanceId"] || dig(t, n, "instance", "state") != "DELETED" {
					t.Fatalf("event: %v", n)
				}
				last = str(n["eventId"])
				got = append(got, str(n["type"]))
			}
			if dig(t, conn, "totalCount").(float64) < float64(len(got)) {
				t.Fatalf("totalCount below the events read: %v", conn)
			}
			if dig(t, conn, "pageInfo", "hasNextPage") != true {
				break
			}
			after = dig(t, conn, "pageInfo", "endCursor")
		}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			return fmt.Errorf("events %v, want %v", got, want)
		}
		return nil
	})
	// A cursor that is no event position is refused.
	gqlExpect(t, e.GraphQL(acme.Viewer.Token, evq, map[string]any{"id": a1["id"], "after": "bogus"}), "INVALID_INPUT", "after")
	// Its cursors are the method's (instances.events: the event ids):
	// either continues the other.
	m := must(t, e.Call(acme.Viewer.Token, "instances/events", map[string]any{"tenantId": "acme", "instanceId": a1["instanceId"], "limit": 3}))
	conn := dig(t, gqlOK(t, e.GraphQL(acme.Viewer.Token, evq, map[string]any{"id": a1["id"], "after": m.Body["cursor"]})), "node", "events")
	ns := nodesOf(t, conn)
	if len(ns) != 3 || ns[0]["type"] != want[3] || dig(t, conn, "pageInfo", "endCursor") != ns[2]["eventId"] {
		t.Fatalf("the method's cursor in the graph: %v", conn)
	}
	m = must(t, e.Call(acme.Viewer.Token, "instances/events", map[string]any{"tenantId": "acme", "instanceId": a1["instanceId"], "limit": 1,
		"cursor": dig(t, conn, "pageInfo", "endCursor")}))
	if it := items(t, m); len(it) != 1 || it[0]["type"] != "instance.running" { // want[6]
		t.Fatalf("the graph's cursor on the method: %s", m.Raw)
	}

	// Reservations: created and canceled through the graph; each tenant
	// lists its own.
	rsv := `mutation($in: CreateReservationInput!) { createReservation(input: $in) { reservation { reservationId tenantId poolId state size { gpus } rowVersion } } }`
	start, end := window(-time.Minute, time.Hour)
	gr := dig(t, gqlOK(t, e.GraphQL(guest.Member.Token, rsv, map[string]any{"in": map[string]any{"tenantId": "guest", "poolId": pool,
		"size": map[string]any{"gpus": 4, "vcpus": 0, "memoryGiB": 0}, "startsAt": start, "endsAt": end}})), "createReservation", "reservation").(map[string]any)
	if gr["state"] != "ACTIVE" || gr["tenantId"] != "guest" || dig(t, gr, "size", "gpus") != float64(4) {
		t.Fatalf("createReservation: %v", gr)
	}
	r = e.GraphQL(guest.Member.Token, rsv, map[string]any{"in": map[string]any{"tenantId": "guest", "poolId": pool,
		"size": map[string]any{"gpus": 1, "vcpus": 0, "memoryGiB": 0}, "startsAt": start, "endsAt": end}})
	gqlExpect(t, r, "INVALID_STATE", anyPath) // over the offer's 4 GPUs at once
	fs, fe := window(time.Hour, 2*time.Hour)
	ar := dig(t, gqlOK(t, e.GraphQL(acme.Member.Token, rsv, map[string]any{"in": map[string]any{"tenantId": "acme", "poolId": pool,
		"size": map[string]any{"gpus": 1, "vcpus": 0, "memoryGiB": 0}, "startsAt": fs, "endsAt": fe}})), "createReservation", "reservation").(map[string]any)
	if ar["state"] != "SCHEDULED" {
		t.Fatalf("a future reservation: %v", ar)
	}
	rq := `query($t: String!, $state: ReservationState) { tenant(tenantId: $t) { reservations(first: 10, state: $state) { totalCount edges { node { reservationId tenantId state } } }
		pools(first: 5) { edges { node { reservations(first: 10) { totalCount edges { node { reservationId tenantId } } } capacity { reserved { gpus } } } } } } }`
	for _, tc := range []struct {
		tok, tenant string
		want        any
	}{{acme.Viewer.Token, "acme", ar["reservationId"]}, {guest.Viewer.Token, "guest", gr["reservationId"]}} {
		d := gqlOK(t, e.GraphQL(tc.tok, rq, map[string]any{"t": tc.tenant}))
		for _, conn := range []any{dig(t, d, "tenant", "reservations"), dig(t, nodesOf(t, dig(t, d, "tenant", "pools"))[0], "reservations")} {
			if n := nodesOf(t, conn); len(n) != 1 || n[0]["reservationId"] != tc.want {
				t.Fatalf("%s's reservations: %v", tc.tenant, conn)
			}
		}
	}
	if d := gqlOK(t, e.GraphQL(acme.Viewer.Token, rq, map[string]any{"t": "acme", "state": "ACTIVE"})); dig(t, d, "tenant", "reservations", "totalCount") != float64(0) {
		t.Fatalf("state filter: %v", d)
	}
	// guest's active 4-GPU reservation holds 2 beyond its running instance.
	d := gqlOK(t, e.GraphQL(acme.Viewer.Token, rq, map[string]any{"t": "acme"}))
	if got := dig(t, nodesOf(t, dig(t, d, "tenant", "pools"))[0], "capacity", "reserved", "gpus"); got != float64(2) {
		t.Fatalf("reserved: %v", got)
	}
	cancel := `mutation($in: CancelReservationInput!) { cancelReservation(input: $in) { reservation { state rowVersion } } }`
	gqlExpect(t, e.GraphQL(acme.Member.Token, cancel, map[string]any{"in": map[string]any{"tenantId": "acme", "reservationId": gr["reservationId"]}}), "NOT_FOUND", anyPath)
	gqlExpect(t, e.GraphQL(guest.Member.Token, cancel, map[string]any{"in": map[string]any{"tenantId": "guest", "reservationId": gr["reservationId"], "expectedVersion": 7}}), "CONFLICT", anyPath)
	cr := dig(t, gqlOK(t, e.GraphQL(guest.Member.Token, cancel, map[string]any{"in": map[string]any{"tenantId": "guest", "reservationId": gr["reservationId"], "expectedVersion": 1}})), "cancelReservation", "reservation").(map[string]any)
	if cr["state"] != "CANCELED" {
		t.Fatalf("cancelReservation: %v", cr)
	}
	// The connections are costed by their page size like every other.
	r = e.GraphQL(acme.Viewer.Token, `{ tenant(tenantId: "acme") { instances(first: 200) { edges { node { name
		events(first: 200) { edges { node { type instance { name } } } } } } } } }`, nil)
	if code, _ := gqlErr(r); code != "INVALID_INPUT" || !strings.Contains(string(r.Raw), "complexity") {
		t.Fatalf("a 200x200 query: %s", r.Raw)
	}
}

// InstanceEvent.instance in a subscription is the instance as it is when
// each event is sent: the subscription's loaders live as long as it does,
// and a cached read would show every event the instance of the first.
func TestInstanceEventInstanceInSubscription(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t).RunReconciler()
	acme := newTenant(t, e, "acme")
	pool := vpsPool(t, e, acme.Admin.Token, "acme", "vps", nil)
	s := openSSE(t, e, acme.Viewer.Token, `subscription($t: String!) { instanceEvents(tenantId: $t) { type instanceId instance { instanceId state pool { poolId } } } }`,
		map[string]any{"t": "acme"})
	waitSubscribers(t, e, 1)
	id := must(t, e.Call(acme.Member.Token, "instances/create", instanceIn("acme", pool, "web", 1))).Str("instanceId")
	var last map[string]any
	for n := 0; n < 3; n++ {
		name, m := s.next()
		if name != "next" {
			t.Fatalf("event %s %v", name, m)
		}
		last = dig(t, m, "data", "instanceEvents").(map[string]any)
		if last["instanceId"] != id || dig(t, last, "instance", "instanceId") != id || dig(t, last, "instance", "pool", "poolId") != pool {
			t.Fatalf("event: %v", last)
		}
	}
	if last["type"] != "INSTANCE_RUNNING" || dig(t, last, "instance", "state") != "RUNNING" {
		t.Fatalf("the running event's instance: %v", last)
	}
}
