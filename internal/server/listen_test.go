package server

import (
	"context"
	"net"
	"testing"

	"golang.org/x/sys/unix"
)

// Every connection the public listener accepts has TCP_USER_TIMEOUT set:
// a client whose host vanished is let go after UserTimeout, not after the
// kernel's 15 minutes of retransmissions.
func TestListenSetsUserTimeout(t *testing.T) {
	l, err := Listen(context.Background(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		if c, err := net.Dial("tcp", l.Addr().String()); err == nil {
			defer c.Close()
			buf := make([]byte, 1)
			_, _ = c.Read(buf)
		}
	}()
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var got int
	var gerr error
	if err := rc.Control(func(fd uintptr) { got, gerr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT) }); err != nil || gerr != nil {
		t.Fatal(err, gerr)
	}
	if got != int(UserTimeout.Milliseconds()) {
		t.Fatalf("TCP_USER_TIMEOUT %d ms, want %d", got, UserTimeout.Milliseconds())
	}
}
