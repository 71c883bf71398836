package workflows_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bettercompute/computed/internal/authz"
	"github.com/bettercompute/computed/internal/ids"
	"github.com/bettercompute/computed/internal/page"
	"github.com/bettercompute/computed/internal/testkit"
	"github.com/bettercompute/computed/internal/workflows"
)

func TestMain(m *testing.M) { testkit.Main(m) }

var wfIDRe = regexp.MustCompile(`^wf_[0-9a-hjkmnp-tv-z]{26,52}$`)

var statusOf = map[string]int{
	"":                  http.StatusOK,
	"INVALID_INPUT":     http.StatusBadRequest,
	"UNAUTHENTICATED":   http.StatusUnauthorized,
	"PERMISSION_DENIED": http.StatusForbidden,
	"NOT_FOUND":         http.StatusNotFound,
	"CONFLICT":          http.StatusConflict,
	"INVALID_STATE":     http.StatusUnprocessableEntity,
}

// anyPath means "do not check details.path".
const anyPath = "\x00any"

func expect(t testing.TB, r testkit.Resp, code, path string) {
	t.Helper()
	if r.Status != statusOf[code] || r.Code() != code {
		t.Fatalf("want %d %q, got %d %q: %s", statusOf[code], code, r.Status, r.Code(), r.Raw)
	}
	if path != anyPath && r.Path() != path {
		t.Fatalf("want details.path %q, got %q: %s", path, r.Path(), r.Raw)
	}
}

func num(v any) int { f, _ := v.(float64); return int(f) }

func obj(t testing.TB, v any) map[string]any {
	t.Helper()
	m, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("not an object: %v", v)
	}
	return m
}

func steps(t testing.TB, r testkit.Resp) []map[string]any {
	t.Helper()
	raw, ok := r.Body["steps"].([]any)
	if !ok {
		t.Fatalf("no steps array: %s", r.Raw)
	}
	out := make([]map[string]any, len(raw))
	for i, x := range raw {
		out[i] = obj(t, x)
	}
	return out
}

func items(t testing.TB, r testkit.Resp) []map[string]any {
	t.Helper()
	raw, ok := r.Body["items"].([]any)
	if !ok {
		t.Fatalf("not a page: %s", r.Raw)
	}
	if _, ok := r.Body["cursor"]; !ok {
		t.Fatalf("page without a cursor key: %s", r.Raw)
	}
	out := make([]map[string]any, len(raw))
	for i, x := range raw {
		out[i] = obj(t, x)
	}
	return out
}

// profileDoc is a valid profile document that renders to five steps
// (disk.wipe, os.install's three, one driver).
func profileDoc(id string, version int, description string) map[string]any {
	return map[string]any{
		"id": id, "version": version,
		"name": "Ubuntu 24.04 with CUDA", "description": description,
		"image":   map[string]any{"url": "https://images.example/noble.raw.zst", "sha256": strings.Repeat("ab", 32), "format": "raw"},
		"drivers": []any{map[string]any{"name": "nvidia", "version": "570.86.15"}},
		"steps": []any{
			map[string]any{"name": "wipe", "use": "disk.wipe", "with": map[string]any{"devices": []any{"/dev/nvme0n1"}}},
			map[string]any{"use": "os.install"},
			map[string]any{"use": "drivers.install"},
		},
		"userData":   "#cloud-config\n",
		"hostConfig": map[string]any{"hostname": "{{ node.name }}"},
	}
}

const profileSteps = 5

func createProfile(t testing.TB, e *testkit.Env, token, tenantID string, doc map[string]any, visibility string) testkit.Resp {
	t.Helper()
	in := map[string]any{"tenantId": tenantID, "document": doc}
	if visibility != "" {
		in["visibility"] = visibility
	}
	return e.Must(e.Call(token, "profiles/create", in))
}

// nodeCall calls a nodes method (cordon, remove, ...) on one node as the
// tenant's admin.
func nodeCall(e *testkit.Env, admin, method, tenantID, nodeID string) testkit.Resp {
	e.T.Helper()
	return e.Must(e.Call(admin, "nodes/"+method, map[string]any{"tenantId": tenantID, "nodeId": nodeID}))
}

func create(e *testkit.Env, token, tenantID, nodeID, profileID string, version int) testkit.Resp {
	in := map[string]any{"tenantId": tenantID, "nodeId": nodeID, "profileId": profileID}
	if version > 0 {
		in["profileVersion"] = version
	}
	return e.Call(token, "workflows/create", in)
}

func report(e *testkit.Env, token, nodeID, workflowID string, index int, status string) testkit.Resp {
	return e.Call(token, "workflows/reportStep", map[string]any{"nodeId": nodeID, "workflowId": workflowID, "index": index, "status": status})
}

func cancel(e *testkit.Env, token, tenantID, workflowID string) testkit.Resp {
	return e.Call(token, "workflows/cancel", map[string]any{"tenantId": tenantID, "workflowId": workflowID})
}

func docOf(t testing.TB, v any) map[string]any {
	t.Helper()
	return obj(t, v)
}

func TestWorkflowsCreate(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	admin, member, _ := e.Tenant("acme")
	otherAdmin, otherMember, _ := e.Tenant("other")
	node, _ := e.Node(admin, "acme", e.Pool(admin, "acme", "gpu"))
	otherNode, _ := e.Node(otherAdmin, "other", e.Pool(otherAdmin, "other", "gpu"))

	createProfile(t, e, member, "acme", profileDoc("gpu", 1, "one"), "")
	createProfile(t, e, member, "acme", profileDoc("gpu", 2, "two"), "")

	// Latest version when profileVersion is omitted.
	r := e.Must(create(e, member, "acme", node, "gpu", 0))
	w := r.Body
	if !wfIDRe.MatchString(r.Str("workflowId")) || w["tenantId"] != "acme" || w["nodeId"] != node || w["profileTenantId"] != "acme" ||
		w["profileId"] != "gpu" || num(w["profileVersion"]) != 2 || w["state"] != "pending" || num(w["rowVersion"]) != 1 ||
		r.Str("createdAt") == "" || r.Str("updatedAt") == "" || w["finishedAt"] != nil {
		t.Fatalf("workflows.create output: %s", r.Raw)
	}
	if d := docOf(t, w["profileDocument"]); d["description"] != "two" || num(d["version"]) != 2 {
		t.Fatalf("snapshot is not version 2: %s", r.Raw)
	}
	// The steps are those profiles.render gives, each pending.
	rendered := e.Must(e.Call(member, "profiles/render", map[string]any{"tenantId": "acme", "profileId": "gpu", "profileVersion": 2}))
	want := rendered.Body["steps"].([]any)
	got := steps(t, r)
	if len(got) != profileSteps || len(got) != len(want) {
		t.Fatalf("want %d steps, got %d: %s", len(want), len(got), r.Raw)
	}
	for i, s := range got {
		ws := obj(t, want[i])
		for _, k := range []string{"index", "name", "use", "phase", "with"} {
			if !reflect.DeepEqual(s[k], ws[k]) {
				t.Fatalf("step %d %s: want %v, got %v", i, k, ws[k], s[k])
			}
		}
		if s["status"] != "pending" || s["startedAt"] != nil || s["finishedAt"] != nil || s["message"] != nil {
			t.Fatalf("step %d is not a fresh pending step: %v", i, s)
		}
	}

	// A second workflow on the same node: CONFLICT.
	expect(t, create(e, member, "acme", node, "gpu", 1), "CONFLICT", "nodeId")
	e.Must(cancel(e, member, "acme", r.Str("workflowId")))

	// An explicit version.
	r = e.Must(create(e, member, "acme", node, "gpu", 1))
	if num(r.Body["profileVersion"]) != 1 || docOf(t, r.Body["profileDocument"])["description"] != "one" {
		t.Fatalf("explicit version: %s", r.Raw)
	}
	e.Must(cancel(e, member, "acme", r.Str("workflowId")))

	// A builtin profile, picked from profiles.list.
	var builtin map[string]any
	for _, it := range items(t, e.Must(e.Call(member, "profiles/list", map[string]any{"tenantId": "acme"}))) {
		if it["tenantId"] == "builtin" {
			builtin = it
			break
		}
	}
	if builtin == nil {
		t.Fatal("profiles.list shows no builtin profile")
	}
	r = e.Must(create(e, member, "acme", node, builtin["profileId"].(string), 0))
	if r.Body["profileTenantId"] != "builtin" || r.Body["profileId"] != builtin["profileId"] ||
		num(r.Body["profileVersion"]) != num(builtin["profileVersion"]) || !reflect.DeepEqual(r.Body["profileDocument"], builtin["document"]) {
		t.Fatalf("builtin workflow: %s", r.Raw)
	}
	e.Must(cancel(e, member, "acme", r.Str("workflowId")))

	// Another tenant's public profile resolves; its tenant is profileTenantId.
	createProfile(t, e, otherMember, "other", profileDoc("shared", 1, "public"), "public")
	r = e.Must(create(e, member, "acme", node, "shared", 0))
	if r.Body["profileTenantId"] != "other" {
		t.Fatalf("public profile workflow: %s", r.Raw)
	}
	e.Must(cancel(e, member, "acme", r.Str("workflowId")))
	// ... but not its private one.
	createProfile(t, e, otherMember, "other", profileDoc("secret", 1, "private"), "")
	expect(t, create(e, member, "acme", node, "secret", 0), "NOT_FOUND", anyPath)

	// Unknown profile or version.
	expect(t, create(e, member, "acme", node, "nope", 0), "NOT_FOUND", anyPath)
	expect(t, create(e, member, "acme", node, "gpu", 3), "NOT_FOUND", anyPath)

	// A profile that does not render: INVALID_INPUT with the issues.
	bad := profileDoc("broken", 1, "bad")
	bad["steps"] = []any{map[string]any{"use": "no.such.step"}}
	createProfile(t, e, member, "acme", bad, "")
	r = create(e, member, "acme", node, "broken", 0)
	expect(t, r, "INVALID_INPUT", "profileId")
	issues, _ := obj(t, obj(t, r.Body["error"])["details"])["issues"].([]any)
	if len(issues) != 1 || obj(t, issues[0])["code"] != "UNKNOWN_STEP" || obj(t, issues[0])["path"] != "document.steps[0].use" {
		t.Fatalf("issues: %s", r.Raw)
	}
	// ... and is not marked used.
	if p := e.Must(e.Call(member, "profiles/get", map[string]any{"tenantId": "acme", "profileId": "broken"})); p.Body["used"] != false {
		t.Fatalf("a refused workflow marked the profile used: %s", p.Raw)
	}

	// Another tenant's node, an unknown node: NOT_FOUND.
	expect(t, create(e, member, "acme", otherNode, "gpu", 0), "NOT_FOUND", "nodeId")
	expect(t, create(e, member, "acme", ids.New(ids.Node), "gpu", 0), "NOT_FOUND", "nodeId")
	// A cordoned node: INVALID_STATE; a removed one: NOT_FOUND.
	nodeCall(e, admin, "cordon", "acme", node)
	expect(t, create(e, member, "acme", node, "gpu", 0), "INVALID_STATE", "nodeId")
	nodeCall(e, admin, "remove", "acme", node)
	expect(t, create(e, member, "acme", node, "gpu", 0), "NOT_FOUND", "nodeId")
}

func TestWorkflowsFirstUse(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	admin, member, _ := e.Tenant("acme")
	node, _ := e.Node(admin, "acme", e.Pool(admin, "acme", "gpu"))
	createProfile(t, e, member, "acme", profileDoc("gpu", 1, "original"), "")
	get := func() testkit.Resp {
		return e.Must(e.Call(member, "profiles/get", map[string]any{"tenantId": "acme", "profileId": "gpu", "profileVersion": 1}))
	}
	if p := get(); p.Body["used"] != false || num(p.Body["rowVersion"]) != 1 {
		t.Fatalf("fresh profile: %s", p.Raw)
	}

	w := e.Must(create(e, member, "acme", node, "gpu", 1))
	wfID := w.Str("workflowId")
	// The first use marks the version used and bumps its rowVersion.
	p := get()
	if p.Body["used"] != true || num(p.Body["rowVersion"]) != 2 {
		t.Fatalf("after first use: %s", p.Raw)
	}
	// An expectedVersion read before the first use is CONFLICT.
	expect(t, e.Call(member, "profiles/update", map[string]any{"tenantId": "acme", "profileId": "gpu", "profileVersion": 1,
		"visibility": "public", "expectedVersion": 1}), "CONFLICT", anyPath)
	// A new document is INVALID_STATE; visibility still changes.
	expect(t, e.Call(member, "profiles/update", map[string]any{"tenantId": "acme", "profileId": "gpu", "profileVersion": 1,
		"document": profileDoc("gpu", 1, "changed")}), "INVALID_STATE", "document")
	u := e.Must(e.Call(member, "profiles/update", map[string]any{"tenantId": "acme", "profileId": "gpu", "profileVersion": 1,
		"visibility": "public", "expectedVersion": 2}))
	if u.Body["visibility"] != "public" || docOf(t, u.Body["document"])["description"] != "original" {
		t.Fatalf("visibility update: %s", u.Raw)
	}
	// A second use changes nothing on the profile.
	e.Must(cancel(e, member, "acme", wfID))
	w2 := e.Must(create(e, member, "acme", node, "gpu", 1))
	if p := get(); num(p.Body["rowVersion"]) != 3 || p.Body["used"] != true {
		t.Fatalf("after second use: %s", p.Raw)
	}

	// Deleting the profile leaves the workflows' snapshots alone.
	e.Must(e.Call(member, "profiles/delete", map[string]any{"tenantId": "acme", "profileId": "gpu"}))
	for _, id := range []string{wfID, w2.Str("workflowId")} {
		g := e.Must(e.Call(member, "workflows/get", map[string]any{"tenantId": "acme", "workflowId": id}))
		if d := docOf(t, g.Body["profileDocument"]); d["description"] != "original" || len(steps(t, g)) != profileSteps {
			t.Fatalf("snapshot after delete: %s", g.Raw)
		}
	}
	e.Must(cancel(e, member, "acme", w2.Str("workflowId")))
	// ... and new workflows no longer find it.
	expect(t, create(e, member, "acme", node, "gpu", 1), "NOT_FOUND", anyPath)
}

func TestWorkflowsReportStep(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	admin, member, _ := e.Tenant("acme")
	pool := e.Pool(admin, "acme", "gpu")
	node, nodeTok := e.Node(admin, "acme", pool)
	node2, node2Tok := e.Node(admin, "acme", pool)
	createProfile(t, e, member, "acme", profileDoc("gpu", 1, "x"), "")

	wf := e.Must(create(e, member, "acme", node, "gpu", 0)).Str("workflowId")

	// Credentials: a tenant admin's bearer token is not a node credential;
	// another node's credential holds nothing on this node.
	expect(t, report(e, admin, node, wf, 0, "running"), "PERMISSION_DENIED", anyPath)
	expect(t, report(e, e.Operator, node, wf, 0, "running"), "PERMISSION_DENIED", anyPath)
	expect(t, report(e, node2Tok, node, wf, 0, "running"), "PERMISSION_DENIED", anyPath)
	// Its own node, but a workflow of another node: NOT_FOUND.
	expect(t, report(e, node2Tok, node2, wf, 0, "running"), "NOT_FOUND", anyPath)
	expect(t, report(e, nodeTok, node, ids.New(ids.Workflow), 0, "running"), "NOT_FOUND", anyPath)
	expect(t, report(e, "", node, wf, 0, "running"), "UNAUTHENTICATED", anyPath)

	// Out of order: step 1 before step 0 succeeded.
	expect(t, report(e, nodeTok, node, wf, 1, "running"), "INVALID_STATE", "index")
	expect(t, report(e, nodeTok, node, wf, profileSteps, "running"), "INVALID_INPUT", "index")

	// The first running moves the workflow to running.
	r := e.Must(e.Call(nodeTok, "workflows/reportStep", map[string]any{"nodeId": node, "workflowId": wf, "index": 0, "status": "running", "message": "wiping"}))
	s := steps(t, r)
	if r.Body["state"] != "running" || s[0]["status"] != "running" || s[0]["startedAt"] == nil || s[0]["finishedAt"] != nil ||
		s[0]["message"] != "wiping" || num(r.Body["rowVersion"]) != 2 {
		t.Fatalf("first running: %s", r.Raw)
	}
	// Step 1 cannot start while step 0 runs.
	expect(t, report(e, nodeTok, node, wf, 1, "running"), "INVALID_STATE", "index")
	// The same report again changes nothing: no event, no audit record,
	// the same version (a daemon's heartbeat filled the tenant's stream).
	counts := func() (n [2]int) {
		if err := e.DB.Get(&n[0], `SELECT (SELECT count(*) FROM events WHERE resource_id = $1) + (SELECT count(*) FROM event_inbox WHERE resource_id = $1)`, wf); err != nil {
			t.Fatal(err)
		}
		if err := e.DB.Get(&n[1], `SELECT count(*) FROM audit_log WHERE method = 'workflows.reportStep'`); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := counts()
	for range 3 {
		again := e.Must(e.Call(nodeTok, "workflows/reportStep", map[string]any{"nodeId": node, "workflowId": wf, "index": 0, "status": "running", "message": "wiping"}))
		if string(again.Raw) != string(r.Raw) {
			t.Fatalf("the same report: %s, was %s", again.Raw, r.Raw)
		}
	}
	if after := counts(); after != before {
		t.Fatalf("the same report wrote events and records: %v, was %v", after, before)
	}
	// running again replaces the message.
	r = e.Must(report(e, nodeTok, node, wf, 0, "running"))
	if steps(t, r)[0]["message"] != nil || steps(t, r)[0]["startedAt"] != s[0]["startedAt"] || num(r.Body["rowVersion"]) != 3 {
		t.Fatalf("running again: %s", r.Raw)
	}
	if after := counts(); after != [2]int{before[0] + 1, before[1] + 1} {
		t.Fatalf("a new message: %v, was %v", after, before)
	}
	for i := 0; i < profileSteps; i++ {
		if i > 0 {
			e.Must(report(e, nodeTok, node, wf, i, "running"))
		}
		r = e.Must(report(e, nodeTok, node, wf, i, "succeeded"))
		if i < profileSteps-1 && r.Body["state"] != "running" {
			t.Fatalf("after step %d: %s", i, r.Raw)
		}
		if i == 0 {
			// A finished step is final.
			expect(t, report(e, nodeTok, node, wf, 0, "failed"), "INVALID_STATE", "index")
		}
	}
	if r.Body["state"] != "succeeded" || r.Body["finishedAt"] == nil {
		t.Fatalf("after the last step: %s", r.Raw)
	}
	for i, s := range steps(t, r) {
		if s["status"] != "succeeded" || s["startedAt"] == nil || s["finishedAt"] == nil {
			t.Fatalf("step %d after success: %v", i, s)
		}
	}
	// A finished workflow takes no reports and no cancel.
	expect(t, report(e, nodeTok, node, wf, profileSteps-1, "succeeded"), "INVALID_STATE", anyPath)
	expect(t, cancel(e, member, "acme", wf), "INVALID_STATE", anyPath)

	// A failed step fails the workflow and skips the rest. A step may finish
	// without a running report first.
	wf2 := e.Must(create(e, member, "acme", node, "gpu", 0)).Str("workflowId")
	e.Must(report(e, nodeTok, node, wf2, 0, "succeeded"))
	r = e.Must(e.Call(nodeTok, "workflows/reportStep", map[string]any{"nodeId": node, "workflowId": wf2, "index": 1, "status": "failed", "message": "partition table is busy"}))
	s = steps(t, r)
	if r.Body["state"] != "failed" || r.Body["finishedAt"] == nil || s[0]["status"] != "succeeded" || s[1]["status"] != "failed" ||
		s[1]["message"] != "partition table is busy" || s[1]["startedAt"] == nil || s[1]["finishedAt"] == nil {
		t.Fatalf("failed step: %s", r.Raw)
	}
	for _, x := range s[2:] {
		if x["status"] != "skipped" || x["startedAt"] != nil {
			t.Fatalf("steps after a failure: %s", r.Raw)
		}
	}
	expect(t, report(e, nodeTok, node, wf2, 2, "running"), "INVALID_STATE", anyPath)
	// The node is free again.
	wf3 := e.Must(create(e, member, "acme", node, "gpu", 0)).Str("workflowId")
	// A removed node's credential is revoked with it: it no longer
	// authenticates at all.
	nodeCall(e, admin, "remove", "acme", node)
	expect(t, report(e, nodeTok, node, wf3, 0, "running"), "UNAUTHENTICATED", anyPath)
}

func TestWorkflowsCancel(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	admin, member, viewer := e.Tenant("acme")
	_, otherMember, _ := e.Tenant("other")
	node, nodeTok := e.Node(admin, "acme", e.Pool(admin, "acme", "gpu"))
	createProfile(t, e, member, "acme", profileDoc("gpu", 1, "x"), "")

	wf := e.Must(create(e, member, "acme", node, "gpu", 0)).Str("workflowId")
	e.Must(report(e, nodeTok, node, wf, 0, "succeeded"))
	e.Must(report(e, nodeTok, node, wf, 1, "running")) // rowVersion 3
	in := map[string]any{"tenantId": "acme", "workflowId": wf, "expectedVersion": 2}
	expect(t, e.Call(member, "workflows/cancel", in), "CONFLICT", anyPath)
	expect(t, e.Call(viewer, "workflows/cancel", in), "PERMISSION_DENIED", anyPath)
	expect(t, cancel(e, otherMember, "other", wf), "NOT_FOUND", anyPath)
	in["expectedVersion"] = 3
	r := e.Must(e.Call(member, "workflows/cancel", in))
	s := steps(t, r)
	if r.Body["state"] != "canceled" || r.Body["finishedAt"] == nil || num(r.Body["rowVersion"]) != 4 ||
		s[0]["status"] != "succeeded" || s[1]["status"] != "failed" || s[1]["message"] != "canceled while running" || s[1]["finishedAt"] == nil {
		t.Fatalf("cancel: %s", r.Raw)
	}
	for _, x := range s[2:] {
		if x["status"] != "skipped" {
			t.Fatalf("pending steps after cancel: %s", r.Raw)
		}
	}
	expect(t, cancel(e, member, "acme", wf), "INVALID_STATE", anyPath)
	// The same cancel again, its expectedVersion now stale: CONFLICT, as
	// for instances and reservations (it was the finished state's
	// INVALID_STATE), with the row's version.
	if r := e.Call(member, "workflows/cancel", in); r.Code() != "CONFLICT" || r.Details()["rowVersion"] != float64(4) {
		t.Fatalf("a repeated cancel: %s", r.Raw)
	}
	expect(t, report(e, nodeTok, node, wf, 1, "succeeded"), "INVALID_STATE", anyPath)

	// A pending workflow cancels too, every step skipped.
	wf2 := e.Must(create(e, member, "acme", node, "gpu", 0)).Str("workflowId")
	r = e.Must(cancel(e, member, "acme", wf2))
	for _, x := range steps(t, r) {
		if x["status"] != "skipped" {
			t.Fatalf("cancel of a pending workflow: %s", r.Raw)
		}
	}
	expect(t, cancel(e, member, "acme", wf2), "INVALID_STATE", anyPath)
}

func TestWorkflowsListGetPermissions(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	admin, member, viewer := e.Tenant("acme")
	otherAdmin, otherMember, otherViewer := e.Tenant("other")
	pool := e.Pool(admin, "acme", "gpu")
	nodeA, _ := e.Node(admin, "acme", pool)
	nodeB, _ := e.Node(admin, "acme", pool)
	otherNode, _ := e.Node(otherAdmin, "other", e.Pool(otherAdmin, "other", "gpu"))
	createProfile(t, e, member, "acme", profileDoc("gpu", 1, "x"), "")
	createProfile(t, e, otherMember, "other", profileDoc("gpu", 1, "x"), "")

	// nodeA: three canceled workflows and a pending one; nodeB: one canceled.
	var onA []string
	for i := 0; i < 4; i++ {
		id := e.Must(create(e, member, "acme", nodeA, "gpu", 0)).Str("workflowId")
		onA = append(onA, id)
		if i < 3 {
			e.Must(cancel(e, member, "acme", id))
		}
		if i == 1 {
			e.Must(cancel(e, member, "acme", e.Must(create(e, member, "acme", nodeB, "gpu", 0)).Str("workflowId")))
		}
	}
	e.Must(create(e, otherMember, "other", otherNode, "gpu", 0))

	// Viewers read, cannot create.
	expect(t, create(e, viewer, "acme", nodeA, "gpu", 0), "PERMISSION_DENIED", anyPath)
	g := e.Must(e.Call(viewer, "workflows/get", map[string]any{"tenantId": "acme", "workflowId": onA[3]}))
	if g.Body["state"] != "pending" || g.Body["nodeId"] != nodeA {
		t.Fatalf("get: %s", g.Raw)
	}
	// Another tenant's workflow: NOT_FOUND; no role on the tenant: PERMISSION_DENIED.
	expect(t, e.Call(otherViewer, "workflows/get", map[string]any{"tenantId": "other", "workflowId": onA[3]}), "NOT_FOUND", anyPath)
	expect(t, e.Call(otherViewer, "workflows/get", map[string]any{"tenantId": "acme", "workflowId": onA[3]}), "PERMISSION_DENIED", anyPath)
	expect(t, e.Call(otherViewer, "workflows/list", map[string]any{"tenantId": "acme"}), "PERMISSION_DENIED", anyPath)

	all := items(t, e.Must(e.Call(viewer, "workflows/list", map[string]any{"tenantId": "acme"})))
	if len(all) != 5 {
		t.Fatalf("want 5 workflows of acme, got %d", len(all))
	}
	for i := 1; i < len(all); i++ {
		if all[i-1]["workflowId"].(string) >= all[i]["workflowId"].(string) {
			t.Fatalf("list is not in id order")
		}
	}

	// Two pages of nodeA's canceled workflows.
	in := map[string]any{"tenantId": "acme", "nodeId": nodeA, "state": "canceled", "limit": 2}
	p1 := e.Must(e.Call(viewer, "workflows/list", in))
	cur, _ := p1.Body["cursor"].(string)
	if it := items(t, p1); len(it) != 2 || it[0]["workflowId"] != onA[0] || it[1]["workflowId"] != onA[1] || cur == "" {
		t.Fatalf("page 1: %s", p1.Raw)
	}
	in["cursor"] = cur
	p2 := e.Must(e.Call(viewer, "workflows/list", in))
	if it := items(t, p2); len(it) != 1 || it[0]["workflowId"] != onA[2] || p2.Body["cursor"] != nil {
		t.Fatalf("page 2: %s", p2.Raw)
	}
	// Filters: nodeB only; pending only; another tenant's node gives nothing.
	if it := items(t, e.Must(e.Call(viewer, "workflows/list", map[string]any{"tenantId": "acme", "nodeId": nodeB}))); len(it) != 1 || it[0]["nodeId"] != nodeB {
		t.Fatalf("nodeB filter: %v", it)
	}
	if it := items(t, e.Must(e.Call(viewer, "workflows/list", map[string]any{"tenantId": "acme", "state": "pending"}))); len(it) != 1 || it[0]["workflowId"] != onA[3] {
		t.Fatalf("pending filter: %v", it)
	}
	if it := items(t, e.Must(e.Call(viewer, "workflows/list", map[string]any{"tenantId": "acme", "nodeId": otherNode}))); len(it) != 0 {
		t.Fatalf("another tenant's node: %v", it)
	}
	expect(t, e.Call(viewer, "workflows/list", map[string]any{"tenantId": "acme", "cursor": "garbage"}), "INVALID_INPUT", "cursor")
}

func TestWorkflowsInvalidInput(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	admin, member, _ := e.Tenant("acme")
	node, nodeTok := e.Node(admin, "acme", e.Pool(admin, "acme", "gpu"))
	wf := ids.New(ids.Workflow)
	long := strings.Repeat("x", 1025)
	for _, c := range []struct {
		name, token, method string
		body                any
		path                string
	}{
		{"create: bad nodeId", member, "workflows/create", map[string]any{"tenantId": "acme", "nodeId": "node-1", "profileId": "gpu"}, "nodeId"},
		{"create: pool id as nodeId", member, "workflows/create", map[string]any{"tenantId": "acme", "nodeId": ids.New(ids.Pool), "profileId": "gpu"}, "nodeId"},
		{"create: missing profileId", member, "workflows/create", map[string]any{"tenantId": "acme", "nodeId": node}, "profileId"},
		{"create: bad profileId", member, "workflows/create", map[string]any{"tenantId": "acme", "nodeId": node, "profileId": "GPU"}, "profileId"},
		{"create: profileVersion 0", member, "workflows/create", map[string]any{"tenantId": "acme", "nodeId": node, "profileId": "gpu", "profileVersion": 0}, "profileVersion"},
		{"create: profileVersion string", member, "workflows/create", map[string]any{"tenantId": "acme", "nodeId": node, "profileId": "gpu", "profileVersion": "1"}, "profileVersion"},
		{"create: unknown field", member, "workflows/create", map[string]any{"tenantId": "acme", "nodeId": node, "profileId": "gpu", "bogus": 1}, "bogus"},
		{"get: bad workflowId", member, "workflows/get", map[string]any{"tenantId": "acme", "workflowId": "wf_1"}, "workflowId"},
		{"get: unknown field", member, "workflows/get", map[string]any{"tenantId": "acme", "workflowId": wf, "nodeId": node}, "nodeId"},
		{"list: bad state", member, "workflows/list", map[string]any{"tenantId": "acme", "state": "done"}, "state"},
		{"list: bad nodeId", member, "workflows/list", map[string]any{"tenantId": "acme", "nodeId": "x"}, "nodeId"},
		{"list: limit 201", member, "workflows/list", map[string]any{"tenantId": "acme", "limit": 201}, "limit"},
		{"list: limit 0", member, "workflows/list", map[string]any{"tenantId": "acme", "limit": 0}, "limit"},
		{"cancel: expectedVersion 0", member, "workflows/cancel", map[string]any{"tenantId": "acme", "workflowId": wf, "expectedVersion": 0}, "expectedVersion"},
		{"reportStep: bad status", nodeTok, "workflows/reportStep", map[string]any{"nodeId": node, "workflowId": wf, "index": 0, "status": "done"}, "status"},
		{"reportStep: pending status", nodeTok, "workflows/reportStep", map[string]any{"nodeId": node, "workflowId": wf, "index": 0, "status": "pending"}, "status"},
		{"reportStep: negative index", nodeTok, "workflows/reportStep", map[string]any{"nodeId": node, "workflowId": wf, "index": -1, "status": "running"}, "index"},
		{"reportStep: missing index", nodeTok, "workflows/reportStep", map[string]any{"nodeId": node, "workflowId": wf, "status": "running"}, "index"},
		{"reportStep: bad nodeId", nodeTok, "workflows/reportStep", map[string]any{"nodeId": "n", "workflowId": wf, "index": 0, "status": "running"}, "nodeId"},
		{"reportStep: long message", nodeTok, "workflows/reportStep", map[string]any{"nodeId": node, "workflowId": wf, "index": 0, "status": "running", "message": long}, "message"},
		{"reportStep: unknown field", nodeTok, "workflows/reportStep", map[string]any{"nodeId": node, "workflowId": wf, "index": 0, "status": "running", "tenantId": "acme"}, "tenantId"},
		{"not an object", member, "workflows/create", `[1]`, anyPath},
	} {
		t.Run(c.name, func(t *testing.T) {
			expect(t, e.Call(c.token, c.method, c.body), "INVALID_INPUT", c.path)
		})
	}
	// A 1024-character message is fine (the workflow is unknown: NOT_FOUND).
	expect(t, e.Call(nodeTok, "workflows/reportStep", map[string]any{"nodeId": node, "workflowId": wf, "index": 0, "status": "running", "message": long[:1024]}), "NOT_FOUND", anyPath)
}

// post is a goroutine-safe call (testkit's Call reports on its T).
func post(url, token, method string, body any) (int, map[string]any, error) {
	raw, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, url+"/api/compute/"+method, bytes.NewReader(raw))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		return res.StatusCode, nil, fmt.Errorf("%s: %s", err, b)
	}
	return res.StatusCode, out, nil
}

// TestWorkflowsFirstUseRacesUpdate: a profiles.update of the document and a
// workflows.create of the same version, at once, many times. Either the
// update commits first and the workflow snapshots the new document, or the
// workflow commits first and the update is INVALID_STATE; never an update
// that succeeded while a workflow holds the old document.
func TestWorkflowsFirstUseRacesUpdate(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	admin, member, _ := e.Tenant("acme")
	node, _ := e.Node(admin, "acme", e.Pool(admin, "acme", "gpu"))
	const rounds = 40
	var updatedFirst, usedFirst int
	for v := 1; v <= rounds; v++ {
		createProfile(t, e, member, "acme", profileDoc("race", v, "old"), "")
		var (
			wg                 sync.WaitGroup
			start              = make(chan struct{})
			upStatus, wfStatus int
			upBody, wfBody     map[string]any
			upErr, wfErr       error
		)
		wg.Add(2)
		go func() {
			defer wg.Done()
			<-start
			upStatus, upBody, upErr = post(e.Server.URL, member, "profiles/update", map[string]any{"tenantId": "acme", "profileId": "race",
				"profileVersion": v, "document": profileDoc("race", v, "new")})
		}()
		go func() {
			defer wg.Done()
			<-start
			wfStatus, wfBody, wfErr = post(e.Server.URL, member, "workflows/create", map[string]any{"tenantId": "acme", "nodeId": node,
				"profileId": "race", "profileVersion": v})
		}()
		close(start)
		wg.Wait()
		if upErr != nil || wfErr != nil {
			t.Fatalf("round %d: %v %v", v, upErr, wfErr)
		}
		if wfStatus != http.StatusOK {
			t.Fatalf("round %d: workflows.create %d: %v", v, wfStatus, wfBody)
		}
		snap := obj(t, wfBody["profileDocument"])["description"]
		switch upStatus {
		case http.StatusOK:
			updatedFirst++
			if snap != "new" {
				t.Fatalf("round %d: the update succeeded but the workflow holds the %v document", v, snap)
			}
		case http.StatusUnprocessableEntity:
			usedFirst++
			if snap != "old" {
				t.Fatalf("round %d: the update was refused but the workflow holds the %v document", v, snap)
			}
		default:
			t.Fatalf("round %d: profiles.update %d: %v", v, upStatus, upBody)
		}
		// The stored version is used and holds what the workflow snapshotted.
		p := e.Must(e.Call(member, "profiles/get", map[string]any{"tenantId": "acme", "profileId": "race", "profileVersion": v}))
		if p.Body["used"] != true || !reflect.DeepEqual(p.Body["document"], wfBody["profileDocument"]) {
			t.Fatalf("round %d: stored profile %s vs snapshot %v", v, p.Raw, wfBody["profileDocument"])
		}
		e.Must(cancel(e, member, "acme", wfBody["workflowId"].(string)))
	}
	t.Logf("%d rounds: update first %d, first use first %d", rounds, updatedFirst, usedFirst)
}

// TestWorkflowsByNode: the batched helpers the graph's loaders use.
func TestWorkflowsByNode(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	admin, member, _ := e.Tenant("acme")
	pool := e.Pool(admin, "acme", "gpu")
	nodeA, _ := e.Node(admin, "acme", pool)
	nodeB, _ := e.Node(admin, "acme", pool)
	nodeC, _ := e.Node(admin, "acme", pool)
	createProfile(t, e, member, "acme", profileDoc("gpu", 1, "x"), "")
	var onA []string
	for i := 0; i < 3; i++ {
		id := e.Must(create(e, member, "acme", nodeA, "gpu", 0)).Str("workflowId")
		e.Must(cancel(e, member, "acme", id))
		onA = append(onA, id)
	}
	onB := e.Must(create(e, member, "acme", nodeB, "gpu", 0)).Str("workflowId")

	ctx := context.Background()
	rows, err := workflows.PagesByNode(ctx, e.DB, authz.TenantScope("acme"), []string{nodeA, nodeB, nodeC}, "", 2)
	if err != nil {
		t.Fatal(err)
	}
	g := page.Group(rows, 2)
	a, b := g[nodeA], g[nodeB]
	if a == nil || len(a.Items) != 2 || !a.HasNext || a.Total != 3 || a.Items[0].WorkflowID != onA[0] || a.Items[1].WorkflowID != onA[1] {
		t.Fatalf("node A page: %+v", a)
	}
	if len(a.Items[0].Steps) != profileSteps || a.Items[0].State != "canceled" || len(a.Items[0].ProfileDocument) == 0 {
		t.Fatalf("node A item: %+v", a.Items[0])
	}
	if b == nil || len(b.Items) != 1 || b.HasNext || b.Total != 1 || b.Items[0].WorkflowID != onB || b.Items[0].State != "pending" {
		t.Fatalf("node B page: %+v", b)
	}
	if g[nodeC] != nil {
		t.Fatalf("node C has a page: %+v", g[nodeC])
	}
	rows, err = workflows.PagesByNode(ctx, e.DB, authz.TenantScope("acme"), []string{nodeA}, onA[1], 2)
	if err != nil {
		t.Fatal(err)
	}
	if a := page.Group(rows, 2)[nodeA]; a == nil || len(a.Items) != 1 || a.HasNext || a.Items[0].WorkflowID != onA[2] {
		t.Fatalf("node A after the cursor: %+v", a)
	}
	n, err := workflows.CountByNode(ctx, e.DB, authz.TenantScope("acme"), []string{nodeA, nodeB, nodeC})
	if err != nil {
		t.Fatal(err)
	}
	if n[nodeA] != 3 || n[nodeB] != 1 || n[nodeC] != 0 {
		t.Fatalf("counts: %v", n)
	}
}

// A report that waited for the one before it dates its step after it: a
// report for step 1 whose transaction began before step 0's success
// committed took the transaction's start as step 1's startedAt, before step
// 0's finishedAt (a probe's 32-way races, 3 rounds of 16).
func TestStepTimesFollowTheStepBefore(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	admin, member, _ := e.Tenant("acme")
	pool := e.Pool(admin, "acme", "gpu")
	node, nodeTok := e.Node(admin, "acme", pool)
	createProfile(t, e, member, "acme", profileDoc("gpu", 1, "x"), "")
	wf := e.Must(create(e, member, "acme", node, "gpu", 0)).Str("workflowId")
	e.Must(report(e, nodeTok, node, wf, 0, "running"))
	ctx := context.Background()
	tx, err := e.DB.BeginTxx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()                            //nolint:errcheck // committed below
	if _, err := tx.Exec(`SELECT 1`); err != nil { // the transaction has begun
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	e.Must(report(e, nodeTok, node, wf, 0, "succeeded"))
	w, err := workflows.ReportStep(ctx, tx, &workflows.ReportStepInput{NodeID: node, WorkflowID: wf, Index: 1, Status: "running"})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if !w.Steps[1].StartedAt.After(*w.Steps[0].FinishedAt) || !w.UpdatedAt.After(*w.Steps[0].FinishedAt) {
		t.Fatalf("step 1 started %v, step 0 finished %v, updated %v", w.Steps[1].StartedAt, w.Steps[0].FinishedAt, w.UpdatedAt)
	}
}
