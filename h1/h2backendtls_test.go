//go:build linux

package h1

import (
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"ballast/config"
	"ballast/internal/testcert"
	"ballast/upstream"
)

// h2TLSPool is a pool named name with protocol h2 reaching be (verified with its CA and
// name).
func h2TLSPool(name string, be *tlsBackend) config.Pool {
	p := testPool(name, "roundrobin", be.addr)
	p.Protocol = config.BackendH2
	p.TLS = &config.BackendTLS{CA: be.ca, ServerName: "backend.test"}
	return p
}

// h2Proto answers with what the backend saw: the protocol, TLS's ALPN and server name.
func h2Proto(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	alpn, sni := "", ""
	if r.TLS != nil {
		alpn, sni = r.TLS.NegotiatedProtocol, r.TLS.ServerName
	}
	io.WriteString(w, r.Proto+" alpn="+alpn+" sni="+sni)
}

// A pool with protocol h2 whose backend's certificate does not verify (another CA, another
// name) or that does not negotiate h2 by ALPN (a TLS server offering no ALPN, one offering
// http/1.1 only) gets 502: nothing of the request sent, the failure logged with the backend's
// address and counted (BackendTLSFailures, one connect failure), no HTTP/2 connection left;
// insecure_skip_verify reaches it over HTTP/2.
func TestH2BackendTLSFails(t *testing.T) {
	be := newTLSBackend(t, h2Proto, nil)
	otherCA, _ := testcert.Write(t, t.TempDir(), "other", 2, "backend.test")
	noALPN := plainTLSBackend(t, nil)
	h1Only := plainTLSBackend(t, []string{"http/1.1"})
	for _, tc := range []struct {
		name string
		addr string
		tls  config.BackendTLS
		want int
		log  string
	}{
		{"wrong CA", be.addr, config.BackendTLS{CA: otherCA, ServerName: "backend.test"}, 502, "certificate signed by unknown authority"},
		{"wrong name", be.addr, config.BackendTLS{CA: be.ca, ServerName: "other.test"}, 502, "not other.test"},
		{"no ALPN", noALPN.addr, config.BackendTLS{CA: noALPN.ca, ServerName: "backend.test"}, 502, "did not negotiate HTTP/2"},
		{"http/1.1 only", h1Only.addr, config.BackendTLS{CA: h1Only.ca, ServerName: "backend.test"}, 502, "no application protocol"},
		{"insecure_skip_verify", be.addr, config.BackendTLS{InsecureSkipVerify: true}, 200, ""},
	} {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			var lb logBuffer
			pc := testPool("p", "roundrobin", tc.addr)
			pc.Protocol, pc.TLS = config.BackendH2, &tc.tls
			te := startEngineWith(t, testConfig(pc), withLog(&lb))
			resp, b := get(t, testClient(), "GET", te.url("/"), nil, nil)
			if resp.StatusCode != tc.want {
				t.Fatalf("%d %q, want %d", resp.StatusCode, b, tc.want)
			}
			st, h2 := te.Stats(), te.H2BackendStats()
			if tc.want == 200 {
				if st.BackendTLS != 1 || st.BackendTLSFailures != 0 || h2.Streams != 1 || string(b) != "HTTP/2.0 alpn=h2 sni=" {
					t.Fatalf("handshakes %d, failures %d, streams %d, %q", st.BackendTLS, st.BackendTLSFailures, h2.Streams, b)
				}
				return
			}
			if st.BackendTLSFailures != 1 || st.BackendTLS != 0 || st.ConnectFailures != 1 || h2.Streams != 0 {
				t.Fatalf("failures %d, handshakes %d, connect failures %d, streams %d; want 1, 0, 1, 0", st.BackendTLSFailures, st.BackendTLS, st.ConnectFailures, h2.Streams)
			}
			waitFor(t, "the failed connection closed", func() bool { return te.H2BackendStats().Conns == 0 })
			log := lb.String()
			if !strings.Contains(log, "backend TLS handshake failed") || !strings.Contains(log, tc.addr) || !strings.Contains(log, tc.log) {
				t.Fatalf("log:\n%s\nwant the handshake failure, %s and %q", log, tc.addr, tc.log)
			}
		})
	}
}

// plainTLSBackend is an HTTPS backend (HTTP/1.1 only) whose TLS offers the ALPN protocols
// alpn (none when nil).
func plainTLSBackend(t *testing.T, alpn []string) *tlsBackend {
	t.Helper()
	certFile, keyFile := testcert.Write(t, t.TempDir(), "h1", 3, "backend.test")
	kp, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{kp}, NextProtos: alpn})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(h2Proto)}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return &tlsBackend{addr: ln.Addr().String(), ca: certFile, srv: srv}
}

// Many streams of one client share the shard's one TLS connection to an h2 backend: one
// handshake for all of them (then none while it lives).
func TestH2BackendTLSMultiplexed(t *testing.T) {
	be := newTLSBackend(t, h2Proto, nil)
	te, _ := h2cEngine(t, testConfig(h2TLSPool("p", be)), nil)
	c := h2cClient()
	for i := range 30 {
		resp, err := c.Get(te.url("/"))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != "HTTP/2.0 alpn=h2 sni=backend.test" {
			t.Fatalf("request %d: %d %q", i, resp.StatusCode, b)
		}
	}
	if st, h2 := te.Stats(), te.H2BackendStats(); st.BackendTLS != h2.Connects || h2.Connects > int64(len(te.shards)) || be.conns.Load() != h2.Connects || h2.Streams != 30 {
		t.Fatalf("handshakes %d, connects %d, backend connections %d, streams %d: want one connection per shard used at most, 30 streams",
			st.BackendTLS, h2.Connects, be.conns.Load(), h2.Streams)
	}
}

// A reload that changes an h2 pool's tls: the connection made under the old one takes no more
// streams (it goes away), the next request is verified under the new one (a name the
// certificate lacks: 502), and back to the good tls a new connection is made; a reload that
// keeps tls keeps the connection.
func TestH2BackendTLSReload(t *testing.T) {
	be := newTLSBackend(t, h2Proto, nil)
	good := config.BackendTLS{CA: be.ca, ServerName: "backend.test"}
	pc := h2TLSPool("p", be)
	te := startEngine(t, testConfig(pc))
	c := testClient()
	reload := func(bt *config.BackendTLS) {
		t.Helper()
		pc := testPool("p", "roundrobin", be.addr)
		pc.Protocol, pc.TLS = config.BackendH2, bt
		next := testConfig(pc)
		next.Listeners[0].Address = te.addr
		prev := te.pools["p"]
		pool, err := upstream.NewPool(next.Pools[0].Spec(nil), prev)
		if err != nil {
			t.Fatal(err)
		}
		if err := te.Swap(next, map[string]*upstream.Pool{"p": pool}); err != nil {
			t.Fatal(err)
		}
		te.pools["p"] = pool
		prev.Close()
	}
	status := func() int {
		t.Helper()
		resp, _ := get(t, c, "GET", te.url("/"), nil, nil)
		return resp.StatusCode
	}
	if s := status(); s != 200 {
		t.Fatalf("first: %d", s)
	}
	conns := be.conns.Load()
	same := good
	reload(&same) // equal by value, another pointer: the connection serves on
	if s := status(); s != 200 || te.Stats().BackendTLS != 1 || be.conns.Load() != conns {
		t.Fatalf("after a reload that kept tls: %d, %d handshakes, %d connections (want the first one reused)", s, te.Stats().BackendTLS, be.conns.Load()-conns)
	}
	wrong := good
	wrong.ServerName = "other.test"
	reload(&wrong)
	if s := status(); s != 502 {
		t.Fatalf("after a reload to a name the certificate does not have: %d, want 502 (the old connection not used)", s)
	}
	if st := te.Stats(); st.BackendTLSFailures != 1 || st.BackendTLS != 1 {
		t.Fatalf("failures %d, handshakes %d", st.BackendTLSFailures, st.BackendTLS)
	}
	waitFor(t, "the connection made under the old tls gone", func() bool { return te.H2BackendStats().Conns == 0 })
	reload(&good)
	// The failure ejected the backend for upstream.UnreachableHoldoff.
	waitFor(t, "a request after the reload back", func() bool { return status() == 200 })
	if st := te.Stats(); st.BackendTLS != 2 {
		t.Fatalf("handshakes %d, want a second one under the restored tls", st.BackendTLS)
	}
}

// A backend that accepts and never answers the handshake: timeouts.connect ends it (502,
// counted, logged), the streams waiting for it do not wait for more.
func TestH2BackendTLSHandshakeTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
		}
	}()
	pc := testPool("p", "roundrobin", ln.Addr().String())
	pc.Protocol, pc.TLS = config.BackendH2, &config.BackendTLS{InsecureSkipVerify: true}
	pc.Timeouts.Connect = dur(300 * time.Millisecond)
	var lb logBuffer
	te := startEngineWith(t, testConfig(pc), withLog(&lb))
	start := time.Now()
	resp, _ := get(t, testClient(), "GET", te.url("/"), nil, nil)
	if resp.StatusCode != 502 && resp.StatusCode != 504 {
		t.Fatalf("%d, want 502 or 504", resp.StatusCode)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("took %v", d)
	}
	waitFor(t, "the handshake given up on, counted and logged", func() bool {
		return te.Stats().BackendTLSFailures == 1 && strings.Contains(lb.String(), "timed out") && te.H2BackendStats().Conns == 0
	})
	waitFor(t, "no handshake left in progress", func() bool { return te.backendHandshakes.Load() == 0 })
}

// A backend that refuses connections (h2c and h2): the request's stream fails as a connect
// failure after one connection attempt (502), not after a loop of them until
// timeouts.connect.
func TestH2BackendConnectRefused(t *testing.T) {
	for _, kind := range []string{config.BackendH2C, config.BackendH2} {
		t.Run(kind, func(t *testing.T) {
			pc := h2cPool("p", "127.0.0.1:1")
			pc.Retries.Attempts = 1
			pc.Timeouts.Connect = dur(5 * time.Second)
			if kind == config.BackendH2 {
				pc.Protocol, pc.TLS = config.BackendH2, &config.BackendTLS{InsecureSkipVerify: true}
			}
			te := startEngine(t, testConfig(pc))
			start := time.Now()
			resp, _ := get(t, testClient(), "GET", te.url("/"), nil, nil)
			if resp.StatusCode != 502 || time.Since(start) > 4*time.Second {
				t.Fatalf("%d after %v, want 502 at once", resp.StatusCode, time.Since(start))
			}
			if n, f := te.H2BackendStats().Connects, te.Stats().ConnectFailures; n != 1 || f != 1 {
				t.Fatalf("%d connection attempts, %d connect failures; want 1, 1", n, f)
			}
		})
	}
}

// A flood of requests to h2 backends that stall in the handshake: at most
// maxBackendHandshakes handshakes run at once (the HTTP/1.1 backends' bound, shared), the
// connections past it fail at once (502, Stats.BackendTLSRefused), the stalled ones end at
// timeouts.connect (counted failures), and none is left in progress.
func TestH2BackendTLSHandshakeFlood(t *testing.T) {
	var addrs []string
	for range 6 {
		addr, _ := stallingBackend(t, "hello")
		addrs = append(addrs, addr)
	}
	pc := testPool("p", "roundrobin", addrs...)
	pc.Protocol, pc.TLS = config.BackendH2, &config.BackendTLS{InsecureSkipVerify: true}
	pc.Timeouts.Connect = dur(time.Second)
	pc.Retries.Attempts = 1
	te := startEngineWith(t, testConfig(pc), func(e *Engine) { e.maxBackendHandshakes.Store(2) })
	const flood = 24
	codes := make(chan int, flood)
	for range flood {
		go func() {
			resp, err := testClient().Get(te.url("/"))
			if err != nil {
				codes <- 0
				return
			}
			resp.Body.Close()
			codes <- resp.StatusCode
		}()
	}
	waitFor(t, "refusals at the bound", func() bool { return te.Stats().BackendTLSRefused >= 1 && te.backendHandshakes.Load() == 2 })
	for range flood {
		if code := <-codes; code != 502 && code != 503 {
			t.Fatalf("a flooded request got %d, want 502 (or 503 once every backend was marked unreachable)", code)
		}
	}
	waitFor(t, "the stalled handshakes' end", func() bool { return te.backendHandshakes.Load() == 0 && te.H2BackendStats().Conns == 0 })
	if st := te.Stats(); st.BackendTLSFailures < 2 || st.BackendTLS != 0 {
		t.Fatalf("failures %d (want the stalled ones, timed out), handshakes done %d", st.BackendTLSFailures, st.BackendTLS)
	}
}

// BenchmarkForwardH2Backend: an HTTP/1.1 keep-alive client's requests through the engine to
// a Go HTTP/2 backend (44 bytes) over h2c and over h2 (TLS), one after the other in one
// run: the ratio of the two is what TLS adds on the shard (records, crypto/tls) to a stream.
// Allocations are the whole process's (Go's HTTP/2 server's included).
func BenchmarkForwardH2Backend(b *testing.B) {
	page := []byte("<html><body><h1>It works!</h1></body></html>") // 44 bytes
	h := func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write(page) }
	for _, kind := range []string{config.BackendH2C, config.BackendH2} {
		b.Run(kind, func(b *testing.B) {
			var pool config.Pool
			if kind == config.BackendH2 {
				pool = h2TLSPool("p", newTLSBackend(b, h, nil))
			} else {
				addr, _ := h2cBackend(b, h, nil)
				pool = h2cPool("p", addr)
			}
			cfg := testConfig(pool)
			cfg.Listeners[0].ExposeBackend = false
			te := startEngine(b, cfg)
			k := newKeepAliveClient(b, te.addr)
			for range 100 {
				k.do(b)
			}
			if st := te.H2BackendStats(); st.Streams != 100 {
				b.Fatalf("%d HTTP/2 backend streams, want 100", st.Streams)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				k.do(b)
			}
		})
	}
}

// An h2 backend connection closed for idleness (timeouts.idle) is replaced by one whose
// handshake resumes the session the backend gave the first (the per-backend session cache,
// as for HTTP/1.1 backends over TLS).
func TestH2BackendTLSResumption(t *testing.T) {
	be := newTLSBackend(t, h2Proto, nil)
	pc := h2TLSPool("p", be)
	pc.Timeouts.Idle = dur(200 * time.Millisecond)
	te := startEngine(t, testConfig(pc))
	c := testClient()
	for i := range 2 {
		resp, b := get(t, c, "GET", te.url("/"), nil, nil)
		if resp.StatusCode != 200 || string(b) != "HTTP/2.0 alpn=h2 sni=backend.test" {
			t.Fatalf("request %d: %d %q", i, resp.StatusCode, b)
		}
		waitFor(t, "the idle HTTP/2 connection closed", func() bool { return te.H2BackendStats().Conns == 0 })
	}
	if st := te.Stats(); st.BackendTLS != 2 || st.BackendTLSResumed != 1 || be.conns.Load() != 2 {
		t.Fatalf("handshakes %d, resumed %d, backend connections %d; want 2, 1, 2", st.BackendTLS, st.BackendTLSResumed, be.conns.Load())
	}
}
