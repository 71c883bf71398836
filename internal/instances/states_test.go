package instances

import (
	"testing"
	"time"
)

func TestTransitionTable(t *testing.T) {
	allowed := map[[2]string]bool{}
	for _, c := range [][2]string{
		{Pending, Provisioning}, {Pending, Deleted}, {Pending, Failed},
		{Provisioning, Running}, {Provisioning, Deleting}, {Provisioning, Failed},
		{Running, Stopping}, {Running, Rebooting}, {Running, Deleting}, {Running, Failed},
		{Stopping, Stopped}, {Stopping, Deleting}, {Stopping, Failed},
		{Stopped, Provisioning}, {Stopped, Deleting}, {Stopped, Failed},
		{Rebooting, Running}, {Rebooting, Deleting}, {Rebooting, Failed},
		{Deleting, Deleted}, {Deleting, Failed},
		{Failed, Provisioning}, {Failed, Deleting},
	} {
		allowed[c] = true
	}
	for _, from := range States {
		for _, to := range States {
			if got := CanMove(from, to); got != allowed[[2]string{from, to}] {
				t.Errorf("CanMove(%s, %s) = %v", from, to, got)
			}
		}
	}
	for _, s := range States {
		if EventType(s) == "" {
			t.Errorf("no event type for %s", s)
		}
	}
}

func TestNextAndConverged(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		state, desired string
		reboot, done   int
		desiredAfter   bool // desired_at after state_since
		next           string
		converged      bool
	}{
		{Pending, Running, 0, 0, false, Provisioning, false},
		{Pending, Stopped, 0, 0, false, Provisioning, false},
		{Pending, Deleted, 0, 0, false, Deleted, false},
		{Provisioning, Running, 0, 0, false, "", false},
		{Provisioning, Deleted, 0, 0, false, Deleting, false},
		{Running, Running, 0, 0, false, "", true},
		{Running, Running, 2, 1, false, Rebooting, false},
		{Running, Stopped, 1, 0, false, Stopping, false},
		{Running, Deleted, 0, 0, false, Deleting, false},
		{Stopping, Running, 0, 0, false, "", false},
		{Stopping, Deleted, 0, 0, false, Deleting, false},
		{Stopped, Stopped, 0, 0, false, "", true},
		{Stopped, Running, 0, 0, false, Provisioning, false},
		{Stopped, Deleted, 0, 0, false, Deleting, false},
		{Rebooting, Running, 1, 0, false, "", false},
		{Rebooting, Deleted, 1, 0, false, Deleting, false},
		{Deleting, Deleted, 0, 0, false, "", false},
		{Deleted, Deleted, 0, 0, true, "", true},
		{Failed, Running, 0, 0, false, "", true},
		{Failed, Running, 0, 0, true, Provisioning, false},
		{Failed, Deleted, 0, 0, true, Deleting, false},
		{Failed, Stopped, 0, 0, true, "", true},
	}
	for _, c := range cases {
		i := &Instance{State: c.state, DesiredState: c.desired, RebootGeneration: c.reboot, RebootedGeneration: c.done,
			StateSince: t0, DesiredAt: t0}
		if c.desiredAfter {
			i.DesiredAt = t0.Add(time.Second)
		}
		if got := Next(i); got != c.next {
			t.Errorf("%s/%s: Next = %q, want %q", c.state, c.desired, got, c.next)
		}
		if got := Converged(i); got != c.converged {
			t.Errorf("%s/%s: Converged = %v, want %v", c.state, c.desired, got, c.converged)
		}
		if n := Next(i); n != "" && !CanMove(i.State, n) {
			t.Errorf("%s/%s: Next %s is not in the table", c.state, c.desired, n)
		}
	}
}
