// Package storm runs a stream of calls without pause, as a busy or hostile
// client makes them, while a test makes the call that the stream must not
// keep waiting (a revocation, an owner's change).
package storm

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Start runs call(i, j) in n goroutines (i the goroutine, j its count),
// each in a loop, and returns once at least min calls have ended. stop
// ends the loops and waits for them; it runs at the test's end too, and
// may be called more than once.
func Start(t testing.TB, n, min int, call func(i, j int)) (stop func()) {
	t.Helper()
	var done atomic.Bool
	var made atomic.Int64
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; !done.Load(); j++ {
				call(i, j)
				made.Add(1)
			}
		}()
	}
	stop = func() { done.Store(true); wg.Wait() }
	t.Cleanup(stop)
	for deadline := time.Now().Add(30 * time.Second); made.Load() < int64(min); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			stop()
			t.Fatalf("storm: %d of %d calls in 30 s", made.Load(), min)
		}
	}
	return stop
}
