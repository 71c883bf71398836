package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/bettercompute/computed/internal/server"
	"github.com/bettercompute/computed/internal/testkit"
	"github.com/bettercompute/computed/internal/testkit/wait"
)

// wsClient speaks graphql-transport-ws with raw frames. A goroutine reads
// the socket (a read with a deadline would make coder/websocket drop it).
type wsClient struct {
	t    *testing.T
	c    *websocket.Conn
	msgs chan []byte
	end  chan error
}

func newWSClient(t *testing.T, c *websocket.Conn) *wsClient {
	w := &wsClient{t: t, c: c, msgs: make(chan []byte, 1024), end: make(chan error, 1)}
	go func() {
		for {
			_, b, err := c.Read(context.Background())
			if err != nil {
				w.end <- err
				return
			}
			w.msgs <- b
		}
	}()
	return w
}

func dialWS(t *testing.T, e *testkit.Env) *wsClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	url := "ws" + strings.TrimPrefix(e.Server.URL, "http") + "/graphql"
	c, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{Subprotocols: []string{"graphql-transport-ws"}})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { c.CloseNow() })
	return newWSClient(t, c)
}

func (w *wsClient) sendRaw(s string) {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := w.c.Write(ctx, websocket.MessageText, []byte(s)); err != nil {
		w.t.Fatalf("write: %v", err)
	}
}

func (w *wsClient) send(m map[string]any) {
	w.t.Helper()
	b, _ := json.Marshal(m)
	w.sendRaw(string(b))
}

func (w *wsClient) init(token string) {
	w.t.Helper()
	w.send(map[string]any{"type": "connection_init", "payload": map[string]any{"Authorization": "Bearer " + token}})
	if m := w.next(); m["type"] != "connection_ack" {
		w.t.Fatalf("want connection_ack, got %v", m)
	}
}

// next reads the next message that is not a ping (a ping is answered).
func (w *wsClient) next() map[string]any {
	w.t.Helper()
	for {
		m, err := w.read(10 * time.Second)
		if err != nil {
			w.t.Fatalf("read: %v", err)
		}
		if m["type"] == "ping" {
			w.send(map[string]any{"type": "pong"})
			continue
		}
		return m
	}
}

var errQuiet = errors.New("no message within the deadline")

func (w *wsClient) read(timeout time.Duration) (map[string]any, error) {
	var b []byte
	select {
	case b = <-w.msgs:
	case err := <-w.end:
		w.end <- err // later reads see the end too
		return nil, err
	case <-time.After(timeout):
		return nil, errQuiet
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		w.t.Fatalf("server sent invalid JSON: %s", b)
	}
	return m, nil
}

// closed waits for the server to close the socket and returns the code.
func (w *wsClient) closed(within time.Duration) (websocket.StatusCode, string) {
	w.t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		m, err := w.read(time.Until(deadline))
		if errors.Is(err, errQuiet) {
			break
		}
		if err != nil {
			var ce websocket.CloseError
			if errors.As(err, &ce) {
				return ce.Code, ce.Reason
			}
			w.t.Fatalf("socket ended without a close frame: %v", err)
		}
		if m["type"] == "ping" {
			continue
		}
	}
	w.t.Fatalf("socket not closed within %s", within)
	return 0, ""
}

// op runs one operation and returns its messages up to complete or error.
func (w *wsClient) op(id, query string, vars map[string]any) []map[string]any {
	w.t.Helper()
	w.send(map[string]any{"id": id, "type": "subscribe", "payload": map[string]any{"query": query, "variables": vars}})
	var out []map[string]any
	for {
		m := w.next()
		if m["id"] != id {
			w.t.Fatalf("message of another operation: %v", m)
		}
		out = append(out, m)
		if m["type"] == "complete" || m["type"] == "error" {
			return out
		}
	}
}

// opError is the first error code of an operation's messages ("" for none).
func opError(msgs []map[string]any) string {
	for _, m := range msgs {
		var list []any
		switch m["type"] {
		case "error":
			list, _ = m["payload"].([]any)
		case "next":
			p, _ := m["payload"].(map[string]any)
			list, _ = p["errors"].([]any)
		}
		for _, x := range list {
			ext, _ := x.(map[string]any)["extensions"].(map[string]any)
			if c, _ := ext["code"].(string); c != "" {
				return c
			}
		}
	}
	return ""
}

const createTokenMutation = `mutation($t: String!, $n: String!) { createToken(input: {tenantId: $t, name: $n, role: ADMIN}) { secret } }`

// A socket sees the token and the role bindings as they are now: a removed
// role refuses the next operation, a revoked token closes the socket (4403)
// at its next operation, and an idle socket of a revoked token is closed by
// the sweep.
func TestSocketSeesRevocation(t *testing.T) {
	t.Parallel()
	e := testkit.StartWith(t, testkit.Options{Config: server.Config{AuthRecheck: 200 * time.Millisecond}})
	acme := newTenant(t, e, "acme")
	ops := newToken(t, e, acme.Admin.Token, "acme", "ops", "admin")

	w := dialWS(t, e)
	w.init(ops.Token)
	if msgs := w.op("1", createTokenMutation, map[string]any{"t": "acme", "n": "a"}); opError(msgs) != "" || msgs[0]["type"] != "next" {
		t.Fatalf("createToken on the socket: %v", msgs)
	}
	// The role goes: the next operation is refused, and mints nothing.
	must(t, e.Call(acme.Admin.Token, "members/revoke", map[string]any{"tenantId": "acme", "principalId": ops.PrincipalID}))
	if msgs := w.op("2", createTokenMutation, map[string]any{"t": "acme", "n": "b"}); opError(msgs) != "PERMISSION_DENIED" {
		t.Fatalf("createToken after the role was removed: %v", msgs)
	}
	// The token goes: the next operation closes the socket.
	idle := dialWS(t, e)
	idle.init(ops.Token)
	must(t, e.Call(acme.Admin.Token, "tokens/revoke", map[string]any{"tenantId": "acme", "tokenId": ops.TokenID}))
	w.send(map[string]any{"id": "3", "type": "subscribe", "payload": map[string]any{"query": createTokenMutation, "variables": map[string]any{"t": "acme", "n": "c"}}})
	if code, _ := w.closed(5 * time.Second); code != 4403 {
		t.Fatalf("operation with a revoked token: close %d, want 4403", code)
	}
	// An idle socket of the revoked token is closed by the sweep.
	if code, _ := idle.closed(5 * time.Second); code != 4403 {
		t.Fatalf("idle socket of a revoked token: close %d, want 4403", code)
	}
	// Nothing minted after the role went works.
	r := e.Call(acme.Admin.Token, "tokens/list", map[string]any{"tenantId": "acme"})
	for _, it := range items(t, r) {
		if it["name"] == "b" || it["name"] == "c" {
			t.Fatalf("a token was minted after revocation: %v", it)
		}
	}
}

// graphql-transport-ws close codes, with raw frames.
func TestWebSocketCloseCodes(t *testing.T) {
	t.Parallel()
	e := testkit.StartWith(t, testkit.Options{Config: server.Config{WS: server.WSTimings{InitTimeout: 300 * time.Millisecond, PingInterval: -1}}})
	acme := newTenant(t, e, "acme")
	cases := []struct {
		name string
		run  func(w *wsClient)
		code websocket.StatusCode
	}{
		{"no connection_init in time", func(w *wsClient) {}, 4408},
		{"subscribe before connection_ack", func(w *wsClient) {
			w.send(map[string]any{"id": "1", "type": "subscribe", "payload": map[string]any{"query": "{ viewer { name } }"}})
		}, 4401},
		{"a second connection_init", func(w *wsClient) {
			w.init(acme.Admin.Token)
			w.send(map[string]any{"type": "connection_init", "payload": map[string]any{"Authorization": "Bearer " + acme.Admin.Token}})
		}, 4429},
		{"invalid JSON", func(w *wsClient) { w.sendRaw(`{"type":`) }, 4400},
		// RFC 6455 8.1: a text message that is not UTF-8 fails the
		// connection with 1007 (JSON decoding would take it, the bad byte
		// replaced).
		{"text that is not UTF-8", func(w *wsClient) {
			w.init(acme.Admin.Token)
			w.sendRaw("{\"type\":\"ping\",\"payload\":{\"x\":\"\xff\"}}")
		}, 1007},
		{"a key twice", func(w *wsClient) {
			w.init(acme.Admin.Token)
			w.sendRaw(`{"id":"1","type":"subscribe","payload":{"query":"{ viewer { name } }","variables":{"a":1,"a":2}}}`)
		}, 4400},
		{"unknown message type", func(w *wsClient) { w.init(acme.Admin.Token); w.send(map[string]any{"type": "start"}) }, 4400},
		// As graphql-ws validates messages (a complete without an id was
		// ignored, a string ping payload echoed; a helper's probe).
		{"complete without an id", func(w *wsClient) { w.init(acme.Admin.Token); w.send(map[string]any{"type": "complete"}) }, 4400},
		{"a ping whose payload is no object", func(w *wsClient) {
			w.init(acme.Admin.Token)
			w.send(map[string]any{"type": "ping", "payload": "hello"})
		}, 4400},
		{"subscribe without an id", func(w *wsClient) {
			w.init(acme.Admin.Token)
			w.send(map[string]any{"type": "subscribe", "payload": map[string]any{"query": "{ viewer { name } }"}})
		}, 4400},
		{"an id of 129 bytes", func(w *wsClient) {
			w.init(acme.Admin.Token)
			w.send(map[string]any{"id": strings.Repeat("i", 129), "type": "subscribe", "payload": map[string]any{"query": "{ viewer { name } }"}})
		}, 4400},
		{"a persisted query's hash under a running operation's id", func(w *wsClient) {
			w.init(acme.Admin.Token)
			w.send(map[string]any{"id": "s", "type": "subscribe", "payload": map[string]any{"query": `subscription { tenantEvents(tenantId: "acme") { type } }`}})
			w.send(map[string]any{"id": "s", "type": "subscribe", "payload": map[string]any{"extensions": map[string]any{
				"persistedQuery": map[string]any{"version": 1, "sha256Hash": strings.Repeat("ab", 32)}}}})
		}, 4409},
		{"a binary frame", func(w *wsClient) {
			_ = w.c.Write(context.Background(), websocket.MessageBinary, []byte(`{"type":"connection_init"}`))
		}, 4400},
		{"an unknown token", func(w *wsClient) {
			w.send(map[string]any{"type": "connection_init", "payload": map[string]any{"Authorization": "Bearer bct_nope"}})
		}, 4403},
		{"no token", func(w *wsClient) { w.send(map[string]any{"type": "connection_init"}) }, 4403},
	}
	// What some close reasons must say.
	reasons := map[string]string{"subscribe without an id": "needs an id", "an id of 129 bytes": "at most 128 bytes"}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := dialWS(t, e)
			w.t = t
			c.run(w)
			if code, reason := w.closed(5 * time.Second); code != c.code || !strings.Contains(reason, reasons[c.name]) {
				t.Fatalf("close %d (%s), want %d (%s)", code, reason, c.code, reasons[c.name])
			}
		})
	}
	// Queries and mutations answer next then complete; ping is answered.
	w := dialWS(t, e)
	w.init(acme.Admin.Token)
	w.send(map[string]any{"type": "ping"})
	if m := w.next(); m["type"] != "pong" {
		t.Fatalf("ping: %v", m)
	}
	w.send(map[string]any{"type": "ping", "payload": map[string]any{"at": 1}})
	if m := w.next(); m["type"] != "pong" || fmt.Sprint(m["payload"]) != "map[at:1]" {
		t.Fatalf("ping with a payload: %v", m)
	}
	msgs := w.op("q", `{ viewer { kind name } }`, nil)
	if len(msgs) != 2 || msgs[0]["type"] != "next" || msgs[1]["type"] != "complete" {
		t.Fatalf("query: %v", msgs)
	}
	// A validation error is an error message for that operation; the socket stays.
	if msgs := w.op("v", `{ nope }`, nil); msgs[0]["type"] != "error" || opError(msgs) != "INVALID_INPUT" {
		t.Fatalf("invalid query: %v", msgs)
	}
	if msgs := w.op("q2", `{ viewer { kind name } }`, nil); msgs[0]["type"] != "next" {
		t.Fatalf("socket unusable after an invalid query: %v", msgs)
	}
	if msgs := w.op(strings.Repeat("i", 128), `{ viewer { kind name } }`, nil); msgs[0]["type"] != "next" {
		t.Fatalf("an id of 128 bytes: %v", msgs)
	}
	// A persisted query's hash alone is that operation's error, in the
	// words Apollo's clients look for; the socket stays.
	w.send(map[string]any{"id": "apq", "type": "subscribe", "payload": map[string]any{"extensions": map[string]any{
		"persistedQuery": map[string]any{"version": 1, "sha256Hash": strings.Repeat("ab", 32)}}}})
	if m := w.next(); m["id"] != "apq" || m["type"] != "error" || !strings.Contains(fmt.Sprint(m["payload"]), "PersistedQueryNotSupported") {
		t.Fatalf("a persisted query's hash alone: %v", m)
	}
	if msgs := w.op("apq", `{ viewer { kind name } }`, nil); msgs[0]["type"] != "next" {
		t.Fatalf("after a persisted query's hash: %v", msgs)
	}
}

// The same close codes with the real graphql-ws client.
func TestGraphQLWSClientCloseCodes(t *testing.T) {
	t.Parallel()
	dir := clientsDir(t)
	e := testkit.StartWith(t, testkit.Options{Config: server.Config{WS: server.WSTimings{InitTimeout: 300 * time.Millisecond}}})
	acme := newTenant(t, e, "acme")
	url := "ws" + strings.TrimPrefix(e.Server.URL, "http") + "/graphql"
	for mode, code := range map[string]string{"noinit": `"code":4408`, "badtoken": `"code":4403`} {
		out, err := node(t, dir, "ws-close.mjs", url, mode, acme.Admin.Token)
		if err != nil || !strings.Contains(out, code) {
			t.Fatalf("%s: %v %s", mode, err, out)
		}
	}
}

// A completed id is free the moment the server reads the complete (as
// graphql-ws's own server does): subscribe r, complete r, subscribe r
// again at once never closes the socket with 4409, nothing of the old
// operation reaches the new one, and the server sends no complete for an
// operation the client completed. It used to close the socket with 4409 in
// most tries: the id was freed only when the operation's goroutine had
// wound down.
func TestCompletedIDIsFreeAtOnce(t *testing.T) {
	t.Parallel()
	e := testkit.StartWith(t, testkit.Options{Config: server.Config{WS: server.WSTimings{PingInterval: -1}}})
	acme := newTenant(t, e, "acme")
	w := dialWS(t, e)
	w.init(acme.Viewer.Token)
	sub := map[string]any{"query": eventsSub, "variables": map[string]any{"t": "acme"}}
	for try := 0; try < 30; try++ {
		w.send(map[string]any{"id": "r", "type": "subscribe", "payload": sub})
		w.send(map[string]any{"id": "r", "type": "complete"})
	}
	w.send(map[string]any{"id": "r", "type": "subscribe", "payload": sub})
	// A query with a reused id answers once and completes.
	for try := 0; try < 10; try++ {
		w.send(map[string]any{"id": "q", "type": "subscribe", "payload": map[string]any{"query": `{ viewer { kind name } }`}})
		w.send(map[string]any{"id": "q", "type": "complete"})
	}
	msgs := w.op("q", `{ viewer { kind name } }`, nil)
	// An earlier q that finished before the server read its complete has
	// answered next and complete itself, so op may have stopped at its
	// complete: read the rest of q's messages, which end in the last q's.
	for {
		m, err := w.read(300 * time.Millisecond)
		if err != nil {
			break
		}
		if m["id"] != "q" {
			t.Fatalf("before any event: %v", m)
		}
		msgs = append(msgs, m)
	}
	if msgs[len(msgs)-1]["type"] != "complete" {
		t.Fatalf("a query under a reused id: %v", msgs)
	}
	// The last r is live: one event reaches it once (the 30 completed ones
	// deliver nothing), and nothing else arrives for r.
	waitSubscribers(t, e, 1)
	pool := vpsPool(t, e, acme.Admin.Token, "acme", "vps", nil)
	must(t, e.Call(acme.Member.Token, "instances/create", instanceIn("acme", pool, "web", 1)))
	if evs := w.events("r", 1); evs[0]["type"] != "INSTANCE_CREATED" {
		t.Fatalf("the reused id's subscription: %v", evs)
	}
	if m, err := w.read(300 * time.Millisecond); err == nil {
		t.Fatalf("after the one event: %v", m)
	}
	w.send(map[string]any{"id": "r", "type": "complete"})
	if m, err := w.read(300 * time.Millisecond); err == nil {
		t.Fatalf("the server answered the client's complete: %v", m)
	}
}

// One credential holds at most Config.SessionsPerCredential sockets and
// event streams open on a replica, together: past it a connection_init is
// closed with 1008 and a stream request answered 429 before any stream;
// a slot frees when one closes. Other credentials are not counted against
// it.
func TestSessionsPerCredential(t *testing.T) {
	t.Parallel()
	e := testkit.StartWith(t, testkit.Options{Config: server.Config{SessionsPerCredential: 3}})
	acme := newTenant(t, e, "acme")
	a := dialWS(t, e)
	a.init(acme.Viewer.Token)
	b := dialWS(t, e)
	b.init(acme.Viewer.Token)
	openSSE(t, e, acme.Viewer.Token, `subscription { tenantEvents(tenantId: "acme") { type } }`, nil)
	// The fourth, a socket.
	over := dialWS(t, e)
	over.send(map[string]any{"type": "connection_init", "payload": map[string]any{"Authorization": "Bearer " + acme.Viewer.Token}})
	if code, reason := over.closed(5 * time.Second); code != 1008 {
		t.Fatalf("a fourth session: close %d (%s), want 1008", code, reason)
	}
	// The fourth, a stream.
	res, raw := postStream(t, e, acme.Viewer.Token, `subscription { tenantEvents(tenantId: "acme") { type } }`)
	if res.StatusCode != 429 || !strings.Contains(string(raw), `"sessions"`) || res.Header.Get("Retry-After") != "1" {
		t.Fatalf("a fourth session on the stream: %d (Retry-After %q) %s", res.StatusCode, res.Header.Get("Retry-After"), raw)
	}
	// Another credential has its own.
	d := dialWS(t, e)
	d.init(acme.Admin.Token)
	// A slot frees when a socket closes.
	a.c.Close(websocket.StatusNormalClosure, "")
	wait.Eventually(t, 10*time.Second, func() error {
		w := dialWS(t, e)
		w.send(map[string]any{"type": "connection_init", "payload": map[string]any{"Authorization": "Bearer " + acme.Viewer.Token}})
		m, err := w.read(5 * time.Second)
		if err != nil || m["type"] != "connection_ack" {
			w.c.CloseNow()
			return fmt.Errorf("no slot after a socket closed: %v %v", m, err)
		}
		return nil
	})
}

// A socket keeps small buffers of its own (512 bytes to read, 2 KiB to
// write; net/http's 4 KiB pair would be 8 KiB of every subscriber): a
// client message many times the read buffer, sent whole or in frames, and
// an answer many times the write buffer still pass intact.
func TestWebSocketMessagesLargerThanItsBuffers(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	w := dialWS(t, e)
	w.init(e.Operator)
	// A 6 KiB document (a comment pads it) whose answer is the schema's
	// type names, several KiB.
	query := "# " + strings.Repeat("padding ", 768) + "\n{ __schema { types { name } } }"
	check := func(msgs []map[string]any) {
		t.Helper()
		if len(msgs) != 2 || msgs[0]["type"] != "next" || msgs[1]["type"] != "complete" {
			t.Fatalf("want next and complete, got %v", msgs)
		}
		raw, _ := json.Marshal(msgs[0])
		types := msgs[0]["payload"].(map[string]any)["data"].(map[string]any)["__schema"].(map[string]any)["types"].([]any)
		if len(raw) < 4096 || len(types) < 50 {
			t.Fatalf("the answer is %d bytes and %d types: a larger one is needed to pass the write buffer", len(raw), len(types))
		}
	}
	check(w.op("1", query, nil))
	// The same message in 100-byte frames (a fragmented message).
	msg, _ := json.Marshal(map[string]any{"id": "2", "type": "subscribe", "payload": map[string]any{"query": query}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	fw, err := w.c.Writer(ctx, websocket.MessageText)
	if err != nil {
		t.Fatal(err)
	}
	for rest := msg; len(rest) > 0; {
		n := min(100, len(rest))
		if _, err := fw.Write(rest[:n]); err != nil {
			t.Fatal(err)
		}
		rest = rest[n:]
	}
	if err := fw.Close(); err != nil {
		t.Fatal(err)
	}
	var msgs []map[string]any
	for len(msgs) == 0 || msgs[len(msgs)-1]["type"] == "next" {
		msgs = append(msgs, w.next())
	}
	check(msgs)
}

// A client that sends its first frames with the upgrade request, before the
// server's 101 (the bytes net/http has already read past the request):
// nothing it sent is lost when the socket takes its own buffers.
func TestWebSocketFramesWithTheUpgradeRequest(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	init, _ := json.Marshal(map[string]any{"type": "connection_init", "payload": map[string]any{"Authorization": "Bearer " + e.Operator}})
	sub := `{"id":"1","type":"subscribe","payload":{"query":"{ viewer { kind name } }"}}`
	// One write: the frames arrive with the request.
	r := dialRawWS(t, e, append(maskedFrame(string(init)), maskedFrame(sub)...))
	var got []string
	for len(got) < 3 {
		if _, m := readRawFrame(t, r); !strings.Contains(m, `"ping"`) {
			got = append(got, m)
		}
	}
	if !strings.Contains(got[0], `"connection_ack"`) || !strings.Contains(got[1], `"next"`) || !strings.Contains(got[1], `"kind"`) ||
		!strings.Contains(got[2], `"complete"`) {
		t.Fatalf("messages: %q", got)
	}
}

// A client's frame must be masked (RFC 6455 5.1): an unmasked one closes
// the socket with 1002, a protocol error (it was 1000, a normal closure).
func TestUnmaskedClientFrameIsAProtocolError(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	msg := `{"type":"connection_init"}`
	r := dialRawWS(t, e, append([]byte{0x81, byte(len(msg))}, msg...)) // no mask bit, no key
	for {
		if op, p := readRawFrame(t, r); op == 0x8 { // close
			if len(p) < 2 || int(p[0])<<8|int(p[1]) != 1002 {
				t.Fatalf("close frame % x, want code 1002", p)
			}
			return
		}
	}
}

// dialRawWS opens a WebSocket of graphql-transport-ws by hand: the upgrade
// request and then (in the same write) the client's frames, and reads the
// server's 101. It returns the connection's reader for readRawFrame.
func dialRawWS(t *testing.T, e *testkit.Env, frames []byte) *bufio.Reader {
	t.Helper()
	addr := strings.TrimPrefix(e.Server.URL, "http://")
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	req := "GET /graphql HTTP/1.1\r\nHost: " + addr + "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: graphql-transport-ws\r\n\r\n"
	if _, err := conn.Write(append([]byte(req), frames...)); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(conn)
	res, err := http.ReadResponse(r, nil)
	if err != nil || res.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", res, err)
	}
	return r
}

// maskedFrame is a masked, final text frame (RFC 6455 5.2) of payload, as
// a client sends.
func maskedFrame(payload string) []byte {
	key := [4]byte{1, 2, 3, 4}
	var b []byte
	switch n := len(payload); {
	case n < 126:
		b = []byte{0x81, 0x80 | byte(n)}
	default:
		b = []byte{0x81, 0x80 | 126, byte(n >> 8), byte(n)}
	}
	b = append(b, key[:]...)
	for i := 0; i < len(payload); i++ {
		b = append(b, payload[i]^key[i%4])
	}
	return b
}

// readRawFrame reads one unmasked, unfragmented server frame: its opcode
// and payload.
func readRawFrame(t *testing.T, r *bufio.Reader) (opcode byte, payload string) {
	t.Helper()
	var h [2]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		t.Fatalf("reading a frame: %v", err)
	}
	n := int(h[1] & 0x7f)
	switch n {
	case 126:
		var l [2]byte
		_, _ = io.ReadFull(r, l[:])
		n = int(l[0])<<8 | int(l[1])
	case 127:
		t.Fatal("a frame larger than this test reads")
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(r, p); err != nil {
		t.Fatal(err)
	}
	return h[0] & 0x0f, string(p)
}

// A socket whose client answers no ping (graphql-transport-ws requires a
// pong) is closed once it has sent nothing for PongTimeout, freeing its
// credential's session slot; one that answers stays open.
func TestWebSocketWithoutPongsIsClosed(t *testing.T) {
	t.Parallel()
	e := testkit.StartWith(t, testkit.Options{Config: server.Config{SessionsPerCredential: 1,
		WS: server.WSTimings{PingInterval: 50 * time.Millisecond, PongTimeout: 300 * time.Millisecond}}})
	acme := newTenant(t, e, "acme")
	silent := dialWS(t, e)
	// The server's silence is counted from the last message it read,
	// connection_init: the clock starts before it is sent (after its ack
	// the close came 299 ms later once).
	start := time.Now()
	silent.init(acme.Member.Token)
	// the silent client reads (its kernel takes every ping) but sends nothing
	code, reason := silent.closed(5 * time.Second)
	if code != websocket.StatusPolicyViolation || !strings.Contains(reason, "answers no ping") || time.Since(start) < 300*time.Millisecond {
		t.Fatalf("the silent socket: %d %q after %v", code, reason, time.Since(start))
	}
	// its credential's slot is free again; a client that answers every
	// ping is still served after three times the timeout
	answering := dialWS(t, e)
	answering.init(acme.Member.Token)
	for until := time.Now().Add(time.Second); time.Now().Before(until); {
		m, err := answering.read(time.Until(until))
		if errors.Is(err, errQuiet) {
			break
		}
		if err != nil || m["type"] != "ping" {
			t.Fatalf("the answering socket: %v %v", m, err)
		}
		answering.send(map[string]any{"type": "pong"})
	}
	answering.send(map[string]any{"id": "1", "type": "subscribe", "payload": map[string]any{"query": "{ viewer { kind } }"}})
	if m := answering.next(); m["type"] != "next" {
		t.Fatalf("the answering socket: %v", m)
	}
}

// A socket's messages are bounded as a POST body is, before anything
// decodes them: a subscribe whose variables nest past their bound is that
// operation's error and the socket stays (it closed the socket with 4400,
// and every operation on it); a message nested past any body's bound, here
// a connection_init before any authentication, closes it with 4400
// (decoded whole, 10,000 levels cost a probe 0.2 s of CPU unauthenticated).
func TestWebSocketMessagesAreBoundedBeforeDecoding(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	admin, _, _ := e.Tenant("acme")
	w := dialWS(t, e)
	w.init(admin)
	nest := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	w.sendRaw(`{"id":"deep","type":"subscribe","payload":{"query":"{ viewer { kind } }","variables":{"a":` + nest(33) + `}}}`)
	m := w.next()
	if m["type"] != "error" || m["id"] != "deep" || !strings.Contains(fmt.Sprint(m["payload"]), "nests deeper than 33 levels") {
		t.Fatalf("deep variables: %v", m)
	}
	w.sendRaw(`{"id":"wide","type":"subscribe","payload":{"query":"{ viewer { kind } }","variables":{"a":[` + strings.Repeat("1,", 21000) + `1]}}}`)
	if m := w.next(); m["type"] != "error" || m["id"] != "wide" || !strings.Contains(fmt.Sprint(m["payload"]), "more than 20000 values") {
		t.Fatalf("wide variables: %v", m)
	}
	w.send(map[string]any{"id": "ok", "type": "subscribe", "payload": map[string]any{"query": "{ viewer { kind } }"}})
	if m := w.next(); m["type"] != "next" || m["id"] != "ok" {
		t.Fatalf("the socket after the refusals: %v", m)
	}

	w = dialWS(t, e)
	w.sendRaw(`{"type":"connection_init","payload":{"a":` + nest(10000) + `}}`)
	if code, reason := w.closed(10 * time.Second); code != 4400 || !strings.Contains(reason, "nests deeper") {
		t.Fatalf("a deep connection_init: %d %q", code, reason)
	}
}

// A subscribe its client completes at once is still a request: it pays its
// first unit before anything of it runs (3,000 subscribe and complete pairs
// spent nothing, each authenticated against the database), so the next
// operation past the budget is RATE_LIMITED.
func TestSubscribeAndCompleteSpendTheBudget(t *testing.T) {
	t.Parallel()
	e := testkit.StartWith(t, testkit.Options{Config: server.Config{RatePerSecond: 1, RateBurst: 20}})
	admin, _, _ := e.Tenant("acme")
	w := dialWS(t, e)
	w.init(admin)
	for i := 0; i < 60; i++ {
		id := fmt.Sprint("s", i)
		w.send(map[string]any{"id": id, "type": "subscribe", "payload": map[string]any{"query": `subscription { tenantEvents(tenantId: "acme") { eventId } }`}})
		w.send(map[string]any{"id": id, "type": "complete"})
	}
	w.send(map[string]any{"id": "q", "type": "subscribe", "payload": map[string]any{"query": `{ viewer { kind } }`}})
	for {
		m := w.next()
		if m["id"] != "q" {
			continue // an operation's own error, had it run
		}
		b, _ := json.Marshal(m)
		if m["type"] != "error" || !strings.Contains(string(b), "RATE_LIMITED") {
			t.Fatalf("an operation after 60 subscribe and complete pairs past a budget of 20: %s", b)
		}
		return
	}
}
