package server

import (
	"bufio"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"
)

// A hijacked socket gets the small buffers, not net/http's 4 KiB pair
// (TestWebSocketFramesWithTheUpgradeRequest covers bytes read early).
func TestSmallBuffersHijack(t *testing.T) {
	got := hijacked(t, func(w http.ResponseWriter) any {
		conn, brw, err := (&smallBuffers{ResponseWriter: w}).Hijack()
		if err != nil {
			return err
		}
		defer conn.Close()
		return [2]int{brw.Reader.Size(), brw.Writer.Size()}
	})
	if got != [2]int{wsReadBuffer, wsWriteBuffer} {
		t.Fatalf("reader and writer of %v bytes, want %d and %d", got, wsReadBuffer, wsWriteBuffer)
	}
}

// hijacked sends one request to a server whose handler is handle, and
// returns what handle returned (an error fails the test).
func hijacked(t *testing.T, handle func(w http.ResponseWriter) any) any {
	t.Helper()
	got := make(chan any, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got <- handle(w) }))
	defer srv.Close()
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, _ = bufio.NewReader(c).ReadByte() // until the handler closes it
	select {
	case v := <-got:
		if err, ok := v.(error); ok {
			t.Fatal(err)
		}
		return v
	case <-time.After(5 * time.Second):
		t.Fatal("the handler did not hijack")
		return nil
	}
}

// sendBuffer is the kernel send buffer of conn's socket.
func sendBuffer(conn net.Conn) (int, error) {
	raw, err := conn.(*net.TCPConn).SyscallConn()
	if err != nil {
		return 0, err
	}
	var n int
	var serr error
	if err := raw.Control(func(fd uintptr) { n, serr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF) }); err != nil {
		return 0, err
	}
	return n, serr
}

// A stream's socket, hijacked for a WebSocket or an event stream, has its
// kernel send buffer capped (Linux reports twice what was set): left to
// autotuning, a client that stopped reading held 2-4 MiB of it.
func TestStreamSocketsCapTheirSendBuffer(t *testing.T) {
	for name, hijack := range map[string]func(w http.ResponseWriter) (net.Conn, error){
		"websocket": func(w http.ResponseWriter) (net.Conn, error) {
			conn, _, err := (&smallBuffers{ResponseWriter: w}).Hijack()
			return conn, err
		},
		"event stream": func(w http.ResponseWriter) (net.Conn, error) {
			st := &sseStream{w: w, rc: http.NewResponseController(w)}
			if !st.hijack() {
				return nil, errors.New("not hijacked")
			}
			return st.conn, nil
		},
	} {
		t.Run(name, func(t *testing.T) {
			n := hijacked(t, func(w http.ResponseWriter) any {
				conn, err := hijack(w)
				if err != nil {
					return err
				}
				defer conn.Close()
				n, err := sendBuffer(conn)
				if err != nil {
					return err
				}
				return n
			})
			if n != 2*streamSendBuffer {
				t.Fatalf("send buffer %d bytes, want %d", n, 2*streamSendBuffer)
			}
		})
	}
}
