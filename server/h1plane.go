package server

import (
	"context"
	"crypto/tls"
	"log/slog"

	"ballast/config"
	"ballast/h1"
	"ballast/httpcore"
)

// Plain-HTTP and TLS listeners are served by the event-loop HTTP/1.1 engine (package h1; on a
// TLS listener the connections that negotiate h2 by ALPN go to the HTTP/2 plane); the
// fasthttp plane (package httpproxy) serves the rest: the HTTP/1 connections of h2c
// listeners, TLS listeners with accept_proxy, and every listener of a configuration that
// compresses responses or reaches backends over TLS or HTTP/2, which the engine does not do
// yet. Both serve from the same HTTP core (routes, policy, the access log, counters).
// engineServes is the one place the choice is made; off Linux the engine does not exist and
// fasthttp serves everything.

// engineServes reports whether the engine serves listener name of cfg.
func engineServes(cfg *config.Config, name string) bool {
	if cfg == nil {
		return false
	}
	for _, r := range cfg.Routes {
		if r.Compress != nil {
			return false
		}
	}
	for _, pc := range cfg.Pools {
		if pc.TLS != nil || pc.Protocol != "" && pc.Protocol != "http1" {
			return false
		}
	}
	for _, l := range cfg.Listeners {
		if l.Name == name {
			// h2c's preface sniffing, and a PROXY header before a TLS handshake, stay with
			// the front and fasthttp.
			return !l.H2C && !(l.TLS != nil && l.AcceptProxy)
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
