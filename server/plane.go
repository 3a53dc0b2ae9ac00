package server

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"

	"ballast/admin"
	"ballast/config"
	"ballast/h1"
	"ballast/h2proxy"
	"ballast/httpcore"
	"ballast/httpproxy"
	"ballast/proxyproto"
	"ballast/upstream"
)

// Plane is one data plane. The server calls Swap with the first configuration before any
// Serve and again on every reload, Serve once per socket of the listeners the plane claims,
// and Shutdown once at the end.
type Plane interface {
	// Name names the plane in logs ("http").
	Name() string
	// Listeners returns the configured listeners this plane serves.
	Listeners(cfg *config.Config) []config.Listener
	// Swap installs cfg with its pools; on error the plane keeps the previous ones.
	Swap(cfg *config.Config, pools map[string]*upstream.Pool) error
	// Serve serves the named listener's socket until Shutdown, then returns nil.
	Serve(listener string, sock Socket) error
	// Shutdown stops accepting and waits for in-flight work until ctx ends.
	Shutdown(ctx context.Context) error
}

// httpPlane is the HTTP side as a Plane: the HTTP core (routes, policy, the access log, the
// counters) and the HTTP/1 engines that serve its listeners' sockets (the event-loop engine
// for plain listeners, fasthttp for the others: h1plane.go); the HTTP/2 engine gets its
// connections from the fronts. It also gives the admin plane its counters
// (admin.Counters, and admin.ListenerCounters for the PROXY headers it refuses).
type httpPlane struct {
	logger   *slog.Logger
	core     *httpcore.Core
	proxy    *httpproxy.Proxy
	down     chan struct{} // closed when Shutdown has stopped the HTTP/1 engine
	downOnce sync.Once

	mu  sync.Mutex // guards cfg, pp and trust against the admin plane's reads and Serve
	cfg *config.Config
	// pp holds the PROXY protocol readers of each accept_proxy listener's sockets, by name
	// (a reload that moves a listener gives it a new socket), so that its count never goes back.
	pp    map[string][]*proxyproto.Listener
	trust proxyproto.Trust // trusted_proxies: the peers whose PROXY headers are believed

	h2     *h2proxy.Proxy // gets the HTTP/2 connections of TLS and h2c listeners
	fronts fronts         // TLS certificates and the fronts of TLS and h2c listeners
	engine *h1.Engine     // the event-loop HTTP/1 engine: plain listeners (h1plane.go); nil off Linux
}

// newHTTPPlane builds the HTTP core and both engines over it; neither engine knows the other
// (the HTTP/2 one borrows the HTTP/1 one's backend connections through httpcore.Bridge).
func newHTTPPlane(logger *slog.Logger) *httpPlane {
	core := httpcore.New(logger)
	h1 := httpproxy.New(core, logger)
	return &httpPlane{logger: logger, core: core, proxy: h1, h2: h2proxy.New(core, h1, logger), engine: newEngine(core, logger), down: make(chan struct{})}
}

func (p *httpPlane) Name() string { return "http" }

// Listeners are the http ones (a director listener is tcp or udp).
func (p *httpPlane) Listeners(cfg *config.Config) []config.Listener {
	var out []config.Listener
	for _, l := range cfg.Listeners {
		if !l.IsL4() {
			out = append(out, l)
		}
	}
	return out
}

// Swap gives the proxy the http part of cfg: its listeners, the routes that can reach them and
// the pools that serve http.
func (p *httpPlane) Swap(cfg *config.Config, pools map[string]*upstream.Pool) error {
	hc := httpPart(cfg)
	trust, err := proxyTrust(cfg)
	if err != nil {
		return err
	}
	commitTLS, err := p.fronts.prepare(hc)
	if err != nil {
		return err
	}
	if err := p.core.Swap(hc, pools); err != nil {
		return err
	}
	commitTLS()
	p.mu.Lock()
	p.cfg, p.trust = hc, trust
	if p.engine != nil {
		p.engine.SetProxyTrust(trust)
	}
	for _, pls := range p.pp { // a reload's trusted_proxies apply to open listeners at once
		for _, pl := range pls {
			pl.SetTrust(trust)
		}
	}
	p.mu.Unlock()
	return nil
}

// httpPart is cfg without its tcp and udp listeners, their routes and their pools.
func httpPart(cfg *config.Config) *config.Config {
	hc := *cfg
	hc.Listeners, hc.Routes, hc.Pools = nil, nil, nil
	for _, l := range cfg.Listeners {
		if !l.IsL4() {
			hc.Listeners = append(hc.Listeners, l)
		}
	}
	for _, r := range cfg.Routes {
		for _, l := range hc.Listeners {
			if r.Listener == "" || r.Listener == l.Name {
				hc.Routes = append(hc.Routes, r)
				break
			}
		}
	}
	for _, pc := range cfg.Pools {
		if !cfg.L4Pool(pc.Name) {
			hc.Pools = append(hc.Pools, pc)
		}
	}
	return &hc
}

// Serve serves an http listener; with accept_proxy its connections first give a PROXY header
// (within read_header_timeout), whose client address the engine then sees as the peer's, so
// that X-Forwarded-For, source-IP hashing and the access log name the original client: the
// event-loop engine reads it itself, fasthttp through a proxyproto.Listener.
func (p *httpPlane) Serve(listener string, sock Socket) error {
	if p.core.Table() == nil {
		return errors.New("http plane: Serve before Swap")
	}
	ln := sock.Stream
	p.mu.Lock()
	if p.engine != nil && engineServes(p.cfg, listener) { // it reads PROXY headers itself
		p.mu.Unlock()
		if cfg := p.fronts.tlsConfig(listener); cfg != nil {
			return p.engine.ServeTLS(listener, ln, cfg)
		}
		return p.engine.Serve(listener, ln) // an h2c one's HTTP/2 and HTTP/1.1 both on the shards
	}
	for _, l := range p.cfg.Listeners {
		if l.Name == listener && l.AcceptProxy {
			if p.pp == nil {
				p.pp = map[string][]*proxyproto.Listener{}
			}
			pl := proxyproto.NewListener(ln, l.ReadHeaderTimeout.Duration)
			pl.SetTrust(p.trust)
			p.pp[listener], ln = append(p.pp[listener], pl), pl
		}
	}
	p.mu.Unlock()
	if f := p.fronts.front(listener, p.h2, p.core); f != nil { // TLS and h2c: ALPN or preface decides the engine
		return f.serve(ln, func(h1 net.Listener) error { return p.proxy.Serve(listener, h1) })
	}
	return p.proxy.Serve(listener, ln)
}

// ListenerStats reports the PROXY headers each accept_proxy listener refused, over both
// HTTP/1 engines.
func (p *httpPlane) ListenerStats() []admin.ListenerStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []admin.ListenerStats
	if p.cfg == nil {
		return out
	}
	for _, l := range p.cfg.Listeners {
		st := admin.ListenerStats{Listener: l.Name, Protocol: config.ProtocolHTTP}
		pls := p.pp[l.Name]
		for _, pl := range pls {
			st.ProxyRefused += pl.Refused()
		}
		served := len(pls) > 0
		if p.engine != nil {
			n, ok := p.engine.ProxyRefused(l.Name)
			st.ProxyRefused += n
			served = served || ok
		}
		if served {
			out = append(out, st)
		}
	}
	return out
}

// ReopenLogs reopens the access log file (SIGUSR1).
func (p *httpPlane) ReopenLogs() error { return p.core.ReopenAccessLog() }

// Shutdown stops the HTTP/1 engine; the HTTP/2 plane closes the core once both have stopped.
func (p *httpPlane) Shutdown(ctx context.Context) error {
	defer p.downOnce.Do(func() { close(p.down) })
	engineDone := make(chan error, 1)
	go func() { engineDone <- p.shutdownEngine(ctx) }()
	return errors.Join(p.proxy.Shutdown(ctx), <-engineDone)
}

// Responses are b's responses by status class, over both HTTP versions.
func (p *httpPlane) Responses(b *upstream.Backend) [6]uint64 { return p.core.Responses(b) }

// PoolCounters are the pool's retries and hedges, over both HTTP versions.
func (p *httpPlane) PoolCounters(pool string) (retries, hedges uint64) {
	return p.core.PoolCounters(pool)
}

// proxyTrust is the configuration's trusted_proxies as the peers an accept_proxy listener
// takes PROXY headers from (empty: every peer).
func proxyTrust(cfg *config.Config) (proxyproto.Trust, error) {
	ps, err := config.ParsePrefixes(cfg.TrustedProxies)
	return proxyproto.Trust(ps), err
}
