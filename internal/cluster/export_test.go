package cluster

import "context"

// Die stops renewing without giving the lease up, as a killed replica does.
func (m *Maintainer) Die() {
	m.mu.Lock()
	m.heldUntil = m.heldUntil.Add(-m.TTL * 100)
	m.mu.Unlock()
}

// Renew is one renewal round (tests drive dead replicas by hand).
func (m *Maintainer) Renew(ctx context.Context) { m.renew(ctx) }
