package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bettercompute/computed/internal/instances"
	"github.com/bettercompute/computed/internal/nodes"
	"github.com/bettercompute/computed/internal/testkit"
)

const tenantEventsSub = `subscription($t: String!, $types: [String!], $a: String) {
  tenantEvents(tenantId: $t, types: $types, after: $a) {
    eventId type tenantId resourceType resourceId poolId occurredAt data
    instance { instanceId } node { nodeId state } joinRequest { joinRequestId state }
    workflow { workflowId state } reservation { reservationId state }
  }
}`

// tenantEvents reads n tenantEvents of subscription id.
func (w *wsClient) tenantEvents(id string, n int) []map[string]any {
	w.t.Helper()
	var out []map[string]any
	for len(out) < n {
		m := w.next()
		if m["id"] != id || m["type"] != "next" {
			w.t.Fatalf("want event %d of %d of %s, got %v", len(out)+1, n, id, m)
		}
		p := m["payload"].(map[string]any)
		if p["errors"] != nil {
			w.t.Fatalf("subscription error: %v", p)
		}
		out = append(out, p["data"].(map[string]any)["tenantEvents"].(map[string]any))
	}
	return out
}

// listEvents reads every event events.list gives the caller.
func listEvents(t *testing.T, e *testkit.Env, token, tenantID string, types []string) []map[string]any {
	t.Helper()
	var out []map[string]any
	cursor := ""
	for {
		in := map[string]any{"tenantId": tenantID, "limit": 7}
		if types != nil {
			in["types"] = types
		}
		if cursor != "" {
			in["cursor"] = cursor
		}
		r := must(t, e.Call(token, "events/list", in))
		out = append(out, items(t, r)...)
		cursor = r.Str("cursor")
		if cursor == "" {
			return out
		}
	}
}

func typesOfEvents(evs []map[string]any) []string {
	var s []string
	for _, ev := range evs {
		s = append(s, str(ev["type"]))
	}
	return s
}

// TestTenantEventsEveryKind: every kind of change a dashboard watches
// reaches the tenant's stream in the order the calls were made, the same
// on events.list, over WebSocket and over SSE; filters, links, resume,
// visibility and the inputs' bounds.
func TestTenantEventsEveryKind(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	acme := newTenant(t, e, "acme")
	beta := newTenant(t, e, "beta")
	ctx := context.Background()

	all := dialWS(t, e)
	all.init(acme.Viewer.Token)
	all.send(map[string]any{"id": "all", "type": "subscribe", "payload": map[string]any{"query": tenantEventsSub, "variables": map[string]any{"t": "acme"}}})
	sse := openSSE(t, e, acme.Viewer.Token, tenantEventsSub, map[string]any{"t": "acme", "types": []string{"node.", "inventory.changed"}})
	// A stranger and a bad filter are refused at subscribe time.
	w := dialWS(t, e)
	w.init(beta.Admin.Token)
	for _, c := range []struct {
		vars map[string]any
		code string
	}{
		{map[string]any{"t": "acme"}, "PERMISSION_DENIED"},
		// A stranger's bad type or cursor is refused as events.list
		// refuses it: the decision comes first (it was INVALID_INPUT).
		{map[string]any{"t": "acme", "types": []string{"node.bogus"}}, "PERMISSION_DENIED"},
		{map[string]any{"t": "acme", "a": "garbage"}, "PERMISSION_DENIED"},
		{map[string]any{"t": "nosuch", "a": "evt_p8c56j3a0xrnd0000000000001"}, "PERMISSION_DENIED"},
		{map[string]any{"t": "beta", "types": []string{"node.bogus"}}, "INVALID_INPUT"},
		{map[string]any{"t": "beta", "types": []string{"nodes."}}, "INVALID_INPUT"},
		{map[string]any{"t": "beta", "a": "evt_nope"}, "INVALID_INPUT"},
	} {
		if code := opError(w.op(fmt.Sprint(c.vars), tenantEventsSub, c.vars)); code != c.code {
			t.Fatalf("%v: %s, want %s", c.vars, code, c.code)
		}
	}
	waitSubscribers(t, e, 2) // all and sse are live: every change below is delivered

	// Nodes and their inventory.
	pool := e.Pool(acme.Admin.Token, "acme", "gpu")
	nodeID, cred := e.Node(acme.Admin.Token, "acme", pool)
	must(t, e.Call(acme.Admin.Token, "nodes/update", map[string]any{"tenantId": "acme", "nodeId": nodeID, "name": "gpu-01"}))
	must(t, e.Call(acme.Admin.Token, "nodes/cordon", map[string]any{"tenantId": "acme", "nodeId": nodeID}))
	must(t, e.Call(acme.Admin.Token, "nodes/uncordon", map[string]any{"tenantId": "acme", "nodeId": nodeID}))
	report := h100(t)
	invStore(t, e, cred, nodeID, report)
	report["gpus"] = report["gpus"].([]any)[1:] // a GPU fell off the bus
	invStore(t, e, cred, nodeID, report)

	// Join requests: approved, denied, expired.
	placeholder := func() string {
		body := testkit.NewMachine(t).JoinBody(e.JoinToken(acme.Admin.Token, "acme", pool, 1))
		body["hardware"].(map[string]any)["systemUuid"] = "00000000-0000-0000-0000-000000000000"
		return must(t, e.Call("", "nodes/join", body)).Str("joinRequestId")
	}
	jr1, jr2, jr3 := placeholder(), placeholder(), placeholder()
	must(t, e.Call(acme.Admin.Token, "joinRequests/approve", map[string]any{"tenantId": "acme", "joinRequestId": jr1}))
	must(t, e.Call(acme.Admin.Token, "joinRequests/deny", map[string]any{"tenantId": "acme", "joinRequestId": jr2}))
	if _, err := e.DB.Exec(`UPDATE join_requests SET expires_at = now() - interval '1 second' WHERE join_request_id = $1`, jr3); err != nil {
		t.Fatal(err)
	}
	if n, err := nodes.ExpireJoinRequests(ctx, e.DB); err != nil || n != 1 {
		t.Fatalf("expired %d join requests: %v", n, err)
	}
	if n, err := nodes.ExpireJoinRequests(ctx, e.DB); err != nil || n != 0 {
		t.Fatalf("expired %d join requests again: %v", n, err)
	}

	// Workflows: one succeeds step by step, one is canceled.
	must(t, createProfile(t, e, acme.Member.Token, "acme", profileDoc("gpu-node", 1), ""))
	wf := must(t, e.Call(acme.Member.Token, "workflows/create", map[string]any{"tenantId": "acme", "nodeId": nodeID, "profileId": "gpu-node"}))
	steps := len(wf.Body["steps"].([]any))
	for i := 0; i < steps; i++ {
		must(t, e.Call(cred, "workflows/reportStep", map[string]any{"nodeId": nodeID, "workflowId": wf.Str("workflowId"), "index": i, "status": "succeeded"}))
	}
	wf2 := must(t, e.Call(acme.Member.Token, "workflows/create", map[string]any{"tenantId": "acme", "nodeId": nodeID, "profileId": "gpu-node"})).Str("workflowId")
	must(t, e.Call(acme.Member.Token, "workflows/cancel", map[string]any{"tenantId": "acme", "workflowId": wf2}))

	// Reservations and an instance in a VPS pool.
	vps := vpsPool(t, e, acme.Admin.Token, "acme", "vps", nil)
	reserve := func(start time.Time) string {
		return must(t, e.Call(acme.Member.Token, "reservations/create", map[string]any{"tenantId": "acme", "poolId": vps,
			"size": map[string]any{"gpus": 0, "vcpus": 1, "memoryGiB": 1}, "startsAt": start.Format(time.RFC3339),
			"endsAt": start.Add(time.Hour).Format(time.RFC3339)})).Str("reservationId")
	}
	r1 := reserve(time.Now().UTC().Add(time.Hour))
	must(t, e.Call(acme.Member.Token, "reservations/cancel", map[string]any{"tenantId": "acme", "reservationId": r1}))
	r2 := reserve(time.Now().UTC().Add(2 * time.Hour))
	if _, err := e.DB.Exec(`UPDATE reservations SET starts_at = now() - interval '2 hours', ends_at = now() - interval '1 hour' WHERE reservation_id = $1`, r2); err != nil {
		t.Fatal(err)
	}
	if n, err := instances.ExpireReservations(ctx, e.DB); err != nil || n != 1 {
		t.Fatalf("expired %d reservations: %v", n, err)
	}
	inst := must(t, e.Call(acme.Member.Token, "instances/create", instanceIn("acme", vps, "web", 1))).Str("instanceId")
	must(t, e.Call(acme.Admin.Token, "nodes/remove", map[string]any{"tenantId": "acme", "nodeId": nodeID}))

	want := []string{"node.joined", "node.updated", "node.cordoned", "node.uncordoned", "inventory.changed", "inventory.changed",
		"joinRequest.pending", "joinRequest.pending", "joinRequest.pending", "joinRequest.approved", "joinRequest.denied", "joinRequest.expired",
		"workflow.created"}
	for i := 0; i < steps; i++ {
		want = append(want, "workflow.step")
	}
	want = append(want, "workflow.succeeded", "workflow.created", "workflow.canceled",
		"reservation.created", "reservation.canceled", "reservation.created", "reservation.expired", "instance.created", "node.removed")

	// The method surface: in call order, oldest first, over pages of 7.
	listed := listEvents(t, e, acme.Viewer.Token, "acme", nil)
	if strings.Join(typesOfEvents(listed), " ") != strings.Join(want, " ") {
		t.Fatalf("events.list:\n got %v\nwant %v", typesOfEvents(listed), want)
	}
	// Over WebSocket: the same events, the same ids, with their links.
	got := all.tenantEvents("all", len(want))
	for i, ev := range got {
		if ev["eventId"] != listed[i]["eventId"] || ev["type"] != want[i] || ev["tenantId"] != "acme" || ev["resourceId"] != listed[i]["resourceId"] {
			t.Fatalf("event %d over WebSocket %v, listed %v", i, ev, listed[i])
		}
		link := map[string]string{"NODE": "node", "JOIN_REQUEST": "joinRequest", "WORKFLOW": "workflow", "RESERVATION": "reservation", "INSTANCE": "instance"}[str(ev["resourceType"])]
		if link == "" || ev[link] == nil {
			t.Fatalf("event %d has no %s link: %v", i, ev["resourceType"], ev)
		}
		if i > 0 && !(str(got[i-1]["eventId"]) < str(ev["eventId"])) {
			t.Fatalf("event ids out of order: %v then %v", got[i-1]["eventId"], ev["eventId"])
		}
	}
	if got[len(got)-1]["node"].(map[string]any)["state"] != "REMOVED" || got[len(got)-2]["instance"].(map[string]any)["instanceId"] != inst {
		t.Fatalf("links are the resources as they are now: %v", got[len(got)-2:])
	}
	// Every event names its resource's pool: a workflow's is its node's
	// (it had none), a reservation's and an instance's the VPS pool.
	for i, ev := range listed {
		p := pool
		if strings.HasPrefix(want[i], "reservation.") || strings.HasPrefix(want[i], "instance.") {
			p = vps
		}
		if ev["poolId"] != p {
			t.Fatalf("%s event's poolId %v, want %s", want[i], ev["poolId"], p)
		}
	}
	// A workflow's events carry it without its profile document (up to
	// 128 KiB, the same in every event: a daemon's progress reports wrote
	// it into the stream each time), and otherwise as workflows.get does.
	for _, ev := range listEvents(t, e, acme.Viewer.Token, "acme", []string{"workflow."}) {
		d := ev["data"].(map[string]any)
		if _, ok := d["profileDocument"]; ok || d["workflowId"] != ev["resourceId"] || d["steps"] == nil || d["profileId"] == nil {
			t.Fatalf("%s event's data: %v", ev["type"], d)
		}
		for _, st := range d["steps"].([]any) {
			if _, ok := st.(map[string]any)["with"]; ok || st.(map[string]any)["status"] == nil {
				t.Fatalf("%s event's step: %v", ev["type"], st)
			}
		}
	}
	// The inventory event carries the diff: the GPU that went missing.
	inv := listEvents(t, e, acme.Viewer.Token, "acme", []string{"inventory.changed"})
	if len(inv) != 2 || !strings.Contains(fmt.Sprint(inv[1]["data"]), "gpu.missing") || inv[1]["resourceId"] != nodeID {
		t.Fatalf("inventory.changed: %v", inv)
	}
	// The node's first snapshot has its event too, with no previous
	// snapshot and no changes (the schema's text said it wrote none).
	if d, _ := inv[0]["data"].(map[string]any); d == nil || d["previousSnapshotId"] != nil || d["snapshotId"] == nil || len(d["changes"].([]any)) != 0 {
		t.Fatalf("the first inventory.changed: %v", inv[0])
	}
	// Over SSE with a type filter: node.* and inventory.changed only.
	var nodeTypes []string
	for _, typ := range want {
		if strings.HasPrefix(typ, "node.") || typ == "inventory.changed" {
			nodeTypes = append(nodeTypes, typ)
		}
	}
	for i, typ := range nodeTypes {
		name, m := sse.next()
		ev, _ := m["data"].(map[string]any)["tenantEvents"].(map[string]any)
		if name != "next" || ev["type"] != typ {
			t.Fatalf("SSE event %d: %s %v, want %s", i, name, m, typ)
		}
	}
	// Resume from the fifth event: exactly what followed it.
	all.send(map[string]any{"id": "resumed", "type": "subscribe", "payload": map[string]any{"query": tenantEventsSub,
		"variables": map[string]any{"t": "acme", "a": listed[4]["eventId"]}}})
	resumed := all.tenantEvents("resumed", len(want)-5)
	for i, ev := range resumed {
		if ev["eventId"] != listed[5+i]["eventId"] {
			t.Fatalf("resumed event %d: %v, want %v", i, ev["eventId"], listed[5+i]["eventId"])
		}
	}
	if m, err := all.read(200 * time.Millisecond); err == nil {
		t.Fatalf("after the replay: %v", m)
	}

	// Visibility and inputs.
	if b := listEvents(t, e, beta.Admin.Token, "beta", nil); len(b) != 0 {
		t.Fatalf("beta's stream holds acme's events: %v", b)
	}
	refused := e.Call(beta.Admin.Token, "events/list", map[string]any{"tenantId": "acme"})
	expect(t, refused, "PERMISSION_DENIED", "")
	// The subscription is refused in the list's words: one decision (it
	// named compute:instances:read, the list compute:tenants:read).
	words := refused.Body["error"].(map[string]any)["message"]
	msgs := w.op("stranger-words", tenantEventsSub, map[string]any{"t": "acme"})
	payload, _ := msgs[0]["payload"].(map[string]any)
	if p, _ := payload["errors"].([]any); len(p) == 0 || p[0].(map[string]any)["message"] != words {
		t.Fatalf("tenantEvents refused in other words than events.list (%v): %v", words, msgs)
	}
	// A bad types entry too (the list's schema check said "does not
	// match", the subscription "must be an event type or a prefix").
	// And too many entries, or one too long (the list's schema bounds them;
	// the subscription said "holds at most" and "does not match").
	many := make([]string, 100)
	for i := range many {
		many[i] = "node."
	}
	for _, types := range [][]string{{"%"}, {"node.", "instance"}, {"node.bogus"}, many, {"node." + strings.Repeat("a", 10240)}} {
		r := e.Call(beta.Admin.Token, "events/list", map[string]any{"tenantId": "beta", "types": types})
		words := r.Body["error"].(map[string]any)["message"]
		msgs := w.op("types-words", tenantEventsSub, map[string]any{"t": "beta", "types": types})
		payload, _ := msgs[0]["payload"].(map[string]any)
		if p, _ := payload["errors"].([]any); len(p) == 0 || p[0].(map[string]any)["message"] != words {
			t.Fatalf("types %v: tenantEvents refused in other words than events.list (%v): %v", types, words, msgs)
		}
	}
	expect(t, e.Call(cred, "events/list", map[string]any{"tenantId": "acme"}), "UNAUTHENTICATED", "")
	for _, c := range []struct {
		in   map[string]any
		path string
	}{
		{map[string]any{"limit": 0}, "limit"},
		{map[string]any{"limit": 201}, "limit"},
		{map[string]any{"types": []string{"node.bogus"}}, "types[0]"},
		{map[string]any{"types": []string{"instance.created", "Node."}}, "types[1]"},
		{map[string]any{"cursor": "evt_nope"}, "cursor"},
	} {
		c.in["tenantId"] = "acme"
		expect(t, e.Call(acme.Viewer.Token, "events/list", c.in), "INVALID_INPUT", c.path)
	}
	theirs := must(t, e.Call(beta.Admin.Token, "instances/create", instanceIn("beta", vpsPool(t, e, beta.Admin.Token, "beta", "vps", nil), "b", 1)))
	_ = theirs
	betaEvents := listEvents(t, e, beta.Admin.Token, "beta", nil)
	expect(t, e.Call(acme.Viewer.Token, "events/list", map[string]any{"tenantId": "acme", "cursor": betaEvents[0]["eventId"]}), "INVALID_INPUT", "cursor")
	if r := must(t, e.Call(acme.Viewer.Token, "events/list", map[string]any{"tenantId": "acme", "limit": 200})); len(items(t, r)) != len(want) {
		t.Fatalf("limit 200: %d events", len(items(t, r)))
	}
	// Expired: a cursor retention overtook, and one of the old outbox.
	if _, err := e.DB.Exec(`UPDATE event_streams SET pruned_seq = 3 WHERE tenant_id = 'acme'`); err != nil {
		t.Fatal(err)
	}
	for _, cursor := range []any{listed[0]["eventId"], "evt_00000000000h3k00000000004x"} {
		r := e.Call(acme.Viewer.Token, "events/list", map[string]any{"tenantId": "acme", "cursor": cursor})
		expect(t, r, "INVALID_STATE", "cursor")
		if !strings.Contains(string(r.Raw), "expired-cursor") {
			t.Fatalf("expired cursor %v: %s", cursor, r.Raw)
		}
	}
}

// TestTenantEventsFollowRoles: a member whose role is revoked keeps no
// stream; the kinds a reader sees follow its role (a viewer reads every
// kind; a caller with no role reads none).
func TestTenantEventsFollowRoles(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	acme := newTenant(t, e, "acme")
	w := dialWS(t, e)
	w.init(acme.Viewer.Token)
	w.send(map[string]any{"id": "s", "type": "subscribe", "payload": map[string]any{"query": tenantEventsSub, "variables": map[string]any{"t": "acme"}}})
	waitSubscribers(t, e, 1) // live: the node's join is delivered
	pool := e.Pool(acme.Admin.Token, "acme", "gpu")
	nodeID, _ := e.Node(acme.Admin.Token, "acme", pool)
	if ev := w.tenantEvents("s", 1)[0]; ev["type"] != "node.joined" || ev["resourceId"] != nodeID {
		t.Fatalf("first event: %v", ev)
	}
	// Revoking the viewer's token ends the stream.
	must(t, e.Call(acme.Admin.Token, "tokens/revoke", map[string]any{"tenantId": "acme", "tokenId": acme.Viewer.TokenID}))
	code, _ := w.closed(5 * time.Second)
	if code == 0 {
		t.Fatal("the socket of a revoked token stayed open")
	}
}

// Tenant.events is events.list's page in the graph (the list had no
// connection): the same events in the same order, paged by the events'
// ids, which events.list and tenantEvents take as their cursors too; its
// refusals name first and after.
func TestTenantEventsAsAConnection(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	acme := newTenant(t, e, "acme")
	globex := newTenant(t, e, "globex")
	pool := e.Pool(acme.Admin.Token, "acme", "metal")
	vps := vpsPool(t, e, acme.Admin.Token, "acme", "vps", nil)
	for k := 0; k < 3; k++ {
		e.Node(acme.Admin.Token, "acme", pool)
		must(t, e.Call(acme.Member.Token, "instances/create", instanceIn("acme", vps, fmt.Sprint("vm-", k), 0)))
	}
	q := `query($t: String!, $first: Int, $after: String, $types: [String!]) { tenant(tenantId: $t) {
		events(first: $first, after: $after, types: $types) { edges { cursor node { eventId type resourceId } } pageInfo { hasNextPage endCursor } } } }`
	want := listEvents(t, e, acme.Viewer.Token, "acme", nil)
	if len(want) < 6 {
		t.Fatalf("events.list: %v", want)
	}
	var walked []any
	var after any
	for pages := 0; ; pages++ {
		if pages > len(want) {
			t.Fatal("paging does not end")
		}
		d := gqlOK(t, e.GraphQL(acme.Viewer.Token, q, map[string]any{"t": "acme", "first": 2, "after": after}))
		for _, ed := range dig(t, d, "tenant", "events", "edges").([]any) {
			ed := ed.(map[string]any)
			if ed["cursor"] != dig(t, ed, "node", "eventId") {
				t.Fatalf("an edge's cursor is its eventId: %v", ed)
			}
			walked = append(walked, dig(t, ed, "node", "eventId"))
		}
		if dig(t, d, "tenant", "events", "pageInfo", "hasNextPage") != true {
			break
		}
		after = dig(t, d, "tenant", "events", "pageInfo", "endCursor")
	}
	var ids []any
	for _, ev := range want {
		ids = append(ids, ev["eventId"])
	}
	if fmt.Sprint(walked) != fmt.Sprint(ids) {
		t.Fatalf("the graph walked %v, events.list %v", walked, ids)
	}
	// A type filter, and the graph's cursor on the method.
	d := gqlOK(t, e.GraphQL(acme.Viewer.Token, q, map[string]any{"t": "acme", "types": []string{"node."}}))
	for _, ed := range dig(t, d, "tenant", "events", "edges").([]any) {
		if !strings.HasPrefix(str(dig(t, ed, "node", "type")), "node.") {
			t.Fatalf("types [node.]: %v", d)
		}
	}
	r := must(t, e.Call(acme.Viewer.Token, "events/list", map[string]any{"tenantId": "acme", "cursor": ids[1]}))
	if got := items(t, r); len(got) != len(ids)-2 || got[0]["eventId"] != ids[2] {
		t.Fatalf("the graph's cursor on events.list: %s", r.Raw)
	}
	// totalCount counts what the caller reads, with the types given.
	cq := `query($t: String!, $types: [String!]) { tenant(tenantId: $t) { events(first: 1, types: $types) { totalCount } } }`
	if n := dig(t, gqlOK(t, e.GraphQL(acme.Viewer.Token, cq, map[string]any{"t": "acme"})), "tenant", "events", "totalCount"); n != float64(len(ids)) {
		t.Fatalf("totalCount %v, want %d", n, len(ids))
	}
	if n := dig(t, gqlOK(t, e.GraphQL(acme.Viewer.Token, cq, map[string]any{"t": "acme", "types": []string{"instance.created"}})), "tenant", "events", "totalCount"); n != float64(3) {
		t.Fatalf("totalCount of instance.created %v, want 3", n)
	}
	// Aliases asking the same totalCount share one count: 90 aliases
	// counted a 300,000-event stream 90 times (10 s), and a few such
	// queries held every GraphQL slot of a replica (a probe's).
	var withCount, without strings.Builder
	for i := range 20 {
		fmt.Fprintf(&withCount, "a%d: events(first: 1) { edges { cursor } totalCount } ", i)
		fmt.Fprintf(&without, "a%d: events(first: 1) { edges { cursor } } ", i)
	}
	if c, p := fewestStatements(t, e, acme.Viewer.Token, `{ tenant(tenantId: "acme") { `+withCount.String()+`} }`, nil),
		fewestStatements(t, e, acme.Viewer.Token, `{ tenant(tenantId: "acme") { `+without.String()+`} }`, nil); c != p+1 {
		t.Fatalf("20 aliases of the same totalCount: %d statements, %d without it", c, p)
	}
	// A types filter is a set: its orders and repeats are one count.
	withCount.Reset()
	without.Reset()
	for i := range 20 {
		types := []string{`["node.", "instance.created"]`, `["instance.created", "node.", "node."]`}[i%2]
		fmt.Fprintf(&withCount, "a%d: events(first: 1, types: %s) { edges { cursor } totalCount } ", i, types)
		fmt.Fprintf(&without, "a%d: events(first: 1, types: %s) { edges { cursor } } ", i, types)
	}
	if c, p := fewestStatements(t, e, acme.Viewer.Token, `{ tenant(tenantId: "acme") { `+withCount.String()+`} }`, nil),
		fewestStatements(t, e, acme.Viewer.Token, `{ tenant(tenantId: "acme") { `+without.String()+`} }`, nil); c != p+1 {
		t.Fatalf("20 aliases of one types set in two orders: %d statements, %d without totalCount", c, p)
	}
	// A totalCount that will not run (@skip, @include, in a fragment) is
	// not counted: the count is a statement of its own (it was counted,
	// and the cost rule, which decides them, did not charge it).
	plain := fewestStatements(t, e, acme.Viewer.Token, `{ tenant(tenantId: "acme") { events(first: 1) { edges { cursor } } } }`, nil)
	counted := fewestStatements(t, e, acme.Viewer.Token, `{ tenant(tenantId: "acme") { events(first: 1) { edges { cursor } totalCount } } }`, nil)
	if counted <= plain {
		t.Fatalf("%d statements with totalCount, %d without", counted, plain)
	}
	for _, q := range []string{
		`{ tenant(tenantId: "acme") { events(first: 1) { edges { cursor } totalCount @skip(if: true) } } }`,
		`query($c: Boolean!) { tenant(tenantId: "acme") { events(first: 1) { edges { cursor } totalCount @include(if: $c) } } }`,
		`query($c: Boolean!) { tenant(tenantId: "acme") { events(first: 1) { edges { cursor } ...C @include(if: $c) } } } fragment C on TenantEventConnection { totalCount }`,
	} {
		if n := fewestStatements(t, e, acme.Viewer.Token, q, map[string]any{"c": false}); n != plain {
			t.Fatalf("%s: %d statements, %d without totalCount", q, n, plain)
		}
	}
	// An empty page still says where the reader stands, so that reading on
	// (or subscribing) after it misses nothing written since: the after
	// given, or the stream's position now, for an empty stream too (its
	// start) and for a filter nothing matches yet.
	gvps := vpsPool(t, e, globex.Admin.Token, "globex", "vps", nil)
	eq := `query($t: String!, $after: String, $types: [String!]) { tenant(tenantId: $t) { events(first: 5, after: $after, types: $types) {
		edges { node { eventId type } } pageInfo { endCursor hasNextPage } } } }`
	end := func(token string, vars map[string]any) string {
		d := gqlOK(t, e.GraphQL(token, eq, vars))
		if n := len(dig(t, d, "tenant", "events", "edges").([]any)); n != 0 {
			t.Fatalf("want an empty page: %v", d)
		}
		c := str(dig(t, d, "tenant", "events", "pageInfo", "endCursor"))
		if c == "" {
			t.Fatalf("an empty page without endCursor: %v", d)
		}
		return c
	}
	emptyStream := end(globex.Viewer.Token, map[string]any{"t": "globex"})
	noMatch := end(acme.Viewer.Token, map[string]any{"t": "acme", "types": []string{"reservation."}})
	if got := end(acme.Viewer.Token, map[string]any{"t": "acme", "after": ids[len(ids)-1]}); got != ids[len(ids)-1] {
		t.Fatalf("an empty page after %v ends at %s", ids[len(ids)-1], got)
	}
	g := must(t, e.Call(globex.Member.Token, "instances/create", instanceIn("globex", gvps, "first", 0))).Str("instanceId")
	must(t, e.Call(acme.Member.Token, "reservations/create", rsvIn("acme", vps, 1, time.Hour, 2*time.Hour)))
	if got := items(t, must(t, e.Call(globex.Viewer.Token, "events/list", map[string]any{"tenantId": "globex", "cursor": emptyStream}))); len(got) != 1 || got[0]["resourceId"] != g {
		t.Fatalf("after an empty stream's end: %v", got)
	}
	d = gqlOK(t, e.GraphQL(acme.Viewer.Token, eq, map[string]any{"t": "acme", "after": noMatch, "types": []string{"reservation."}}))
	if evs := dig(t, d, "tenant", "events", "edges").([]any); len(evs) != 1 || dig(t, evs[0], "node", "type") != "reservation.created" {
		t.Fatalf("after a filtered empty page's end: %v", d)
	}
	// Refusals, in the field's words.
	gqlExpect(t, e.GraphQL(acme.Viewer.Token, q, map[string]any{"t": "acme", "first": 0}), "INVALID_INPUT", "first")
	gqlExpect(t, e.GraphQL(acme.Viewer.Token, q, map[string]any{"t": "acme", "first": 201}), "INVALID_INPUT", "first")
	gqlExpect(t, e.GraphQL(acme.Viewer.Token, q, map[string]any{"t": "acme", "after": "garbage"}), "INVALID_INPUT", "after")
	gqlExpect(t, e.GraphQL(acme.Viewer.Token, q, map[string]any{"t": "acme", "types": []string{"nosuch.thing"}}), "INVALID_INPUT", "types[0]")
	gqlExpect(t, e.GraphQL(acme.Viewer.Token, q, map[string]any{"t": "globex"}), "PERMISSION_DENIED", anyPath)
}

// An empty page's end is read before the page: read after it, an event
// committed between the two reads was in neither the page nor what follows
// its endCursor (a probe lost instance.created in 2 of 12 fresh tenants).
// Many reads race one create per tenant: whatever each read answers, the
// created event is in its page or after its endCursor.
func TestAnEmptyPagesEndMissesNothing(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	q := `query($t: String!) { tenant(tenantId: $t) { events(first: 50, types: ["instance."]) { edges { node { resourceId } } pageInfo { endCursor } } } }`
	for round := 0; round < 8; round++ {
		tn := newTenant(t, e, fmt.Sprint("race", round))
		vps := vpsPool(t, e, tn.Admin.Token, tn.ID, "vps", nil)
		var wg sync.WaitGroup
		var id string
		reads := make([]map[string]any, 4*12)
		start := make(chan struct{})
		for g := 0; g < 4; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for k := g * 12; k < (g+1)*12; k++ {
					reads[k] = gqlOK(t, e.GraphQL(tn.Viewer.Token, q, map[string]any{"t": tn.ID}))
				}
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			time.Sleep(time.Duration(5+round*3) * time.Millisecond)
			id = must(t, e.Call(tn.Member.Token, "instances/create", instanceIn(tn.ID, vps, "vm", 0))).Str("instanceId")
		}()
		close(start)
		wg.Wait()
		for k, d := range reads {
			if len(dig(t, d, "tenant", "events", "edges").([]any)) > 0 {
				continue
			}
			after := must(t, e.Call(tn.Viewer.Token, "events/list", map[string]any{"tenantId": tn.ID, "types": []string{"instance."},
				"cursor": dig(t, d, "tenant", "events", "pageInfo", "endCursor")}))
			if got := items(t, after); len(got) == 0 || got[0]["resourceId"] != id {
				t.Fatalf("round %d, read %d: an empty page whose end is past the create: %v, then %s", round, k, d, after.Raw)
			}
		}
	}
}
