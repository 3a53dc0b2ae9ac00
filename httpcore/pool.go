package httpcore

import (
	"math/rand/v2"
	"net/netip"
	"net/textproto"
	"sync/atomic"
	"time"

	"ballast/balance"
	"ballast/config"
	"ballast/upstream"
)

// Pool is what the request path needs to know about one pool, prepared once per table (and
// per route that overrides its timeouts or retries). Its exported fields are read-only.
type Pool struct {
	Name     string
	Upstream *upstream.Pool
	// Conf is the pool's configuration.
	Conf *config.Pool
	// Attempts is retries.attempts (tries in all, the first included), clamped.
	Attempts int
	// NonIdempotent is retries.non_idempotent.
	NonIdempotent bool
	// HedgeDelay is hedge.delay (0: off), MaxHedges hedge.max_hedges, clamped.
	HedgeDelay time.Duration
	MaxHedges  int
	// ResponseTimeout bounds the wait for response headers; ConnectTimeout the dial.
	ResponseTimeout time.Duration
	ConnectTimeout  time.Duration
	// Include5xx is outlier.include_5xx.
	Include5xx bool
	// MaxIdle and MaxRequests are keepalive.max_idle and keepalive.max_requests.
	MaxIdle, MaxRequests int

	needsKey   bool
	carp       bool
	hashSource string
	hashName   []byte // canonical header name, or cookie name
	budget     *retryBudget
	counters   *poolCounters
	sticky     *sticky
}

// poolCounters are what the HTTP side counts per pool, for the metrics. Like the retry budget
// they belong to the pool's name and survive reloads.
type poolCounters struct{ retries, hedges atomic.Uint64 }

func newPool(pc *config.Pool, pool *upstream.Pool, prev *Table) *Pool {
	p := &Pool{
		Name:            pc.Name,
		Upstream:        pool,
		Conf:            pc,
		hashSource:      pc.HashKey.Source,
		Attempts:        pc.Retries.Attempts,
		NonIdempotent:   pc.Retries.NonIdempotent,
		HedgeDelay:      pc.Hedge.Delay.Duration,
		MaxHedges:       pc.Hedge.MaxHedges,
		ResponseTimeout: config.Or(pc.Timeouts.Response.Duration, config.DefaultResponseTimeout),
		ConnectTimeout:  config.Or(pc.Timeouts.Connect.Duration, config.DefaultConnectTimeout),
		Include5xx:      pc.Outlier.Include5xx,
		MaxIdle:         pc.KeepAlive.MaxIdle,
		MaxRequests:     pc.KeepAlive.MaxRequests,
	}
	switch p.hashSource {
	case "header":
		p.hashName = []byte(textproto.CanonicalMIMEHeaderKey(pc.HashKey.Name))
	case "cookie":
		p.hashName = []byte(pc.HashKey.Name)
	}
	if p.Attempts <= 0 {
		p.Attempts = 1
	}
	p.Attempts = min(p.Attempts, config.MaxAttempts)
	if p.HedgeDelay > 0 && p.MaxHedges <= 0 {
		p.MaxHedges = config.DefaultMaxHedges
	}
	p.MaxHedges = min(p.MaxHedges, config.MaxHedges)
	if a, err := balance.Lookup(pc.Balancer); err == nil {
		p.needsKey = a.Caps.NeedsKey
		p.carp = a.Name == "carp"
	}
	// The retry budget and the counters survive a reload of the same pool, so a reload does
	// not refill the budget nor reset the metrics.
	if prev != nil {
		if old := prev.Pool(pc.Name); old != nil {
			p.budget, p.counters = old.budget, old.counters
		}
	}
	if p.budget == nil || p.budget.ratio != pc.Retries.Budget {
		// retries.budget as configured: config fills the default when the key is left out, so
		// a 0 here was written and means no retries or hedges at all.
		p.budget = newRetryBudget(pc.Retries.Budget)
	}
	if p.counters == nil {
		p.counters = new(poolCounters)
	}
	p.sticky = newSticky(pc, pool)
	pool.Attach(statusSlot, func(*upstream.Backend) any { return new(statusCounts) })
	return p
}

// overridePool returns p with the route's timeouts and retries in place of the pool's; the
// copy shares the pool, its backends, its retry budget and its counters.
func overridePool(p *Pool, r *config.Route) *Pool {
	if p == nil || r.Timeouts == nil && r.Retries == nil {
		return p
	}
	c := *p
	if rt := r.Timeouts; rt != nil {
		c.ResponseTimeout = config.Or(rt.Response.Duration, config.DefaultResponseTimeout)
	}
	if rr := r.Retries; rr != nil {
		c.Attempts = min(max(rr.Attempts, 1), config.MaxAttempts)
		c.NonIdempotent = rr.NonIdempotent
	}
	return &c
}

// Key is the request's hash key for the pool's balancer (0 when it hashes nothing): the
// client's address, a header, a cookie (a random key when the request has none, so such
// requests spread), or the target as forwarded.
func (p *Pool) Key(req Request, client netip.Addr) uint64 {
	if !p.needsKey {
		return 0
	}
	switch p.hashSource {
	case "source_ip":
		return balance.HashSourceIP(client)
	case "header":
		if v := req.Peek(p.hashName); len(v) > 0 {
			return balance.HashHeader(v)
		}
		return rand.Uint64()
	case "cookie":
		if v := req.Cookie(p.hashName); len(v) > 0 {
			return balance.HashCookie(v)
		}
		return rand.Uint64()
	}
	if p.carp {
		return balance.CARPURLHash(req.Target())
	}
	return balance.HashURI(req.Target(), false)
}

// Acquire picks the request's backend: on the first try the one its sticky cookie names,
// when it can take the request, else the pool's balancer, excluding tried.
func (p *Pool) Acquire(req Request, key uint64, tried balance.Tried) (*upstream.Backend, error) {
	if p.sticky != nil && tried.Len() == 0 {
		if b := p.sticky.pinned(req, p.Upstream); b != nil {
			return b, nil
		}
	}
	return p.Upstream.Acquire(key, tried)
}

// AcquireAsync is Acquire for an engine that must not block: when the pool's backlog queue
// makes the request wait, it returns queued true and g hears the grant on t
// (upstream.Pool.AcquireAsync).
func (p *Pool) AcquireAsync(req Request, key uint64, tried balance.Tried, t *upstream.Ticket, g upstream.Granted) (b *upstream.Backend, queued bool, err error) {
	if p.sticky != nil && tried.Len() == 0 {
		if b := p.sticky.pinned(req, p.Upstream); b != nil {
			return b, false, nil
		}
	}
	return p.Upstream.AcquireAsync(key, tried, t, g)
}

// Release ends an attempt's hold on b: its response status class is counted (0: no
// response) and the slot goes back to the pool with the latency and whether it counts as a
// failure for outlier detection.
func (p *Pool) Release(b *upstream.Backend, latency time.Duration, status int, failure bool) {
	CountStatus(b, status)
	p.Upstream.Release(b, latency, failure)
}

// CountRequest counts one client request in the pool's retry budget.
func (p *Pool) CountRequest() { p.budget.request(coarseUnix()) }

// SpendRetry takes one retry from the pool's budget; false when it is spent (or
// retries.budget is 0). The retry is counted when another backend takes it (Exchange.Retried).
func (p *Pool) SpendRetry() bool { return p.budget.spend(coarseUnix()) }

// SpendHedge takes one hedge from the pool's retry budget and counts it; false when spent.
func (p *Pool) SpendHedge() bool {
	if !p.budget.spend(coarseUnix()) {
		return false
	}
	p.counters.hedges.Add(1)
	return true
}

// MarkTried adds b to the backends a request has used, so a retry or hedge avoids it.
func MarkTried(t *balance.Tried, b *upstream.Backend) {
	if i := b.Index(); i >= 0 {
		t.Add(i)
	}
}

// statusSlot is the core's attachment slot on backends: the responses by status class that
// every HTTP engine counts into.
var statusSlot = upstream.NewSlot()

type statusCounts [6]atomic.Uint64 // by status class; 0 = no valid response

// CountStatus counts one response of b by status class (1xx…5xx); anything else, including
// 0 for "no response", counts in class 0.
func CountStatus(b *upstream.Backend, code int) {
	c := code / 100
	if c < 1 || c > 5 {
		c = 0
	}
	if s, _ := b.Attachment(statusSlot).(*statusCounts); s != nil {
		s[c].Add(1)
	}
}
