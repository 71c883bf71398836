package e2e

import (
	"fmt"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/bettercompute/computed/internal/testkit"
	"github.com/bettercompute/computed/internal/testkit/wait"
)

var (
	instIDRe  = regexp.MustCompile(`^inst_[0-9a-hjkmnp-tv-z]{26,52}$`)
	eventIDRe = regexp.MustCompile(`^evt_[0-9a-hjkmnp-tv-z]{26,52}$`)
)

// vpsPool creates a vps-provider (sim) pool with a policy and returns its id.
func vpsPool(t testing.TB, e *testkit.Env, admin, tenantID, name string, policy map[string]any) string {
	t.Helper()
	in := map[string]any{"tenantId": tenantID, "name": name, "site": "fra1", "gpuModel": "H100",
		"sharingMode": "exclusive", "kind": "vps-provider"}
	if policy != nil {
		in["policy"] = policy
	}
	return must(t, env(t, e).Call(admin, "pools/create", in)).Str("poolId")
}

func instanceIn(tenantID, poolID, name string, gpus int) map[string]any {
	return map[string]any{"tenantId": tenantID, "poolId": poolID, "name": name,
		"size": map[string]any{"gpus": gpus, "vcpus": 4, "memoryGiB": 16}}
}

// waitState polls instances.get until the instance is in state (and, when
// given, desired) or the timeout passes.
func waitState(t testing.TB, e *testkit.Env, token, tenantID, id, state string, timeout time.Duration) map[string]any {
	t.Helper()
	var last testkit.Resp
	wait.Eventually(t, timeout, func() error {
		last = env(t, e).Call(token, "instances/get", map[string]any{"tenantId": tenantID, "instanceId": id})
		if last.Status != 200 || last.Str("state") != state {
			return fmt.Errorf("instance %s not %s: %s", id, state, last.Raw)
		}
		return nil
	})
	return last.Body
}

// eventTypes reads every event of an instance through instances.events,
// paging with limit, and checks ids ascend.
func eventTypes(t testing.TB, e *testkit.Env, token, tenantID, id string, limit int) []string {
	t.Helper()
	var out []string
	cursor, last := "", ""
	for {
		in := map[string]any{"tenantId": tenantID, "instanceId": id, "limit": limit}
		if cursor != "" {
			in["cursor"] = cursor
		}
		r := must(t, env(t, e).Call(token, "instances/events", in))
		for _, it := range items(t, r) {
			eid := str(it["eventId"])
			if !eventIDRe.MatchString(eid) || eid <= last || it["instanceId"] != id || it["tenantId"] != tenantID {
				t.Fatalf("event: %v (after %s)", it, last)
			}
			last = eid
			out = append(out, str(it["type"]))
		}
		c, _ := r.Body["cursor"].(string)
		if c == "" {
			return out
		}
		cursor = c
	}
}

// waitEvents reads an instance's events until the last is of type last: an
// event becomes readable once every older transaction of the cluster has
// ended, which may be a moment after its instance reads as moved.
func waitEvents(t testing.TB, e *testkit.Env, token, tenantID, id, last string, limit int) []string {
	t.Helper()
	var types []string
	wait.Eventually(t, 10*time.Second, func() error {
		if types = eventTypes(t, e, token, tenantID, id, limit); len(types) == 0 || types[len(types)-1] != last {
			return fmt.Errorf("events of %s do not end with %s: %v", id, last, types)
		}
		return nil
	})
	return types
}

func TestInstanceLifecycle(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t).RunReconciler()
	acme := newTenant(t, e, "acme")
	pool := vpsPool(t, e, acme.Admin.Token, "acme", "vps", map[string]any{"sim": map[string]any{"latencyMs": 150}})
	prj := newProject(t, e, acme.Member.Token, "acme", "web")
	in := instanceIn("acme", pool, "web-1", 1)
	in["projectId"] = prj
	r := must(t, e.Call(acme.Member.Token, "instances/create", in))
	id := r.Str("instanceId")
	if !instIDRe.MatchString(id) || r.Str("state") != "pending" || r.Str("desiredState") != "running" || r.Body["rowVersion"] != float64(1) ||
		r.Str("poolId") != pool || r.Str("tenantId") != "acme" || r.Str("name") != "web-1" || r.Str("projectId") != prj ||
		obj(t, r.Body, "size")["gpus"] != float64(1) || r.Str("createdAt") == "" || r.Str("updatedAt") == "" {
		t.Fatalf("instances.create output: %s", r.Raw)
	}
	waitState(t, e, acme.Viewer.Token, "acme", id, "running", 10*time.Second)

	ref := map[string]any{"tenantId": "acme", "instanceId": id}
	s := must(t, e.Call(acme.Member.Token, "instances/stop", ref))
	if s.Str("desiredState") != "stopped" || s.Str("state") != "running" {
		t.Fatalf("stop changes only desiredState: %s", s.Raw)
	}
	waitState(t, e, acme.Viewer.Token, "acme", id, "stopped", 10*time.Second)
	must(t, e.Call(acme.Member.Token, "instances/start", ref))
	g := waitState(t, e, acme.Viewer.Token, "acme", id, "running", 10*time.Second)
	rb := must(t, e.Call(acme.Member.Token, "instances/reboot", map[string]any{"tenantId": "acme", "instanceId": id, "expectedVersion": g["rowVersion"]}))
	if rb.Body["rebootGeneration"] != float64(1) || rb.Str("state") != "running" {
		t.Fatalf("reboot output: %s", rb.Raw)
	}
	// The reboot shows in the events once done.
	wait.Eventually(t, 10*time.Second, func() error {
		types := eventTypes(t, e, acme.Viewer.Token, "acme", id, 3)
		if len(types) >= 9 && types[len(types)-1] == "instance.running" {
			return nil
		}
		return fmt.Errorf("no reboot in events: %v", types)
	})
	must(t, e.Call(acme.Member.Token, "instances/delete", ref))
	waitState(t, e, acme.Viewer.Token, "acme", id, "deleted", 10*time.Second)
	types := waitEvents(t, e, acme.Viewer.Token, "acme", id, "instance.deleted", 4)
	want := []string{"instance.created", "instance.provisioning", "instance.running", "instance.stopping", "instance.stopped",
		"instance.provisioning", "instance.running", "instance.rebooting", "instance.running", "instance.deleting", "instance.deleted"}
	if len(types) != len(want) {
		t.Fatalf("events %v, want %v", types, want)
	}
	for k := range want {
		if types[k] != want[k] {
			t.Fatalf("events %v, want %v", types, want)
		}
	}
	// Deleted instances are listed only when asked for.
	l := must(t, e.Call(acme.Viewer.Token, "instances/list", map[string]any{"tenantId": "acme"}))
	if len(items(t, l)) != 0 {
		t.Fatalf("deleted instance listed: %s", l.Raw)
	}
	l = must(t, e.Call(acme.Viewer.Token, "instances/list", map[string]any{"tenantId": "acme", "state": "deleted"}))
	if len(items(t, l)) != 1 {
		t.Fatalf("deleted instance not listed with state=deleted: %s", l.Raw)
	}
}

// A project deleted while instances are created in it: each create either
// made its instance (the delete then cleared its project, as every
// instance's of the project) or found no project, NOT_FOUND at projectId;
// never the foreign key's answer without a path.
func TestCreateInstancesWhileTheirProjectIsDeleted(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	acme := newTenant(t, e, "acme")
	admin := acme.Admin.Token
	vps := vpsPool(t, e, admin, "acme", "vps", nil)
	created, refused := 0, 0
	for round := range 12 {
		prj := newProject(t, e, admin, "acme", fmt.Sprintf("p%d", round))
		results := make([]testkit.Resp, 8)
		var del testkit.Resp
		var wg sync.WaitGroup
		for k := range results {
			wg.Add(1)
			go func() {
				defer wg.Done()
				in := instanceIn("acme", vps, fmt.Sprintf("r%d-%d", round, k), 0)
				in["projectId"] = prj
				results[k] = e.Call(admin, "instances/create", in)
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(round%4) * time.Millisecond)
			del = e.Call(admin, "projects/delete", map[string]any{"tenantId": "acme", "projectId": prj})
		}()
		wg.Wait()
		if del.Status != 200 {
			t.Fatalf("projects.delete: %d %s", del.Status, del.Raw)
		}
		for k, r := range results {
			switch {
			case r.Status == 200:
				created++
				// the project is gone: the instance has none
				got := must(t, e.Call(admin, "instances/get", map[string]any{"tenantId": "acme", "instanceId": r.Str("instanceId")}))
				if p, ok := got.Body["projectId"]; ok && p != nil {
					t.Errorf("round %d, create %d: the instance keeps the deleted project: %s", round, k, got.Raw)
				}
			case r.Status == 404 && r.Path() == "projectId" && r.Code() == "NOT_FOUND":
				refused++
			default:
				t.Errorf("round %d, create %d: %d %s", round, k, r.Status, r.Raw)
			}
		}
	}
	t.Logf("%d created, %d refused", created, refused)
}
