// Package cluster runs the work that runs once per cluster, not once per
// replica: the periodic duties (the reconciler's sweep, the rescue of dead
// replicas' jobs, pruning) run on the replica that holds the maintenance
// lease, a row of cluster_leases that its holder renews before it expires.
// A replica that dies stops renewing and another takes the lease over once
// it expires (TTL); one that shuts down gives it up at once.
//
// A lease in a table rather than a session advisory lock: it needs no
// connection held open per replica, and it works the same on a
// distributed PostgreSQL, where advisory locks are per node. River's own
// maintenance (its rescuer, periodic job enqueuer, job cleaner) runs on
// River's elected leader, which is the same idea in River's table.
package cluster

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/bettercompute/computed/internal/safe"
	"github.com/bettercompute/computed/internal/store"
)

// Maintainer holds, or waits for, one lease and runs the duties added to
// it while it holds it.
type Maintainer struct {
	db     *store.DB
	name   string
	holder string
	log    *slog.Logger
	// TTL is how long a lease lasts unrenewed (default 3 s); it is renewed
	// every TTL/3.
	TTL time.Duration
	// Eligible, when set, says whether this replica may hold the lease
	// now: while it says no, the lease is neither taken nor renewed, and
	// given up when held.
	Eligible func() bool

	mu        sync.Mutex
	duties    map[int]*duty
	nextID    int
	heldUntil time.Time // local clock: the lease is ours until then
	elsewhere time.Time // local clock: another replica held it at our last renewal, and may until then
	runs      map[string]int
}

type duty struct {
	name  string
	every time.Duration
	fn    func(context.Context) error
	last  time.Time
}

// New makes a maintainer of the lease name for this replica (holder: a
// name unique in the cluster, such as the replica's).
func New(db *store.DB, name, holder string, log *slog.Logger) *Maintainer {
	if log == nil {
		log = slog.Default()
	}
	return &Maintainer{db: db, name: name, holder: holder, log: log, TTL: 3 * time.Second,
		duties: map[int]*duty{}, runs: map[string]int{}}
}

// Add runs fn every interval while this replica holds the lease; remove
// stops it.
func (m *Maintainer) Add(name string, every time.Duration, fn func(context.Context) error) (remove func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	id := m.nextID
	m.nextID++
	m.duties[id] = &duty{name: name, every: every, fn: fn}
	return func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		delete(m.duties, id)
	}
}

// Holding says this replica holds the lease now.
func (m *Maintainer) Holding() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return time.Now().Before(m.heldUntil)
}

// HeldElsewhere says another replica held the lease at this replica's
// last renewal, and its term may not have run out.
func (m *Maintainer) HeldElsewhere() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return time.Now().Before(m.elsewhere)
}

// Runs is how many times this replica ran the duty called name.
func (m *Maintainer) Runs(name string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.runs[name]
}

// Run renews or takes the lease and runs the due duties until ctx ends,
// then gives the lease up (so another replica takes over at once).
func (m *Maintainer) Run(ctx context.Context) {
	renew := time.NewTicker(m.TTL / 3)
	defer renew.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	m.renew(ctx)
	done := make(chan struct{})
	safe.Go(ctx, m.log, "maintenance duties", func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				m.runDue(ctx)
			}
		}
	})
	for {
		select {
		case <-ctx.Done():
			<-done
			m.release()
			return
		case <-renew.C:
			m.renew(ctx)
		}
	}
}

// RenewNow renews (or takes) the lease at once rather than at the next
// tick of Run: when the replica has just become Eligible.
func (m *Maintainer) RenewNow(ctx context.Context) { m.renew(ctx) }

// renew takes the lease if it is free or expired, or extends ours.
func (m *Maintainer) renew(ctx context.Context) {
	if m.Eligible != nil && !m.Eligible() {
		if m.Holding() {
			m.log.Info("giving the cluster lease up: not eligible", "lease", m.name, "holder", m.holder)
			m.release()
		}
		return
	}
	sent := time.Now()
	var holder string
	err := m.db.GetContext(ctx, &holder, `
		INSERT INTO cluster_leases (name, holder, expires_at) VALUES ($1, $2, now() + make_interval(secs => $3))
		ON CONFLICT (name) DO UPDATE SET holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at
		WHERE cluster_leases.holder = EXCLUDED.holder OR cluster_leases.expires_at < now()
		RETURNING holder`, m.name, m.holder, m.TTL.Seconds())
	m.mu.Lock()
	defer m.mu.Unlock()
	was := sent.Before(m.heldUntil)
	switch {
	case err == nil:
		// Ours until the database's expiry, measured from before we asked.
		m.heldUntil = sent.Add(m.TTL)
		m.elsewhere = time.Time{}
		if !was {
			m.log.Info("took the cluster lease", "lease", m.name, "holder", m.holder)
		}
	case errors.Is(err, sql.ErrNoRows):
		m.heldUntil = time.Time{}
		m.elsewhere = sent.Add(m.TTL)
	default:
		// Unknown: ours only until what we held runs out.
		if ctx.Err() == nil {
			m.log.Warn("cluster lease renewal failed", "lease", m.name, "err", err)
		}
	}
}

func (m *Maintainer) runDue(ctx context.Context) {
	now := time.Now()
	m.mu.Lock()
	if !now.Before(m.heldUntil) {
		m.mu.Unlock()
		return
	}
	var due []*duty
	for _, d := range m.duties {
		if now.Sub(d.last) >= d.every {
			d.last = now
			due = append(due, d)
		}
	}
	m.mu.Unlock()
	for _, d := range due {
		if !m.Holding() {
			return
		}
		err := d.fn(ctx)
		m.mu.Lock()
		m.runs[d.name]++
		m.mu.Unlock()
		if err != nil && ctx.Err() == nil {
			m.log.Warn("cluster duty failed", "duty", d.name, "err", err)
		}
	}
}

// release gives the lease up if this replica holds it.
func (m *Maintainer) release() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, _ = m.db.ExecContext(ctx, `DELETE FROM cluster_leases WHERE name = $1 AND holder = $2`, m.name, m.holder)
	m.mu.Lock()
	m.heldUntil = time.Time{}
	m.mu.Unlock()
}
