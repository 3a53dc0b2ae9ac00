package httpproxy

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"sync"
	"time"
	"unsafe"

	"github.com/valyala/fasthttp"

	"ballast/balance"
	"ballast/upstream"
)

// maxBufferedBody is the largest request body read into memory before forwarding; such a body
// can be replayed for retries and hedges. Larger and chunked bodies stream, bounded in memory.
const maxBufferedBody = 64 << 10

// exchange is the per-request state of the common path, pooled so a request allocates nothing.
type exchange struct {
	first attempt
	relay relay
	up    upload
	body  []byte
	buf   []byte
	raw   bool // ctx.Request.bodyRaw points into body

	pol reqState // traffic policy scratch (policy.go); untouched when the table has none
}

var exchangePool = sync.Pool{New: func() any { return new(exchange) }}

func getExchange() *exchange { return exchangePool.Get().(*exchange) }

func (x *exchange) put() {
	x.first.req, x.first.b, x.first.ps, x.first.upload, x.first.out = nil, nil, nil, nil, nil
	if x.first.resp.StreamBody {
		x.first.resp.Reset() // it carried a streamed body; otherwise it was never used
	}
	x.relay = relay{}
	x.up = upload{}
	x.raw = false
	x.pol.reset()
	exchangePool.Put(x)
}

// headerReceived lets a request with a body take longer than the header timeout: from here on
// the client's inactivity limit applies, refreshed while the body flows (see upload).
func (ls *listenerState) headerReceived(h *fasthttp.RequestHeader) fasthttp.RequestConfig {
	if cl := h.ContentLength(); cl != 0 && cl != -2 {
		return fasthttp.RequestConfig{ReadTimeout: ls.idle}
	}
	return fasthttp.RequestConfig{}
}

// errorHandler answers requests fasthttp could not parse: 431 for a header over the listener's
// limit, 408 for a client too slow to send its headers, 400 for the rest.
func (p *Proxy) errorHandler(ctx *fasthttp.RequestCtx, err error) {
	var small *fasthttp.ErrSmallBuffer
	var te interface{ Timeout() bool }
	switch {
	case errors.As(err, &small):
		ctx.Error("ballast: request header too large\n", fasthttp.StatusRequestHeaderFieldsTooLarge)
	case errors.As(err, &te) && te.Timeout():
		ctx.Error("ballast: request timeout\n", fasthttp.StatusRequestTimeout)
	default:
		ctx.Error("ballast: malformed request\n", fasthttp.StatusBadRequest)
	}
	p.logger.Debug("bad request", "client", ctx.RemoteAddr().String(), "err", err)
}

// handle is the request path of one listener.
func (ls *listenerState) handle(ctx *fasthttp.RequestCtx) {
	p := ls.proxy
	t := p.table.Load()
	h := &ctx.Request.Header

	authority, v := checkHead(h)
	if v != headOK {
		refuse(ctx, v)
		return
	}
	if authority != nil {
		// RFC 9112 §3.2.2: the target's authority replaces Host, so the request is routed on
		// and forwarded with the same host.
		h.SetHostBytes(authority)
	}
	var path []byte
	if t.needPath {
		path = ctx.Path() // routes match the normalised path
	}
	r := t.match(ls.name, h.Host(), path)
	if r == nil {
		ctx.Error("ballast: no route\n", fasthttp.StatusNotFound)
		if t.pol != nil {
			ls.errorPage(ctx, t) // errorpages.go
		}
		return
	}
	// fasthttp parsed the target into a URI and would write the request from it: percent-
	// decoded, normalised, Host taken from it. Dropping the parse makes Write send the
	// target exactly as the client did.
	ctx.Request.SetURI(nil)
	h.SetNoDefaultContentType(true) // forward what the client sent: no Content-Type added
	ps := r.ps
	if isUpgrade(h) {
		if cl := h.ContentLength(); cl != 0 && cl != -2 {
			// The tunnel forwards the head alone and then raw bytes: a body would arrive as
			// the start of the new protocol, or as a second request after a refusal.
			refuse(ctx, headUpgradeBody)
			return
		}
		if t.pol != nil && !ls.admitUpgrade(ctx, t, r) { // policy.go
			return
		}
		ls.tunnel(ctx, t, ps)
		return
	}

	x := getExchange()
	sc := scanHeaders(h.All())
	stripHopByHop(h, sc.hop, false)
	h.ResetConnectionClose() // the backend connection stays open whatever the client does
	if len(h.Host()) > 0 && bytes.Equal(h.Protocol(), http10) {
		// An HTTP/1.0 request would make the backend close its connection after answering:
		// one connect per request. Sent as HTTP/1.1 (it has a Host), it keeps the pooled
		// connection; the client side still speaks HTTP/1.0, decided before the handler.
		h.SetProtocolBytes(http11)
	}
	if t.pol != nil && !ls.applyPolicy(ctx, t, r, x, &sc) { // policy.go: answered by Ballast
		ls.finish(ctx, x)
		return
	}
	x.buf = addForwardingHeaders(h, sc, clientAddr(ctx.RemoteAddr()), ls.tls, x.buf)
	replayable, err := ls.prepareBody(ctx, x, ps)
	if err != nil {
		x.put()
		bodyError(ctx, err)
		return
	}
	ps.budget.request(coarseUnix())
	key := ps.key(ctx)
	if ps.hedgeDelay > 0 && replayable && idempotent(h) {
		ls.hedged(ctx, t, ps, x, key)
		return
	}
	ls.forward(ctx, t, ps, x, key, replayable)
}

// refuse answers a request head that checkHead did not accept and closes the connection,
// whose framing can no longer be trusted.
func refuse(ctx *fasthttp.RequestCtx, v headVerdict) {
	code := fasthttp.StatusBadRequest
	switch v {
	case headConnect:
		code = fasthttp.StatusMethodNotAllowed
	case headBadVersion:
		code = fasthttp.StatusHTTPVersionNotSupported
	}
	ctx.Error(v.message(), code) // resets the response headers: Allow comes after
	if v == headConnect {
		ctx.Response.Header.Set("Allow", allowedMethods)
	}
	ctx.SetConnectionClose()
}

// prepareBody reads a small body into memory (replayable) or sets up streaming.
func (ls *listenerState) prepareBody(ctx *fasthttp.RequestCtx, x *exchange, ps *poolState) (replayable bool, err error) {
	req := &ctx.Request
	if !req.IsBodyStream() {
		return true, nil
	}
	cl := req.Header.ContentLength()
	switch {
	case cl == 0 || cl == -2:
		req.ResetBody()
		return true, nil
	case cl > 0 && cl <= maxBufferedBody:
		if cap(x.body) < cl {
			x.body = make([]byte, cl, max(cl, 4<<10))
		}
		b := x.body[:cl]
		if _, err := io.ReadFull(req.BodyStream(), b); err != nil {
			return false, err
		}
		req.SetBodyRaw(b)
		x.raw = true
		return true, nil
	}
	x.up = upload{r: req.BodyStream(), ctx: ctx, idle: ls.idle, rt: ps.respTimeout, deadline: time.Now().Add(ls.idle)}
	req.SetBodyStream(&x.up, cl)
	return false, nil
}

// idempotent reports whether a request may be sent twice: the rule is Idempotent's.
func idempotent(h *fasthttp.RequestHeader) bool { return Idempotent(b2s(h.Method())) }

// key computes the hash key of a request for hash balancers.
func (ps *poolState) key(ctx *fasthttp.RequestCtx) uint64 {
	if !ps.needsKey {
		return 0
	}
	h := &ctx.Request.Header
	switch ps.hashSource {
	case "source_ip":
		return balance.HashSourceIP(clientAddr(ctx.RemoteAddr()))
	case "header":
		if v := h.Peek(ps.hashName); len(v) > 0 {
			return balance.HashHeader(v)
		}
		return rand.Uint64()
	case "cookie":
		if v := h.Cookie(ps.hashName); len(v) > 0 {
			return balance.HashCookie(v)
		}
		return rand.Uint64()
	}
	uri := h.RequestURI()
	if ps.carp {
		return balance.CARPURLHash(uri)
	}
	return balance.HashURI(uri, false)
}

// markTried adds b to the set of backends a request has used, so a retry or hedge avoids it.
func markTried(t *balance.Tried, b *upstream.Backend) {
	if i := b.Index(); i >= 0 {
		t.Add(i)
	}
}

// retryable reports whether a failed attempt may be tried again on another backend. A request
// that may have reached the backend (errClosed: some of it was sent) is replayed only if it is
// idempotent (RFC 9110 §9.2.2), whatever retries.non_idempotent says: a backend that crashed
// after receiving a POST may have acted on it.
func (ps *poolState) retryable(a *attempt, h *fasthttp.RequestHeader, bodyUntouched bool) bool {
	if !bodyUntouched {
		return false
	}
	switch a.class {
	case errConnect:
		return true
	case errStale:
		return ps.nonIdempotent || idempotent(h)
	case errClosed:
		return idempotent(h)
	}
	return false
}

// retryFresh reports whether a failure on a pooled connection is the keep-alive race (the
// backend closed the connection as the request went out) rather than the backend's fault, so
// the request may go out again on a new connection to the same pool without counting as an
// attempt: when nothing of it was sent, or when it is idempotent.
func retryFresh(a *attempt, h *fasthttp.RequestHeader) bool {
	return a.reused && (a.class == errStale || a.class == errClosed && idempotent(h))
}

// failed reports whether the attempt counts as a backend failure for outlier detection.
func failed(a *attempt) bool {
	switch a.class {
	case errClient, errClientTimeout, errCancelled, errStale:
		return false
	case errNone:
		return a.ps.include5xx && a.out.StatusCode() >= 500
	case errClosed:
		// A pooled connection closed as the request went out is the keep-alive race.
		return !a.reused || !errors.Is(a.err, io.EOF)
	}
	return true
}

// release ends a's hold on its backend: the response's status class is counted (0 when there
// was no response) and the slot goes back to the pool with the outcome for outlier detection.
func (a *attempt) release(latency time.Duration, failure bool) {
	code := 0
	if a.class == errNone {
		code = a.out.StatusCode()
	}
	countStatus(a.b, code)
	a.ps.pool.Release(a.b, latency, failure)
}

// forward runs attempts one after the other: the first try, then retries on other backends.
func (ls *listenerState) forward(ctx *fasthttp.RequestCtx, t *table, ps *poolState, x *exchange, key uint64, replayable bool) {
	var tried balance.Tried
	h := &ctx.Request.Header
	a := &x.first
	cl := h.ContentLength()
	stale := 0
	for try := 1; ; {
		b, err := ps.acquire(ctx, key, tried) // sticky.go: the cookie's backend first
		if err != nil {
			if try > 1 || stale > 0 {
				ls.fail(ctx, t, x, a)
			} else {
				ls.acquireError(ctx, err)
			}
			ls.finish(ctx, x)
			return
		}
		a.reset(ps, b, &ctx.Request)
		a.out = &ctx.Response
		if !replayable {
			a.upload = &x.up
		}
		if a.roundTrip(false) {
			ls.deliver(ctx, t, x, a)
			return
		}
		a.release(time.Since(a.start), failed(a))
		if a.class == errConnect {
			ps.pool.Unreachable(b)
		}
		untouched := replayable || x.up.n == 0 && !x.up.interrupted
		switch {
		case stale < 2 && untouched && retryFresh(a, h):
			// A keep-alive race, not the backend's fault: same pool, fresh connection. The
			// connections that sat idle beside the dead one are suspect too, so they go.
			stale++
			a.hc.CloseIdleConnections()
		case try < ps.attempts && ps.retryable(a, h, untouched) && ps.budget.spend(coarseUnix()):
			markTried(&tried, b)
			ps.counters.retries.Add(1)
			x.pol.retries++
			try++
		default:
			ls.fail(ctx, t, x, a)
			ls.finish(ctx, x)
			return
		}
		if !replayable {
			ctx.Request.SetBodyStream(&x.up, cl) // Write closed it; nothing was read from it
		}
	}
}

// finish returns x to its pool once nothing of the request refers to it any more.
func (ls *listenerState) finish(ctx *fasthttp.RequestCtx, x *exchange) {
	if x.raw {
		ctx.Request.ResetBody()
	}
	x.put()
}

// acquireError answers a request the pool could not place.
func (ls *listenerState) acquireError(ctx *fasthttp.RequestCtx, err error) {
	switch {
	case errors.Is(err, upstream.ErrQueueFull):
		ctx.Error("ballast: backlog queue full\n", fasthttp.StatusServiceUnavailable)
		ctx.Response.Header.Set("Retry-After", "1")
	case errors.Is(err, upstream.ErrQueueTimeout):
		ctx.Error("ballast: timed out in the backlog queue\n", fasthttp.StatusServiceUnavailable)
		ctx.Response.Header.Set("Retry-After", "1")
	case errors.Is(err, upstream.ErrNoBackend):
		ctx.Error("ballast: no backend available\n", fasthttp.StatusServiceUnavailable)
	default:
		ctx.Error("ballast: "+err.Error()+"\n", fasthttp.StatusServiceUnavailable)
	}
	ls.errorPage(ctx, ls.proxy.table.Load()) // errorpages.go
}

// fail answers a request whose last attempt failed.
func (ls *listenerState) fail(ctx *fasthttp.RequestCtx, t *table, x *exchange, a *attempt) {
	ctx.Error("ballast: "+a.class.String()+"\n", a.class.status())
	if a.class == errClient || a.class == errClientTimeout {
		ctx.SetConnectionClose()
	}
	if t.pol != nil {
		ls.failPolicy(ctx, t, a) // limits.go: 413, error pages
	}
	id := ""
	if a.b != nil {
		id = a.b.ID
	}
	ls.proxy.logger.Warn("request failed", "pool", a.ps.name, "backend", id, "reason", a.class.String(), "err", a.err)
	if t.access {
		ls.logAccess(ctx, x, a, time.Since(a.start))
	}
}

// deliver relays a's response to the client: headers now, a streamed body by the server after
// the handler returns, with the backend's slot released when the body is done.
func (ls *listenerState) deliver(ctx *fasthttp.RequestCtx, t *table, x *exchange, a *attempt) {
	out := &ctx.Response
	if a.out != out {
		stripHopByHop(&a.out.Header, scanHeaders(a.out.Header.All()).hop, false)
		a.out.Header.CopyTo(&out.Header)
		if a.br == nil {
			out.SetBody(a.out.Body())
		}
	} else {
		stripHopByHop(&out.Header, scanHeaders(out.Header.All()).hop, false)
	}
	out.Header.ResetConnectionClose()
	out.Header.SetNoDefaultContentType(true)
	if ls.expose(t) {
		out.Header.SetCanonical(keyBackend, s2b(a.b.ID))
	}
	if t.pol != nil {
		ls.respondPolicy(ctx, x, a) // policy.go
	}
	if a.br != nil {
		cl := a.resp.Header.ContentLength()
		x.relay = relay{ls: ls, t: t, x: x, a: a, ctx: ctx, r: a.resp.BodyStream(), remain: int64(cl)}
		if cl < -1 {
			cl = -1
		}
		// A body with a length is written by fasthttp into a buffer it flushes only when
		// full; relay.WriteTo writes it to the connection itself, so the headers go first.
		body, n := ls.responseStream(t, x, cl) // compress.go: compressed when asked
		out.ImmediateHeaderFlush = n >= 0
		out.SetBodyStream(body, n)
		return
	}
	a.release(a.ttfb, failed(a))
	if t.access {
		ls.logAccess(ctx, x, a, time.Since(a.start))
	}
	if a != &x.first {
		fasthttp.ReleaseRequest(a.req)
	}
	ls.finish(ctx, x)
}

var (
	keyBackend = []byte("X-Ballast-Backend")
	http10     = []byte("HTTP/1.0")
	http11     = []byte("HTTP/1.1")
)

// s2b returns the bytes of s without copying; the caller must not modify them.
func s2b(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// relay streams a backend response body to the client. fasthttp's server reads it after the
// handler returns and closes it when the response is written or the client is gone; Close
// ends the backend side, so in-flight counts the whole transfer.
type relay struct {
	ls     *listenerState
	t      *table
	x      *exchange
	a      *attempt
	ctx    *fasthttp.RequestCtx
	r      io.Reader
	remain int64 // bytes still expected, -1 (chunked) or -2 (until close) when unknown
	eof    bool
	broken bool
	reads  int // deadlines are refreshed every refreshReads reads, not on every one

	n int64 // bytes relayed, for the access log
}

// refreshReads is how often (in reads of up to the server's buffer size) a streaming body
// checks the clock to push the inactivity deadlines further.
const refreshReads = 16

func (r *relay) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.n += int64(n)
	if r.remain >= 0 {
		r.remain -= int64(n)
		if r.remain <= 0 {
			r.eof = true
		}
	}
	switch {
	case err == io.EOF:
		r.eof = true
		r.copyTrailers()
	case err != nil:
		r.broken = true
	}
	if r.reads++; r.reads%refreshReads == 0 {
		now := time.Now()
		_ = r.ctx.SetWriteDeadline(now.Add(r.ls.idle))
		if c := r.a.conn; c != nil {
			_ = c.SetReadDeadline(now.Add(r.a.ps.respTimeout))
		}
	}
	return n, err
}

// copyTrailers hands the trailers of a chunked backend response to the client response,
// which fasthttp writes after the last chunk.
func (r *relay) copyTrailers() {
	src := &r.a.resp.Header
	for k := range src.Trailers() {
		if v := src.PeekBytes(k); len(v) > 0 {
			r.ctx.Response.Header.SetBytesKV(k, v)
		}
	}
}

func (r *relay) Close() error {
	a := r.a
	if a == nil {
		return nil
	}
	r.a = nil
	complete := r.eof && !r.broken
	a.finishBody(complete)
	// A body cut short by the backend is its failure; a client that went away is not.
	a.release(a.ttfb, r.broken || failed(a))
	if r.t.access {
		r.ls.logAccess(r.ctx, r.x, a, time.Since(a.start))
	}
	x, ctx, ls := r.x, r.ctx, r.ls
	if a != &x.first {
		fasthttp.ReleaseRequest(a.req)
	}
	ls.finish(ctx, x)
	return nil
}
