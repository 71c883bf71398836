package wait

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// recorder is a testing.TB that records Fatalf instead of ending the test.
type recorder struct {
	testing.TB
	msg string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
}

func TestEventuallyReturnsOnceTheConditionHolds(t *testing.T) {
	var n atomic.Int32
	go func() {
		for i := 0; i < 3; i++ {
			n.Add(1)
		}
	}()
	r := &recorder{TB: t}
	Eventually(r, 5*time.Second, func() error {
		if v := n.Load(); v != 3 {
			return fmt.Errorf("n is %d", v)
		}
		return nil
	})
	if r.msg != "" {
		t.Fatalf("failed: %s", r.msg)
	}
}

func TestEventuallyFailsWithTheLastError(t *testing.T) {
	calls := 0
	r := &recorder{TB: t}
	start := time.Now()
	Eventually(r, 50*time.Millisecond, func() error { calls++; return fmt.Errorf("call %d", calls) })
	if want := fmt.Sprintf("still not so after 50ms: call %d", calls); r.msg != want || calls < 3 {
		t.Fatalf("message %q after %d calls, want %q", r.msg, calls, want)
	}
	if el := time.Since(start); el < 50*time.Millisecond {
		t.Fatalf("gave up after %s", el)
	}
}

func TestEventuallyChecksAtOnce(t *testing.T) {
	r := &recorder{TB: t}
	start := time.Now()
	Eventually(r, time.Hour, func() error { return nil })
	if r.msg != "" || time.Since(start) >= Interval {
		t.Fatalf("%q after %s", r.msg, time.Since(start))
	}
	Eventually(r, 0, func() error { return errors.New("never") })
	if r.msg != "still not so after 0s: never" {
		t.Fatalf("%q", r.msg)
	}
}
