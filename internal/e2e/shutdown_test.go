package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/bettercompute/computed/internal/testkit"
	"github.com/bettercompute/computed/internal/testkit/wait"
)

// A shutdown closes every WebSocket with 1012 (reconnect elsewhere): one
// with a session, and one that has not sent connection_init yet (it waited
// for its init timeout, and a process ending first cut it without a close
// frame). From its start /readyz says "shutting down", and a socket or an
// event stream that begins during it (on a connection accepted before the
// listener closed) is closed as it begins, the stream with UNAVAILABLE
// (reason shutdown), not served until the process ends.
func TestShutdownClosesEverySocketAndSaysNotReady(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	acme := newTenant(t, e, "acme")
	acked := dialWS(t, e)
	acked.init(acme.Viewer.Token)
	fresh := dialWS(t, e) // no connection_init
	done := make(chan struct{})
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		e.Srv.Shutdown(ctx)
	}()
	t.Cleanup(func() { <-done })
	for name, w := range map[string]*wsClient{"with a session": acked, "before connection_init": fresh} {
		if code, reason := w.closed(5 * time.Second); code != 1012 {
			t.Fatalf("the socket %s: closed %d %q, want 1012", name, code, reason)
		}
	}
	res, err := http.Get(e.Server.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	var ready map[string]string
	_ = json.NewDecoder(res.Body).Decode(&ready)
	res.Body.Close()
	if res.StatusCode != 503 || ready["status"] != "shutting down" {
		t.Fatalf("/readyz during a shutdown: %d %v", res.StatusCode, ready)
	}
	late := dialWS(t, e)
	if code, reason := late.closed(5 * time.Second); code != 1012 {
		t.Fatalf("a socket opened during the shutdown: closed %d %q, want 1012", code, reason)
	}
	s := openSSE(t, e, acme.Viewer.Token, `subscription { tenantEvents(tenantId: "acme") { eventId } }`, nil)
	name, data := s.next()
	if b, _ := json.Marshal(data); name != "next" || !strings.Contains(string(b), `"UNAVAILABLE"`) || !strings.Contains(string(b), `"shutdown"`) {
		t.Fatalf("a stream opened during the shutdown: %s %s", name, b)
	}
	if name, more := s.next(); name != "complete" {
		b, _ := json.Marshal(more)
		t.Fatalf("a stream opened during the shutdown: then %s %s, want complete", name, b)
	}
}

// A replica told to stop closes its listener at once, while its sockets'
// close handshakes take their time: a client that does not answer its
// close frame (a paused reader) holds the server's wait for 5 s, and the
// replica used to serve on meanwhile (/readyz 200, new requests, new
// sockets that the process's end then cut without a close frame).
func TestStoppingReplicaClosesItsListenerAtOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the server binary")
	}
	t.Parallel()
	e := testkit.StartDB(t)
	const token = "bco_shutdown-operator"
	r := startReplica(t, e.DB.URL, token)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws://"+r.addr+"/graphql", &websocket.DialOptions{Subprotocols: []string{"graphql-transport-ws"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	if err := c.Write(ctx, websocket.MessageText, []byte(`{"type":"connection_init","payload":{"Authorization":"Bearer `+token+`"}}`)); err != nil {
		t.Fatal(err)
	}
	if _, b, err := c.Read(ctx); err != nil || !strings.Contains(string(b), "connection_ack") {
		t.Fatalf("init: %s %v", b, err)
	}
	// From here the client reads nothing: the server's close frame goes
	// unanswered.
	if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	wait.Eventually(t, 10*time.Second, func() error {
		if !strings.Contains(r.logs.String(), "shutting down") {
			return fmt.Errorf("no shutdown in the log yet")
		}
		return nil
	})
	// Within 2 s of its shutdown's start (well inside the paused client's
	// 5 s), nothing new reaches the replica.
	wait.Eventually(t, 2*time.Second, func() error {
		conn, err := net.DialTimeout("tcp", r.addr, time.Second)
		if err != nil {
			// Refused: the listener is closed, and the process still runs
			// (its wait for the paused client is not over).
			if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", r.cmd.Process.Pid)); err != nil || strings.Contains(string(st), ") Z ") {
				t.Fatalf("the replica had ended already (%v)", err)
			}
			return nil
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(time.Second))
		fmt.Fprintf(conn, "GET /readyz HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", r.addr)
		buf := make([]byte, 64)
		n, _ := conn.Read(buf)
		return fmt.Errorf("a connection made during the shutdown was answered: %q", buf[:n])
	})
}
