//go:build linux && !race

package h1

import (
	"testing"

	"ballast/config"
)

// edgePolicy is an edge route's policy on every request (the fasthttp plane's benchPolicy):
// a rewrite, a rate limit that never refuses, request and response header rules with
// variables.
func edgePolicy() config.RoutePolicy {
	return config.RoutePolicy{
		Rewrite:         &config.Rewrite{Prefix: "/", Replacement: "/"},
		RateLimit:       &config.RateLimit{Rate: 1e9, Burst: 1e9, Key: "source_ip", MaxKeys: 1000}, // never refuses at any benchmark speed
		RequestHeaders:  &config.HeaderRules{Set: []string{"X-Real-IP: ${client_ip}", "X-Edge: 1"}},
		ResponseHeaders: &config.HeaderRules{Set: []string{"X-Served-By: ${backend}"}},
	}
}

// BenchmarkForwardPolicy is BenchmarkForwardKeepAlive through a route with edgePolicy: the
// core's policy on both sides of every request, on the engine's views of the heads.
func BenchmarkForwardPolicy(b *testing.B) {
	cfg := testConfig(testPool("p", "roundrobin", fixedBackend(b)))
	cfg.Listeners[0].ExposeBackend = false
	cfg.Routes[0].RoutePolicy = edgePolicy()
	te := startEngine(b, cfg)
	k := newKeepAliveClient(b, te.addr)
	for range 100 {
		k.do(b)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		k.do(b)
	}
}

// BenchmarkForwardCookieRule is BenchmarkForwardKeepAlive with a Cookie from the client and
// request header rules on Cookie (one adds a field beside the client's, one sets a value):
// the Cookie fields kept beside fasthttp's head and written after it (reqMsg.appendCookies).
func BenchmarkForwardCookieRule(b *testing.B) {
	cfg := testConfig(testPool("p", "roundrobin", fixedBackend(b)))
	cfg.Listeners[0].ExposeBackend = false
	cfg.Routes[0].RoutePolicy = config.RoutePolicy{
		RequestHeaders: &config.HeaderRules{Add: []string{"Cookie: edge=${client_ip}"}, Set: []string{"X-Edge: 1"}},
	}
	te := startEngine(b, cfg)
	k := newKeepAliveClient(b, te.addr)
	k.req = []byte("GET / HTTP/1.1\r\nHost: bench.example\r\nUser-Agent: wrk\r\nCookie: a=1;;b=2\r\n\r\n")
	for range 100 {
		k.do(b)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		k.do(b)
	}
}

// TestForwardAllocs pins what the forward benchmarks show (the fasthttp plane's
// TestApplyPolicyAllocs, over the whole keep-alive path here): no allocation per request in
// the whole process, without a policy, with an edge route's and with Cookie rules. Not under the race detector,
// whose bookkeeping allocates.
func TestForwardAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation counts need a full run")
	}
	for name, bench := range map[string]func(*testing.B){"plain": BenchmarkForwardKeepAlive, "policy": BenchmarkForwardPolicy, "cookie rule": BenchmarkForwardCookieRule} {
		res := testing.Benchmark(bench)
		if a := res.AllocsPerOp(); a != 0 {
			t.Errorf("%s: %d allocations per request on the keep-alive path, want 0", name, a)
		}
	}
}
