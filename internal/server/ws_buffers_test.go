package server

import (
	"bufio"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// A hijacked socket gets the small buffers, not net/http's 4 KiB pair
// (TestWebSocketFramesWithTheUpgradeRequest covers bytes read early).
func TestSmallBuffersHijack(t *testing.T) {
	sizes := make(chan [2]int, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, brw, err := (&smallBuffers{ResponseWriter: w}).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		sizes <- [2]int{brw.Reader.Size(), brw.Writer.Size()}
	}))
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
	case got := <-sizes:
		if got != [2]int{wsReadBuffer, wsWriteBuffer} {
			t.Fatalf("reader and writer of %v bytes, want %d and %d", got, wsReadBuffer, wsWriteBuffer)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the handler did not hijack")
	}
}
