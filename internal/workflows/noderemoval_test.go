package workflows_test

import (
	"bytes"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/bettercompute/computed/internal/testkit"
	"github.com/bettercompute/computed/internal/testkit/storm"
	"github.com/bettercompute/computed/internal/workflows"
)

// workflowEvents waits until the tenant's stream holds an event of type
// until for the workflow and returns the types of its workflow events in
// order (events are numbered by the sequencer after commit).
func workflowEvents(e *testkit.Env, token, tenantID, workflowID, until string) []string {
	e.T.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var types []string
		cursor := ""
		for {
			in := map[string]any{"tenantId": tenantID, "types": []string{"workflow."}, "limit": 200}
			if cursor != "" {
				in["cursor"] = cursor
			}
			r := e.Must(e.Call(token, "events/list", in))
			for _, ev := range items(e.T, r) {
				if ev["resourceId"] == workflowID {
					types = append(types, ev["type"].(string))
				}
			}
			if cursor = r.Str("cursor"); cursor == "" {
				break
			}
		}
		if count(types, until) > 0 || time.Now().After(deadline) {
			return types
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func count(types []string, typ string) int {
	n := 0
	for _, t := range types {
		if t == typ {
			n++
		}
	}
	return n
}

// TestWorkflowsNodeRemoved: nodes.remove cancels the node's pending or
// running workflow in its transaction (the node's credential is revoked with
// it, so nothing else could ever end it): steps that had not started are
// skipped and a running step failed, each with the message naming the
// removal, and workflow.canceled is written. Finished workflows and other
// nodes' workflows are untouched; a removed node takes no new workflow.
func TestWorkflowsNodeRemoved(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	admin, member, viewer := e.Tenant("acme")
	pool := e.Pool(admin, "acme", "gpu")
	node, nodeTok := e.Node(admin, "acme", pool)
	pendingNode, _ := e.Node(admin, "acme", pool)
	other, otherTok := e.Node(admin, "acme", pool)
	createProfile(t, e, member, "acme", profileDoc("gpu", 1, "x"), "")

	// A finished workflow on the node stays as it was.
	done := e.Must(create(e, member, "acme", node, "gpu", 0)).Str("workflowId")
	e.Must(cancel(e, member, "acme", done))
	doneBefore := e.Must(e.Call(viewer, "workflows/get", map[string]any{"tenantId": "acme", "workflowId": done}))

	// A running workflow: step 0 succeeded, step 1 running.
	wf := e.Must(create(e, member, "acme", node, "gpu", 0)).Str("workflowId")
	e.Must(report(e, nodeTok, node, wf, 0, "succeeded"))
	e.Must(e.Call(nodeTok, "workflows/reportStep", map[string]any{"nodeId": node, "workflowId": wf, "index": 1, "status": "running", "message": "partitioning"}))
	// A pending one on another node, and a running one on a node that stays.
	pend := e.Must(create(e, member, "acme", pendingNode, "gpu", 0)).Str("workflowId")
	keep := e.Must(create(e, member, "acme", other, "gpu", 0)).Str("workflowId")
	e.Must(report(e, otherTok, other, keep, 0, "running"))

	nodeCall(e, admin, "remove", "acme", node)
	nodeCall(e, admin, "remove", "acme", pendingNode)

	r := e.Must(e.Call(viewer, "workflows/get", map[string]any{"tenantId": "acme", "workflowId": wf}))
	s := steps(t, r)
	if r.Body["state"] != "canceled" || r.Body["finishedAt"] == nil || num(r.Body["rowVersion"]) != 4 ||
		s[0]["status"] != "succeeded" || s[0]["message"] != nil ||
		s[1]["status"] != "failed" || s[1]["message"] != workflows.NodeRemovedMessage || s[1]["finishedAt"] == nil || s[1]["startedAt"] == nil {
		t.Fatalf("running workflow of a removed node: %s", r.Raw)
	}
	for _, x := range s[2:] {
		if x["status"] != "skipped" || x["message"] != workflows.NodeRemovedMessage || x["startedAt"] != nil || x["finishedAt"] != nil {
			t.Fatalf("pending steps of a removed node's workflow: %s", r.Raw)
		}
	}
	r = e.Must(e.Call(viewer, "workflows/get", map[string]any{"tenantId": "acme", "workflowId": pend}))
	if r.Body["state"] != "canceled" || r.Body["finishedAt"] == nil {
		t.Fatalf("pending workflow of a removed node: %s", r.Raw)
	}
	for _, x := range steps(t, r) {
		if x["status"] != "skipped" || x["message"] != workflows.NodeRemovedMessage {
			t.Fatalf("pending workflow of a removed node: %s", r.Raw)
		}
	}
	if r := e.Must(e.Call(viewer, "workflows/get", map[string]any{"tenantId": "acme", "workflowId": done})); !bytes.Equal(r.Raw, doneBefore.Raw) {
		t.Fatalf("a finished workflow changed with its node's removal:\n%s\n%s", doneBefore.Raw, r.Raw)
	}
	if r := e.Must(e.Call(viewer, "workflows/get", map[string]any{"tenantId": "acme", "workflowId": keep})); r.Body["state"] != "running" {
		t.Fatalf("another node's workflow: %s", r.Raw)
	}
	// Listed as canceled; none running on the removed nodes.
	for _, n := range []string{node, pendingNode} {
		for _, st := range []string{"pending", "running"} {
			l := e.Must(e.Call(viewer, "workflows/list", map[string]any{"tenantId": "acme", "nodeId": n, "state": st}))
			if len(items(t, l)) != 0 {
				t.Fatalf("a removed node has a %s workflow: %s", st, l.Raw)
			}
		}
	}
	// Each ended workflow has exactly one workflow.canceled, last.
	for _, id := range []string{wf, pend} {
		types := workflowEvents(e, viewer, "acme", id, "workflow.canceled")
		if count(types, "workflow.canceled") != 1 || types[len(types)-1] != "workflow.canceled" {
			t.Fatalf("events of %s: %v", id, types)
		}
	}
	if types := workflowEvents(e, viewer, "acme", done, "workflow.canceled"); count(types, "workflow.canceled") != 1 {
		t.Fatalf("events of the finished workflow: %v", types)
	}
	// The ended workflows take no more reports or cancels; a removed node
	// takes no new workflow (NOT_FOUND, as the docs say).
	expect(t, cancel(e, member, "acme", wf), "INVALID_STATE", anyPath)
	expect(t, create(e, member, "acme", node, "gpu", 0), "NOT_FOUND", "nodeId")
	expect(t, create(e, member, "acme", pendingNode, "gpu", 0), "NOT_FOUND", "nodeId")
}

// TestWorkflowsNodeRemovalRacesReports: the node reports its last step
// succeeded (and, from other goroutines, "running" on it) while the node is
// removed, at once, many times. Afterwards no workflow of the removed node is running, and exactly
// one outcome holds: either the "succeeded" report was accepted and the
// workflow succeeded (one workflow.succeeded, no workflow.canceled), or it
// was refused and the removal canceled the workflow (one workflow.canceled,
// no workflow.succeeded).
func TestWorkflowsNodeRemovalRacesReports(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	admin, member, viewer := e.Tenant("acme")
	pool := e.Pool(admin, "acme", "gpu")
	createProfile(t, e, member, "acme", profileDoc("gpu", 1, "x"), "")
	const rounds, runners = 12, 6
	var succeeded, canceled int
	for round := 0; round < rounds; round++ {
		node, nodeTok := e.Node(admin, "acme", pool)
		wf := e.Must(create(e, member, "acme", node, "gpu", 0)).Str("workflowId")
		for i := 0; i < profileSteps-1; i++ {
			e.Must(report(e, nodeTok, node, wf, i, "succeeded"))
		}
		e.Must(report(e, nodeTok, node, wf, profileSteps-1, "running"))

		var (
			wg        sync.WaitGroup
			start     = make(chan struct{})
			mu        sync.Mutex
			rmStatus  int
			rmBody    map[string]any
			okStatus  int
			okBody    map[string]any
			runStatus []int
			errsSeen  []error
		)
		wg.Add(2 + runners)
		go func() {
			defer wg.Done()
			<-start
			st, body, err := post(e.Server.URL, admin, "nodes/remove", map[string]any{"tenantId": "acme", "nodeId": node})
			mu.Lock()
			rmStatus, rmBody = st, body
			if err != nil {
				errsSeen = append(errsSeen, err)
			}
			mu.Unlock()
		}()
		go func() {
			defer wg.Done()
			<-start
			// Staggered so that both orders happen.
			time.Sleep(time.Duration(round%4) * 3 * time.Millisecond)
			st, body, err := post(e.Server.URL, nodeTok, "workflows/reportStep", map[string]any{"nodeId": node, "workflowId": wf,
				"index": profileSteps - 1, "status": "succeeded"})
			mu.Lock()
			okStatus, okBody = st, body
			if err != nil {
				errsSeen = append(errsSeen, err)
			}
			mu.Unlock()
		}()
		for i := 0; i < runners; i++ {
			go func() {
				defer wg.Done()
				<-start
				st, _, err := post(e.Server.URL, nodeTok, "workflows/reportStep", map[string]any{"nodeId": node, "workflowId": wf,
					"index": profileSteps - 1, "status": "running", "message": "still here"})
				mu.Lock()
				runStatus = append(runStatus, st)
				if err != nil {
					errsSeen = append(errsSeen, err)
				}
				mu.Unlock()
			}()
		}
		close(start)
		wg.Wait()
		if len(errsSeen) > 0 {
			t.Fatalf("round %d: %v", round, errsSeen)
		}
		if rmStatus != http.StatusOK {
			t.Fatalf("round %d: nodes.remove %d: %v", round, rmStatus, rmBody)
		}
		refused := map[int]bool{http.StatusUnauthorized: true, http.StatusForbidden: true, http.StatusUnprocessableEntity: true}
		for _, st := range append([]int{okStatus}, runStatus...) {
			if st != http.StatusOK && !refused[st] {
				t.Fatalf("round %d: a report answered %d (%v)", round, st, okBody)
			}
		}
		r := e.Must(e.Call(viewer, "workflows/get", map[string]any{"tenantId": "acme", "workflowId": wf}))
		state := r.Body["state"]
		last := steps(t, r)[profileSteps-1]
		var wantEvent, notEvent string
		switch {
		case okStatus == http.StatusOK && state == "succeeded" && last["status"] == "succeeded":
			succeeded++
			wantEvent, notEvent = "workflow.succeeded", "workflow.canceled"
		case okStatus != http.StatusOK && state == "canceled" && last["status"] == "failed" && last["message"] == workflows.NodeRemovedMessage:
			canceled++
			wantEvent, notEvent = "workflow.canceled", "workflow.succeeded"
		default:
			t.Fatalf("round %d: the succeeded report answered %d and the workflow is %v: %s", round, okStatus, state, r.Raw)
		}
		for _, st := range []string{"pending", "running"} {
			l := e.Must(e.Call(viewer, "workflows/list", map[string]any{"tenantId": "acme", "nodeId": node, "state": st}))
			if len(items(t, l)) != 0 {
				t.Fatalf("round %d: the removed node has a %s workflow: %s", round, st, l.Raw)
			}
		}
		types := workflowEvents(e, viewer, "acme", wf, wantEvent)
		// (Not necessarily last: within one sequencer pass, concurrent
		// transactions are numbered by xid, not by commit.)
		if count(types, wantEvent) != 1 || count(types, notEvent) != 0 {
			t.Fatalf("round %d: events %v", round, types)
		}
	}
	t.Logf("%d rounds: the report first %d, the removal first %d", rounds, succeeded, canceled)
}

// A member creating workflows on a node without pause does not keep the
// node's removal waiting: each create share-locks the node until it
// commits (so that the node is not cordoned or removed under it), and a
// new share lock of a row overtakes a waiting update. 16 creates at a time
// (all but the first refused: the node has its workflow) kept nodes.remove
// waiting until its statement timed out.
func TestNodeRemovalIsNotStarvedByWorkflowCreates(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	admin, member, _ := e.Tenant("acme")
	pool := e.Pool(admin, "acme", "gpu")
	node, _ := e.Node(admin, "acme", pool)
	createProfile(t, e, member, "acme", profileDoc("gpu", 1, "x"), "")
	storm.Start(t, 16, 100, func(int, int) { create(e, member, "acme", node, "gpu", 0) })
	if r := e.Call(admin, "nodes/remove", map[string]any{"tenantId": "acme", "nodeId": node}); r.Code() != "" {
		t.Fatalf("nodes.remove while a member creates workflows on the node: %s", r.Raw)
	}
}
