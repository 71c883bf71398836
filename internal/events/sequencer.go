package events

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/bettercompute/computed/internal/cluster"
	"github.com/bettercompute/computed/internal/safe"
	"github.com/bettercompute/computed/internal/store"
)

// Sequencer numbers one replica's committed events (see the package doc).
// Writers tell it their tenants after commit (Committed, wired as
// store.DB.Committed); a client's request waits for the pass that numbers
// its events, so it reads its own events when it returns.
// One goroutine runs the passes; a pass numbers every tenant marked since
// the previous one in one transaction, so under load a pass serves many
// writers. Once a second it also numbers inbox rows left behind by a
// replica that died between a commit and its pass.
type Sequencer struct {
	db  *store.DB
	log *slog.Logger
	// Sweep is how often inbox rows older than Stranded are looked for
	// (default 1 s, Stranded 2 s).
	Sweep, Stranded time.Duration

	id      string // names its notifications, so its own replica's hub skips them
	stop    context.CancelFunc
	done    chan struct{}
	stopped atomic.Bool

	mu   sync.Mutex
	wake []func(tenants []string)
	// dirty holds the tenants marked since the last pass; true when the
	// next pass must read the tenant's whole inbox (see whole).
	dirty map[string]bool
	next  chan struct{} // closed when the pass after the current one ends
	wakeC chan struct{}

	passes, numbered, failures int64
	wholes                     atomic.Int64 // passes that read a tenant's inbox whole
	sinceVacuum                int64        // events numbered since this sequencer last vacuumed the inbox

	// Forwarding (see forward): the lease says which sequencer numbers
	// every replica's events; the others forward their tenants to it.
	lease      *cluster.Maintainer
	listening  atomic.Bool      // the control channel's LISTEN connection is up
	acks       map[string]int64 // the leader: the last forward heard from each sequencer, to acknowledge after its next pass
	acked      atomic.Int64     // a forwarder: the last of its forwards acknowledged
	ackSig     chan struct{}
	fwdN       int64        // the run goroutine: the last forward sent
	left       atomic.Int64 // when a leader last said it was leaving (UnixNano)
	unanswered atomic.Int64
	localTill  time.Time // the run goroutine: pass locally until then (a forward went unanswered)
	forwards   atomic.Int64
}

var (
	startMu sync.Mutex
	running = map[*store.DB]*Sequencer{}
)

// Start starts the sequencer of db's writes (once per handle: a second
// call returns the running one) and sets db.Committed to it. Every
// process that writes events runs one; Stop ends it.
func Start(db *store.DB, log *slog.Logger) *Sequencer {
	startMu.Lock()
	defer startMu.Unlock()
	if s := running[db]; s != nil {
		return s
	}
	if log == nil {
		log = slog.Default()
	}
	s := &Sequencer{db: db, log: log, id: newID(), dirty: map[string]bool{}, next: make(chan struct{}), wakeC: make(chan struct{}, 1),
		Sweep: time.Second, Stranded: 2 * time.Second, done: make(chan struct{}),
		acks: map[string]int64{}, ackSig: make(chan struct{}, 1)}
	// The lease's holder names the replica (cluster_leases says which one
	// numbers the events) and the sequencer (a replica restarted under the
	// same name holds a new lease).
	holder := s.id
	if db.Replica != "" {
		holder = db.Replica + "/" + s.id
	}
	s.lease = cluster.New(db, LeaseName, holder, log)
	ctx, cancel := context.WithCancel(context.Background())
	s.stop = cancel
	running[db] = s
	db.Committed = s.Committed
	var aside sync.WaitGroup
	aside.Add(3)
	go func() {
		defer aside.Done()
		s.vacuums(ctx)
	}()
	// A sequencer holds the lease only while it hears forwards: one that
	// led with its LISTEN connection down (not yet up, or unable to
	// reconnect) would lose them, and its forwarders would wait
	// forwardWait and number locally, again and again.
	s.lease.Eligible = s.listening.Load
	go func() {
		defer aside.Done()
		s.lease.Run(ctx)
	}()
	go func() {
		defer aside.Done()
		s.listen(ctx)
	}()
	go func() {
		defer close(s.done)
		defer aside.Wait()
		s.run(ctx)
	}()
	return s
}

// Stop ends the sequencer and waits for its pass; writers no longer wait.
// Events committed after it are numbered by another replica's sweep or by
// the next start.
func (s *Sequencer) Stop() {
	s.stopped.Store(true)
	s.leave()
	s.stop()
	<-s.done
	startMu.Lock()
	if running[s.db] == s {
		delete(running, s.db)
	}
	startMu.Unlock()
}

// ID names the sequencer in its notifications (Notification).
func (s *Sequencer) ID() string { return s.id }

func newID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Notification reads a sequencer's notification: the sequencer's id and
// the tenants it numbered events of.
func Notification(payload string) (from string, tenants []string) {
	from, list, ok := strings.Cut(payload, ":")
	if !ok {
		return "", strings.Split(payload, ",")
	}
	return from, strings.Split(list, ",")
}

// OnNumbered adds a function told the tenants each pass numbered events
// of (this replica's readers; the other replicas' hear the NOTIFY).
func (s *Sequencer) OnNumbered(f func(tenants []string)) {
	s.mu.Lock()
	s.wake = append(s.wake, f)
	s.mu.Unlock()
}

// SequencerName is the application_name of a pass's transaction.
const SequencerName = "computed-events-sequencer"

// passWait bounds how long a writer waits for its pass; past it the event
// is numbered by a later pass or the sweep, and the writer goes on.
const passWait = 5 * time.Second

// Committed marks the tenants' events as committed (took: how long the
// commit took, negative when not known; see whole). For a client's
// request (store.ForRequest) it then waits until a pass that began after
// this call has ended (or ctx ends, or passWait), so that the request's
// answer comes after its events are readable; background writers (the
// reconciler, expiries) go on at once and their events follow within a
// pass, unless their commit was slow.
//
// A commit of commitMargin or longer may have been skipped by a pass that
// numbered a later event of its tenant (another replica's, reading from
// that event's insert minus the margin), and only the whole pass this
// marks numbers it. Its writer waits for that pass, background or not:
// the reconciler's next step (running after provisioning, 100 ms later)
// was numbered before it, and a stream said an instance was provisioning
// after it ran (TestTwoReplicasAndSIGKILL, under load).
func (s *Sequencer) Committed(ctx context.Context, tenants []string, took time.Duration) {
	if s.stopped.Load() {
		return
	}
	whole := took < 0 || took >= commitMargin
	done := s.mark(tenants, whole)
	if !store.IsRequest(ctx) && !whole {
		return
	}
	t := time.NewTimer(passWait)
	defer t.Stop()
	select {
	case <-done:
	case <-ctx.Done():
	case <-t.C:
	}
}

func (s *Sequencer) mark(tenants []string, whole bool) <-chan struct{} {
	s.mu.Lock()
	for _, t := range tenants {
		s.dirty[t] = s.dirty[t] || whole
	}
	done := s.next
	s.mu.Unlock()
	s.poke()
	return done
}

// poke wakes the run goroutine (a pass is due).
func (s *Sequencer) poke() {
	select {
	case s.wakeC <- struct{}{}:
	default:
	}
}

// Stats are the sequencer's counters: passes run, events numbered, passes
// that failed (their tenants are retried).
func (s *Sequencer) Stats() (passes, numbered, failures int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.passes, s.numbered, s.failures
}

// Wholes is how many of its passes read a tenant's inbox whole (see pass).
func (s *Sequencer) Wholes() int64 { return s.wholes.Load() }

// Forwards is how many batches of tenants this sequencer forwarded to the
// leader and had acknowledged.
func (s *Sequencer) Forwards() int64 { return s.forwards.Load() }

// Leading says this sequencer holds the lease: it numbers the events of
// the replicas that forward to it, as well as its own.
func (s *Sequencer) Leading() bool { return s.lease.Holding() }

// commitMargin bounds how long before its tenant's last event's insert a
// row not yet numbered can have been inserted, when its commit took less
// than commitMargin (see pass).
const commitMargin = 250 * time.Millisecond

// passIdle is how long a pass's session may wait for its replica between
// two statements before PostgreSQL ends it (a pass sends its statements
// back to back).
const passIdle = 2 * time.Second

// maxTenantsPerPass bounds one pass's transaction.
const maxTenantsPerPass = 256

// run runs passes until ctx ends.
func (s *Sequencer) run(ctx context.Context) {
	sweep := time.NewTicker(s.Sweep)
	defer sweep.Stop()
	var sweeps paced
	for {
		select {
		case <-ctx.Done():
			s.mu.Lock()
			close(s.next) // release waiters
			s.next = make(chan struct{})
			s.mu.Unlock()
			return
		case <-s.wakeC:
		case <-sweep.C:
			sweeps.run(func() { safe.Do(ctx, s.log, "event sweep", func() { s.sweep(ctx) }) })
			continue
		}
		s.mu.Lock()
		tenants := make([]string, 0, len(s.dirty))
		for t := range s.dirty {
			tenants = append(tenants, t)
		}
		slices.Sort(tenants)
		if len(tenants) > maxTenantsPerPass {
			tenants = tenants[:maxTenantsPerPass]
			s.poke()
		}
		var whole []string
		for _, t := range tenants {
			if s.dirty[t] {
				whole = append(whole, t)
			}
			delete(s.dirty, t)
		}
		// The forwards heard so far are acknowledged by this pass, once it
		// covers every tenant marked (a pass cut at maxTenantsPerPass
		// leaves them to the next).
		var acks map[string]int64
		if len(s.dirty) == 0 && len(s.acks) > 0 {
			acks, s.acks = s.acks, map[string]int64{}
		}
		// Writers that mark from now on wait for the next pass. (Past
		// maxTenantsPerPass, the writers of the tenants left for the next
		// pass are released with this one.)
		done := s.next
		s.next = make(chan struct{})
		s.mu.Unlock()
		if len(tenants) == 0 {
			close(done)
			continue
		}
		// A tenant whose inbox must be read whole is passed here: a
		// forward names tenants only, and such a pass is rare.
		if acks == nil && whole == nil && s.forwarding() {
			var ok bool
			safe.Do(ctx, s.log, "event forward", func() { ok = s.forward(ctx, tenants) })
			if ok {
				s.forwards.Add(1)
				close(done)
				continue
			}
		}
		var moved []string
		var n int64
		var err error
		if whole != nil {
			s.wholes.Add(1)
		}
		safe.Do(ctx, s.log, "event sequencer", func() { moved, n, err = s.pass(ctx, tenants, whole, acks) })
		s.mu.Lock()
		s.passes++
		s.numbered += n
		s.sinceVacuum += n
		if err != nil {
			s.failures++
			for _, t := range tenants {
				s.dirty[t] = s.dirty[t] || slices.Contains(whole, t)
			}
			for from, n := range acks {
				s.acks[from] = max(s.acks[from], n)
			}
		}
		close(done)
		s.mu.Unlock()
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("event sequencer", "tenants", len(tenants), "err", err)
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
			s.poke()
			continue
		}
		if len(moved) > 0 {
			s.mu.Lock()
			wake := s.wake
			s.mu.Unlock()
			for _, f := range wake {
				f(moved)
			}
		}
	}
}

// pass numbers the committed inbox rows of the tenants (sorted) in one
// transaction and returns the tenants it numbered events of; acks are the
// forwards it acknowledges (by sequencer id, the last forward's number),
// in the same transaction, so that a forwarder hears of its pass only
// once the pass's numbers are readable.
//
// A tenant's rows are read from its last event's inserted_at minus
// commitMargin, not from the inbox's start (migration 00016): a row that
// the pass which numbered that event did not see was committed after that
// pass's statement began, so after that event's insert, and was inserted
// at most its commit's duration before (its insert runs with the COMMIT).
// The tenants in whole are read whole: after a commit that took
// commitMargin or longer, or whose duration is not known, and the sweep's. Rows a pass moves stay in the inbox's table
// and index as dead rows until no snapshot of the database can see them
// and a vacuum removes them; read from its start, a tenant's inbox was
// every row moved since the oldest snapshot of the database began (with
// one held for 60 s at 4,000 events/s, 67 ms a pass, growing with the
// snapshot's age). The pass's plans are index scans (seqscan and
// bitmapscan off for its transaction): the inbox's statistics are never
// current, and a plain index scan marks the entries of rows no snapshot
// sees as dead, which later scans skip without visiting the heap.
func (s *Sequencer) pass(ctx context.Context, tenants, whole []string, acks map[string]int64) (moved []string, n int64, err error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err = s.db.Tx(ctx, func(tx *sqlx.Tx) error {
		moved, n = nil, 0
		// The streams' rows, locked in tenant order (no deadlock between
		// replicas' passes): a tenant's passes take turns from here to
		// commit. The pass names itself in pg_stat_activity for the
		// transaction.
		// A replica that stops between two of the pass's statements (a
		// SIGSTOP, a partition) would hold these rows, and every replica's
		// readers of the tenants would wait, until its connection died:
		// PostgreSQL ends the session once it has been idle in the
		// transaction for passIdle, and the rows' locks go with it.
		var locked []string
		if err := tx.SelectContext(ctx, &locked, `SELECT s.tenant_id FROM event_streams s,
				(SELECT set_config('application_name', $2, true), set_config('idle_in_transaction_session_timeout', $3, true),
					set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true)) AS app
			WHERE s.tenant_id = ANY($1) ORDER BY s.tenant_id FOR UPDATE OF s`, tenants, s.db.AppName(SequencerName), fmt.Sprint(passIdle.Milliseconds())); err != nil {
			return store.Wrap(err)
		}
		// A tenant's first events create its stream row, then lock it (a
		// deadlock with another replica's first pass of the same tenants is
		// retried by Tx).
		if fresh := missing(tenants, locked); len(fresh) > 0 {
			if _, err := tx.ExecContext(ctx, `INSERT INTO event_streams (tenant_id) SELECT unnest($1::text[]) ON CONFLICT DO NOTHING`, fresh); err != nil {
				return store.Wrap(err)
			}
			if _, err := tx.ExecContext(ctx, `SELECT 1 FROM event_streams WHERE tenant_id = ANY($1) ORDER BY tenant_id FOR UPDATE`, fresh); err != nil {
				return store.Wrap(err)
			}
		}
		// This statement's snapshot begins after the locks were granted, so
		// it sees everything earlier passes numbered, and only committed
		// inbox rows. It also wakes the other replicas' readers: one
		// notification per pass naming the tenants, sent from this
		// transaction, never from a writer's (when the names would pass
		// PostgreSQL's 8000 bytes, in pieces below).
		var rows []struct {
			TenantID string `db:"tenant_id"`
			N        int64  `db:"n"`
			Noted    int64  `db:"noted"`
		}
		err := tx.SelectContext(ctx, &rows, `WITH ends AS (
				SELECT s.tenant_id, greatest(s.pruned_seq, coalesce(e.seq, 0)) AS last_seq,
					CASE WHEN s.tenant_id = ANY($4) OR e.inserted_at IS NULL THEN '-infinity' ELSE e.inserted_at - make_interval(secs => $5) END AS since
				FROM event_streams s LEFT JOIN LATERAL (
					SELECT seq, inserted_at FROM events WHERE tenant_id = s.tenant_id ORDER BY seq DESC LIMIT 1) e ON true
				WHERE s.tenant_id = ANY($1)),
			moved AS (
				DELETE FROM event_inbox i USING ends b WHERE i.tenant_id = b.tenant_id AND i.inserted_at >= b.since RETURNING i.*),
			numbered AS (
				SELECT m.*, b.last_seq + row_number() OVER (PARTITION BY m.tenant_id ORDER BY m.inserted_at, m.xid, m.ord) AS seq
				FROM moved m JOIN ends b USING (tenant_id)),
			ins AS (
				INSERT INTO events (tenant_id, seq, type, resource_type, resource_id, pool_id, data, occurred_at, inserted_at)
				SELECT tenant_id, seq, type, resource_type, resource_id, pool_id, data, occurred_at, inserted_at FROM numbered
				RETURNING tenant_id),
			last AS (SELECT tenant_id, count(*) AS n FROM ins GROUP BY tenant_id),
			note AS (SELECT pg_notify($2, $3 || string_agg(tenant_id, ',')) FROM last HAVING sum(length(tenant_id) + 1) < 7900)
			SELECT tenant_id, n, (SELECT count(*) FROM note) AS noted FROM last ORDER BY tenant_id`, tenants, Channel, s.id+":", whole, commitMargin.Seconds())
		if err != nil {
			return store.Wrap(err)
		}
		for _, r := range rows {
			moved = append(moved, r.TenantID)
			n += r.N
		}
		if len(rows) > 0 && rows[0].Noted == 0 {
			for _, p := range payloads(moved) {
				if _, err := tx.ExecContext(ctx, `SELECT pg_notify($1, $2)`, Channel, s.id+":"+p); err != nil {
					return store.Wrap(err)
				}
			}
		}
		if len(acks) > 0 {
			list := make([]string, 0, len(acks))
			for from, n := range acks {
				list = append(list, fmt.Sprintf("a:%s:%d", from, n))
			}
			if _, err := tx.ExecContext(ctx, `SELECT pg_notify($1, a) FROM unnest($2::text[]) AS a`, ControlChannel, list); err != nil {
				return store.Wrap(err)
			}
		}
		return nil
	})
	return moved, n, err
}

// missing returns the tenants not in have.
func missing(tenants, have []string) []string {
	var out []string
	for _, t := range tenants {
		if !slices.Contains(have, t) {
			out = append(out, t)
		}
	}
	return out
}

// payloads joins tenant ids with commas into payloads under 7,900 bytes.
func payloads(tenants []string) []string {
	var out []string
	var b strings.Builder
	for _, t := range tenants {
		if b.Len() > 0 && b.Len()+1+len(t) > 7900 {
			out = append(out, b.String())
			b.Reset()
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(t)
	}
	if b.Len() > 0 {
		out = append(out, b.String())
	}
	return out
}

// vacuumAfter is how many events a sequencer numbers before it vacuums
// the inbox at its next sweep tick.
const vacuumAfter = 500

// vacuums runs vacuum every Sweep until ctx ends, beside the passes (a
// vacuum of a large inbox can take a while; passes do not wait for it).
func (s *Sequencer) vacuums(ctx context.Context) {
	t := time.NewTicker(s.Sweep)
	defer t.Stop()
	var vacuums paced
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			vacuums.run(func() { safe.Do(ctx, s.log, "event inbox vacuum", func() { s.vacuum(ctx) }) })
		}
	}
}

// paced runs a costly step no sooner than costlyEvery times its last
// duration after its last start (one goroutine's).
type paced struct{ after time.Time }

func (p *paced) run(step func()) {
	if time.Now().Before(p.after) {
		return
	}
	began := time.Now()
	step()
	p.after = began.Add(costlyEvery * time.Since(began))
}

// costlyEvery: the sweep and the vacuum, which read the whole inbox, run
// again no sooner than costlyEvery times as long as their last run took
// after it began (and no sooner than Sweep): at most a 20th of a core
// each. While a snapshot of the database is held, the rows passes move
// stay in the inbox: each vacuum removes nothing and reads them all, and
// so does the sweep (with one held for 60 s at 4,000 events/s: 136 ms and
// 94 ms, every second). Once the snapshot is gone, a vacuum takes
// milliseconds again, and the interval is Sweep again.
const costlyEvery = 20

// vacuum vacuums event_inbox once this sequencer has numbered vacuumAfter
// events since its last vacuum. Every event is a row inserted and deleted
// there within milliseconds: the inbox is a queue, and its dead rows are
// scanned by every pass's DELETE (and the sweep) until a vacuum removes
// them. Autovacuum visits a database at most once per autovacuum_naptime
// (a minute by default), by which time a busy inbox holds a minute of
// events' dead rows: passes slowed by a third in the benchmark, and the
// heap grew by its megabytes. SKIP_LOCKED: when another replica's vacuum
// of it runs, this one is skipped rather than queued. A role that does not
// own the table gets a warning from PostgreSQL and nothing is done.
func (s *Sequencer) vacuum(ctx context.Context) {
	s.mu.Lock()
	due := s.sinceVacuum >= vacuumAfter
	if due {
		s.sinceVacuum = 0
	}
	s.mu.Unlock()
	if !due {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := s.db.ExecContext(ctx, `VACUUM (SKIP_LOCKED, TRUNCATE false) event_inbox`); err != nil && ctx.Err() == nil {
		s.log.Warn("event inbox vacuum", "err", err)
	}
}

// sweep marks the tenants of inbox rows older than Stranded: their writer
// committed but its replica did not number them (it died, or its pass
// failed and it stopped).
func (s *Sequencer) sweep(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var tenants []string
	if err := s.db.SelectContext(ctx, &tenants, `SELECT DISTINCT tenant_id FROM event_inbox
		WHERE occurred_at < now() - make_interval(secs => $1) LIMIT 1000`, s.Stranded.Seconds()); err != nil {
		if ctx.Err() == nil {
			s.log.Warn("event sweep", "err", err)
		}
		return
	}
	if len(tenants) > 0 {
		s.mark(tenants, true)
	}
}
