package cluster

// Die stops renewing without giving the lease up, as a killed replica does.
func (m *Maintainer) Die() {
	m.mu.Lock()
	m.heldUntil = m.heldUntil.Add(-m.TTL * 100)
	m.mu.Unlock()
}
