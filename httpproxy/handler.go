package httpproxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"ballast/accesslog"
	"ballast/balance"
	"ballast/httpcore"
)

// maxBufferedBody is the largest request body read into memory before forwarding; such a body
// can be replayed for retries and hedges. Larger and chunked ones stream, bounded in memory.
const maxBufferedBody = 64 << 10

// exchange is the per-request state of the common path, pooled so a request allocates nothing.
type exchange struct {
	first attempt
	relay relay
	up    upload
	body  []byte
	raw   bool // ctx.Request.bodyRaw points into body

	core  httpcore.Exchange // the request as the HTTP core follows it
	req   reqMsg            // the request as the core sees it
	resp  respMsg           // the response as the core sees it
	scan  httpcore.Scan
	limit bodyLimit           // max_body_bytes on a body of unknown length
	zr    httpcore.Compressor // a streamed response body being compressed
	ztmp  []byte              // a compressed buffered body
	enc   httpcore.Encoding   // the encoding of a streamed response
}

var exchangePool = sync.Pool{New: func() any { return new(exchange) }}

func getExchange() *exchange { return exchangePool.Get().(*exchange) }

func (x *exchange) put() {
	x.first.req, x.first.b, x.first.ps, x.first.upload, x.first.out, x.first.client = nil, nil, nil, nil, nil, nil
	if x.first.resp.StreamBody {
		x.first.resp.Reset() // it carried a streamed body; otherwise it was never used
	}
	x.relay = relay{}
	x.up = upload{}
	x.raw = false
	x.core.Reset()
	x.req = reqMsg{}
	x.resp = respMsg{}
	x.scan = httpcore.Scan{}
	x.limit = bodyLimit{}
	x.enc = httpcore.EncNone
	x.ztmp = x.ztmp[:0]
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

// expect decides an Expect: 100-continue before the body is asked for: a declared length over
// the route's max_body_bytes is answered 413 at once, without 100 Continue (fasthttp then
// closes the connection, since the client may send the body anyway).
func (ls *listenerState) expect(ctx *fasthttp.RequestCtx) int {
	v := ls.view()
	x := getExchange()
	defer x.put()
	x.req.init(ctx)
	cx := &x.core
	cx.Begin(v.t, v.l, &x.req, httpcore.Conn{Peer: httpcore.ClientAddr(ctx.RemoteAddr()), TLS: ls.tls})
	if _, verdict := checkHead(&ctx.Request.Header); verdict != headOK || cx.ExpectContinue(&x.req) {
		return fasthttp.StatusContinue // the handler answers a bad head as usual
	}
	ls.render(ctx, &cx.Reply)
	cx.Log(&x.req, &httpcore.Done{Status: cx.Reply.Status, Term: cx.Reply.Term})
	return cx.Reply.Status
}

// errorHandler answers requests fasthttp could not parse: 431 for a header over the listener's
// limit, 408 for a client too slow to send its headers, 400 for the rest. Each gets its
// access-log line.
func (ls *listenerState) errorHandler(ctx *fasthttp.RequestCtx, err error) {
	var small *fasthttp.ErrSmallBuffer
	var te interface{ Timeout() bool }
	status, term := fasthttp.StatusBadRequest, accesslog.TermRefused
	msg := "ballast: malformed request\n"
	switch {
	case errors.As(err, &small):
		status, msg = fasthttp.StatusRequestHeaderFieldsTooLarge, "ballast: request header too large\n"
	case errors.As(err, &te) && te.Timeout():
		status, term, msg = fasthttp.StatusRequestTimeout, accesslog.TermClientTimeout, "ballast: request timeout\n"
	case errors.Is(err, errBareLF):
		msg = "ballast: request head ends with a bare LF\n"
	}
	ctx.Error(msg, status)
	h := &ctx.Request.Header
	ls.proxy.core.LogRefused(ls.name, httpcore.ClientAddr(ctx.RemoteAddr()), h.Method(), h.RequestURI(), h.Protocol(), status, term)
	ls.proxy.logger.Debug("bad request", "client", ctx.RemoteAddr().String(), "err", err)
}

// handle is the request path of one listener.
func (ls *listenerState) handle(ctx *fasthttp.RequestCtx) {
	v := ls.view()
	h := &ctx.Request.Header
	x := getExchange()
	x.req.init(ctx)
	cx := &x.core
	cx.Begin(v.t, v.l, &x.req, httpcore.Conn{Peer: httpcore.ClientAddr(ctx.RemoteAddr()), TLS: ls.tls})

	authority, verdict := checkHead(h)
	if verdict != headOK {
		ls.refuseHead(ctx, x, verdict)
		return
	}
	if authority != nil {
		// RFC 9112 §3.2.2: the target's authority replaces Host, so the request is routed on
		// and forwarded with the same host.
		h.SetHostBytes(authority)
	}
	r := cx.Route(&x.req)
	if r == nil {
		ls.reply(ctx, x, nil)
		return
	}
	// fasthttp parsed the target into a URI and would write the request from it: percent-
	// decoded, normalised, Host taken from it. Dropping the parse makes Write send the
	// target exactly as the client did (or as a rewrite made it).
	ctx.Request.SetURI(nil)
	h.SetNoDefaultContentType(true) // forward what the client sent: no Content-Type added
	if isUpgrade(h) {
		if cl := h.ContentLength(); cl != 0 && cl != -2 {
			// The tunnel forwards the head alone and then raw bytes: a body would arrive as
			// the start of the new protocol, or as a second request after a refusal.
			ls.refuseHead(ctx, x, headUpgradeBody)
			return
		}
		if !cx.Admit(&x.req) {
			ls.reply(ctx, x, nil)
			return
		}
		ls.tunnel(ctx, x)
		return
	}
	if !cx.Admit(&x.req) { // access control, limits, redirects: answered by Ballast
		ls.reply(ctx, x, nil)
		return
	}
	ps := r.Pool()
	scanRequest(&x.scan, h)
	h.ResetConnectionClose() // the backend connection stays open whatever the client does
	if len(h.Host()) > 0 && bytes.Equal(h.Protocol(), http10) {
		// An HTTP/1.0 request would make the backend close its connection after answering:
		// one connect per request. Sent as HTTP/1.1 (it has a Host), it keeps the pooled
		// connection; the client side still speaks HTTP/1.0, decided before the handler.
		h.SetProtocolBytes(http11)
	}
	cx.Prepare(&x.req, &x.scan, false)
	replayable, err := ls.prepareBody(ctx, x)
	if err != nil {
		o := httpcore.Outcome{Failure: httpcore.ClientFailed, Err: err}
		if isTimeout(err) {
			o.Failure = httpcore.ClientTimeout
		}
		cx.Fail(&o)
		ls.reply(ctx, x, &httpcore.Done{Pool: ps, BytesIn: requestBytes(ctx, x)})
		return
	}
	ps.CountRequest()
	key := ps.Key(&x.req, cx.Client())
	if ps.HedgeDelay > 0 && replayable && httpcore.Idempotent(h.Method()) {
		ls.hedged(ctx, ps, x, key)
		return
	}
	ls.forward(ctx, ps, x, key, replayable)
}

// refuseHead answers a request head that checkHead did not accept and closes the connection,
// whose framing can no longer be trusted.
func (ls *listenerState) refuseHead(ctx *fasthttp.RequestCtx, x *exchange, v headVerdict) {
	cx := &x.core
	switch v {
	case headConnect:
		cx.RefuseMethod()
	case headBadVersion:
		cx.Refuse(nil, fasthttp.StatusHTTPVersionNotSupported, []byte(v.message()))
	default:
		cx.Refuse(nil, fasthttp.StatusBadRequest, []byte(v.message()))
	}
	cx.Reply.Close = true
	ls.reply(ctx, x, nil)
}

// render writes Ballast's own answer r as the response.
func (ls *listenerState) render(ctx *fasthttp.RequestCtx, r *httpcore.Reply) {
	resp := &ctx.Response
	resp.Reset()
	resp.Header.SetNoDefaultContentType(true)
	resp.SetStatusCode(r.Status)
	if len(r.ContentType) > 0 {
		resp.Header.SetContentTypeBytes(r.ContentType)
	}
	if len(r.Location) > 0 {
		resp.Header.SetCanonical(httpcore.KeyLocation, r.Location)
	}
	if len(r.RetryAfter) > 0 {
		resp.Header.SetCanonical(httpcore.KeyRetryAfter, r.RetryAfter)
	}
	if len(r.Allow) > 0 {
		resp.Header.SetCanonical(httpcore.KeyAllow, r.Allow)
	}
	resp.SetBodyRaw(r.Body) // shared and never written to
	if r.Close {
		ctx.SetConnectionClose()
	}
}

// reply renders the core's answer, logs the request and finishes it. d says what the log
// line adds (the pool, the backend); nil for a request no pool saw.
func (ls *listenerState) reply(ctx *fasthttp.RequestCtx, x *exchange, d *httpcore.Done) {
	cx := &x.core
	ls.render(ctx, &cx.Reply)
	var done httpcore.Done
	if d != nil {
		done = *d
	}
	done.Status, done.Term = cx.Reply.Status, cx.Reply.Term
	cx.Log(&x.req, &done)
	ls.finish(ctx, x)
}

// prepareBody reads a small body into memory (replayable) or sets up streaming; a body of
// unknown length is cut at the route's max_body_bytes.
func (ls *listenerState) prepareBody(ctx *fasthttp.RequestCtx, x *exchange) (replayable bool, err error) {
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
	var r io.Reader = req.BodyStream()
	if max := x.core.BodyLimit(); max > 0 && cl == -1 {
		x.limit = bodyLimit{r: r, left: max}
		r = &x.limit
	}
	x.up = upload{r: r, ctx: ctx, idle: ls.idle, rt: x.core.Pool().ResponseTimeout, deadline: time.Now().Add(ls.idle)}
	req.SetBodyStream(&x.up, cl)
	return false, nil
}

// requestBytes is the size of the request body as received: its Content-Length, or what was
// streamed of a chunked one.
func requestBytes(ctx *fasthttp.RequestCtx, x *exchange) int64 {
	if x.up.n > 0 {
		return x.up.n
	}
	if cl := ctx.Request.Header.ContentLength(); cl > 0 {
		return int64(cl)
	}
	return 0
}

// forward runs attempts one after the other: the first try, then retries on other backends.
func (ls *listenerState) forward(ctx *fasthttp.RequestCtx, ps *httpcore.Pool, x *exchange, key uint64, replayable bool) {
	var tried balance.Tried
	h := &ctx.Request.Header
	cx := &x.core
	a := &x.first
	cl := h.ContentLength()
	idem := httpcore.Idempotent(h.Method())
	stale, retrying := 0, false
	for try := 1; ; {
		b, err := ps.Acquire(&x.req, key, tried) // the sticky cookie's backend first
		if err != nil {
			if a.b != nil { // a retry found no other backend: the last failure answers
				ls.fail(ctx, x, a)
				return
			}
			cx.AcquireFailed(err)
			ls.reply(ctx, x, &httpcore.Done{Pool: ps})
			return
		}
		if retrying {
			cx.Retried(ps)
			retrying = false
		}
		a.reset(ps, b, &ctx.Request)
		a.out = &ctx.Response
		a.client = ctx.Conn() // watched for a client that leaves before the response
		if !replayable {
			a.upload = &x.up
		}
		if a.roundTrip(false) {
			ls.deliver(ctx, x, a)
			return
		}
		a.release(time.Since(a.start), ps.BackendFailure(&a.o))
		if a.o.Failure == httpcore.Connect {
			ps.Upstream.Unreachable(b)
		}
		untouched := replayable || x.up.n == 0 && !x.up.interrupted
		switch {
		case a.o.Failure == httpcore.ClientGone:
			ls.clientGone(ctx, x, a)
			return
		case stale < 2 && untouched && a.o.Fresh(idem):
			// A keep-alive race, not the backend's fault: same pool, fresh connection. The
			// connections that sat idle beside the dead one are suspect too, so they go.
			stale++
			a.hc.CloseIdleConnections()
		case try < ps.Attempts && ps.Retryable(&a.o, idem, untouched) && ps.SpendRetry():
			httpcore.MarkTried(&tried, b)
			retrying = true
			try++
		default:
			ls.fail(ctx, x, a)
			return
		}
		if !replayable {
			ctx.Request.SetBodyStream(&x.up, cl) // Write closed it; nothing was read from it
		}
	}
}

// clientGone ends a request whose client left before the response headers: the backend
// attempt is already cancelled and released; nothing is written, and the log says 499.
func (ls *listenerState) clientGone(ctx *fasthttp.RequestCtx, x *exchange, a *attempt) {
	cx := &x.core
	cx.Fail(&a.o)
	cx.Log(&x.req, &httpcore.Done{Status: cx.Reply.Status, Pool: a.ps, Backend: a.b, Term: cx.Reply.Term, BytesIn: requestBytes(ctx, x)})
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(func(c net.Conn) {}) // closed without an answer: there is nobody to read it
	ls.finish(ctx, x)
}

// finish returns x to its pool once nothing of the request refers to it any more.
func (ls *listenerState) finish(ctx *fasthttp.RequestCtx, x *exchange) {
	if x.raw {
		ctx.Request.ResetBody()
	}
	x.put()
}

// fail answers a request whose last attempt failed.
func (ls *listenerState) fail(ctx *fasthttp.RequestCtx, x *exchange, a *attempt) {
	o := a.o
	if o.Failure == httpcore.ClientFailed && errors.Is(o.Err, errBodyTooLarge) {
		o.Failure = httpcore.BodyTooLarge
	}
	x.core.Fail(&o)
	id := ""
	if a.b != nil {
		id = a.b.ID
	}
	ls.proxy.logger.Warn("request failed", "pool", a.ps.Name, "backend", id, "reason", o.Failure.String(), "err", o.Err)
	ls.reply(ctx, x, &httpcore.Done{Pool: a.ps, Backend: a.b, BytesIn: requestBytes(ctx, x)})
}

// deliver relays a's response to the client: headers now, a streamed body by the server after
// the handler returns, with the backend's slot released when the body is done.
func (ls *listenerState) deliver(ctx *fasthttp.RequestCtx, x *exchange, a *attempt) {
	out := &ctx.Response
	var sc httpcore.Scan
	if a.out != out {
		scanResponse(&sc, &a.out.Header)
		x.resp.h = &a.out.Header
		x.core.StripHopByHop(&x.resp, &sc, false, false)
		a.out.Header.CopyTo(&out.Header)
		if a.br == nil {
			out.SetBody(a.out.Body())
		}
	} else {
		scanResponse(&sc, &out.Header)
		x.resp.h = &out.Header
		x.core.StripHopByHop(&x.resp, &sc, false, false)
	}
	out.Header.ResetConnectionClose()
	out.Header.SetNoDefaultContentType(true)
	x.resp.h = &out.Header
	enc := x.core.Respond(&x.req, &x.resp, a.b)
	if a.br != nil {
		cl := a.resp.Header.ContentLength()
		x.relay = relay{ls: ls, x: x, a: a, ctx: ctx, r: a.resp.BodyStream(), remain: int64(cl)}
		if cl < -1 {
			cl = -1
		}
		var body io.Reader = &x.relay
		if enc != httpcore.EncNone {
			x.zr.Init(&x.relay, enc)
			body, cl = &x.zr, -1
		}
		// A body with a length is written by fasthttp into a buffer it flushes only when
		// full; relay.WriteTo writes it to the connection itself, so the headers go first.
		out.ImmediateHeaderFlush = cl >= 0
		out.SetBodyStream(body, cl)
		return
	}
	relayed := int64(len(out.Body())) // as the backend sent it, before compression
	if enc != httpcore.EncNone {
		x.ztmp = httpcore.AppendCompressed(x.ztmp[:0], out.Body(), enc)
		out.SetBody(x.ztmp)
	}
	a.release(a.ttfb, a.ps.BackendFailure(&a.o))
	x.core.Log(&x.req, &httpcore.Done{
		Status: out.StatusCode(), BytesIn: requestBytes(ctx, x), BytesOut: relayed,
		Pool: a.ps, Backend: a.b, Upstream: a.ttfb,
	})
	if a != &x.first {
		fasthttp.ReleaseRequest(a.req)
	}
	ls.finish(ctx, x)
}

// relay streams a backend response body to the client. fasthttp's server reads it after the
// handler returns and closes it when the response is written or the client is gone; Close
// ends the backend side, so in-flight counts the whole transfer.
type relay struct {
	ls     *listenerState
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
			_ = c.SetReadDeadline(now.Add(r.a.ps.ResponseTimeout))
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
	a.release(a.ttfb, r.broken || a.ps.BackendFailure(&a.o))
	x, ctx, ls := r.x, r.ctx, r.ls
	d := httpcore.Done{
		Status: ctx.Response.StatusCode(), BytesIn: requestBytes(ctx, x), BytesOut: r.n,
		Pool: a.ps, Backend: a.b, Upstream: a.ttfb,
	}
	switch {
	case r.broken:
		d.Term = accesslog.TermServerData
	case !complete:
		d.Term = accesslog.TermClientData
	}
	x.core.Log(&x.req, &d)
	if a != &x.first {
		fasthttp.ReleaseRequest(a.req)
	}
	ls.finish(ctx, x)
	return nil
}
