package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/bettercompute/computed/internal/events"
	"github.com/bettercompute/computed/internal/testkit"
	"github.com/bettercompute/computed/internal/testkit/wait"
)

func reason(t testing.TB, r testkit.Resp) string {
	t.Helper()
	d := obj(t, r.Body, "error", "details")
	s, _ := d["reason"].(string)
	return s
}

// TestInstancesCreateErrors: every refusal of instances.create, in the
// order the rules apply.
func TestInstancesCreateErrors(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t).RunReconciler()
	acme := newTenant(t, e, "acme")
	beta := newTenant(t, e, "beta")
	pool := vpsPool(t, e, acme.Admin.Token, "acme", "vps", nil)
	hidden := vpsPool(t, e, beta.Admin.Token, "beta", "vps-b", nil)
	bare := newPool(t, e, acme.Admin.Token, "acme", "bm")["poolId"].(string)
	archived := vpsPool(t, e, acme.Admin.Token, "acme", "old", nil)
	must(t, e.Call(acme.Admin.Token, "pools/archive", map[string]any{"tenantId": "acme", "poolId": archived}))
	betaProject := newProject(t, e, beta.Member.Token, "beta", "theirs")
	m := acme.Member.Token
	with := func(base map[string]any, kv ...any) map[string]any {
		out := map[string]any{}
		for k, v := range base {
			out[k] = v
		}
		for k := 0; k < len(kv); k += 2 {
			out[kv[k].(string)] = kv[k+1]
		}
		return out
	}
	ok := instanceIn("acme", pool, "a", 0)
	cases := []struct {
		name, token string
		in          map[string]any
		code, path  string
		reason      string
	}{
		{"no token", "", ok, "UNAUTHENTICATED", anyPath, ""},
		{"viewer", acme.Viewer.Token, ok, "PERMISSION_DENIED", anyPath, ""},
		{"other tenant's token", beta.Member.Token, ok, "PERMISSION_DENIED", anyPath, ""},
		{"size missing", m, with(ok, "size", nil), "INVALID_INPUT", "size", ""},
		{"vcpus zero", m, with(ok, "size", map[string]any{"gpus": 0, "vcpus": 0, "memoryGiB": 1}), "INVALID_INPUT", "size.vcpus", ""},
		{"unknown field", m, with(ok, "color", "red"), "INVALID_INPUT", "color", ""},
		{"desired deleted", m, with(ok, "desiredState", "deleted"), "INVALID_INPUT", "desiredState", ""},
		{"bad pool id", m, with(ok, "poolId", "pool_x"), "INVALID_INPUT", "poolId", ""},
		{"pool not offered", m, with(ok, "poolId", hidden), "NOT_FOUND", "poolId", ""},
		// Decide first: the invisible pool is NOT_FOUND before the size rule about it.
		{"pool not offered, bad profile", m, with(instanceIn("acme", hidden, "a", 1), "size", map[string]any{"gpus": 1, "vcpus": 1, "memoryGiB": 1, "gpuProfile": "1g.10gb"}), "NOT_FOUND", "poolId", ""},
		{"unknown pool", m, with(ok, "poolId", "pool_01jd0000000000000000000000"), "NOT_FOUND", "poolId", ""},
		{"other tenant's project", m, with(ok, "projectId", betaProject), "NOT_FOUND", "projectId", ""},
		{"bare-metal pool", m, with(ok, "poolId", bare), "INVALID_STATE", "poolId", "bare-metal"},
		{"archived pool", m, with(ok, "poolId", archived), "INVALID_STATE", "poolId", "archived"},
		{"profile outside mig", m, with(ok, "size", map[string]any{"gpus": 1, "vcpus": 1, "memoryGiB": 1, "gpuProfile": "1g.10gb"}), "INVALID_INPUT", "size.gpuProfile", ""},
		{"created", m, ok, "", "", ""},
		{"same name again", m, ok, "CONFLICT", "name", ""},
	}
	for _, c := range cases {
		r := e.Call(c.token, "instances/create", c.in)
		if r.Status != statusOf[c.code] || r.Code() != c.code {
			t.Fatalf("%s: want %q, got %d %s", c.name, c.code, r.Status, r.Raw)
		}
		expect(t, r, c.code, c.path)
		if c.reason != "" && reason(t, r) != c.reason {
			t.Fatalf("%s: reason %q: %s", c.name, reason(t, r), r.Raw)
		}
	}

	// clientToken: the same input returns the first instance, other input is CONFLICT.
	in := with(instanceIn("acme", pool, "tok", 0), "clientToken", "req-1")
	first := must(t, e.Call(m, "instances/create", in))
	again := must(t, e.Call(m, "instances/create", in))
	if first.Str("instanceId") != again.Str("instanceId") {
		t.Fatalf("retry made a second instance: %s %s", first.Raw, again.Raw)
	}
	expect(t, e.Call(m, "instances/create", with(in, "name", "tok-2")), "CONFLICT", "clientToken")
	// Another tenant may use the same token.
	bpool := vpsPool(t, e, beta.Admin.Token, "beta", "own", nil)
	must(t, e.Call(beta.Member.Token, "instances/create", with(instanceIn("beta", bpool, "tok", 0), "clientToken", "req-1")))
}

// TestInstancesQuota: an offered tenant's instances and GPUs stop at the
// offer's quota; deleting frees it; lowering the offer keeps what runs.
func TestInstancesQuota(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t).RunReconciler()
	acme := newTenant(t, e, "acme")
	beta := newTenant(t, e, "beta")
	pool := vpsPool(t, e, acme.Admin.Token, "acme", "vps", nil)
	must(t, e.Call(acme.Admin.Token, "pools/offer", map[string]any{"tenantId": "acme", "poolId": pool, "toTenantId": "beta",
		"quota": map[string]any{"gpus": 4, "instances": 2}}))
	b := beta.Member.Token
	one := must(t, e.Call(b, "instances/create", instanceIn("beta", pool, "b1", 3))).Str("instanceId")
	r := e.Call(b, "instances/create", instanceIn("beta", pool, "b2", 2))
	expect(t, r, "INVALID_STATE", anyPath)
	if reason(t, r) != "quota" {
		t.Fatalf("quota refusal: %s", r.Raw)
	}
	must(t, e.Call(b, "instances/create", instanceIn("beta", pool, "b2", 1)))
	r = e.Call(b, "instances/create", instanceIn("beta", pool, "b3", 0))
	expect(t, r, "INVALID_STATE", anyPath)
	// The count binds here, and the message says what was asked: one more
	// instance (it said "asks for 0 more GPUs").
	if reason(t, r) != "quota" || r.Message() != "the pool's offer allows 2 instances and 4 GPUs; the tenant has 2 instances with 4 GPUs and asks for one more, of 0 GPUs" {
		t.Fatalf("instance-count refusal: %s", r.Raw)
	}
	// The owner is bounded by capacity alone.
	for k := 0; k < 3; k++ {
		must(t, e.Call(acme.Member.Token, "instances/create", instanceIn("acme", pool, uniq("a"), 8)))
	}
	// Deleting frees the quota once the instance is deleted.
	waitState(t, e, b, "beta", one, "running", 10*time.Second)
	must(t, e.Call(b, "instances/delete", map[string]any{"tenantId": "beta", "instanceId": one}))
	waitState(t, e, b, "beta", one, "deleted", 10*time.Second)
	must(t, e.Call(b, "instances/create", instanceIn("beta", pool, "b3", 3)))
	// Lowering the offer keeps both instances and refuses a new one.
	must(t, e.Call(acme.Admin.Token, "pools/offer", map[string]any{"tenantId": "acme", "poolId": pool, "toTenantId": "beta",
		"quota": map[string]any{"gpus": 1, "instances": 1}}))
	l := must(t, e.Call(b, "instances/list", map[string]any{"tenantId": "beta"}))
	if len(items(t, l)) != 2 {
		t.Fatalf("lowering the offer removed instances: %s", l.Raw)
	}
	expect(t, e.Call(b, "instances/create", instanceIn("beta", pool, "b4", 0)), "INVALID_STATE", anyPath)
	// The pool's owner does not see the offered tenant's instances.
	expect(t, e.Call(acme.Admin.Token, "instances/get", map[string]any{"tenantId": "acme", "instanceId": one}), "NOT_FOUND", anyPath)
}

// TestInstancesChangeErrors: desired-state calls, reads and events refuse
// what they must.
func TestInstancesChangeErrors(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t).RunReconciler()
	acme := newTenant(t, e, "acme")
	beta := newTenant(t, e, "beta")
	pool := vpsPool(t, e, acme.Admin.Token, "acme", "vps", nil)
	m := acme.Member.Token
	id := must(t, e.Call(m, "instances/create", instanceIn("acme", pool, "x", 0))).Str("instanceId")
	ref := func(kv ...any) map[string]any {
		out := map[string]any{"tenantId": "acme", "instanceId": id}
		for k := 0; k < len(kv); k += 2 {
			out[kv[k].(string)] = kv[k+1]
		}
		return out
	}
	g := waitState(t, e, m, "acme", id, "running", 10*time.Second)
	v := g["rowVersion"].(float64)
	for _, method := range []string{"instances/start", "instances/stop", "instances/reboot", "instances/delete"} {
		expect(t, e.Call("", method, ref()), "UNAUTHENTICATED", anyPath)
		expect(t, e.Call(acme.Viewer.Token, method, ref()), "PERMISSION_DENIED", anyPath)
		expect(t, e.Call(beta.Member.Token, method, map[string]any{"tenantId": "beta", "instanceId": id}), "NOT_FOUND", anyPath)
		expect(t, e.Call(m, method, ref("instanceId", "inst_01jd0000000000000000000000")), "NOT_FOUND", anyPath)
		expect(t, e.Call(m, method, ref("instanceId", "i-123")), "INVALID_INPUT", "instanceId")
		expect(t, e.Call(m, method, ref("expectedVersion", v+5)), "CONFLICT", anyPath)
		expect(t, e.Call(m, method, ref("expectedVersion", 0)), "INVALID_INPUT", "expectedVersion")
	}
	// A start of a running instance changes nothing.
	s := must(t, e.Call(m, "instances/start", ref("expectedVersion", v)))
	if s.Body["rowVersion"] != v {
		t.Fatalf("a no-op start bumped rowVersion: %s", s.Raw)
	}
	// A stopped instance does not reboot.
	must(t, e.Call(m, "instances/stop", ref()))
	r := e.Call(m, "instances/reboot", ref())
	expect(t, r, "INVALID_STATE", anyPath)
	if reason(t, r) != "not-running" {
		t.Fatalf("reboot of a stopped instance: %s", r.Raw)
	}
	stale := must(t, e.Call(m, "instances/get", ref())).Body["rowVersion"]
	must(t, e.Call(m, "instances/delete", ref()))
	for _, method := range []string{"instances/start", "instances/stop", "instances/reboot"} {
		r := e.Call(m, method, ref())
		expect(t, r, "INVALID_STATE", anyPath)
		if reason(t, r) != "deleted" {
			t.Fatalf("%s of a deleted instance: %s", method, r.Raw)
		}
		// With the version read before the delete: CONFLICT, the caller's
		// view is stale (checked before the instance's state).
		expect(t, e.Call(m, method, ref("expectedVersion", stale)), "CONFLICT", anyPath)
	}
	// Deleting again is a no-op.
	must(t, e.Call(m, "instances/delete", ref()))

	// A failed instance desired stopped: a stop asks nothing more (its
	// repeats bumped rowVersion each time, staling other clients'
	// expectedVersion); a start asks the reconciler to act again.
	failing := vpsPool(t, e, acme.Admin.Token, "acme", "failing", map[string]any{"maxTries": 1, "sim": map[string]any{"latencyMs": 0, "failureRate": 1}})
	in := instanceIn("acme", failing, "f", 0)
	in["desiredState"] = "stopped"
	fid := must(t, e.Call(m, "instances/create", in)).Str("instanceId")
	fv := waitState(t, e, m, "acme", fid, "failed", 10*time.Second)["rowVersion"]
	for k := 0; k < 3; k++ {
		if r := must(t, e.Call(m, "instances/stop", map[string]any{"tenantId": "acme", "instanceId": fid, "expectedVersion": fv})); r.Body["rowVersion"] != fv {
			t.Fatalf("a stop of a failed instance desired stopped changed it: %s", r.Raw)
		}
	}
	if r := must(t, e.Call(m, "instances/start", map[string]any{"tenantId": "acme", "instanceId": fid, "expectedVersion": fv})); r.Body["rowVersion"] == fv {
		t.Fatalf("a start of a failed instance changed nothing: %s", r.Raw)
	}

	// Reads.
	expect(t, e.Call(beta.Viewer.Token, "instances/get", map[string]any{"tenantId": "beta", "instanceId": id}), "NOT_FOUND", anyPath)
	expect(t, e.Call(beta.Viewer.Token, "instances/get", map[string]any{"tenantId": "acme", "instanceId": id}), "PERMISSION_DENIED", anyPath)
	expect(t, e.Call(m, "instances/list", map[string]any{"tenantId": "acme", "state": "gone"}), "INVALID_INPUT", "state")
	expect(t, e.Call(m, "instances/list", map[string]any{"tenantId": "acme", "limit": 500}), "INVALID_INPUT", "limit")
	expect(t, e.Call(m, "instances/list", map[string]any{"tenantId": "acme", "cursor": "!!"}), "INVALID_INPUT", "cursor")
	expect(t, e.Call(beta.Viewer.Token, "instances/events", map[string]any{"tenantId": "beta", "instanceId": id}), "NOT_FOUND", anyPath)
	expect(t, e.Call(m, "instances/events", ref("cursor", "evt_notanid")), "INVALID_INPUT", "cursor")
	expect(t, e.Call(m, "instances/events", ref("cursor", "evt_zzzzzzzzzzzzzzzzzzzzzzzzzz")), "INVALID_INPUT", "cursor")

	// An expired cursor: prune the first events and read from one of them.
	waitState(t, e, m, "acme", id, "deleted", 10*time.Second)
	waitEvents(t, e, m, "acme", id, "instance.deleted", 50)
	all := items(t, must(t, e.Call(m, "instances/events", ref("limit", 200))))
	if len(all) < 4 {
		t.Fatalf("events: %v", all)
	}
	if _, err := e.DB.Exec(`UPDATE events SET occurred_at = now() - interval '30 days' WHERE resource_id = $1 AND type IN ('instance.created', 'instance.provisioning')`, id); err != nil {
		t.Fatal(err)
	}
	if _, err := events.Prune(context.Background(), e.DB, time.Now().Add(-7*24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	r = e.Call(m, "instances/events", ref("cursor", all[0]["eventId"]))
	expect(t, r, "INVALID_STATE", anyPath)
	if reason(t, r) != "expired-cursor" {
		t.Fatalf("expired cursor: %s", r.Raw)
	}
	rest := items(t, must(t, e.Call(m, "instances/events", ref("cursor", all[1]["eventId"]))))
	if len(rest) != len(all)-2 {
		t.Fatalf("reading on from the pruned position: %d of %d", len(rest), len(all))
	}
}

// Every refusal for an archived pool says so the same way: INVALID_STATE
// with details.reason "archived" (joining, join tokens, updates and offers
// said state only, instances and reservations the reason too).
func TestArchivedPoolRefusalsCarryTheReason(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	acme := newTenant(t, e, "acme")
	newTenant(t, e, "guest")
	admin := acme.Admin.Token
	metal := e.Pool(admin, "acme", "metal")
	jt := must(t, e.Call(admin, "joinTokens/create", map[string]any{"tenantId": "acme", "poolId": metal})).Str("secret")
	must(t, e.Call(admin, "pools/archive", map[string]any{"tenantId": "acme", "poolId": metal}))
	for _, c := range []struct {
		method, token string
		body          map[string]any
	}{
		{"joinTokens/create", admin, map[string]any{"tenantId": "acme", "poolId": metal}},
		{"pools/update", admin, map[string]any{"tenantId": "acme", "poolId": metal, "name": "x"}},
		{"pools/offer", admin, map[string]any{"tenantId": "acme", "poolId": metal, "toTenantId": "guest", "quota": map[string]any{"gpus": 1, "instances": 1}}},
		{"nodes/join", "", testkit.NewMachine(t).JoinBody(jt)},
	} {
		r := e.Call(c.token, c.method, c.body)
		if r.Status != 422 || reason(t, r) != "archived" {
			t.Errorf("%s on an archived pool: %d %s", c.method, r.Status, r.Raw)
		}
	}
}

// A failed instance starts again only where its tenant may create one: a
// start provisions it anew, and it did so in a pool whose offer had been
// withdrawn, or that had been archived (and one that had failed waiting
// for a place failed again at every start). A stopped instance in a pool
// no longer offered still starts (instances that run or are stopped
// stay).
func TestAFailedInstanceStartsOnlyWhereItCouldBeCreated(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t).RunReconciler()
	acme, beta := newTenant(t, e, "acme"), newTenant(t, e, "beta")
	pool := vpsPool(t, e, acme.Admin.Token, "acme", "failing", map[string]any{"maxTries": 1, "sim": map[string]any{"latencyMs": 0, "failureRate": 1}})
	must(t, e.Call(acme.Admin.Token, "pools/offer", map[string]any{"tenantId": "acme", "poolId": pool, "toTenantId": "beta", "quota": map[string]any{"gpus": 4, "instances": 4}}))
	b := beta.Member.Token
	failed := must(t, e.Call(b, "instances/create", instanceIn("beta", pool, "f", 0))).Str("instanceId")
	waitState(t, e, b, "beta", failed, "failed", 10*time.Second)
	mine := must(t, e.Call(acme.Member.Token, "instances/create", instanceIn("acme", pool, "own", 0))).Str("instanceId")
	waitState(t, e, acme.Member.Token, "acme", mine, "failed", 10*time.Second)
	start := func(tok, tenant, id string) testkit.Resp {
		return e.Call(tok, "instances/start", map[string]any{"tenantId": tenant, "instanceId": id})
	}
	// a start that may try again: it provisions, and fails again (wait
	// for both: a retry under way is not failed)
	retried := func(tok, tenant, id string) {
		t.Helper()
		before := len(eventTypes(t, e, tok, tenant, id, 50))
		must(t, start(tok, tenant, id))
		wait.Eventually(t, 10*time.Second, func() error {
			if types := eventTypes(t, e, tok, tenant, id, 50); len(types) < before+2 || types[len(types)-1] != "instance.failed" {
				return fmt.Errorf("events %v", types)
			}
			return nil
		})
	}
	retried(b, "beta", failed) // offered: it may try again

	must(t, e.Call(acme.Admin.Token, "pools/unoffer", map[string]any{"tenantId": "acme", "poolId": pool, "toTenantId": "beta"}))
	r := start(b, "beta", failed)
	expect(t, r, "INVALID_STATE", anyPath)
	if reason(t, r) != "not-offered" {
		t.Fatalf("a failed instance's start after the unoffer: %s", r.Raw)
	}
	// the owner's own failed instance still starts; once archived, not
	retried(acme.Member.Token, "acme", mine)
	must(t, e.Call(acme.Admin.Token, "pools/archive", map[string]any{"tenantId": "acme", "poolId": pool}))
	r = start(acme.Member.Token, "acme", mine)
	expect(t, r, "INVALID_STATE", anyPath)
	if reason(t, r) != "archived" {
		t.Fatalf("a failed instance's start in an archived pool: %s", r.Raw)
	}
	// and nothing moved: no provisioning after the refusals
	for _, c := range []struct{ tok, tenant, id string }{{b, "beta", failed}, {acme.Member.Token, "acme", mine}} {
		if g := must(t, e.Call(c.tok, "instances/get", map[string]any{"tenantId": c.tenant, "instanceId": c.id})); g.Str("state") != "failed" {
			t.Fatalf("after a refused start: %s", g.Raw)
		}
	}
}
