package httpproxy

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/valyala/fasthttp"

	"ballast/accesslog"
	"ballast/config"
)

// Traffic policy on the request path. A table whose listeners, routes and logging ask for
// nothing has a nil policy, and the request path checks that one pointer (table.pol) and
// nothing else. Otherwise the policy is compiled once per table (templates parsed, prefixes
// and regular expressions compiled, limiters built) and is immutable; per-request scratch
// lives in the pooled exchange (reqState), so a request allocates nothing for the policy
// beyond what a rewrite or compression must.

// tablePolicy is the compiled policy of one table.
type tablePolicy struct {
	trusted   []netip.Prefix             // trusted_proxies
	listeners map[string]*listenerPolicy // listeners that have a policy, by name
	pages     map[int]*errorPage         // error_pages by status
}

// listenerPolicy is the compiled policy of one listener.
type listenerPolicy struct {
	requestID         bool
	acl               *acl
	maxConnsPerClient int
}

// routePolicy is the compiled policy of one route; nil when the route has none.
type routePolicy struct {
	reqHeaders  *headerOps
	respHeaders *headerOps
	rewrite     *rewrite
	redirect    *redirect
	acl         *acl
	maxBody     int64
	limiter     *limiter
	compress    *compression
}

// reqState is one request's policy scratch, kept in its exchange. The byte slices keep their
// capacity across requests.
type reqState struct {
	used    bool // the policy ran: reset has something to clear
	lp      *listenerPolicy
	rp      *routePolicy
	client  netip.Addr // the client: the peer, or what a trusted proxy says it forwarded
	trusted bool       // the peer is one of trusted_proxies
	start   time.Time  // when the request arrived; set only with the access log on
	retries int
	id      []byte // X-Request-Id sent to the backend
	trace   []byte // trace-id of a valid traceparent
	uri     []byte // the request URI as received, for the access log
	host    []byte // the Host as received, for ${host}
	tmp     []byte // template expansion
	limit   bodyLimit
	zenc    uint8 // encoding chosen for a streamed response
	zr      compressReader
	ztmp    []byte // a compressed buffered body
}

func (st *reqState) reset() {
	if !st.used {
		st.retries = 0 // the only field a request without policy touches
		return
	}
	*st = reqState{id: st.id[:0], trace: st.trace[:0], uri: st.uri[:0], host: st.host[:0], tmp: st.tmp[:0], ztmp: st.ztmp[:0]}
}

// compilePolicy builds t's policy from cfg; it leaves t.pol nil when nothing asks for one.
func compilePolicy(cfg *config.Config, t *table, prev *table) error {
	trusted, err := config.ParsePrefixes(cfg.TrustedProxies)
	if err != nil {
		return err
	}
	tp := &tablePolicy{trusted: trusted, listeners: map[string]*listenerPolicy{}}
	if tp.pages, err = loadErrorPages(cfg.ErrorPages); err != nil {
		return err
	}
	used := len(trusted) > 0 || t.access || tp.pages != nil
	for i := range cfg.Pools {
		used = used || cfg.Pools[i].Sticky != nil
	}
	for i := range cfg.Listeners {
		l := &cfg.Listeners[i]
		if l.ListenerPolicy.Empty() {
			continue
		}
		a, err := compileACL(l.Allow, l.Deny)
		if err != nil {
			return fmt.Errorf("httpproxy: listener %s: %w", l.Name, err)
		}
		tp.listeners[l.Name] = &listenerPolicy{requestID: l.RequestID, acl: a, maxConnsPerClient: l.MaxConnsPerClient}
		used = true
	}
	for i := range cfg.Routes {
		if cfg.Routes[i].RoutePolicy.Empty() {
			continue
		}
		rp, err := compileRoute(&cfg.Routes[i], prev, t.routes[i])
		if err != nil {
			return fmt.Errorf("httpproxy: route %d: %w", i, err)
		}
		t.routes[i].pol = rp
		t.routes[i].ps = overridePool(t.routes[i].ps, &cfg.Routes[i])
		used = true
	}
	if used {
		t.pol = tp
	}
	return nil
}

// compileRoute compiles the policy of one route.
func compileRoute(r *config.Route, prev *table, rt route) (*routePolicy, error) {
	rp := &routePolicy{}
	var err error
	if rp.reqHeaders, err = compileHeaders(r.RequestHeaders); err != nil {
		return nil, err
	}
	if rp.respHeaders, err = compileHeaders(r.ResponseHeaders); err != nil {
		return nil, err
	}
	if rp.rewrite, err = compileRewrite(r.Rewrite); err != nil {
		return nil, err
	}
	rp.redirect = compileRedirect(r.Redirect)
	if rp.acl, err = compileACL(r.Allow, r.Deny); err != nil {
		return nil, err
	}
	rp.maxBody = int64(r.MaxBodyBytes)
	if rl := r.RateLimit; rl != nil {
		rp.limiter = reuseLimiter(prev, rt, rl)
	}
	rp.compress = compileCompress(r.Compress)
	return rp, nil
}

// trusts reports whether a is one of the trusted proxies.
func (tp *tablePolicy) trusts(a netip.Addr) bool {
	for _, p := range tp.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// forwardedClient finds the client in X-Forwarded-For as sent by a trusted proxy: the
// rightmost address that is not itself a trusted proxy (the leftmost when all are). An
// unparsable element ends the walk: what lies left of it cannot be believed.
func (tp *tablePolicy) forwardedClient(h *fasthttp.RequestHeader, peer netip.Addr) netip.Addr {
	client := peer
	vals := h.PeekAll("X-Forwarded-For")
	for i := len(vals) - 1; i >= 0; i-- {
		list := vals[i]
		for len(list) > 0 {
			j := len(list) - 1
			for j >= 0 && list[j] != ',' {
				j--
			}
			tok := trimSpace(list[j+1:])
			list = list[:max(j, 0)]
			if len(tok) == 0 {
				continue
			}
			a, err := netip.ParseAddr(b2s(tok))
			if err != nil {
				return client
			}
			client = a.Unmap()
			if !tp.trusts(client) {
				return client
			}
		}
	}
	return client
}

// listenerPolicy returns the policy of this listener under t, nil when it has none.
func (ls *listenerState) listenerPolicy(t *table) *listenerPolicy {
	if c := ls.cached.Load(); c != nil && c.t == t {
		return c.pol
	}
	ls.expose(t) // fills the cache
	return t.pol.listeners[ls.name]
}

// applyPolicy runs the request side of the policy before the request is forwarded. It
// returns false when it answered the request itself. sc is updated when forwarding headers a
// client may not set are dropped.
func (ls *listenerState) applyPolicy(ctx *fasthttp.RequestCtx, t *table, r *route, x *exchange, sc *headerScan) bool {
	if !ls.admit(ctx, t, r, x) {
		return false
	}
	st := &x.pol
	h := &ctx.Request.Header
	if len(t.pol.trusted) > 0 && !st.trusted {
		// Forwarding headers from a client that is not a trusted proxy are its own claims:
		// the backend gets only what Ballast saw.
		if sc.xff > 0 {
			h.Del("X-Forwarded-For")
			sc.xff = 0
		}
		if sc.fwd > 0 {
			h.Del("Forwarded")
			sc.fwd = 0
		}
	}
	if lp := st.lp; lp != nil && lp.requestID {
		st.requestID(h)
	}
	rp := st.rp
	if rp == nil {
		return true
	}
	if rp.rewrite != nil {
		st.applyRewrite(&ctx.Request, rp.rewrite)
	}
	if rp.reqHeaders != nil {
		st.host = append(st.host[:0], h.Host()...)
		env := tmplEnv{st: st, tls: ls.tls, host: st.host}
		rp.reqHeaders.apply(h, &env, &st.tmp)
	}
	return true
}

// admit decides whether the request may go on: it resolves the client, then applies access
// control, limits and redirects, answering the request itself (and returning false) when
// one of them says so.
func (ls *listenerState) admit(ctx *fasthttp.RequestCtx, t *table, r *route, x *exchange) bool {
	st := &x.pol
	tp := t.pol
	h := &ctx.Request.Header
	st.used = true
	st.lp, st.rp = ls.listenerPolicy(t), r.pol
	peer := clientAddr(ctx.RemoteAddr())
	st.client = peer
	if len(tp.trusted) > 0 {
		if st.trusted = tp.trusts(peer); st.trusted {
			st.client = tp.forwardedClient(h, peer)
		}
	}
	if t.access {
		st.start = time.Now()
		st.uri = append(st.uri[:0], h.RequestURI()...)
	}
	if lp := st.lp; lp != nil && lp.acl != nil && !lp.acl.permits(st.client) {
		ls.refuse(ctx, t, x, fasthttp.StatusForbidden, "ballast: forbidden\n")
		return false
	}
	rp := st.rp
	if rp == nil {
		return true
	}
	if rp.acl != nil && !rp.acl.permits(st.client) {
		ls.refuse(ctx, t, x, fasthttp.StatusForbidden, "ballast: forbidden\n")
		return false
	}
	if rp.limiter != nil && !ls.rateLimit(ctx, t, x, rp.limiter) {
		return false
	}
	if rp.maxBody > 0 && !ls.limitBody(ctx, t, x, rp.maxBody) {
		return false
	}
	if rp.redirect != nil {
		st.tmp = rp.redirect.answer(ctx, rp.rewrite, ls.tls, st.tmp)
		ls.answered(ctx, t, x)
		return false
	}
	return true
}

// admitUpgrade applies the policy that decides whether an Upgrade request (WebSocket) may be
// tunnelled at all; it returns false when it answered instead.
func (ls *listenerState) admitUpgrade(ctx *fasthttp.RequestCtx, t *table, r *route) bool {
	x := getExchange()
	defer x.put()
	return ls.admit(ctx, t, r, x)
}

// refuse answers with a status Ballast produces (403, 413, 429) and its error page.
func (ls *listenerState) refuse(ctx *fasthttp.RequestCtx, t *table, x *exchange, status int, msg string) {
	ctx.Error(msg, status)
	if ctx.Request.Header.ContentLength() != 0 {
		ctx.SetConnectionClose() // the body was not read
	}
	ls.errorPage(ctx, t)
	ls.answered(ctx, t, x)
}

// answered finishes a request the policy answered itself (redirect, 403, 413, 429).
func (ls *listenerState) answered(ctx *fasthttp.RequestCtx, t *table, x *exchange) {
	if t.access {
		ls.logAccess(ctx, x, nil, 0)
	}
}

// respondPolicy runs the response side of the policy on a response about to be relayed.
func (ls *listenerState) respondPolicy(ctx *fasthttp.RequestCtx, x *exchange, a *attempt) {
	st := &x.pol
	out := &ctx.Response.Header
	if len(st.id) > 0 {
		out.SetCanonical(keyRequestID, st.id)
	}
	if a.ps.sticky != nil {
		a.ps.sticky.setCookie(ctx, a.b, &st.tmp)
	}
	rp := st.rp
	if rp == nil {
		return
	}
	if rp.respHeaders != nil {
		env := tmplEnv{st: st, tls: ls.tls, host: ctx.Request.Header.Host(), backend: a.b.ID}
		rp.respHeaders.apply(out, &env, &st.tmp)
	}
	if rp.compress != nil {
		if enc := rp.compress.choose(ctx); enc != encNone {
			st.startCompression(ctx, enc, a.br != nil)
		}
	}
}

// logAccess writes one access-log line; a is the attempt that answered, nil when Ballast
// answered without a backend.
func (ls *listenerState) logAccess(ctx *fasthttp.RequestCtx, x *exchange, a *attempt, d time.Duration) {
	al := ls.proxy.accessLog()
	if al == nil {
		return
	}
	h := &ctx.Request.Header
	st := &x.pol
	e := accesslog.Entry{
		Listener:  ls.name,
		Client:    st.client,
		Method:    h.Method(),
		URI:       st.uri,
		Proto:     h.Protocol(),
		Host:      h.Host(),
		Status:    ctx.Response.StatusCode(),
		BytesIn:   requestBytes(ctx, x),
		Duration:  d,
		Retries:   st.retries,
		RequestID: st.id,
		TraceID:   st.trace,
		Referer:   h.Referer(),
		UserAgent: h.UserAgent(),
	}
	if !st.start.IsZero() {
		e.Duration = time.Since(st.start)
	}
	if !e.Client.IsValid() {
		e.Client = clientAddr(ctx.RemoteAddr())
	}
	if len(e.URI) == 0 {
		e.URI = h.RequestURI()
	}
	if x.relay.ctx != nil {
		e.BytesOut = x.relay.n
	} else {
		e.BytesOut = int64(len(ctx.Response.Body()))
	}
	if a != nil {
		e.Pool, e.Upstream = a.ps.name, a.ttfb
		if a.b != nil {
			e.Backend = a.b.ID
		}
	}
	al.Write(&e)
}

// reuseLimiter keeps the buckets of the same rate limit on the same route across a reload,
// so that a reload does not hand every client a fresh burst.
func reuseLimiter(prev *table, rt route, rl *config.RateLimit) *limiter {
	if prev != nil {
		for _, pr := range prev.routes {
			if pr.pol != nil && pr.pol.limiter != nil && pr.pol.limiter.conf == *rl &&
				pr.listener == rt.listener && string(pr.host) == string(rt.host) && string(pr.prefix) == string(rt.prefix) {
				return pr.pol.limiter
			}
		}
	}
	return newLimiter(rl)
}
