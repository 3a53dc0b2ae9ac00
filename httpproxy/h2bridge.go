package httpproxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"ballast/upstream"
)

// This file lends another plane (package h2proxy) this plane's HTTP/1.1 backend machinery: a
// backend's pooled fasthttp connections, the request written and the response read by the same
// attempt code as an HTTP/1 request, with the same deadlines, keep-alive limits and
// classification of failures. A request costs no goroutine; its state is a pooled Upstream1.

// Upstream1 is one HTTP/1.1 request to one backend on behalf of another plane. Get one with
// Route.Upstream1, fill Request, Watch the request's context, call RoundTrip, read the
// response, then Release it. It is used by one goroutine at a time; the cancel that Watch
// arranges may come from any goroutine.
type Upstream1 struct {
	a      attempt
	req    fasthttp.Request
	body   upstreamBody
	buf    bytes.Reader
	stop   func() bool // undoes Watch
	cancel func()      // a.cancel as a func value, made once
}

var upstream1Pool = sync.Pool{New: func() any {
	u := &Upstream1{}
	u.a.done = make(chan *attempt, 1) // never sent on: it turns on the attempt's cancel lock
	u.cancel = u.a.cancel
	return u
}}

// Upstream1 returns an HTTP/1.1 request to b of this route's pool, or nil when b has no
// HTTP/1.1 client (a backend of a pool this plane does not serve).
func (r Route) Upstream1(b *upstream.Backend) *Upstream1 {
	s := stateOf(b)
	if s == nil || s.hc == nil {
		return nil
	}
	u := upstream1Pool.Get().(*Upstream1)
	u.a.ps, u.a.b, u.a.cancelled = r.ps, b, false
	u.req.Header.SetNoDefaultContentType(true)
	return u
}

// Request is the request to fill: method, request target, Host and header fields. The body is
// empty: requests with a body are not sent this way.
func (u *Upstream1) Request() *fasthttp.Request { return &u.req }

// RoundTrip sends the request and reads the response headers. A pooled connection found
// closed by the backend before any byte of the request reached it, or closed by it as an
// idempotent request went out (the keep-alive race), is replaced by a new connection, at most
// twice, as the HTTP/1 plane does; any other failure is returned (nil: a response).
func (u *Upstream1) RoundTrip() *UpstreamError {
	a := &u.a
	for stale := 0; ; stale++ {
		a.mu.Lock() // a cancel (Watch) that came before a fresh try still holds
		cancelled := a.cancelled
		a.reset(a.ps, a.b, &u.req)
		a.cancelled = cancelled
		a.mu.Unlock()
		if a.roundTrip(true) {
			return nil
		}
		if stale < 2 && retryFresh(a, &u.req.Header) && !a.isCancelled() {
			a.hc.CloseIdleConnections()
			continue
		}
		return &UpstreamError{class: a.class, err: a.err, reused: a.reused}
	}
}

// Watch cancels the request when ctx ends (the client reset its stream, a deadline passed):
// RoundTrip or a body read in progress then returns an error at once.
func (u *Upstream1) Watch(ctx context.Context) { u.stop = context.AfterFunc(ctx, u.cancel) }

// Status is the response status code.
func (u *Upstream1) Status() int { return u.a.resp.Header.StatusCode() }

// Header is the response header; Connection and the other hop-by-hop fields are the
// caller's to drop.
func (u *Upstream1) Header() *fasthttp.ResponseHeader { return &u.a.resp.Header }

// TTFB is the time from dispatch to the response headers.
func (u *Upstream1) TTFB() time.Duration { return u.a.ttfb }

// Body is the response body: bytes already read, or the stream of the rest, read from the
// backend connection as the caller reads. Its Close ends the response: the connection goes
// back to the pool when the body was read to its end, and is closed otherwise.
func (u *Upstream1) Body() io.ReadCloser {
	if u.a.br == nil {
		u.buf.Reset(u.a.resp.Body())
		u.body = upstreamBody{r: &u.buf}
		return &u.body
	}
	u.body = upstreamBody{a: &u.a, r: u.a.resp.BodyStream()}
	return &u.body
}

// Release ends the request (closing a body not read to its end) and returns u to its pool,
// unless Watch's cancel ran or may still run: then u is left to the garbage collector.
func (u *Upstream1) Release() {
	reuse := true
	if u.stop != nil {
		reuse = u.stop()
		u.stop = nil
	}
	_ = u.body.Close()
	if u.a.br != nil || u.a.cc != nil {
		u.a.finishBody(false)
	}
	u.a.ps, u.a.b, u.a.hc, u.a.req, u.a.out, u.a.upload = nil, nil, nil, nil, nil, nil
	u.a.resp.Reset()
	u.req.Reset()
	u.buf.Reset(nil)
	u.body = upstreamBody{}
	if reuse {
		upstream1Pool.Put(u)
	}
}

// upstreamBody is a response body of an Upstream1.
type upstreamBody struct {
	a     *attempt // nil for a body already read whole
	r     io.Reader
	eof   bool
	reads int
}

func (b *upstreamBody) Read(p []byte) (int, error) {
	if b.r == nil {
		return 0, io.EOF
	}
	n, err := b.r.Read(p)
	if err == io.EOF {
		b.eof = true
	}
	if a := b.a; a != nil {
		// A long stream keeps its connection's inactivity deadline moving, as relay does.
		if b.reads++; b.reads%refreshReads == 0 && a.conn != nil {
			_ = a.conn.SetReadDeadline(time.Now().Add(a.ps.respTimeout))
		}
		if err != nil && err != io.EOF && a.isCancelled() {
			err = errUpstreamCancelled
		}
	}
	return n, err
}

func (b *upstreamBody) Close() error {
	if a := b.a; a != nil {
		b.a = nil
		a.finishBody(b.eof)
	}
	b.r = nil
	return nil
}

// errUpstreamCancelled is a body read cut short by Cancel.
var errUpstreamCancelled = errors.New("backend request cancelled")

// UpstreamError is why an Upstream1 got no response.
type UpstreamError struct {
	class  errClass
	err    error
	reused bool
}

func (e *UpstreamError) Error() string {
	if e.err == nil {
		return e.class.String()
	}
	return e.class.String() + ": " + e.err.Error()
}

func (e *UpstreamError) Unwrap() error { return e.err }

// Connect reports a backend that could not be reached: it never received the request.
func (e *UpstreamError) Connect() bool { return e.class == errConnect }

// Timeout reports no response headers within timeouts.response.
func (e *UpstreamError) Timeout() bool { return e.class == errTimeout }

// Failure reports whether it counts against the backend for outlier detection, by the HTTP/1
// plane's rule (a keep-alive race or a cancelled request does not).
func (e *UpstreamError) Failure() bool {
	a := attempt{class: e.class, err: e.err, reused: e.reused}
	return failed(&a)
}
