package instances

import "github.com/bettercompute/computed/internal/events"

// Instance states.
const (
	Pending      = "pending"
	Provisioning = "provisioning"
	Running      = "running"
	Stopping     = "stopping"
	Stopped      = "stopped"
	Rebooting    = "rebooting"
	Deleting     = "deleting"
	Deleted      = "deleted"
	Failed       = "failed"
)

// States lists every state, in lifecycle order.
var States = []string{Pending, Provisioning, Running, Stopping, Stopped, Rebooting, Deleting, Deleted, Failed}

// Desired states a caller can ask for.
var DesiredStates = []string{Running, Stopped, Deleted}

// transitions is the one table of state moves. Every state change of an
// instance goes through move (below), which refuses anything not listed
// here; the database trigger instances_transition_check is its backstop.
//
//   - pending: waiting for room (placement, provider capacity); left by
//     provisioning once placed or created, by deleted when deleted before
//     that, by failed when the provider refuses it for good.
//   - failed is left only by a start (provisioning) or a delete (deleting).
//   - deleted is final.
var transitions = map[string][]string{
	Pending:      {Provisioning, Deleted, Failed},
	Provisioning: {Running, Deleting, Failed},
	Running:      {Stopping, Rebooting, Deleting, Failed},
	Stopping:     {Stopped, Deleting, Failed},
	Stopped:      {Provisioning, Deleting, Failed},
	Rebooting:    {Running, Deleting, Failed},
	Deleting:     {Deleted, Failed},
	Failed:       {Provisioning, Deleting},
	Deleted:      {},
}

// CanMove reports whether the table allows from -> to.
func CanMove(from, to string) bool {
	for _, s := range transitions[from] {
		if s == to {
			return true
		}
	}
	return false
}

// EventType is the event a move into state writes.
func EventType(state string) string {
	switch state {
	case Pending:
		return events.Created
	case Provisioning:
		return events.Provisioning
	case Running:
		return events.Running
	case Stopping:
		return events.Stopping
	case Stopped:
		return events.Stopped
	case Rebooting:
		return events.Rebooting
	case Deleting:
		return events.Deleting
	case Deleted:
		return events.Deleted
	case Failed:
		return events.Failed
	}
	return ""
}

// Transitional states are those the reconciler (or a host) is moving an
// instance through; each has a timeout.
func Transitional(state string) bool {
	switch state {
	case Provisioning, Stopping, Rebooting, Deleting:
		return true
	}
	return false
}

// Converged reports whether an instance is where its desired state wants
// it (the same rule as the instances.converged column): nothing for the
// reconciler to do.
func Converged(i *Instance) bool {
	switch i.State {
	case Deleted:
		return true
	case Failed:
		// Left only by a start or a delete made after it failed.
		return !i.DesiredAt.After(i.StateSince) || i.DesiredState == Stopped
	case Running:
		return i.DesiredState == Running && i.RebootGeneration <= i.RebootedGeneration
	case Stopped:
		return i.DesiredState == Stopped
	}
	return false
}

// Next is the move the reconciler makes from an instance's state toward its
// desired state, "" when it waits (for room, a provider or a host) or has
// converged. Provider observations and host reports make the moves out of
// transitional states; Next only starts them.
func Next(i *Instance) string {
	switch i.State {
	case Pending:
		if i.DesiredState == Deleted {
			return Deleted
		}
		return Provisioning // once placed
	case Provisioning:
		if i.DesiredState == Deleted {
			return Deleting
		}
	case Running:
		switch {
		case i.DesiredState == Deleted:
			return Deleting
		case i.DesiredState == Stopped:
			return Stopping
		case i.RebootGeneration > i.RebootedGeneration:
			return Rebooting
		}
	case Stopping:
		if i.DesiredState == Deleted {
			return Deleting
		}
	case Stopped:
		switch i.DesiredState {
		case Deleted:
			return Deleting
		case Running:
			return Provisioning
		}
	case Rebooting:
		if i.DesiredState == Deleted {
			return Deleting
		}
	case Failed:
		if Converged(i) {
			return ""
		}
		switch i.DesiredState {
		case Deleted:
			return Deleting
		case Running:
			return Provisioning
		}
	}
	return ""
}
