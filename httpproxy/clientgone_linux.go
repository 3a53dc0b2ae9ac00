package httpproxy

import (
	"crypto/tls"
	"net"
	"syscall"

	"golang.org/x/sys/unix"

	"ballast/sockio"
)

// clientGone reports whether the client of c has closed its connection or its sending side
// (a FIN or a reset), without reading from it: poll(2) with POLLRDHUP sees the end of the
// stream even behind bytes still unread (a TLS close_notify, a pipelined request). This is how
// nginx notices a client that gave up on a slow backend.
func clientGone(c net.Conn) bool {
	rc := rawConnOf(c)
	if rc == nil {
		return false
	}
	gone := false
	_ = rc.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLRDHUP}}
		for {
			n, err := unix.Poll(fds, 0)
			if err == unix.EINTR {
				continue
			}
			gone = err == nil && n > 0 && fds[0].Revents&(unix.POLLRDHUP|unix.POLLHUP|unix.POLLERR) != 0
			return
		}
	})
	return gone
}

// rawConnOf finds the socket under a client connection and its wrappers (TLS, the front's
// replayed prefix, parking, the connection count).
func rawConnOf(c net.Conn) syscall.RawConn {
	for range 8 {
		switch x := c.(type) {
		case *sockio.Conn:
			return x.RawConn()
		case *keepConn:
			c = x.Conn
		case *countedConn:
			c = x.Conn
		case *headConn:
			c = x.Conn
		case *tls.Conn:
			c = x.NetConn()
		case interface{ NetConn() net.Conn }:
			c = x.NetConn()
		case syscall.Conn:
			rc, err := x.SyscallConn()
			if err != nil {
				return nil
			}
			return rc
		default:
			return nil
		}
	}
	return nil
}
