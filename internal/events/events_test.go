package events_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/events"
	"github.com/bettercompute/computed/internal/page"
	"github.com/bettercompute/computed/internal/store"
	"github.com/bettercompute/computed/internal/testkit"
	"github.com/bettercompute/computed/internal/testkit/wait"
)

func TestMain(m *testing.M) { testkit.Main(m) }

var idRe = regexp.MustCompile(`^evt_[ghjkmnpq][0-9a-hjkmnp-tv-z]{25}$`)

func TestEncodeDecodeOrder(t *testing.T) {
	seqs := []uint64{0, 1, 31, 32, 1 << 32, math.MaxUint64 - 1, math.MaxUint64}
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 2000; i++ {
		seqs = append(seqs, r.Uint64()>>r.IntN(64))
	}
	for _, tenant := range []string{"acme", "globex", "a", "x:y.z-1"} {
		for _, seq := range seqs {
			id := events.EncodeID(tenant, seq)
			if !idRe.MatchString(id) || len(id) != 30 {
				t.Fatalf("%s %d encodes to %q", tenant, seq, id)
			}
			back, err := events.DecodeID(tenant, id)
			if err != nil || back != seq {
				t.Fatalf("%d -> %q -> %d, %v", seq, id, back, err)
			}
		}
		sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
		for i := 1; i < len(seqs); i++ {
			a, b := events.EncodeID(tenant, seqs[i-1]), events.EncodeID(tenant, seqs[i])
			if seqs[i-1] != seqs[i] && !(a < b) {
				t.Fatalf("string order differs from stream order: %d %q, %d %q", seqs[i-1], a, seqs[i], b)
			}
		}
	}
	// The same number with bit 129 clear and bit 128 set (first character
	// 8-f instead of g-q) is no id: ids have one spelling.
	good := events.EncodeID("acme", 1)
	alias := "evt_" + string("0123456789abcdefghjkmnpqrstvwxyz"[strings.IndexByte("0123456789abcdefghjkmnpqrstvwxyz", good[4])-8]) + good[5:]
	if _, err := events.ParseCursor("after", "acme", alias); errs.CodeOf(err) != errs.InvalidInput {
		t.Fatalf("alias %s of %s: %v", alias, good, err)
	}
	// Number 0 is never an event's: its id is the stream's start (what
	// Tenant.events answers as the end of an empty stream's empty page).
	if seq, err := events.ParseCursor("after", "acme", events.EncodeID("acme", 0)); err != nil || seq != 0 {
		t.Fatalf("event number 0: %d %v", seq, err)
	}
	// Another tenant's id is INVALID_INPUT, never a position in this stream.
	if _, err := events.ParseCursor("after", "acme", events.EncodeID("globex", 5)); errs.CodeOf(err) != errs.InvalidInput {
		t.Fatalf("another tenant's cursor: %v", err)
	}
	// An id of the old outbox ((xid, seq), first character 0-7) is an
	// expired cursor.
	for _, legacy := range []string{"evt_0000000000000g000000000002", "evt_00000000000h3k00000000004x", "evt_7zzzzzzzzzzzzzzzzzzzzzzzzz"} {
		_, err := events.ParseCursor("after", "acme", legacy)
		if e, ok := errs.As(err); !ok || e.Code != errs.InvalidState || e.Details["reason"] != "expired-cursor" || e.Details["path"] != "after" {
			t.Fatalf("legacy cursor %s: %v", legacy, err)
		}
	}
	// A cursor past page.MaxCursor is refused in the words of the method
	// surface's bound, wherever it is read (a subscription's after, an
	// event stream's Last-Event-ID, events.list's cursor): they said "not
	// an event id" where events.list said "longer than".
	for _, path := range []string{"after", "Last-Event-ID"} {
		long := "evt_" + strings.Repeat("g", page.MaxCursor-3)
		_, err := events.ParseCursor(path, "acme", long)
		_, anyErr := events.ParseAnyCursor(path, long)
		for _, err := range []error{err, anyErr} {
			if e, ok := errs.As(err); !ok || e.Code != errs.InvalidInput || e.Message != path+" is longer than 256 characters" || e.Details["path"] != path {
				t.Fatalf("%s of %d characters: %v", path, len(long), err)
			}
		}
		_, err = events.ParseCursor(path, "acme", long[1:]) // at the bound: read, and no event id
		if e, ok := errs.As(err); !ok || e.Message != path+" is not an event id this server returned" {
			t.Fatalf("%s of %d characters: %v", path, len(long)-1, err)
		}
	}
	for _, bad := range []string{"", "evt_", "evt_0000000000000000000000000", "evt_000000000000000000000000001", "evt_0000000000000000000000000i",
		"evt_8000000000000000000000000", "evt_80000000000000000000000000", "evt_z0000000000000000000000000", "inst_00000000000000000000000000",
		"evt_h000000000000000000000000\xff"} {
		if _, err := events.DecodeID("acme", bad); err == nil {
			t.Fatalf("DecodeID(%q) accepted", bad)
		}
	}
}

func write(ctx context.Context, q store.Q, tenant, name string) error {
	return events.Write(ctx, q, events.Record{Type: events.NodeUpdated, TenantID: tenant, PoolID: "pool_x", ResourceID: name,
		Data: map[string]string{"name": name}})
}

// TestConcurrentWritersReadersSeeAPrefix: writer goroutines of three
// tenants commit (and roll back) events with random delays inside their
// transactions, so transactions commit out of xid order, while an
// unrelated transaction with an xid is held open for the whole test.
// Readers page behind them per tenant. Each must see every committed
// event of its tenant exactly once, nothing rolled back, and numbers
// 1, 2, 3, ... without a hole: a hole would be an event that became
// readable after one sorting after it (a reader would have skipped it).
func TestConcurrentWritersReadersSeeAPrefix(t *testing.T) {
	d := testkit.DB(t)
	ctx := store.ForRequest(context.Background()) // a client's request: Tx returns once its events are numbered
	// The unrelated transaction: the old outbox stalled every reader
	// behind it.
	hold, err := d.BeginTxx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Rollback() //nolint:errcheck
	if _, err := hold.Exec(`SELECT pg_current_xact_id()`); err != nil {
		t.Fatal(err)
	}
	tenants := []string{"acme", "globex", "initech"}
	const writers, txs = 12, 20
	var mu sync.Mutex
	committed := map[string]bool{}
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 7))
			for i := 0; i < txs; i++ {
				var names []string
				rollback := r.IntN(6) == 0
				err := d.Tx(ctx, func(tx *sqlx.Tx) error {
					names = names[:0]
					n := 1 + r.IntN(3)
					for k := 0; k < n; k++ {
						tenant := tenants[(w+k)%len(tenants)]
						name := fmt.Sprintf("%s/w%d-t%d-e%d", tenant, w, i, k)
						if err := write(ctx, tx, tenant, name); err != nil {
							return err
						}
						names = append(names, name)
						if r.IntN(4) == 0 {
							time.Sleep(time.Duration(r.IntN(20)) * time.Millisecond)
						}
					}
					// Some transactions stay open long after writing, so
					// later transactions commit before them.
					if r.IntN(8) == 0 {
						time.Sleep(time.Duration(50+r.IntN(150)) * time.Millisecond)
					}
					// Some commits take longer than events' commit margin
					// after their events' inserts (a slow flush, say): the
					// next pass of their tenants reads their inboxes whole.
					if r.IntN(10) == 0 {
						if err := store.ExecAtCommit(ctx, tx, `SELECT pg_sleep(0.3)`); err != nil {
							return err
						}
					}
					if rollback {
						return errs.E(errs.Conflict, "deliberate rollback")
					}
					return nil
				})
				if rollback {
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for _, n := range names {
					committed[n] = true
				}
				mu.Unlock()
			}
		}(w)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()

	seen := map[string]bool{}
	after := map[string]uint64{}
	read := func(tenant string) int {
		page, err := events.Page(ctx, d, events.Filter{TenantID: tenant}, after[tenant], 7)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range page {
			if e.Seq != after[tenant]+1 {
				t.Fatalf("%s: event %d after %d: a hole in the stream", tenant, e.Seq, after[tenant])
			}
			if e.EventID != events.EncodeID(tenant, e.Seq) || e.TenantID != tenant {
				t.Fatalf("%s: event %+v", tenant, e)
			}
			if seen[e.ResourceID] {
				t.Fatalf("event %s (%s) seen twice", e.EventID, e.ResourceID)
			}
			seen[e.ResourceID] = true
			after[tenant] = e.Seq
		}
		return len(page)
	}
	readAll := func() (n int) {
		for _, tenant := range tenants {
			n += read(tenant)
		}
		return n
	}
	// The readers page behind the writers while they write, then read
	// what is left.
	wait.Eventually(t, 2*time.Minute, func() error {
		select {
		case <-done:
			return nil
		default:
		}
		for readAll() > 0 {
		}
		return errors.New("the writers are still writing")
	})
	// Every writer's Tx has returned: its events are numbered.
	for readAll() > 0 {
	}
	if t.Failed() {
		return
	}
	for n := range committed {
		if !seen[n] {
			t.Fatalf("committed event %s never read", n)
		}
	}
	for n := range seen {
		if !committed[n] {
			t.Fatalf("read event %s that was not committed", n)
		}
	}
	if len(committed) < writers*txs/2 {
		t.Fatalf("only %d events committed", len(committed))
	}
	t.Logf("%d events of %d tenants read in order by readers paging behind %d writers, an unrelated transaction open throughout",
		len(seen), len(tenants), writers)
}

// TestReadableAtCommitDespiteOpenTransaction: an event is readable when the
// write's transaction returns, while a transaction in another database of
// the cluster holds an xid (the old outbox's readers waited for it).
func TestReadableAtCommitDespiteOpenTransaction(t *testing.T) {
	d, other := testkit.DB(t), testkit.DB(t)
	ctx := store.ForRequest(context.Background()) // a client's request: Tx returns once its events are numbered
	hold, err := other.BeginTxx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Rollback() //nolint:errcheck
	if _, err := hold.Exec(`SELECT pg_current_xact_id()`); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		name := fmt.Sprintf("n%d", i)
		if err := d.Tx(ctx, func(tx *sqlx.Tx) error { return write(ctx, tx, "acme", name) }); err != nil {
			t.Fatal(err)
		}
		page, err := events.Page(ctx, d, events.Filter{TenantID: "acme"}, uint64(i), 10)
		if err != nil || len(page) != 1 || page[0].ResourceID != name || page[0].Seq != uint64(i+1) {
			t.Fatalf("after the write of %s: %+v, %v", name, page, err)
		}
	}
}

// TestStrandedInboxRowsAreNumbered: rows a writer committed without its
// replica numbering them (it died in between) are numbered by any
// replica's sweep.
func TestStrandedInboxRowsAreNumbered(t *testing.T) {
	d := testkit.DB(t)
	ctx := store.ForRequest(context.Background()) // a client's request: Tx returns once its events are numbered
	// A statement on the pool itself (no DB.Tx): nothing tells the
	// sequencer, as when the writer's replica died after its commit.
	if _, err := d.DB.ExecContext(ctx, `INSERT INTO event_inbox (tenant_id, ord, type, resource_type, resource_id, data, occurred_at)
		VALUES ('acme', 1, 'node.updated', 'node', 'node_1', '{}', now() - interval '1 minute')`); err != nil {
		t.Fatal(err)
	}
	wait.Eventually(t, 10*time.Second, func() error {
		page, err := events.Page(ctx, d, events.Filter{TenantID: "acme"}, 0, 10)
		if err != nil {
			return err
		}
		if len(page) != 1 {
			return fmt.Errorf("the stranded inbox row is not numbered (%d events)", len(page))
		}
		return nil
	})
}

// firstAndLate numbers acme's first event, then adds a row inserted a
// second before that event's insert and committed only now: its commit
// took a second. Its occurred_at (its transaction's start) is in the
// future so that the sweep, which looks for rows that occurred seconds
// ago, leaves it to the passes of the test.
func firstAndLate(t *testing.T, ctx context.Context, d *store.DB) {
	t.Helper()
	if err := d.Tx(ctx, func(tx *sqlx.Tx) error { return write(ctx, tx, "acme", "first") }); err != nil {
		t.Fatal(err)
	}
	if _, err := d.DB.ExecContext(ctx, `INSERT INTO event_inbox (tenant_id, ord, type, resource_type, resource_id, data, occurred_at, inserted_at)
		SELECT 'acme', 1, 'node.updated', 'node', 'late', '{}', now() + interval '1 hour', inserted_at - interval '1 second'
		FROM events WHERE tenant_id = 'acme'`); err != nil {
		t.Fatal(err)
	}
}

// TestPassReadsFromTheTenantsLastEvent: a pass reads a tenant's inbox
// from its last event's insert minus the commit margin, so that the rows
// passes moved (dead until no snapshot can see them) are not read again
// and again while a snapshot is held (migration 00016); a commit that took
// longer than the margin has the next pass read the tenant's inbox whole.
func TestPassReadsFromTheTenantsLastEvent(t *testing.T) {
	d := testkit.DB(t)
	ctx := store.ForRequest(context.Background()) // a client's request: Committed returns once its pass has run
	firstAndLate(t, ctx, d)
	seq := events.Start(d, nil) // the running one
	names := func() string {
		page, err := events.Page(ctx, d, events.Filter{TenantID: "acme"}, 0, 10)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range page {
			out = append(out, fmt.Sprintf("%d:%s", e.Seq, e.ResourceID))
		}
		return strings.Join(out, " ")
	}
	// Told of a quick commit, the pass reads from the first event's insert
	// minus the margin, after the row.
	seq.Committed(ctx, []string{"acme"}, time.Millisecond)
	if got := names(); got != "1:first" {
		t.Fatalf("after a pass told of a quick commit: %s, want 1:first (the row inserted before its window left)", got)
	}
	wholes := seq.Wholes()
	// Told the truth, the next pass reads the inbox whole.
	seq.Committed(ctx, []string{"acme"}, time.Second)
	if got := names(); got != "1:first 2:late" {
		t.Fatalf("after a pass told of a slow commit: %s, want 1:first 2:late", got)
	}
	if seq.Wholes() == wholes {
		t.Fatal("the pass after a slow commit did not read the inbox whole")
	}
}

// A background writer (the reconciler) whose commit was slow goes on only
// once the whole pass it marked has numbered its events: a later step of
// its own, committed after, would otherwise be numbered first by a pass
// reading from a later event's insert minus the margin.
func TestSlowBackgroundCommitWaitsForItsNumbers(t *testing.T) {
	d := testkit.DB(t)
	req := store.ForRequest(context.Background())
	firstAndLate(t, req, d)
	seq := events.Start(d, nil)
	seq.Committed(context.Background(), []string{"acme"}, time.Second) // not a request
	page, err := events.Page(req, d, events.Filter{TenantID: "acme"}, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(page) != 2 || page[1].ResourceID != "late" {
		t.Fatalf("a slow background commit went on with %d events numbered", len(page))
	}
}

// TestFilter: types by exact name and by prefix, resources, pool.
func TestFilter(t *testing.T) {
	d := testkit.DB(t)
	ctx := store.ForRequest(context.Background()) // a client's request: Tx returns once its events are numbered
	recs := []events.Record{
		{TenantID: "acme", Type: events.NodeCordoned, ResourceID: "node_1", PoolID: "pool_a", Data: map[string]int{}},
		{TenantID: "acme", Type: events.InventoryChanged, ResourceID: "node_1", PoolID: "pool_a", Data: map[string]int{}},
		{TenantID: "acme", Type: events.Created, ResourceID: "inst_1", PoolID: "pool_b", Data: map[string]string{"state": "pending", "desiredState": "running"}},
		{TenantID: "acme", Type: events.WorkflowStep, ResourceID: "wf_1", Data: map[string]int{}},
		{TenantID: "globex", Type: events.NodeCordoned, ResourceID: "node_9", Data: map[string]int{}},
	}
	if err := d.Tx(ctx, func(tx *sqlx.Tx) error {
		for _, r := range recs {
			if err := events.Write(ctx, tx, r); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		f    events.Filter
		want []string
	}{
		{events.Filter{TenantID: "acme"}, []string{events.NodeCordoned, events.InventoryChanged, events.Created, events.WorkflowStep}},
		{events.Filter{TenantID: "acme", Types: []string{"node."}}, []string{events.NodeCordoned}},
		{events.Filter{TenantID: "acme", Types: []string{"node.", events.WorkflowStep}}, []string{events.NodeCordoned, events.WorkflowStep}},
		{events.Filter{TenantID: "acme", Resources: []string{events.ResNode}}, []string{events.NodeCordoned, events.InventoryChanged}},
		{events.Filter{TenantID: "acme", PoolID: "pool_b"}, []string{events.Created}},
		{events.Filter{TenantID: "acme", ResourceID: "node_1", Types: []string{events.InventoryChanged}}, []string{events.InventoryChanged}},
		{events.Filter{TenantID: "acme", Resources: []string{}}, nil},
		{events.Filter{TenantID: "globex"}, []string{events.NodeCordoned}},
	}
	for i, c := range cases {
		page, err := events.Page(ctx, d, c.f, 0, 100)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range page {
			got = append(got, e.Type)
			if !c.f.Matches(&e) {
				t.Fatalf("case %d: Matches refuses %s, which the SQL kept", i, e.Type)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Fatalf("case %d: %v, want %v", i, got, c.want)
		}
	}
}

// TestPruneAndExpiredCursor: pruning deletes a prefix of each stream and
// records it; a cursor before it is expired, one at it is not.
func TestPruneAndExpiredCursor(t *testing.T) {
	d := testkit.DB(t)
	ctx := store.ForRequest(context.Background()) // a client's request: Tx returns once its events are numbered
	for i := 0; i < 5; i++ {
		if err := d.Tx(ctx, func(tx *sqlx.Tx) error { return write(ctx, tx, "acme", fmt.Sprint(i)) }); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Tx(ctx, func(tx *sqlx.Tx) error { return write(ctx, tx, "globex", "g") }); err != nil {
		t.Fatal(err)
	}
	all, err := events.Page(ctx, d, events.Filter{TenantID: "acme"}, 0, 100)
	if err != nil || len(all) != 5 {
		t.Fatalf("%d events, %v", len(all), err)
	}
	// The first three are old.
	if _, err := d.Exec(`UPDATE events SET occurred_at = now() - interval '8 days' WHERE resource_id IN ('0', '1', '2')`); err != nil {
		t.Fatal(err)
	}
	n, err := events.Prune(ctx, d, time.Now().Add(-7*24*time.Hour))
	if err != nil || n != 3 {
		t.Fatalf("pruned %d, %v", n, err)
	}
	if err := events.CheckCursor(ctx, d, "cursor", "acme", all[1].Seq); err == nil {
		t.Fatal("a cursor before the pruned position is not expired")
	} else if e, _ := errs.As(err); e.Code != errs.InvalidState || e.Details["reason"] != "expired-cursor" || e.Details["path"] != "cursor" {
		t.Fatalf("expired cursor error: %v", err)
	}
	for _, ok := range []uint64{all[2].Seq, all[4].Seq} {
		if err := events.CheckCursor(ctx, d, "cursor", "acme", ok); err != nil {
			t.Fatalf("cursor %v: %v", ok, err)
		}
	}
	// The stream's start (the id of 0), given as a cursor, is overtaken
	// once anything was pruned, as on every surface (no cursor is not
	// checked: it starts at the oldest retained event).
	if err := events.CheckCursor(ctx, d, "cursor", "acme", 0); errs.CodeOf(err) != errs.InvalidState {
		t.Fatalf("the start of a pruned stream: %v", err)
	}
	// A number past the stream's end was never returned: reading on from
	// it would skip what comes next (2^63 and past: no wrap).
	for _, ahead := range []uint64{6, 1024, 1 << 63, math.MaxUint64} {
		if err := events.CheckCursor(ctx, d, "cursor", "acme", ahead); errs.CodeOf(err) != errs.InvalidInput {
			t.Fatalf("cursor %d past the end (5): %v", ahead, err)
		}
	}
	if err := events.CheckCursor(ctx, d, "cursor", "nobody", 1); errs.CodeOf(err) != errs.InvalidInput {
		t.Fatalf("a cursor of a stream with no events: %v", err)
	}
	// Another tenant's stream is its own: nothing of it was pruned.
	if err := events.CheckCursor(ctx, d, "cursor", "globex", 1); err != nil {
		t.Fatal(err)
	}
	rest, _ := events.Page(ctx, d, events.Filter{TenantID: "acme"}, 0, 100)
	if len(rest) != 2 || rest[0].EventID != all[3].EventID {
		t.Fatalf("after pruning: %v", rest)
	}
	// Pruning again with nothing old moves nothing.
	if n, err := events.Prune(ctx, d, time.Now().Add(-7*24*time.Hour)); err != nil || n != 0 {
		t.Fatalf("second prune: %d %v", n, err)
	}
}

// TestStalledPassReleasesItsStreams: a replica stopped in the middle of a
// sequencer pass (SIGSTOP, a partition: its connection open, its client
// silent) holds its tenants' stream rows. PostgreSQL ends the pass's
// session after passIdle, and another replica numbers the tenant's events
// (the stalled replica's by its sweep), long before the stalled one
// returns; without that bound the stream stayed frozen for as long as the
// replica stayed stopped, on every replica.
func TestStalledPassReleasesItsStreams(t *testing.T) {
	ctx := store.ForRequest(context.Background())
	// Replica a leads (its sequencer numbers every replica's events, and
	// its passes are the ones that stall); replica b forwards to it until
	// a stops answering, then numbers its own.
	dbURL, a, _, proxy := leaderBehindProxy(t)
	b, _ := replica(t, dbURL, "replica-b")

	if err := b.Tx(ctx, func(tx *sqlx.Tx) error { return write(ctx, tx, "acme", "node_1") }); err != nil {
		t.Fatal(err)
	}
	// The test holds acme's stream row, so a's pass waits for it inside
	// its transaction.
	lock, err := b.BeginTxx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback() //nolint:errcheck // released below
	if _, err := lock.Exec(`SELECT 1 FROM event_streams WHERE tenant_id = 'acme' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	// A background writer on a: it does not wait for its pass.
	if err := a.Tx(context.Background(), func(tx *sqlx.Tx) error { return write(context.Background(), tx, "acme", "node_2") }); err != nil {
		t.Fatal(err)
	}
	wait.Eventually(t, 10*time.Second, func() error {
		var n int
		if err := b.Get(&n, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'`,
			a.AppName(events.SequencerName)); err != nil {
			return err
		}
		if n != 1 {
			return fmt.Errorf("replica a's pass is not waiting for the stream row (%d)", n)
		}
		return nil
	})
	// Replica a stops answering; the test lets go of the row: a's pass
	// takes it, answers into the frozen connection and waits there, idle in
	// its transaction.
	proxy.Freeze()
	if err := lock.Rollback(); err != nil {
		t.Fatal(err)
	}
	if err := b.Tx(ctx, func(tx *sqlx.Tx) error { return write(ctx, tx, "acme", "node_3") }); err != nil {
		t.Fatal(err)
	}
	wait.Eventually(t, 15*time.Second, func() error {
		page, err := events.Page(ctx, b, events.Filter{TenantID: "acme"}, 0, 10)
		if err != nil {
			return err
		}
		var names []string
		for _, ev := range page {
			names = append(names, ev.ResourceID)
		}
		if len(names) != 3 {
			return fmt.Errorf("acme's stream holds %v while replica a is stopped", names)
		}
		return nil
	})
}

// TestSequencerVacuumsTheInbox: every event is a row inserted into the
// inbox and deleted by its pass, and a pass's DELETE scans the dead rows
// of its tenants until a vacuum removes them. Autovacuum comes once a
// minute at best; the sequencer vacuums the inbox itself once it has
// numbered enough events.
func TestSequencerVacuumsTheInbox(t *testing.T) {
	d := testkit.DB(t)
	ctx := store.ForRequest(context.Background())
	for i := 0; i < 60; i++ {
		if err := d.Tx(ctx, func(tx *sqlx.Tx) error {
			for j := 0; j < 10; j++ {
				if err := write(ctx, tx, fmt.Sprintf("t%d", j%3), fmt.Sprintf("n%d-%d", i, j)); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	// The vacuum itself (PostgreSQL removes what no snapshot can see;
	// vacuum_count counts VACUUM statements, not autovacuum's).
	wait.Eventually(t, 15*time.Second, func() error {
		var n int64
		if err := d.GetContext(ctx, &n, `SELECT vacuum_count FROM pg_stat_user_tables WHERE relname = 'event_inbox'`); err != nil {
			return err
		}
		if n == 0 {
			return errors.New("event_inbox was not vacuumed")
		}
		return nil
	})
}

// TestCausalOrderWithinAPass: a transaction that got its id first, then
// waited for another's commit before writing its event, is numbered after
// that other when one pass moves both: its event was written after the
// other committed. (Numbered by transaction id, it came first.)
func TestCausalOrderWithinAPass(t *testing.T) {
	d := testkit.DB(t)
	ctx := context.Background()
	a, err := d.DB.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := d.DB.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	// Statements on the pool itself (no DB.Tx): the sequencer hears of
	// neither, and its sweep moves both rows in one pass. Their
	// occurred_at is a minute ago, so the sweep takes them at once.
	const insert = `INSERT INTO event_inbox (tenant_id, ord, type, resource_type, resource_id, data, occurred_at)
		VALUES ('acme', 1, 'node.updated', 'node', $1, '{}', now() - interval '1 minute')`
	exec := func(c *sql.Conn, q string, args ...any) {
		t.Helper()
		if _, err := c.ExecContext(ctx, q, args...); err != nil {
			t.Fatal(err)
		}
	}
	exec(a, `BEGIN`)
	exec(a, `SELECT pg_current_xact_id()`) // a's id: the smaller
	exec(b, `BEGIN`)
	exec(b, `SELECT pg_current_xact_id()`)
	exec(b, insert, "node_first")
	exec(b, `COMMIT`)
	exec(a, insert, "node_second") // after b's commit, as a waiter's would be
	exec(a, `COMMIT`)
	wait.Eventually(t, 10*time.Second, func() error {
		page, err := events.Page(ctx, d, events.Filter{TenantID: "acme"}, 0, 10)
		if err != nil {
			return err
		}
		if len(page) != 2 {
			return fmt.Errorf("%d events numbered", len(page))
		}
		if page[0].ResourceID != "node_first" || page[1].ResourceID != "node_second" {
			t.Fatalf("numbered %s then %s", page[0].ResourceID, page[1].ResourceID)
		}
		return nil
	})
}

// A cursor is expired when retention has taken an event after it; the id
// of the last event pruned reads on (nothing after it is gone), and an id
// past the stream's last was never returned.
func TestCursorAgainstTheRetentionMark(t *testing.T) {
	const last, pruned = 40, 30
	for _, c := range []struct {
		after uint64
		want  errs.Code
	}{
		{0, errs.InvalidState}, {1, errs.InvalidState}, {29, errs.InvalidState}, {30, ""}, {31, ""}, {40, ""}, {41, errs.InvalidInput},
	} {
		err := events.CheckCursorOf("cursor", c.after, last, pruned)
		if (err == nil) != (c.want == "") || err != nil && errs.CodeOf(err) != c.want {
			t.Errorf("after %d: %v, want %q", c.after, err, c.want)
		}
	}
	// A stream pruned whole: its last event's id reads on, an earlier one
	// is expired.
	if err := events.CheckCursorOf("cursor", 30, 30, 30); err != nil {
		t.Errorf("the last event of a stream pruned whole: %v", err)
	}
	if err := events.CheckCursorOf("cursor", 29, 30, 30); errs.CodeOf(err) != errs.InvalidState {
		t.Errorf("before the last event of a stream pruned whole: %v", err)
	}
	// The stream's start (the id of 0) reads from the first event while
	// nothing was pruned.
	if err := events.CheckCursorOf("cursor", 0, 40, 0); err != nil {
		t.Errorf("the start of a stream nothing was pruned from: %v", err)
	}
}
