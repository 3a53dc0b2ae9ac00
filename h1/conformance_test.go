//go:build linux

package h1

import (
	"strings"
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
// package httpproxy's table (the fasthttp plane's behaviour, which the engine keeps). The
// hedged configuration (hedge.delay set, never reached here) must forward the same bytes.
func TestRequestHeadConformance(t *testing.T) {
	for _, hedged := range []bool{false, true} {
		rb := newRawBackend(t)
		cfg := conformanceConfig(rb.addr())
		name := "plain"
		if hedged {
			cfg.Pools[0].Hedge.Delay = dur(time.Hour)
			name = "hedged"
		}
		tp := startEngine(t, cfg)
		t.Run(name, func(t *testing.T) { runConformance(t, tp, rb) })
	}
	rb := newRawBackend(t)
	tp := startTLSEngine(t, conformanceConfig(rb.addr()), nil)
	t.Run("tls", func(t *testing.T) { runConformance(t, tp, rb) })
}

func runConformance(t *testing.T, tp *testEngine, rb *rawBackend) {
	for _, tc := range h1conformance.Rows {
		t.Run(tc.Name, func(t *testing.T) {
			out := tp.exchangeRaw(t, []byte(tc.Req))
			got, _ := rb.take(t)
			if s := h1conformance.Statuses(out); s != tc.Status {
				t.Errorf("statuses %q, want %q; response:\n%s", s, tc.Status, out)
			}
			want := strings.ReplaceAll(tc.Backend, "BACKEND", rb.addr())
			if tp.tls { // the same bytes, with the scheme the client used
				want = strings.NewReplacer("X-Forwarded-Proto: http\r", "X-Forwarded-Proto: https\r", "proto=http;", "proto=https;", "proto=http\r", "proto=https\r").Replace(want)
			}
			if string(got) != want {
				t.Errorf("backend received:\n%q\nwant:\n%q", got, want)
			}
		})
	}
}
