//go:build linux

package h1

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"ballast/config"
	"ballast/internal/testcert"
	"ballast/upstream"
)

// tlsBackend is an HTTPS backend (Go's crypto/tls server) with a certificate for
// backend.test and 127.0.0.1 that is its own CA (ca, a PEM file for the pool's tls.ca);
// conns counts the TCP connections it accepted.
type tlsBackend struct {
	addr  string
	ca    string
	conns atomic.Int64
	srv   *http.Server
}

func newTLSBackend(t testing.TB, h http.HandlerFunc, setup func(*tls.Config)) *tlsBackend {
	t.Helper()
	dir := t.TempDir()
	certFile, keyFile := testcert.Write(t, dir, "backend", 1, "backend.test")
	kp, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tb := &tlsBackend{addr: ln.Addr().String(), ca: certFile}
	tc := &tls.Config{Certificates: []tls.Certificate{kp}}
	if setup != nil {
		setup(tc)
	}
	tb.srv = &http.Server{Handler: h, TLSConfig: tc, ConnState: func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			tb.conns.Add(1)
		}
	}}
	go func() { _ = tb.srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() { _ = tb.srv.Close() })
	return tb
}

// tlsPool is testPool reaching its backends over TLS with tls.
func tlsPool(bt config.BackendTLS, addrs ...string) config.Pool {
	pc := testPool("p", "roundrobin", addrs...)
	pc.TLS = &bt
	return pc
}

// logBuffer is an slog handler's output, safe to read while the engine writes.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// withLog has the engine log into lb.
func withLog(lb *logBuffer) func(*Engine) {
	return func(e *Engine) { e.logger = slog.New(slog.NewTextHandler(lb, nil)) }
}

// whoAmI answers with what the backend saw of the connection: TLS, the server name asked
// for, the protocol negotiated, the client certificate's count, and the request's body size.
func whoAmI(w http.ResponseWriter, r *http.Request) {
	n, _ := io.Copy(io.Discard, r.Body)
	if r.TLS == nil {
		io.WriteString(w, "cleartext")
		return
	}
	fmt.Fprintf(w, "tls sni=%s alpn=%s certs=%d body=%d", r.TLS.ServerName, r.TLS.NegotiatedProtocol, len(r.TLS.PeerCertificates), n)
}

// TestBackendTLS: requests reach an HTTPS backend over TLS verified with the pool's ca and
// server_name, ALPN http/1.1; N keep-alive requests of one client cost one handshake (and
// one backend connection), a body goes up; with max_requests 1 every request is a new
// connection whose handshake resumes the session the backend gave (TLS 1.3 tickets).
func TestBackendTLS(t *testing.T) {
	be := newTLSBackend(t, whoAmI, nil)
	cfg := testConfig(tlsPool(config.BackendTLS{CA: be.ca, ServerName: "backend.test"}, be.addr))
	te := startEngine(t, cfg)
	c := testClient()
	const n = 20
	for i := range n {
		var body io.Reader
		method := "GET"
		if i%2 == 1 {
			method, body = "POST", strings.NewReader(strings.Repeat("b", 1000))
		}
		resp, b := get(t, c, method, te.url("/"), body, nil)
		want := "tls sni=backend.test alpn=http/1.1 certs=0 body=0"
		if body != nil {
			want = strings.Replace(want, "body=0", "body=1000", 1)
		}
		if resp.StatusCode != 200 || string(b) != want {
			t.Fatalf("request %d: %d %q, want %q", i, resp.StatusCode, b, want)
		}
	}
	st := te.Stats()
	if st.BackendTLS != 1 || be.conns.Load() != 1 || st.Connects != 1 {
		t.Fatalf("%d requests: %d handshakes, %d backend connections accepted, %d connects; want 1, 1, 1", n, st.BackendTLS, be.conns.Load(), st.Connects)
	}
	if st.BackendTLSFailures != 0 || st.BackendTLSResumed != 0 {
		t.Fatalf("failures %d, resumed %d", st.BackendTLSFailures, st.BackendTLSResumed)
	}

	t.Run("resumption", func(t *testing.T) {
		be := newTLSBackend(t, whoAmI, nil)
		pc := tlsPool(config.BackendTLS{CA: be.ca, ServerName: "backend.test"}, be.addr)
		pc.KeepAlive.MaxRequests = 1
		te := startEngine(t, testConfig(pc))
		for i := range 4 {
			if resp, b := get(t, c, "GET", te.url("/"), nil, nil); resp.StatusCode != 200 || !strings.HasPrefix(string(b), "tls ") {
				t.Fatalf("request %d: %d %q", i, resp.StatusCode, b)
			}
		}
		st := te.Stats()
		if st.BackendTLS != 4 || be.conns.Load() != 4 {
			t.Fatalf("max_requests 1: %d handshakes on %d connections, want 4", st.BackendTLS, be.conns.Load())
		}
		if st.BackendTLSResumed != 3 {
			t.Fatalf("%d of the 3 later handshakes resumed a session, want all", st.BackendTLSResumed)
		}
	})
}

// TestBackendTLSClientCertificate: a backend that requires a client certificate gets the
// pool's cert; without one its handshake fails and the request gets 502.
func TestBackendTLSClientCertificate(t *testing.T) {
	dir := t.TempDir()
	clientCert, clientKey := testcert.Write(t, dir, "client", 7, "ballast.test")
	pem, err := os.ReadFile(clientCert)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	be := newTLSBackend(t, whoAmI, func(c *tls.Config) {
		c.ClientAuth, c.ClientCAs = tls.RequireAndVerifyClientCert, roots
	})
	withCert := testConfig(tlsPool(config.BackendTLS{CA: be.ca, ServerName: "backend.test", Cert: clientCert, Key: clientKey}, be.addr))
	te := startEngine(t, withCert)
	if resp, b := get(t, testClient(), "GET", te.url("/"), nil, nil); resp.StatusCode != 200 || string(b) != "tls sni=backend.test alpn=http/1.1 certs=1 body=0" {
		t.Fatalf("with the client certificate: %d %q", resp.StatusCode, b)
	}
	te2 := startEngine(t, testConfig(tlsPool(config.BackendTLS{CA: be.ca, ServerName: "backend.test"}, be.addr)))
	if resp, _ := get(t, testClient(), "GET", te2.url("/"), nil, nil); resp.StatusCode != 502 {
		t.Fatalf("without it: %d, want 502", resp.StatusCode)
	}
	// TLS 1.3: the client's handshake ends before the server checks its certificate; the
	// refusal is the alert read with the response.
	if st := te2.Stats(); st.BackendTLS+st.BackendTLSFailures != 1 {
		t.Fatalf("handshakes %d, failures %d: want the one", st.BackendTLS, st.BackendTLSFailures)
	}
}

// TestBackendTLSVerifyFails: a backend whose certificate the pool's tls does not accept
// (another CA, another name) gets no request: 502, a log line naming the backend and the
// reason, and the failure counted; insecure_skip_verify (only when written) accepts it.
func TestBackendTLSVerifyFails(t *testing.T) {
	be := newTLSBackend(t, whoAmI, nil)
	otherCA, _ := testcert.Write(t, t.TempDir(), "other", 2, "backend.test")
	for _, tc := range []struct {
		name string
		tls  config.BackendTLS
		want int
		log  string
	}{
		{"wrong CA", config.BackendTLS{CA: otherCA, ServerName: "backend.test"}, 502, "certificate signed by unknown authority"},
		{"wrong name", config.BackendTLS{CA: be.ca, ServerName: "other.test"}, 502, "not other.test"},
		{"system roots", config.BackendTLS{ServerName: "backend.test"}, 502, "x509"},
		{"insecure_skip_verify", config.BackendTLS{InsecureSkipVerify: true}, 200, ""},
	} {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			var lb logBuffer
			te := startEngineWith(t, testConfig(tlsPool(tc.tls, be.addr)), withLog(&lb))
			before := be.conns.Load()
			resp, b := get(t, testClient(), "GET", te.url("/"), nil, nil)
			if resp.StatusCode != tc.want {
				t.Fatalf("%d %q, want %d", resp.StatusCode, b, tc.want)
			}
			st := te.Stats()
			if tc.want == 200 {
				if st.BackendTLS != 1 || st.BackendTLSFailures != 0 || string(b) != "tls sni= alpn=http/1.1 certs=0 body=0" {
					t.Fatalf("handshakes %d, failures %d, %q", st.BackendTLS, st.BackendTLSFailures, b)
				}
				return
			}
			if st.BackendTLSFailures != 1 || st.BackendTLS != 0 || st.ConnectFailures != 1 {
				t.Fatalf("failures %d, handshakes %d, connect failures %d; want 1, 0, 1", st.BackendTLSFailures, st.BackendTLS, st.ConnectFailures)
			}
			if be.conns.Load() != before+1 {
				t.Fatalf("%d connections reached the backend, want 1", be.conns.Load()-before)
			}
			log := lb.String()
			if !strings.Contains(log, "backend TLS handshake failed") || !strings.Contains(log, be.addr) || !strings.Contains(log, tc.log) {
				t.Fatalf("log:\n%s\nwant the handshake failure, %s and %q", log, be.addr, tc.log)
			}
		})
	}
}

// TestBackendTLSBadCARefused: a pool whose ca cannot be read refuses the configuration (at
// start and at a reload, which keeps the running one) instead of failing requests or
// falling back to cleartext.
func TestBackendTLSBadCARefused(t *testing.T) {
	be := newTLSBackend(t, whoAmI, nil)
	good := testConfig(tlsPool(config.BackendTLS{CA: be.ca, ServerName: "backend.test"}, be.addr))
	te := startEngine(t, good)
	bad := testConfig(tlsPool(config.BackendTLS{CA: "/nonexistent/ca.pem"}, be.addr))
	bad.Listeners[0].Address = te.addr
	pool, err := upstream.NewPool(bad.Pools[0].Spec(nil), te.pools["p"])
	if err != nil {
		t.Fatal(err)
	}
	if err := te.Swap(bad, map[string]*upstream.Pool{"p": pool}); err == nil || !strings.Contains(err.Error(), "/nonexistent/ca.pem") {
		t.Fatalf("a reload with an unreadable ca: %v", err)
	}
	pool.Close()
	if resp, b := get(t, testClient(), "GET", te.url("/"), nil, nil); resp.StatusCode != 200 || !strings.HasPrefix(string(b), "tls ") {
		t.Fatalf("after the refused reload: %d %q", resp.StatusCode, b)
	}
}

// stallingBackend accepts TCP connections and plays the server's side of a handshake only
// as far as stall: "hello" reads the ClientHello and answers nothing, "record" also sends
// the first bytes of a ServerHello record and stops in its middle. closed reports each
// connection the proxy closed.
func stallingBackend(t testing.TB, stall string) (addr string, closed chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed = make(chan struct{}, 64)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 4096)
				if _, err := c.Read(buf); err != nil {
					closed <- struct{}{}
					return
				}
				if stall == "record" {
					_, _ = c.Write([]byte("\x16\x03\x03\x00\x7a\x02\x00\x00\x76\x03\x03")) // 11 of 127 bytes
				}
				for {
					if _, err := c.Read(buf); err != nil {
						closed <- struct{}{}
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() { _ = ln.Close() })
	return ln.Addr().String(), closed
}

// TestBackendTLSHandshakeTimeout: a backend that stalls in the handshake (before its first
// byte, or in the middle of its first record) fails the request within timeouts.connect as
// a connect failure (502), counted, and its connection is closed at once, the handshake's
// goroutine gone.
func TestBackendTLSHandshakeTimeout(t *testing.T) {
	for _, stall := range []string{"hello", "record"} {
		t.Run(stall, func(t *testing.T) {
			addr, closed := stallingBackend(t, stall)
			pc := tlsPool(config.BackendTLS{InsecureSkipVerify: true}, addr)
			pc.Timeouts.Connect = dur(300 * time.Millisecond)
			te := startEngine(t, testConfig(pc))
			start := time.Now()
			resp, _ := get(t, testClient(), "GET", te.url("/"), nil, nil)
			took := time.Since(start)
			if resp.StatusCode != 502 || took < 250*time.Millisecond || took > 3*time.Second {
				t.Fatalf("%d after %v, want 502 after timeouts.connect (300ms)", resp.StatusCode, took)
			}
			select { // the shard cancels the handshake: its goroutine's own deadline is 1 s later
			case <-closed:
			case <-time.After(500 * time.Millisecond):
				t.Fatal("the stalled connection stayed open after the 502")
			}
			st := te.Stats()
			if st.BackendTLSFailures != 1 || st.ConnectFailures != 1 || st.BackendTLS != 0 {
				t.Fatalf("failures %d, connect failures %d, handshakes %d", st.BackendTLSFailures, st.ConnectFailures, st.BackendTLS)
			}
			waitFor(t, "the handshake's goroutine", func() bool { return te.backendHandshakes.Load() == 0 })
			waitFor(t, "the backend connection's record", func() bool { return te.Stats().BackendConns == 0 })
		})
	}
}

// TestBackendTLSHandshakeFlood: backend handshakes in progress never pass
// maxBackendHandshakes; a request past it fails at once as a connect failure (counted)
// instead of starting one more, and once the stalled ones time out, handshakes start again.
func TestBackendTLSHandshakeFlood(t *testing.T) {
	addr, _ := stallingBackend(t, "hello")
	pc := tlsPool(config.BackendTLS{InsecureSkipVerify: true}, addr)
	pc.Timeouts.Connect = dur(time.Second)
	pc.Retries.Attempts = 1
	te := startEngineWith(t, testConfig(pc), func(e *Engine) { e.maxBackendHandshakes.Store(3) })
	const flood = 10
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
	waitFor(t, "the refusals", func() bool { return te.Stats().BackendTLSRefused == flood-3 })
	if n := te.backendHandshakes.Load(); n != 3 {
		t.Fatalf("%d handshakes in progress, want the bound, 3", n)
	}
	for range flood {
		if code := <-codes; code != 502 {
			t.Fatalf("a flooded request got %d, want 502", code)
		}
	}
	waitFor(t, "the stalled handshakes' end", func() bool { return te.backendHandshakes.Load() == 0 })
	if st := te.Stats(); st.BackendTLSFailures != 3 || st.BackendTLSRefused != flood-3 {
		t.Fatalf("failures %d (want the 3 timed out), refused %d", st.BackendTLSFailures, st.BackendTLSRefused)
	}
}

// TestBackendTLS64MiB moves 64 MiB each way (with a length and chunked) between a client and
// an HTTPS backend, over a plain and a TLS listener: records on the shard both sides.
func TestBackendTLS64MiB(t *testing.T) {
	be := newTLSBackend(t, bigHandler, nil)
	for _, overTLS := range []bool{false, true} {
		name := "plain-listener"
		if overTLS {
			name = "tls-listener"
		}
		t.Run(name, func(t *testing.T) {
			cfg := testConfig(tlsPool(config.BackendTLS{CA: be.ca, ServerName: "backend.test"}, be.addr))
			var te *testEngine
			if overTLS {
				te = startTLSEngine(t, cfg)
			} else {
				te = startEngine(t, cfg)
			}
			test64MiBBothWays(t, te)
			if st := te.Stats(); st.BackendTLS == 0 || st.BackendTLSFailures != 0 {
				t.Fatalf("handshakes %d, failures %d", st.BackendTLS, st.BackendTLSFailures)
			}
		})
	}
}

// TestBackendTLSReload: a reload that changes the pool's tls takes effect for new
// connections, and the idle ones made under the old tls are not reused; a reload that
// leaves it alone keeps them.
func TestBackendTLSReload(t *testing.T) {
	be := newTLSBackend(t, whoAmI, nil)
	good := config.BackendTLS{CA: be.ca, ServerName: "backend.test"}
	cfg := testConfig(tlsPool(good, be.addr))
	te := startEngine(t, cfg)
	c := testClient()
	reload := func(bt *config.BackendTLS, idle time.Duration) {
		t.Helper()
		pc := testPool("p", "roundrobin", be.addr)
		pc.TLS, pc.Timeouts.Idle = bt, dur(idle)
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
	reload(&good, 50*time.Second) // tls unchanged: the idle connection serves on
	if s := status(); s != 200 || te.Stats().BackendTLS != 1 {
		t.Fatalf("after a reload that kept tls: %d, %d handshakes (want the first connection reused)", s, te.Stats().BackendTLS)
	}
	wrong := good
	wrong.ServerName = "other.test"
	reload(&wrong, 50*time.Second)
	if s := status(); s != 502 {
		t.Fatalf("after a reload to a name the certificate does not have: %d, want 502 (the idle connection not reused)", s)
	}
	if st := te.Stats(); st.BackendTLSFailures != 1 || st.BackendTLS != 1 {
		t.Fatalf("failures %d, handshakes %d", st.BackendTLSFailures, st.BackendTLS)
	}
	reload(&good, 50*time.Second)
	// The failure ejected the backend for upstream.UnreachableHoldoff.
	waitFor(t, "a request after the reload back", func() bool { return status() == 200 })
	if st := te.Stats(); st.BackendTLS != 2 {
		t.Fatalf("handshakes %d, want a second one under the restored tls", st.BackendTLS)
	}
	reload(nil, 50*time.Second) // tls off: the backend speaks TLS, so cleartext gets its 400
	if resp, b := get(t, c, "GET", te.url("/"), nil, nil); resp.StatusCode != 400 || !strings.Contains(string(b), "HTTPS") {
		t.Fatalf("cleartext to the TLS backend: %d %q, want Go's 400 for HTTP to an HTTPS server", resp.StatusCode, b)
	}
}

// TestBackendTLSFromH2C: HTTP/2 streams served on the shards (h2c) reach an HTTPS backend as
// HTTP/1.1 over TLS, sharing the shard's pooled connection: bodies go up, and the streams of
// one client, one at a time, cost one handshake.
func TestBackendTLSFromH2C(t *testing.T) {
	be := newTLSBackend(t, whoAmI, nil)
	te, _ := h2cEngine(t, testConfig(tlsPool(config.BackendTLS{CA: be.ca, ServerName: "backend.test"}, be.addr)), nil)
	c := h2cClient()
	for i := range 10 {
		var body io.Reader
		want := "tls sni=backend.test alpn=http/1.1 certs=0 body=0"
		if i%2 == 1 {
			body, want = io.MultiReader(strings.NewReader(strings.Repeat("u", 70000))), strings.Replace(want, "body=0", "body=70000", 1)
		}
		resp, b := get(t, c, "POST", te.url("/"), body, nil)
		if resp.ProtoMajor != 2 || resp.StatusCode != 200 || string(b) != want {
			t.Fatalf("stream %d: HTTP/%d %d %q, want %q", i, resp.ProtoMajor, resp.StatusCode, b, want)
		}
	}
	if st := te.Stats(); st.BackendTLS != 1 || be.conns.Load() != 1 {
		t.Fatalf("10 streams: %d handshakes, %d backend connections; want 1 and 1", st.BackendTLS, be.conns.Load())
	}
}

// BenchmarkForwardKeepAliveTLS is BenchmarkForwardKeepAlive with the backend reached over
// TLS (records read and written on the shard through crypto/tls, one pooled connection):
// allocations of the whole process per request, the backend's crypto/tls server included.
func BenchmarkForwardKeepAliveTLS(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	addr := serveFixed(b, tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{testcert.New(b, "backend.test")}}))
	cfg := testConfig(tlsPool(config.BackendTLS{InsecureSkipVerify: true}, addr))
	cfg.Listeners[0].ExposeBackend = false
	te := startEngine(b, cfg)
	k := newKeepAliveClient(b, te.addr)
	for range 100 {
		k.do(b)
	}
	if st := te.Stats(); st.BackendTLS != 1 {
		b.Fatalf("%d backend handshakes, want the one pooled connection's", st.BackendTLS)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		k.do(b)
	}
}

// TestBackendTLSBadRecord: a backend whose answer is a record that does not authenticate, or
// one longer than TLS allows, fails the attempt (502 with no other backend) and has its
// connection closed and freed; the engine serves the next request on a new connection.
func TestBackendTLSBadRecord(t *testing.T) {
	for _, rec := range []string{
		"\x17\x03\x03\x00\x20" + strings.Repeat("x", 32), // application data that does not authenticate
		"\x17\x03\x03\xff\xff",                           // a length past the largest record
	} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		cert := testcert.New(t, "backend.test")
		served := make(chan struct{}, 4)
		go func() {
			for n := 0; ; n++ {
				raw, err := ln.Accept()
				if err != nil {
					return
				}
				go func() {
					defer raw.Close()
					tc := tls.Server(raw, &tls.Config{Certificates: []tls.Certificate{cert}})
					buf := make([]byte, 4096)
					if _, err := tc.Read(buf); err != nil {
						return
					}
					if n == 0 {
						_, _ = io.WriteString(raw, rec) // beside crypto/tls, on the socket
						_, _ = io.Copy(io.Discard, raw)
						served <- struct{}{}
						return
					}
					_, _ = io.WriteString(tc, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
					_, _ = io.Copy(io.Discard, tc)
				}()
			}
		}()
		pc := tlsPool(config.BackendTLS{InsecureSkipVerify: true}, ln.Addr().String())
		pc.Retries.Attempts = 1
		te := startEngine(t, testConfig(pc))
		if resp, b := get(t, testClient(), "GET", te.url("/"), nil, nil); resp.StatusCode != 502 {
			t.Fatalf("%q: %d %q, want 502", rec[:5], resp.StatusCode, b)
		}
		select {
		case <-served:
		case <-time.After(5 * time.Second):
			t.Fatalf("%q: the connection that sent it stayed open", rec[:5])
		}
		waitFor(t, "the connection's record", func() bool { return te.Stats().BackendConns == 0 })
		waitFor(t, "a request served after it", func() bool {
			resp, b := get(t, testClient(), "GET", te.url("/"), nil, nil)
			return resp.StatusCode == 200 && string(b) == "ok"
		})
	}
}

// TestBackendTLSRefusedReloadKeepsVerification: a reload the core refuses after the engine
// attached its pools (here a later pool's unreadable ca) weakens nothing: the running
// table's pool still verifies with its own tls, though the refused one skipped verification.
func TestBackendTLSRefusedReloadKeepsVerification(t *testing.T) {
	be := newTLSBackend(t, whoAmI, nil)
	otherCA, _ := testcert.Write(t, t.TempDir(), "other", 2, "backend.test")
	strict := config.BackendTLS{CA: otherCA, ServerName: "backend.test"} // rejects be's certificate
	te := startEngine(t, testConfig(tlsPool(strict, be.addr)))
	weak := tlsPool(config.BackendTLS{InsecureSkipVerify: true}, be.addr)
	broken := testPool("q", "roundrobin", be.addr)
	broken.TLS = &config.BackendTLS{CA: "/nonexistent/ca.pem"}
	next := testConfig(weak, broken)
	next.Listeners[0].Address = te.addr
	p, err := upstream.NewPool(next.Pools[0].Spec(nil), te.pools["p"])
	if err != nil {
		t.Fatal(err)
	}
	q, err := upstream.NewPool(next.Pools[1].Spec(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := te.Swap(next, map[string]*upstream.Pool{"p": p, "q": q}); err == nil {
		t.Fatal("a reload with an unreadable ca was taken")
	}
	p.Close()
	q.Close()
	if resp, b := get(t, testClient(), "GET", te.url("/"), nil, nil); resp.StatusCode != 502 {
		t.Fatalf("after the refused reload: %d %q, want 502 (the running tls verifies)", resp.StatusCode, b)
	}
	if st := te.Stats(); st.BackendTLSFailures != 1 || st.BackendTLS != 0 {
		t.Fatalf("failures %d, handshakes %d; want the verification failure", st.BackendTLSFailures, st.BackendTLS)
	}
}
