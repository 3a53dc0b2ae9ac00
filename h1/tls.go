//go:build linux

package h1

import (
	"crypto/tls"
	"net"
	"net/netip"
	"syscall"
	"time"

	"ballast/evloop"
	"ballast/evloop/tlsconn"
)

// TLS listeners: the shard that accepts a connection admits it (max_conns_per_client) and
// hands its descriptor to a goroutine for the handshake (package tlsconn), bounded by
// read_header_timeout. With accept_proxy the shard first reads the PROXY header as on a plain
// listener (clientConn.readProxy: trusted peers only, within read_header_timeout of the
// accept, the header's client admitted), then hands the descriptor on with the bytes that
// came after the header, which crypto/tls reads first; the handshake gets what is left of
// read_header_timeout. Every connection comes back to the shard that accepted it, every read
// and write going through crypto/tls on the shard (clientConn's Read, Write, Writev and
// ShutdownWrite below): HTTP/1.1 ones are served as plain ones, those that negotiated h2 by
// ALPN by an h2mux.Conn (h2conn.go), as on an h2c listener.

// maxHandshakes bounds the TLS handshakes in progress in an engine, each a goroutine and two
// descriptors for up to read_header_timeout: a flood of connections that never finish their
// handshake is closed at accept past it (Stats.TLSRefused), as a full backlog would be.
const maxHandshakes = 4096

// tlsOpts is a TLS listener's: the server configuration.
type tlsOpts struct {
	cfg *tls.Config
}

// tlsPending is a connection on its way to its handshake: its descriptor, its client (a
// PROXY header's when the listener takes them) and what came after that header.
type tlsPending struct {
	fd      int
	peer    netip.AddrPort
	local   netip.AddrPort // the PROXY header's destination (zero without one)
	counted bool           // counted against max_conns_per_client
	prefix  []byte         // bytes read after the PROXY header: the ClientHello's start
	timeout time.Duration  // what is left of read_header_timeout
}

// startHandshake runs p's handshake in a goroutine of its own, one of at most maxHandshakes:
// past that the connection is closed (Stats.TLSRefused), as a full backlog would be.
func (l *listener) startHandshake(sh *shard, p *tlsPending) {
	if l.e.handshakes.Add(1) > l.e.maxHandshakes.Load() {
		l.e.handshakes.Add(-1)
		sh.st.tlsRefused.Add(1)
		l.dropFD(p.fd, p.peer, p.counted)
		return
	}
	go l.handshake(sh.s, p) // back on this shard once handshaken
}

// toHandshake sends a connection of a TLS listener with accept_proxy, whose PROXY header was
// just read, to its handshake: the descriptor leaves the shard with the bytes that came after
// the header, the rest of read_header_timeout (counted from the accept) its deadline.
func (c *clientConn) toHandshake() {
	sh, l := c.sh, c.l
	p := &tlsPending{peer: c.peer, local: c.local, counted: c.counted}
	p.timeout = time.Duration(max(c.since+l.readHdr-sh.now, int64(time.Millisecond)))
	if len(c.in) > 0 {
		p.prefix = append([]byte(nil), c.in...)
	}
	c.releaseIn()
	c.Shard().Stop(&c.timer)
	p.fd = c.Detach()
	sh.unlink(c)
	sh.st.conns.Add(-1)
	sh.freeClient(c) // counted is p's now
	l.startHandshake(sh, p)
}

// handshake runs in its own goroutine: the handshake, then the connection back to its shard.
func (l *listener) handshake(s *evloop.Shard, p *tlsPending) {
	sh := l.e.shards[s.ID()]
	defer l.e.handshakes.Add(-1)
	opts := tlsconn.Options{Prefix: p.prefix}
	if l.proxy { // the addresses the connection reports (ClientHelloInfo.Conn) are the header's
		opts.Remote = net.TCPAddrFromAddrPort(p.peer)
		if p.local.IsValid() {
			opts.Local = net.TCPAddrFromAddrPort(p.local)
		}
	}
	tc, err := tlsconn.HandshakeWith(p.fd, l.tls.cfg, p.timeout, opts)
	if err != nil {
		sh.st.tlsFailures.Add(1)
		l.dropFD(p.fd, p.peer, p.counted)
		return
	}
	// h2: HTTP/2 on the shard (h2conn.go), its records through crypto/tls as HTTP/1.1's.
	s.Post(&tlsAttach{l: l, p: p, tc: tc, h2: tc.ConnectionState().NegotiatedProtocol == "h2"})
}

// dropFD closes a connection that never reached a shard.
func (l *listener) dropFD(fd int, peer netip.AddrPort, counted bool) {
	_, _, _ = syscall.RawSyscall(syscall.SYS_CLOSE, uintptr(fd), 0, 0)
	l.releaseConn(peer, counted)
}

func (l *listener) releaseConn(peer netip.AddrPort, counted bool) {
	if counted {
		l.e.core.ReleaseConn(l.name, peer.Addr().Unmap())
	}
}

// tlsAttach brings a handshaken connection to the shard that accepted it.
type tlsAttach struct {
	l  *listener
	p  *tlsPending
	tc *tlsconn.Conn
	h2 bool // ALPN h2: served on the shard by an h2mux.Conn
}

func (t *tlsAttach) Run(s *evloop.Shard) {
	l, p := t.l, t.p
	sh := l.e.shards[s.ID()]
	sh.now = s.Now()
	if l.e.stopping.Load() {
		t.tc.Release()
		l.dropFD(p.fd, p.peer, p.counted)
		return
	}
	c := sh.newClient()
	c.l, c.peer, c.local, c.counted = l, p.peer, p.local, p.counted
	if err := s.Add(&c.FD, p.fd, c); err != nil {
		t.tc.Release()
		l.dropFD(p.fd, p.peer, p.counted)
		sh.freeClient(c)
		return
	}
	c.tls = t.tc
	t.tc.Attach(&c.FD)
	if t.h2 {
		c.startTLSH2()
		return
	}
	c.start()
}

// Read, Write, Writev and ShutdownWrite are the connection's I/O: the socket's, or through
// crypto/tls on a TLS listener. They keep the socket's contract (evloop.FD's): a short write
// is followed by one that offers the rest first.

func (c *clientConn) Read(p []byte) (int, error) {
	if c.tls != nil {
		return c.tls.Read(p)
	}
	return c.FD.Read(p)
}

func (c *clientConn) Write(p []byte) (int, error) {
	if c.tls != nil {
		return c.tls.Write(p)
	}
	return c.FD.Write(p)
}

func (c *clientConn) Writev(a, b []byte) (int, error) {
	if c.tls != nil {
		return c.tls.Writev(a, b)
	}
	return c.FD.Writev(a, b)
}

func (c *clientConn) ShutdownWrite() {
	if c.tls != nil {
		c.tls.CloseWrite()
		return
	}
	c.FD.ShutdownWrite()
}
