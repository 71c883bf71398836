package instances

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/bettercompute/computed/internal/events"
	"github.com/bettercompute/computed/internal/ids"
	"github.com/bettercompute/computed/internal/instances/provider"
	"github.com/bettercompute/computed/internal/inventory"
	"github.com/bettercompute/computed/internal/reqctx"
	"github.com/bettercompute/computed/internal/store"
	"github.com/bettercompute/computed/internal/testkit/pgtest"
	waitfor "github.com/bettercompute/computed/internal/testkit/wait"
)

// The reconciler's steps against a real database and the sim provider
// (internal/instances/provider/sim), without river: each step runs as the
// worker runs it (stepTx in one transaction, as the reconciler's
// principal), and failures are injected through the pool's policy (the
// sim's failureRate and capacity, an unparsable sim policy for a permanent
// error, a provider this server does not have).

func TestMain(m *testing.M) { pgtest.Main(m) }

type rig struct {
	t   *testing.T
	db  *store.DB
	s   *Service
	ctx context.Context
}

func newRig(t *testing.T) *rig {
	t.Parallel()
	db := pgtest.DB(t)
	provs, err := provider.Open(provider.Deps{DB: db, MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, p := range provs {
			if c, ok := p.(io.Closer); ok {
				c.Close()
			}
		}
	})
	r := &rig{t: t, db: db, ctx: reqctx.WithPrincipal(store.ForRequest(context.Background()), systemPrincipal), // steps return once their events are numbered

		s: &Service{db: db, log: slog.New(slog.NewTextHandler(io.Discard, nil)), providers: provs}}
	r.exec(`INSERT INTO tenants (tenant_id, name) VALUES ('acme', 'Acme')`)
	return r
}

func (r *rig) exec(q string, args ...any) {
	r.t.Helper()
	if _, err := r.db.Exec(q, args...); err != nil {
		r.t.Fatalf("%s: %v", q, err)
	}
}

// pool makes a pool of kind with provider and policy (written as is: the
// reconciler must cope with what a pool holds).
func (r *rig) pool(kind, prov, policy string) string {
	r.t.Helper()
	id := ids.New(ids.Pool)
	var p any
	if prov != "" {
		p = prov
	}
	r.exec(`INSERT INTO pools (pool_id, tenant_id, name, site, gpu_model, sharing_mode, kind, provider, policy)
		VALUES ($1, 'acme', $1, 'fra1', 'H100', 'exclusive', $2, $3, $4::jsonb)`, id, kind, p, policy)
	return id
}

// instance makes a pending instance wanting desired.
func (r *rig) instance(pool, desired string) string {
	r.t.Helper()
	id := ids.New(ids.Instance)
	r.exec(`INSERT INTO instances (instance_id, tenant_id, pool_id, name, gpus, vcpus, memory_gib, desired_state)
		VALUES ($1, 'acme', $2, $1, 1, 4, 16, $3)`, id, pool, desired)
	return id
}

// want changes what the instance wants, as instances.start/stop/delete do.
func (r *rig) want(id, desired string) {
	r.exec(`UPDATE instances SET desired_state = $2, desired_at = clock_timestamp() WHERE instance_id = $1`, id, desired)
}

func (r *rig) get(id string) *Instance {
	r.t.Helper()
	i, err := one(r.ctx, r.db, `SELECT `+cols+` FROM instances WHERE instance_id = $1`, id)
	if err != nil {
		r.t.Fatal(err)
	}
	return i
}

// step takes one reconcile step of the instance.
func (r *rig) step(id string) stepResult {
	r.t.Helper()
	var res stepResult
	err := r.db.Tx(r.ctx, func(tx *sqlx.Tx) error {
		var err error
		res, err = r.s.stepTx(r.ctx, tx, id, nil)
		return err
	})
	if err != nil {
		r.t.Fatalf("step of %s: %v", id, err)
	}
	return res
}

// run takes steps until the instance converges (done) or has to wait, and
// returns the states it moved through and the last result.
func (r *rig) run(id string) ([]string, stepResult) {
	r.t.Helper()
	var states []string
	last := r.get(id).State
	for n := 0; n < 30; n++ {
		res := r.step(id)
		if st := r.get(id).State; st != last {
			states, last = append(states, st), st
		}
		if res.outcome != progress {
			return states, res
		}
	}
	r.t.Fatalf("%s: no end after 30 steps: %v", id, states)
	return nil, stepResult{}
}

// events are the types of the instance's events, oldest first.
func (r *rig) events(id string) string {
	r.t.Helper()
	evs, err := events.Page(r.ctx, r.db, events.Filter{TenantID: "acme", ResourceID: id}, 0, 100)
	if err != nil {
		r.t.Fatal(err)
	}
	types := make([]string, len(evs))
	for k, ev := range evs {
		types[k] = ev.Type
	}
	return strings.Join(types, ",")
}

func (r *rig) converge(id string, want ...string) {
	r.t.Helper()
	states, res := r.run(id)
	if res.outcome != done || strings.Join(states, ",") != strings.Join(want, ",") {
		r.t.Fatalf("%s moved through %v (outcome %d), want %v; reason %q", id, states, res.outcome, want, deref(r.get(id).StateReason))
	}
}

const instant = `{"sim": {"latencyMs": 0}}`

// The lifecycle against the provider: create, stop, start, reboot,
// delete, each move with its event.
func TestProviderStepsLifecycle(t *testing.T) {
	r := newRig(t)
	pool := r.pool("vps-provider", "sim", instant)
	id := r.instance(pool, Running)
	r.converge(id, Provisioning, Running)
	r.want(id, Stopped)
	r.converge(id, Stopping, Stopped)
	r.want(id, Running)
	r.converge(id, Provisioning, Running)
	r.exec(`UPDATE instances SET reboot_generation = reboot_generation + 1 WHERE instance_id = $1`, id)
	r.converge(id, Rebooting, Running)
	if i := r.get(id); i.RebootedGeneration != 1 {
		t.Fatalf("rebooted generation %d", i.RebootedGeneration)
	}
	r.want(id, Deleted)
	r.converge(id, Deleting, Deleted)
	// The provider has forgotten the VM it found deleted (its table does
	// not grow with every VM ever made).
	var vms int
	if err := r.db.Get(&vms, `SELECT count(*) FROM sim_vms WHERE vm_id = $1`, id); err != nil || vms != 0 {
		t.Fatalf("the provider still has %d VMs, %v", vms, err)
	}
	want := "instance.provisioning,instance.running,instance.stopping,instance.stopped,instance.provisioning,instance.running," +
		"instance.rebooting,instance.running,instance.deleting,instance.deleted"
	// Readable below the cluster's visibility horizon: once the
	// transactions of other tests that began before them have ended.
	waitfor.Eventually(t, 10*time.Second, func() error {
		if got := r.events(id); got != want {
			return fmt.Errorf("events %s", got)
		}
		return nil
	})
	// A converged instance takes no step.
	if res := r.step(id); res.outcome != done {
		t.Fatalf("a deleted instance: outcome %d", res.outcome)
	}
}

// A pending instance that is deleted never reaches the provider.
func TestProviderStepDeletesPendingAtOnce(t *testing.T) {
	r := newRig(t)
	pool := r.pool("vps-provider", "sim", instant)
	id := r.instance(pool, Deleted)
	r.converge(id, Deleted)
	var vms int
	if err := r.db.Get(&vms, `SELECT count(*) FROM sim_vms WHERE vm_id = $1`, id); err != nil || vms != 0 {
		t.Fatalf("%d VMs, %v", vms, err)
	}
}

// Transient failures count tries and back off; past maxTries the instance
// fails, saying why; a start made after the failure provisions it again.
func TestProviderStepRetriesThenFails(t *testing.T) {
	r := newRig(t)
	pool := r.pool("vps-provider", "sim", `{"maxTries": 3, "sim": {"latencyMs": 0, "failureRate": 1}}`)
	id := r.instance(pool, Running)
	for try := 1; try < 3; try++ {
		res := r.step(id)
		i := r.get(id)
		if res.outcome != wait || res.after != backoff(try) || i.State != Pending || i.StepTries != try ||
			!strings.HasPrefix(deref(i.StateReason), "provider call failed, retrying: ") {
			t.Fatalf("try %d: outcome %d after %s; %s, %d tries, %q", try, res.outcome, res.after, i.State, i.StepTries, deref(i.StateReason))
		}
	}
	if res := r.step(id); res.outcome != progress {
		t.Fatalf("the last try: outcome %d", res.outcome)
	}
	i := r.get(id)
	if i.State != Failed || !strings.Contains(deref(i.StateReason), "failed after 3 tries") || i.StepTries != 0 {
		t.Fatalf("after the last try: %s %q (%d tries)", i.State, deref(i.StateReason), i.StepTries)
	}
	// Its create may have made a VM: it holds its room as a placed one.
	var placed bool
	if err := r.db.Get(&placed, `SELECT placed FROM instances WHERE instance_id = $1`, id); err != nil || !placed {
		t.Fatalf("placed %v (%v)", placed, err)
	}
	// Failed is converged until a start or delete made after it.
	if res := r.step(id); res.outcome != done {
		t.Fatalf("a failed instance: outcome %d", res.outcome)
	}
	r.exec(`UPDATE pools SET policy = $2::jsonb WHERE pool_id = $1`, pool, instant)
	r.want(id, Running)
	r.converge(id, Provisioning, Running)
}

// A permanent error (a sim policy the provider cannot read) fails the
// instance at the first try.
func TestProviderStepPermanentErrorFailsAtOnce(t *testing.T) {
	r := newRig(t)
	pool := r.pool("vps-provider", "sim", `{"sim": {"failureRate": 2}}`)
	id := r.instance(pool, Running)
	r.step(id)
	if i := r.get(id); i.State != Failed || !strings.Contains(deref(i.StateReason), "failureRate") {
		t.Fatalf("%s %q", i.State, deref(i.StateReason))
	}
}

// No room: the instance waits in pending, saying why, and goes on once
// room is made.
func TestProviderStepWaitsForCapacity(t *testing.T) {
	r := newRig(t)
	pool := r.pool("vps-provider", "sim", `{"capacity": {"instances": 1}, "sim": {"latencyMs": 0}}`)
	first := r.instance(pool, Running)
	r.converge(first, Provisioning, Running)
	second := r.instance(pool, Running)
	states, res := r.run(second)
	i := r.get(second)
	if len(states) != 0 || res.outcome != wait || res.after != 2*poll || i.State != Pending || !strings.HasPrefix(deref(i.StateReason), "waiting for capacity") {
		t.Fatalf("%v, outcome %d after %s: %s %q", states, res.outcome, res.after, i.State, deref(i.StateReason))
	}
	if i.StepTries != 0 {
		t.Fatalf("waiting for room counted %d tries", i.StepTries)
	}
	r.want(first, Deleted)
	r.converge(first, Deleting, Deleted)
	r.converge(second, Provisioning, Running)
}

// An operation under way is waited for (poll) until its timeout, which
// fails the instance.
func TestProviderStepTimesOut(t *testing.T) {
	r := newRig(t)
	pool := r.pool("vps-provider", "sim", `{"timeouts": {"provisioning": 60}, "sim": {"latencyMs": 600000}}`)
	id := r.instance(pool, Running)
	r.step(id) // create: provisioning
	if i := r.get(id); i.State != Provisioning {
		t.Fatalf("%s", i.State)
	}
	if res := r.step(id); res.outcome != wait || res.after != poll {
		t.Fatalf("provisioning under way: outcome %d after %s", res.outcome, res.after)
	}
	r.exec(`UPDATE instances SET state_since = now() - interval '61 seconds' WHERE instance_id = $1`, id)
	r.step(id)
	if i := r.get(id); i.State != Failed || !strings.HasPrefix(deref(i.StateReason), "timed out after 1m0s in provisioning") {
		t.Fatalf("%s %q", i.State, deref(i.StateReason))
	}
}

// failing is the sim, except that Describe reports every VM failed.
type failing struct{ provider.Provider }

func (failing) Describe(context.Context, provider.Pool, string) (provider.Observation, error) {
	return provider.Observation{State: provider.Failed, Reason: "disk gone"}, nil
}

// What the provider observes wins: a VM it reports failed fails the
// instance; one it lost while the instance provisions is created again.
func TestProviderStepFollowsTheObservation(t *testing.T) {
	r := newRig(t)
	pool := r.pool("vps-provider", "sim", instant)
	id := r.instance(pool, Running)
	r.converge(id, Provisioning, Running)
	r.want(id, Stopped)
	r.step(id) // stopping
	r.s.providers["failing"] = failing{r.s.providers["sim"]}
	r.exec(`UPDATE pools SET provider = 'failing' WHERE pool_id = $1`, pool)
	r.step(id)
	if i := r.get(id); i.State != Failed || deref(i.StateReason) != "the provider reports the VM failed: disk gone" {
		t.Fatalf("%s %q", i.State, deref(i.StateReason))
	}
	r.exec(`UPDATE pools SET provider = 'sim' WHERE pool_id = $1`, pool)

	lost := r.instance(pool, Running)
	r.step(lost) // create: provisioning
	r.exec(`DELETE FROM sim_vms WHERE vm_id = $1`, lost)
	r.converge(lost, Running)
	if i := r.get(lost); i.State != Running {
		t.Fatalf("%s", i.State)
	}
}

// A VM the provider has deleted is created again when its instance is
// started: the instance's delete step gave up (it failed in deleting)
// while the provider's delete went on and finished, and a start then
// provisions it. The sim kept the deleted VM's row, and its Create took
// the id as a repeat of the first create and did nothing, so the instance
// provisioned until it timed out.
func TestProviderStepCreatesADeletedVMAgain(t *testing.T) {
	r := newRig(t)
	pool := r.pool("vps-provider", "sim", instant)
	id := r.instance(pool, Running)
	r.converge(id, Provisioning, Running)
	r.want(id, Deleted)
	r.step(id) // deleting
	r.step(id) // the provider's delete requested
	if i := r.get(id); i.State != Deleting {
		t.Fatalf("%s", i.State)
	}
	r.exec(`UPDATE instances SET state = 'failed', state_reason = 'timed out after 10m0s in deleting', state_since = clock_timestamp() WHERE instance_id = $1`, id)
	r.want(id, Running)
	r.converge(id, Provisioning, Running)
	var vms int
	if err := r.db.Get(&vms, `SELECT count(*) FROM sim_vms WHERE vm_id = $1 AND state = 'running'`, id); err != nil || vms != 1 {
		t.Fatalf("%d running VMs, %v", vms, err)
	}
}

// reboot asks for one more reboot, as instances.reboot does.
func (r *rig) reboot(id string) {
	r.exec(`UPDATE instances SET reboot_generation = reboot_generation + 1 WHERE instance_id = $1`, id)
}

// A reboot whose provider calls fail is retried and then fails: a failed
// call is no reboot. (The step took a counted try as the sign that the
// reboot had been requested, and a failed call counts a try: the instance
// went back to running, the reboot recorded as done, the VM never
// rebooted.)
func TestProviderStepFailedRebootCallsAreNoReboot(t *testing.T) {
	r := newRig(t)
	pool := r.pool("vps-provider", "sim", instant)
	id := r.instance(pool, Running)
	r.converge(id, Provisioning, Running)
	r.exec(`UPDATE pools SET policy = '{"maxTries": 3, "sim": {"latencyMs": 0, "failureRate": 1}}' WHERE pool_id = $1`, pool)
	r.reboot(id)
	states, _ := r.run(id)
	for n := 0; n < 5 && r.get(id).State == Rebooting; n++ {
		more, _ := r.run(id) // the backoffs between tries
		states = append(states, more...)
	}
	i := r.get(id)
	if strings.Join(states, ",") != "rebooting,failed" || !strings.Contains(deref(i.StateReason), "rebooting failed after 3 tries") || i.RebootedGeneration != 0 {
		t.Fatalf("moved through %v: %s %q, rebooted generation %d", states, i.State, deref(i.StateReason), i.RebootedGeneration)
	}
}

// A reboot asked for while the instance reboots is done after that reboot,
// not taken as done by it: it was asked for after the reboot began.
func TestProviderStepRebootAskedDuringARebootIsDone(t *testing.T) {
	r := newRig(t)
	pool := r.pool("vps-provider", "sim", instant)
	id := r.instance(pool, Running)
	r.converge(id, Provisioning, Running)
	r.reboot(id)
	r.step(id) // rebooting
	r.step(id) // the provider's reboot requested
	if i := r.get(id); i.State != Rebooting {
		t.Fatalf("%s", i.State)
	}
	r.reboot(id)
	r.converge(id, Running, Rebooting, Running)
	if i := r.get(id); i.RebootedGeneration != 2 || i.RebootGeneration != 2 {
		t.Fatalf("generations %d/%d", i.RebootedGeneration, i.RebootGeneration)
	}
}

// A reboot that failed (timed out) is not done again after a start: the
// start boots the VM, which does what every reboot asked before it asked
// for. (The reboot's generation stayed pending, and every start of the
// instance rebooted it once running, or failed again.)
func TestProviderStepStartAfterAFailedRebootDoesNotReboot(t *testing.T) {
	r := newRig(t)
	pool := r.pool("vps-provider", "sim", `{"timeouts": {"rebooting": 60}, "sim": {"latencyMs": {"create": 0, "start": 0, "stop": 0, "delete": 0, "reboot": 600000}}}`)
	id := r.instance(pool, Running)
	r.converge(id, Provisioning, Running)
	r.reboot(id)
	r.step(id) // rebooting
	r.step(id) // the provider's reboot requested
	r.exec(`UPDATE instances SET state_since = now() - interval '61 seconds' WHERE instance_id = $1`, id)
	r.step(id)
	if i := r.get(id); i.State != Failed || !strings.HasPrefix(deref(i.StateReason), "timed out after 1m0s in rebooting") {
		t.Fatalf("%s %q", i.State, deref(i.StateReason))
	}
	r.exec(`UPDATE sim_vms SET ready_at = now() WHERE vm_id = $1`, id) // the provider's reboot ends
	r.want(id, Running)
	r.converge(id, Provisioning, Running)
	if i := r.get(id); i.RebootedGeneration != 1 {
		t.Fatalf("rebooted generation %d", i.RebootedGeneration)
	}
}

// A start while the VM is still in another operation (a stop that timed
// out goes on at the provider) waits for that operation to end, without
// counting tries, and then starts the VM. (It asked for a create, which the
// provider took as a repeat and did nothing, again and again: every try
// used up in milliseconds, "gave up provisioning after 5 tries".)
func TestProviderStepWaitsForTheVMsOtherOperation(t *testing.T) {
	r := newRig(t)
	pool := r.pool("vps-provider", "sim", `{"timeouts": {"stopping": 60}, "sim": {"latencyMs": {"create": 0, "start": 0, "reboot": 0, "delete": 0, "stop": 600000}}}`)
	id := r.instance(pool, Running)
	r.converge(id, Provisioning, Running)
	r.want(id, Stopped)
	r.step(id) // stopping
	r.step(id) // the provider's stop requested
	r.exec(`UPDATE instances SET state_since = now() - interval '61 seconds' WHERE instance_id = $1`, id)
	r.step(id)
	if i := r.get(id); i.State != Failed {
		t.Fatalf("%s %q", i.State, deref(i.StateReason))
	}
	r.want(id, Running)
	states, res := r.run(id)
	i := r.get(id)
	if strings.Join(states, ",") != "provisioning" || res.outcome != wait || res.after != poll || i.StepTries != 0 ||
		deref(i.StateReason) != "waiting for the provider's VM to finish stopping" {
		t.Fatalf("moved through %v (outcome %d after %s): %s %q, %d tries", states, res.outcome, res.after, i.State, deref(i.StateReason), i.StepTries)
	}
	r.exec(`UPDATE sim_vms SET ready_at = now() WHERE vm_id = $1`, id) // the stop ends
	r.converge(id, Running)
}

// A pool whose provider this server does not have: an instance that needs
// the provider fails, saying so; a pending one that is deleted needs no
// provider call.
func TestProviderStepWithoutItsProvider(t *testing.T) {
	r := newRig(t)
	pool := r.pool("vps-provider", "gone", `{}`)
	id := r.instance(pool, Running)
	r.converge(id, Failed)
	if reason := deref(r.get(id).StateReason); reason != `the pool's provider "gone" is not available in this server` {
		t.Fatalf("reason %q", reason)
	}
	// A start after the failure is another try, which fails again, saying
	// why, and the instance converges. (The step did nothing: the
	// instance stayed failed from before the start, not converged, and
	// the sweep queued it again and again.)
	r.want(id, Running)
	r.converge(id, Provisioning, Failed)
	if i := r.get(id); deref(i.StateReason) != `the pool's provider "gone" is not available in this server` || !i.StateSince.After(i.DesiredAt) {
		t.Fatalf("after the start: %s %q, since %v, desired at %v", i.State, deref(i.StateReason), i.StateSince, i.DesiredAt)
	}
	var converged bool
	if err := r.db.Get(&converged, `SELECT converged FROM instances WHERE instance_id = $1`, id); err != nil || !converged {
		t.Fatalf("converged %v, %v", converged, err)
	}
	pending := r.instance(pool, Deleted)
	r.converge(pending, Deleted)
}

// --- hosted pools ---------------------------------------------------------

// node adds a host node in state to the pool.
func (r *rig) node(pool, state string) string {
	r.t.Helper()
	id := ids.New(ids.Node)
	r.exec(`INSERT INTO nodes (node_id, tenant_id, pool_id, name, state, attestor, csr_fingerprint, certificate, cert_expires_at)
		VALUES ($1, 'acme', $2, $1, $3, 'token', $1, 'x', now() + interval '1 day')`, id, pool, state)
	return id
}

// placed puts the instance on host in state, holding one GPU.
func (r *rig) placed(id, host, state string) {
	r.exec(`UPDATE instances SET host_node_id = $2 WHERE instance_id = $1`, id, host)
	r.exec(`INSERT INTO instance_allocations (node_id, device_id, instance_id, gpu_uuid) VALUES ($1, $2, $2, 'GPU-' || $2)`, host, id)
	for _, s := range pathTo(state) {
		r.exec(`UPDATE instances SET state = $2 WHERE instance_id = $1`, id, s)
	}
}

// pathTo is the states from pending to state, one allowed move each.
func pathTo(state string) []string {
	return map[string][]string{
		Provisioning: {Provisioning}, Running: {Provisioning, Running}, Stopping: {Provisioning, Running, Stopping},
		Deleting: {Provisioning, Running, Deleting}, Failed: {Failed},
	}[state]
}

func (r *rig) allocations(id string) int {
	var n int
	if err := r.db.Get(&n, `SELECT count(*) FROM instance_allocations WHERE instance_id = $1`, id); err != nil {
		r.t.Fatal(err)
	}
	return n
}

// A removed host takes its VMs with it: a live instance on it fails, naming
// the host; one being deleted is deleted; both free their devices.
func TestHostedStepRemovedHost(t *testing.T) {
	r := newRig(t)
	pool := r.pool("vps-hosted", "", `{}`)
	host := r.node(pool, "ready")
	running := r.instance(pool, Running)
	r.placed(running, host, Running)
	deleting := r.instance(pool, Deleted)
	r.placed(deleting, host, Deleting)
	r.exec(`UPDATE nodes SET state = 'removed' WHERE node_id = $1`, host)

	r.converge(running, Failed)
	if i := r.get(running); deref(i.StateReason) != fmt.Sprintf("host node %s was removed", host) || r.allocations(running) != 0 {
		t.Fatalf("%q, %d allocations", deref(i.StateReason), r.allocations(running))
	}
	r.step(deleting)
	if i := r.get(deleting); i.State != Deleted || deref(i.StateReason) != "host node removed" || r.allocations(deleting) != 0 {
		t.Fatalf("%s %q, %d allocations", i.State, deref(i.StateReason), r.allocations(deleting))
	}
	// Started again, the failed one waits for a ready host (there is none).
	r.want(running, Running)
	states, res := r.run(running)
	if len(states) != 0 || res.outcome != wait || !strings.HasPrefix(deref(r.get(running).StateReason), "waiting for capacity") {
		t.Fatalf("%v, outcome %d, %q", states, res.outcome, deref(r.get(running).StateReason))
	}
}

// The control plane sets what the host daemon acts on; the daemon's
// reports make the moves out of transitional states, so a step waits in
// them until their timeout.
func TestHostedStepMovesAndWaits(t *testing.T) {
	r := newRig(t)
	pool := r.pool("vps-hosted", "", `{"timeouts": {"stopping": 30}}`)
	host := r.node(pool, "ready")
	id := r.instance(pool, Running)
	r.placed(id, host, Running)
	r.want(id, Stopped)
	states, res := r.run(id)
	if strings.Join(states, ",") != Stopping || res.outcome != wait || res.after != 2*poll {
		t.Fatalf("%v, outcome %d after %s", states, res.outcome, res.after)
	}
	r.exec(`UPDATE instances SET state_since = now() - interval '31 seconds' WHERE instance_id = $1`, id)
	r.converge(id, Failed)
	if reason := deref(r.get(id).StateReason); !strings.HasPrefix(reason, "timed out after 30s in stopping") {
		t.Fatalf("reason %q", reason)
	}
	// A deleting instance that was never placed needs no host.
	unplaced := r.instance(pool, Running)
	r.exec(`UPDATE instances SET state = 'provisioning' WHERE instance_id = $1`, unplaced)
	r.want(unplaced, Deleted)
	r.converge(unplaced, Deleting, Deleted)
	// Pending without a host with inventory waits, saying why.
	waiting := r.instance(pool, Running)
	if states, res := r.run(waiting); len(states) != 0 || res.outcome != wait ||
		deref(r.get(waiting).StateReason) != "waiting for capacity: the pool has no ready host with inventory" {
		t.Fatalf("%v %d %q", states, res.outcome, deref(r.get(waiting).StateReason))
	}
}

// Deleting needs no call of a provider this server does not have: a
// failed instance that is deleted, and one the provider went away from
// while it was deleted, end deleted, not failed again.
func TestProviderStepDeletesWithoutItsProvider(t *testing.T) {
	r := newRig(t)
	pool := r.pool("vps-provider", "gone", `{}`)
	id := r.instance(pool, Running)
	r.converge(id, Failed)
	r.want(id, Deleted)
	r.converge(id, Deleting, Deleted)

	sim := r.pool("vps-provider", "sim", instant)
	mid := r.instance(sim, Running)
	r.converge(mid, Provisioning, Running)
	r.want(mid, Deleted)
	r.step(mid) // deleting
	r.exec(`UPDATE pools SET provider = 'gone' WHERE pool_id = $1`, sim)
	r.converge(mid, Deleted)
}

// A deleted instance whose host was removed is done: the step after its
// move to deleted (the worker takes it at once) converges, and a later job
// of it too, instead of trying to fail it.
func TestHostedStepDeletedInstanceOnRemovedHost(t *testing.T) {
	r := newRig(t)
	pool := r.pool("vps-hosted", "", `{}`)
	host := r.node(pool, "ready")
	id := r.instance(pool, Deleted)
	r.placed(id, host, Deleting)
	r.exec(`UPDATE nodes SET state = 'removed' WHERE node_id = $1`, host)
	r.converge(id, Deleted)
	if res := r.step(id); res.outcome != done {
		t.Fatalf("a later job: outcome %d", res.outcome)
	}
}

// host adds a ready host to pool with the H100 node's inventory (8 GPUs)
// as its latest snapshot.
func (r *rig) host(pool string) string {
	r.t.Helper()
	raw, err := os.ReadFile("../inventory/testdata/h100-node.json")
	if err != nil {
		r.t.Fatal(err)
	}
	_, canonical, hash, err := inventory.Decode(raw)
	if err != nil {
		r.t.Fatal(err)
	}
	id, snap := r.node(pool, "ready"), ids.New(ids.Inventory)
	r.exec(`INSERT INTO inventory_snapshots (snapshot_id, node_id, hash, sections, collected_at) VALUES ($1, $2, $3, $4::json, now())`,
		snap, id, hash, string(canonical))
	r.exec(`UPDATE nodes SET latest_snapshot_id = $2 WHERE node_id = $1`, id, snap)
	return id
}

// sized makes a pending instance of gpus GPUs wanting to run.
func (r *rig) sized(pool string, gpus int) string {
	id := r.instance(pool, Running)
	r.exec(`UPDATE instances SET gpus = $2 WHERE instance_id = $1`, id, gpus)
	return id
}

// freeGPUs is the pool's free GPUs as instances.capacity says.
func (r *rig) freeGPUs(pool string) int {
	r.t.Helper()
	c, err := Capacity(r.ctx, r.db, pool, true)
	if err != nil {
		r.t.Fatal(err)
	}
	return c.Free.GPUs
}

// A hosted pool's room is its ready hosts': what instances hold on a
// cordoned host counts in neither its total nor what is held, and a failed
// instance that waits to be placed anew keeps its devices until it is.
// A probe: instances on a cordoned host kept a new instance waiting beside
// an empty ready host (free at -1), and a failed instance started again
// lost its GPU while it waited, to come back to its uncordoned host
// without one while another instance had its GPU.
func TestHostedRoomIsTheReadyHosts(t *testing.T) {
	r := newRig(t)
	pool := r.pool("vps-hosted", "", `{}`)
	a := r.host(pool)
	y, x := r.sized(pool, 4), r.sized(pool, 4)
	for _, id := range []string{y, x} {
		if states, res := r.run(id); strings.Join(states, ",") != Provisioning || res.outcome != wait || deref(r.get(id).Host) != a {
			t.Fatalf("%s: %v, outcome %d, on %q", id, states, res.outcome, deref(r.get(id).Host))
		}
		r.exec(`UPDATE instances SET state = 'running' WHERE instance_id = $1`, id) // the daemon's report
	}
	r.exec(`UPDATE instances SET state = 'failed' WHERE instance_id = $1`, x) // the daemon's report
	r.exec(`UPDATE nodes SET state = 'cordoned' WHERE node_id = $1`, a)
	b := r.host(pool)
	if free := r.freeGPUs(pool); free != 8 {
		t.Fatalf("free beside the cordoned host: %d GPUs, want b's 8", free)
	}
	z := r.sized(pool, 8)
	if states, res := r.run(z); strings.Join(states, ",") != Provisioning || deref(r.get(z).Host) != b {
		t.Fatalf("z: %v, outcome %d, on %q: %q", states, res.outcome, deref(r.get(z).Host), deref(r.get(z).StateReason))
	}
	// x, started again, is placed anew (its host is cordoned): b is full,
	// so it waits, failed, holding its devices on a.
	r.want(x, Running)
	if states, res := r.run(x); len(states) != 0 || res.outcome != wait || deref(r.get(x).StateReason) != roomReason {
		t.Fatalf("x: %v, outcome %d: %q", states, res.outcome, deref(r.get(x).StateReason))
	}
	if n := r.allocations(x); n != 4 || deref(r.get(x).Host) != a {
		t.Fatalf("x waits with %d devices on %q, want 4 on a", n, deref(r.get(x).Host))
	}
	// Uncordoned, a is x's again, with the devices it held.
	r.exec(`UPDATE nodes SET state = 'ready' WHERE node_id = $1`, a)
	if states, _ := r.run(x); strings.Join(states, ",") != Provisioning || deref(r.get(x).Host) != a || r.allocations(x) != 4 {
		t.Fatalf("x: %v on %q with %d devices", states, deref(r.get(x).Host), r.allocations(x))
	}
	var shared int
	if err := r.db.Get(&shared, `SELECT count(*) FROM (SELECT gpu_uuid FROM instance_allocations WHERE node_id = $1
		GROUP BY gpu_uuid HAVING count(*) > 1) d`, a); err != nil || shared != 0 {
		t.Fatalf("%d GPUs of a held twice (%v)", shared, err)
	}
	if free := r.freeGPUs(pool); free != 0 {
		t.Fatalf("free: %d GPUs, want 0 (a and b full)", free)
	}
}

// An instance that failed before it was ever placed (an unoffer while it
// waited) holds no room; started again, it takes its room as a pending one
// does: in a hosted pool it is placed and then holds it (a probe's such
// instance ran on a GPU that capacity and reservations still counted as
// free), and in a provider pool it waits, failed, while the pool is full
// (it went to provisioning past the capacity).
func TestNeverPlacedInstanceTakesItsRoomWhenStarted(t *testing.T) {
	r := newRig(t)
	neverPlaced := func(pool string, gpus int) string {
		id := r.sized(pool, gpus)
		r.exec(`UPDATE instances SET state = 'failed', state_reason = 'the pool is no longer offered to the instance''s tenant' WHERE instance_id = $1`, id)
		return id
	}
	hosted := r.pool("vps-hosted", "", `{}`)
	host := r.host(hosted)
	j := neverPlaced(hosted, 3)
	if free := r.freeGPUs(hosted); free != 8 {
		t.Fatalf("free beside a never placed instance: %d GPUs, want 8", free)
	}
	r.want(j, Running)
	if states, _ := r.run(j); strings.Join(states, ",") != Provisioning || deref(r.get(j).Host) != host || r.allocations(j) != 3 {
		t.Fatalf("j: %v on %q with %d devices", states, deref(r.get(j).Host), r.allocations(j))
	}
	if free := r.freeGPUs(hosted); free != 5 {
		t.Fatalf("free once j is placed: %d GPUs, want 5", free)
	}

	prov := r.pool("vps-provider", "sim", `{"capacity": {"gpus": 1}, "sim": {"latencyMs": 0}}`)
	holder := r.sized(prov, 1)
	r.converge(holder, Provisioning, Running)
	k := neverPlaced(prov, 1)
	r.want(k, Running)
	if states, res := r.run(k); len(states) != 0 || res.outcome != wait || deref(r.get(k).StateReason) != roomReason {
		t.Fatalf("k past the full pool: %v, outcome %d: %q", states, res.outcome, deref(r.get(k).StateReason))
	}
	r.want(holder, Deleted)
	r.converge(holder, Deleting, Deleted)
	r.converge(k, Provisioning, Running)
	if !r.get(k).Placed || r.freeGPUs(prov) != 0 {
		t.Fatalf("k placed %v, free %d", r.get(k).Placed, r.freeGPUs(prov))
	}
}

// An instance larger than the pool's whole capacity waits saying so: no
// deletion or reservation's end frees that room, and the reason said the
// room was held while capacity showed it all free (a probe's 5-GPU
// instance in a 4-GPU pool). It is placed once the capacity grows. In a
// hosted pool the whole is its ready hosts'.
func TestAnInstanceLargerThanThePoolSaysSo(t *testing.T) {
	r := newRig(t)
	prov := r.pool("vps-provider", "sim", `{"capacity": {"gpus": 4}, "sim": {"latencyMs": 0}}`)
	big := r.sized(prov, 5)
	if states, res := r.run(big); len(states) != 0 || res.outcome != wait ||
		deref(r.get(big).StateReason) != "waiting for capacity: the instance is larger than the pool's whole capacity (5 GPUs of 4); it waits until the pool's capacity grows" {
		t.Fatalf("big: %v, outcome %d: %q", states, res.outcome, deref(r.get(big).StateReason))
	}
	if free := r.freeGPUs(prov); free != 4 {
		t.Fatalf("free: %d", free)
	}
	r.exec(`UPDATE pools SET policy = '{"capacity": {"gpus": 8}, "sim": {"latencyMs": 0}}' WHERE pool_id = $1`, prov)
	if states, _ := r.run(big); len(states) == 0 || states[0] != Provisioning {
		t.Fatalf("big after the capacity grew: %v: %q", states, deref(r.get(big).StateReason))
	}
	hosted := r.pool("vps-hosted", "", `{}`)
	r.host(hosted)
	huge := r.sized(hosted, 9)
	if states, res := r.run(huge); len(states) != 0 || res.outcome != wait ||
		!strings.Contains(deref(r.get(huge).StateReason), "larger than the pool's whole capacity (9 GPUs of 8") {
		t.Fatalf("huge: %v, outcome %d: %q", states, res.outcome, deref(r.get(huge).StateReason))
	}
	// Within the pool's whole (two hosts of 8) but larger than each host,
	// even empty: it waits for a larger host, not for room (a probe's 4-GPU
	// instance beside two 2-GPU hosts was told the room was held).
	r.host(hosted)
	small := r.sized(hosted, 8)
	r.run(small)
	if states, _ := r.run(huge); len(states) != 0 ||
		deref(r.get(huge).StateReason) != "waiting for capacity: no ready host holds 9 GPUs, 4 vCPUs and 16 GiB even when empty; it waits until a large enough host is ready" {
		t.Fatalf("huge beside two hosts of 8: %v: %q", states, deref(r.get(huge).StateReason))
	}
	// One a host holds when empty waits for the room.
	fill := r.sized(hosted, 8)
	if states, _ := r.run(fill); len(states) == 0 || states[0] != Provisioning {
		t.Fatalf("8 GPUs on the second host: %v: %q", states, deref(r.get(fill).StateReason))
	}
	eight := r.sized(hosted, 8)
	if states, _ := r.run(eight); len(states) != 0 || deref(r.get(eight).StateReason) != roomReason {
		t.Fatalf("8 GPUs beside two full hosts: %v: %q", states, deref(r.get(eight).StateReason))
	}
}
