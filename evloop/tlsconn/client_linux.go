//go:build linux

package tlsconn

import (
	"crypto/tls"
	"net"
	"os"
	"time"
)

// Client starts the client side of TLS on fd, a socket the shard connected (its
// non-blocking connect completed): on the shard, it duplicates the descriptor into a
// blocking net.Conn of the runtime's poller and sets crypto/tls's client up over it with
// cfg (the server name, the roots, the client certificate, the ALPN list in NextProtos and
// the session cache are cfg's). It does no I/O. The caller then runs Handshake in a
// goroutine, and on success posts the Conn back to the shard, which calls Attach with the
// descriptor's registration, as on the server side; fd stays the caller's throughout.
func Client(fd int, cfg *tls.Config) (*Conn, error) {
	d, err := dupCloexec(fd)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(d), "tls")
	nc, err := net.FileConn(f) // a second duplicate, in the runtime's poller
	_ = f.Close()
	if err != nil {
		return nil, err
	}
	c := &Conn{}
	c.t.nc, c.t.la, c.t.ra = nc, nc.LocalAddr(), nc.RemoteAddr()
	c.tc = tls.Client(&c.t, cfg)
	return c, nil
}

// Handshake runs the client handshake of a Conn made by Client within timeout, blocking its
// goroutine (never a shard's). On failure the caller calls Release (which closes the
// duplicate) on the shard and closes fd.
func (c *Conn) Handshake(timeout time.Duration) error {
	_ = c.t.nc.SetDeadline(time.Now().Add(timeout))
	if err := c.tc.Handshake(); err != nil {
		return err
	}
	_ = c.t.nc.SetDeadline(time.Time{})
	return nil
}

// Cancel ends a Handshake in progress at once (it returns a timeout error); safe on any
// goroutine until the Conn is attached or released. The shard calls it when it gives up on
// the connection first (its own timer, the request gone).
func (c *Conn) Cancel() {
	if nc := c.t.nc; nc != nil {
		_ = nc.SetDeadline(time.Unix(1, 0))
	}
}
