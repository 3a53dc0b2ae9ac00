//go:build linux

package h1

import (
	"bufio"
	"bytes"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"testing"

	"ballast/httpcore"
	"ballast/upstream"

	"github.com/valyala/fasthttp"
)

const benchResponse = "HTTP/1.1 200 OK\r\nServer: bench\r\nContent-Type: text/html\r\nContent-Length: 44\r\n\r\n<html><body><h1>It works!</h1></body></html>"

// fixedBackend answers every request head it reads (GETs without a body) with
// benchResponse, allocating nothing per request.
func fixedBackend(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	return serveFixed(tb, ln)
}

// serveFixed is fixedBackend's loop on ln (a TLS listener for backendtls_test.go's).
func serveFixed(tb testing.TB, ln net.Listener) string {
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 64<<10)
				var pending []byte
				resp := []byte(benchResponse)
				for {
					n, err := c.Read(buf[len(pending):])
					if err != nil {
						return
					}
					data := buf[:len(pending)+n]
					for {
						i := bytes.Index(data, []byte("\r\n\r\n"))
						if i < 0 {
							break
						}
						data = data[i+4:]
						if _, err := c.Write(resp); err != nil {
							return
						}
					}
					pending = buf[:copy(buf, data)]
				}
			}()
		}
	}()
	tb.Cleanup(func() { _ = ln.Close() })
	return ln.Addr().String()
}

// keepAliveClient sends one GET at a time on one connection and reads its response.
type keepAliveClient struct {
	c   net.Conn
	req []byte
	buf []byte
}

func newKeepAliveClient(tb testing.TB, addr string) *keepAliveClient {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = c.Close() })
	return &keepAliveClient{c: c, req: []byte("GET / HTTP/1.1\r\nHost: bench.example\r\nUser-Agent: wrk\r\n\r\n"), buf: make([]byte, 4096)}
}

func (k *keepAliveClient) do(tb testing.TB) {
	if _, err := k.c.Write(k.req); err != nil {
		tb.Fatal(err)
	}
	got := 0
	for {
		n, err := k.c.Read(k.buf[got:])
		if err != nil {
			tb.Fatal(err)
		}
		got += n
		if bytes.HasSuffix(k.buf[:got], []byte("</html>")) {
			return
		}
	}
}

// BenchmarkForwardKeepAlive is the whole keep-alive path in-process: a client connection,
// the engine (head check and parse, route, pick, pooled backend connection, response head,
// 44-byte body) and a backend, over loopback. It reports the allocations of the whole
// process per request: 0 is the engine's budget (client and backend allocate nothing).
func BenchmarkForwardKeepAlive(b *testing.B) {
	addr := fixedBackend(b)
	cfg := testConfig(testPool("p", "roundrobin", addr))
	cfg.Listeners[0].ExposeBackend = false
	te := startEngine(b, cfg)
	k := newKeepAliveClient(b, te.addr)
	for range 100 { // warm: connections, buffers, free lists
		k.do(b)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		k.do(b)
	}
}

// benchCore is a core over one pool and listener "web", as the engine's requests see it.
func benchCore(b *testing.B) (*httpcore.Core, *httpcore.Table) {
	cfg := testConfig(testPool("p", "roundrobin", "127.0.0.1:9"))
	cfg.Listeners[0].ExposeBackend = false
	pool, err := upstream.NewPool(cfg.Pools[0].Spec(nil), nil)
	if err != nil {
		b.Fatal(err)
	}
	core := httpcore.New(nil)
	if err := core.Swap(cfg, map[string]*upstream.Pool{"p": pool}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { core.Close(); pool.Close() })
	return core, core.Table()
}

// BenchmarkParseHead is the request step on its own: the engine's checks, fasthttp's parse,
// the core's steps (route, admit, forwarding fields, key) and the forwarded head written.
func BenchmarkParseHead(b *testing.B) {
	head := []byte("GET /index.html?x=1 HTTP/1.1\r\nHost: bench.example\r\nUser-Agent: wrk/4.2\r\nAccept: */*\r\nAccept-Encoding: gzip\r\nCookie: a=b\r\n\r\n")
	_, t := benchCore(b)
	l := t.Listener("web")
	var rh fasthttp.RequestHeader
	var rd bytes.Reader
	br := bufio.NewReaderSize(&rd, 64<<10)
	var cx httpcore.Exchange
	msg := reqMsg{h: &rh, proto: http11}
	var out []byte
	client := netip.MustParseAddr("127.0.0.1")
	b.ReportAllocs()
	b.SetBytes(int64(len(head)))
	for range b.N {
		var r reqHead
		scan := 0
		if headEnd(head, &scan) != len(head) || checkRequest(head, &r) != headOK {
			b.Fatal("head refused")
		}
		rd.Reset(head)
		br.Reset(&rd)
		if err := rh.Read(br); err != nil {
			b.Fatal(err)
		}
		cx.Reset()
		cx.Begin(t, l, &msg, httpcore.Conn{Peer: client})
		route := cx.Route(&msg)
		if route == nil || !cx.Admit(&msg) {
			b.Fatal("not routed")
		}
		rh.SetNoDefaultContentType(true)
		var sc httpcore.Scan
		for k := range rh.All() {
			sc.Note(k)
		}
		cx.Prepare(&msg, &sc, false)
		_ = route.Pool().Key(&msg, cx.Client())
		out = rh.AppendBytes(out[:0])
	}
}

// BenchmarkResponseHead is the response step: the head checked, given the core's response
// side and rendered for the client.
func BenchmarkResponseHead(b *testing.B) {
	raw := []byte("HTTP/1.1 200 OK\r\nServer: nginx/1.22.1\r\nDate: Tue, 01 Dec 2026 20:05:13 GMT\r\nContent-Type: text/html\r\nContent-Length: 44\r\nLast-Modified: Tue, 01 Dec 2026 20:05:12 GMT\r\nConnection: keep-alive\r\nETag: \"6b0f2878-2c\"\r\nAccept-Ranges: bytes\r\n\r\n")
	_, t := benchCore(b)
	var rh fasthttp.RequestHeader
	rh.SetRequestURI("/")
	rh.SetHost("bench.example")
	msg := reqMsg{h: &rh, proto: http11}
	var cx httpcore.Exchange
	cx.Begin(t, t.Listener("web"), &msg, httpcore.Conn{Peer: netip.MustParseAddr("127.0.0.1")})
	cx.Route(&msg)
	be := t.Pool("p").Upstream.Backends()[0]
	var rm respMsg
	var out []byte
	b.ReportAllocs()
	b.SetBytes(int64(len(raw)))
	for range b.N {
		var r respHead
		if !checkResponse(raw, &r) {
			b.Fatal("refused")
		}
		rm.reset(raw, &r)
		sc := r.scan
		cx.StripHopByHop(&rm, &sc, false, false)
		_ = cx.Respond(&msg, &rm, be)
		out = rm.render(out[:0], respMode{})
	}
}

// BenchmarkChunkDecode decodes and re-encodes a chunked body of 64 chunks of 1 KiB.
func BenchmarkChunkDecode(b *testing.B) {
	var body []byte
	piece := bytes.Repeat([]byte("x"), 1024)
	for range 64 {
		body = appendChunk(body, piece)
	}
	body = appendLastChunk(body, nil)
	var d chunkDecoder
	var out []byte
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for range b.N {
		d.reset()
		out = out[:0]
		for p := body; len(p) > 0 && !d.done(); {
			n, data, err := d.decode(p)
			if err != nil {
				b.Fatal(err)
			}
			p = p[n:]
			out = appendChunk(out, data)
		}
	}
}

// BenchmarkForwardParallel runs 64 keep-alive clients at once (b.RunParallel's goroutines
// each take clients in turn), so that shards serve batches of ready connections.
func BenchmarkForwardParallel(b *testing.B) {
	addr := fixedBackend(b)
	cfg := testConfig(testPool("p", "roundrobin", addr))
	cfg.Listeners[0].ExposeBackend = false
	te := startEngine(b, cfg)
	clients := make(chan *keepAliveClient, 64)
	for range 64 {
		k := newKeepAliveClient(b, te.addr)
		k.do(b)
		clients <- k
	}
	b.ReportAllocs()
	b.SetParallelism(32)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		k := <-clients
		for pb.Next() {
			k.do(b)
		}
		clients <- k
	})
}

// BenchmarkForwardClose is a request per client connection (Connection: close): accept,
// head, a pooled backend connection, the response, close.
func BenchmarkForwardClose(b *testing.B) {
	addr := fixedBackend(b)
	cfg := testConfig(testPool("p", "roundrobin", addr))
	cfg.Listeners[0].ExposeBackend = false
	te := startEngine(b, cfg)
	req := []byte("GET / HTTP/1.1\r\nHost: bench.example\r\nConnection: close\r\n\r\n")
	buf := make([]byte, 4096)
	one := func() {
		c, err := net.Dial("tcp", te.addr)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.Write(req); err != nil {
			b.Fatal(err)
		}
		for {
			if _, err := c.Read(buf); err != nil {
				break
			}
		}
		_ = c.Close()
	}
	for range 100 {
		one()
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		one()
	}
}

// BenchmarkManyBackends forwards keep-alive requests from 64 clients round robin over 2 and
// over 2000 backends (one listener each, answered at once): the engine's cost per request
// should not depend on the backend count (docs/performance.md, "Many backends").
func BenchmarkManyBackends(b *testing.B) {
	for _, n := range []int{2, 2000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			addrs := make([]string, n)
			for i := range addrs {
				addrs[i] = fixedBackend(b)
			}
			pc := testPool("p", "roundrobin", addrs...)
			pc.KeepAlive.MaxIdle = 4
			cfg := testConfig(pc)
			cfg.Listeners[0].ExposeBackend = false
			te := startEngine(b, cfg)
			clients := make(chan *keepAliveClient, 64)
			for range 64 {
				clients <- newKeepAliveClient(b, te.addr)
			}
			warm := func(k int) {
				var wg sync.WaitGroup
				for range 64 {
					wg.Go(func() {
						c := <-clients
						for range k / 64 {
							c.do(b)
						}
						clients <- c
					})
				}
				wg.Wait()
			}
			warm(4*n + 1024) // every backend's connections on both shards
			b.ReportAllocs()
			b.SetParallelism(32)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				k := <-clients
				for pb.Next() {
					k.do(b)
				}
				clients <- k
			})
		})
	}
}
