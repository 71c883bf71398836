package server

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Many goroutines of two credentials: neither ever holds more than its
// share at once, every acquire is served once shares are released, and
// one whose context ends while it waits gives up.
func TestSharesUnderConcurrency(t *testing.T) {
	s := newShares(4) // 2 each
	var running [2]atomic.Int32
	var most [2]atomic.Int32
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := i % 2
			key := []string{"a", "b"}[k]
			if !s.acquire(context.Background(), key) {
				t.Error("acquire without a deadline failed")
				return
			}
			n := running[k].Add(1)
			for {
				m := most[k].Load()
				if n <= m || most[k].CompareAndSwap(m, n) {
					break
				}
			}
			time.Sleep(time.Duration(i%3) * 100 * time.Microsecond)
			running[k].Add(-1)
			s.release(key)
		}()
	}
	wg.Wait()
	for k := range 2 {
		if m := most[k].Load(); m != 2 {
			t.Errorf("credential %d held %d at once, want its share of 2", k, m)
		}
	}
	if len(s.held) != 0 {
		t.Errorf("shares left held: %v", s.held)
	}
	// a waiter whose deadline passes gives up
	s.acquire(context.Background(), "c")
	s.acquire(context.Background(), "c")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if s.acquire(ctx, "c") {
		t.Fatal("a third share of c")
	}
}
