package server

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"

	"ballast/config"
	"ballast/h1"
	"ballast/httpcore"
	"ballast/sockio"
)

// Plain-HTTP listeners, h2c listeners (HTTP/2 with prior knowledge on the shards, their
// HTTP/1 connections handed to fasthttp) and TLS listeners are served by the event-loop
// engine (package h1; on a TLS listener the connections that negotiate h2 by ALPN go to the
// HTTP/2 plane); the fasthttp plane (package httpproxy) serves the rest: TLS listeners with
// accept_proxy, and every listener of a configuration that reaches backends over TLS or
// HTTP/2, which the engine does not do yet (their h2c listeners stay on the sniffing front,
// HTTP/2 on h2proxy). Both serve from the same HTTP core (routes,
// policy, the access log, counters).
// engineServes is the one place the choice is made; off Linux the engine does not exist and
// fasthttp serves everything.

// engineServes reports whether the engine serves listener name of cfg.
func engineServes(cfg *config.Config, name string) bool {
	if cfg == nil {
		return false
	}
	for _, pc := range cfg.Pools {
		if pc.TLS != nil || pc.Protocol != "" && pc.Protocol != "http1" {
			return false
		}
	}
	for _, l := range cfg.Listeners {
		if l.Name == name {
			// A PROXY header before a TLS handshake stays with the front and fasthttp.
			return !(l.TLS != nil && (l.AcceptProxy || l.H2C))
		}
	}
	return false
}

// tlsConfig is the TLS configuration of the named listener (following reloads of its
// certificates), nil when it has none.
func (f *fronts) tlsConfig(name string) *tls.Config {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s := f.tls[name]; s != nil {
		return s.Config()
	}
	return nil
}

// newEngine builds the engine over core; nil where the engine does not run (off Linux), with
// the reason in the log.
func newEngine(core *httpcore.Core, logger *slog.Logger) *h1.Engine {
	e, err := h1.New(core, logger)
	if err != nil {
		logger.Info("the event-loop HTTP/1 engine is not available: fasthttp serves every HTTP listener", "err", err)
		return nil
	}
	return e
}

// shutdownEngine stops the engine, if any.
func (p *httpPlane) shutdownEngine(ctx context.Context) error {
	if p.engine == nil {
		return nil
	}
	return p.engine.Shutdown(ctx)
}

// isH2C reports whether listener name of cfg takes HTTP/2 with prior knowledge.
func isH2C(cfg *config.Config, name string) bool {
	for _, l := range cfg.Listeners {
		if l.Name == name {
			return l.H2C
		}
	}
	return false
}

// serveH2C serves an h2c listener from the engine: its HTTP/2 connections on the shards, and
// its HTTP/1.1 ones, handed over once their first bytes are read, on the fasthttp plane as
// before (as the front of a listener the engine does not serve hands them; counted against
// max_conns_per_client once, by the engine).
func (p *httpPlane) serveH2C(listener string, ln net.Listener) error {
	h1l := newChanListener(ln.Addr())
	go func() { _ = p.proxy.Serve(listener, h1l) }()
	err := p.engine.ServeH2C(listener, ln, func(c net.Conn, prefix []byte, counted bool) {
		c = sockio.NewConn(c)
		if counted {
			c = &countedConn{Conn: c, core: p.core, listener: listener, peer: httpcore.ClientAddr(c.RemoteAddr())}
		}
		h1l.push(&prefixConn{Conn: c, prefix: prefix})
	})
	_ = h1l.Close()
	return err
}
