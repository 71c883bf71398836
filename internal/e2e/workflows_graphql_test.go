package e2e

import (
	"encoding/base64"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/bettercompute/computed/internal/testkit"
)

// Workflows and profile versions through the graph: createWorkflow and
// cancelWorkflow call the same methods as the method surface; Workflow
// links to its node and to the profile version as stored now;
// ComputeNode.workflows and Profile.versions are batched connections.

const wfgCreate = `mutation($in: CreateWorkflowInput!) { createWorkflow(input: $in) { workflow {
	id workflowId tenantId nodeId profileTenantId profileId profileVersion state rowVersion
	steps { index name use phase with status }
	profileDocument
	profile { tenantId profileId profileVersion used }
	node { nodeId } } } }`

const wfgCancel = `mutation($in: CancelWorkflowInput!) { cancelWorkflow(input: $in) { workflow {
	workflowId state rowVersion finishedAt steps { index status message } } } }`

const wfgNodeWorkflows = `query($t: String!, $n: String!, $first: Int, $after: String) { tenant(tenantId: $t) {
	computeNode(nodeId: $n) { nodeId
		workflows(first: $first, after: $after) { totalCount pageInfo { hasNextPage endCursor }
			edges { cursor node { workflowId state profileVersion profileDocument profile { profileId profileVersion } } } } } } }`

const wfgVersions = `query($t: String!, $p: String!, $v: Int, $first: Int, $after: String) { tenant(tenantId: $t) {
	profile(profileId: $p, profileVersion: $v) { tenantId profileId profileVersion
		versions(first: $first, after: $after) { totalCount
			edges { cursor node { tenantId profileId profileVersion visibility } }
			pageInfo { hasNextPage endCursor } } } } }`

const wfgNodeByID = `query($id: ID!) { node(id: $id) { __typename ... on Workflow { id workflowId tenantId state } } }`

// wfgList reads a JSON array of a decoded body.
func wfgList(t testing.TB, v any) []any {
	t.Helper()
	l, ok := v.([]any)
	if !ok {
		t.Fatalf("not an array: %v", v)
	}
	return l
}

// wfgCreateWorkflow runs createWorkflow as token and returns the workflow.
func wfgCreateWorkflow(t testing.TB, e *testkit.Env, token, tenantID, nodeID, profileID string, version int) map[string]any {
	t.Helper()
	in := map[string]any{"tenantId": tenantID, "nodeId": nodeID, "profileId": profileID}
	if version > 0 {
		in["profileVersion"] = version
	}
	d := gqlOK(t, env(t, e).GraphQL(token, wfgCreate, map[string]any{"in": in}))
	return obj(t, d, "createWorkflow", "workflow")
}

// wfgRESTCancel cancels a workflow through the method surface.
func wfgRESTCancel(t testing.TB, e *testkit.Env, token, tenantID, workflowID string) {
	t.Helper()
	must(t, env(t, e).Call(token, "workflows/cancel", map[string]any{"tenantId": tenantID, "workflowId": workflowID}))
}

// wfgCheckSteps compares a workflow's steps with what profiles.render
// gives for the profile version, each pending.
func wfgCheckSteps(t testing.TB, e *testkit.Env, token, tenantID, profileID string, version int, w map[string]any) {
	t.Helper()
	rendered := must(t, env(t, e).Call(token, "profiles/render", map[string]any{"tenantId": tenantID, "profileId": profileID, "profileVersion": version}))
	want := wfgList(t, rendered.Body["steps"])
	got := wfgList(t, w["steps"])
	if len(got) == 0 || len(got) != len(want) {
		t.Fatalf("want %d steps, got %d: %v", len(want), len(got), w["steps"])
	}
	for i := range got {
		g, ws := obj(t, got[i]), obj(t, want[i])
		ws["phase"] = gqlEnum(str(ws["phase"])) // an enum in the graph
		for _, k := range []string{"index", "name", "use", "phase", "with"} {
			if !reflect.DeepEqual(g[k], ws[k]) {
				t.Fatalf("step %d %s: want %v, got %v", i, k, ws[k], g[k])
			}
		}
		if g["status"] != "PENDING" {
			t.Fatalf("step %d is not pending: %v", i, g)
		}
	}
}

// TestWorkflowGraphCreate: createWorkflow on a joined node with a stored
// profile and with a builtin one, and the payload's links.
func TestWorkflowGraphCreate(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	admin, member, _ := e.Tenant("acme")
	nodeID, _ := e.Node(admin, "acme", e.Pool(admin, "acme", "gpu"))
	must(t, createProfile(t, e, member, "acme", profileDoc("gpu-node", 1), ""))
	must(t, createProfile(t, e, member, "acme", profileDoc("gpu-node", 2), ""))

	// A stored profile, latest version when profileVersion is omitted.
	w := wfgCreateWorkflow(t, e, member, "acme", nodeID, "gpu-node", 0)
	if !strings.HasPrefix(str(w["workflowId"]), "wf_") || str(w["id"]) == "" || w["tenantId"] != "acme" || w["nodeId"] != nodeID ||
		w["profileTenantId"] != "acme" || w["profileId"] != "gpu-node" || num(w["profileVersion"]) != 2 ||
		w["state"] != "PENDING" || num(w["rowVersion"]) != 1 {
		t.Fatalf("createWorkflow: %v", w)
	}
	if d := obj(t, w, "profileDocument"); d["id"] != "gpu-node" || num(d["version"]) != 2 || d["name"] != "Ubuntu 24.04 with CUDA" {
		t.Fatalf("profileDocument: %v", d)
	}
	// The profile link is the stored version, used by this workflow.
	if p := obj(t, w, "profile"); p["tenantId"] != "acme" || p["profileId"] != "gpu-node" || num(p["profileVersion"]) != 2 || p["used"] != true {
		t.Fatalf("profile: %v", p)
	}
	if n := obj(t, w, "node"); n["nodeId"] != nodeID {
		t.Fatalf("node: %v", n)
	}
	wfgCheckSteps(t, e, member, "acme", "gpu-node", 2, w)
	// The mutation and workflows.get agree.
	g := must(t, env(t, e).Call(member, "workflows/get", map[string]any{"tenantId": "acme", "workflowId": w["workflowId"]}))
	if !reflect.DeepEqual(g.Body["profileDocument"], w["profileDocument"]) || len(wfgList(t, g.Body["steps"])) != len(wfgList(t, w["steps"])) {
		t.Fatalf("workflows.get: %s vs %v", g.Raw, w)
	}
	// An explicit version.
	wfgRESTCancel(t, e, member, "acme", str(w["workflowId"]))
	w = wfgCreateWorkflow(t, e, member, "acme", nodeID, "gpu-node", 1)
	if num(w["profileVersion"]) != 1 || num(obj(t, w, "profile")["profileVersion"]) != 1 || num(obj(t, w, "profileDocument")["version"]) != 1 {
		t.Fatalf("explicit version: %v", w)
	}
	wfgRESTCancel(t, e, member, "acme", str(w["workflowId"]))

	// A builtin profile: profileTenantId builtin, the shipped document.
	const builtinID = "ubuntu-24.04-gpu-nvidia"
	b := must(t, env(t, e).Call(member, "profiles/get", map[string]any{"tenantId": "acme", "profileId": builtinID}))
	if b.Str("tenantId") != "builtin" {
		t.Fatalf("profiles.get of a builtin: %s", b.Raw)
	}
	w = wfgCreateWorkflow(t, e, member, "acme", nodeID, builtinID, 0)
	if w["profileTenantId"] != "builtin" || w["profileId"] != builtinID || num(w["profileVersion"]) != num(b.Body["profileVersion"]) ||
		!reflect.DeepEqual(w["profileDocument"], b.Body["document"]) {
		t.Fatalf("builtin workflow: %v (profile %s)", w, b.Raw)
	}
	if p := obj(t, w, "profile"); p["tenantId"] != "builtin" || p["profileId"] != builtinID || num(p["profileVersion"]) != num(b.Body["profileVersion"]) || p["used"] != false {
		t.Fatalf("builtin workflow's profile: %v", p)
	}
	if n := obj(t, w, "node"); n["nodeId"] != nodeID {
		t.Fatalf("builtin workflow's node: %v", n)
	}
	wfgCheckSteps(t, e, member, "acme", builtinID, num(b.Body["profileVersion"]), w)
}

// TestWorkflowGraphNodeWorkflows: ComputeNode.workflows, oldest first,
// with totalCount, and paged one by one with the end cursor.
func TestWorkflowGraphNodeWorkflows(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	admin, member, viewer := e.Tenant("acme")
	otherAdmin, _, _ := e.Tenant("other")
	pool := e.Pool(admin, "acme", "gpu")
	nodeA, _ := e.Node(admin, "acme", pool)
	nodeB, _ := e.Node(admin, "acme", pool)
	must(t, createProfile(t, e, member, "acme", profileDoc("gpu-node", 1), ""))

	// nodeA: two canceled workflows and a pending one; nodeB: none.
	var onA []string
	for i := 0; i < 3; i++ {
		w := wfgCreateWorkflow(t, e, member, "acme", nodeA, "gpu-node", 0)
		onA = append(onA, str(w["workflowId"]))
		if i < 2 {
			wfgRESTCancel(t, e, member, "acme", onA[i])
		}
	}
	conn := func(token, nodeID string, first int, after any) map[string]any {
		t.Helper()
		d := gqlOK(t, e.GraphQL(token, wfgNodeWorkflows, map[string]any{"t": "acme", "n": nodeID, "first": first, "after": after}))
		return obj(t, d, "tenant", "computeNode", "workflows")
	}

	c := conn(viewer, nodeA, 5, nil)
	edges := wfgList(t, c["edges"])
	if num(c["totalCount"]) != 3 || len(edges) != 3 || obj(t, c, "pageInfo")["hasNextPage"] != false {
		t.Fatalf("nodeA workflows: %v", c)
	}
	for i, ed := range edges {
		n := obj(t, ed, "node")
		want := "CANCELED"
		if i == 2 {
			want = "PENDING"
		}
		if n["workflowId"] != onA[i] || n["state"] != want || obj(t, n, "profile")["profileId"] != "gpu-node" ||
			num(obj(t, n, "profileDocument")["version"]) != 1 || str(obj(t, ed)["cursor"]) == "" {
			t.Fatalf("edge %d: %v", i, ed)
		}
	}
	if end := str(obj(t, c, "pageInfo")["endCursor"]); end != str(obj(t, edges[2])["cursor"]) {
		t.Fatalf("endCursor %q is not the last edge's cursor: %v", end, c)
	}

	// first: 1 walks every workflow once, in order.
	var walked []string
	var after any
	for i := 0; i < 10; i++ {
		c := conn(member, nodeA, 1, after)
		edges := wfgList(t, c["edges"])
		info := obj(t, c, "pageInfo")
		if num(c["totalCount"]) != 3 || len(edges) != 1 {
			t.Fatalf("page %d: %v", i, c)
		}
		walked = append(walked, str(obj(t, edges[0], "node")["workflowId"]))
		if info["hasNextPage"] != true {
			break
		}
		after = info["endCursor"]
	}
	if !reflect.DeepEqual(walked, onA) {
		t.Fatalf("paging walked %v, want %v", walked, onA)
	}
	// After the last one: an empty page that still counts them all.
	if c := conn(member, nodeA, 1, str(obj(t, c, "pageInfo")["endCursor"])); num(c["totalCount"]) != 3 || len(wfgList(t, c["edges"])) != 0 ||
		obj(t, c, "pageInfo")["hasNextPage"] != false {
		t.Fatalf("after the last workflow: %v", c)
	}
	// A node without workflows.
	if c := conn(viewer, nodeB, 5, nil); num(c["totalCount"]) != 0 || len(wfgList(t, c["edges"])) != 0 {
		t.Fatalf("nodeB workflows: %v", c)
	}
	// Both nodes in one query (one batch with and one without workflows).
	d := gqlOK(t, e.GraphQL(viewer, `query($a: String!, $b: String!) { tenant(tenantId: "acme") {
		a: computeNode(nodeId: $a) { workflows(first: 2) { totalCount edges { node { workflowId } } pageInfo { hasNextPage } } }
		b: computeNode(nodeId: $b) { workflows(first: 2) { totalCount edges { node { workflowId } } pageInfo { hasNextPage } } } } }`,
		map[string]any{"a": nodeA, "b": nodeB}))
	a, bw := obj(t, d, "tenant", "a", "workflows"), obj(t, d, "tenant", "b", "workflows")
	if num(a["totalCount"]) != 3 || len(wfgList(t, a["edges"])) != 2 || obj(t, a, "pageInfo")["hasNextPage"] != true ||
		num(bw["totalCount"]) != 0 || len(wfgList(t, bw["edges"])) != 0 {
		t.Fatalf("two nodes in one query: %v", d)
	}
	// Another tenant does not see acme's node (so neither its workflows):
	// NOT_FOUND, as for a node that does not exist.
	r := e.GraphQL(otherAdmin, `query($n: String!) { tenant(tenantId: "other") { computeNode(nodeId: $n) { workflows { totalCount } } } }`,
		map[string]any{"n": nodeA})
	gqlExpect(t, r, "NOT_FOUND", "")
	if strings.Contains(string(r.Raw), "totalCount") {
		t.Fatalf("another tenant reads acme's node: %s", r.Raw)
	}
	// A cursor the server did not return.
	gqlExpect(t, e.GraphQL(viewer, wfgNodeWorkflows, map[string]any{"t": "acme", "n": nodeA, "first": 1, "after": "garbage"}), "INVALID_INPUT", "after")
}

// TestWorkflowGraphProfileDeleted: once its profile version is deleted,
// Workflow.profile is null and profileDocument keeps the snapshot.
func TestWorkflowGraphProfileDeleted(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	admin, member, viewer := e.Tenant("acme")
	nodeID, _ := e.Node(admin, "acme", e.Pool(admin, "acme", "gpu"))
	doc1 := profileDoc("gpu-node", 1)
	must(t, createProfile(t, e, member, "acme", doc1, ""))
	must(t, createProfile(t, e, member, "acme", profileDoc("gpu-node", 2), ""))

	w1 := wfgCreateWorkflow(t, e, member, "acme", nodeID, "gpu-node", 1)
	wfgRESTCancel(t, e, member, "acme", str(w1["workflowId"]))
	w2 := wfgCreateWorkflow(t, e, member, "acme", nodeID, "gpu-node", 2)
	// Both link their profile version while it is stored.
	obj(t, w1, "profile")
	obj(t, w2, "profile")

	// Delete version 1 only.
	del := must(t, env(t, e).Call(member, "profiles/delete", map[string]any{"tenantId": "acme", "profileId": "gpu-node", "profileVersion": 1}))
	if num(del.Body["deleted"]) != 1 {
		t.Fatalf("profiles.delete: %s", del.Raw)
	}

	q := `query($id: ID!) { node(id: $id) { ... on Workflow { workflowId profileVersion profileDocument profile { profileVersion } } } }`
	n := obj(t, gqlOK(t, e.GraphQL(viewer, q, map[string]any{"id": w1["id"]})), "node")
	if n["workflowId"] != w1["workflowId"] || num(n["profileVersion"]) != 1 || n["profile"] != nil {
		t.Fatalf("workflow of the deleted version: %v", n)
	}
	if !reflect.DeepEqual(n["profileDocument"], w1["profileDocument"]) || obj(t, n, "profileDocument")["description"] != doc1["description"] {
		t.Fatalf("snapshot after delete: %v vs %v", n["profileDocument"], w1["profileDocument"])
	}
	// In one listing: the workflow of the deleted version has no profile,
	// the other one still has its own.
	d := gqlOK(t, e.GraphQL(viewer, wfgNodeWorkflows, map[string]any{"t": "acme", "n": nodeID, "first": 5}))
	edges := wfgList(t, obj(t, d, "tenant", "computeNode", "workflows")["edges"])
	if len(edges) != 2 {
		t.Fatalf("workflows: %v", d)
	}
	e1, e2 := obj(t, edges[0], "node"), obj(t, edges[1], "node")
	if e1["workflowId"] != w1["workflowId"] || e1["profile"] != nil || num(obj(t, e1, "profileDocument")["version"]) != 1 {
		t.Fatalf("first workflow after delete: %v", e1)
	}
	if e2["workflowId"] != w2["workflowId"] || num(obj(t, e2, "profile")["profileVersion"]) != 2 {
		t.Fatalf("second workflow after delete: %v", e2)
	}
	// Deleting the rest nulls the other one too.
	must(t, env(t, e).Call(member, "profiles/delete", map[string]any{"tenantId": "acme", "profileId": "gpu-node"}))
	n = obj(t, gqlOK(t, e.GraphQL(viewer, q, map[string]any{"id": w2["id"]})), "node")
	if n["profile"] != nil || num(obj(t, n, "profileDocument")["version"]) != 2 {
		t.Fatalf("workflow after deleting every version: %v", n)
	}

	// Another tenant's public profile: linked while public, null once its
	// owner makes it private; the snapshot stays.
	_, otherMember, _ := e.Tenant("other")
	must(t, createProfile(t, e, otherMember, "other", profileDoc("shared", 1), "public"))
	wfgRESTCancel(t, e, member, "acme", str(w2["workflowId"]))
	w3 := wfgCreateWorkflow(t, e, member, "acme", nodeID, "shared", 0)
	if w3["profileTenantId"] != "other" || obj(t, w3, "profile")["tenantId"] != "other" {
		t.Fatalf("workflow of a public profile: %v", w3)
	}
	must(t, env(t, e).Call(otherMember, "profiles/update", map[string]any{"tenantId": "other", "profileId": "shared", "profileVersion": 1, "visibility": "private"}))
	n = obj(t, gqlOK(t, e.GraphQL(viewer, q, map[string]any{"id": w3["id"]})), "node")
	if n["profile"] != nil || !reflect.DeepEqual(n["profileDocument"], w3["profileDocument"]) {
		t.Fatalf("workflow of a profile made private: %v", n)
	}
}

// wfgWalkVersions pages Profile.versions with first: 1 and returns the
// versions in order, checking totalCount on every page (and on the empty
// page after the last).
func wfgWalkVersions(t testing.TB, e *testkit.Env, token, tenantID, profileID string, total int) []int {
	t.Helper()
	var out []int
	var after any
	var last string
	for i := 0; i <= total+1; i++ {
		d := gqlOK(t, e.GraphQL(token, wfgVersions, map[string]any{"t": tenantID, "p": profileID, "first": 1, "after": after}))
		c := obj(t, d, "tenant", "profile", "versions")
		edges := wfgList(t, c["edges"])
		info := obj(t, c, "pageInfo")
		if num(c["totalCount"]) != total || len(edges) != 1 {
			t.Fatalf("versions page %d of %s as %s: %v", i, profileID, tenantID, c)
		}
		out = append(out, num(obj(t, edges[0], "node")["profileVersion"]))
		last = str(info["endCursor"])
		if last != str(obj(t, edges[0])["cursor"]) {
			t.Fatalf("endCursor is not the edge's cursor: %v", c)
		}
		if info["hasNextPage"] != true {
			break
		}
		after = last
	}
	d := gqlOK(t, e.GraphQL(token, wfgVersions, map[string]any{"t": tenantID, "p": profileID, "first": 1, "after": last}))
	c := obj(t, d, "tenant", "profile", "versions")
	if num(c["totalCount"]) != total || len(wfgList(t, c["edges"])) != 0 || obj(t, c, "pageInfo")["hasNextPage"] != false {
		t.Fatalf("versions after the last of %s as %s: %v", profileID, tenantID, c)
	}
	return out
}

// TestWorkflowGraphProfileVersions: Profile.versions lists every version
// for a reader of the owner, the public ones for anyone else, builtin's.
func TestWorkflowGraphProfileVersions(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	_, member, viewer := e.Tenant("acme")
	_, otherMember, _ := e.Tenant("other")
	versions := func(token, tenantID, profileID string, version any) map[string]any {
		t.Helper()
		d := gqlOK(t, e.GraphQL(token, wfgVersions, map[string]any{"t": tenantID, "p": profileID, "v": version}))
		return obj(t, d, "tenant", "profile")
	}
	list := func(p map[string]any) (vs []int, visibility []string) {
		t.Helper()
		for _, ed := range wfgList(t, obj(t, p, "versions")["edges"]) {
			n := obj(t, ed, "node")
			if n["profileId"] != p["profileId"] || n["tenantId"] != p["tenantId"] {
				t.Fatalf("a version of another profile: %v in %v", n, p)
			}
			vs, visibility = append(vs, num(n["profileVersion"])), append(visibility, str(n["visibility"]))
		}
		return vs, visibility
	}

	// Three private versions: the owner's readers see all three, from any
	// of them.
	for v := 1; v <= 3; v++ {
		must(t, createProfile(t, e, member, "acme", profileDoc("gpu-node", v), ""))
	}
	// Another profile id of the owner is not a version of this one.
	must(t, createProfile(t, e, member, "acme", profileDoc("gpu-node-2", 1), ""))
	for _, v := range []any{nil, 1, 2} {
		p := versions(viewer, "acme", "gpu-node", v)
		vs, _ := list(p)
		c := obj(t, p, "versions")
		if num(c["totalCount"]) != 3 || !reflect.DeepEqual(vs, []int{1, 2, 3}) || obj(t, c, "pageInfo")["hasNextPage"] != false {
			t.Fatalf("owner's versions from version %v: %v", v, p)
		}
	}
	if vs := wfgWalkVersions(t, e, viewer, "acme", "gpu-node", 3); !reflect.DeepEqual(vs, []int{1, 2, 3}) {
		t.Fatalf("owner's paging walked %v", vs)
	}
	// While all are private, another tenant finds nothing.
	gqlExpect(t, e.GraphQL(otherMember, wfgVersions, map[string]any{"t": "other", "p": "gpu-node"}), "NOT_FOUND", anyPath)

	// Versions 1 and 3 public, 2 private.
	for _, v := range []int{1, 3} {
		must(t, env(t, e).Call(member, "profiles/update", map[string]any{"tenantId": "acme", "profileId": "gpu-node", "profileVersion": v, "visibility": "public"}))
	}
	p := versions(viewer, "acme", "gpu-node", nil)
	if vs, vis := list(p); num(obj(t, p, "versions")["totalCount"]) != 3 || !reflect.DeepEqual(vs, []int{1, 2, 3}) ||
		!reflect.DeepEqual(vis, []string{"PUBLIC", "PRIVATE", "PUBLIC"}) {
		t.Fatalf("owner's versions after publishing 1 and 3: %v", p)
	}
	// Another tenant reads the public profile through its own tenant (own,
	// then public, then builtin): only the public versions.
	p = versions(otherMember, "other", "gpu-node", nil)
	if p["tenantId"] != "acme" || num(p["profileVersion"]) != 3 {
		t.Fatalf("another tenant's view of the public profile: %v", p)
	}
	vs, vis := list(p)
	c := obj(t, p, "versions")
	if num(c["totalCount"]) != 2 || !reflect.DeepEqual(vs, []int{1, 3}) || !reflect.DeepEqual(vis, []string{"PUBLIC", "PUBLIC"}) ||
		obj(t, c, "pageInfo")["hasNextPage"] != false {
		t.Fatalf("another tenant sees versions %v (%v): %v", vs, vis, p)
	}
	if p := versions(otherMember, "other", "gpu-node", 1); num(p["profileVersion"]) != 1 || num(obj(t, p, "versions")["totalCount"]) != 2 {
		t.Fatalf("another tenant from version 1: %v", p)
	}
	if vs := wfgWalkVersions(t, e, otherMember, "other", "gpu-node", 2); !reflect.DeepEqual(vs, []int{1, 3}) {
		t.Fatalf("another tenant's paging walked %v", vs)
	}
	// The private version itself stays hidden.
	gqlExpect(t, e.GraphQL(otherMember, wfgVersions, map[string]any{"t": "other", "p": "gpu-node", "v": 2}), "NOT_FOUND", anyPath)
	// The owner still walks all three.
	if vs := wfgWalkVersions(t, e, member, "acme", "gpu-node", 3); !reflect.DeepEqual(vs, []int{1, 2, 3}) {
		t.Fatalf("owner's paging after publishing walked %v", vs)
	}

	// Every profile the other tenant lists, with its versions, in one
	// query: acme's public versions (each seeing the two public ones) and
	// builtin's, batched together.
	d := gqlOK(t, e.GraphQL(otherMember, `{ tenant(tenantId: "other") { profiles(first: 50) { edges { node { tenantId profileId profileVersion
		versions(first: 10) { totalCount edges { node { profileVersion } } } } } } } }`, nil))
	seen := map[string]bool{}
	for _, ed := range wfgList(t, obj(t, d, "tenant", "profiles")["edges"]) {
		n := obj(t, ed, "node")
		c := obj(t, n, "versions")
		var vs []int
		for _, x := range wfgList(t, c["edges"]) {
			vs = append(vs, num(obj(t, x, "node")["profileVersion"]))
		}
		switch {
		case n["tenantId"] == "acme" && n["profileId"] == "gpu-node":
			seen["acme"] = true
			if num(c["totalCount"]) != 2 || !reflect.DeepEqual(vs, []int{1, 3}) {
				t.Fatalf("acme's public profile in other's list: %v", n)
			}
		case n["tenantId"] == "builtin":
			seen["builtin"] = true
			if num(c["totalCount"]) != len(vs) || len(vs) == 0 {
				t.Fatalf("builtin profile in other's list: %v", n)
			}
		default:
			t.Fatalf("other lists a profile it should not see: %v", n)
		}
	}
	if !seen["acme"] || !seen["builtin"] {
		t.Fatalf("other's profiles: %v", d)
	}

	// A cursor of the versions' kind whose version this server never
	// writes is refused, as every list refuses a forged cursor (it read as
	// the first page: a client paging on a corrupted cursor looped). A
	// version past the last is an empty page.
	forged := func(key string) string {
		b, _ := json.Marshal([]any{"profileVersion", key})
		return base64.RawURLEncoding.EncodeToString(b)
	}
	for _, key := range []string{"abc", "13.5", "01", "+1", "-1", "0", "2147483648", "99999999999999999999", " 1", ""} {
		gqlExpect(t, e.GraphQL(viewer, wfgVersions, map[string]any{"t": "acme", "p": "gpu-node", "first": 2, "after": forged(key)}), "INVALID_INPUT", "after")
	}
	d = gqlOK(t, e.GraphQL(viewer, wfgVersions, map[string]any{"t": "acme", "p": "gpu-node", "first": 2, "after": forged("2147483647")}))
	if c := obj(t, d, "tenant", "profile", "versions"); len(wfgList(t, c["edges"])) != 0 {
		t.Fatalf("versions after 2147483647: %v", c)
	}
	d = gqlOK(t, e.GraphQL(viewer, wfgVersions, map[string]any{"t": "acme", "p": "gpu-node", "first": 2, "after": forged("1")}))
	if vs, _ := list(obj(t, d, "tenant", "profile")); !reflect.DeepEqual(vs, []int{2, 3}) {
		t.Fatalf("versions after 1: %v", vs)
	}

	// A builtin profile's versions.
	for _, tenantID := range []string{"acme", "other"} {
		token := viewer
		if tenantID == "other" {
			token = otherMember
		}
		for _, id := range builtinProfileIDs {
			p := versions(token, tenantID, id, nil)
			vs, vis := list(p)
			c := obj(t, p, "versions")
			if p["tenantId"] != "builtin" || num(c["totalCount"]) != len(vs) || len(vs) == 0 || vs[len(vs)-1] != num(p["profileVersion"]) ||
				obj(t, c, "pageInfo")["hasNextPage"] != false {
				t.Fatalf("builtin %s versions as %s: %v", id, tenantID, p)
			}
			for _, v := range vis {
				if v != "PUBLIC" {
					t.Fatalf("builtin %s has a %s version", id, v)
				}
			}
			if walked := wfgWalkVersions(t, e, token, tenantID, id, len(vs)); !reflect.DeepEqual(walked, vs) {
				t.Fatalf("builtin %s paging walked %v, want %v", id, walked, vs)
			}
		}
	}

	// A deleted version drops out of the list and the count.
	must(t, env(t, e).Call(member, "profiles/delete", map[string]any{"tenantId": "acme", "profileId": "gpu-node", "profileVersion": 2}))
	p = versions(viewer, "acme", "gpu-node", nil)
	if vs, _ := list(p); num(obj(t, p, "versions")["totalCount"]) != 2 || !reflect.DeepEqual(vs, []int{1, 3}) {
		t.Fatalf("owner's versions after deleting 2: %v", p)
	}
	// Bad paging arguments.
	gqlExpect(t, e.GraphQL(viewer, wfgVersions, map[string]any{"t": "acme", "p": "gpu-node", "first": 0}), "INVALID_INPUT", "first")
	gqlExpect(t, e.GraphQL(viewer, wfgVersions, map[string]any{"t": "acme", "p": "gpu-node", "after": "garbage"}), "INVALID_INPUT", "after")
}

// TestWorkflowGraphCancelAndNodeID: cancelWorkflow, and node(id:) on a
// Workflow's global id.
func TestWorkflowGraphCancelAndNodeID(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	admin, member, viewer := e.Tenant("acme")
	otherAdmin, _, _ := e.Tenant("other")
	nodeID, cred := e.Node(admin, "acme", e.Pool(admin, "acme", "gpu"))
	must(t, createProfile(t, e, member, "acme", profileDoc("gpu-node", 1), ""))

	w := wfgCreateWorkflow(t, e, member, "acme", nodeID, "gpu-node", 0)
	wfID := str(w["workflowId"])
	must(t, env(t, e).Call(cred, "workflows/reportStep", map[string]any{"nodeId": nodeID, "workflowId": wfID, "index": 0, "status": "succeeded"}))
	in := map[string]any{"tenantId": "acme", "workflowId": wfID, "expectedVersion": 1}
	gqlExpect(t, e.GraphQL(member, wfgCancel, map[string]any{"in": in}), "CONFLICT", anyPath)
	gqlExpect(t, e.GraphQL(viewer, wfgCancel, map[string]any{"in": in}), "PERMISSION_DENIED", anyPath)
	gqlExpect(t, e.GraphQL(otherAdmin, wfgCancel, map[string]any{"in": map[string]any{"tenantId": "other", "workflowId": wfID}}), "NOT_FOUND", anyPath)
	in["expectedVersion"] = 2
	c := obj(t, gqlOK(t, e.GraphQL(member, wfgCancel, map[string]any{"in": in})), "cancelWorkflow", "workflow")
	steps := wfgList(t, c["steps"])
	if c["workflowId"] != wfID || c["state"] != "CANCELED" || num(c["rowVersion"]) != 3 || c["finishedAt"] == nil || len(steps) < 2 ||
		obj(t, steps[0])["status"] != "SUCCEEDED" {
		t.Fatalf("cancelWorkflow: %v", c)
	}
	for _, s := range steps[1:] {
		if obj(t, s)["status"] != "SKIPPED" {
			t.Fatalf("steps after cancel: %v", c)
		}
	}
	// A finished workflow does not cancel again.
	delete(in, "expectedVersion")
	gqlExpect(t, e.GraphQL(member, wfgCancel, map[string]any{"in": in}), "INVALID_STATE", anyPath)

	// node(id:): the workflow for a reader of the tenant, null for another
	// tenant and for an unknown workflow.
	id := str(w["id"])
	n := obj(t, gqlOK(t, e.GraphQL(viewer, wfgNodeByID, map[string]any{"id": id})), "node")
	if n["__typename"] != "Workflow" || n["id"] != id || n["workflowId"] != wfID || n["tenantId"] != "acme" || n["state"] != "CANCELED" {
		t.Fatalf("node(id:) for the tenant: %v", n)
	}
	if d := gqlOK(t, e.GraphQL(otherAdmin, wfgNodeByID, map[string]any{"id": id})); d["node"] != nil {
		t.Fatalf("node(id:) for another tenant: %v", d)
	}
	// A fresh pending workflow, canceled without expectedVersion: every
	// step skipped.
	w2 := wfgCreateWorkflow(t, e, member, "acme", nodeID, "gpu-node", 0)
	c = obj(t, gqlOK(t, e.GraphQL(member, wfgCancel, map[string]any{"in": map[string]any{"tenantId": "acme", "workflowId": w2["workflowId"]}})), "cancelWorkflow", "workflow")
	if c["state"] != "CANCELED" {
		t.Fatalf("cancel of a pending workflow: %v", c)
	}
	for _, s := range wfgList(t, c["steps"]) {
		if obj(t, s)["status"] != "SKIPPED" {
			t.Fatalf("cancel of a pending workflow: %v", c)
		}
	}
	if d := gqlOK(t, e.GraphQL(otherAdmin, wfgNodeByID, map[string]any{"id": w2["id"]})); d["node"] != nil {
		t.Fatalf("node(id:) of a second workflow for another tenant: %v", d)
	}
	if n := obj(t, gqlOK(t, e.GraphQL(member, wfgNodeByID, map[string]any{"id": w2["id"]})), "node"); n["workflowId"] != w2["workflowId"] {
		t.Fatalf("node(id:) of a second workflow: %v", n)
	}
}

// TestWorkflowGraphErrors: createWorkflow's refusals carry the method
// surface's codes.
func TestWorkflowGraphErrors(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	admin, member, viewer := e.Tenant("acme")
	otherAdmin, _, _ := e.Tenant("other")
	nodeID, _ := e.Node(admin, "acme", e.Pool(admin, "acme", "gpu"))
	otherNode, _ := e.Node(otherAdmin, "other", e.Pool(otherAdmin, "other", "gpu"))
	must(t, createProfile(t, e, member, "acme", profileDoc("gpu-node", 1), ""))
	create := func(token, profileID string, version int, node string) testkit.Resp {
		in := map[string]any{"tenantId": "acme", "nodeId": node, "profileId": profileID}
		if version > 0 {
			in["profileVersion"] = version
		}
		return e.GraphQL(token, wfgCreate, map[string]any{"in": in})
	}

	gqlExpect(t, create(member, "no-such-profile", 0, nodeID), "NOT_FOUND", anyPath)
	gqlExpect(t, create(member, "gpu-node", 2, nodeID), "NOT_FOUND", anyPath)
	gqlExpect(t, create(member, "gpu-node", 0, otherNode), "NOT_FOUND", "nodeId")
	gqlExpect(t, create(viewer, "gpu-node", 0, nodeID), "PERMISSION_DENIED", anyPath)
	gqlExpect(t, create(otherAdmin, "gpu-node", 0, nodeID), "PERMISSION_DENIED", anyPath)
	gqlExpect(t, create(member, "GPU", 0, nodeID), "INVALID_INPUT", "profileId")
	// None of these made a workflow, and none marked the profile used.
	d := gqlOK(t, e.GraphQL(viewer, wfgNodeWorkflows, map[string]any{"t": "acme", "n": nodeID, "first": 5}))
	if c := obj(t, d, "tenant", "computeNode", "workflows"); num(c["totalCount"]) != 0 {
		t.Fatalf("refused creates left workflows: %v", c)
	}
	if p := must(t, env(t, e).Call(member, "profiles/get", map[string]any{"tenantId": "acme", "profileId": "gpu-node"})); p.Body["used"] != false {
		t.Fatalf("a refused create marked the profile used: %s", p.Raw)
	}
	// A second workflow on a busy node: CONFLICT.
	wfgCreateWorkflow(t, e, member, "acme", nodeID, "gpu-node", 0)
	gqlExpect(t, create(member, "gpu-node", 0, nodeID), "CONFLICT", "nodeId")
}
