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

	"ballast/balance"
	"ballast/config"
	"ballast/upstream"
)

// Proxy is the L7 request path: it routes each request to a pool, forwards it to a backend
// of that pool and relays the answer. Build it with New, serve listeners with Serve, install
// reloaded configurations with Swap and stop it with Shutdown.
type Proxy struct {
	table  atomic.Pointer[table]
	logger *slog.Logger
	access atomic.Pointer[AccessLog] // nil when logging.access is off

	mu      sync.Mutex // guards servers and closed; never taken on the request path
	servers []*fasthttp.Server
	closed  bool

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

	sticky *sticky // cookie insertion; nil when off (sticky.go)
}

// New builds a Proxy for cfg. pools maps every pool name the routes use to its pool; New gives
// each backend that has none a keep-alive client (Backend.Transport) before any request runs.
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
	if err := p.openAccessLog(cfg.Logging); err != nil { // accesslog.go
		return nil, err
	}
	p.table.Store(t)
	return p, nil
}

// Swap installs a reloaded configuration atomically. Requests already running finish with the
// routes and pools they started with; listener options (timeouts, TLS, header limits) are
// fixed when Serve starts and do not change, but expose_backend and routes do. Backends that
// keep their identity keep their Transport and so their idle connections.
func (p *Proxy) Swap(cfg *config.Config, pools map[string]*upstream.Pool) error {
	t, err := buildTable(cfg, pools, p.table.Load())
	if err != nil {
		return err
	}
	if err := p.openAccessLog(cfg.Logging); err != nil { // accesslog.go
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
		respTimeout:    durationOr(pc.Timeouts.Response.Duration, defaultResponseTimeout),
		connectTimeout: durationOr(pc.Timeouts.Connect.Duration, defaultConnectTimeout),
		include5xx:     pc.Outlier.Include5xx,
		maxIdle:        pc.KeepAlive.MaxIdle,
		maxRequests:    pc.KeepAlive.MaxRequests,
	}
	if ps.attempts <= 0 {
		ps.attempts = 1
	}
	if ps.attempts > 7 { // balance.Tried holds 7 backends
		ps.attempts = 7
	}
	if ps.hedgeDelay > 0 && ps.maxHedges <= 0 {
		ps.maxHedges = 1
	}
	if ps.maxHedges > 6 {
		ps.maxHedges = 6
	}
	if a, err := balance.Lookup(pc.Balancer); err == nil {
		ps.needsKey = a.Caps.NeedsKey
		ps.carp = a.Name == "carp"
	}
	// The retry budget survives a reload of the same pool, so a reload does not refill it.
	if prev != nil {
		for _, r := range prev.routes {
			if r.ps != nil && r.ps.name == pc.Name { // a redirect route has no pool
				ps.budget = r.ps.budget
				break
			}
		}
	}
	if ps.budget == nil || ps.budget.ratio != budgetRatio(pc) {
		ps.budget = newRetryBudget(budgetRatio(pc))
	}
	ps.sticky = newSticky(pc, pool) // sticky.go
	pcopy := *pc
	pool.SetBackendInit(func(b *upstream.Backend) { b.Transport = newHostClient(&pcopy, b) })
	return ps, nil
}

func budgetRatio(pc *config.Pool) float64 {
	if pc.Retries.Budget > 0 {
		return pc.Retries.Budget
	}
	return 0.2
}

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

// listenerFor finds the configured listener ln serves: the one whose address has ln's port
// and either ln's host or a wildcard host; failing that, the only listener configured.
func (t *table) listenerFor(ln net.Listener) (*config.Listener, error) {
	la, _ := ln.Addr().(*net.TCPAddr)
	var only *config.Listener
	for i := range t.cfg.Listeners {
		l := &t.cfg.Listeners[i]
		only = l
		if la == nil {
			continue
		}
		h, port, err := net.SplitHostPort(l.Address)
		if err != nil || port != fmt.Sprint(la.Port) {
			continue
		}
		if ip := net.ParseIP(h); h == "" || ip == nil || ip.IsUnspecified() || ip.Equal(la.IP) {
			return l, nil
		}
	}
	if len(t.cfg.Listeners) == 1 {
		return only, nil
	}
	return nil, fmt.Errorf("httpproxy: no configured listener matches %s", ln.Addr())
}

// listenerState is what one served listener's handler needs besides the table.
type listenerState struct {
	name    string
	idle    time.Duration
	tls     bool
	proxy   *Proxy
	server  *fasthttp.Server
	maxHdrs int
	cached  atomic.Pointer[listenerTable] // this listener's view of the current table
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

// Serve accepts connections on ln until Shutdown, serving them with the options of the
// configured listener whose address ln has (see listenerFor). It returns nil after Shutdown.
func (p *Proxy) Serve(ln net.Listener) error {
	t := p.table.Load()
	lc, err := t.listenerFor(ln)
	if err != nil {
		return err
	}
	ls := &listenerState{name: lc.Name, proxy: p, tls: lc.TLS != nil}
	ls.idle = durationOr(lc.IdleTimeout.Duration, 60*time.Second)
	ls.maxHdrs = lc.MaxHeaderBytes
	if ls.maxHdrs <= 0 {
		ls.maxHdrs = 8 << 10
	}
	readHdr := durationOr(lc.ReadHeaderTimeout.Duration, 10*time.Second)
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
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		_ = ln.Close()
		return errors.New("httpproxy: proxy is shut down")
	}
	p.servers = append(p.servers, srv)
	p.mu.Unlock()
	ln = rawListener{ln} // client sockets read and written with raw calls: see rawIO
	// Policy: max_conns_per_client (ratelimit.go).
	ln = ls.limitConns(ln)
	if lc.TLS != nil {
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
	p.closed = true
	servers := p.servers
	p.mu.Unlock()
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
