package httpcore

import (
	"errors"
	"net/netip"
	"strconv"
	"time"

	"ballast/accesslog"
	"ballast/upstream"
)

// Conn is what the core knows of the connection a request came on.
type Conn struct {
	Peer  netip.Addr // the client's address (a PROXY header's, when the listener takes them)
	TLS   bool       // the client connected over TLS: the scheme is https
	HTTP2 bool       // the request is an HTTP/2 stream
}

// Exchange is the core's state of one request, from its head to its access-log line. An
// engine keeps one in its pooled per-request state and calls its steps in order (see the
// package documentation); between requests it calls Reset, which keeps the buffers. An
// Exchange is used by one goroutine at a time.
type Exchange struct {
	// Reply is Ballast's own answer, set when a step returns false and by Fail,
	// AcquireFailed and Refuse. The engine renders it and then logs.
	Reply Reply

	t        *Table
	l        *Listener
	route    *Route
	peer     netip.Addr
	client   netip.Addr // the peer, or who a trusted proxy says it forwards
	tls      bool
	h2       bool
	trusted  bool // the peer is one of trusted_proxies
	noEnc    bool // the engine has no encoder for this response (WithoutEncoder)
	declined bool // Respond left a response it would have compressed as it is, for noEnc
	start    time.Time
	retries  int

	// Buffers, kept across requests: the request ID sent to the backend, the trace-id of a
	// valid traceparent, the target as received once a rewrite changed it, the Host for
	// templates, the normalised path, scratch for templates and keys, scratch for fields, the
	// redirect's Location, Retry-After.
	id, trace, uri, host, path, tmp, buf, loc, wait []byte
	npath                                           []byte // the normalised path: path, or the target's own
}

// Reply is an answer Ballast gives itself. Its byte slices are the core's (shared or held by
// the Exchange): read-only, valid until the Exchange is reset.
type Reply struct {
	Status      int
	Body        []byte
	ContentType []byte
	// Location, RetryAfter and Allow are set when the answer has them.
	Location, RetryAfter, Allow []byte
	// Close: the request's body was not read, so an HTTP/1 connection must close after it.
	Close bool
	// Term is the access log's termination state.
	Term string
}

// Reset clears x for the next request, keeping its buffers.
func (x *Exchange) Reset() {
	*x = Exchange{id: x.id[:0], trace: x.trace[:0], uri: x.uri[:0], host: x.host[:0], path: x.path[:0],
		tmp: x.tmp[:0], buf: x.buf[:0], loc: x.loc[:0], wait: x.wait[:0]}
}

// Begin starts a request of listener l (t.Listener) under table t: it notes the connection and
// resolves the client, through X-Forwarded-For when the peer is a trusted proxy.
func (x *Exchange) Begin(t *Table, l *Listener, req Request, c Conn) {
	x.t, x.l = t, l
	x.peer, x.client, x.tls, x.h2 = c.Peer, c.Peer, c.TLS, c.HTTP2
	if t.access {
		x.start = time.Now()
	}
	if tp := t.pol; tp != nil && len(tp.trusted) > 0 {
		if x.trusted = tp.trusts(c.Peer); x.trusted {
			x.tmp = req.AppendValues(x.tmp[:0], keyXFF)
			x.client = tp.forwardedClient(x.tmp, c.Peer)
		}
	}
}

// Client is the request's client: the peer, or the address a trusted proxy forwards for.
func (x *Exchange) Client() netip.Addr { return x.client }

// Peer is the address the connection came from.
func (x *Exchange) Peer() netip.Addr { return x.peer }

// Route finds the request's route: the first whose listener, host and path prefix match, the
// path being the target's, normalised. It returns nil, with a 404 in Reply, when none does.
func (x *Exchange) Route(req Request) *Route {
	t := x.t
	var path []byte
	if t.needPath {
		if p, _ := splitTarget(req.Target()); p != nil {
			if normal(p) {
				path = p // already normalised: no copy (it aliases the target until a rewrite)
			} else {
				x.path = NormalizePath(x.path[:0], p)
				path = x.path
			}
			x.npath = path
		}
	}
	r := t.match(x.l.Conf.Name, req.Host(), path)
	x.route = r
	if r == nil {
		x.answer(404, msgNoRoute, accesslog.TermLocal)
	}
	return r
}

// Pool is the matched route's pool (nil for a redirect route).
func (x *Exchange) Pool() *Pool { return x.route.pool }

// Admit applies the listener's and the route's access control, the rate limit, the declared
// body length against max_body_bytes and the redirect, in that order. It returns false when
// one of them answers the request itself (Reply); the request then goes no further.
func (x *Exchange) Admit(req Request) bool {
	if x.t.pol == nil {
		return true
	}
	if a := x.l.acl; a != nil && !a.permits(x.client) {
		x.Refuse(req, 403)
		return false
	}
	rp := x.route.pol
	if rp == nil {
		return true
	}
	if rp.acl != nil && !rp.acl.permits(x.client) {
		x.Refuse(req, 403)
		return false
	}
	if l := rp.limiter; l != nil {
		if ok, wait := l.allow(l.key(req, x)); !ok {
			x.Refuse(req, 429)
			x.wait = strconv.AppendInt(x.wait[:0], int64(wait), 10)
			x.Reply.RetryAfter = x.wait
			return false
		}
	}
	if rp.maxBody > 0 && req.ContentLength() > rp.maxBody {
		x.Refuse(req, 413)
		return false
	}
	if rp.redirect != nil {
		x.redirect(req, rp)
		return false
	}
	return true
}

// ExpectContinue decides, before a request's body is asked for (Expect: 100-continue), what
// can be decided from its head without side effects: a declared length over the route's
// max_body_bytes gets 413 at once (Reply, false). It runs Route.
func (x *Exchange) ExpectContinue(req Request) bool {
	r := x.Route(req)
	if r == nil {
		x.Reply = Reply{}
		return true // the request's own path answers 404
	}
	if rp := r.pol; rp != nil && rp.maxBody > 0 && req.ContentLength() > rp.maxBody {
		x.Refuse(req, 413)
		return false
	}
	return true
}

// BodyLimit is the route's max_body_bytes (0: none): an engine cuts a body of unknown length
// there and fails the attempt with BodyTooLarge.
func (x *Exchange) BodyLimit() int64 {
	if rp := x.route.pol; rp != nil {
		return rp.maxBody
	}
	return 0
}

// Prepare makes the request ready for the backend: StripHopByHop (for a protocol switch,
// Connection and Upgrade stay), ApplyPolicy, then AddForwarding. s is the scan of the
// request's fields.
func (x *Exchange) Prepare(req Request, s *Scan, upgrade bool) {
	x.StripHopByHop(req, s, upgrade, x.h2)
	x.ApplyPolicy(req, s)
	x.AddForwarding(req, s)
}

// ApplyPolicy runs the request side of the policy on an admitted request: the forwarding
// fields of a client that is not a trusted proxy go, then the request ID, the rewrite and the
// request header rules apply. Without policy it does nothing.
func (x *Exchange) ApplyPolicy(req Request, s *Scan) {
	tp := x.t.pol
	if tp == nil {
		return
	}
	if len(tp.trusted) > 0 && !x.trusted {
		// A client's own forwarding fields are its claims: the backend gets only what
		// Ballast saw.
		if s.XFF > 0 {
			req.Del(keyXFF)
			s.XFF = 0
		}
		if s.Fwd > 0 {
			req.Del(keyForwarded)
			s.Fwd = 0
		}
	}
	if x.l.requestID {
		x.requestID(req)
	}
	if rp := x.route.pol; rp != nil {
		if rp.rewrite != nil {
			x.rewrite(req, rp.rewrite)
		}
		if rp.reqHeaders != nil {
			x.host = append(x.host[:0], req.Host()...)
			rp.reqHeaders.apply(req, x, "")
		}
	}
}

// rewrite applies the route's rewrite to the normalised path the route matched and sets the
// target to the result, encoded, with the query as received. A target without a path ("*")
// or one the rule does not match is left alone.
func (x *Exchange) rewrite(req Request, rw *rewrite) {
	target := req.Target()
	p, query := splitTarget(target)
	if p == nil {
		return
	}
	dec, ok := rw.path(x.tmp[:0], x.npath)
	if !ok {
		return
	}
	if x.t.access {
		x.uri = append(x.uri[:0], target...) // the access log's URI is the one received
	}
	x.buf = appendEscapedPath(x.buf[:0], dec)
	x.buf = append(x.buf, query...)
	x.tmp = dec
	req.SetTarget(x.buf)
}

// redirect answers with the route's redirect; its path is the rewritten one when the route
// rewrites, else the target's as sent.
func (x *Exchange) redirect(req Request, rp *routePolicy) {
	path, query := splitTarget(req.Target())
	if rp.rewrite != nil && path != nil {
		if dec, ok := rp.rewrite.path(x.tmp[:0], x.npath); ok {
			x.buf = appendEscapedPath(x.buf[:0], dec)
			path, x.tmp = x.buf, dec
		}
	}
	x.loc = rp.redirect.location(x.loc[:0], req, x.tls, path, query)
	x.Reply = Reply{Status: rp.redirect.status, Location: x.loc, Close: req.ContentLength() != 0, Term: accesslog.TermLocal}
}

// Respond applies the response side to a backend's response from b: X-Ballast-Backend
// (expose_backend), X-Request-Id, the sticky cookie, the response header rules and
// compression. It returns the encoding the engine must compress the body with (EncNone: as it
// is); the fields that say so are already set, and the engine drops Content-Length when it
// compresses a body it streams.
func (x *Exchange) Respond(req Request, resp Response, b *upstream.Backend) Encoding {
	if x.l.Expose {
		resp.Set(keyBackend, s2b(b.ID))
	}
	if x.t.pol == nil {
		return EncNone
	}
	if len(x.id) > 0 {
		resp.Set(keyRequestID, x.id)
	}
	if p := x.route.pool; p != nil && p.sticky != nil {
		p.sticky.setCookie(req, resp, b, x)
	}
	rp := x.route.pol
	if rp == nil {
		return EncNone
	}
	if rp.respHeaders != nil {
		x.host = append(x.host[:0], req.Host()...)
		rp.respHeaders.apply(resp, x, b.ID)
	}
	if cp := rp.compress; cp != nil {
		return x.compress(cp, req, resp)
	}
	return EncNone
}

// compress decides compression for a route that has it. A response that could be compressed
// varies with Accept-Encoding whatever this client accepts; a compressed one gets
// Content-Encoding and a weak ETag. A 304 answers for the representation the client holds:
// when the client accepts one of the route's encodings, that is the compressed one, whose
// ETag is weak.
func (x *Exchange) compress(cp *compression, req Request, resp Response) Encoding {
	if resp.Status() == 304 {
		addVary(resp)
		if cp.choose(req.Peek(keyAcceptEnc)) != EncNone {
			x.weakenETag(resp)
		}
		return EncNone
	}
	if !cp.eligible(req, resp) {
		return EncNone
	}
	addVary(resp)
	enc := cp.choose(req.Peek(keyAcceptEnc))
	if enc == EncNone {
		return EncNone
	}
	if x.noEnc {
		x.declined = true
		return EncNone
	}
	resp.Set(keyContentEnc, s2b(enc.Name()))
	x.weakenETag(resp)
	return enc
}

// WithoutEncoder tells Respond that the engine cannot compress this response (it holds as
// many encoders as it may): a response the client would get compressed goes as it is, with
// Vary, as to a client that accepts no coding of the route's. Declined reports it happened.
func (x *Exchange) WithoutEncoder() { x.noEnc = true }

// Declined reports that Respond left a response as it is for WithoutEncoder.
func (x *Exchange) Declined() bool { return x.declined }

// Retried counts a retry the pool's budget paid for (SpendRetry), once another backend has
// taken the request.
func (x *Exchange) Retried(p *Pool) {
	x.retries++
	p.counters.retries.Add(1)
}

// Retries is how many times the request moved to another backend.
func (x *Exchange) Retries() int { return x.retries }

// Messages of Ballast's own answers.
var (
	msgNoRoute   = []byte("ballast: no route\n")
	textPlain    = []byte("text/plain; charset=utf-8")
	refusals     = map[int][]byte{}
	failMessages [NoTransport + 1][]byte
)

func init() {
	for code, msg := range map[int]string{
		400: "bad request", 403: "forbidden", 405: "method not allowed", 408: "request timeout",
		413: "request body too large", 429: "too many requests", 431: "request header too large",
		505: "HTTP version not supported",
	} {
		refusals[code] = []byte("ballast: " + msg + "\n")
	}
	for f := range failMessages {
		failMessages[f] = []byte("ballast: " + Failure(f).String() + "\n")
	}
}

// Refuse answers the request with a status Ballast refuses with (403, 413, 429 and the
// request checks' 400, 405, 408, 431, 505) and its error page; msg, when given, says why in
// place of the status's own message. The connection closes when the request has a body that
// was not read (req nil: a request that did not parse, whose framing is unknown).
func (x *Exchange) Refuse(req Request, status int, msg ...[]byte) {
	body := refusals[status]
	if len(msg) > 0 {
		body = msg[0]
	} else if body == nil {
		body = refusals[400]
	}
	term := accesslog.TermRefused
	if status == 408 {
		term = accesslog.TermClientTimeout
	}
	x.answer(status, body, term)
	x.Reply.Close = req == nil || req.ContentLength() != 0
}

// Fail answers a request whose last attempt failed with o (502, 504, 400, 408, 413; 499 for
// the log alone when the client left).
func (x *Exchange) Fail(o *Outcome) {
	f := o.Failure
	if int(f) >= len(failMessages) {
		f = BadGateway
	}
	x.answer(f.Status(), failMessages[f], f.Termination())
	switch f {
	case ClientFailed, ClientTimeout, BodyTooLarge:
		x.Reply.Close = true // the rest of the body is still on the connection
	}
}

// AcquireFailed answers a request the pool could not place: 503 (with Retry-After when the
// backlog queue was full or timed out).
func (x *Exchange) AcquireFailed(err error) {
	switch {
	case errors.Is(err, upstream.ErrQueueFull):
		x.answer(503, msgQueueFull, accesslog.TermQueueFull)
		x.Reply.RetryAfter = one
	case errors.Is(err, upstream.ErrQueueTimeout):
		x.answer(503, msgQueueTimeout, accesslog.TermQueueTimeout)
		x.Reply.RetryAfter = one
	case errors.Is(err, upstream.ErrNoBackend):
		x.answer(503, msgNoBackend, accesslog.TermServerConnect)
	default:
		x.answer(503, []byte("ballast: "+err.Error()+"\n"), accesslog.TermServerConnect)
	}
}

var (
	msgQueueFull    = []byte("ballast: backlog queue full\n")
	msgQueueTimeout = []byte("ballast: timed out in the backlog queue\n")
	msgNoBackend    = []byte("ballast: no backend available\n")
	one             = []byte("1")
	allowedMethods  = []byte("GET, HEAD, POST, PUT, DELETE, OPTIONS, PATCH, TRACE")
)

// RefuseMethod answers a CONNECT, which no route tunnels: 405 with Allow.
func (x *Exchange) RefuseMethod() {
	x.answer(405, refusals[405], accesslog.TermRefused)
	x.Reply.Allow = allowedMethods
}

// answer sets Reply to a plain-text answer, or the table's error page for the status.
func (x *Exchange) answer(status int, body []byte, term string) {
	x.Reply = Reply{Status: status, Body: body, ContentType: textPlain, Term: term}
	if x.t == nil || x.t.pol == nil || x.t.pol.pages == nil {
		return
	}
	if p := x.t.pol.pages[status]; p != nil {
		x.Reply.Body, x.Reply.ContentType = p.Body, p.ContentType
	}
}
