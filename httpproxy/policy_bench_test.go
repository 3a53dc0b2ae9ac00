package httpproxy

import (
	"net"
	"testing"

	"github.com/valyala/fasthttp"

	"ballast/config"
	"ballast/httpcore"
	"ballast/upstream"
)

// BenchmarkProxyGetPolicy is BenchmarkProxyGet through a route with request and response
// headers (with variables), a rewrite and a rate limit: the cost of a typical edge route.
func BenchmarkProxyGetPolicy(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	body := []byte("<html><body><h1>It works!</h1></body></htm")
	be := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("text/html")
		ctx.SetBody(body)
	}}
	go func() { _ = be.Serve(ln) }()
	defer func() { _ = be.Shutdown() }()

	cfg := testConfig(testPool("bench", "roundrobin", ln.Addr().String()))
	cfg.Routes[0].RoutePolicy = benchPolicy()
	tp := startProxy(b, cfg)
	hc := &fasthttp.HostClient{Addr: tp.addr, MaxConns: 64}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		req := fasthttp.AcquireRequest()
		resp := fasthttp.AcquireResponse()
		req.SetRequestURI("http://" + tp.addr + "/")
		for pb.Next() {
			if err := hc.Do(req, resp); err != nil {
				b.Error(err)
				return
			}
			if resp.StatusCode() != 200 {
				b.Errorf("status %d", resp.StatusCode())
				return
			}
		}
	})
}

func benchPolicy() config.RoutePolicy {
	return config.RoutePolicy{
		Rewrite:         &config.Rewrite{Prefix: "/", Replacement: "/"},
		RateLimit:       &config.RateLimit{Rate: 1e9, Burst: 1e9, Key: "source_ip", MaxKeys: 1000}, // never refuses at any benchmark speed
		RequestHeaders:  &config.HeaderRules{Set: []string{"X-Real-IP: ${client_ip}", "X-Edge: 1"}},
		ResponseHeaders: &config.HeaderRules{Set: []string{"X-Served-By: ${backend}"}},
	}
}

// BenchmarkApplyPolicy runs the request side of an edge route's policy alone, through the
// HTTP core over the HTTP/1 engine's view of a fasthttp request: the request begun and
// routed, admitted (rate limit) and its policy applied (rewrite, header rules with
// variables). Once the pooled buffers have grown it allocates nothing (templates are
// pre-parsed, literal values are not expanded, the limiter's buckets are values in a shard).
func BenchmarkApplyPolicy(b *testing.B) {
	cfg := testConfig(testPool("p", "roundrobin", "127.0.0.1:1"))
	cfg.Routes[0].RoutePolicy = benchPolicy()
	pool, err := upstream.NewPool(cfg.Pools[0].Spec(nil), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	e, err := newEngine(cfg, map[string]*upstream.Pool{"p": pool}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer e.core.Close()
	t := e.core.Table()
	l := t.Listener("web")
	peer := &net.TCPAddr{IP: net.IPv4(192, 0, 2, 7), Port: 5555}
	var ctx fasthttp.RequestCtx
	var req fasthttp.Request
	ctx.Init(&req, peer, nil)
	conn := httpcore.Conn{Peer: httpcore.ClientAddr(peer)}
	b.ReportAllocs()
	for b.Loop() {
		ctx.Request.Header.SetRequestURI("/some/path?q=1")
		ctx.Request.Header.SetHost("example.com")
		x := getExchange()
		x.req.init(&ctx)
		cx := &x.core
		cx.Begin(t, l, &x.req, conn)
		if cx.Route(&x.req) == nil || !cx.Admit(&x.req) {
			b.Fatal("refused")
		}
		cx.ApplyPolicy(&x.req, &x.scan)
		x.put()
	}
}

// TestApplyPolicyAllocs pins what BenchmarkApplyPolicy shows: no allocation per request.
func TestApplyPolicyAllocs(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("allocation counts need a full run without the race detector")
	}
	res := testing.Benchmark(BenchmarkApplyPolicy)
	if a := res.AllocsPerOp(); a != 0 {
		t.Errorf("the request side of the policy allocates %d times per request, want 0", a)
	}
}
