//go:build linux

package h1

import (
	"crypto/tls"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"ballast/evloop"
	"ballast/evloop/tlsconn"
)

// TLS listeners: the shard that accepts a connection admits it (max_conns_per_client) and
// hands its descriptor to a goroutine for the handshake (package tlsconn), bounded by
// read_header_timeout. Every connection comes back to the shard that accepted it, every read
// and write going through crypto/tls on the shard (clientConn's Read, Write, Writev and
// ShutdownWrite below): HTTP/1.1 ones are served as plain ones, those that negotiated h2 by
// ALPN by an h2mux.Conn (h2conn.go) when the engine has HTTP/2 settings (SetHTTP2), else
// they go, blocking, to the listener's HTTP/2 server.

// maxHandshakes bounds the TLS handshakes in progress in an engine, each a goroutine and two
// descriptors for up to read_header_timeout: a flood of connections that never finish their
// handshake is closed at accept past it (Stats.TLSRefused), as a full backlog would be.
const maxHandshakes = 4096

// tlsOpts is a TLS listener's: the server configuration, the HTTP/2 server, and the count
// of handshakes in progress (busy, may be nil), which the HTTP/2 plane's shutdown waits on so
// that an h2 connection accepted before it is served (with its GOAWAY), not dropped.
type tlsOpts struct {
	cfg  *tls.Config
	h2   func(net.Conn)
	busy func(delta int)
}

// handshake runs in its own goroutine: the handshake, then the connection to its server.
func (l *listener) handshake(s *evloop.Shard, fd int, peer netip.AddrPort, counted bool) {
	sh := l.e.shards[s.ID()]
	if l.tls.busy != nil {
		l.tls.busy(1)
	}
	done := sync.OnceFunc(func() {
		l.e.handshakes.Add(-1)
		if l.tls.busy != nil {
			l.tls.busy(-1)
		}
	})
	defer done()
	tc, err := tlsconn.Handshake(fd, l.tls.cfg, time.Duration(l.readHdr))
	if err != nil {
		sh.st.tlsFailures.Add(1)
		l.dropFD(fd, peer, counted)
		return
	}
	h2 := tc.ConnectionState().NegotiatedProtocol == "h2"
	if h2 && l.h2tls { // HTTP/2 on the shard (h2conn.go), records through crypto/tls as HTTP/1.1's
		s.Post(&tlsAttach{l: l, fd: fd, peer: peer, counted: counted, tc: tc, h2: true})
		return
	}
	if h2 {
		_, _, _ = syscall.RawSyscall(syscall.SYS_CLOSE, uintptr(fd), 0, 0) // the duplicate serves
		if l.tls.h2 == nil {
			tc.Release()
			l.releaseConn(peer, counted)
			return
		}
		var release func()
		if counted { // max_conns_per_client's place, given back when the connection closes
			release = func() { l.releaseConn(peer, true) }
		}
		c := tc.Blocking(release) // a *tls.Conn, as the HTTP/2 server expects of TLS
		done()                    // handed over: the HTTP/2 plane counts it from here
		l.tls.h2(c)
		return
	}
	s.Post(&tlsAttach{l: l, fd: fd, peer: peer, counted: counted, tc: tc})
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
	l       *listener
	fd      int
	peer    netip.AddrPort
	counted bool
	tc      *tlsconn.Conn
	h2      bool // ALPN h2: served on the shard by an h2mux.Conn
}

func (t *tlsAttach) Run(s *evloop.Shard) {
	l := t.l
	sh := l.e.shards[s.ID()]
	sh.now = s.Now()
	if l.e.stopping.Load() {
		t.tc.Release()
		l.dropFD(t.fd, t.peer, t.counted)
		return
	}
	c := sh.newClient()
	c.l, c.peer, c.counted = l, t.peer, t.counted
	if err := s.Add(&c.FD, t.fd, c); err != nil {
		t.tc.Release()
		l.dropFD(t.fd, t.peer, t.counted)
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
