package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/bettercompute/computed/internal/events"
	"github.com/bettercompute/computed/internal/testkit"
	"github.com/bettercompute/computed/internal/testkit/wait"
)

func dialAddr(t *testing.T, addr string) *wsClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws://"+addr+"/graphql", &websocket.DialOptions{Subprotocols: []string{"graphql-transport-ws"}})
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { c.CloseNow() })
	return newWSClient(t, c)
}

// drain reads a subscription's events until the socket closes or quiet
// passes without one; it returns the event ids in order.
func (w *wsClient) drain(id string, quiet time.Duration) (ids []string, closed bool) {
	for {
		m, err := w.read(quiet)
		if errors.Is(err, errQuiet) {
			return ids, false
		}
		if err != nil {
			return ids, true
		}
		switch m["type"] {
		case "ping":
			continue
		case "next":
			p := m["payload"].(map[string]any)
			if p["errors"] != nil || m["id"] != id {
				w.t.Fatalf("unexpected %v", m)
			}
			ids = append(ids, str(p["data"].(map[string]any)["instanceEvents"].(map[string]any)["eventId"]))
		default:
			w.t.Fatalf("unexpected %v", m)
		}
	}
}

// outbox is every event id of the tenant after a cursor, in stream order.
func outbox(t *testing.T, e *testkit.Env, tenant, after string) []string {
	t.Helper()
	pos, err := events.ParseCursor("after", tenant, after)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for {
		page, err := events.Page(context.Background(), e.DB, events.Filter{TenantID: tenant}, pos, 1000)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range page {
			out = append(out, ev.EventID)
		}
		if len(page) < 1000 {
			return out
		}
		pos = page[len(page)-1].Seq
	}
}

// Two (then three) server processes on one PostgreSQL: a subscriber on one
// sees, in order, every event of instances driven through another; when
// its replica is killed it resumes on another from its last cursor and gets
// exactly the events it missed, none twice. A replica that shuts down
// closes its sockets with 1012 (reconnect elsewhere).
func TestSubscriptionsAcrossReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the server binary")
	}
	t.Parallel()
	e := testkit.StartDB(t)
	const token = "bco_subs-replica-operator"
	a := startReplica(t, e.DB.URL, token)
	b := startReplica(t, e.DB.URL, token)
	b.call(t, token, "tenants/create", map[string]any{"tenantId": "acme", "name": "Acme"})
	_, tok := b.call(t, token, "tokens/create", map[string]any{"tenantId": "acme", "name": "ops", "role": "admin"})
	admin := tok["secret"].(string)
	_, p := b.call(t, admin, "pools/create", map[string]any{"tenantId": "acme", "name": "vps", "site": "fra1", "gpuModel": "H100",
		"sharingMode": "exclusive", "kind": "vps-provider", "policy": map[string]any{"sim": map[string]any{"latencyMs": 20}}})
	pool := p["poolId"].(string)
	create := func(r *replica, n int, prefix string) []string {
		ids := make([]string, n)
		var wg sync.WaitGroup
		for k := 0; k < n; k++ {
			wg.Add(1)
			go func(k int) {
				defer wg.Done()
				_, out := r.call(t, admin, "instances/create", instanceIn("acme", pool, fmt.Sprintf("%s-%d", prefix, k), 0))
				ids[k] = out["instanceId"].(string)
			}(k)
		}
		wg.Wait()
		return ids
	}
	start := outbox(t, e, "acme", "")
	cursor := ""
	if len(start) > 0 {
		cursor = start[len(start)-1]
	}

	// Round 1: subscribed on A, driven through B, A is killed mid-stream.
	wa := dialAddr(t, a.addr)
	wa.init(admin)
	wa.subscribe("s", map[string]any{"t": "acme", "a": cursor})
	first := create(b, 15, "one")
	waitAll(t, e, first, "running", 30*time.Second)
	stopAll := func(r *replica, ids []string) {
		for _, id := range ids {
			r.call(t, admin, "instances/stop", map[string]any{"tenantId": "acme", "instanceId": id})
		}
	}
	go stopAll(b, first)
	got, _ := wa.drain("s", 300*time.Millisecond) // some of the stops' events, then A dies
	_ = a.cmd.Process.Kill()
	more, _ := wa.drain("s", 2*time.Second)
	got = append(got, more...)
	waitAll(t, e, first, "stopped", 30*time.Second)
	if len(got) == 0 {
		t.Fatal("the subscriber on A saw nothing")
	}
	// Resume on B from the last event received.
	wb := dialAddr(t, b.addr)
	wb.init(admin)
	wb.subscribe("s", map[string]any{"t": "acme", "a": got[len(got)-1]})
	// Read until the subscriber has what the outbox has after its cursor:
	// events A committed but did not number before it died are numbered
	// by B's sweep about 2 s later, so no quiet period is long enough to
	// stop on (this test once stopped after 2 s of quiet and compared).
	var all, rest []string
	for deadline := time.Now().Add(30 * time.Second); ; {
		more, _ := wb.drain("s", 500*time.Millisecond)
		rest = append(rest, more...)
		all = append(append([]string{}, got...), rest...)
		want := outbox(t, e, "acme", cursor)
		if strings.Join(all, ",") == strings.Join(want, ",") {
			break
		}
		if len(all) > len(want) || !strings.HasPrefix(strings.Join(want, ","), strings.Join(all, ",")) || time.Now().After(deadline) {
			t.Fatalf("across the kill: got %d events, the outbox has %d after the cursor\n got %v\nwant %v", len(all), len(want), all, want)
		}
	}
	t.Logf("round 1: %d events before the kill, %d after resuming on another replica", len(got), len(rest))

	// Round 2: a third replica; subscribed on C while B drives, B is killed.
	c := startReplica(t, e.DB.URL, token)
	last := all[len(all)-1]
	wc := dialAddr(t, c.addr)
	wc.init(admin)
	wc.subscribe("s", map[string]any{"t": "acme", "a": last})
	go func() {
		// B dies while it takes these: errors are expected.
		for _, id := range first {
			body, _ := json.Marshal(map[string]any{"tenantId": "acme", "instanceId": id})
			req, _ := http.NewRequest("POST", "http://"+b.addr+"/api/compute/instances/start", bytes.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+admin)
			if res, err := http.DefaultClient.Do(req); err == nil {
				res.Body.Close()
			}
		}
	}()
	// B is killed once it has taken some of them, while it drives them.
	wait.Eventually(t, 10*time.Second, func() error {
		var n int
		if err := e.DB.QueryRow(`SELECT count(*) FROM instances WHERE instance_id = ANY($1) AND desired_state = 'running'`, first).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return errors.New("B has taken no start yet")
		}
		return nil
	})
	_ = b.cmd.Process.Signal(syscall.SIGKILL)
	seen, _ := wc.drain("s", 3*time.Second)
	// What B committed before it died, and what C's reconciler drove after.
	deadline := time.Now().Add(30 * time.Second)
	for {
		more, _ := wc.drain("s", time.Second)
		seen = append(seen, more...)
		want := outbox(t, e, "acme", last)
		if strings.Join(seen, ",") == strings.Join(want, ",") {
			t.Logf("round 2: %d events on C while B was killed", len(seen))
			break
		}
		if len(seen) > len(want) || time.Now().After(deadline) {
			t.Fatalf("round 2: got %v, the outbox has %v", seen, want)
		}
	}

	// A replica shutting down closes its sockets with 1012.
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	if code, _ := wc.closed(10 * time.Second); code != 1012 {
		t.Fatalf("shutdown: close %d, want 1012", code)
	}
}
