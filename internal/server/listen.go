package server

import (
	"context"
	"net"
	"time"
)

// UserTimeout is how long data sent to a client may go unacknowledged
// before its connection is ended (TCP_USER_TIMEOUT, Linux). Without it
// the kernel retransmits for about 15 minutes: a dashboard whose host
// vanished (a laptop closed, a network gone) kept its event stream, and
// its credential's session slot, that long, since the stream's keep-alive
// comments are data it never acknowledges. (A WebSocket answers no ping
// then and is closed sooner, WSTimings.PongTimeout.)
const UserTimeout = 60 * time.Second

// Listen listens on addr for the public server: TCP, with keep-alives
// (Go's default) and UserTimeout on every accepted connection.
func Listen(ctx context.Context, addr string) (net.Listener, error) {
	l, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return userTimeoutListener{l}, nil
}

type userTimeoutListener struct{ net.Listener }

func (l userTimeoutListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if tc, ok := c.(*net.TCPConn); ok {
		setUserTimeout(tc, UserTimeout)
	}
	return c, nil
}
