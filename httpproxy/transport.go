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
			c, err := d.Dial("tcp", addr)
			if err != nil {
				return nil, err
			}
			return newDeadlineConn(c), nil
		},
		MaxConns:            maxConns,
		MaxIdleConnDuration: idle,
		// Ballast decides every retry itself (forward, hedged); fasthttp must never re-send.
		MaxIdemponentCallAttempts: 1,
		RetryIfErr:                neverRetry,
		ReadBufferSize:            backendBufferSize,
		WriteBufferSize:           backendBufferSize,
		DisablePathNormalizing:    true,
		NoDefaultUserAgentHeader:  true,
		StreamResponseBody:        true,
		ConnPoolStrategy:          fasthttp.LIFO,
	}
}

// neverRetry keeps fasthttp from re-sending a request on its own: whether a request may be
// sent again depends on what the backend may have received, which only the proxy tracks.
func neverRetry(*fasthttp.Request, int, error) (resetTimeout, retry bool) { return false, false }

func durationOr(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// errClass says what went wrong with one attempt; it decides the status and whether to retry.
type errClass uint8

const (
	errNone          errClass = iota
	errConnect                // the backend could not be reached: never received the request
	errStale                  // a pooled connection was found closed before any request byte was sent
	errClosed                 // the connection closed or reset after the request was (partly) sent
	errTimeout                // no response headers within the response timeout
	errBadGateway             // anything else on the backend side (malformed response, ...)
	errClient                 // reading the request body from the client failed
	errClientTimeout          // the client sent its request body too slowly (see upload)
	errCancelled              // a hedge lost, or the request was abandoned
)

// status is the response a failed attempt turns into.
func (c errClass) status() int {
	switch c {
	case errTimeout:
		return fasthttp.StatusGatewayTimeout
	case errClient:
		return fasthttp.StatusBadRequest
	case errClientTimeout:
		return fasthttp.StatusRequestTimeout
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
	case errClientTimeout:
		return "client request body too slow"
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

	// What the backend may have seen, which decides whether a failure may be retried: reused
	// says the connection came from the idle pool, wrote that some request byte reached the
	// socket (so the backend may have received, and acted on, the request).
	reused bool
	wrote  bool

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
	a.reused, a.wrote = false, false
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
	a.reused = reused
	a.conn = conn
	dc, _ := conn.(*deadlineConn)
	if dc != nil {
		dc.sent = 0
		if reused && !idempotent(&a.req.Header) && dc.raw.peerGone() {
			// The backend closed this idle connection: nothing was sent, so the request may
			// go out on another one whatever its method. Checked only for requests that
			// could not be replayed once written, since it costs a system call.
			a.closeConn()
			return a.fail(errStale, errPeerClosed)
		}
	}
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
	var sending chan error
	switch {
	case a.upload != nil:
		// A streamed body goes out from its own goroutine while this one waits for the
		// response, so a backend that answers before it has read the whole body (413, 401, a
		// redirect) is heard at once rather than as a failed write.
		sending = a.upload.send(a.req, bw)
	case dc != nil && dc.raw.rc != nil && reused && a.start.Sub(lastUse) < quickReuse:
		err = dc.writeAndWait(a.req, bw)
	default:
		err = a.req.Write(bw)
		if err == nil {
			err = bw.Flush()
		}
	}
	if sending == nil {
		a.hc.ReleaseWriter(bw)
		a.wrote = dc == nil || dc.sent > 0 // without the count, assume the worst
		if err != nil {
			a.closeConn()
			return a.classify(err, reused)
		}
	}
	br := a.hc.AcquireReader(conn)
	out := a.out
	out.Header.SetNoDefaultContentType(true)
	err = readResponseHeader(&out.Header, br)
	if sending != nil {
		werr, cut := a.upload.join(sending)
		a.hc.ReleaseWriter(bw)
		a.wrote = dc == nil || dc.sent > 0
		if err == nil && (cut || werr != nil) {
			// An early answer: the request was not sent whole, so the connection cannot
			// carry another one. (Connection is hop-by-hop: the client never sees this.)
			out.Header.SetConnectionClose()
		}
		if err == nil && !cut && werr == nil {
			err = conn.SetWriteDeadline(time.Time{})
		}
	}
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
	case cl >= 0 && cl <= maxBufferedResponse && br.Buffered() >= cl:
		// A small body that has arrived whole is taken at once: no stream to set up, no
		// further read, the connection goes back now. One still on its way streams, so its
		// first bytes reach the client without waiting for the last (server-sent events,
		// long polling).
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

// maxBufferedResponse is the largest response body taken into memory instead of streamed,
// when it has already arrived with the headers.
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

// errPeerClosed is the error of a pooled connection found closed before the request was sent.
var errPeerClosed = errors.New("pooled backend connection closed by the backend")

// classify maps an error of writing the request or reading the response headers to a class.
// errStale is reserved for a connection that failed before any byte of the request was sent:
// only then is the request known not to have reached the backend.
func (a *attempt) classify(err error, reused bool) bool {
	if a.upload != nil && a.upload.err != nil {
		if isTimeout(a.upload.err) {
			return a.fail(errClientTimeout, a.upload.err)
		}
		return a.fail(errClient, a.upload.err)
	}
	if a.isCancelled() {
		return a.fail(errCancelled, err)
	}
	switch {
	case isTimeout(err):
		return a.fail(errTimeout, err)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EPIPE), errors.Is(err, net.ErrClosed), errors.Is(err, fasthttp.ErrConnectionClosed):
		if reused && !a.wrote {
			return a.fail(errStale, err)
		}
		return a.fail(errClosed, err)
	}
	return a.fail(errBadGateway, err)
}

// isTimeout reports whether err is a deadline that passed.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, fasthttp.ErrTimeout) || errors.Is(err, os.ErrDeadlineExceeded) ||
		errors.As(err, &ne) && ne.Timeout()
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

	served int   // requests sent on this connection, for keepalive.max_requests
	sent   int64 // bytes written since roundTrip last reset it: was anything of the request sent?
}

func newDeadlineConn(c net.Conn) *deadlineConn {
	dc := &deadlineConn{Conn: c}
	dc.raw.init(c)
	dc.wait = dc.writeThenPark
	return dc
}

// Read reads through rawIO (see there).
func (dc *deadlineConn) Read(p []byte) (int, error) { return dc.raw.read(dc.Conn, p) }

// Write writes through rawIO (see there) and counts what the socket accepted.
func (dc *deadlineConn) Write(p []byte) (int, error) {
	n, err := dc.raw.write(dc.Conn, p)
	dc.sent += int64(n)
	return n, err
}

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

// bodyProgress is the part of a request body that must arrive within the body timeout
// (listener.idle_timeout): the timeout restarts only after this much more has arrived. It
// equals maxBufferedBody, so a body read whole before forwarding (at most that size) and a
// streamed one, chunked or not, obey the same rule; a body trickling in below bodyProgress
// per timeout cannot hold a backend slot for longer than the timeout.
const bodyProgress = maxBufferedBody

// upload relays a streamed request body from the client to the backend. The client side's
// read deadline, armed for the body timeout when the headers arrived (headerReceived), moves
// on only after each bodyProgress bytes, so the timeout bounds a trickle and not just
// silence; the backend side's write deadline moves on while data flows, so it bounds
// inactivity, not the transfer.
//
// The body is sent by its own goroutine (send) while the attempt waits for the response; join
// ends it. Fields other than stopped belong to that goroutine until join returns.
type upload struct {
	r        io.Reader
	ctx      *fasthttp.RequestCtx
	conn     net.Conn      // the backend connection being written
	bw       *bufio.Writer // its writer, flushed after every piece of body (see WriteTo)
	n        int64
	err      error // the client side failed (not set once stopped)
	armed    time.Time
	progress int64         // bytes since the client deadline was last moved on
	deadline time.Time     // the client read deadline the body timeout set last
	idle     time.Duration // the body timeout (listener.idle_timeout)
	rt       time.Duration // backend inactivity limit

	stopped     atomic.Bool // the response came first: read no more of the body
	interrupted bool        // stopping cut a client read short: the body cannot be drained
}

// errUploadStopped ends the body of a request the backend answered before reading it all.
var errUploadStopped = errors.New("backend answered before the request body was sent")

func (u *upload) Read(p []byte) (int, error) {
	if u.stopped.Load() {
		return 0, errUploadStopped
	}
	n, err := u.r.Read(p)
	u.n += int64(n)
	u.progress += int64(n)
	if err != nil && err != io.EOF {
		if u.stopped.Load() {
			u.interrupted = true // join's deadline woke this read
		} else {
			u.err = err
		}
	}
	now := time.Now()
	if u.progress >= bodyProgress && u.idle > 0 {
		u.progress = 0
		u.deadline = now.Add(u.idle)
		_ = u.ctx.SetReadDeadline(u.deadline)
	}
	if u.conn != nil && now.Sub(u.armed) >= deadlineRefresh {
		// Both ways: the wait for response headers, too, counts from the last body byte.
		u.armed = now
		_ = u.conn.SetDeadline(now.Add(u.rt))
	}
	return n, err
}

// send writes req, whose body is u, through bw from a new goroutine and reports the result
// on the returned channel. A client that fails or stalls past the body timeout also ends the
// attempt's wait for response headers, which the backend will not send for half a body.
func (u *upload) send(req *fasthttp.Request, bw *bufio.Writer) chan error {
	u.bw = bw
	u.stopped.Store(false) // a retry sends the untouched body again
	done := make(chan error, 1)
	go func() {
		err := req.Write(bw)
		if err == nil {
			err = bw.Flush()
		}
		if err != nil && u.err != nil {
			_ = u.conn.SetReadDeadline(time.Now())
		}
		done <- err
	}()
	return done
}

// join waits for send's goroutine and returns its error. When the goroutine is still
// sending (the response headers came first, or waiting for them failed) it is stopped: its
// backend write and its client read are woken by deadlines in the past. cut reports that
// case. If a client read was cut short, the rest of the body cannot be drained: the read
// failed the server's request stream, so fasthttp closes the client connection after the
// response. Otherwise the client deadline is put back and the server drains the rest of the
// body before the next request (or closes the connection if too much is left).
func (u *upload) join(sending chan error) (err error, cut bool) {
	select {
	case err = <-sending:
		return err, false
	default:
	}
	u.stopped.Store(true)
	now := time.Now()
	_ = u.conn.SetWriteDeadline(now)
	if rc, ok := u.ctx.Conn().(*rawConn); !ok || !rc.raw.pending() {
		// The goroutine may be waiting for body bytes the client is not sending. (With
		// bytes waiting, its read returns and its next write to the backend fails.)
		_ = u.ctx.SetReadDeadline(now)
	}
	err = <-sending
	if !u.interrupted {
		_ = u.ctx.SetReadDeadline(u.deadline)
	}
	return err, true
}

// SupportsBodyWriteTo tells fasthttp that WriteTo may stand in for Read (it reads through it).
func (u *upload) SupportsBodyWriteTo() bool { return true }

// WriteTo sends the body as it comes from the client. fasthttp would gather it in the
// connection's writer until that is full, so the request headers and the first bytes could
// wait there for more body indefinitely while the backend, which might refuse the request at
// once, never sees them. WriteTo flushes the headers first and then every piece it relays.
func (u *upload) WriteTo(w io.Writer) (int64, error) {
	if err := u.bw.Flush(); err != nil {
		return 0, err
	}
	bp := relayBufPool.Get().(*[]byte)
	defer relayBufPool.Put(bp)
	var total int64
	for {
		n, err := u.Read(*bp)
		if n > 0 {
			if _, werr := w.Write((*bp)[:n]); werr != nil {
				return total, werr
			}
			total += int64(n)
			if werr := u.bw.Flush(); werr != nil {
				return total, werr
			}
		}
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}
