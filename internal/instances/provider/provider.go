// Package provider is how vps-provider pools create VMs: one Provider per
// driver name (a pool's `provider` field), registered by the driver's
// package in init. Adding a cloud or libvirt driver is one new file that
// implements Provider and calls Register.
//
// Every call is idempotent and asynchronous, like a cloud API: Create,
// Start, Stop, Reboot and Delete start an operation and return; Describe
// says what the provider observes. The reconciler calls them again after a
// crash, so a driver must treat a repeated call as the same request (the VM
// id is the idempotency key).
package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"

	"github.com/bettercompute/computed/internal/store"
)

// Observed states a provider reports.
const (
	Provisioning = "provisioning"
	Running      = "running"
	Stopping     = "stopping"
	Stopped      = "stopped"
	Rebooting    = "rebooting"
	Deleting     = "deleting"
	Deleted      = "deleted" // gone, or never created
	Failed       = "failed"
)

// Size is what a VM gets.
type Size struct {
	GPUs       int    `json:"gpus"`
	VCPUs      int    `json:"vcpus"`
	MemoryGiB  int    `json:"memoryGiB"`
	GPUProfile string `json:"gpuProfile,omitempty"`
}

// Pool is what a driver knows of the pool it acts in.
type Pool struct {
	PoolID  string
	Account string
	// Policy is the pool's policy object; drivers read their own keys.
	Policy json.RawMessage
}

// VM is one VM to create.
type VM struct {
	ID    string // the instance id: the idempotency key
	Name  string
	Size  Size
	Image string
}

// Observation is what Describe returns.
type Observation struct {
	State  string
	Reason string
}

// Provider is a VPS driver.
type Provider interface {
	// Create makes the VM and starts it; ErrNoCapacity when the provider has
	// no room now (the instance waits in pending).
	Create(ctx context.Context, pool Pool, vm VM) error
	Start(ctx context.Context, pool Pool, id string) error
	Stop(ctx context.Context, pool Pool, id string) error
	Reboot(ctx context.Context, pool Pool, id string) error
	Delete(ctx context.Context, pool Pool, id string) error
	Describe(ctx context.Context, pool Pool, id string) (Observation, error)
}

// ErrNoCapacity says the provider cannot create the VM now; it is not a
// failure of the step.
var ErrNoCapacity = errors.New("provider: no capacity")

// Permanent marks an error no retry can fix (a refused image, a bad
// account): the instance fails at once.
type Permanent struct{ Err error }

func (p *Permanent) Error() string { return p.Err.Error() }
func (p *Permanent) Unwrap() error { return p.Err }

// Deps is what a driver's factory gets.
type Deps struct {
	DB *store.DB
	// MaxConns bounds the database connections a driver opens of its own
	// (its share of the replica's COMPUTE_DB_MAX_CONNS); 0: it opens none.
	MaxConns int
}

// Factory builds a driver.
type Factory func(Deps) (Provider, error)

var (
	mu        sync.RWMutex
	factories = map[string]Factory{}
)

// Register installs a driver under a name; drivers call it from init.
func Register(name string, f Factory) {
	mu.Lock()
	defer mu.Unlock()
	if _, dup := factories[name]; dup {
		panic("provider: duplicate driver " + name)
	}
	factories[name] = f
}

// Names lists the registered drivers.
func Names() []string {
	mu.RLock()
	defer mu.RUnlock()
	out := make([]string, 0, len(factories))
	for n := range factories {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Open builds every registered driver.
func Open(d Deps) (map[string]Provider, error) {
	mu.RLock()
	defer mu.RUnlock()
	out := make(map[string]Provider, len(factories))
	for n, f := range factories {
		p, err := f(d)
		if err != nil {
			return nil, fmt.Errorf("provider %s: %w", n, err)
		}
		out[n] = p
	}
	return out, nil
}
