//go:build linux

package h1

import (
	"errors"
	"net/netip"
	"time"

	"ballast/evloop"
	"ballast/evloop/tlsconn"
	"ballast/tlsconf"
)

// HTTP/2 backends over TLS (pools with protocol h2): an h2bConn whose TCP connect completed
// runs tlsconn's client handshake off the shard, as an HTTP/1.1 backend connection does
// (backendtls.go: the same per-backend client configurations, built at attach with ALPN h2,
// the same bound on handshakes in progress and the same counters), within timeouts.connect
// on the connection's own timer. Back on the shard the connection is HTTP/2 only if the
// backend negotiated h2 by ALPN; then its frames are read and written through crypto/tls on
// the shard's descriptor (h2bConn.io is the tlsconn.Conn; c.FD stays the readiness). A
// handshake that fails, times out, or ends without h2 fails the streams waiting for the
// connection as connect failures (nothing was sent: any method may go elsewhere), logged
// and counted (Stats.BackendTLSFailures), and the connection closes; the streams do not
// wait for another connection to a backend that just refused one.

var errNoALPNH2 = errors.New("backend did not negotiate HTTP/2 (ALPN " + tlsconf.ALPNH2 + ")")

// startTLS begins the client handshake of a connection whose TCP connect completed; it stays
// connecting (no stream slot) until the handshake is back.
func (c *h2bConn) startTLS() {
	sh := c.sh
	e := sh.e
	var bt *backendTLS
	if st := stateOf(c.b); st != nil {
		bt = st.tls.Load().find(c.tlsFor, true)
	}
	switch {
	case bt == nil: // not reached: the engine attaches every pool before its table serves
		c.fail(errNoBackendTLS)
		return
	case bt.err != nil:
		c.fail(bt.err)
		return
	}
	if e.backendHandshakes.Add(1) > e.maxBackendHandshakes.Load() {
		e.backendHandshakes.Add(-1)
		sh.st.backendTLSRefused.Add(1)
		c.fail(errBackendHandshakes)
		return
	}
	tc, err := tlsconn.Client(c.Fd, bt.cfg)
	if err != nil {
		e.backendHandshakes.Add(-1)
		c.fail(err)
		return
	}
	c.hs = tc
	timeout := c.ps.ConnectTimeout
	sh.s.Arm(&c.timer, sh.now+int64(timeout))
	h := &h2bHandshake{c: c, tc: tc}
	// The shard's timer decides (and cancels the handshake); the goroutine's own deadline,
	// later, only bounds it should the shard be gone.
	go h.run(e, sh.s, timeout+time.Second)
}

// h2bHandshake brings an HTTP/2 backend connection's handshake back to its shard.
type h2bHandshake struct {
	c   *h2bConn
	tc  *tlsconn.Conn
	err error
}

func (h *h2bHandshake) run(e *Engine, s *evloop.Shard, timeout time.Duration) {
	h.err = h.tc.Handshake(timeout)
	e.backendHandshakes.Add(-1)
	s.Post(h)
}

// Run continues on the shard: the connection speaks HTTP/2 over TLS (the preface goes out,
// the backend's SETTINGS are read, the waiting streams get their slots), or it fails; one
// given up on meanwhile only has the handshake's duplicate closed.
func (h *h2bHandshake) Run(s *evloop.Shard) {
	c := h.c
	if c.dead || c.hs != h.tc {
		h.tc.Release()
		return
	}
	sh := c.sh
	sh.now = s.Now()
	c.hs = nil
	sh.s.Stop(&c.timer)
	if h.err == nil && h.tc.ConnectionState().NegotiatedProtocol != tlsconf.ALPNH2 {
		h.err = errNoALPNH2
	}
	if h.err != nil {
		h.tc.Release()
		c.handshakeFailed(h.err)
		return
	}
	sh.st.backendTLS.Add(1)
	if h.tc.ConnectionState().DidResume {
		sh.st.backendTLSResumed.Add(1)
	}
	c.tls = h.tc
	h.tc.Attach(&c.FD)
	c.io = h.tc
	c.connecting = false
	// What came meanwhile was not seen here, and crypto/tls may hold bytes already.
	c.Ready |= evloop.Readable | evloop.Writable
	c.Event(evloop.Readable | evloop.Writable)
}

// handshakeFailed: the handshake failed, timed out or negotiated no h2.
func (c *h2bConn) handshakeFailed(err error) {
	c.sh.st.backendTLSFailures.Add(1)
	c.sh.h2b.st.tlsFailures.Add(1)
	c.sh.e.logger.Warn("backend TLS handshake failed", "backend", c.b.Address, "err", err)
	c.fail(err)
}

// fail closes a connection that could not be made (the connect failed or timed out, or its
// TLS did): the streams waiting fail as connect failures, or, when other connections to the
// backend live, wait on for their slots; no connection is dialled for them at once (a
// backend that refuses connections would be dialled in a loop until the streams' timers).
func (c *h2bConn) fail(err error) {
	c.connecting = false
	c.sh.h2b.st.connectFailures.Add(1)
	p := c.pool
	w := p.waiting
	p.waiting = nil
	c.close()
	p.waiting = append(w, p.waiting...)
	if p.anyLive() {
		c.sh.st.connectFailures.Add(1)
		p.dispatch(c.sh, netip.AddrPort{}, c.ps) // slots only: no new connection
		return
	}
	p.failWaiting(c.sh, err)
}

// closeTLS ends the connection's TLS before its descriptor closes: a handshake in progress
// is cancelled, an established connection's buffers go back to the shard.
func (c *h2bConn) closeTLS() {
	if c.hs != nil {
		c.hs.Cancel()
		c.hs = nil
	}
	if c.tls != nil {
		c.tls.Release()
		c.tls = nil
	}
}
