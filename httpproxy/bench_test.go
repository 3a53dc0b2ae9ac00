package httpproxy

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"ballast/upstream"

	"github.com/valyala/fasthttp"
)

// BenchmarkProxyGet measures the whole path for a small keep-alive GET: client → proxy →
// backend → proxy → client, all in this process over 127.0.0.1.
func BenchmarkProxyGet(b *testing.B) {
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

	tp := startProxy(b, testConfig(testPool("bench", "roundrobin", ln.Addr().String())))
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

// BenchmarkDirectGet is BenchmarkProxyGet without the proxy, the baseline of this machine.
func BenchmarkDirectGet(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	be := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) { ctx.SetBodyString("ok") }}
	go func() { _ = be.Serve(ln) }()
	defer func() { _ = be.Shutdown() }()
	hc := &fasthttp.HostClient{Addr: ln.Addr().String(), MaxConns: 64}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		req := fasthttp.AcquireRequest()
		resp := fasthttp.AcquireResponse()
		req.SetRequestURI("http://" + ln.Addr().String() + "/")
		for pb.Next() {
			if err := hc.Do(req, resp); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// TestServeForProfile serves a proxy for an external load generator when
// BALLAST_PROFILE_LISTEN (address), BALLAST_PROFILE_BACKENDS (comma list) and
// BALLAST_PROFILE_SECONDS are set; run it with -cpuprofile to profile the request path alone.
func TestServeForProfile(t *testing.T) {
	listen := os.Getenv("BALLAST_PROFILE_LISTEN")
	if listen == "" {
		t.Skip("BALLAST_PROFILE_LISTEN not set")
	}
	secs, _ := strconv.Atoi(os.Getenv("BALLAST_PROFILE_SECONDS"))
	pc := testPool("prof", "roundrobin", strings.Split(os.Getenv("BALLAST_PROFILE_BACKENDS"), ",")...)
	cfg := testConfig(pc)
	cfg.Listeners[0].ExposeBackend = false
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := upstream.NewPool(pc.Spec(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Listeners[0].Address = ln.Addr().String()
	px, err := newEngine(cfg, map[string]*upstream.Pool{"prof": pool}, nil)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = px.Serve(cfg.Listeners[0].Name, ln) }()
	time.Sleep(time.Duration(secs) * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = px.Shutdown(ctx)
}

// BenchmarkCheckHead measures the request-head validation every request goes through: one
// pass over the raw header block, the target and the version, on a typical browser head.
func BenchmarkCheckHead(b *testing.B) {
	raw := "GET /static/app.js?v=3 HTTP/1.1\r\nHost: www.example.com\r\n" +
		"User-Agent: Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0\r\n" +
		"Accept: */*\r\nAccept-Language: en-US,en;q=0.5\r\nAccept-Encoding: gzip, deflate, br\r\n" +
		"Referer: https://www.example.com/\r\nCookie: session=0123456789abcdef; theme=dark\r\n" +
		"Sec-Fetch-Dest: script\r\nSec-Fetch-Mode: no-cors\r\nConnection: keep-alive\r\n\r\n"
	var req fasthttp.Request
	if err := req.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
		b.Fatal(err)
	}
	h := &req.Header
	if len(h.RawHeaders()) == 0 {
		b.Fatal("no raw headers")
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, v := checkHead(h); v != headOK {
			b.Fatalf("verdict %d", v)
		}
	}
}

// BenchmarkProxySmallResponse is a small keep-alive GET whose response the backend writes in
// one piece, so it reaches the proxy whole: the fast path, which must take no more system
// calls than before streaming small bodies (issue 8 item 6). It reports the process's read
// and write system calls per request (client, proxy and backend together, from
// /proc/self/io), which the machine's load does not change, beside the noisy time.
func BenchmarkProxySmallResponse(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	const answer = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 42\r\n\r\n" +
		"<html><body><h1>It works!</h1></body></htm"
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					if _, err := http.ReadRequest(br); err != nil {
						return
					}
					if _, err := io.WriteString(c, answer); err != nil {
						return
					}
				}
			}()
		}
	}()
	tp := startProxy(b, testConfig(testPool("bench", "roundrobin", ln.Addr().String())))
	hc := &fasthttp.HostClient{Addr: tp.addr, MaxConns: 1}
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	req.SetRequestURI("http://" + tp.addr + "/")
	do := func() {
		if err := hc.Do(req, resp); err != nil || resp.StatusCode() != 200 || len(resp.Body()) != 42 {
			b.Fatalf("%v %d %q", err, resp.StatusCode(), resp.Body())
		}
	}
	do() // warm the connections
	r0, w0 := procSyscalls(b)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		do()
	}
	b.StopTimer()
	r1, w1 := procSyscalls(b)
	b.ReportMetric(float64(r1-r0)/float64(b.N), "reads/op")
	b.ReportMetric(float64(w1-w0)/float64(b.N), "writes/op")
}

// procSyscalls returns the read and write system calls this process made so far.
func procSyscalls(b *testing.B) (reads, writes int64) {
	data, err := os.ReadFile("/proc/self/io")
	if err != nil {
		b.Skipf("no /proc/self/io: %v", err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		k, v, _ := strings.Cut(line, ": ")
		n, _ := strconv.ParseInt(v, 10, 64)
		switch k {
		case "syscr":
			reads = n
		case "syscw":
			writes = n
		}
	}
	return reads, writes
}
