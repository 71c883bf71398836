package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/bettercompute/computed/internal/events"
	"github.com/bettercompute/computed/internal/live"
	"github.com/bettercompute/computed/internal/server"
	"github.com/bettercompute/computed/internal/testkit"
	"github.com/bettercompute/computed/internal/testkit/logbuf"
	"github.com/bettercompute/computed/internal/testkit/wait"
)

// tinyDialer connects with a small receive buffer, so that a client that
// stops reading fills the server's side of the connection after a few
// kilobytes instead of megabytes.
var tinyDialer = &net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
	var serr error
	if err := c.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
	}); err != nil {
		return err
	}
	return serr
}}

// bigEventsSub selects every event's id under n aliases: an event is about
// 40n bytes.
func bigEventsSub(n int) string {
	var b strings.Builder
	b.WriteString(`subscription($t: String!, $a: String) { instanceEvents(tenantId: $t, after: $a) {`)
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, " e%d: eventId", i)
	}
	b.WriteString(" } }")
	return b.String()
}

// publishRunning commits count instance.running events of acme in one
// transaction of its own and tells the sequencer.
func publishRunning(t *testing.T, e *testkit.Env, count int) {
	t.Helper()
	ctx := context.Background()
	tx, err := e.DB.BeginTxx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < count; i++ {
		if err := events.Write(ctx, tx, events.Record{Type: events.Running, TenantID: "acme", PoolID: "pool_x",
			ResourceID: "inst_x", Data: json.RawMessage(`{"state": "running", "desiredState": "running"}`)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	e.DB.Committed(ctx, []string{"acme"}, -1) // a transaction of its own, not DB.Tx: tell the sequencer
}

// firstEventID waits until acme's first event is readable and returns its id.
func firstEventID(t *testing.T, e *testkit.Env) string {
	t.Helper()
	var first []events.Event
	wait.Eventually(t, 10*time.Second, func() error {
		var err error
		if first, err = events.Page(context.Background(), e.DB, events.Filter{TenantID: "acme"}, 0, 1); err != nil {
			t.Fatal(err)
		}
		if len(first) == 0 {
			return errors.New("the events are not readable")
		}
		return nil
	})
	return first[0].EventID
}

// stuckSSE opens an event stream, reads the status line and then reads
// nothing more until drained.
type stuckSSE struct {
	c    net.Conn
	br   *bufio.Reader
	read int // bytes drain read
}

func openStuckSSE(t *testing.T, e *testkit.Env, token, query string, vars map[string]any) *stuckSSE {
	t.Helper()
	addr := strings.TrimPrefix(e.Server.URL, "http://")
	c, err := tinyDialer.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	body, _ := json.Marshal(map[string]any{"query": query, "variables": vars})
	fmt.Fprintf(c, "POST /graphql/stream HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\n"+
		"Accept: text/event-stream\r\nContent-Length: %d\r\n\r\n%s", addr, token, len(body), body)
	br := bufio.NewReaderSize(c, 16)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HTTP/1.1 200") {
		t.Fatalf("event stream: %q %v", line, err)
	}
	return &stuckSSE{c: c, br: br}
}

// drain reads what is left and says whether the server ended the stream
// (EOF) within the deadline, and whether the stream had ended properly
// (a complete event and the final chunk).
func (s *stuckSSE) drain(within time.Duration) (ended bool, tail string, err error) {
	_ = s.c.SetReadDeadline(time.Now().Add(within))
	var last bytes.Buffer
	buf := make([]byte, 64<<10)
	for {
		n, err := s.br.Read(buf)
		s.read += n
		if n > 0 {
			last.Write(buf[:n])
			if last.Len() > 256 {
				b := last.Bytes()[last.Len()-256:]
				last.Reset()
				last.Write(b)
			}
		}
		if errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) {
			return true, last.String(), nil
		}
		if err != nil {
			return false, last.String(), err
		}
	}
}

// A client that stops reading a subscription while its events flow is a
// slow consumer on both transports: its stream is ended within the write
// timeout (plus a keep-alive or ping interval), the server holds a bounded
// amount for it meanwhile, and every other subscriber of the tenant gets
// every event. It used to kill the process: an event stream's keep-alive
// tick, already fired and waiting for the stream's lock while the handler's
// write timed out, wrote to the response after the handler had returned and
// net/http had recycled its buffers (a nil pointer dereference in
// (*sseStream).keepAlive). Keep-alives every 20 ms and a write timeout of
// 300 ms make that race certain in every stuck stream here.
func TestSlowReadersAreEndedAndHarmNoOne(t *testing.T) {
	t.Parallel()
	var logs logbuf.Buffer
	e := testkit.StartWith(t, testkit.Options{Logs: &logs, Config: server.Config{
		WS:   server.WSTimings{PingInterval: 20 * time.Millisecond, WriteTimeout: 300 * time.Millisecond},
		Live: live.Config{Stall: 2 * time.Second},
	}})
	acme := newTenant(t, e, "acme")
	ctx := context.Background()
	// 150 events in the outbox; the subscriptions replay them from the first.
	const n = 150
	publish := func(count int) { publishRunning(t, e, count) }
	publish(n)
	vars := map[string]any{"t": "acme", "a": firstEventID(t, e)}

	// Healthy subscribers on both transports.
	ws := dialWS(t, e)
	ws.init(acme.Viewer.Token)
	ws.send(map[string]any{"id": "ok", "type": "subscribe", "payload": map[string]any{"query": eventsSub, "variables": vars}})
	sse := openSSE(t, e, acme.Viewer.Token, eventsSub, vars)

	// Stuck readers: three event streams and a WebSocket, each asking for
	// about 75 KB per event, 11 MB each in all: more than the kernel buffers
	// on both sides of a connection hold (4 MB on Linux by default). 1900
	// fields: under a subscription's complexity bound of 2000.
	big := bigEventsSub(1900)
	var stuck []*stuckSSE
	for i := 0; i < 3; i++ {
		stuck = append(stuck, openStuckSSE(t, e, acme.Viewer.Token, big, vars))
	}
	hc := &http.Client{Transport: &http.Transport{DialContext: tinyDialer.DialContext}}
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	stuckWS, _, err := websocket.Dial(dctx, "ws"+strings.TrimPrefix(e.Server.URL, "http")+"/graphql",
		&websocket.DialOptions{Subprotocols: []string{"graphql-transport-ws"}, HTTPClient: hc})
	if err != nil {
		t.Fatal(err)
	}
	defer stuckWS.CloseNow()
	stuckWS.SetReadLimit(1 << 20)
	for _, m := range []map[string]any{{"type": "connection_init", "payload": map[string]any{"Authorization": "Bearer " + acme.Viewer.Token}}} {
		b, _ := json.Marshal(m)
		_ = stuckWS.Write(dctx, websocket.MessageText, b)
	}
	for {
		_, b, err := stuckWS.Read(dctx)
		if err != nil {
			t.Fatalf("stuck socket: %v", err)
		}
		if strings.Contains(string(b), "connection_ack") {
			break
		}
	}
	b, _ := json.Marshal(map[string]any{"id": "big", "type": "subscribe", "payload": map[string]any{"query": big, "variables": vars}})
	_ = stuckWS.Write(dctx, websocket.MessageText, b)

	// The healthy ones get every event, in order, while the others stall.
	var wg sync.WaitGroup
	check := func(what string, got []string) {
		if len(got) != n-1 {
			t.Errorf("%s got %d events, want %d", what, len(got), n-1)
		}
		for i := 1; i < len(got); i++ {
			if got[i-1] >= got[i] {
				t.Errorf("%s: events out of order at %d", what, i)
			}
		}
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		var got []string
		for _, ev := range ws.events("ok", n-1) {
			got = append(got, str(ev["eventId"]))
		}
		check("the healthy socket", got)
	}()
	var sseGot []string
	for len(sseGot) < n-1 {
		name, m := sse.next()
		if name != "next" || m["errors"] != nil {
			t.Fatalf("healthy stream: %s %v", name, m)
		}
		sseGot = append(sseGot, str(dig(t, m, "data", "instanceEvents", "eventId")))
	}
	check("the healthy stream", sseGot)
	wg.Wait()

	// The stuck ones are ended: only the two healthy sessions stay.
	wait.Eventually(t, 20*time.Second, func() error {
		if n := e.Srv.Sessions(); n > 2 {
			return fmt.Errorf("%d sessions still open: the stuck readers were not ended", n)
		}
		return nil
	})
	for i, s := range stuck {
		ended, tail, err := s.drain(10 * time.Second)
		if !ended {
			t.Fatalf("stuck stream %d was not ended by the server: %v (last bytes %q)", i, err, tail)
		}
	}
	rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
	defer rcancel()
	for {
		_, _, err := stuckWS.Read(rctx)
		if err == nil {
			continue
		}
		if rctx.Err() != nil {
			t.Fatalf("the stuck socket was not closed by the server")
		}
		break
	}
	// The healthy subscribers are still live, and the server is well.
	publish(1)
	if evs := ws.events("ok", 1); len(evs) != 1 {
		t.Fatalf("healthy socket after the stall: %v", evs)
	}
	if name, m := sse.next(); name != "next" || m["errors"] != nil {
		t.Fatalf("healthy stream after the stall: %s %v", name, m)
	}
	if r := e.Call(acme.Viewer.Token, "tenants/get", map[string]any{"tenantId": "acme"}); r.Status != 200 {
		t.Fatalf("the server after the stall: %d", r.Status)
	}
	if strings.Contains(logs.String(), "panic") {
		t.Fatalf("the server logged a panic:\n%s", logs.String())
	}
	// The stuck event streams' ends, which their clients are not told, are
	// logged with why and the request's id (they were not logged at all).
	ended := 0
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, `"msg":"event stream ended"`) && strings.Contains(l, `"reason":"write-timeout"`) &&
			strings.Contains(l, `"requestId":"`) {
			ended++
		}
	}
	if ended < len(stuck) {
		t.Fatalf("%d stuck event streams' ends logged, want %d:\n%s", ended, len(stuck), logs.String())
	}
	if os.Getenv("TEST_LOG") != "" {
		t.Log(logs.String())
	}
}

// A revoked token's streams end within a second or so of the revocation
// even when their clients do not read (their buffers full), on both
// transports: the connection is reset, and what the server's kernel still
// held for the client is dropped. A probe's revoked client went on reading
// events for 4-12 s after the revocation (the write in progress, then the
// 256 KiB the kernel had queued), and its socket stayed open for 15-20 s
// (the write timeout, then the close handshake's).
func TestRevokedStreamsEndEvenUnread(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t) // the default timings: a write may take 10 s
	acme := newTenant(t, e, "acme")
	victim := newToken(t, e, acme.Admin.Token, "acme", "victim", "viewer")
	ctx := context.Background()
	publishRunning(t, e, 40)
	vars := map[string]any{"t": "acme", "a": firstEventID(t, e)}
	big := bigEventsSub(1900) // about 75 KB an event: 3 MB to send, where the kernels hold far less

	stuck := openStuckSSE(t, e, victim.Token, big, vars)
	hc := &http.Client{Transport: &http.Transport{DialContext: tinyDialer.DialContext}}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(dctx, "ws"+strings.TrimPrefix(e.Server.URL, "http")+"/graphql",
		&websocket.DialOptions{Subprotocols: []string{"graphql-transport-ws"}, HTTPClient: hc})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	ws.SetReadLimit(1 << 20)
	send := func(m map[string]any) {
		b, _ := json.Marshal(m)
		if err := ws.Write(dctx, websocket.MessageText, b); err != nil {
			t.Fatal(err)
		}
	}
	send(map[string]any{"type": "connection_init", "payload": map[string]any{"Authorization": "Bearer " + victim.Token}})
	if _, b, err := ws.Read(dctx); err != nil || !strings.Contains(string(b), "connection_ack") {
		t.Fatalf("connection_init: %s %v", b, err)
	}
	send(map[string]any{"id": "big", "type": "subscribe", "payload": map[string]any{"query": big, "variables": vars}})
	time.Sleep(time.Second) // both fill their buffers and the server's writes stall

	must(t, e.Call(acme.Admin.Token, "tokens/revoke", map[string]any{"tenantId": "acme", "tokenId": victim.TokenID}))
	time.Sleep(2500 * time.Millisecond) // the sweep (at once), then revokeGrace (1 s)

	// What each client can still read: a few KiB its own kernel held, not
	// the server's queue and the rest of the events.
	ended, tail, err := stuck.drain(2 * time.Second)
	if !ended {
		t.Fatalf("the revoked event stream was not ended: %v (last bytes %q)", err, tail)
	}
	if stuck.read > 32<<10 {
		t.Fatalf("the revoked event stream delivered %d bytes after its revocation", stuck.read)
	}
	rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
	defer rcancel()
	messages := 0
	for {
		_, _, err := ws.Read(rctx)
		if err != nil {
			if rctx.Err() != nil {
				t.Fatalf("the revoked socket was not closed")
			}
			break
		}
		messages++
	}
	if messages > 1 {
		t.Fatalf("the revoked socket delivered %d more events of about 75 KB after its revocation", messages)
	}
}
