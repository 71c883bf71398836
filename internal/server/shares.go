package server

import (
	"context"
	"sync"
)

// shares bounds the GraphQL executions one credential runs at once to
// half of the replica's slots (Config.GraphQLConcurrency): one caller's
// parallel heavy queries, each within every bound and its rate, took every
// slot, and every other caller's queries queued behind them (a helper's
// probe: another client's 5 ms request took 1–1.5 s). Past its share a
// credential's operation waits for one of its own to end, up to its
// deadline, without holding a slot another credential could use.
type shares struct {
	mu    sync.Mutex
	limit int
	held  map[string]int
	freed chan struct{} // closed and replaced whenever a share is released
}

func newShares(slots int) *shares {
	return &shares{limit: max(1, slots/2), held: map[string]int{}, freed: make(chan struct{})}
}

// acquire takes one of key's shares, waiting until one is free or ctx
// ends (false).
func (s *shares) acquire(ctx context.Context, key string) bool {
	for {
		s.mu.Lock()
		if s.held[key] < s.limit {
			s.held[key]++
			s.mu.Unlock()
			return true
		}
		freed := s.freed
		s.mu.Unlock()
		select {
		case <-freed:
		case <-ctx.Done():
			return false
		}
	}
}

func (s *shares) release(key string) {
	s.mu.Lock()
	if s.held[key]--; s.held[key] <= 0 {
		delete(s.held, key)
	}
	close(s.freed)
	s.freed = make(chan struct{})
	s.mu.Unlock()
}
