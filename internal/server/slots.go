package server

import (
	"context"
	"sync"
)

// slots admits GraphQL queries and mutations to execution: at most total
// at once on the replica (Config.GraphQLConcurrency), and fairly among
// credentials: a credential past its share (half the slots, at least one)
// takes a free slot only while no other credential waits for one. One
// caller's parallel heavy queries, each within every bound and its rate,
// took every slot, and every other caller's queries queued behind them (a
// helper's probe: another client's 5 ms request took 1–1.5 s); a single
// busy caller still uses every slot when nobody else wants one.
type slots struct {
	mu      sync.Mutex
	total   int
	share   int
	used    int
	held    map[string]int // slots in use by credential
	waiting map[string]int // operations waiting, by credential
	waiters int
	freed   chan struct{} // closed and replaced when a slot is freed or a waiter leaves
}

func newSlots(total int) *slots {
	return &slots{total: total, share: max(1, total/2), held: map[string]int{}, waiting: map[string]int{}, freed: make(chan struct{})}
}

// acquire takes a slot for key, waiting until one is its to take or ctx
// ends (false).
func (s *slots) acquire(ctx context.Context, key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	queued := false
	for {
		if s.used < s.total && (s.held[key] < s.share || s.waiters-s.waiting[key] == 0) {
			if queued {
				s.unqueue(key)
			}
			s.used++
			s.held[key]++
			return true
		}
		if !queued {
			queued = true
			s.waiting[key]++
			s.waiters++
		}
		freed := s.freed
		s.mu.Unlock()
		select {
		case <-freed:
			s.mu.Lock()
		case <-ctx.Done():
			s.mu.Lock()
			s.unqueue(key)
			s.wake() // a credential over its share may take the slot it was kept from
			return false
		}
	}
}

func (s *slots) unqueue(key string) {
	s.waiters--
	if s.waiting[key]--; s.waiting[key] <= 0 {
		delete(s.waiting, key)
	}
}

func (s *slots) release(key string) {
	s.mu.Lock()
	s.used--
	if s.held[key]--; s.held[key] <= 0 {
		delete(s.held, key)
	}
	s.wake()
	s.mu.Unlock()
}

// wake tells the waiters, if any, to look again (under mu).
func (s *slots) wake() {
	if s.waiters == 0 {
		return
	}
	close(s.freed)
	s.freed = make(chan struct{})
}

// WaitingOperations is how many GraphQL queries and mutations wait for an
// execution slot on this replica now.
func (s *Server) WaitingOperations() int {
	s.execSlots.mu.Lock()
	defer s.execSlots.mu.Unlock()
	return s.execSlots.waiters
}
