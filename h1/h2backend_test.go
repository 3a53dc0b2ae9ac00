//go:build linux

package h1

import (
	"crypto/sha256"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"ballast/config"
	"ballast/h2mux"
	"ballast/internal/testcert"
)

// h2cBackend runs h as an HTTP/2 server with prior knowledge (h2c) on a fresh loopback port;
// conns counts the connections it accepted.
func h2cBackend(t testing.TB, h http.HandlerFunc, conns *atomic.Int64, setup ...func(*http.Server)) (string, *http.Server) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	srv.Protocols = new(http.Protocols)
	srv.Protocols.SetUnencryptedHTTP2(true)
	for _, f := range setup {
		f(srv)
	}
	if conns != nil {
		srv.ConnState = func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				conns.Add(1)
			}
		}
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String(), srv
}

// h2TLSEngine serves cfg's listener over TLS, HTTP/2 by ALPN on the shards (SetHTTP2).
func h2TLSEngine(t testing.TB, cfg *config.Config) *testEngine {
	t.Helper()
	tc := &tls.Config{Certificates: []tls.Certificate{testcert.New(t, "app.test")}, NextProtos: []string{"h2", "http/1.1"}}
	te := serveEngine(t, cfg, func(e *Engine) {
		e.SetHTTP2(func(l *config.Listener) h2mux.Config {
			return h2mux.Config{MaxConcurrentStreams: 100, StreamWindow: 1 << 20, ConnWindow: 4 << 20, MaxHeaderListSize: l.MaxHeaderBytes}
		}, new(h2mux.Counters))
	}, func(e *Engine, name string, ln net.Listener) error { return e.ServeTLS(name, ln, tc) })
	return te
}

// h2TLSClient speaks HTTP/2 over TLS (ALPN h2) and trusts any certificate.
func h2TLSClient() *http.Client {
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, ForceAttemptHTTP2: true, DisableCompression: true}}
}

func h2cPool(name string, addrs ...string) config.Pool {
	p := testPool(name, "roundrobin", addrs...)
	p.Protocol = "h2c"
	return p
}

// A pool with protocol h2c is reached over HTTP/2 from the shards, for HTTP/1.1 clients and
// for h2c clients (the same cases over both): bodies with and without a length, request
// trailers, HEAD, response trailers (grpc-status) as chunked trailers to HTTP/1.1 and as
// trailing HEADERS to HTTP/2, a response larger than the stream window, the core's 502.
// The same cases run against a pool with protocol h2 (HTTP/2 over TLS, ALPN h2, verified).
func TestH2Backend(t *testing.T) {
	for _, kind := range []string{config.BackendH2C, config.BackendH2} {
		t.Run(kind, func(t *testing.T) { testH2Backend(t, kind) })
	}
}

func testH2Backend(t *testing.T, kind string) {
	var conns atomic.Int64
	h := func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor != 2 {
			http.Error(w, "not HTTP/2: "+r.Proto, http.StatusHTTPVersionNotSupported)
			return
		}
		if (r.TLS != nil) != (kind == config.BackendH2) {
			http.Error(w, "TLS where it should not be, or none where it should", http.StatusMisdirectedRequest)
			return
		}
		echoHandler(w, r)
	}
	var pool config.Pool
	connsp := &conns
	if kind == config.BackendH2 {
		be := newTLSBackend(t, h, nil)
		pool, connsp = h2TLSPool("p", be), &be.conns
	} else {
		addr, _ := h2cBackend(t, h, &conns)
		pool = h2cPool("p", addr)
	}
	cfg := testConfig(pool)
	cfg.Routes = append([]config.Route{{PathPrefix: "/none/", Pool: "down"}}, cfg.Routes...)
	down := h2cPool("down", "127.0.0.1:1")
	down.Protocol, down.TLS = kind, pool.TLS
	down.Retries.Attempts = 1
	cfg.Pools = append(cfg.Pools, down)
	tcfg := *cfg
	tcfg.Listeners = append([]config.Listener(nil), cfg.Listeners...)
	tcfg.Listeners[0].H2C = false
	tlsEngine := h2TLSEngine(t, &tcfg)
	te, _ := h2cEngine(t, cfg, nil)
	digest := func(b string) string { s := sha256.Sum256([]byte(b)); return fmt.Sprintf("%x", s[:8]) }
	body := strings.Repeat("x", 100<<10)
	for _, plane := range []struct {
		name   string
		client *http.Client
		proto  int
		te     *testEngine
	}{{"http1", testClient(), 1, te}, {"h2c", h2cClient(), 2, te}, {"h2-tls", h2TLSClient(), 2, tlsEngine}} {
		te := plane.te
		for _, tc := range []struct {
			name, method, path string
			body               string
			unknownLength      bool
			trailer            http.Header
			respTrailer        http.Header
			status             int
			echo, respBody     string
		}{
			{name: "get", method: "GET", path: "/a?b=1", status: 200, echo: `GET /a?b=1 cl=0 te= n=0`, respBody: "body:/a"},
			{name: "head", method: "HEAD", path: "/h", status: 200, echo: `HEAD /h cl=0 te= n=0`},
			{name: "body with length", method: "POST", path: "/p", body: body, status: 200,
				echo: fmt.Sprintf("POST /p cl=%d te= n=%d", len(body), len(body))},
			{name: "body without length", method: "PUT", path: "/u", body: body, unknownLength: true, status: 200,
				echo: fmt.Sprintf("PUT /u cl=-1 te= n=%d", len(body))},
			{name: "request trailers", method: "POST", path: "/t", body: "abc", unknownLength: true, trailer: http.Header{"X-Sum": {"42"}},
				status: 200, echo: `POST /t cl=-1 te= n=3 cookie="" trailer="42"`},
			{name: "response trailers", method: "GET", path: "/trailers", status: 200, respBody: "body:/trailers",
				respTrailer: http.Header{"X-Resp-Sum": {"7"}, "Grpc-Status": {"0"}}},
			{name: "response trailers after 1 MiB", method: "GET", path: "/trailers-big", status: 200, respBody: strings.Repeat("y", 1<<20) + "body:/trailers-big",
				respTrailer: http.Header{"X-Resp-Sum": {"7"}, "Grpc-Status": {"0"}}},
			{name: "backend down", method: "GET", path: "/none/x", status: 502},
		} {
			t.Run(plane.name+"/"+tc.name, func(t *testing.T) {
				var rd io.Reader
				if tc.body != "" {
					rd = strings.NewReader(tc.body)
					if tc.unknownLength {
						rd = io.MultiReader(strings.NewReader(tc.body[:len(tc.body)/2]), strings.NewReader(tc.body[len(tc.body)/2:]))
					}
				}
				req, err := http.NewRequest(tc.method, te.url(tc.path), rd)
				if err != nil {
					t.Fatal(err)
				}
				if tc.unknownLength {
					req.ContentLength = -1
				}
				req.Trailer = tc.trailer
				resp, err := plane.client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil {
					t.Fatal(err)
				}
				if tc.status == 502 && resp.StatusCode == 503 && plane.name == "h2c" {
					tc.status = 503 // the first plane's 502 marked the backend unreachable
				}
				if resp.ProtoMajor != plane.proto || resp.StatusCode != tc.status {
					t.Fatalf("%s %d, want HTTP/%d %d (body %q)", resp.Proto, resp.StatusCode, plane.proto, tc.status, b)
				}
				if got := resp.Header.Get("X-Echo"); !strings.Contains(got, tc.echo) {
					t.Errorf("backend saw %q, want it to contain %q", got, tc.echo)
				}
				if tc.body != "" && resp.Header.Get("X-Digest") != digest(tc.body) {
					t.Errorf("body digest %s at the backend, want %s", resp.Header.Get("X-Digest"), digest(tc.body))
				}
				if tc.respBody != "" && string(b) != tc.respBody {
					t.Errorf("body %.40q (%d bytes), want %.40q (%d)", b, len(b), tc.respBody, len(tc.respBody))
				}
				for k, v := range tc.respTrailer {
					if got := resp.Trailer.Values(k); len(got) != 1 || got[0] != v[0] {
						t.Errorf("trailer %s: %q, want %q (trailers %v)", k, got, v, resp.Trailer)
					}
				}
			})
		}
	}
	if st := tlsEngine.H2BackendStats(); st.Streams < 7 {
		t.Errorf("TLS engine: %d HTTP/2 backend streams", st.Streams)
	}
	st := te.H2BackendStats()
	n := connsp.Load()
	if st.Streams < 14 || st.Connects < 1 || n < 1 || n > 2*int64(len(te.shards))*h2bMaxConns {
		t.Errorf("streams %d, connects %d, backend connections %d: want every request on a few multiplexed connections", st.Streams, st.Connects, n)
	}
	if kind == config.BackendH2 {
		if st := te.Stats(); st.BackendTLS < 1 || st.BackendTLS > int64(n) || st.BackendTLSFailures != 0 {
			t.Errorf("handshakes %d, failures %d, for %d backend connections", st.BackendTLS, st.BackendTLSFailures, n)
		}
	}
}

// Many requests at once share the backend's connections: with SETTINGS_MAX_CONCURRENT_STREAMS
// of 4 each connection carries at most 4, further ones open (up to h2bMaxConns per shard)
// and the rest wait for a slot (counted); past h2bMaxWaiting waiting, attempts fail at once
// (counted) and the client gets 502, no more.
func TestH2BackendStreamBound(t *testing.T) {
	var conns atomic.Int64
	var inflight, peak atomic.Int64
	release := make(chan struct{})
	addr, _ := h2cBackend(t, func(w http.ResponseWriter, r *http.Request) {
		n := inflight.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		<-release
		inflight.Add(-1)
		io.WriteString(w, "ok")
	}, &conns, func(s *http.Server) { s.HTTP2 = &http.HTTP2Config{MaxConcurrentStreams: 4} })
	cfg := testConfig(h2cPool("p", addr))
	cfg.Pools[0].Retries.Attempts = 1
	cfg.Pools[0].Timeouts.Connect = dur(20 * time.Second)
	te := startEngine(t, cfg)
	shards := int64(len(te.shards))
	total := int(shards)*(h2bMaxConns*4+h2bMaxWaiting) + 40
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxConnsPerHost: 0, MaxIdleConnsPerHost: total}}
	var wg sync.WaitGroup
	var ok, bad atomic.Int64
	for range total {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := c.Get(te.url("/x"))
			if err != nil {
				bad.Add(1)
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			switch {
			case resp.StatusCode == 200 && string(b) == "ok":
				ok.Add(1)
			case resp.StatusCode == 502:
				bad.Add(1)
			}
		}()
	}
	waitFor(t, "the overflow", func() bool { return te.H2BackendStats().Overflows >= 40 && te.H2BackendStats().Waits > 0 })
	if p := peak.Load(); p > shards*h2bMaxConns*4 {
		t.Errorf("%d streams at the backend at once, bound %d", p, shards*h2bMaxConns*4)
	}
	if n := conns.Load(); n > shards*h2bMaxConns {
		t.Errorf("%d backend connections, bound %d", n, shards*h2bMaxConns)
	}
	close(release)
	wg.Wait()
	st := te.H2BackendStats()
	if ok.Load()+bad.Load() != int64(total) || bad.Load() != st.Overflows || st.Waits == 0 {
		t.Errorf("ok %d, 502 %d of %d; overflows %d, waits %d", ok.Load(), bad.Load(), total, st.Overflows, st.Waits)
	}
}
