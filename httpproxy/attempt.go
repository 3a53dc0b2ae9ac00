package httpproxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"

	"ballast/httpcore"
	"ballast/upstream"
)

// attempt is one try of a request on one backend.
type attempt struct {
	ps   *httpcore.Pool
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

	// o is what happened: the failure, and what the backend may have seen, which decides
	// whether it may be retried (o.Reused: the connection came from the idle pool; o.Sent:
	// some request byte reached the socket, so the backend may have received, and acted on,
	// the request).
	o httpcore.Outcome

	upload *upload  // the request body stream, when streamed
	client net.Conn // the client's connection, watched while the response is awaited; nil: not watched

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
func (a *attempt) reset(ps *httpcore.Pool, b *upstream.Backend, req *fasthttp.Request) {
	a.ps, a.b, a.req = ps, b, req
	if len(req.Header.Host()) == 0 {
		// An HTTP/1.0 request may come without Host; fasthttp cannot send one, and HTTP/1.1
		// backends need one, so name the backend (what a client dialling it directly would send).
		req.Header.SetHost(b.Address)
	}
	a.out = &a.resp
	a.hc = stateOf(b).hc
	a.cc, a.conn, a.br = nil, nil, nil
	a.o, a.ttfb = httpcore.Outcome{}, 0
	a.client = nil
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
	if dc, ok := a.conn.(*deadlineConn); ok && a.ps.MaxRequests > 0 && dc.served >= a.ps.MaxRequests {
		a.closeConn()
		return
	}
	if a.hc.IdleConnsCount() >= a.ps.MaxIdle {
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
func (a *attempt) fail(f httpcore.Failure, err error) bool {
	a.o.Failure, a.o.Err = f, err
	return false
}

// release ends a's hold on its backend: the response's status class is counted (0 when there
// was no response) and the slot goes back to the pool with the outcome for outlier detection.
func (a *attempt) release(latency time.Duration, failure bool) {
	code := 0
	if a.o.Failure == httpcore.OK {
		code = a.out.StatusCode()
	}
	a.ps.Release(a.b, latency, code, failure)
}

// roundTrip sends a.req to a.b and reads the response headers into a.resp. On success the
// response body, if any, is left to stream from a.br and the connection stays held.
func (a *attempt) roundTrip(hedged bool) bool {
	if a.hc == nil {
		return a.fail(httpcore.NoTransport, errors.New("backend has no transport"))
	}
	a.start = time.Now()
	cc, err := a.hc.AcquireConn(0, false)
	if err != nil {
		return a.fail(httpcore.Connect, err)
	}
	a.cc = cc
	conn := cc.Conn()
	if dc, ok := conn.(*deadlineConn); ok {
		dc.served++
	}
	lastUse := cc.LastUseTime()
	reused := !lastUse.IsZero()
	a.o.Reused = reused
	a.conn = conn
	dc, _ := conn.(*deadlineConn)
	if dc != nil {
		dc.sent = 0
		if reused && !httpcore.Idempotent(a.req.Header.Method()) && dc.raw.PeerGone() {
			// The backend closed this idle connection: nothing was sent, so the request may
			// go out on another one whatever its method. Checked only for requests that
			// could not be replayed once written, since it costs a system call.
			a.closeConn()
			return a.fail(httpcore.Stale, errPeerClosed)
		}
	}
	if hedged {
		a.mu.Lock()
		a.hconn = conn
		cancelled := a.cancelled
		a.mu.Unlock()
		if cancelled {
			a.closeConn()
			return a.fail(httpcore.Cancelled, nil)
		}
	}

	rt := a.ps.ResponseTimeout
	// A wait for response headers longer than watchSlice is cut in slices, after each of
	// which the client is checked (awaitResponse): one that left cancels the attempt.
	wait := rt
	if a.client != nil && a.upload == nil && rt > watchSlice {
		wait = watchSlice
	}
	if a.upload != nil {
		// Only a streamed body can block the write for long; small requests fit the socket
		// buffer, so they skip the deadline (and the timer update it costs).
		if err = conn.SetWriteDeadline(a.start.Add(rt)); err != nil {
			a.closeConn()
			return a.fail(httpcore.Closed, err)
		}
		a.upload.conn = conn
	}
	if wait < rt {
		err = armWatchDeadline(conn, a.start, rt)
	} else {
		err = armReadDeadline(conn, a.start, rt)
	}
	if err != nil {
		a.closeConn()
		return a.fail(httpcore.Closed, err)
	}
	bw := acquireWriter(conn)
	var sending chan error
	switch {
	case a.upload != nil:
		// A streamed body goes out from its own goroutine while this one waits for the
		// response, so a backend that answers before it has read the whole body (413, 401, a
		// redirect) is heard at once rather than as a failed write.
		sending = a.upload.send(a.req, bw)
	case dc != nil && dc.raw.RC != nil && reused && a.start.Sub(lastUse) < quickReuse:
		err = dc.writeAndWait(a.req, bw)
	default:
		err = a.req.Write(bw)
		if err == nil {
			err = bw.Flush()
		}
	}
	if sending == nil {
		releaseWriter(bw)
		a.o.Sent = dc == nil || dc.sent > 0 // without the count, assume the worst
		if err != nil && !(wait < rt && isTimeout(err)) {
			a.closeConn()
			return a.classify(err, reused)
		}
	}
	br := acquireReader(conn)
	if wait < rt {
		if err = a.awaitResponse(br, conn, rt); err != nil {
			releaseReader(br)
			a.closeConn()
			if err == errClientGone {
				return a.fail(httpcore.ClientGone, err)
			}
			return a.classify(err, reused)
		}
	}
	out := a.out
	out.Header.SetNoDefaultContentType(true)
	err = readResponseHeader(&out.Header, br)
	if err != nil && wait < rt && sending == nil && isTimeout(err) && time.Since(a.start) < rt {
		// The head came in pieces past the watch slice's deadline: what arrived of it is
		// still buffered (the parse consumes nothing until the head is whole), so it is read
		// again under the whole response timeout.
		if err = conn.SetReadDeadline(a.start.Add(rt)); err == nil {
			err = readResponseHeader(&out.Header, br)
		}
	}
	if sending != nil {
		werr, cut := a.upload.join(sending)
		releaseWriter(bw)
		a.o.Sent = dc == nil || dc.sent > 0
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
		releaseReader(br)
		a.closeConn()
		return a.classify(err, reused)
	}
	a.ttfb = time.Since(a.start)
	code := out.Header.StatusCode()
	a.o.Status = code
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
			releaseReader(br)
			a.closeConn()
			return a.fail(httpcore.BadGateway, err)
		}
	default:
		if wait < rt {
			// The deadline was a slice of the response timeout: the body's reads get it whole.
			_ = conn.SetReadDeadline(time.Now().Add(rt))
		}
		if out != &a.resp {
			out.Header.CopyTo(&a.resp.Header)
		}
		a.resp.StreamBody = true
		if err = a.resp.ReadBody(br, 0); err != nil {
			releaseReader(br)
			a.closeConn()
			return a.fail(httpcore.BadGateway, err)
		}
		a.br = br
		return true
	}
	releaseReader(br)
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

// classify maps an error of writing the request or reading the response headers to a
// failure. Stale is reserved for a connection that failed before any byte of the request was
// sent: only then is the request known not to have reached the backend.
func (a *attempt) classify(err error, reused bool) bool {
	if a.upload != nil && a.upload.err != nil {
		if isTimeout(a.upload.err) {
			return a.fail(httpcore.ClientTimeout, a.upload.err)
		}
		return a.fail(httpcore.ClientFailed, a.upload.err)
	}
	if a.isCancelled() {
		return a.fail(httpcore.Cancelled, err)
	}
	switch {
	case isTimeout(err):
		return a.fail(httpcore.Timeout, err)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EPIPE), errors.Is(err, net.ErrClosed), errors.Is(err, fasthttp.ErrConnectionClosed):
		if reused && !a.o.Sent {
			return a.fail(httpcore.Stale, err)
		}
		return a.fail(httpcore.Closed, err)
	}
	return a.fail(httpcore.BadGateway, err)
}

// watchSlice is how long an attempt waits for response headers, at the most, before it
// checks whether its client is still there (the first wait takes up to twice as long, see
// armWatchDeadline), and then again each time as long.
const watchSlice = time.Second

// errClientGone ends the wait of an attempt whose client left.
var errClientGone = errors.New("client left before the response")

// awaitResponse waits, within the response timeout rt counted from the attempt's start, for
// the first byte of the response, checking the client every watchSlice: a client that closed
// its connection (or its sending side) ends the wait with errClientGone, and the attempt is
// cancelled (its connection closed, its slot freed) instead of holding the backend for rt. The
// read deadline stays a slice's; a head that straddles it is read again (roundTrip).
func (a *attempt) awaitResponse(br *bufio.Reader, conn net.Conn, rt time.Duration) error {
	for {
		_, err := br.Peek(1)
		if err == nil {
			break
		}
		if !isTimeout(err) {
			return err
		}
		left := rt - time.Since(a.start)
		if left <= 0 {
			return err // the response timeout itself
		}
		if clientGone(a.client) {
			return errClientGone
		}
		if err := conn.SetReadDeadline(time.Now().Add(min(watchSlice, left))); err != nil {
			return err
		}
	}
	return nil
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
		releaseReader(a.br)
		a.br = nil
	}
	// A body delimited by the connection's end (no length, not chunked) leaves nothing to reuse.
	if complete && !a.resp.ConnectionClose() && a.resp.Header.ContentLength() != -2 {
		a.releaseConn()
	} else {
		a.closeConn()
	}
}
