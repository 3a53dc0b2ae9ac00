//go:build linux

package h1

import (
	"testing"
	"time"

	"ballast/config"
	"ballast/internal/h1conformance"
)

// conformanceConfig routes Host public.example and the path prefix /api/ (any host) to a
// pool whose only backend is addr; every other request has no route (404): the
// configuration of package h1conformance's table.
func conformanceConfig(addr string) *config.Config {
	cfg := testConfig(testPool("p", "roundrobin", addr))
	cfg.Listeners[0].ExposeBackend = false
	cfg.Routes = []config.Route{{Host: h1conformance.RouteHost, Pool: "p"}, {PathPrefix: h1conformance.RoutePrefix, Pool: "p"}}
	return cfg
}

// TestRequestHeadConformance drives each request head through a real listener to a raw
// recording backend and checks the client's statuses and every byte the backend receives:
// the fasthttp plane's table (its behaviour, which the engine keeps). The
// hedged configuration (hedge.delay set, never reached here) must forward the same bytes.
func TestRequestHeadConformance(t *testing.T) {
	for _, hedged := range []bool{false, true} {
		rb := h1conformance.NewRawBackend(t)
		cfg := conformanceConfig(rb.Addr())
		name := "plain"
		if hedged {
			cfg.Pools[0].Hedge.Delay = dur(time.Hour)
			name = "hedged"
		}
		tp := startEngine(t, cfg)
		t.Run(name, func(t *testing.T) { h1conformance.Run(t, tp.exchangeRaw, rb, false) })
	}
	rb := h1conformance.NewRawBackend(t)
	tp := startTLSEngine(t, conformanceConfig(rb.Addr()))
	t.Run("tls", func(t *testing.T) { h1conformance.Run(t, tp.exchangeRaw, rb, true) })
}
