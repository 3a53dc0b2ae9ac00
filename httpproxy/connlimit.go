package httpproxy

import (
	"net"
	"net/netip"
	"sync/atomic"

	"ballast/httpcore"
)

// connLimitListener counts every accepted connection against its listener's
// max_conns_per_client (httpcore.Core.AdmitConn); a connection over it is closed at once.
// Connections that come through the server's front were counted there.
type connLimitListener struct {
	net.Listener
	core     *httpcore.Core
	listener string
}

func (l connLimitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		peer := httpcore.ClientAddr(c.RemoteAddr())
		ok, counted := l.core.AdmitConn(l.listener, peer)
		switch {
		case !ok:
			_ = c.Close()
		case counted:
			return &countedConn{Conn: c, core: l.core, listener: l.listener, ip: peer}, nil
		default:
			return c, nil
		}
	}
}

// countedConn gives its place back when closed (once).
type countedConn struct {
	net.Conn
	core     *httpcore.Core
	listener string
	ip       netip.Addr
	closed   atomic.Bool
}

func (c *countedConn) Close() error {
	if c.closed.CompareAndSwap(false, true) {
		c.core.ReleaseConn(c.listener, c.ip)
	}
	return c.Conn.Close()
}

// CloseWrite half-closes the connection, which the tunnel relies on.
func (c *countedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// fronted is a listener whose connections arrive from the server's front (package server):
// TLS, if the listener has it, is terminated, and each connection was counted against
// max_conns_per_client before the front chose the HTTP version. Serve serves them as they are.
type fronted interface{ Fronted() }
