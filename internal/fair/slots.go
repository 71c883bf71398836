// Package fair shares a replica's scarce places (GraphQL execution slots,
// the requests' database statements) among credentials.
package fair

import (
	"context"
	"sync"
)

// Slots admits work to a place: at most total at once on the replica (the
// GraphQL slots: server.Config.GraphQLConcurrency; statements: the
// database pool), and fairly among keys (reqctx.ShareKey: a tenant's
// credentials share one): a key past its share (half the slots, at least
// one) takes a free slot only while no other key waits for one. One
// caller's parallel heavy queries, each within every bound and its rate,
// took every slot, and every other caller's queries queued behind them (a
// helper's probe: another client's 5 ms request took 1–1.5 s); a single
// busy caller still uses every slot but one when nobody else wants one.
//
// Waiters are served in their order of arrival, a freed slot handed to the
// first waiter that may take it: with every waiter woken to race for it,
// one credential's 32 parallel queries finished at a p50 of 0.9 s and a
// p99 of 11 s (make loadtest), some losing every race; and a newcomer
// never takes a slot ahead of those waiting.
type Slots struct {
	mu      sync.Mutex
	total   int
	share   int
	used    int
	held    map[string]int // slots in use by credential
	waiting map[string]int // operations waiting, by credential
	waiters int
	queue   []*slotWaiter // in order of arrival
}

type slotWaiter struct {
	key     string
	granted chan struct{} // closed when a slot is handed over
	got     bool
}

func New(total int) *Slots {
	return &Slots{total: total, share: max(1, total/2), held: map[string]int{}, waiting: map[string]int{}}
}

// Acquire takes a slot for key, waiting until one is handed to it or ctx
// ends (false).
func (s *Slots) Acquire(ctx context.Context, key string) bool {
	s.mu.Lock()
	if s.used < s.total && len(s.queue) == 0 && s.mayTake(key) {
		s.take(key)
		s.mu.Unlock()
		return true
	}
	w := &slotWaiter{key: key, granted: make(chan struct{})}
	s.queue = append(s.queue, w)
	s.waiting[key]++
	s.waiters++
	s.dispatch() // a slot may be free behind waiters that may not take it
	s.mu.Unlock()
	select {
	case <-w.granted:
		return true
	case <-ctx.Done():
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if w.got { // handed over as the context ended: pass it on
		s.free(key)
		return false
	}
	for i, q := range s.queue {
		if q == w {
			s.queue = append(s.queue[:i], s.queue[i+1:]...)
			break
		}
	}
	s.unqueue(key)
	s.dispatch() // a credential over its share may take the slot it was kept from
	return false
}

// mayTake says whether key may take a free slot (under mu): the last free
// slot goes only to a key that holds none. Nothing preempts a running
// operation, so callers holding every slot with operations that run to
// their deadline kept each newcomer waiting that long (a probe's: another
// tenant's 4 ms query waited 12–15 s behind one tenant, 2–9 s behind two
// that held half each); the last slot stays free for whoever comes next.
func (s *Slots) mayTake(key string) bool {
	return s.total-s.used >= 2 || s.held[key] == 0
}

// take counts a slot as key's (under mu).
func (s *Slots) take(key string) {
	s.used++
	s.held[key]++
}

func (s *Slots) unqueue(key string) {
	s.waiters--
	if s.waiting[key]--; s.waiting[key] <= 0 {
		delete(s.waiting, key)
	}
}

// Release gives key's slot back.
func (s *Slots) Release(key string) {
	s.mu.Lock()
	s.free(key)
	s.mu.Unlock()
}

// free gives key's slot back and hands the free slots on (under mu).
func (s *Slots) free(key string) {
	s.used--
	if s.held[key]--; s.held[key] <= 0 {
		delete(s.held, key)
	}
	s.dispatch()
}

// dispatch hands free slots to waiters (under mu): to the first whose
// credential holds less than its share, else, when every waiter's
// credential holds its share already, to the first that holds less than
// it may take one (mayTake: a busy caller alone uses every slot but one).
func (s *Slots) dispatch() {
	for s.used < s.total && len(s.queue) > 0 {
		pick := -1
		for i, w := range s.queue {
			if s.held[w.key] < s.share && s.mayTake(w.key) {
				pick = i
				break
			}
			if pick < 0 && s.mayTake(w.key) {
				pick = i
			}
		}
		if pick < 0 {
			return // every waiter's key holds all it may: the slot stays free
		}
		w := s.queue[pick]
		s.queue = append(s.queue[:pick], s.queue[pick+1:]...)
		s.unqueue(w.key)
		s.take(w.key)
		w.got = true
		close(w.granted)
	}
}

// InUse is how many slots are taken.
func (s *Slots) InUse() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.used
}

// Waiting is how many acquires wait for a slot now.
func (s *Slots) Waiting() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.waiters
}
