package server

import (
	"bufio"
	"net"
	"net/http"
	"time"
)

// The buffers a WebSocket keeps for its whole life. net/http hands a
// hijacked connection its 4 KiB request reader and a new 4 KiB writer, and
// coder/websocket keeps both: 8 KiB of a subscriber's ~40 when ten
// thousand dashboards hold sockets open. A subscriber's socket carries
// little inbound (connection_init, subscribe, pong), so its reader needs
// only enough for a frame header and a short message; a larger message
// is read straight into the caller's buffer past the first read. The
// writer holds a whole frame of a typical event (header and a `next`
// message of a few hundred bytes to a couple of KiB), so a delivery stays
// one write system call; a larger one takes two.
const (
	wsReadBuffer  = 512
	wsWriteBuffer = 2048
)

// streamSendBuffer is the kernel send buffer of a hijacked stream's socket
// (a WebSocket, an event stream over HTTP/1.1); Linux doubles it. Left to
// autotuning it grew to 2-4 MiB per connection whose client stopped
// reading (loopback; tcp_wmem's maximum): kernel memory a stalled client
// holds until its stream is ended, and a stream that takes that much
// longer to find its write stuck. A stream carries events of a few KiB
// and replays of at most 64 events per read; behind a load balancer the
// peer is near and the cap costs nothing.
const streamSendBuffer = 128 << 10

// revokeGrace is how long a revoked credential's stream (a WebSocket, a
// detached event stream) has to end properly: the message being written,
// its last message, and the client's close. Past it the connection is
// reset (resetConn). A client that did not read (its buffers full) went
// on reading events for 4-12 s after the revocation, from the write in
// progress and the kernel's queue (256 KiB), and its socket stayed open
// for 15-20 s.
const revokeGrace = time.Second

// resetConn closes conn with a reset (SO_LINGER 0): the kernel drops what
// it still holds for the client instead of sending it before a FIN, and a
// write blocked on it returns at once.
func resetConn(conn net.Conn) {
	if t, ok := conn.(interface{ NetConn() net.Conn }); ok { // TLS: no close_notify to write
		conn = t.NetConn()
	}
	if c, ok := conn.(interface{ SetLinger(int) error }); ok {
		_ = c.SetLinger(0)
	}
	_ = conn.Close()
}

// streamSocket caps a hijacked stream connection's kernel send buffer.
func streamSocket(conn net.Conn) {
	if t, ok := conn.(interface{ NetConn() net.Conn }); ok { // TLS
		conn = t.NetConn()
	}
	if c, ok := conn.(interface{ SetWriteBuffer(int) error }); ok {
		_ = c.SetWriteBuffer(streamSendBuffer)
	}
}

// smallBuffers is the response writer handed to websocket.Accept: its
// Hijack gives the connection the buffers above instead of net/http's,
// and keeps the connection (conn) for the socket's own writes.
//
// A refusal Accept writes itself (net/http's plain-text http.Error: a
// foreign Origin, a bad version or key) is held back instead: refused
// keeps its status, and the transport answers with the contract's error.
type smallBuffers struct {
	http.ResponseWriter
	conn    net.Conn
	refused int
}

func (w *smallBuffers) WriteHeader(status int) {
	if status >= 400 && w.conn == nil {
		w.refused = status
		return
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *smallBuffers) Write(b []byte) (int, error) {
	if w.refused != 0 {
		return len(b), nil // the refusal's text, replaced by the envelope
	}
	return w.ResponseWriter.Write(b)
}

func (w *smallBuffers) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *smallBuffers) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	w.conn = conn
	streamSocket(conn)
	r, wr := brw.Reader, brw.Writer
	// Bytes the client sent after its upgrade request are in net/http's
	// reader (and an unflushed byte in its writer would be lost): keep
	// whichever is not empty.
	if r.Buffered() == 0 {
		r = bufio.NewReaderSize(conn, wsReadBuffer)
	}
	if wr.Buffered() == 0 {
		wr = bufio.NewWriterSize(conn, wsWriteBuffer)
	}
	return conn, bufio.NewReadWriter(r, wr), nil
}
