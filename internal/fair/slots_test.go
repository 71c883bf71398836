package fair

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Many goroutines of two credentials: together they never hold more than
// the slots, each holds at most its share while the other waits, every
// acquire is served, and one whose context ends while it waits gives up.
// A single key with nobody else waiting uses every slot but one.
func TestSlotsUnderConcurrency(t *testing.T) {
	s := New(4) // a share of 2
	var running, total atomic.Int32
	var most atomic.Int32
	var wg sync.WaitGroup
	for i := range 400 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := []string{"a", "b"}[i%2]
			if !s.Acquire(context.Background(), key) {
				t.Error("acquire without a deadline failed")
				return
			}
			if n := total.Add(1); n > 4 {
				t.Errorf("%d slots in use of 4", n)
			}
			if key == "a" {
				n := running.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				defer running.Add(-1)
			}
			time.Sleep(time.Duration(i%3) * 100 * time.Microsecond)
			total.Add(-1)
			s.Release(key)
		}()
	}
	wg.Wait()
	if s.used != 0 || len(s.held) != 0 || s.waiters != 0 || len(s.waiting) != 0 {
		t.Fatalf("left: used %d, held %v, waiters %d %v", s.used, s.held, s.waiters, s.waiting)
	}

	// alone, a key takes every slot but one: nothing preempts its
	// operations, so the last stays free for whoever comes next
	for range 3 {
		if !s.Acquire(context.Background(), "a") {
			t.Fatal("a alone")
		}
	}
	if within(s, "a", 20*time.Millisecond) {
		t.Fatal("a took the last slot")
	}
	if !s.Acquire(context.Background(), "b") {
		t.Fatal("b, the last slot")
	}
	// full: c waits, and gives up at its deadline
	if within(s, "c", 20*time.Millisecond) {
		t.Fatal("a fifth slot")
	}
	// while c waits, a slot a frees goes to c, not to a (over its share)
	got := make(chan string, 2)
	go func() { s.Acquire(context.Background(), "c"); got <- "c" }()
	for s.waitersOf("c") == 0 {
		time.Sleep(time.Millisecond)
	}
	go func() { s.Acquire(context.Background(), "a"); got <- "a" }()
	for s.waitersOf("a") == 0 {
		time.Sleep(time.Millisecond)
	}
	s.Release("a")
	if first := <-got; first != "c" {
		t.Fatalf("the freed slot went to %s", first)
	}
}

func (s *Slots) waitersOf(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.waiting[key]
}

// Waiters are served in their order of arrival, and a newcomer does not take
// a slot ahead of them: with every waiter woken to race for a freed slot,
// one credential's 32 parallel fleet queries had a p50 of 0.9 s and a p99
// of 11 s in make loadtest (some lost every race).
func TestSlotsServeWaitersInOrder(t *testing.T) {
	s := New(1)
	if !s.Acquire(context.Background(), "a") {
		t.Fatal("the first slot")
	}
	order := make(chan int, 20)
	for i := range 20 {
		go func() {
			if s.Acquire(context.Background(), "a") {
				order <- i
			}
		}()
		for s.waitersOf("a") != i+1 { // queued before the next one starts
			time.Sleep(100 * time.Microsecond)
		}
	}
	for want := range 20 {
		s.Release("a")
		// a newcomer arriving as the slot is freed waits its turn
		late := make(chan bool, 1)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
		go func() { late <- s.Acquire(ctx, "a") }()
		if got := <-order; got != want {
			t.Fatalf("slot %d went to waiter %d", want, got)
		}
		if <-late {
			t.Fatal("a newcomer took a slot ahead of the waiters")
		}
		cancel()
	}
	s.Release("a")
	if s.used != 0 || s.waiters != 0 || len(s.queue) != 0 {
		t.Fatalf("left: used %d, waiters %d, queue %d", s.used, s.waiters, len(s.queue))
	}
}

// Two busy keys leave the last slot free as one does: nothing preempts
// their operations, so a newcomer that holds nothing takes it at once (two
// tenants holding half the slots each kept a third tenant's query waiting
// 2–9 s, a probe's).
func TestSlotsKeepTheLastForANewcomer(t *testing.T) {
	s := New(8)
	for _, key := range []string{"a", "c", "a", "c", "a", "c", "a"} {
		if !s.Acquire(context.Background(), key) {
			t.Fatalf("%s: a free slot", key)
		}
	}
	for _, key := range []string{"a", "c"} {
		if within(s, key, 20*time.Millisecond) {
			t.Fatalf("%s, holding slots already, took the last one", key)
		}
	}
	if !within(s, "b", time.Second) {
		t.Fatal("b, holding none, did not get the last slot")
	}
	if s.InUse() != 8 {
		t.Fatalf("%d in use", s.InUse())
	}
}

// within says whether key gets a slot of s within d.
func within(s *Slots, key string, d time.Duration) bool {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return s.Acquire(ctx, key)
}
