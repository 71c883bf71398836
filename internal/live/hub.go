// Package live fans tenants' events out to subscribers. The outbox
// (package events) is the truth; a wake-up only tells readers to read.
//
// Readers are woken by this replica's event sequencer when it has numbered
// a tenant's events (Wake), and by the other replicas' sequencers through
// ONE LISTEN connection per replica (jackc/pgxlisten, reconnecting): one
// notification per sequencer pass names the tenants it numbered. No
// writer's transaction notifies.
// Per tenant with subscribers a stream reads the new rows once, from its
// position in the stream, and hands them to that tenant's subscribers in
// memory: the stream appends them to one bounded ring that all of them read
// at their own pace, each filtered by its own filter, so handing an event
// to 10,000 subscribers costs the stream one append and one wake-up.
// Publishers never wait for a subscriber: one that falls further behind
// than the ring reads on from the outbox by itself, and one whose client
// takes nothing for a while is ended with an error naming its last event
// so it can resume. A subscriber
// that asks to resume replays from the outbox and then goes live with no
// gap and no duplicate: positions are a total order, and a subscriber
// delivers only positions after the last it delivered.
package live

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/events"
	"github.com/bettercompute/computed/internal/reqctx"
	"github.com/bettercompute/computed/internal/safe"
	"github.com/bettercompute/computed/internal/store"
)

// Config tunes the hub; zero values take the defaults.
type Config struct {
	// Buffer is how many recent events a tenant's stream keeps for its
	// subscribers (default 1024), shared by all of them. A subscriber
	// further behind than that reads on from the outbox by itself until it
	// has caught up.
	Buffer int
	// Stall ends a subscriber whose client has not taken an event for this
	// long (default 10 s): it is ended with an error naming its last event.
	Stall time.Duration
	// Poll is how often a tenant's stream reads without a wake-up, to
	// cover a lost LISTEN connection (default 1 s).
	Poll time.Duration
	// Page is how many rows one read of a tenant's stream takes (default
	// 500).
	Page int
	// ReplayPage and ReplayBytes bound what one subscriber's own read of
	// the outbox (a replay from a cursor, a catch-up behind the ring)
	// holds: at most ReplayPage events (default 64) and, past the first,
	// ReplayBytes of their data (default 32 KiB). A client that stops
	// reading holds that much until it is ended: with whole pages of 500,
	// 570 stalled replays held 620 MB.
	ReplayPage, ReplayBytes int
	// Gather is how long the hub's reader waits after a wake-up for more
	// before it reads (default 2 ms): under load one read serves many
	// sequencer passes (this replica's and the others').
	Gather time.Duration
}

func (c *Config) defaults() {
	if c.Buffer <= 0 {
		c.Buffer = 1024
	}
	if c.Poll <= 0 {
		c.Poll = time.Second
	}
	if c.Page <= 0 {
		c.Page = 500
	}
	if c.ReplayPage <= 0 {
		c.ReplayPage = 64
	}
	if c.ReplayBytes <= 0 {
		c.ReplayBytes = 32 << 10
	}
	if c.Stall <= 0 {
		c.Stall = 10 * time.Second
	}
	if c.Gather <= 0 {
		c.Gather = 2 * time.Millisecond
	}
}

// ListenerName is the application_name of the hub's LISTEN connection.
const ListenerName = "computed-events-listener"

// Hub is one replica's fan-out.
type Hub struct {
	db  *store.DB
	log *slog.Logger
	cfg Config

	mu      sync.Mutex
	streams map[string]*stream
	reading bool                 // Run's reader reads woken streams
	woken   map[*stream]struct{} // streams to read, under mu
	readC   chan struct{}

	self atomic.Value                    // string: the id of this replica's sequencer (SkipFrom)
	also map[string]func(payload string) // more channels its LISTEN connection hears (Also)

	subscribers atomic.Int64
	reads       atomic.Int64
	catchUps    atomic.Int64
	listening   atomic.Bool
}

// New makes a hub; Run starts its LISTEN connection.
func New(db *store.DB, log *slog.Logger, cfg Config) *Hub {
	cfg.defaults()
	return &Hub{db: db, log: log, cfg: cfg, streams: map[string]*stream{}, woken: map[*stream]struct{}{}, readC: make(chan struct{}, 1)}
}

// Also has the hub's LISTEN connection hear channel too, before Run: f
// is called with each notification's payload, and with "" each time the
// connection is (re)established (anything may have been missed).
func (h *Hub) Also(channel string, f func(payload string)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.also == nil {
		h.also = map[string]func(string){}
	}
	h.also[channel] = f
}

// SkipFrom names this replica's sequencer: its notifications are skipped,
// since it wakes the hub directly (Wake) when it has numbered events.
func (h *Hub) SkipFrom(sequencerID string) { h.self.Store(sequencerID) }

// Subscribers is the number of live subscriptions.
func (h *Hub) Subscribers() int64 { return h.subscribers.Load() }

// Reads is the number of outbox reads the streams made.
func (h *Hub) Reads() int64 { return h.reads.Load() }

// CatchUps is how many times a subscriber fell behind its stream's ring and
// read on from the outbox.
func (h *Hub) CatchUps() int64 { return h.catchUps.Load() }

// Listening says the LISTEN connection is up.
func (h *Hub) Listening() bool { return h.listening.Load() }

// Run holds the LISTEN connection until ctx ends, reconnecting after a
// failure; on every (re)connect all streams read, so what was committed
// while the connection was down is delivered.
func (h *Hub) Run(ctx context.Context) error {
	h.mu.Lock()
	h.reading = true
	h.mu.Unlock()
	rctx, stopReader := context.WithCancel(ctx)
	readerDone := make(chan struct{})
	// Without the reader (it ended, or it panicked and safe logged it),
	// streams read for themselves again.
	unbatch := func() {
		h.mu.Lock()
		h.reading = false
		for s := range h.woken {
			s.poke()
		}
		clear(h.woken)
		h.mu.Unlock()
	}
	safe.Go(rctx, h.log, "event streams reader", func() { defer close(readerDone); h.readWoken(rctx) }, unbatch)
	defer func() {
		unbatch()
		stopReader()
		<-readerDone
	}()
	l := h.db.Listener(ListenerName, &h.listening, h.log, "event listener")
	l.Handle(events.Channel, handler{h})
	h.mu.Lock()
	for ch, f := range h.also {
		l.Handle(ch, alsoHandler(f))
	}
	h.mu.Unlock()
	err := l.Listen(ctx)
	h.listening.Store(false)
	return err
}

type handler struct{ h *Hub }

func (x handler) HandleNotification(_ context.Context, n *pgconn.Notification, _ *pgx.Conn) error {
	from, tenants := events.Notification(n.Payload)
	if from != "" && from == x.h.self.Load() {
		return nil // this replica's own sequencer woke its streams already
	}
	x.h.Wake(tenants)
	return nil
}

// alsoHandler hears a channel of Also.
type alsoHandler func(payload string)

func (f alsoHandler) HandleNotification(_ context.Context, n *pgconn.Notification, _ *pgx.Conn) error {
	f(n.Payload)
	return nil
}

func (f alsoHandler) HandleBacklog(context.Context, string, *pgx.Conn) error {
	f("")
	return nil
}

// HandleBacklog runs on every (re)connect: everything may have been missed.
func (x handler) HandleBacklog(context.Context, string, *pgx.Conn) error {
	x.h.listening.Store(true)
	x.h.mu.Lock()
	defer x.h.mu.Unlock()
	for _, s := range x.h.streams {
		s.poke()
	}
	return nil
}

// Wake tells the streams of the tenants that new events are numbered.
// While Run runs, the hub's reader reads all of the woken streams in one
// statement; otherwise each stream reads for itself.
func (h *Hub) Wake(tenants []string) {
	h.mu.Lock()
	batched := h.reading
	for _, t := range tenants {
		if s := h.streams[t]; s != nil {
			if batched {
				h.woken[s] = struct{}{}
			} else {
				s.poke()
			}
		}
	}
	h.mu.Unlock()
	if batched {
		select {
		case h.readC <- struct{}{}:
		default:
		}
	}
}

// readWoken reads the woken streams' new events until ctx ends: one
// statement for all of them (one page each), then each stream's share is
// delivered; a stream that filled its page reads the rest itself.
func (h *Hub) readWoken(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-h.readC:
		}
		gather := time.NewTimer(h.cfg.Gather)
		select {
		case <-ctx.Done():
			gather.Stop()
			return
		case <-gather.C:
		}
		h.mu.Lock()
		woken := make([]*stream, 0, len(h.woken))
		for s := range h.woken {
			woken = append(woken, s)
		}
		clear(h.woken)
		h.mu.Unlock()
		for len(woken) > 0 {
			n := min(len(woken), 500)
			h.readMany(ctx, woken[:n])
			woken = woken[n:]
		}
	}
}

func (h *Hub) readMany(ctx context.Context, streams []*stream) {
	tenants := make([]string, len(streams))
	after := make([]int64, len(streams))
	for i, s := range streams {
		s.mu.Lock()
		tenants[i], after[i] = s.tenant, int64(s.pos)
		s.mu.Unlock()
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	list, err := events.PagesByTenant(rctx, h.db, tenants, after, h.cfg.Page)
	cancel()
	h.reads.Add(1)
	if err != nil {
		if ctx.Err() == nil {
			h.log.Warn("event streams read", "streams", len(streams), "err", err)
		}
		for _, s := range streams {
			s.poke() // each reads for itself
		}
		return
	}
	for i, s := range streams {
		page := list[tenants[i]]
		s.deliver(page)
		if len(page) >= h.cfg.Page {
			s.poke()
		}
	}
}

// Subscription is one subscriber's ordered, exactly-once events.
//
// A live subscription costs no goroutine: its stream hands each new event
// straight into the subscription's small buffered channel. Only when that
// channel is full (the consumer is busy), the subscriber has fallen behind
// the ring, or it replays from a cursor, a pump goroutine delivers for it
// (with blocking sends, the stall timer and the outbox), and it hands the
// subscription back to the stream once it has caught up.
type Subscription struct {
	// C delivers events in stream order; it is closed when the
	// subscription ends (Err says why, nil when its context ended). Events
	// already handed to C are delivered before it closes, and an error's
	// lastEventId names the last of them.
	C <-chan *events.Event

	c      chan *events.Event
	ctx    context.Context
	st     *stream
	opts   Options
	filter atomic.Pointer[events.Filter]
	err    atomic.Pointer[error]
	cancel context.CancelFunc
	// stopChange unregisters the OnChange hook.
	stopChange func() bool

	// Owned by the stream, under st.mu, while the subscription is live; by
	// its pump while pumping.
	next    uint64 // the ring sequence of the next event to consider
	last    uint64 // the stream number of the last event handed to c
	pumping bool
	closed  bool
}

// subBuffer is a live subscription's channel capacity: what its stream may
// hand it while its consumer is busy writing the previous event.
const subBuffer = 8

// Err is why the subscription ended.
func (s *Subscription) Err() error {
	if p := s.err.Load(); p != nil {
		return *p
	}
	return nil
}

// Stop ends the subscription.
func (s *Subscription) Stop() { s.cancel() }

func (s *Subscription) matches(ev *events.Event) bool { return s.filter.Load().Matches(ev) }

// SetFilter changes the subscription's filter (what its reader may read
// changed): events not yet delivered are delivered by the new one. The
// tenant stays.
func (s *Subscription) SetFilter(f events.Filter) {
	f.TenantID = s.filter.Load().TenantID
	s.filter.Store(&f)
}

// end records why the subscription ends (the first reason wins) and tells
// OnEnd; the caller then ends it.
func (s *Subscription) end(err error) {
	if s.err.CompareAndSwap(nil, &err) && s.opts.OnEnd != nil {
		s.opts.OnEnd(err)
	}
}

// Options are a subscription's hooks.
type Options struct {
	// OnChange, when set, registers a function called when the
	// subscriber's authorization may have changed (its role bindings) and
	// returns a function that unregisters it; Recheck then decides again,
	// and an error ends the subscription with that error.
	OnChange func(f func()) (stop func() bool)
	Recheck  func(ctx context.Context) error
	// OnEnd, when set, is told why a subscription ended with an error.
	OnEnd func(error)
	// OnReady, when set, is called once after every event put in C, with
	// it, and once after C is closed, with nil (reqctx.Driver): a consumer
	// driven by it reads C only when it holds something.
	OnReady func(ev *events.Event)
	// CursorPath names where after came from in errors ("after" when
	// empty; "Last-Event-ID" for an event stream its client reconnected).
	CursorPath string
}

// ready tells the consumer C holds one more item: ev, or the end (nil).
func (s *Subscription) ready(ev *events.Event) {
	if s.opts.OnReady != nil {
		s.opts.OnReady(ev)
	}
}

// cursorPath names where the subscription's after came from in errors.
func (s *Subscription) cursorPath() string {
	if s.opts.CursorPath != "" {
		return s.opts.CursorPath
	}
	return "after"
}

// Subscribe starts a subscription of the filter's events. With after nil
// it starts live from now; with after (a number of the tenant's stream),
// it first replays every later event of the filter from the outbox (an
// after older than the retention is INVALID_STATE, details.reason
// "expired-cursor"), then goes live.
//
// Its start's reads (the cursor's check, a new stream's position) are
// bounded by ctx's setup deadline (reqctx.Setup), the subscription by ctx.
func (h *Hub) Subscribe(ctx context.Context, f events.Filter, after *uint64, opts ...Options) (*Subscription, error) {
	setup, done := reqctx.Setup(ctx)
	defer done()
	if after != nil {
		path := "after"
		for _, o := range opts {
			if o.CursorPath != "" {
				path = o.CursorPath
			}
		}
		if err := events.CheckCursor(setup, h.db, path, f.TenantID, *after); err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	sub := &Subscription{c: make(chan *events.Event, subBuffer), ctx: ctx, cancel: cancel}
	sub.filter.Store(&f)
	for _, o := range opts {
		sub.opts = o
	}
	sub.C = sub.c
	st, from, next, err := h.join(setup, sub)
	if err != nil {
		cancel()
		return nil, err
	}
	sub.st, sub.next, sub.last = st, next, from
	replay := after != nil
	if replay {
		sub.last = *after
	}
	h.subscribers.Add(1)
	if sub.opts.OnChange != nil && sub.opts.Recheck != nil {
		sub.stopChange = sub.opts.OnChange(func() {
			safe.Go(sub.ctx, h.log, "subscription recheck", func() { h.recheck(sub) }, func() { h.crashed(sub) })
		})
	}
	// The end of the context ends a live subscription here; a pumping one
	// is ended by its pump. (Ending cancels the context too, so this runs
	// once for every subscription, as a no-op when it has ended already.)
	context.AfterFunc(ctx, safe.Func(ctx, h.log, "subscription end", func() {
		st.mu.Lock()
		if sub.pumping || sub.closed {
			st.mu.Unlock()
			return
		}
		st.finish(sub)
		st.mu.Unlock()
		h.finished(sub)
	}))
	st.mu.Lock()
	switch {
	case sub.closed: // its context ended already
	case replay || st.fill(sub):
		sub.pumping = true
		h.startPump(sub, replay)
	default:
		st.live[sub] = struct{}{}
	}
	st.mu.Unlock()
	return sub, nil
}

// recheck decides a subscription again after its authorization may have
// changed; a refusal ends it with that error.
func (h *Hub) recheck(sub *Subscription) {
	if err := sub.opts.Recheck(sub.ctx); err != nil && sub.ctx.Err() == nil {
		sub.end(err)
		sub.cancel()
	}
}

// crashed ends a subscription whose goroutine panicked (safe logged it)
// with an INTERNAL error.
func (h *Hub) crashed(sub *Subscription) {
	sub.end(errs.E(errs.Internal, "internal error"))
	st := sub.st
	st.mu.Lock()
	if sub.closed {
		st.mu.Unlock()
		return
	}
	st.finish(sub)
	st.mu.Unlock()
	h.finished(sub)
}

// startPump hands a subscription to a pump goroutine (under its stream's
// lock, with sub.pumping set).
func (h *Hub) startPump(sub *Subscription, replay bool) {
	safe.Go(sub.ctx, h.log, "subscription pump", func() { h.pump(sub, replay) }, func() { h.crashed(sub) })
}

// finished is what ends a subscription outside its stream's lock.
func (h *Hub) finished(sub *Subscription) {
	h.subscribers.Add(-1)
	sub.cancel()
	if sub.stopChange != nil {
		sub.stopChange()
	}
}

// pump delivers one subscriber's events while it cannot be handed them
// without waiting: the replay from the outbox, then the events of its
// stream's ring from sub.next on, each position once, until it has caught
// up with the ring and goes live again.
func (h *Hub) pump(sub *Subscription, replay bool) {
	st, ctx := sub.st, sub.ctx
	exit := func() {
		st.mu.Lock()
		st.finish(sub)
		st.mu.Unlock()
		h.finished(sub)
	}
	stall := time.NewTimer(h.cfg.Stall)
	defer stall.Stop()
	// emit delivers one event unless it was delivered already (the replay
	// overlapped the live events). A client that does not take it within
	// Stall is ended.
	emit := func(ev *events.Event) bool {
		if ev.Seq <= sub.last {
			return true
		}
		select {
		case sub.c <- ev:
			sub.last = ev.Seq
			sub.ready(ev)
			return true
		default:
		}
		stall.Reset(h.cfg.Stall)
		select {
		case sub.c <- ev:
			sub.last = ev.Seq
			sub.ready(ev)
			return true
		case <-stall.C:
			sub.end(slowConsumer(sub.filter.Load().TenantID, sub.last))
			return false
		case <-ctx.Done():
			return false
		}
	}
	// catchUp reads the filter's events after the last delivered one from
	// the outbox, until it has read all there is; a subscriber whose last
	// event retention has overtaken meanwhile is ended (expired-cursor),
	// since the read may have missed pruned events.
	catchUp := func() bool {
		for {
			f := *sub.filter.Load()
			page, err := events.Page(ctx, h.db, f, sub.last, h.cfg.ReplayPage)
			if err == nil {
				err = events.Retained(ctx, h.db, sub.cursorPath(), f.TenantID, sub.last)
			}
			if err != nil {
				if ctx.Err() == nil {
					sub.end(err)
				}
				return false
			}
			all := len(page) < h.cfg.ReplayPage
			if kept := bounded(page, h.cfg.ReplayBytes); len(kept) < len(page) {
				page, all = kept, false // the rest is read again, next
			}
			for i := range page {
				// Each event its own: whoever keeps one (the server's
				// renderings are keyed by the event) keeps only it, not
				// the page (a probe's closed subscriptions left 61 MB of
				// pages held by kept events).
				ev := page[i]
				if !emit(&ev) {
					return false
				}
			}
			if all {
				return true
			}
		}
	}
	if replay && !catchUp() {
		exit()
		return
	}
	var batch [32]*events.Event
	for {
		st.mu.Lock()
		if ctx.Err() != nil {
			st.mu.Unlock()
			exit()
			return
		}
		n, behind := st.take(&sub.next, batch[:])
		if n == 0 && !behind {
			// Caught up: the stream hands it events again.
			sub.pumping = false
			st.live[sub] = struct{}{}
			st.mu.Unlock()
			return
		}
		st.mu.Unlock()
		if behind {
			// The ring moved past this subscriber: the outbox has what it
			// lost, and the ring has everything from the new mark on (the
			// overlap is skipped by position).
			h.catchUps.Add(1)
			if !catchUp() {
				exit()
				return
			}
			continue
		}
		for _, ev := range batch[:n] {
			if sub.matches(ev) && !emit(ev) {
				exit()
				return
			}
		}
		clear(batch[:n])
	}
}

// bounded is the first events of page whose data stays within limit bytes
// (at least one), in an array of their own when it cuts, so the rest is
// not held.
func bounded(page []events.Event, limit int) []events.Event {
	size := 0
	for i := range page {
		size += len(page[i].Data)
		if i > 0 && size > limit {
			return slices.Clone(page[:i])
		}
	}
	return page
}

// SlowConsumer is the error of a subscriber that did not keep up.
func slowConsumer(tenantID string, last uint64) error {
	e := errs.E(errs.Unavailable, "the subscriber did not keep up with its events; resubscribe with after set to the last eventId received").
		With("reason", "slow-consumer")
	if last > 0 {
		e = e.With("lastEventId", events.EncodeID(tenantID, last))
	}
	return e
}

// --- streams ------------------------------------------------------------

// stream reads one tenant's events for every subscriber of this replica.
type stream struct {
	h      *Hub
	tenant string
	wakeC  chan struct{}

	mu   sync.Mutex
	pos  uint64                     // the number of the last event read
	subs int                        // every subscription, live or pumping
	live map[*Subscription]struct{} // those the stream hands events to
	ring []*events.Event            // the event of sequence k is ring[k%len(ring)]
	head uint64                     // the sequence of the next event appended
}

// join adds a subscriber to its tenant's stream, starting the stream when
// there is none, and returns the stream's position and the ring sequence of
// the next event: every event after the position is appended from that
// sequence on. Under h.mu, so a stream that is ending (no subscribers) is
// never joined.
func (h *Hub) join(ctx context.Context, sub *Subscription) (*stream, uint64, uint64, error) {
	tenantID := sub.filter.Load().TenantID
	h.mu.Lock()
	s := h.streams[tenantID]
	if s != nil {
		defer h.mu.Unlock()
		pos, next := s.add()
		return s, pos, next, nil
	}
	h.mu.Unlock()
	// A new stream starts after the tenant's last numbered event: every
	// event up to it is the past, every later one is yet to come.
	x, err := events.Last(ctx, h.db, tenantID)
	if err != nil {
		return nil, 0, 0, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if s := h.streams[tenantID]; s != nil {
		pos, next := s.add()
		return s, pos, next, nil
	}
	s = &stream{h: h, tenant: tenantID, wakeC: make(chan struct{}, 1), pos: x,
		ring: make([]*events.Event, h.cfg.Buffer), live: map[*Subscription]struct{}{}}
	h.streams[tenantID] = s
	pos, next := s.add()
	s.start()
	return s, pos, next, nil
}

// add counts a subscriber in and returns the stream's position and the
// sequence of the next event.
func (s *stream) add() (uint64, uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.subs++
	return s.pos, s.head
}

// finish ends a subscription (under s.mu): it leaves the stream and its
// channel closes after what it holds. Only the stream (under s.mu) and the
// subscription's pump send on the channel, and a pump finishes the
// subscription itself, so nothing sends after the close.
func (s *stream) finish(sub *Subscription) {
	if sub.closed {
		return
	}
	sub.closed, sub.pumping = true, false
	delete(s.live, sub)
	close(sub.c)
	sub.ready(nil)
	s.subs--
	if s.subs == 0 {
		s.poke() // lets run notice it has no subscribers left
	}
}

// fill hands a live subscription the ring's events from sub.next on without
// waiting (under s.mu); true says it needs a pump: its channel is full or
// it is further behind than the ring.
func (s *stream) fill(sub *Subscription) bool {
	size := uint64(len(s.ring))
	for sub.next < s.head {
		if sub.next+size < s.head {
			return true
		}
		ev := s.ring[sub.next%size]
		if sub.matches(ev) && sub.last < ev.Seq {
			select {
			case sub.c <- ev:
				sub.last = ev.Seq
				sub.ready(ev)
			default:
				return true
			}
		}
		sub.next++
	}
	return false
}

// take copies the ring's events from sequence *next on into batch and
// advances *next (under s.mu). behind says the ring no longer holds *next:
// *next moves to the ring's head, and the caller reads what it lost from
// the outbox.
func (s *stream) take(next *uint64, batch []*events.Event) (n int, behind bool) {
	if *next+uint64(len(s.ring)) < s.head {
		*next = s.head
		return 0, true
	}
	for n < len(batch) && *next < s.head {
		batch[n] = s.ring[*next%uint64(len(s.ring))]
		n++
		*next++
	}
	return n, false
}

func (s *stream) poke() {
	select {
	case s.wakeC <- struct{}{}:
	default:
	}
}

// start runs the stream's loop on a goroutine of its own; a panic in it is
// logged and the loop starts again (its state is the stream's, kept under
// its lock).
func (s *stream) start() {
	safe.Go(context.Background(), s.h.log, "event stream "+s.tenant, s.run, s.start)
}

func (s *stream) run() {
	h := s.h
	poll := time.NewTimer(h.cfg.Poll)
	defer poll.Stop()
	for {
		select {
		case <-s.wakeC:
		case <-poll.C:
		}
		// No subscribers left: the stream ends (a new one starts at the
		// horizon when a subscriber comes back).
		h.mu.Lock()
		s.mu.Lock()
		if s.subs == 0 {
			delete(h.streams, s.tenant)
			s.mu.Unlock()
			h.mu.Unlock()
			return
		}
		s.mu.Unlock()
		h.mu.Unlock()
		s.read()
		poll.Reset(h.cfg.Poll)
	}
}

// deliver appends a page read from the stream's position on to the ring
// and hands it to the live subscribers (under s.mu). Reads may overlap
// (the stream's own and the hub's batched one): a page holds consecutive
// numbers from where its read began, and only those after the stream's
// position are appended, so nothing is appended twice or skipped.
func (s *stream) deliver(page []events.Event) {
	h := s.h
	s.mu.Lock()
	defer s.mu.Unlock()
	added := false
	for i := range page {
		if page[i].Seq <= s.pos {
			continue
		}
		s.ring[s.head%uint64(len(s.ring))] = &page[i]
		s.head++
		s.pos = page[i].Seq
		added = true
	}
	if !added {
		return
	}
	for sub := range s.live {
		if s.fill(sub) {
			delete(s.live, sub)
			sub.pumping = true
			h.startPump(sub, false)
		}
	}
}

// read hands every new event of the tenant to its subscribers.
func (s *stream) read() int {
	h := s.h
	total := 0
	for {
		s.mu.Lock()
		pos := s.pos
		s.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		page, err := events.Page(ctx, h.db, events.Filter{TenantID: s.tenant}, pos, h.cfg.Page)
		cancel()
		h.reads.Add(1)
		if err != nil {
			h.log.Warn("event stream read", "tenant", s.tenant, "err", err)
			return total
		}
		s.deliver(page)
		total += len(page)
		if len(page) < h.cfg.Page {
			return total
		}
	}
}
