//go:build linux

package h1

import (
	"net"
	"net/netip"
	"syscall"

	"ballast/evloop"
	"ballast/httpcore"
)

// front is an exchange's client side: an HTTP/1.1 connection (clientConn) or an HTTP/2
// stream served on the shard (h2stream). The exchange reads the request body from it, times
// the client's waits on its timer, and hands it the response: the core's own answers, the
// backend's head, body bytes (with backpressure: the exchange stops reading the backend while
// blocked reports bytes the client has not taken), the end, or a failure.
type front interface {
	// The request body: bytes that came already (pending, of which consume takes n), then
	// reads of more while readable.
	pending() []byte
	consume(n int)
	readable() bool
	read(p []byte) (int, error)

	// The front's timer, by phase (tBody, tQueue, tHedge are the exchange's).
	arm(phase uint8, at int64)
	disarm()
	phase() uint8

	lst() *listener
	peerAddr() netip.AddrPort
	localAddr() net.Addr
	secure() bool           // the client came over TLS
	watchGone()             // the request went out whole: notice a client that leaves (gone.go)
	alive() bool            // the client is still there (the record is not freed)
	generation() uint32     // changes when the record is freed
	expired(now int64) bool // the client's own deadline (a gRPC request's grpc-timeout) has passed

	// The response.
	continue100()                         // an interim 100 Continue
	render(rp *httpcore.Reply, head bool) // an answer of Ballast's own
	head(ex *exchange, m respMode, w []byte) []byte
	write(a, b []byte) bool // body bytes (a then b); false when the client is gone
	blocked() bool          // bytes wait for the client: the backend is not read meanwhile
	readSize() int          // how much one read of the backend's body may take
	closing() bool          // the connection closes after this response
	setClosing()
	lastRequest() bool // the connection's max_keepalive_requests is reached with this one
	raw() bool         // the body goes to the client unframed (HTTP/1.0, HTTP/2)
	abort()            // the response cannot be completed: the client is cut off
	done(closeAfter bool)
}

// clientConn's side of front.

func (c *clientConn) pending() []byte { return c.in }

func (c *clientConn) consume(n int) {
	c.in = c.in[:copy(c.in, c.in[n:])]
	if len(c.in) == 0 {
		c.releaseIn()
	}
}

func (c *clientConn) readable() bool                                 { return c.Ready&evloop.Readable != 0 }
func (c *clientConn) read(p []byte) (int, error)                     { return c.Read(p) }
func (c *clientConn) phase() uint8                                   { return c.tphase }
func (c *clientConn) lst() *listener                                 { return c.l }
func (c *clientConn) peerAddr() netip.AddrPort                       { return c.peer }
func (c *clientConn) alive() bool                                    { return c.Registered() }
func (c *clientConn) generation() uint32                             { return c.gen }
func (c *clientConn) expired(int64) bool                             { return false }
func (c *clientConn) continue100()                                   { c.write(continue100, nil) }
func (c *clientConn) blocked() bool                                  { return len(c.out) > 0 }
func (c *clientConn) readSize() int                                  { return evloop.ReadBufSize }
func (c *clientConn) closing() bool                                  { return c.closeAfter }
func (c *clientConn) setClosing()                                    { c.closeAfter = true }
func (c *clientConn) raw() bool                                      { return c.ex != nil && c.ex.http10 }
func (c *clientConn) head(ex *exchange, m respMode, w []byte) []byte { return ex.rm.render(w, m) }

func (c *clientConn) lastRequest() bool {
	return c.l.maxRequests > 0 && c.served+1 >= c.l.maxRequests
}

var (
	_ front = (*clientConn)(nil)
	_ front = (*h2stream)(nil)
)

// localAddr is the address the client connected to: the PROXY header's, else asked of the
// socket.
func (c *clientConn) localAddr() net.Addr {
	if c.local.IsValid() {
		return net.TCPAddrFromAddrPort(c.local)
	}
	var sa syscall.Sockaddr
	if fd := c.FD.Fd; fd >= 0 {
		sa, _ = syscall.Getsockname(fd)
	}
	switch a := sa.(type) {
	case *syscall.SockaddrInet4:
		return &net.TCPAddr{IP: a.Addr[:], Port: a.Port}
	case *syscall.SockaddrInet6:
		return &net.TCPAddr{IP: a.Addr[:], Port: a.Port}
	}
	return &net.TCPAddr{IP: net.IPv4zero}
}

func (c *clientConn) secure() bool { return c.tls != nil }
