package events_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"regexp"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/events"
	"github.com/bettercompute/computed/internal/testkit"
	"github.com/bettercompute/computed/internal/testkit/wait"
)

func TestMain(m *testing.M) { testkit.Main(m) }

var idRe = regexp.MustCompile(`^evt_[0-9a-hjkmnp-tv-z]{26,52}$`)

func TestEncodeDecodeOrder(t *testing.T) {
	positions := []events.Position{
		{0, 0}, {0, 1}, {0, 31}, {0, 32}, {1, 0}, {1, math.MaxUint64}, {2, 0}, {1 << 32, 5},
		{math.MaxUint64 - 1, math.MaxUint64}, {math.MaxUint64, 0}, {math.MaxUint64, math.MaxUint64},
	}
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 2000; i++ {
		positions = append(positions, events.Position{XID: r.Uint64() >> r.IntN(64), Seq: r.Uint64() >> r.IntN(64)})
	}
	for _, p := range positions {
		id := events.EncodeID(p)
		if !idRe.MatchString(id) || len(id) != 30 {
			t.Fatalf("%v encodes to %q", p, id)
		}
		back, err := events.DecodeID(id)
		if err != nil || back != p {
			t.Fatalf("%v -> %q -> %v, %v", p, id, back, err)
		}
	}
	sort.Slice(positions, func(i, j int) bool { return positions[i].Less(positions[j]) })
	for i := 1; i < len(positions); i++ {
		a, b := events.EncodeID(positions[i-1]), events.EncodeID(positions[i])
		if positions[i-1] != positions[i] && !(a < b) {
			t.Fatalf("string order differs from stream order: %v %q, %v %q", positions[i-1], a, positions[i], b)
		}
	}
	if events.EncodeID(events.Position{XID: 1, Seq: 2}) != "evt_0000000000000g000000000002" {
		t.Fatalf("known value: %s", events.EncodeID(events.Position{XID: 1, Seq: 2}))
	}
	for _, bad := range []string{"", "evt_", "evt_0000000000000000000000000", "evt_000000000000000000000000001", "evt_0000000000000000000000000i",
		"evt_8000000000000000000000000", "evt_80000000000000000000000000", "inst_00000000000000000000000000"} {
		if _, err := events.DecodeID(bad); err == nil {
			t.Fatalf("DecodeID(%q) accepted", bad)
		}
	}
}

// TestConcurrentWritersReaderMissesNothing: writer goroutines commit (and
// roll back) events, some holding their transactions open for a while, so
// commits happen out of xid order; a reader pages behind them with a cursor.
// It must see every committed event exactly once, in increasing id order,
// and nothing rolled back.
func TestConcurrentWritersReaderMissesNothing(t *testing.T) {
	d := testkit.DB(t)
	ctx := context.Background()
	if _, err := d.Exec(`INSERT INTO tenants (tenant_id, name) VALUES ('acme', 'Acme')`); err != nil {
		t.Fatal(err)
	}
	const writers, txs = 8, 25
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
					n := 1 + r.IntN(3)
					for k := 0; k < n; k++ {
						name := fmt.Sprintf("w%d-t%d-e%d", w, i, k)
						if err := events.Write(ctx, tx, events.Record{Type: events.Created, TenantID: "acme", PoolID: "pool_x",
							InstanceID: name, State: "pending", DesiredState: "running", Instance: json.RawMessage(`{}`)}); err != nil {
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
	var after events.Position
	last := ""
	read := func() int {
		page, err := events.Page(ctx, d, events.Filter{TenantID: "acme"}, after, 7)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range page {
			if e.EventID <= last {
				t.Fatalf("event %s after %s: out of order", e.EventID, last)
			}
			if seen[e.InstanceID] {
				t.Fatalf("event %s (%s) seen twice", e.EventID, e.InstanceID)
			}
			seen[e.InstanceID] = true
			last, after = e.EventID, e.Position
		}
		return len(page)
	}
	// The reader pages behind the writers while they write, then reads
	// what is left.
	wait.Eventually(t, 2*time.Minute, func() error {
		select {
		case <-done:
			return nil
		default:
		}
		for read() > 0 {
		}
		return errors.New("the writers are still writing")
	})
	for read() > 0 {
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
	t.Logf("%d events read in order by a reader paging behind %d writers", len(seen), writers)
}

// TestPruneAndExpiredCursor: pruning deletes a prefix of the stream and
// records it; a cursor before it is expired, one at it is not.
func TestPruneAndExpiredCursor(t *testing.T) {
	d := testkit.DB(t)
	ctx := context.Background()
	if _, err := d.Exec(`INSERT INTO tenants (tenant_id, name) VALUES ('acme', 'Acme')`); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		if err := d.Tx(ctx, func(tx *sqlx.Tx) error {
			return events.Write(ctx, tx, events.Record{Type: events.Created, TenantID: "acme", PoolID: "p", InstanceID: fmt.Sprint(i),
				State: "pending", DesiredState: "running", Instance: json.RawMessage(`{}`)})
		}); err != nil {
			t.Fatal(err)
		}
	}
	all, err := events.Page(ctx, d, events.Filter{TenantID: "acme"}, events.Position{}, 100)
	if err != nil || len(all) != 5 {
		t.Fatalf("%d events, %v", len(all), err)
	}
	// The first three are old.
	if _, err := d.Exec(`UPDATE instance_events SET occurred_at = now() - interval '8 days' WHERE instance_id IN ('0', '1', '2')`); err != nil {
		t.Fatal(err)
	}
	n, err := events.Prune(ctx, d, time.Now().Add(-7*24*time.Hour))
	if err != nil || n != 3 {
		t.Fatalf("pruned %d, %v", n, err)
	}
	if err := events.CheckCursor(ctx, d, all[1].Position); err == nil {
		t.Fatal("a cursor before the pruned position is not expired")
	} else if e, _ := errs.As(err); e.Code != errs.InvalidState || e.Details["reason"] != "expired-cursor" {
		t.Fatalf("expired cursor error: %v", err)
	}
	for _, ok := range []events.Position{{}, all[2].Position, all[4].Position} {
		if err := events.CheckCursor(ctx, d, ok); err != nil {
			t.Fatalf("cursor %v: %v", ok, err)
		}
	}
	rest, _ := events.Page(ctx, d, events.Filter{TenantID: "acme"}, events.Position{}, 100)
	if len(rest) != 2 || rest[0].EventID != all[3].EventID {
		t.Fatalf("after pruning: %v", rest)
	}
	// Pruning again with nothing old moves nothing.
	if n, err := events.Prune(ctx, d, time.Now().Add(-7*24*time.Hour)); err != nil || n != 0 {
		t.Fatalf("second prune: %d %v", n, err)
	}
}
