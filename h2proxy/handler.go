package h2proxy

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"ballast/accesslog"
	"ballast/balance"
	"ballast/httpcore"
	"ballast/upstream"
)

// errResponseTimeout cancels an attempt whose response headers took longer than
// timeouts.response.
var errResponseTimeout = errors.New("no response headers within timeouts.response")

// errBodyTooLarge ends a request body of unknown length that goes past max_body_bytes.
var errBodyTooLarge = errors.New("request body larger than max_body_bytes")

// ServeHTTP proxies one stream through the HTTP core: the same steps, in the same order, as
// an HTTP/1 request (see package httpcore). The steps before the first attempt run in their
// own frame (begin), so the deep call chain of an attempt starts on a small stack: a stream's
// goroutine that outgrew its first stack would copy it on every request.
func (cs *connState) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	e, key := cs.begin(w, r)
	if e == nil {
		return
	}
	if e.cancel != nil {
		defer e.cancel()
	}
	if e.pool.HedgeDelay > 0 && e.body.r == nil && httpcore.Idempotent(e.req.Method()) {
		e.hedged(key) // its attempts may outlive it: e is not pooled
		return
	}
	e.forward(key)
	e.put()
}

// begin runs the core's steps up to the pool's key; nil when the stream is answered.
//
//go:noinline
func (cs *connState) begin(w http.ResponseWriter, r *http.Request) (*exchange, uint64) {
	t := cs.proxy.core.Table()
	l := t.Listener(cs.listener)
	if l == nil {
		w.WriteHeader(http.StatusServiceUnavailable) // the listener went away in a reload
		return nil, 0
	}
	e := exchangePool.Get().(*exchange)
	e.cs, e.w, e.r, e.grpc, e.start = cs, w, r, httpcore.IsGRPC(r.Header.Get("Content-Type")), time.Now()
	e.req.init(r, cs.local)
	cx := &e.core
	cx.Begin(t, l, &e.req, httpcore.Conn{Peer: cs.client, TLS: cs.tls, HTTP2: true})
	if r.Method == http.MethodConnect {
		cx.RefuseMethod()
		e.reply(nil)
		e.put()
		return nil, 0
	}
	if cx.Route(&e.req) == nil || !cx.Admit(&e.req) {
		e.reply(nil)
		e.put()
		return nil, 0
	}
	var sc httpcore.Scan
	scanHeader(&sc, e.req.out)
	cx.Prepare(&e.req, &sc, false)
	e.pool = cx.Pool()
	e.body = &replayBody{}
	if r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0 {
		e.body.r = r.Body
		if max := cx.BodyLimit(); max > 0 && r.ContentLength < 0 {
			e.body.left, e.body.limited = max, true
		}
	}
	e.pool.CountRequest()
	key := e.pool.Key(&e.req, cx.Client())
	e.ctx = r.Context()
	if e.grpc {
		if d, ok := httpcore.GRPCTimeout(r.Header.Get("Grpc-Timeout")); ok {
			e.ctx, e.cancel = context.WithTimeout(e.ctx, d)
			e.deadline = true
		}
	}
	return e, key
}

var exchangePool = sync.Pool{New: func() any { return new(exchange) }}

// put hands e back once nothing refers to it (not after hedging, whose losers may still run).
func (e *exchange) put() {
	cx := e.core
	cx.Reset()
	*e = exchange{core: cx}
	exchangePool.Put(e)
}

// exchange is one stream's state.
type exchange struct {
	cs       *connState
	w        http.ResponseWriter
	r        *http.Request
	ctx      context.Context
	cancel   context.CancelFunc // of a grpc-timeout's ctx
	core     httpcore.Exchange
	req      h2Req
	resp     h2Resp
	counted  countingBody
	pool     *httpcore.Pool
	body     *replayBody
	grpc     bool
	deadline bool // ctx carries the client's grpc-timeout
	start    time.Time
	ttfb     time.Duration
}

// forward runs attempts one after the other: the first, then retries on other backends.
func (e *exchange) forward(key uint64) {
	p := e.pool
	cx := &e.core
	idem := httpcore.Idempotent(e.req.Method())
	var tried balance.Tried
	var last *httpcore.Outcome
	var lastB *upstream.Backend
	for try := 1; ; try++ {
		b, err := p.Acquire(&e.req, key, tried)
		if err != nil {
			if last != nil { // a retry found no other backend: the last failure answers
				e.fail(last, lastB)
				return
			}
			cx.AcquireFailed(err)
			e.reply(&httpcore.Done{Pool: p})
			return
		}
		if try > 1 {
			cx.Retried(p)
		}
		o := e.attempt(b)
		if o == nil {
			return // answered
		}
		if o.Failure == httpcore.Connect {
			p.Upstream.Unreachable(b)
		}
		last, lastB = o, b
		if o.Failure == httpcore.ClientGone || o.Failure == httpcore.Timeout {
			e.fail(o, b)
			return
		}
		if try < p.Attempts && p.Retryable(o, idem, !e.body.touched.Load()) && p.SpendRetry() {
			httpcore.MarkTried(&tried, b)
			continue
		}
		e.fail(o, b)
		return
	}
}

// attempt tries the request on b. It returns nil when the stream was answered (a response
// relayed), else what went wrong, the backend's slot already released.
func (e *exchange) attempt(b *upstream.Backend) *httpcore.Outcome {
	s := stateOf(b)
	var t *transport
	if s != nil {
		t = s.t.Load()
	}
	if t == nil {
		e.pool.Release(b, 0, 0, true)
		return &httpcore.Outcome{Failure: httpcore.NoTransport}
	}
	if t.http1 && e.body.r == nil && !e.deadline && e.cs.proxy.bridge != nil {
		if u := e.cs.proxy.bridge.Upstream1(e.pool, b); u != nil {
			return e.attempt1(b, u)
		}
	}
	return e.attemptTransport(b, t)
}

// attemptTransport is attempt through the backend's http.Transport or http2.Transport.
//
//go:noinline
func (e *exchange) attemptTransport(b *upstream.Backend, t *transport) *httpcore.Outcome {
	actx, cancel := context.WithCancelCause(e.ctx)
	defer cancel(nil)
	var timer *time.Timer
	if !e.deadline {
		timer = time.AfterFunc(e.pool.ResponseTimeout, func() { cancel(errResponseTimeout) })
	}
	out := e.outgoing(actx, b, t)
	start := time.Now()
	resp, err := t.rt.RoundTrip(out)
	if timer != nil {
		timer.Stop()
	}
	e.ttfb = time.Since(start)
	if err != nil {
		o := e.classify(err, actx)
		e.pool.Release(b, time.Since(e.start), 0, e.pool.BackendFailure(o))
		return o
	}
	h := e.w.Header()
	for k, vv := range resp.Header {
		h[k] = vv
	}
	e.deliver(b, resp.StatusCode, resp.ContentLength, resp.Body, &resp.Trailer) // filled at the body's end
	return nil
}

// classify says what an attempt through http.Transport that got no response met. Whether
// any of the request reached the backend is not known, so it counts as sent.
func (e *exchange) classify(err error, actx context.Context) *httpcore.Outcome {
	o := &httpcore.Outcome{Failure: httpcore.Closed, Err: err, Sent: true}
	switch {
	case e.r.Context().Err() != nil:
		o.Failure = httpcore.ClientGone
	case errors.Is(context.Cause(actx), errResponseTimeout) || e.deadlinePassed():
		o.Failure = httpcore.Timeout
	case errors.Is(err, errBodyTooLarge):
		o.Failure = httpcore.BodyTooLarge
	case e.body.err != nil:
		o.Failure = httpcore.ClientFailed
	case isConnectError(err):
		o.Failure, o.Sent = httpcore.Connect, false
	}
	return o
}

// attempt1 is attempt for a request without a body to an HTTP/1.1 backend: it goes through
// the HTTP/1 engine's pooled backend connections (httpcore.Bridge), which costs neither
// goroutines nor the per-request state of http.Transport. Its read deadline is
// timeouts.response, so a request with a grpc-timeout of its own takes the other path.
func (e *exchange) attempt1(b *upstream.Backend, u httpcore.Upstream1) *httpcore.Outcome {
	defer u.Release()
	e.fill1(u, b)
	u.Watch(e.ctx)
	o := u.RoundTrip()
	if o.Failure != httpcore.OK {
		e.ttfb = time.Since(e.start)
		if e.r.Context().Err() != nil {
			o.Failure = httpcore.ClientGone
		} else if e.deadlinePassed() {
			o.Failure = httpcore.Timeout
		}
		e.pool.Release(b, time.Since(e.start), 0, e.pool.BackendFailure(&o))
		return &o
	}
	e.ttfb = u.TTFB()
	copyHeader1(e.w.Header(), u.ResponseFields())
	status, cl := u.Status(), u.ContentLength()
	var body io.ReadCloser = http.NoBody
	switch {
	case e.r.Method == http.MethodHead || status < 200 || status == http.StatusNoContent || status == http.StatusNotModified:
		cl = 0 // no body (RFC 9112 §6.3)
	default:
		body = u.Body()
		cl = max(cl, -1)
	}
	e.deliver(b, status, cl, body, nil)
	return nil
}

// request1 is the part of an Upstream1 fill1 writes.
type request1 interface {
	SetLine(method, target, host []byte)
	Header() httpcore.Header
}

// fill1 writes the HTTP/1.1 request to b as the core prepared it: the same method, target,
// Host and fields as an http.Transport request gets.
func (e *exchange) fill1(u request1, b *upstream.Backend) {
	host := e.req.Host()
	if len(host) == 0 {
		host = s2b(b.Address)
	}
	u.SetLine(e.req.Method(), e.req.Target(), host)
	h := u.Header()
	for k, vv := range e.req.out {
		if k == "Host" || k == "Content-Length" || k == "User-Agent" && len(vv) == 1 && vv[0] == "" {
			continue
		}
		for _, v := range vv {
			h.Add(s2b(k), s2b(v))
		}
	}
}

// deadlinePassed reports that the request's own deadline (grpc-timeout) ended it.
func (e *exchange) deadlinePassed() bool {
	return e.deadline && errors.Is(e.ctx.Err(), context.DeadlineExceeded)
}

// fail answers a stream whose last attempt failed with o; a client that left gets no answer,
// only its log line (499).
func (e *exchange) fail(o *httpcore.Outcome, b *upstream.Backend) {
	cx := &e.core
	cx.Fail(o)
	d := &httpcore.Done{Pool: e.pool, Backend: b, BytesIn: e.body.n.Load()}
	if o.Failure == httpcore.ClientGone {
		d.Status, d.Term = cx.Reply.Status, cx.Reply.Term
		cx.Log(&e.req, d)
		return
	}
	id := ""
	if b != nil {
		id = b.ID
	}
	e.cs.proxy.logger.Warn("request failed", "pool", e.pool.Name, "backend", id, "proto", e.r.Proto, "reason", o.Failure.String(), "err", o.Err)
	e.reply(d)
}

// outgoing builds the backend request: same method, target and the fields the core prepared,
// and the body.
func (e *exchange) outgoing(ctx context.Context, b *upstream.Backend, t *transport) *http.Request {
	r := e.r
	out := r.WithContext(ctx) // shallow: URL and header are replaced below
	u := *r.URL
	u.Scheme, u.Host = t.scheme, b.Address
	u.Opaque, u.RawQuery, u.ForceQuery = "", "", false
	path, query, _ := strings.Cut(string(e.req.target), "?")
	u.Path, u.RawPath = path, path
	if unescaped, err := url.PathUnescape(path); err == nil {
		u.Path = unescaped
	}
	u.RawQuery = query
	out.URL = &u
	out.RequestURI = ""
	out.Host = r.Host
	if _, ok := e.req.out["User-Agent"]; !ok {
		e.req.out["User-Agent"] = []string{""} // none, as the client sent none (Go would add its own)
	}
	out.Header = e.req.out
	out.Close = false
	if e.body.r != nil {
		out.Body = e.body
		out.ContentLength = r.ContentLength
	} else {
		out.Body = nil
		out.ContentLength = 0
	}
	out.Trailer = r.Trailer // filled when the client's body ends
	return out
}

// deliver relays a response whose fields are already in the ResponseWriter's (all of the
// backend's: the hop-by-hop ones go here): the core's response side, the status, the body (of
// length cl, -1 when unknown) flushed as it comes, then the trailers *trailer holds once the
// body is read (nil: none). The backend's slot is released when the body is done.
func (e *exchange) deliver(b *upstream.Backend, status int, cl int64, body io.ReadCloser, trailer *http.Header) {
	w := e.w
	h := w.Header()
	var sc httpcore.Scan
	scanHeader(&sc, h)
	e.resp = h2Resp{h: h, status: status, cl: cl}
	e.core.StripHopByHop(&e.resp, &sc, false, false)
	for k := range h {
		if connectionField(k) { // what the core leaves to the engines (framing), HTTP/2 forbids
			delete(h, k)
		}
	}
	e.counted = countingBody{ReadCloser: body} // bytes_out: as the backend sent them
	counted := &e.counted
	body = counted
	if enc := e.core.Respond(&e.req, &e.resp, b); enc != httpcore.EncNone {
		var z httpcore.Compressor
		z.Init(body, enc)
		body, cl = &z, -1
		h.Del("Content-Length")
	}
	noDefaults(h)
	w.WriteHeader(status)
	if cl < 0 && body != http.NoBody {
		// A body of unknown length may come slowly (a stream): the client gets the headers
		// now. A trailers-only answer (no body) must not flush, or it would stop being one.
		if fl, ok := w.(http.Flusher); ok {
			fl.Flush()
		}
	}
	// A body of known length is written as it comes and flushed once, when the handler
	// returns (headers and data in one write); streams are flushed at every read.
	_, broken := copyBody(w, body, e.grpc || cl < 0)
	_ = body.Close()
	clientGone := e.r.Context().Err() != nil
	failure := broken != nil && !clientGone || e.pool.Include5xx && status >= 500
	code := status
	if broken != nil {
		code = 0
	}
	e.pool.Release(b, e.ttfb, code, failure)
	d := &httpcore.Done{Status: status, BytesIn: e.body.n.Load(), BytesOut: counted.n, Pool: e.pool, Backend: b, Upstream: e.ttfb}
	if broken != nil {
		d.Term = accesslog.TermServerData
		if clientGone {
			d.Term = accesslog.TermClientData
		}
	}
	e.core.Log(&e.req, d)
	if broken != nil {
		if clientGone {
			return
		}
		if e.grpc {
			// The stream ends with a gRPC status instead of a reset: the client sees why.
			code := httpcore.GRPCUnavailable
			if e.deadlinePassed() {
				code = httpcore.GRPCDeadlineExceeded
			}
			h.Set(http.TrailerPrefix+"Grpc-Status", code)
			h.Set(http.TrailerPrefix+"Grpc-Message", httpcore.GRPCMessage("backend stream broken: "+broken.Error()))
			return
		}
		panic(http.ErrAbortHandler) // resets the client stream: the body is incomplete
	}
	if trailer == nil {
		return
	}
	for k, vv := range *trailer {
		h[http.TrailerPrefix+k] = vv
	}
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// copyBody copies a response body to the client, flushing each read when flush is set, and
// returns the bytes written and the backend's read error (nil at EOF). A failed client write
// ends the copy too and returns the write error: the client is gone.
func copyBody(w http.ResponseWriter, r io.Reader, flush bool) (int64, error) {
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := *bp
	var fl http.Flusher
	if flush {
		fl, _ = w.(http.Flusher)
	}
	var total int64
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return total, werr
			}
			total += int64(n)
			if fl != nil {
				fl.Flush()
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

// reply renders Ballast's own answer (the core's Reply) and logs the stream: a plain answer
// for HTTP, a trailers-only gRPC status for gRPC. d adds the pool and backend; nil for none.
func (e *exchange) reply(d *httpcore.Done) {
	rp := &e.core.Reply
	h := e.w.Header()
	if e.grpc {
		h.Set("Content-Type", "application/grpc")
		h.Set("Grpc-Status", httpcore.GRPCCode(rp.Status))
		h.Set("Grpc-Message", httpcore.GRPCMessage(strings.TrimSpace(string(rp.Body))))
		e.w.WriteHeader(http.StatusOK)
	} else {
		if len(rp.ContentType) > 0 {
			h.Set("Content-Type", string(rp.ContentType))
		}
		if len(rp.Location) > 0 {
			h.Set("Location", string(rp.Location))
		}
		if len(rp.RetryAfter) > 0 {
			h.Set("Retry-After", string(rp.RetryAfter))
		}
		if len(rp.Allow) > 0 {
			h.Set("Allow", string(rp.Allow))
		}
		h.Set("Content-Length", strconv.Itoa(len(rp.Body)))
		noDefaults(h)
		e.w.WriteHeader(rp.Status)
		_, _ = e.w.Write(rp.Body)
	}
	var done httpcore.Done
	if d != nil {
		done = *d
	}
	done.Status, done.Term = rp.Status, rp.Term
	if e.grpc {
		done.Status = http.StatusOK
	}
	e.core.Log(&e.req, &done)
}

// countingBody counts what a response body gives.
type countingBody struct {
	io.ReadCloser
	n int64
}

func (c *countingBody) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	c.n += int64(n)
	return n, err
}

// noDefaults keeps net/http from adding what the HTTP/1 engine does not add either: a Date, a
// Content-Type sniffed from the body. (A nil value is written as nothing.)
func noDefaults(h http.Header) {
	for _, k := range [...]string{"Date", "Content-Type"} {
		if _, ok := h[k]; !ok {
			h[k] = nil
		}
	}
}

// replayBody is the client's request body as given to a backend attempt. Close does not
// close the client's body, so that a retry can use it while nothing was read; touched says
// whether anything was. A body of unknown length is cut at max_body_bytes (limited).
type replayBody struct {
	r       io.ReadCloser
	touched atomic.Bool
	n       atomic.Int64
	limited bool
	left    int64
	err     error // the client's body failed (not a limit)
}

func (b *replayBody) Read(p []byte) (int, error) {
	b.touched.Store(true)
	if b.limited {
		if b.left <= 0 {
			var one [1]byte
			if n, err := b.r.Read(one[:]); n > 0 {
				return 0, errBodyTooLarge
			} else {
				return 0, err
			}
		}
		if int64(len(p)) > b.left {
			p = p[:b.left]
		}
	}
	n, err := b.r.Read(p)
	b.left -= int64(n)
	b.n.Add(int64(n))
	if err != nil && err != io.EOF {
		b.err = err
	}
	return n, err
}

func (b *replayBody) Close() error { return nil }

// connectionField reports the fields that belong to one connection (RFC 9110 §7.6.1) and
// that HTTP/2 forbids anyway (RFC 9113 §8.2.2), which a backend's response loses here; the
// core strips the rest of the hop-by-hop ones. The keys are canonical.
func connectionField(k string) bool {
	switch k {
	case "Connection", "Keep-Alive", "Proxy-Connection", "Transfer-Encoding", "Upgrade", "Te", "Trailer":
		return true
	}
	return false
}

// isConnectError reports a failure to reach the backend at all: the request was not sent.
func isConnectError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// copyHeader1 copies the fields of a backend's HTTP/1.1 response into h (deliver drops the
// hop-by-hop ones), with two allocations for all the values: one string holding them all, one
// slice of them.
func copyHeader1(h http.Header, fields []httpcore.Field) {
	size := 0
	for _, f := range fields {
		size += len(f.Value)
	}
	var all strings.Builder // no scratch array: a large frame would grow the stream's stack
	all.Grow(size)
	for _, f := range fields {
		all.Write(f.Value)
	}
	joined, vals := all.String(), make([]string, len(fields))
	off := 0
	for i, f := range fields {
		key := headerKey(f.Name)
		vals[i] = joined[off : off+len(f.Value)]
		off += len(f.Value)
		if prev := h[key]; len(prev) > 0 {
			h[key] = append(prev, vals[i])
		} else {
			h[key] = vals[i : i+1 : i+1]
		}
	}
}

// headerKey is a backend response's field name as an http.Header key. fasthttp has put it in
// canonical form already; the common names come from constants, not a new string each.
func headerKey(k []byte) string {
	switch string(k) {
	case "Content-Length":
		return "Content-Length"
	case "Content-Type":
		return "Content-Type"
	case "Server":
		return "Server"
	case "Date":
		return "Date"
	case "Last-Modified":
		return "Last-Modified"
	case "Etag":
		return "Etag"
	case "Accept-Ranges":
		return "Accept-Ranges"
	case "Cache-Control":
		return "Cache-Control"
	case "Connection":
		return "Connection"
	case "Vary":
		return "Vary"
	case "Set-Cookie":
		return "Set-Cookie"
	}
	return string(k)
}
