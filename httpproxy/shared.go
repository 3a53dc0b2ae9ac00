package httpproxy

import (
	"context"
	"crypto/tls"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"time"

	"ballast/balance"
	"ballast/config"
	"ballast/tlsconf"
	"ballast/upstream"
)

// This file is what another HTTP data plane (package h2proxy, HTTP/2) shares with this one, so
// that both route alike and their limits, retry budgets and metrics add up: the route table,
// each pool's retry budget and retry/hedge counters, the per-backend status counters and the
// access-log line. It exports; it changes nothing of the HTTP/1 request path.

// Route is a matched route's pool as seen by another plane. Its methods are safe for
// concurrent use; the zero Route is no route.
type Route struct{ ps *poolState }

// Match returns the route of the current table for a request on listener with the given
// host (any case, optional port) and normalised path, the same rule as HTTP/1 requests.
func (p *Proxy) Match(listener string, host, path []byte) (Route, bool) {
	r := p.table.Load().match(listener, host, path)
	if r == nil {
		return Route{}, false
	}
	return Route{r.ps}, true
}

// ExposeBackend reports whether the named listener adds X-Ballast-Backend to responses.
func (p *Proxy) ExposeBackend(listener string) bool {
	l := p.table.Load().listeners[listener]
	return l != nil && l.ExposeBackend
}

// Pool is the pool name, as in metrics and logs.
func (r Route) Pool() string { return r.ps.name }

// Upstream is the pool requests are balanced over.
func (r Route) Upstream() *upstream.Pool { return r.ps.pool }

// Attempts is retries.attempts, clamped: tries in all, the first included.
func (r Route) Attempts() int { return r.ps.attempts }

// RetryNonIdempotent is retries.non_idempotent.
func (r Route) RetryNonIdempotent() bool { return r.ps.nonIdempotent }

// ResponseTimeout is timeouts.response (or its default).
func (r Route) ResponseTimeout() time.Duration { return r.ps.respTimeout }

// ConnectTimeout is timeouts.connect (or its default).
func (r Route) ConnectTimeout() time.Duration { return r.ps.connectTimeout }

// Include5xx is outlier.include_5xx: whether a 5xx response counts as a backend failure.
func (r Route) Include5xx() bool { return r.ps.include5xx }

// CountRequest counts one client request in the pool's retry budget.
func (r Route) CountRequest() { r.ps.budget.request(coarseUnix()) }

// SpendRetry takes one retry from the pool's budget and counts it; false when the budget is
// spent (or retries.budget is 0).
func (r Route) SpendRetry() bool {
	if !r.ps.budget.spend(coarseUnix()) {
		return false
	}
	r.ps.counters.retries.Add(1)
	return true
}

// HedgeDelay is hedge.delay (0 = off) and MaxHedges hedge.max_hedges, clamped.
func (r Route) HedgeDelay() time.Duration { return r.ps.hedgeDelay }

// MaxHedges is hedge.max_hedges, clamped.
func (r Route) MaxHedges() int { return r.ps.maxHedges }

// SpendHedge takes one hedge from the pool's retry budget and counts it; false when spent.
func (r Route) SpendHedge() bool {
	if !r.ps.budget.spend(coarseUnix()) {
		return false
	}
	r.ps.counters.hedges.Add(1)
	return true
}

// Key is the request's hash key for the pool's balancer (0 when it hashes nothing), by the
// same rules as HTTP/1 requests: source_ip, header, cookie or the request target.
func (r Route) Key(req *http.Request, client netip.Addr) uint64 {
	ps := r.ps
	if !ps.needsKey {
		return 0
	}
	switch ps.hashSource {
	case "source_ip":
		return balance.HashSourceIP(client)
	case "header":
		if v := req.Header.Get(ps.hashName); v != "" {
			return balance.HashHeader([]byte(v))
		}
		return rand.Uint64() // no key: spread like the HTTP/1 plane
	case "cookie":
		if c, err := req.Cookie(ps.hashName); err == nil && c.Value != "" {
			return balance.HashCookie([]byte(c.Value))
		}
		return rand.Uint64() // no key: spread like the HTTP/1 plane
	}
	uri := []byte(req.RequestURI)
	if ps.carp {
		return balance.CARPURLHash(uri)
	}
	return balance.HashURI(uri, false)
}

// CountStatus counts one response of b by status class for the metrics (0 = no response).
func CountStatus(b *upstream.Backend, code int) { countStatus(b, code) }

// MarkTried adds b to the backends a request has used, so a retry avoids it.
func MarkTried(t *balance.Tried, b *upstream.Backend) { markTried(t, b) }

// Idempotent reports whether a request with this method may be sent twice (RFC 9110 §9.2.2):
// the one rule for retries, hedges and fresh-connection replays on both HTTP planes.
func Idempotent(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodPut, http.MethodDelete, http.MethodTrace:
		return true
	}
	return false
}

// AccessEntry is one access-log line of another plane.
type AccessEntry struct {
	Listener, Client, Method, URI, Proto string
	Status                               int
	Pool, Backend                        string
	TTFB, Duration                       time.Duration
}

// LogAccess writes e with the HTTP/1 plane's access-log keys, plus proto.
func (p *Proxy) LogAccess(ctx context.Context, e AccessEntry) {
	p.logger.LogAttrs(ctx, slog.LevelInfo, "access",
		slog.String("listener", e.Listener),
		slog.String("client", e.Client),
		slog.String("method", e.Method),
		slog.String("uri", e.URI),
		slog.Int("status", e.Status),
		slog.String("pool", e.Pool),
		slog.String("backend", e.Backend),
		slog.Duration("ttfb", e.TTFB),
		slog.Duration("duration", e.Duration),
		slog.String("proto", e.Proto),
	)
}

// AccessLog reports whether logging.access is on in the current configuration.
func (p *Proxy) AccessLog() bool { return p.table.Load().access }

// tlsTerminated is a listener whose connections arrive with TLS already terminated (package
// server's TLS front, which negotiates ALPN): Serve serves them as they are, still as the TLS
// listener they came in on.
type tlsTerminated interface{ TLSTerminated() }

// backendTLS is the client TLS configuration for HTTP/1.1 to backend b of a pool with tls
// (ALPN http/1.1), or nil when the pool has none. An error (a CA or client certificate file
// that cannot be read) makes every dial fail rather than fall back to cleartext; the HTTP/2
// plane's Swap reports it and refuses the configuration.
func backendTLS(pc *config.Pool, b *upstream.Backend) (*tls.Config, error) {
	if pc.TLS == nil {
		return nil, nil
	}
	return tlsconf.Backend(pc.TLS, b.Address, []string{tlsconf.ALPNHTTP1})
}

// handshake runs the client TLS handshake on a fresh backend connection within timeout.
// TLS connections are read and written through crypto/tls, without the raw-I/O fast path.
func handshake(c net.Conn, cfg *tls.Config, timeout time.Duration) (net.Conn, error) {
	tc := tls.Client(c, cfg)
	_ = c.SetDeadline(time.Now().Add(timeout))
	if err := tc.Handshake(); err != nil {
		_ = c.Close()
		return nil, err
	}
	_ = c.SetDeadline(time.Time{})
	return tc, nil
}
