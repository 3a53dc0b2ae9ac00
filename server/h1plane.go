package server

import (
	"context"
	"crypto/tls"
	"log/slog"

	"ballast/config"
	"ballast/h1"
	"ballast/httpcore"
)

// Every HTTP listener is served by the event-loop engine (package h1): plain HTTP, h2c
// listeners (HTTP/2 with prior knowledge and HTTP/1.1 on the shards, the first bytes
// deciding) and TLS listeners (HTTP/1.1 and ALPN h2 on the shards; with accept_proxy the
// PROXY header read on the shard before the handshake), to backends over HTTP/1.1, TLS,
// h2c and h2 (HTTP/2 over TLS). Off Linux the engine does not exist and the fasthttp plane
// (package httpproxy, HTTP/2 on h2proxy) serves everything, from the same HTTP core
// (routes, policy, the access log, counters). engineServes is the one place the choice is
// made.

// engineServes reports whether the engine serves listener name of cfg: every listener cfg
// has.
func engineServes(cfg *config.Config, name string) bool {
	if cfg == nil {
		return false
	}
	for _, l := range cfg.Listeners {
		if l.Name == name {
			return true
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
