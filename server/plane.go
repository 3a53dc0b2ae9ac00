package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"ballast/admin"
	"ballast/config"
	"ballast/h1"
	"ballast/httpcore"
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
// counters) and the event-loop engine (package h1) that serves every HTTP listener's socket
// over it: plain HTTP, h2c (HTTP/2 with prior knowledge and HTTP/1.1, the first bytes
// deciding) and TLS (HTTP/1.1 and ALPN h2; handshakes off the shards), each with or without
// accept_proxy (the engine reads the PROXY header on its shard), to backends over HTTP/1.1,
// TLS, h2c and h2. Off Linux the engine does not exist: a configuration with an HTTP listener
// is refused (Swap) and the L4 planes serve the rest. It also gives the admin plane its
// counters (admin.Counters, and admin.ListenerCounters for the PROXY headers it refuses).
type httpPlane struct {
	logger    *slog.Logger
	core      *httpcore.Core
	engine    *h1.Engine // nil where it cannot run (off Linux): engineErr says why
	engineErr error
	certs     tlsCerts // the TLS listeners' certificates, kept across reloads (tlscerts.go)

	mu  sync.Mutex // guards cfg against the admin plane's reads and Serve
	cfg *config.Config
}

// newHTTPPlane builds the HTTP core and the engine over it (before the core's first Swap:
// the engine attaches its per-backend state through the core).
func newHTTPPlane(logger *slog.Logger) *httpPlane {
	core := httpcore.New(logger)
	e, err := newEngine(core, logger)
	if err != nil {
		logger.Info("the HTTP engine is not available: a configuration with an HTTP listener is refused", "err", err)
	}
	return &httpPlane{logger: logger, core: core, engine: e, engineErr: err}
}

// newEngine builds the engine; a variable so that a test can stand for a system without it.
var newEngine = h1.New

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

// Swap gives the engine the http part of cfg: its listeners, the routes that can reach them
// and the pools that serve http. Without the engine a configuration with an HTTP listener is
// refused, naming the listener.
func (p *httpPlane) Swap(cfg *config.Config, pools map[string]*upstream.Pool) error {
	hc := httpPart(cfg)
	if p.engine == nil && len(hc.Listeners) > 0 {
		return fmt.Errorf("listener %s: %w", hc.Listeners[0].Name, p.engineErr)
	}
	trust, err := proxyTrust(cfg)
	if err != nil {
		return err
	}
	commitTLS, err := p.certs.prepare(hc)
	if err != nil {
		return err
	}
	if err := p.core.Swap(hc, pools); err != nil {
		return err
	}
	commitTLS()
	p.mu.Lock()
	p.cfg = hc
	p.mu.Unlock()
	if p.engine != nil { // a reload's trusted_proxies apply to open listeners at once
		p.engine.SetProxyTrust(trust)
	}
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

// Serve serves an http listener's socket on the engine: a TLS one's handshakes with its
// certificates (following reloads), an accept_proxy one's PROXY headers read first (within
// read_header_timeout), whose client address the engine then sees as the peer's, so that
// X-Forwarded-For, source-IP hashing and the access log name the original client.
func (p *httpPlane) Serve(listener string, sock Socket) error {
	if p.core.Table() == nil {
		return errors.New("http plane: Serve before Swap")
	}
	if p.engine == nil {
		return fmt.Errorf("listener %s: %w", listener, p.engineErr)
	}
	if cfg := p.certs.config(listener); cfg != nil {
		return p.engine.ServeTLS(listener, sock.Stream, cfg)
	}
	return p.engine.Serve(listener, sock.Stream) // an h2c one's HTTP/2 and HTTP/1.1 both on the shards
}

// ListenerStats reports the PROXY headers each accept_proxy listener refused.
func (p *httpPlane) ListenerStats() []admin.ListenerStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []admin.ListenerStats
	if p.cfg == nil || p.engine == nil {
		return out
	}
	for _, l := range p.cfg.Listeners {
		if n, ok := p.engine.ProxyRefused(l.Name); ok {
			out = append(out, admin.ListenerStats{Listener: l.Name, Protocol: config.ProtocolHTTP, ProxyRefused: n})
		}
	}
	return out
}

// ReopenLogs reopens the access log file (SIGUSR1).
func (p *httpPlane) ReopenLogs() error { return p.core.ReopenAccessLog() }

// Shutdown stops the engine (in-flight requests finish until ctx ends), then closes the HTTP
// core (its access log, its clocks).
func (p *httpPlane) Shutdown(ctx context.Context) error {
	var err error
	if p.engine != nil {
		err = p.engine.Shutdown(ctx)
	}
	p.core.Close()
	return err
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
