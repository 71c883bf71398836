// Package sim is a real in-process VPS provider: VMs are rows of sim_vms in
// the product's own database (so every replica sees the same simulated
// cloud), operations take the pool's configured latency, calls fail at the
// configured rate, and creates beyond the configured capacity are refused.
// It is the default provider of vps-provider pools, used by the embedded
// default and the tests.
//
// Pool policy (every key optional): capacity is the pool's (the control
// plane reads it too, for reservations); sim holds the simulation's own:
//
//	{"capacity": {"instances": 10, "gpus": 16}, "sim": {"latencyMs": 1500, "failureRate": 0.1}}
//
// latencyMs is either one number for every operation or an object with
// create, start, stop, reboot and delete.
package sim

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"

	"github.com/jmoiron/sqlx"

	"github.com/bettercompute/computed/internal/instances/provider"
	"github.com/bettercompute/computed/internal/store"
)

// Name is the driver's name in a pool's provider field.
const Name = "sim"

func init() {
	provider.Register(Name, func(d provider.Deps) (provider.Provider, error) {
		if d.DB == nil {
			return nil, errors.New("sim needs the database")
		}
		// The simulated cloud has connections of its own, as a real
		// provider's API client would: a reconcile step holds one of the
		// product's connections while it calls the provider.
		db, err := store.OpenWith(context.Background(), d.DB.URL, store.Options{MaxConns: max(1, d.MaxConns),
			Replica: d.DB.Replica, Role: "sim"})
		if err != nil {
			return nil, err
		}
		return &Sim{db: db}, nil
	})
}

// Sim is the driver.
type Sim struct{ db *store.DB }

// Close releases the simulation's connections.
func (s *Sim) Close() error { return s.db.Close() }

// Latency is per-operation latency in milliseconds.
type Latency struct {
	Create, Start, Stop, Reboot, Delete int
}

// Config is a pool's sim policy.
type Config struct {
	Latency     Latency
	FailureRate float64
	// Capacity bounds; 0 is unbounded.
	Instances, GPUs int
}

type policyDoc struct {
	Capacity struct {
		Instances int `json:"instances"`
		GPUs      int `json:"gpus"`
	} `json:"capacity"`
	Sim *struct {
		LatencyMs   json.RawMessage `json:"latencyMs"`
		FailureRate float64         `json:"failureRate"`
	} `json:"sim"`
}

// ParseConfig reads the sim keys of a pool policy.
func ParseConfig(policy json.RawMessage) (Config, error) {
	var c Config
	if len(policy) == 0 {
		return c, nil
	}
	var d policyDoc
	if err := json.Unmarshal(policy, &d); err != nil {
		return c, fmt.Errorf("sim policy: %w", err)
	}
	c.Instances, c.GPUs = d.Capacity.Instances, d.Capacity.GPUs
	if d.Sim == nil {
		return c, nil
	}
	s := d.Sim
	if s.FailureRate < 0 || s.FailureRate > 1 {
		return c, errors.New("sim policy: failureRate must be between 0 and 1")
	}
	c.FailureRate = s.FailureRate
	if len(s.LatencyMs) > 0 && string(s.LatencyMs) != "null" {
		var all int
		if err := json.Unmarshal(s.LatencyMs, &all); err == nil {
			c.Latency = Latency{all, all, all, all, all}
		} else {
			var per struct{ Create, Start, Stop, Reboot, Delete int }
			if err := json.Unmarshal(s.LatencyMs, &per); err != nil {
				return c, errors.New("sim policy: latencyMs must be a number or an object of numbers")
			}
			c.Latency = Latency(per)
		}
	}
	for _, v := range []int{c.Latency.Create, c.Latency.Start, c.Latency.Stop, c.Latency.Reboot, c.Latency.Delete, c.Instances, c.GPUs} {
		if v < 0 {
			return c, errors.New("sim policy: latencies and capacities must not be negative")
		}
	}
	return c, nil
}

// ErrInjected is the transient failure the failure rate injects.
var ErrInjected = errors.New("sim: injected provider failure")

func (s *Sim) config(pool provider.Pool) (Config, error) {
	c, err := ParseConfig(pool.Policy)
	if err != nil {
		return c, &provider.Permanent{Err: err}
	}
	if c.FailureRate > 0 && rand.Float64() < c.FailureRate {
		return c, ErrInjected
	}
	return c, nil
}

// resolved is a VM's state once its operation's latency has passed.
const resolved = `CASE WHEN ready_at <= now() THEN CASE state
	WHEN 'provisioning' THEN 'running' WHEN 'stopping' THEN 'stopped'
	WHEN 'rebooting' THEN 'running' WHEN 'deleting' THEN 'deleted' ELSE state END ELSE state END`

// gone says a VM (over sim_vms v) is deleted once its operation's latency
// has passed: resolved is 'deleted'.
const gone = `(v.state = 'deleted' OR (v.state = 'deleting' AND v.ready_at <= now()))`

// Create makes the VM (provisioning until the create latency passes). A
// repeated create of the same id is the same request while its VM exists;
// once that VM is deleted, a create makes it again (an instance whose
// delete step gave up while the delete went on, started again: the old
// row made the create a no-op, and the instance provisioned until it gave
// up).
func (s *Sim) Create(ctx context.Context, pool provider.Pool, vm provider.VM) error {
	c, err := s.config(pool)
	if err != nil {
		return err
	}
	insert := func(q store.Q) (bool, error) {
		res, err := q.ExecContext(ctx, `INSERT INTO sim_vms AS v (vm_id, pool_id, gpus, state, ready_at)
			VALUES ($1, $2, $3, 'provisioning', now() + $4 * interval '1 millisecond')
			ON CONFLICT (vm_id) DO UPDATE SET pool_id = EXCLUDED.pool_id, gpus = EXCLUDED.gpus, state = EXCLUDED.state,
				ready_at = EXCLUDED.ready_at, created_at = now(), updated_at = now()
			WHERE `+gone,
			vm.ID, pool.PoolID, vm.Size.GPUs, c.Latency.Create)
		if err != nil {
			return false, store.Wrap(err)
		}
		n, _ := res.RowsAffected()
		return n == 1, nil
	}
	if c.Instances == 0 && c.GPUs == 0 {
		_, err := insert(s.db)
		return err
	}
	// Bounded: count and insert under a per-pool lock, so the capacity is
	// exact however many replicas create at once.
	return s.db.Tx(ctx, func(tx *sqlx.Tx) error {
		if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtext('sim:' || $1))`, pool.PoolID); err != nil {
			return store.Wrap(err)
		}
		var exists bool
		if err := tx.GetContext(ctx, &exists, `SELECT EXISTS (SELECT 1 FROM sim_vms v WHERE vm_id = $1 AND NOT `+gone+`)`, vm.ID); err != nil {
			return store.Wrap(err)
		}
		if exists {
			return nil
		}
		var used struct {
			N    int `db:"n"`
			GPUs int `db:"gpus"`
		}
		if err := tx.GetContext(ctx, &used, `SELECT count(*) AS n, COALESCE(sum(gpus), 0) AS gpus FROM sim_vms
			WHERE pool_id = $1 AND state <> 'deleted' AND (`+resolved+`) <> 'deleted'`, pool.PoolID); err != nil {
			return store.Wrap(err)
		}
		if (c.Instances > 0 && used.N+1 > c.Instances) || (c.GPUs > 0 && used.GPUs+vm.Size.GPUs > c.GPUs) {
			return provider.ErrNoCapacity
		}
		_, err := insert(tx)
		return err
	})
}

// op moves a VM whose resolved state is one of from into state to, with
// the operation's latency; when it is already in one of done (resolved) the
// call is a repeat and succeeds.
func (s *Sim) op(ctx context.Context, pool provider.Pool, id, to string, ms int, from, done []string) error {
	res, err := s.db.ExecContext(ctx, `UPDATE sim_vms SET state = $2, ready_at = now() + $3 * interval '1 millisecond', updated_at = now()
		WHERE vm_id = $1 AND pool_id = $4 AND (`+resolved+`) = ANY($5)`, id, to, ms, pool.PoolID, from)
	if err != nil {
		return store.Wrap(err)
	}
	if n, _ := res.RowsAffected(); n == 1 {
		return nil
	}
	o, err := s.Describe(ctx, pool, id)
	if err != nil {
		return err
	}
	for _, d := range done {
		if o.State == d {
			return nil
		}
	}
	return &provider.Permanent{Err: fmt.Errorf("sim: vm %s is %s; cannot go %s", id, o.State, to)}
}

// Start boots a stopped VM.
func (s *Sim) Start(ctx context.Context, pool provider.Pool, id string) error {
	c, err := s.config(pool)
	if err != nil {
		return err
	}
	return s.op(ctx, pool, id, provider.Provisioning, c.Latency.Start, []string{provider.Stopped}, []string{provider.Provisioning, provider.Running})
}

// Stop shuts a running VM down.
func (s *Sim) Stop(ctx context.Context, pool provider.Pool, id string) error {
	c, err := s.config(pool)
	if err != nil {
		return err
	}
	return s.op(ctx, pool, id, provider.Stopping, c.Latency.Stop, []string{provider.Running}, []string{provider.Stopping, provider.Stopped})
}

// Reboot restarts a running VM.
func (s *Sim) Reboot(ctx context.Context, pool provider.Pool, id string) error {
	c, err := s.config(pool)
	if err != nil {
		return err
	}
	return s.op(ctx, pool, id, provider.Rebooting, c.Latency.Reboot, []string{provider.Running}, []string{provider.Rebooting})
}

// Delete removes a VM in any state; deleting a deleted or unknown VM
// succeeds.
func (s *Sim) Delete(ctx context.Context, pool provider.Pool, id string) error {
	c, err := s.config(pool)
	if err != nil {
		return err
	}
	return s.op(ctx, pool, id, provider.Deleting, c.Latency.Delete,
		[]string{provider.Provisioning, provider.Running, provider.Stopping, provider.Stopped, provider.Rebooting},
		[]string{provider.Deleting, provider.Deleted})
}

// Describe reports the VM's state, resolving a finished operation. A VM
// found deleted is forgotten, as a cloud forgets a deleted VM: it is
// reported deleted as an unknown one is, and sim_vms does not grow with
// every VM ever made.
func (s *Sim) Describe(ctx context.Context, pool provider.Pool, id string) (provider.Observation, error) {
	var state string
	err := s.db.GetContext(ctx, &state, `WITH forgot AS (
			DELETE FROM sim_vms v WHERE vm_id = $1 AND pool_id = $2 AND `+gone+` RETURNING 'deleted'::text AS state),
		resolved AS (
			UPDATE sim_vms v SET state = (`+resolved+`), updated_at = now()
			WHERE vm_id = $1 AND pool_id = $2 AND NOT `+gone+` RETURNING state)
		SELECT state FROM forgot UNION ALL SELECT state FROM resolved`, id, pool.PoolID)
	if errors.Is(err, sql.ErrNoRows) {
		return provider.Observation{State: provider.Deleted}, nil
	}
	if err != nil {
		return provider.Observation{}, store.Wrap(err)
	}
	return provider.Observation{State: state}, nil
}
