package httpproxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"ballast/accesslog"
	"ballast/balance"
	"ballast/config"
	"ballast/sockio"
	"ballast/upstream"
)

// Proxy is the L7 request path: it routes each request to a pool, forwards it to a backend
// of that pool and relays the answer. Build it with New, serve listeners with Serve, install
// reloaded configurations with Swap and stop it with Shutdown.
type Proxy struct {
	table  atomic.Pointer[table]
	logger *slog.Logger
	access accesslog.Switch // the access log; holds none when logging.access is off

	mu      sync.Mutex // guards servers, pollers and closed; never taken on the request path
	servers []*fasthttp.Server
	pollers []*sockio.Poller
	closed  bool

	stopping atomic.Bool // Shutdown began: parked connections are closed, not served again

	parkedSince  atomic.Int64 // parkings since the last memory release (idlepark.go)
	releasing    atomic.Bool  // a release is waiting or running
	releaseEarly atomic.Bool  // the next release follows releaseBurst/8 parkings, not releaseBurst
	nextRelease  atomic.Int64 // no release starts before this, Unix ns
	releases     atomic.Int64 // memory releases done

	tunnels sync.WaitGroup // upgraded connections being relayed
}

// table is one immutable configuration: routes resolved to pool states. Requests load it once
// and use it to the end, so a Swap never changes a request that already started.
type table struct {
	cfg       *config.Config
	routes    []route
	listeners map[string]*config.Listener
	access    bool
	needPath  bool // some route has a path prefix: requests must compute their path

	pol *tablePolicy // traffic policy; nil when no listener, route or log needs one (policy.go)
}

// route is a config.Route resolved to its pool.
type route struct {
	listener string
	host     []byte // lower case, no port; empty = any
	prefix   []byte
	ps       *poolState
	pol      *routePolicy // nil when the route has no policy (policy.go)
}

// poolState is what the request path needs to know about one pool, prepared once per table.
type poolState struct {
	name           string
	pool           *upstream.Pool
	needsKey       bool
	carp           bool
	hashSource     string
	hashName       string
	attempts       int
	nonIdempotent  bool
	hedgeDelay     time.Duration
	maxHedges      int
	respTimeout    time.Duration
	connectTimeout time.Duration
	include5xx     bool
	maxIdle        int // keepalive.max_idle: idle connections kept per backend
	maxRequests    int // keepalive.max_requests: requests per backend connection, 0 = unlimited
	budget         *retryBudget
	counters       *poolCounters

	sticky *sticky // cookie insertion; nil when off (sticky.go)
}

// poolCounters are what the HTTP plane counts per pool, for the metrics. Like the retry
// budget they belong to the pool's name and survive reloads.
type poolCounters struct{ retries, hedges atomic.Uint64 }

// backendSlot is the HTTP plane's attachment slot on upstream backends.
var backendSlot = upstream.NewSlot()

// backendState is what the HTTP plane keeps per backend. It is attached to the
// upstream.Backend (Pool.Attach), so its connections and counters survive reloads.
type backendState struct {
	hc       *fasthttp.HostClient
	statuses [6]atomic.Uint64 // by status class; 0 = no valid response
}

// stateOf is b's HTTP state; every backend of a pool in a table has one (newPoolState).
func stateOf(b *upstream.Backend) *backendState {
	s, _ := b.Attachment(backendSlot).(*backendState)
	return s
}

// countStatus counts one response by its status class (1xx…5xx); anything else, including
// 0 for "no response", counts in class 0.
func countStatus(b *upstream.Backend, code int) {
	c := code / 100
	if c < 1 || c > 5 {
		c = 0
	}
	if s := stateOf(b); s != nil {
		s.statuses[c].Add(1)
	}
}

// Responses returns b's responses by status class: index 1..5 are the classes, 0 the requests
// that got no valid response.
func (p *Proxy) Responses(b *upstream.Backend) [6]uint64 {
	var out [6]uint64
	if s := stateOf(b); s != nil {
		for i := range out {
			out[i] = s.statuses[i].Load()
		}
	}
	return out
}

// PoolCounters returns how many requests of the named pool were retried on another backend
// and how many hedged copies were sent, since the pool first appeared.
func (p *Proxy) PoolCounters(pool string) (retries, hedges uint64) {
	for _, r := range p.table.Load().routes {
		if r.ps != nil && r.ps.name == pool { // a redirect route has no pool
			return r.ps.counters.retries.Load(), r.ps.counters.hedges.Load()
		}
	}
	return 0, 0
}

// New builds a Proxy for cfg. pools maps every pool name the routes use to its pool; New
// attaches a keep-alive client to each backend that has none before any request runs.
// logger receives the error log, and the access log when cfg.Logging.Access is on; nil
// discards both.
func New(cfg *config.Config, pools map[string]*upstream.Pool, logger *slog.Logger) (*Proxy, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	p := &Proxy{logger: logger}
	t, err := buildTable(cfg, pools, nil)
	if err != nil {
		return nil, err
	}
	if err := p.access.Set(cfg.Logging); err != nil {
		return nil, err
	}
	p.table.Store(t)
	startCoarseClock()
	return p, nil
}

// Swap installs a reloaded configuration atomically. Requests already running finish with the
// routes and pools they started with; listener options (timeouts, TLS, header limits) are
// fixed when Serve starts and do not change, but expose_backend and routes do. Backends that
// keep their identity keep their attachment and so their idle connections and counters.
func (p *Proxy) Swap(cfg *config.Config, pools map[string]*upstream.Pool) error {
	t, err := buildTable(cfg, pools, p.table.Load())
	if err != nil {
		return err
	}
	if err := p.access.Set(cfg.Logging); err != nil {
		return err
	}
	p.table.Store(t)
	return nil
}

func buildTable(cfg *config.Config, pools map[string]*upstream.Pool, prev *table) (*table, error) {
	if cfg == nil {
		return nil, errors.New("httpproxy: nil config")
	}
	t := &table{cfg: cfg, listeners: make(map[string]*config.Listener), access: cfg.Logging.Access}
	for i := range cfg.Listeners {
		t.listeners[cfg.Listeners[i].Name] = &cfg.Listeners[i]
	}
	states := make(map[string]*poolState)
	for i := range cfg.Pools {
		pc := &cfg.Pools[i]
		pool := pools[pc.Name]
		if pool == nil {
			continue
		}
		ps, err := newPoolState(pc, pool, prev)
		if err != nil {
			return nil, err
		}
		states[pc.Name] = ps
	}
	for _, r := range cfg.Routes {
		ps := states[r.Pool]
		if ps == nil && r.Redirect == nil { // a redirect route has no pool (policy.go)
			return nil, fmt.Errorf("httpproxy: route %s%s uses pool %q, which is not configured or has no pool", r.Host, r.PathPrefix, r.Pool)
		}
		if r.Listener != "" && t.listeners[r.Listener] == nil {
			return nil, fmt.Errorf("httpproxy: route %s%s names unknown listener %q", r.Host, r.PathPrefix, r.Listener)
		}
		host, _, _ := splitHostPort(strings.ToLower(r.Host))
		t.routes = append(t.routes, route{listener: r.Listener, host: []byte(host), prefix: []byte(r.PathPrefix), ps: ps})
		t.needPath = t.needPath || r.PathPrefix != ""
	}
	if err := compilePolicy(cfg, t, prev); err != nil { // policy.go
		return nil, err
	}
	return t, nil
}

func newPoolState(pc *config.Pool, pool *upstream.Pool, prev *table) (*poolState, error) {
	ps := &poolState{
		name:           pc.Name,
		pool:           pool,
		hashSource:     pc.HashKey.Source,
		hashName:       pc.HashKey.Name,
		attempts:       pc.Retries.Attempts,
		nonIdempotent:  pc.Retries.NonIdempotent,
		hedgeDelay:     pc.Hedge.Delay.Duration,
		maxHedges:      pc.Hedge.MaxHedges,
		respTimeout:    config.Or(pc.Timeouts.Response.Duration, config.DefaultResponseTimeout),
		connectTimeout: config.Or(pc.Timeouts.Connect.Duration, config.DefaultConnectTimeout),
		include5xx:     pc.Outlier.Include5xx,
		maxIdle:        pc.KeepAlive.MaxIdle,
		maxRequests:    pc.KeepAlive.MaxRequests,
	}
	if ps.attempts <= 0 {
		ps.attempts = 1
	}
	ps.attempts = min(ps.attempts, config.MaxAttempts)
	if ps.hedgeDelay > 0 && ps.maxHedges <= 0 {
		ps.maxHedges = config.DefaultMaxHedges
	}
	ps.maxHedges = min(ps.maxHedges, config.MaxHedges)
	if a, err := balance.Lookup(pc.Balancer); err == nil {
		ps.needsKey = a.Caps.NeedsKey
		ps.carp = a.Name == "carp"
	}
	// The retry budget and the counters survive a reload of the same pool, so a reload does
	// not refill the budget nor reset the metrics.
	if prev != nil {
		for _, r := range prev.routes {
			if r.ps != nil && r.ps.name == pc.Name { // a redirect route has no pool
				ps.budget, ps.counters = r.ps.budget, r.ps.counters
				break
			}
		}
	}
	if ps.budget == nil || ps.budget.ratio != budgetRatio(pc) {
		ps.budget = newRetryBudget(budgetRatio(pc))
	}
	if ps.counters == nil {
		ps.counters = new(poolCounters)
	}
	ps.sticky = newSticky(pc, pool) // sticky.go
	pcopy := *pc
	pool.Attach(backendSlot, func(b *upstream.Backend) any { return &backendState{hc: newHostClient(&pcopy, b)} })
	return ps, nil
}

// budgetRatio is retries.budget as configured: config fills the default when the key is left
// out, so a 0 here was written and means no retries or hedges at all.
func budgetRatio(pc *config.Pool) float64 { return pc.Retries.Budget }

// match returns the first route for listener, host and path, or nil.
func (t *table) match(listener string, host, path []byte) *route {
	for i := range t.routes {
		r := &t.routes[i]
		if r.listener != "" && r.listener != listener {
			continue
		}
		if len(r.host) > 0 && !hostEqual(host, r.host) {
			continue
		}
		if !bytes.HasPrefix(path, r.prefix) {
			continue
		}
		return r
	}
	return nil
}

// hostEqual compares a Host header (any case, optional port) with a lower-case route host.
func hostEqual(hdr, want []byte) bool {
	if i := bytes.LastIndexByte(hdr, ':'); i >= 0 && bytes.IndexByte(hdr[i:], ']') < 0 {
		hdr = hdr[:i]
	}
	if len(hdr) != len(want) {
		return false
	}
	for i := range hdr {
		c := hdr[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != want[i] {
			return false
		}
	}
	return true
}

func splitHostPort(hp string) (host, port string, err error) {
	if h, p, err := net.SplitHostPort(hp); err == nil {
		return h, p, nil
	}
	return hp, "", nil
}

// listenerState is what one served listener's handler needs besides the table.
type listenerState struct {
	name    string
	idle    time.Duration
	tls     bool
	proxy   *Proxy
	server  *fasthttp.Server
	maxHdrs int
	// maxRequests is max_keepalive_requests; poller holds the listener's idle keep-alive
	// connections (idlepark.go), nil for TLS listeners and off Linux.
	maxRequests int
	poller      *sockio.Poller
	wakeq       chan net.Conn                 // woken connections for idle wake workers (idlepark.go)
	cached      atomic.Pointer[listenerTable] // this listener's view of the current table
}

// listenerTable caches per-table facts about one listener, so requests skip a map lookup.
type listenerTable struct {
	t      *table
	expose bool
	pol    *listenerPolicy // policy.go
}

// expose reports whether this listener adds X-Ballast-Backend under table t.
func (ls *listenerState) expose(t *table) bool {
	if c := ls.cached.Load(); c != nil && c.t == t {
		return c.expose
	}
	c := &listenerTable{t: t}
	if l := t.listeners[ls.name]; l != nil {
		c.expose = l.ExposeBackend
	}
	if t.pol != nil {
		c.pol = t.pol.listeners[ls.name]
	}
	ls.cached.Store(c)
	return c.expose
}

// Serve accepts connections on ln until Shutdown, serving them as the configured listener
// named listener (its timeouts, header limit, TLS and routes). It returns nil after Shutdown.
func (p *Proxy) Serve(listener string, ln net.Listener) error {
	lc := p.table.Load().listeners[listener]
	if lc == nil {
		_ = ln.Close()
		return fmt.Errorf("httpproxy: no configured listener %q", listener)
	}
	var err error
	ls := &listenerState{name: lc.Name, proxy: p, tls: lc.TLS != nil, wakeq: make(chan net.Conn)}
	ls.idle = config.Or(lc.IdleTimeout.Duration, config.DefaultIdleTimeout)
	ls.maxHdrs = lc.MaxHeaderBytes
	if ls.maxHdrs <= 0 {
		ls.maxHdrs = config.DefaultMaxHeaderBytes
	}
	readHdr := config.Or(lc.ReadHeaderTimeout.Duration, config.DefaultReadHeaderTimeout)
	srv := &fasthttp.Server{
		Handler:                      ls.handle,
		ErrorHandler:                 p.errorHandler,
		HeaderReceived:               ls.headerReceived,
		Name:                         "ballast",
		NoDefaultServerHeader:        true,
		NoDefaultDate:                true,
		NoDefaultContentType:         true,
		ReadBufferSize:               ls.maxHdrs,
		WriteBufferSize:              16 << 10,
		ReadTimeout:                  readHdr,
		IdleTimeout:                  ls.idle,
		MaxRequestsPerConn:           lc.MaxKeepAliveRequests,
		MaxRequestBodySize:           math.MaxInt32,
		StreamRequestBody:            true,
		DisablePreParseMultipartForm: true,
		CloseOnShutdown:              true,
		LazyRequestTime:              true, // the proxy never asks for ctx.Time: save a clock read
		Logger:                       slogAdapter{p.logger},
	}
	ls.server = srv
	ls.maxRequests = lc.MaxKeepAliveRequests
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		_ = ln.Close()
		return errors.New("httpproxy: proxy is shut down")
	}
	p.servers = append(p.servers, srv)
	if lc.TLS == nil { // a TLS connection keeps its goroutine: crypto/tls buffers records above the socket
		if pl, err := sockio.NewPoller(ls.wake); err == nil {
			ls.poller = pl
			p.pollers = append(p.pollers, pl)
		}
	}
	p.mu.Unlock()
	_, tlsDone := ln.(tlsTerminated)   // a TLS front (server) already terminated TLS
	ln = sockio.Listener{Listener: ln} // client sockets read and written with raw calls: see sockio.IO
	// Policy: max_conns_per_client (ratelimit.go).
	ln = ls.limitConns(ln)
	if ls.poller != nil {
		ln = parkListener{Listener: ln, ls: ls} // idle keep-alive connections without a goroutine (idlepark.go)
		srv.Handler = ls.handleAndPark
		// A goroutine that served a connection which then parked waits in fasthttp's worker
		// pool, with its stack; end it as soon as the connection would have parked, so that
		// idle connections hold no stacks there (fasthttp's default keeps it 10 s).
		srv.MaxIdleWorkerDuration = parkAfter
	}
	if lc.TLS != nil && !tlsDone {
		err = srv.ServeTLS(ln, lc.TLS.Cert, lc.TLS.Key)
	} else {
		err = srv.Serve(ln)
	}
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if closed {
		return nil
	}
	return err
}

// Shutdown stops accepting connections, closes idle ones and waits until in-flight requests
// and upgraded tunnels finish or ctx ends. Serve calls return nil.
func (p *Proxy) Shutdown(ctx context.Context) error {
	p.mu.Lock()
	first := !p.closed
	p.closed = true
	servers, pollers := p.servers, p.pollers
	p.mu.Unlock()
	if first {
		defer stopCoarseClock()
	}
	// Parked connections are idle: close them, and park no more, before the servers wait for
	// the active ones.
	p.stopping.Store(true)
	for _, pl := range pollers {
		pl.Close()
	}
	var errs []error
	for _, s := range servers {
		if err := s.ShutdownWithContext(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	done := make(chan struct{})
	go func() { p.tunnels.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		errs = append(errs, ctx.Err())
	}
	return errors.Join(errs...)
}

// slogAdapter sends fasthttp's log lines to the error log at debug level: they are about
// single connections (clients that vanished, bad requests) and already answered.
type slogAdapter struct{ l *slog.Logger }

func (a slogAdapter) Printf(format string, args ...any) {
	if a.l.Enabled(context.Background(), slog.LevelDebug) {
		a.l.Debug(fmt.Sprintf(format, args...), "component", "httpproxy")
	}
}
