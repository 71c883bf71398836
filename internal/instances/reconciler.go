package instances

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/bettercompute/computed/internal/audit"
	"github.com/bettercompute/computed/internal/authz"
	"github.com/bettercompute/computed/internal/instances/provider"
	"github.com/bettercompute/computed/internal/reqctx"
	"github.com/bettercompute/computed/internal/store"
)

// Kind is the reconciler's river job kind; Queue its queue (river's queue
// names take no dots).
const (
	Kind  = "vps.instances"
	Queue = "vps_instances"
)

// reconcileArgs is one instance's reconciliation job; at most one is
// queued or running per instance (unique by args in every state but the
// finished ones).
type reconcileArgs struct {
	InstanceID string `json:"instanceId" river:"unique"`
}

func (reconcileArgs) Kind() string { return Kind }

func (reconcileArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: Queue, MaxAttempts: 20, UniqueOpts: river.UniqueOpts{ByArgs: true, ByState: []rivertype.JobState{
		rivertype.JobStateAvailable, rivertype.JobStatePending, rivertype.JobStateRunning,
		rivertype.JobStateScheduled, rivertype.JobStateRetryable,
	}}}
}

// systemPrincipal makes the reconciler's changes; they are audited like any
// mutation.
var systemPrincipal = &reqctx.Principal{ID: "system:vps.instances", Kind: "system", Name: "vps.instances reconciler"}

// Policy is what the reconciler reads from a pool's policy: per-state
// timeouts (seconds), the tries of one step, and the time slices per GPU of
// a time-sliced pool.
type Policy struct {
	Timeouts map[string]int `json:"timeouts"`
	MaxTries int            `json:"maxTries"`
	Slices   int            `json:"timeSlices"`
}

// Default per-state timeouts and tries.
var (
	DefaultTimeouts = map[string]time.Duration{
		Provisioning: 10 * time.Minute, Stopping: 5 * time.Minute, Rebooting: 5 * time.Minute, Deleting: 10 * time.Minute,
	}
	DefaultMaxTries = 5
)

func parsePolicy(raw string) Policy {
	var p Policy
	_ = json.Unmarshal([]byte(raw), &p) // a policy that does not decode uses the defaults
	if p.MaxTries <= 0 {
		p.MaxTries = DefaultMaxTries
	}
	if p.Slices <= 0 {
		p.Slices = DefaultTime
	}
	return p
}

func (p Policy) timeout(state string) time.Duration {
	if s, ok := p.Timeouts[state]; ok && s > 0 {
		return time.Duration(s) * time.Second
	}
	return DefaultTimeouts[state]
}

// outcome is what one step did.
type outcome int

const (
	done     outcome = iota // converged; the job is completed
	progress                // something changed; take the next step now
	wait                    // nothing to do until time passes
)

// stepResult is a step's outcome and, for wait, how long.
type stepResult struct {
	outcome outcome
	after   time.Duration
}

// reconcileWorker works reconcile jobs.
type reconcileWorker struct {
	river.WorkerDefaults[reconcileArgs]
	s *Service
}

// Timeout bounds one job run (several steps); a run past it is retried.
func (w *reconcileWorker) Timeout(*river.Job[reconcileArgs]) time.Duration { return 30 * time.Second }

// Work takes steps until the instance converges (the job completes) or has
// to wait (the job snoozes).
func (w *reconcileWorker) Work(ctx context.Context, job *river.Job[reconcileArgs]) error {
	ctx = reqctx.WithPrincipal(ctx, systemPrincipal)
	ctx = reqctx.WithRequestID(ctx, fmt.Sprintf("job-%d", job.ID))
	for n := 0; n < 20; n++ {
		r, err := w.s.step(ctx, job)
		if err != nil {
			if store.Unreachable(err) {
				return err
			}
			if errors.Is(ctx.Err(), context.Canceled) {
				// River cancelled the run (a replica stopping, after its
				// grace period): the step rolled back, and the job runs
				// again here or on another replica. Every deploy does it;
				// it is not a failure. (A run past its timeout is one.)
				w.s.log.InfoContext(ctx, "reconcile step interrupted: the run was cancelled; it runs again", "instanceId", job.Args.InstanceID, "attempt", job.Attempt)
				return err
			}
			w.s.log.WarnContext(ctx, "reconcile step failed", "instanceId", job.Args.InstanceID, "attempt", job.Attempt, "err", err)
			return err
		}
		switch r.outcome {
		case done:
			return nil
		case wait:
			return river.JobSnooze(r.after)
		}
	}
	return river.JobSnooze(0)
}

// step takes one step for the job's instance in one transaction that holds
// the instance's row lock (one replica works an instance at a time; a
// replica killed mid-step rolls back and the next attempt starts over).
func (s *Service) step(ctx context.Context, job *river.Job[reconcileArgs]) (stepResult, error) {
	var res stepResult
	err := s.db.Tx(ctx, func(tx *sqlx.Tx) error {
		var err error
		res, err = s.stepTx(ctx, tx, job.Args.InstanceID, job)
		return err
	})
	return res, err
}

func (s *Service) stepTx(ctx context.Context, tx *sqlx.Tx, instanceID string, job *river.Job[reconcileArgs]) (stepResult, error) {
	complete := func() (stepResult, error) {
		if job == nil {
			return stepResult{outcome: done}, nil
		}
		_, err := river.JobCompleteTx[*riverDriver](ctx, tx.Tx, job)
		return stepResult{outcome: done}, err
	}
	i, err := one(ctx, tx, `SELECT `+cols+` FROM instances WHERE instance_id = $1 FOR UPDATE`, instanceID)
	if errors.Is(err, sql.ErrNoRows) {
		return complete()
	}
	if err != nil {
		return stepResult{}, store.Wrap(err)
	}
	var p poolRow
	if err := tx.GetContext(ctx, &p, `SELECT `+poolCols+` FROM pools p LEFT JOIN pool_offers o ON false WHERE p.pool_id = $1`, i.PoolID); err != nil {
		return stepResult{}, store.Wrap(err)
	}
	pol := parsePolicy(p.Policy)
	var res stepResult
	if p.Kind == "vps-hosted" {
		res, err = s.stepHosted(ctx, tx, i, &p, pol)
	} else if Converged(i) {
		res = stepResult{outcome: done}
	} else {
		res, err = s.stepProvider(ctx, tx, i, &p, pol)
	}
	if err != nil || res.outcome != done {
		return res, err
	}
	// Converged: the job completes in the transaction that saw it so,
	// under the instance's lock; a desired-state change waits for the lock
	// and then queues a new job.
	return complete()
}

// move makes one state move: the transition table decides, the row and its
// event are written in the caller's transaction, and the move is audited.
// Nothing else writes instances.state.
func move(ctx context.Context, q store.Q, i *Instance, to string, reason *string) (*Instance, error) {
	if !CanMove(i.State, to) {
		return nil, fmt.Errorf("instances: %s cannot move from %s to %s", i.InstanceID, i.State, to)
	}
	// A boot or reboot ends the reboots asked for before it began (their
	// generation is taken as it moves to provisioning or rebooting): one
	// asked for while it runs is done after it.
	n, err := one(ctx, q, `UPDATE instances SET state = $2, state_reason = $3, state_since = clock_timestamp(), step_tries = 0,
			step_requested = false, deleted_at = CASE WHEN $2 = 'deleted' THEN now() END,
			reboot_target = CASE WHEN $2 IN ('provisioning', 'rebooting') THEN reboot_generation ELSE reboot_target END,
			rebooted_generation = CASE WHEN state IN ('provisioning', 'rebooting') AND $2 = 'running'
				THEN greatest(rebooted_generation, reboot_target) ELSE rebooted_generation END,
			row_version = row_version + 1, updated_at = now()
		WHERE instance_id = $1 AND state = $4 RETURNING `+cols, i.InstanceID, to, reason, i.State)
	if err != nil {
		return nil, store.Wrap(err)
	}
	if to == Deleted {
		if _, err := q.ExecContext(ctx, `DELETE FROM instance_allocations WHERE instance_id = $1`, i.InstanceID); err != nil {
			return nil, store.Wrap(err)
		}
	}
	if err := writeEvent(ctx, q, n); err != nil {
		return nil, err
	}
	if p := reqctx.PrincipalFrom(ctx); p == systemPrincipal {
		if err := audit.Write(ctx, q, audit.Entry{TenantID: i.TenantID, Method: "vps.instances." + to, Outcome: audit.Success,
			Resource: audit.Resource{Type: authz.Instance, ID: i.InstanceID}}); err != nil {
			return nil, err
		}
	}
	*i = *n
	return n, nil
}

func ptr(s string) *string { return &s }

// note records why an instance waits (no event: it is no state move).
func note(ctx context.Context, q store.Q, i *Instance, reason string, tried bool) error {
	if i.StateReason != nil && *i.StateReason == reason && !tried {
		return nil
	}
	inc := 0
	if tried {
		inc = 1
	}
	_, err := q.ExecContext(ctx, `UPDATE instances SET state_reason = $2, step_tries = step_tries + $3 WHERE instance_id = $1`, i.InstanceID, reason, inc)
	i.StateReason = &reason
	i.StepTries += inc
	return store.Wrap(err)
}

// requested records that the provider took the step's call: a try, and
// the call made (a reboot is done once the VM runs again after it).
func requested(ctx context.Context, q store.Q, i *Instance) error {
	reason := i.State + ": requested from the provider"
	_, err := q.ExecContext(ctx, `UPDATE instances SET state_reason = $2, step_tries = step_tries + 1, step_requested = true WHERE instance_id = $1`,
		i.InstanceID, reason)
	i.StateReason, i.StepTries, i.StepRequested = &reason, i.StepTries+1, true
	return store.Wrap(err)
}

// backoff is the wait after the n-th failed try of a step.
func backoff(n int) time.Duration {
	d := time.Duration(1<<min(n, 6)) * 100 * time.Millisecond
	return min(d, 5*time.Second)
}

// timedOut fails an instance that stayed in a transitional state past its
// timeout.
func timedOut(ctx context.Context, q store.Q, i *Instance, pol Policy) (bool, error) {
	limit := pol.timeout(i.State)
	if limit <= 0 || time.Since(i.StateSince) < limit {
		return false, nil
	}
	_, err := move(ctx, q, i, Failed, ptr(fmt.Sprintf("timed out after %s in %s", limit, i.State)))
	return true, err
}

// poll is how often a waiting instance is looked at again.
const poll = 500 * time.Millisecond

// stepProvider is one step of an instance in a vps-provider pool: a
// settled instance starts its next move; a pending one is created when
// there is room; a transitional one follows what the provider observes, and
// its operation is requested (again) when it is not under way.
func (s *Service) stepProvider(ctx context.Context, q store.Q, i *Instance, p *poolRow, pol Policy) (stepResult, error) {
	drv, ok := s.providers[p.Provider.String]
	if !ok {
		return stepWithoutProvider(ctx, q, i, p)
	}
	pool := provider.Pool{PoolID: p.PoolID, Account: p.Account.String, Policy: json.RawMessage(p.Policy)}
	if i.State == Failed && !i.Placed && Next(i) == Provisioning {
		// Failed before it was ever placed (its pool archived or no longer
		// offered while it waited), it holds no room: started again, it
		// takes its room as a pending instance does before it provisions,
		// or waits, failed, saying why (it went to provisioning past a full
		// pool's capacity).
		if res, ok, err := s.takeRoom(ctx, q, i, p); !ok || err != nil {
			return res, err
		}
		if err := markPlaced(ctx, q, i); err != nil {
			return stepResult{}, err
		}
		return moved(move(ctx, q, i, Provisioning, nil))
	}
	if !Transitional(i.State) && i.State != Pending {
		next := Next(i)
		if next == "" {
			return stepResult{outcome: done}, nil
		}
		return moved(move(ctx, q, i, next, nil))
	}
	if n := Next(i); n == Deleted || n == Deleting {
		return moved(move(ctx, q, i, n, nil))
	}
	if i.State == Pending {
		return s.createVM(ctx, q, i, p, pol, drv, pool)
	}
	obs, err := drv.Describe(ctx, pool, i.InstanceID)
	if err != nil {
		return s.tried(ctx, q, i, pol, err)
	}
	if res, acted, err := observed(ctx, q, i, pol, obs); acted || err != nil {
		return res, err
	}
	return s.request(ctx, q, i, pol, drv, pool, obs)
}

// failPlacement fails an instance the pool no longer takes (unplaceable).
// A failed instance that was started again goes through provisioning, so
// that the start's try is seen to fail and the instance converges.
func failPlacement(ctx context.Context, q store.Q, i *Instance, reason string) (*Instance, error) {
	if i.State == Failed {
		if _, err := move(ctx, q, i, Provisioning, nil); err != nil {
			return nil, err
		}
	}
	return move(ctx, q, i, Failed, &reason)
}

// moved is the result of a state move: the next step is taken at once.
func moved(_ *Instance, err error) (stepResult, error) { return stepResult{outcome: progress}, err }

// noRoom is why an instance waits when the provider refuses for capacity.
const noRoom = "waiting for capacity: the provider has no room"

// waitForRoom is the result of an instance that waits for capacity,
// recording why.
func waitForRoom(ctx context.Context, q store.Q, i *Instance, reason string) (stepResult, error) {
	return stepResult{outcome: wait, after: 2 * poll}, note(ctx, q, i, reason, false)
}

// stepWithoutProvider is the step of an instance whose pool's provider this
// server does not have. A delete needs no provider call: deleting ends
// deleted (Next of deleting is the provider's to say, so it is not asked),
// and a pending or failed instance to be deleted takes its next move; a
// start after a failure is another try, which fails again at once.
// Anything else fails, saying why.
func stepWithoutProvider(ctx context.Context, q store.Q, i *Instance, p *poolRow) (stepResult, error) {
	n := Next(i)
	switch {
	case i.State == Deleting:
		return moved(move(ctx, q, i, Deleted, nil))
	case (i.State == Failed || i.State == Pending) && (n == Deleted || n == Deleting):
		return moved(move(ctx, q, i, n, nil))
	case i.State == Failed && n == Provisioning:
		return moved(move(ctx, q, i, Provisioning, nil))
	case i.State != Failed:
		return moved(move(ctx, q, i, Failed, ptr(fmt.Sprintf("the pool's provider %q is not available in this server", p.Provider.String))))
	}
	return stepResult{outcome: done}, nil
}

// vmOf is what the provider is asked to create for the instance.
func vmOf(i *Instance) provider.VM {
	return provider.VM{ID: i.InstanceID, Name: i.Name, Size: provider.Size{GPUs: i.GPUs, VCPUs: i.VCPUs, MemoryGiB: i.MemoryGiB}, Image: deref(i.Image)}
}

// createVM creates a pending instance's VM when the pool has room for it
// (capacity held by other tenants' reservations is not ours) and moves it
// to provisioning; without room it waits, saying why.
func (s *Service) createVM(ctx context.Context, q store.Q, i *Instance, p *poolRow, pol Policy, drv provider.Provider, pool provider.Pool) (stepResult, error) {
	if res, ok, err := s.takeRoom(ctx, q, i, p); !ok || err != nil {
		return res, err
	}
	err := drv.Create(ctx, pool, vmOf(i))
	if errors.Is(err, provider.ErrNoCapacity) {
		return waitForRoom(ctx, q, i, noRoom)
	}
	if err != nil {
		return s.tried(ctx, q, i, pol, err)
	}
	return moved(move(ctx, q, i, Provisioning, nil))
}

// takeRoom decides whether a provider pool has room for the instance now
// (providerRoom): ok false with the step's result when the pool no longer
// takes it (it fails, saying why) or it waits for room.
func (s *Service) takeRoom(ctx context.Context, q store.Q, i *Instance, p *poolRow) (res stepResult, ok bool, err error) {
	ok, reason, err := s.providerRoom(ctx, q, i, p)
	if u := (unplaceable{}); errors.As(err, &u) {
		res, err = moved(failPlacement(ctx, q, i, u.reason))
		return res, false, err
	}
	if err != nil || ok {
		return stepResult{}, ok, err
	}
	res, err = waitForRoom(ctx, q, i, reason)
	return res, false, err
}

// markPlaced records that the instance holds room from now on
// (instances.placed, migration 00026).
func markPlaced(ctx context.Context, q store.Q, i *Instance) error {
	_, err := q.ExecContext(ctx, `UPDATE instances SET placed = true WHERE instance_id = $1`, i.InstanceID)
	i.Placed = true
	return store.Wrap(err)
}

// completes is the observed state that completes each transitional state.
var completes = map[string]string{Provisioning: Running, Stopping: Stopped, Rebooting: Running, Deleting: Deleted}

// observed acts on what the provider observes of a transitional instance: a
// failed VM fails it; the observed state that completes the current one
// moves it there (a reboot only once the provider took its call: before,
// the VM still runs from before it); an operation under way is waited for
// until its timeout, and so is another operation of the VM's (a stop that
// timed out goes on at the provider: the VM is asked for this step once it
// has ended; a delete does not wait). acted is false when the operation is
// not under way: it is to be requested.
func observed(ctx context.Context, q store.Q, i *Instance, pol Policy, obs provider.Observation) (res stepResult, acted bool, err error) {
	switch {
	case obs.State == provider.Failed:
		res, err = moved(move(ctx, q, i, Failed, ptr("the provider reports the VM failed: "+obs.Reason)))
		return res, true, err
	case obs.State == completes[i.State] && (i.State != Rebooting || i.StepRequested):
		res, err = moved(move(ctx, q, i, completes[i.State], nil))
		return res, true, err
	case obs.State == i.State && i.StepTries > 0, i.State == Provisioning && obs.State == provider.Provisioning:
		if t, err := timedOut(ctx, q, i, pol); t || err != nil {
			return stepResult{outcome: progress}, true, err
		}
		return stepResult{outcome: wait, after: poll}, true, nil
	case Transitional(obs.State) && i.State != Deleting: // the provider's states of an operation under way are the instance's
		if t, err := timedOut(ctx, q, i, pol); t || err != nil {
			return stepResult{outcome: progress}, true, err
		}
		return stepResult{outcome: wait, after: poll}, true, note(ctx, q, i, "waiting for the provider's VM to finish "+obs.State, false)
	}
	return stepResult{}, false, nil
}

// request starts the operation of a transitional instance (again), unless
// it has timed out or used up its tries; a refusal for capacity waits, a
// failed call counts a try (tried).
func (s *Service) request(ctx context.Context, q store.Q, i *Instance, pol Policy, drv provider.Provider, pool provider.Pool, obs provider.Observation) (stepResult, error) {
	if t, err := timedOut(ctx, q, i, pol); t || err != nil {
		return stepResult{outcome: progress}, err
	}
	if i.StepTries >= pol.MaxTries {
		return moved(move(ctx, q, i, Failed, ptr(fmt.Sprintf("gave up %s after %d tries: %s", i.State, i.StepTries, deref(i.StateReason)))))
	}
	err := call(ctx, drv, pool, i, obs)
	if errors.Is(err, provider.ErrNoCapacity) {
		if t, err := timedOut(ctx, q, i, pol); t || err != nil {
			return stepResult{outcome: progress}, err
		}
		return waitForRoom(ctx, q, i, noRoom)
	}
	if err != nil {
		return s.tried(ctx, q, i, pol, err)
	}
	if err := requested(ctx, q, i); err != nil {
		return stepResult{}, err
	}
	return stepResult{outcome: progress}, nil
}

// call is the provider call that starts the operation of the instance's
// transitional state: a provisioning instance whose VM is stopped is
// started, else created (a repeated create is the same request).
func call(ctx context.Context, drv provider.Provider, pool provider.Pool, i *Instance, obs provider.Observation) error {
	switch i.State {
	case Provisioning:
		if obs.State == provider.Stopped {
			return drv.Start(ctx, pool, i.InstanceID)
		}
		return drv.Create(ctx, pool, vmOf(i))
	case Stopping:
		return drv.Stop(ctx, pool, i.InstanceID)
	case Rebooting:
		return drv.Reboot(ctx, pool, i.InstanceID)
	case Deleting:
		return drv.Delete(ctx, pool, i.InstanceID)
	}
	return nil
}

// tried records a failed provider call: a permanent error fails the
// instance, a transient one counts a try and waits with backoff.
func (s *Service) tried(ctx context.Context, q store.Q, i *Instance, pol Policy, err error) (stepResult, error) {
	var perm *provider.Permanent
	if errors.As(err, &perm) || i.StepTries+1 >= pol.MaxTries {
		if i.State == Pending && perm == nil {
			// Its create may have made a VM whose answer was lost: it
			// holds its room as a placed one does, until it is deleted.
			if err := markPlaced(ctx, q, i); err != nil {
				return stepResult{}, err
			}
		}
		_, merr := move(ctx, q, i, Failed, ptr(fmt.Sprintf("%s failed after %d tries: %v", i.State, i.StepTries+1, err)))
		return stepResult{outcome: progress}, merr
	}
	if store.Unreachable(err) {
		return stepResult{}, err
	}
	return stepResult{outcome: wait, after: backoff(i.StepTries + 1)}, note(ctx, q, i, "provider call failed, retrying: "+err.Error(), true)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// --- hosted pools -------------------------------------------------------

// stepHosted is one step of an instance in a vps-hosted pool: the control
// plane places it and sets the state its host daemon acts on; the daemon's
// reports (instances.report) make the moves out of transitional states.
func (s *Service) stepHosted(ctx context.Context, q store.Q, i *Instance, p *poolRow, pol Policy) (stepResult, error) {
	host := ""
	if i.Host != nil {
		var state string
		err := q.GetContext(ctx, &state, `SELECT state FROM nodes WHERE node_id = $1`, *i.Host)
		if err != nil {
			return stepResult{}, store.Wrap(err)
		}
		host = state
	}
	if host == "removed" && i.State != Failed && i.State != Pending && i.State != Deleted {
		return hostRemoved(ctx, q, i)
	}
	if Converged(i) {
		return stepResult{outcome: done}, nil
	}
	next := Next(i)
	switch {
	// A failed instance that is started again is placed anew unless its
	// host is ready: a cordoned host takes no new work and a removed one is
	// gone. (A stopped instance starts where its VM is, cordoned or not.)
	case i.State == Pending && next == Provisioning, i.State == Failed && next == Provisioning && host != "ready":
		placed, reason, err := s.placeHosted(ctx, q, i, p)
		if u := (unplaceable{}); errors.As(err, &u) {
			return moved(failPlacement(ctx, q, i, u.reason))
		}
		if err != nil {
			return stepResult{}, err
		}
		if !placed {
			return stepResult{outcome: wait, after: 2 * poll}, note(ctx, q, i, reason, false)
		}
		_, err = move(ctx, q, i, Provisioning, nil)
		return stepResult{outcome: progress}, err
	case i.State == Deleting && i.Host == nil:
		_, err := move(ctx, q, i, Deleted, nil)
		return stepResult{outcome: progress}, err
	case next != "":
		_, err := move(ctx, q, i, next, nil)
		return stepResult{outcome: progress}, err
	case Transitional(i.State):
		if t, err := timedOut(ctx, q, i, pol); t || err != nil {
			return stepResult{outcome: progress}, err
		}
		return stepResult{outcome: wait, after: 2 * poll}, nil
	}
	return stepResult{outcome: done}, nil
}

// hostRemoved is the step of a live instance whose host was removed: the
// VM went with its host, so its devices are freed and it fails, naming the
// host (one being deleted is deleted).
func hostRemoved(ctx context.Context, q store.Q, i *Instance) (stepResult, error) {
	if _, err := q.ExecContext(ctx, `DELETE FROM instance_allocations WHERE instance_id = $1`, i.InstanceID); err != nil {
		return stepResult{}, store.Wrap(err)
	}
	if i.State == Deleting {
		return moved(move(ctx, q, i, Deleted, ptr("host node removed")))
	}
	return moved(move(ctx, q, i, Failed, ptr(hostRemovedReason(i))))
}

// --- the job queue ------------------------------------------------------

// Enqueue queues the instance's reconciliation in the caller's transaction
// (so it exists exactly when the change that needs it commits). When a job
// is already waiting (snoozed or backing off), it is made available now.
func (s *Service) Enqueue(ctx context.Context, q store.Q, instanceID string) error {
	if s == nil || s.client == nil {
		return errors.New("instances: the reconciler's queue is not configured")
	}
	tx, err := txOf(q)
	if err != nil {
		return err
	}
	res, err := s.client.InsertTx(ctx, tx, reconcileArgs{InstanceID: instanceID}, nil)
	if err != nil {
		return store.Wrap(err)
	}
	if res.UniqueSkippedAsDuplicate && res.Job != nil && (res.Job.State == rivertype.JobStateScheduled || res.Job.State == rivertype.JobStateRetryable) {
		if _, err := s.client.JobRetryTx(ctx, tx, res.Job.ID); err != nil {
			return store.Wrap(err)
		}
	}
	return nil
}

// hostRemovedReason is the state reason of an instance whose host was removed:
// naming the host, except to the tenants a pool is offered to (the owner's
// nodes are not shown to them).
func hostRemovedReason(i *Instance) string {
	if i.Offered {
		return "its host node was removed"
	}
	return fmt.Sprintf("host node %s was removed", *i.Host)
}
