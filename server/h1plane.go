package server

import (
	"context"
	"os"
	"reflect"

	"ballast/config"
	"ballast/h1"
	"ballast/upstream"
)

// The event-loop HTTP/1.1 engine (package h1) serves plain-HTTP listeners instead of the
// fasthttp plane when the environment has BALLAST_H1=engine: a temporary switch while the
// engine takes the plane over (issue 20). A configuration that uses what the engine does not
// have yet (traffic policy, error pages, sticky sessions, backend TLS or HTTP/2,
// TLS, h2c and PROXY-protocol listeners) stays on fasthttp whole.

// h1EngineOn reports whether the switch is on.
func h1EngineOn() bool { return os.Getenv("BALLAST_H1") == "engine" }

// engineServes reports whether the engine serves listener name of cfg.
func engineServes(cfg *config.Config, name string) bool {
	if cfg == nil || len(cfg.ErrorPages) > 0 {
		return false
	}
	for _, r := range cfg.Routes {
		if !reflect.ValueOf(r.RoutePolicy).IsZero() {
			return false
		}
	}
	for _, pc := range cfg.Pools {
		if pc.Sticky != nil || pc.TLS != nil || pc.Protocol != "" && pc.Protocol != "http1" {
			return false
		}
	}
	for _, l := range cfg.Listeners {
		if l.Name == name {
			return l.TLS == nil && !l.H2C && !l.AcceptProxy && reflect.ValueOf(l.ListenerPolicy).IsZero()
		}
	}
	return false
}

// swapEngine gives the engine, when the switch is on, the configuration the fasthttp plane
// gets (building it on the first call).
func (p *httpPlane) swapEngine(cfg *config.Config, pools map[string]*upstream.Pool) error {
	if !h1EngineOn() {
		return nil
	}
	if p.engine == nil {
		e, err := h1.New(cfg, pools, p.logger)
		if err != nil {
			return err
		}
		p.engine = e
		return nil
	}
	return p.engine.Swap(cfg, pools)
}

// shutdownEngine stops the engine, if any.
func (p *httpPlane) shutdownEngine(ctx context.Context) error {
	if p.engine == nil {
		return nil
	}
	return p.engine.Shutdown(ctx)
}
