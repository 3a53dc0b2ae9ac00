package h2proxy

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"ballast/balance"
	"ballast/httpproxy"
	"ballast/upstream"
)

// errResponseTimeout cancels an attempt whose response headers took longer than
// timeouts.response.
var errResponseTimeout = errors.New("no response headers within timeouts.response")

// errNoTransport: the backend's transport could not be built (see attachTransports).
var errNoTransport = errors.New("backend transport not available")

// ServeHTTP proxies one stream.
func (cs *connState) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := cs.proxy
	st := p.state.Load()
	grpc := isGRPC(r)
	e := &exchange{cs: cs, st: st, w: w, r: r, grpc: grpc, start: time.Now()}
	if r.Method == http.MethodConnect {
		w.Header().Set("Allow", "GET, HEAD, POST, PUT, DELETE, OPTIONS, PATCH, TRACE")
		e.answer(http.StatusMethodNotAllowed, grpcUnimplemented, "CONNECT is not proxied")
		return
	}
	route, ok := st.routes.Match(cs.listener, []byte(r.Host), []byte(r.URL.Path))
	if !ok {
		e.answer(http.StatusNotFound, grpcUnimplemented, "no route")
		return
	}
	e.route = route
	route.CountRequest()

	ctx := r.Context()
	if grpc {
		if d, ok := grpcTimeout(r.Header.Get("Grpc-Timeout")); ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, d)
			defer cancel()
			e.deadline = true
		}
	}
	e.ctx = ctx
	e.forward(route.Key(r, cs.client))
}

// exchange is one stream's state.
type exchange struct {
	cs       *connState
	st       *state
	w        http.ResponseWriter
	r        *http.Request
	ctx      context.Context
	route    httpproxy.Route
	grpc     bool
	deadline bool // ctx carries the client's grpc-timeout
	start    time.Time
	ttfb     time.Duration
	status   int
	backend  string
	lastErr  error // of the last attempt that may be retried
}

// forward runs attempts one after the other: the first, then retries on other backends.
func (e *exchange) forward(key uint64) {
	pool := e.route.Upstream()
	body := &replayBody{}
	if e.r.Body != nil && e.r.Body != http.NoBody && e.r.ContentLength != 0 {
		body.r = e.r.Body
	}
	if e.route.HedgeDelay() > 0 && body.r == nil && httpproxy.Idempotent(e.r.Method) {
		e.hedged(key)
		return
	}
	var tried balance.Tried
	for try := 1; ; try++ {
		b, err := pool.Acquire(key, tried)
		if err != nil && e.lastErr != nil {
			e.answer(http.StatusBadGateway, grpcUnavailable, "backend failed: "+e.lastErr.Error())
			return
		}
		if err != nil {
			e.acquireError(err)
			return
		}
		e.backend = b.ID
		retry, done := e.attempt(b, body)
		if done {
			return
		}
		if !retry {
			return
		}
		if try < e.route.Attempts() && e.route.SpendRetry() {
			httpproxy.MarkTried(&tried, b)
			continue
		}
		e.answer(http.StatusBadGateway, grpcUnavailable, "backend failed: "+e.lastErr.Error())
		e.log(e.lastErr)
		return
	}
}

// attempt tries the request on b. done: the stream is answered (or the client is gone).
// retry: it failed in a way another backend may be tried for, and nothing was answered.
func (e *exchange) attempt(b *upstream.Backend, body *replayBody) (retry, done bool) {
	pool := e.route.Upstream()
	s := stateOf(b)
	var t *transport
	if s != nil {
		t = s.t.Load()
	}
	if t == nil {
		pool.Release(b, 0, true)
		httpproxy.CountStatus(b, 0)
		e.answer(http.StatusBadGateway, grpcUnavailable, "backend transport not available")
		return false, true
	}
	if t.http1 && body.r == nil && !e.deadline {
		if u := e.route.Upstream1(b); u != nil {
			return e.attempt1(b, u)
		}
	}
	actx, cancel := context.WithCancelCause(e.ctx)
	defer cancel(nil)
	var timer *time.Timer
	if !e.deadline {
		timer = time.AfterFunc(e.route.ResponseTimeout(), func() { cancel(errResponseTimeout) })
	}
	out := e.outgoing(actx, b, t, body)
	start := time.Now()
	resp, err := t.rt.RoundTrip(out)
	if timer != nil {
		timer.Stop()
	}
	e.ttfb = time.Since(start)
	if err != nil {
		return e.failed(b, err, actx, body)
	}
	e.deliver(b, resp)
	return false, true
}

// attempt1 is attempt for a request without a body to an HTTP/1.1 backend: it goes through
// the HTTP/1 plane's pooled backend connections (httpproxy.Upstream1), which costs neither
// goroutines nor the per-request state of http.Transport. Its read deadline is
// timeouts.response, so a request with a grpc-timeout of its own takes the other path.
func (e *exchange) attempt1(b *upstream.Backend, u *httpproxy.Upstream1) (retry, done bool) {
	defer u.Release()
	e.request1(u.Request(), b)
	u.Watch(e.ctx)
	if err := u.RoundTrip(); err != nil {
		e.ttfb = time.Since(e.start)
		return e.failed1(b, err)
	}
	e.ttfb = u.TTFB()
	copyHeader1(e.w.Header(), u.Header())
	status, cl := u.Status(), int64(u.Header().ContentLength())
	var body io.ReadCloser = http.NoBody
	switch {
	case e.r.Method == http.MethodHead || status < 200 || status == http.StatusNoContent || status == http.StatusNotModified:
		cl = 0 // no body (RFC 9112 §6.3)
	default:
		body = u.Body()
		cl = max(cl, -1)
	}
	e.relay(b, status, cl, body, nil)
	return false, true
}

// request1 fills the HTTP/1.1 request to b like outgoing fills an http.Request: the same
// method, target (as http.Transport would write it), Host and header fields.
func (e *exchange) request1(req *fasthttp.Request, b *upstream.Backend) {
	r := e.r
	h := &req.Header
	h.SetMethod(r.Method)
	h.SetRequestURI(r.URL.RequestURI())
	host := r.Host
	if host == "" {
		host = b.Address
	}
	h.SetHost(host)
	e.endToEnd(func(k string, vv []string) {
		for _, v := range vv {
			h.Add(k, v)
		}
	})
	e.forwarded(func(k, v string) { h.Set(k, v) })
}

// failed1 is failed for attempt1, whose request has no body to replay.
func (e *exchange) failed1(b *upstream.Backend, ue *httpproxy.UpstreamError) (retry, done bool) {
	clientGone := e.r.Context().Err() != nil
	timedOut := ue.Timeout() || e.deadlinePassed()
	return e.noResponse(b, ue, clientGone, timedOut, !clientGone && ue.Failure(), ue.Connect(), true)
}

// failed handles an attempt through http.Transport that got no response headers.
func (e *exchange) failed(b *upstream.Backend, err error, actx context.Context, body *replayBody) (retry, done bool) {
	clientGone := e.r.Context().Err() != nil
	responseTimeout := errors.Is(context.Cause(actx), errResponseTimeout)
	timedOut := responseTimeout || e.deadlinePassed()
	failure := !clientGone && !timedOut || responseTimeout
	return e.noResponse(b, err, clientGone, timedOut, failure, isConnectError(err), !body.touched.Load())
}

// deadlinePassed reports that the request's own deadline (grpc-timeout) ended it.
func (e *exchange) deadlinePassed() bool {
	return e.deadline && errors.Is(e.ctx.Err(), context.DeadlineExceeded)
}

// noResponse ends or retries an attempt that got no response headers: the backend's slot is
// released (failure: it counts for outlier detection); a client that went away gets its stream
// reset, a timeout a 504; otherwise the request is tried on another backend when that is safe
// (nothing reached the backend, or an idempotent method) and its body, if any, can still be
// sent again (replayable), else the client gets a 502.
func (e *exchange) noResponse(b *upstream.Backend, err error, clientGone, timedOut, failure, connect, replayable bool) (retry, done bool) {
	httpproxy.CountStatus(b, 0)
	e.route.Upstream().Release(b, time.Since(e.start), failure)
	switch {
	case clientGone:
		e.cs.clientReset()
		return false, true
	case timedOut:
		e.answer(http.StatusGatewayTimeout, grpcDeadlineExceeded, "backend timed out")
		e.log(err)
		return false, true
	}
	if connect {
		e.route.Upstream().Unreachable(b)
	}
	if replayable && (connect || httpproxy.Idempotent(e.r.Method)) {
		e.lastErr = err
		return true, false
	}
	e.answer(http.StatusBadGateway, grpcUnavailable, "backend failed: "+err.Error())
	e.log(err)
	return false, true
}

func (e *exchange) log(err error) {
	e.cs.proxy.logger.Warn("request failed", "pool", e.route.Pool(), "backend", e.backend, "proto", e.r.Proto, "err", err)
}

// outgoing builds the backend request: same method, target, headers (less hop-by-hop ones,
// plus the forwarding headers) and body.
func (e *exchange) outgoing(ctx context.Context, b *upstream.Backend, t *transport, body *replayBody) *http.Request {
	r := e.r
	out := r.WithContext(ctx) // shallow: the header map is replaced below
	u := *r.URL
	u.Scheme, u.Host = t.scheme, b.Address
	out.URL = &u
	out.RequestURI = ""
	out.Host = r.Host
	out.Header = make(http.Header, len(r.Header)+3)
	e.endToEnd(func(k string, vv []string) { out.Header[k] = vv })
	e.forwarded(func(k, v string) { out.Header[k] = []string{v} })
	out.Close = false
	if body.r != nil {
		out.Body = body
		out.ContentLength = r.ContentLength
	} else {
		out.Body = nil
		out.ContentLength = 0
	}
	out.Trailer = r.Trailer // filled when the client's body ends
	return out
}

// endToEnd passes add the request's header fields that the backend gets as the client sent
// them: all but the hop-by-hop ones (except "TE: trailers", which gRPC servers want and the one
// TE value HTTP/2 allows) and the forwarding headers, which forwarded sets afresh.
func (e *exchange) endToEnd(add func(k string, vv []string)) {
	for k, vv := range e.r.Header {
		switch {
		case hopByHop(k):
			if k == "Te" && len(vv) == 1 && strings.EqualFold(vv[0], "trailers") {
				add(k, vv)
			}
		case k == "X-Forwarded-For" || k == "X-Forwarded-Proto" || k == "X-Forwarded-Host":
		default:
			add(k, vv)
		}
	}
}

// forwarded sets the forwarding headers of the backend request through set: X-Forwarded-For
// (the client appended to what it sent), X-Forwarded-Proto and X-Forwarded-Host.
func (e *exchange) forwarded(set func(k, v string)) {
	r := e.r
	client := e.cs.clientIP
	if prior := r.Header["X-Forwarded-For"]; len(prior) > 0 {
		client = strings.Join(prior, ", ") + ", " + client
	}
	set("X-Forwarded-For", client)
	proto := "http"
	if e.cs.tls {
		proto = "https"
	}
	set("X-Forwarded-Proto", proto)
	set("X-Forwarded-Host", r.Host)
}

// deliver relays the response: headers, the body flushed as it comes, then trailers. The
// backend's slot is released when the body is done.
func (e *exchange) deliver(b *upstream.Backend, resp *http.Response) {
	h := e.w.Header()
	for k, vv := range resp.Header {
		if !hopByHop(k) {
			h[k] = vv
		}
	}
	e.relay(b, resp.StatusCode, resp.ContentLength, resp.Body, &resp.Trailer) // filled at the body's end
}

// relay sends the response whose header fields are already in e.w.Header(): the status, the
// body (of length cl, -1 when unknown) flushed as it comes, then the trailers that *trailer
// holds once the body is read (nil: none). The backend's slot is released when the body is done.
func (e *exchange) relay(b *upstream.Backend, status int, cl int64, body io.ReadCloser, trailer *http.Header) {
	w := e.w
	h := w.Header()
	if e.st.routes.ExposeBackend(e.cs.listener) {
		h.Set("X-Ballast-Backend", b.ID)
	}
	e.status = status
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
	broken := copyBody(w, body, e.grpc || cl < 0)
	_ = body.Close()
	failure := broken != nil || (e.route.Include5xx() && status >= 500)
	code := status
	if broken != nil {
		code = 0
	}
	httpproxy.CountStatus(b, code)
	clientGone := e.r.Context().Err() != nil
	e.route.Upstream().Release(b, e.ttfb, failure && !clientGone)
	e.access()
	if broken != nil {
		if clientGone {
			e.cs.clientReset()
			return
		}
		if e.grpc {
			// The stream ends with a gRPC status instead of a reset: the client sees why.
			code := grpcUnavailable
			if e.deadline && errors.Is(e.ctx.Err(), context.DeadlineExceeded) {
				code = grpcDeadlineExceeded
			}
			h.Set(http.TrailerPrefix+"Grpc-Status", code)
			h.Set(http.TrailerPrefix+"Grpc-Message", grpcMessage("backend stream broken: "+broken.Error()))
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
// returns the backend's read error (nil at EOF). A failed client write ends the copy too and
// returns the write error: the client is gone.
func copyBody(w http.ResponseWriter, r io.Reader, flush bool) error {
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := *bp
	var fl http.Flusher
	if flush {
		fl, _ = w.(http.Flusher)
	}
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return werr
			}
			if fl != nil {
				fl.Flush()
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// answer replies to a stream Ballast could not proxy: a plain-text status for HTTP, a
// trailers-only gRPC status for gRPC.
func (e *exchange) answer(status int, grpcCode, msg string) {
	h := e.w.Header()
	if e.grpc {
		h.Set("Content-Type", "application/grpc")
		h.Set("Grpc-Status", grpcCode)
		h.Set("Grpc-Message", grpcMessage("ballast: "+msg))
		e.status = http.StatusOK
		e.w.WriteHeader(http.StatusOK)
	} else {
		h.Set("Content-Type", "text/plain; charset=utf-8")
		e.status = status
		e.w.WriteHeader(status)
		_, _ = io.WriteString(e.w, "ballast: "+msg+"\n")
	}
	if e.route != (httpproxy.Route{}) {
		e.access()
	}
}

// acquireError answers a stream the pool could not place.
func (e *exchange) acquireError(err error) {
	switch {
	case errors.Is(err, upstream.ErrQueueFull):
		e.w.Header().Set("Retry-After", "1")
		e.answer(http.StatusServiceUnavailable, grpcUnavailable, "backlog queue full")
	case errors.Is(err, upstream.ErrQueueTimeout):
		e.w.Header().Set("Retry-After", "1")
		e.answer(http.StatusServiceUnavailable, grpcUnavailable, "timed out in the backlog queue")
	case errors.Is(err, upstream.ErrNoBackend):
		e.answer(http.StatusServiceUnavailable, grpcUnavailable, "no backend available")
	default:
		e.answer(http.StatusServiceUnavailable, grpcUnavailable, err.Error())
	}
}

// access writes the access-log line when logging.access is on.
func (e *exchange) access() {
	rt := e.st.routes
	if !rt.AccessLog() {
		return
	}
	rt.LogAccess(e.r.Context(), httpproxy.AccessEntry{
		Listener: e.cs.listener, Client: e.cs.clientStr, Method: e.r.Method, URI: e.r.RequestURI,
		Proto: e.r.Proto, Status: e.status, Pool: e.route.Pool(), Backend: e.backend,
		TTFB: e.ttfb, Duration: time.Since(e.start),
	})
}

// replayBody is the client's request body as given to a backend attempt. Close does not
// close the client's body, so that a retry can use it while nothing was read; touched says
// whether anything was.
type replayBody struct {
	r       io.ReadCloser
	touched atomic.Bool
}

func (b *replayBody) Read(p []byte) (int, error) {
	b.touched.Store(true)
	return b.r.Read(p)
}

func (b *replayBody) Close() error { return nil }

// hopByHop reports the header fields that belong to one connection (RFC 9110 §7.6.1) and
// that HTTP/2 forbids anyway (RFC 9113 §8.2.2). The keys are canonical.
func hopByHop(k string) bool {
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

// copyHeader1 copies the end-to-end fields of a backend's HTTP/1.1 response header into h,
// with two allocations for all the values: one string holding them all, one slice of them.
func copyHeader1(h http.Header, src *fasthttp.ResponseHeader) {
	size, n := 0, 0
	for k, v := range src.All() {
		if !hopByHop(headerKey(k)) {
			size += len(v)
			n++
		}
	}
	var all strings.Builder // no scratch array: a large frame would grow the stream's stack
	all.Grow(size)
	for k, v := range src.All() {
		if !hopByHop(headerKey(k)) {
			all.Write(v)
		}
	}
	joined, vals := all.String(), make([]string, n)
	off, i := 0, 0
	for k, v := range src.All() {
		key := headerKey(k)
		if hopByHop(key) {
			continue
		}
		vals[i] = joined[off : off+len(v)]
		off += len(v)
		if prev := h[key]; len(prev) > 0 {
			h[key] = append(prev, vals[i])
		} else {
			h[key] = vals[i : i+1 : i+1]
		}
		i++
	}
}

// headerKey is a backend response's header name as an http.Header key. fasthttp has put it in
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
