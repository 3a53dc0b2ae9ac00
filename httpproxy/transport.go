package httpproxy

import (
	"bufio"
	"errors"
	"io"
	"math"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"

	"ballast/config"
	"ballast/upstream"
)

const (
	backendBufferSize = 16 << 10 // response header limit from a backend, per connection
	deadlineRefresh   = time.Second
)

// newHostClient builds the keep-alive connection pool of one backend. The proxy uses it only
// as a pool of connections (AcquireConn/ReleaseConn) and writes and reads the messages itself,
// so that it controls deadlines, retries and cancellation; the fields that shape messages are
// still set so the client is safe to use with Do as well.
func newHostClient(pc *config.Pool, b *upstream.Backend) *fasthttp.HostClient {
	connect := durationOr(pc.Timeouts.Connect.Duration, config.DefaultConnectTimeout)
	idle := durationOr(pc.Timeouts.Idle.Duration, config.DefaultBackendIdle)
	d := &net.Dialer{Timeout: connect, KeepAlive: 30 * time.Second}
	// Without pool tls, tc is nil.
	tc, tlsErr := backendTLS(pc, b)
	maxConns := b.MaxConns() // the backend's own, else the pool's
	if maxConns <= 0 {
		maxConns = math.MaxInt32
	} else {
		// Hedge losers and aborted streams close their connections a little after their
		// slot is released, so leave the pool some slack above max_conns.
		maxConns = 2*maxConns + 16
	}
	return &fasthttp.HostClient{
		Addr: b.Address,
		Dial: func(addr string) (net.Conn, error) {
			if tlsErr != nil {
				return nil, tlsErr // never fall back to cleartext
			}
			c, err := d.Dial("tcp", addr)
			if err != nil {
				return nil, err
			}
			if tc != nil {
				return handshake(c, tc, connect)
			}
			return newDeadlineConn(c), nil
		},
		MaxConns:                  maxConns,
		MaxIdleConnDuration:       idle,
		MaxIdemponentCallAttempts: 1,
		ReadBufferSize:            backendBufferSize,
		WriteBufferSize:           backendBufferSize,
		DisablePathNormalizing:    true,
		NoDefaultUserAgentHeader:  true,
		StreamResponseBody:        true,
		ConnPoolStrategy:          fasthttp.LIFO,
	}
}

func durationOr(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// errClass says what went wrong with one attempt; it decides the status and whether to retry.
type errClass uint8

const (
	errNone       errClass = iota
	errConnect             // the backend could not be reached: never received the request
	errStale               // a reused keep-alive connection was closed before any response byte
	errClosed              // the connection closed or reset before response headers
	errTimeout             // no response headers within the response timeout
	errBadGateway          // anything else on the backend side (malformed response, ...)
	errClient              // reading the request body from the client failed
	errCancelled           // a hedge lost, or the request was abandoned
)

// status is the response a failed attempt turns into.
func (c errClass) status() int {
	switch c {
	case errTimeout:
		return fasthttp.StatusGatewayTimeout
	case errClient:
		return fasthttp.StatusBadRequest
	}
	return fasthttp.StatusBadGateway
}

func (c errClass) String() string {
	switch c {
	case errConnect:
		return "backend connect failed"
	case errStale:
		return "backend closed an idle connection"
	case errClosed:
		return "backend closed the connection before responding"
	case errTimeout:
		return "backend response timeout"
	case errBadGateway:
		return "bad response from backend"
	case errClient:
		return "client request body failed"
	case errCancelled:
		return "cancelled"
	}
	return "ok"
}

// attempt is one try of a request on one backend.
type attempt struct {
	ps   *poolState
	b    *upstream.Backend
	hc   *fasthttp.HostClient
	req  *fasthttp.Request
	out  *fasthttp.Response // receives the response headers and a buffered body
	resp fasthttp.Response  // reads a streamed body (and receives everything when hedged)

	cc    any // the *fasthttp.clientConn, whose type is not exported
	conn  net.Conn
	br    *bufio.Reader
	start time.Time
	ttfb  time.Duration // dispatch to response headers
	err   error
	class errClass

	upload *upload // the request body stream, when streamed

	// Hedging: the goroutine that runs the attempt and the one that picks the winner race on
	// state; mu guards conn against a concurrent cancel.
	state     atomic.Int32
	mu        sync.Mutex
	hconn     net.Conn // the connection cancel closes; nil once it went back to the pool
	cancelled bool
	done      chan *attempt
}

// Attempt states for hedging.
const (
	stateRunning int32 = iota
	stateDone
	stateAbandoned
)

// reset prepares a for a new try on b.
func (a *attempt) reset(ps *poolState, b *upstream.Backend, req *fasthttp.Request) {
	a.ps, a.b, a.req = ps, b, req
	if len(req.Header.Host()) == 0 {
		// An HTTP/1.0 request may come without Host; fasthttp cannot send one, and HTTP/1.1
		// backends need one, so name the backend (what a client dialling it directly would send).
		req.Header.SetHost(b.Address)
	}
	a.out = &a.resp
	a.hc = stateOf(b).hc
	a.cc, a.conn, a.br = nil, nil, nil
	a.err, a.class, a.ttfb = nil, errNone, 0
	a.cancelled, a.hconn = false, nil
	a.state.Store(stateRunning)
}

// releaseConn returns the connection to the backend's idle pool, or closes it when it has
// served keepalive.max_requests requests or the pool already keeps keepalive.max_idle idle
// connections of this backend.
func (a *attempt) releaseConn() {
	if a.cc == nil {
		return
	}
	if dc, ok := a.conn.(*deadlineConn); ok && a.ps.maxRequests > 0 && dc.served >= a.ps.maxRequests {
		a.closeConn()
		return
	}
	if a.hc.IdleConnsCount() >= a.ps.maxIdle {
		a.closeConn()
		return
	}
	a.forgetConn()
	releaseClientConn(a.hc, (*fasthttp.HostClient).ReleaseConn, a.cc)
	a.cc, a.conn = nil, nil
}

// closeConn closes the connection and frees its place in the backend's pool.
func (a *attempt) closeConn() {
	a.forgetConn()
	if a.cc != nil {
		releaseClientConn(a.hc, (*fasthttp.HostClient).CloseConn, a.cc)
		a.cc, a.conn = nil, nil
	}
}

// forgetConn stops cancel from closing the connection, which is about to be pooled or closed.
func (a *attempt) forgetConn() {
	if a.done != nil {
		a.mu.Lock()
		a.hconn = nil
		a.mu.Unlock()
	}
}

// isCancelled reports whether cancel was called.
func (a *attempt) isCancelled() bool {
	if a.done == nil {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cancelled
}

// releaseClientConn calls f (HostClient.ReleaseConn or CloseConn) with cc, whose dynamic type
// is fasthttp's unexported *clientConn: the type parameter is inferred from f, so the
// assertion names a type this package cannot spell.
func releaseClientConn[C any](hc *fasthttp.HostClient, f func(*fasthttp.HostClient, C), cc any) {
	f(hc, cc.(C))
}

// cancel closes the attempt's backend connection, which wakes a goroutine blocked on it.
func (a *attempt) cancel() {
	a.mu.Lock()
	a.cancelled = true
	if a.hconn != nil {
		_ = a.hconn.Close()
	}
	a.mu.Unlock()
}

// fail records why the attempt failed and returns false.
func (a *attempt) fail(class errClass, err error) bool {
	a.class, a.err = class, err
	return false
}

// roundTrip sends a.req to a.b and reads the response headers into a.resp. On success the
// response body, if any, is left to stream from a.br and the connection stays held.
func (a *attempt) roundTrip(hedged bool) bool {
	if a.hc == nil {
		return a.fail(errBadGateway, errors.New("backend has no transport"))
	}
	a.start = time.Now()
	cc, err := a.hc.AcquireConn(0, false)
	if err != nil {
		return a.fail(errConnect, err)
	}
	a.cc = cc
	conn := cc.Conn()
	if dc, ok := conn.(*deadlineConn); ok {
		dc.served++
	}
	lastUse := cc.LastUseTime()
	reused := !lastUse.IsZero()
	a.conn = conn
	if hedged {
		a.mu.Lock()
		a.hconn = conn
		cancelled := a.cancelled
		a.mu.Unlock()
		if cancelled {
			a.closeConn()
			return a.fail(errCancelled, nil)
		}
	}

	rt := a.ps.respTimeout
	if a.upload != nil {
		// Only a streamed body can block the write for long; small requests fit the socket
		// buffer, so they skip the deadline (and the timer update it costs).
		if err = conn.SetWriteDeadline(a.start.Add(rt)); err != nil {
			a.closeConn()
			return a.fail(errClosed, err)
		}
		a.upload.conn = conn
	}
	if err = armReadDeadline(conn, a.start, rt); err != nil {
		a.closeConn()
		return a.fail(errClosed, err)
	}
	bw := a.hc.AcquireWriter(conn)
	if dc, ok := conn.(*deadlineConn); ok && dc.raw.rc != nil && a.upload == nil && reused && a.start.Sub(lastUse) < quickReuse {
		err = dc.writeAndWait(a.req, bw)
	} else {
		err = a.req.Write(bw)
		if err == nil {
			err = bw.Flush()
		}
	}
	a.hc.ReleaseWriter(bw)
	if err == nil && a.upload != nil {
		err = conn.SetWriteDeadline(time.Time{})
	}
	if err != nil {
		a.closeConn()
		return a.classify(err, reused)
	}
	br := a.hc.AcquireReader(conn)
	out := a.out
	out.Header.SetNoDefaultContentType(true)
	err = readResponseHeader(&out.Header, br)
	if err != nil {
		a.hc.ReleaseReader(br)
		a.closeConn()
		return a.classify(err, reused)
	}
	a.ttfb = time.Since(a.start)
	code := out.Header.StatusCode()
	cl := out.Header.ContentLength()
	switch {
	case a.req.Header.IsHead() || code < 200 || code == fasthttp.StatusNoContent || code == fasthttp.StatusNotModified:
		// No body (RFC 9112 §6.3).
	case cl >= 0 && cl <= maxBufferedResponse:
		// A small body is read at once: no stream to set up, the connection goes back now.
		out.StreamBody = false
		if err = out.ReadBody(br, 0); err != nil {
			a.hc.ReleaseReader(br)
			a.closeConn()
			return a.fail(errBadGateway, err)
		}
	default:
		if out != &a.resp {
			out.Header.CopyTo(&a.resp.Header)
		}
		a.resp.StreamBody = true
		if err = a.resp.ReadBody(br, 0); err != nil {
			a.hc.ReleaseReader(br)
			a.closeConn()
			return a.fail(errBadGateway, err)
		}
		a.br = br
		return true
	}
	a.hc.ReleaseReader(br)
	if out.Header.ConnectionClose() {
		a.closeConn()
	} else {
		a.releaseConn()
	}
	return true
}

// quickReuse bounds how long a pooled connection may have been idle for writeAndWait to be
// used on it. Waiting for readability after the write is blind to an end of stream that
// arrived before it (the wait clears the poller's readiness first); a backend that closed
// the idle connection completely answers the request with a reset, which wakes the wait, but
// one that only half-closed and lingers (Apache does) would leave it waiting until the
// response timeout. No backend closes an idle connection within this time, so such an end of
// stream can only be pending on a connection idle for longer, and those, like new ones, take
// the plain path, whose read sees the end of stream at once (errStale, retried).
const quickReuse = 100 * time.Millisecond

// maxBufferedResponse is the largest response body read into memory instead of streamed.
const maxBufferedResponse = 16 << 10

// maxInterim bounds the 1xx responses skipped before the final one.
const maxInterim = 8

// readResponseHeader reads the final response header, skipping interim 1xx responses other
// than 101 Switching Protocols.
func readResponseHeader(h *fasthttp.ResponseHeader, br *bufio.Reader) error {
	for range maxInterim {
		if err := h.Read(br); err != nil {
			return err
		}
		if c := h.StatusCode(); c < 100 || c > 199 || c == fasthttp.StatusSwitchingProtocols {
			return nil
		}
	}
	return errors.New("too many interim responses")
}

// classify maps an error of writing the request or reading the response headers to a class.
func (a *attempt) classify(err error, reused bool) bool {
	if a.upload != nil && a.upload.err != nil {
		return a.fail(errClient, a.upload.err)
	}
	if a.isCancelled() {
		return a.fail(errCancelled, err)
	}
	var ne net.Error
	switch {
	case errors.Is(err, fasthttp.ErrTimeout), errors.Is(err, os.ErrDeadlineExceeded),
		errors.As(err, &ne) && ne.Timeout():
		return a.fail(errTimeout, err)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EPIPE), errors.Is(err, net.ErrClosed), errors.Is(err, fasthttp.ErrConnectionClosed):
		if reused && errors.Is(err, io.EOF) {
			return a.fail(errStale, err)
		}
		return a.fail(errClosed, err)
	}
	return a.fail(errBadGateway, err)
}

// finishBody ends a streamed response body: the connection goes back to the pool when the
// body was read to its end, and is closed otherwise.
func (a *attempt) finishBody(complete bool) {
	_ = a.resp.CloseBodyStream()
	if a.br != nil {
		a.hc.ReleaseReader(a.br)
		a.br = nil
	}
	// A body delimited by the connection's end (no length, not chunked) leaves nothing to reuse.
	if complete && !a.resp.ConnectionClose() && a.resp.Header.ContentLength() != -2 {
		a.releaseConn()
	} else {
		a.closeConn()
	}
}

// deadlineConn remembers the read deadline it last set, so that a keep-alive connection
// re-arms its response timeout at most about once a second instead of on every request
// (each re-arm is a runtime timer update).
//
// It also lets a request be written and its response awaited without the read that would
// return EAGAIN: see writeAndWait.
type deadlineConn struct {
	net.Conn
	until time.Time

	raw   rawIO                 // reads and writes without entering the runtime's syscall state
	wait  func(fd uintptr) bool // writeThenPark as a method value, made once per connection
	req   *fasthttp.Request     // the request writeAndWait is writing
	bw    *bufio.Writer
	wrote bool
	werr  error

	served int // requests sent on this connection, for keepalive.max_requests
}

func newDeadlineConn(c net.Conn) *deadlineConn {
	dc := &deadlineConn{Conn: c}
	dc.raw.init(c)
	dc.wait = dc.writeThenPark
	return dc
}

// Read reads through rawIO (see there).
func (dc *deadlineConn) Read(p []byte) (int, error) { return dc.raw.read(dc.Conn, p) }

// Write writes through rawIO (see there).
func (dc *deadlineConn) Write(p []byte) (int, error) { return dc.raw.write(dc.Conn, p) }

// writeAndWait writes req through bw and returns once the connection is readable (or the
// read deadline passed, or the connection was closed). A plain Write then Read would first
// read, get EAGAIN and only then park in the poller: one wasted syscall per request. Parking
// directly after the write is safe only because the poller's readiness flag is cleared
// before the write (RawConn.Read resets it, then calls writeThenPark), so the response's
// readiness event, which can only follow the request, is never lost. A wake-up without data
// costs nothing worse than the EAGAIN read it replaces.
func (dc *deadlineConn) writeAndWait(req *fasthttp.Request, bw *bufio.Writer) error {
	dc.req, dc.bw, dc.wrote, dc.werr = req, bw, false, nil
	err := dc.raw.rc.Read(dc.wait)
	werr := dc.werr
	dc.req, dc.bw, dc.werr = nil, nil, nil
	if werr != nil {
		return werr
	}
	return err
}

// writeThenPark is the RawConn.Read callback of writeAndWait: the first call writes the
// request and asks to wait for readability, the second reports the connection readable.
func (dc *deadlineConn) writeThenPark(uintptr) bool {
	if dc.wrote {
		return true
	}
	dc.wrote = true
	dc.werr = dc.req.Write(dc.bw)
	if dc.werr == nil {
		dc.werr = dc.bw.Flush()
	}
	return dc.werr != nil
}

// armReadDeadline makes the read deadline of c at most rt and at least rt minus a small slack
// (rt/8, at most one second) after now.
func armReadDeadline(c net.Conn, now time.Time, rt time.Duration) error {
	dc, ok := c.(*deadlineConn)
	if !ok {
		return c.SetReadDeadline(now.Add(rt))
	}
	slack := min(rt/8, time.Second)
	if !dc.until.IsZero() && dc.until.Sub(now) >= rt-slack && dc.until.Sub(now) <= rt {
		return nil
	}
	dc.until = now.Add(rt)
	return dc.Conn.SetReadDeadline(dc.until)
}

// SetReadDeadline records an explicit deadline so armReadDeadline knows the current one.
func (dc *deadlineConn) SetReadDeadline(t time.Time) error {
	dc.until = t
	return dc.Conn.SetReadDeadline(t)
}

// SetDeadline records the read part like SetReadDeadline.
func (dc *deadlineConn) SetDeadline(t time.Time) error {
	dc.until = t
	return dc.Conn.SetDeadline(t)
}

// upload relays a streamed request body from the client to the backend. It keeps both sides'
// deadlines moving while data flows, so the timeouts bound inactivity, not the transfer.
type upload struct {
	r     io.Reader
	ctx   *fasthttp.RequestCtx
	conn  net.Conn // the backend connection being written
	n     int64
	err   error
	armed time.Time
	idle  time.Duration // client inactivity limit
	rt    time.Duration // backend inactivity limit
}

func (u *upload) Read(p []byte) (int, error) {
	n, err := u.r.Read(p)
	u.n += int64(n)
	if err != nil && err != io.EOF {
		u.err = err
	}
	if now := time.Now(); now.Sub(u.armed) >= deadlineRefresh {
		u.armed = now
		if u.idle > 0 {
			_ = u.ctx.SetReadDeadline(now.Add(u.idle))
		}
		if u.conn != nil {
			_ = u.conn.SetWriteDeadline(now.Add(u.rt))
		}
	}
	return n, err
}
