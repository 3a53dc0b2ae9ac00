package server

import (
	"context"
	"os"

	"ballast/config"
	"ballast/h1"
)

// The event-loop HTTP/1.1 engine (package h1) serves plain-HTTP listeners instead of the
// fasthttp plane when the environment has BALLAST_H1=engine: a temporary switch while the
// engine takes the plane over (issue 20). Both serve from the same HTTP core (routes, policy,
// the access log, counters). A listener with TLS, h2c or accept_proxy stays on fasthttp, and
// so does every listener of a configuration that uses what the engine does not have yet
// (compression, backend TLS or HTTP/2).

// h1EngineOn reports whether the switch is on.
func h1EngineOn() bool { return os.Getenv("BALLAST_H1") == "engine" }

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
			return l.TLS == nil && !l.H2C && !l.AcceptProxy
		}
	}
	return false
}

// startEngine builds the engine over the plane's core when the switch is on, once, before
// the core's first Swap (the engine attaches its per-backend state through it).
func (p *httpPlane) startEngine() error {
	if !h1EngineOn() || p.engine != nil {
		return nil
	}
	e, err := h1.New(p.core, p.logger)
	if err != nil {
		return err
	}
	p.engine = e
	return nil
}

// shutdownEngine stops the engine, if any.
func (p *httpPlane) shutdownEngine(ctx context.Context) error {
	if p.engine == nil {
		return nil
	}
	return p.engine.Shutdown(ctx)
}
