package events

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Forwarding: one sequencer numbers every replica's events.
//
// Every replica's sequencer can number any tenant's events (a tenant's
// passes take turns on its event_streams row, whoever runs them), and each
// replica used to number its own writers' events. With several replicas
// that made several passes where one would do: each a transaction with its
// own commit and NOTIFY, each waking every replica's readers, half as large
// with two replicas as with one, and the passes of different replicas
// waited for each other's commit on the notify lock. Measured, two replicas
// delivered 0.80-0.84x of one replica's events per second.
//
// Now the sequencer that holds the lease (LeaseName, cluster_leases, the
// same mechanism as the maintenance lease) numbers every replica's events.
// The others forward the tenants their writers committed events of: one
// NOTIFY on ControlChannel per batch, sent outside any writer's
// transaction ("f:<sequencer>:<n>:<tenant>,<tenant>..."), and wait for the
// leader's acknowledgement ("a:<sequencer>:<n>"), which the leader sends
// from the transaction of the first pass that began after it heard the
// forward: when it arrives the events are numbered and readable, so a
// client's request still returns after its events are readable. A forward
// not acknowledged within forwardWait (no leader, a leader that died or is
// slow, a lost notification) is numbered by a pass of the forwarder's own,
// and the forwarder passes locally for localFor before it forwards again;
// the sweep numbers whatever a dead replica left behind. A leader that
// shuts down says so ("l:<sequencer>:0"), and the forwarders number their
// tenants themselves at once until one of them holds the lease. A
// sequencer holds the lease only while its LISTEN connection is up (the
// lease's Eligible): a leader that cannot hear forwards gives it up at its
// next renewal. Order never depends on who numbers: it is the tenant's
// row lock.

// ControlChannel carries forwards and acknowledgements between sequencers.
const ControlChannel = "compute_events_sequencers"

// LeaseName is the cluster lease of the sequencer that numbers every
// replica's events.
const LeaseName = "event-sequencer"

// ListenerName is the application_name of a sequencer's LISTEN connection.
const ListenerName = "computed-events-sequencer-listener"

const (
	// forwardWait bounds how long a forwarder waits for the leader's
	// acknowledgement before it numbers the tenants itself.
	forwardWait = 500 * time.Millisecond
	// localFor is how long a forwarder passes locally after a forward
	// went unanswered.
	localFor = 2 * time.Second
)

// forwarding says this sequencer's batches go to the leader: another
// sequencer held the lease at the last renewal, this one's LISTEN
// connection is up (it hears the acknowledgements), and no forward went
// unanswered lately. Called from the run goroutine only.
func (s *Sequencer) forwarding() bool {
	return s.listening.Load() && !s.lease.Holding() && s.lease.HeldElsewhere() && time.Now().After(s.localTill) &&
		time.Since(time.Unix(0, s.left.Load())) > localFor
}

// leave tells the forwarders, when this sequencer leads, that it stops:
// they number their tenants themselves at once (their forwards in flight
// included) until another sequencer holds the lease, instead of waiting
// forwardWait for acknowledgements that will not come (a rolling deploy
// would add that to calls on every other replica).
func (s *Sequencer) leave() {
	if !s.lease.Holding() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, _ = s.db.ExecContext(ctx, `SELECT pg_notify($1, $2)`, ControlChannel, "l:"+s.id+":0")
}

// Unanswered is how many forwards went unacknowledged for forwardWait.
func (s *Sequencer) Unanswered() int64 { return s.unanswered.Load() }

// forward sends the tenants to the leader and waits for its
// acknowledgement; false when the tenants were not forwarded or not
// acknowledged in time (the caller numbers them itself).
func (s *Sequencer) forward(ctx context.Context, tenants []string) bool {
	n := s.fwdN + 1
	payload := "f:" + s.id + ":" + strconv.FormatInt(n, 10) + ":" + strings.Join(tenants, ",")
	if len(payload) > 7900 {
		return false // PostgreSQL's payload limit; rare enough to pass locally
	}
	s.fwdN = n
	sent := time.Now().UnixNano()
	if _, err := s.db.ExecContext(ctx, `SELECT pg_notify($1, $2)`, ControlChannel, payload); err != nil {
		if ctx.Err() == nil {
			s.log.Warn("event forward", "err", err)
		}
		return false
	}
	t := time.NewTimer(forwardWait)
	defer t.Stop()
	for s.acked.Load() < n {
		if s.left.Load() >= sent {
			return false // the leader stopped; it will not answer
		}
		select {
		case <-s.ackSig:
		case <-t.C:
			s.unanswered.Add(1)
			s.localTill = time.Now().Add(localFor)
			s.log.Warn("event forward unanswered; numbering this replica's events here for a while", "wait", forwardWait, "for", localFor)
			return false
		case <-ctx.Done():
			return false
		}
	}
	return true
}

// heard handles a control message: a forward (the leader marks its
// tenants and acknowledges it after its next pass), an acknowledgement of
// one of this sequencer's forwards, or a leader leaving.
func (s *Sequencer) heard(payload string) {
	kind, rest, _ := strings.Cut(payload, ":")
	from, rest, _ := strings.Cut(rest, ":")
	num, list, _ := strings.Cut(rest, ":")
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || from == "" {
		return
	}
	switch kind {
	case "f":
		// Only the leader answers; during a hand-over nobody may, and the
		// forwarder numbers the tenants itself.
		if from == s.id || !s.lease.Holding() || s.stopped.Load() || list == "" {
			return
		}
		// The acknowledgement and the tenants in one step: the pass that
		// takes one takes the other.
		s.mu.Lock()
		s.acks[from] = max(s.acks[from], n)
		for _, t := range strings.Split(list, ",") {
			if _, ok := s.dirty[t]; !ok {
				s.dirty[t] = false // a forward names no tenant to read whole
			}
		}
		s.mu.Unlock()
		s.poke()
	case "l":
		if from == s.id {
			return
		}
		s.left.Store(time.Now().UnixNano())
		s.signal()
	case "a":
		if from != s.id {
			return
		}
		for {
			old := s.acked.Load()
			if n <= old || s.acked.CompareAndSwap(old, n) {
				break
			}
		}
		s.signal()
	}
}

// signal wakes a forward waiting for its acknowledgement.
func (s *Sequencer) signal() {
	select {
	case s.ackSig <- struct{}{}:
	default:
	}
}

// listen holds the control channel's LISTEN connection until ctx ends,
// reconnecting after a failure.
func (s *Sequencer) listen(ctx context.Context) {
	l := s.db.Listener(ListenerName, &s.listening, s.log, "event sequencer listener")
	l.Handle(ControlChannel, control{s})
	_ = l.Listen(ctx)
	s.listening.Store(false)
}

type control struct{ s *Sequencer }

func (c control) HandleNotification(_ context.Context, n *pgconn.Notification, _ *pgx.Conn) error {
	c.s.heard(n.Payload)
	return nil
}

// HandleBacklog runs on every (re)connect: forwards sent while the
// connection was down went unheard (their forwarders time out and number
// them), acknowledgements too (the same).
func (c control) HandleBacklog(ctx context.Context, _ string, _ *pgx.Conn) error {
	c.s.listening.Store(true)
	// Eligible for the lease from now: compete at once, not at the next
	// renewal (a second without a leader means every replica passes).
	if !c.s.lease.Holding() {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		c.s.lease.RenewNow(ctx)
	}
	return nil
}
