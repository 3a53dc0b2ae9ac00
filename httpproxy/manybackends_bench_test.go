package httpproxy

import (
	"net"
	"strconv"
	"testing"

	"github.com/valyala/fasthttp"
)

// BenchmarkProxyManyBackends is BenchmarkProxyGet over 2 and over 2000 backends (one fasthttp
// server on as many loopback listeners), round robin, so that per-backend costs outside the
// pick show as the difference between the two sub-benchmarks of one run: every request goes
// to a backend whose connection, buffers and counters were last touched 2000 requests ago.
func BenchmarkProxyManyBackends(b *testing.B) {
	for _, n := range []int{2, 2000} {
		b.Run("backends="+strconv.Itoa(n), func(b *testing.B) {
			be := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) { ctx.SetBodyString("ok") }}
			addrs := make([]string, n)
			for i := range addrs {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					b.Fatal(err)
				}
				addrs[i] = ln.Addr().String()
				go func() { _ = be.Serve(ln) }()
			}
			defer func() { _ = be.Shutdown() }()
			tp := startProxy(b, testConfig(testPool("bench", "roundrobin", addrs...)))
			hc := &fasthttp.HostClient{Addr: tp.addr, MaxConns: 64}
			get := func(req *fasthttp.Request, resp *fasthttp.Response) bool {
				if err := hc.Do(req, resp); err != nil {
					b.Error(err)
					return false
				}
				if resp.StatusCode() != 200 {
					b.Errorf("status %d", resp.StatusCode())
					return false
				}
				return true
			}
			req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			req.SetRequestURI("http://" + tp.addr + "/")
			for range 2 * n { // open every backend's connection before timing
				if !get(req, resp) {
					return
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
				req.SetRequestURI("http://" + tp.addr + "/")
				for pb.Next() {
					if !get(req, resp) {
						return
					}
				}
			})
		})
	}
}
