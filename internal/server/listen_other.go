//go:build !linux

package server

import (
	"net"
	"time"
)

// setUserTimeout: TCP_USER_TIMEOUT is Linux's; elsewhere the kernel's
// retransmission timeout ends a vanished client's connection.
func setUserTimeout(*net.TCPConn, time.Duration) {}
