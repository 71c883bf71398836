// Package wait is how tests wait for something to happen: they check the
// condition until it holds, never sleep for a guessed time.
package wait

import (
	"testing"
	"time"
)

// Interval is how often Eventually checks its condition.
const Interval = 10 * time.Millisecond

// Eventually calls check at once and then every Interval until it returns
// nil. check's error says what is not so yet ("2 of 3 instances running");
// when check still fails after timeout the test fails with that last
// error, prefixed by how long it waited.
//
// check runs on the caller's goroutine and may itself fail the test.
func Eventually(t testing.TB, timeout time.Duration, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(Interval)
	defer tick.Stop()
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still not so after %s: %v", timeout, err)
			return
		}
		<-tick.C
	}
}
