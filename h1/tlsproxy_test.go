//go:build linux

package h1

import (
	"bufio"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"ballast/config"
	"ballast/h2mux"
	"ballast/internal/testcert"
	"ballast/proxyproto"
)

// startTLSProxyEngine serves cfg's listener as a TLS one with accept_proxy, HTTP/2 by ALPN on
// the shards.
func startTLSProxyEngine(t *testing.T, cfg *config.Config) *testEngine {
	t.Helper()
	cfg.Listeners[0].AcceptProxy = true
	tc := &tls.Config{Certificates: []tls.Certificate{testcert.New(t, "app.test")}, NextProtos: []string{"h2", "http/1.1"}}
	return serveEngine(t, cfg, func(e *Engine) {
		e.SetHTTP2(func(l *config.Listener) h2mux.Config {
			return h2mux.Config{MaxConcurrentStreams: 100, StreamWindow: 1 << 20, ConnWindow: 4 << 20, MaxHeaderListSize: l.MaxHeaderBytes, ResetBurst: 200}
		}, new(h2mux.Counters))
	}, func(e *Engine, name string, ln net.Listener) error { return e.ServeTLS(name, ln, tc) })
}

// headerFirst is a connection whose first Write sends a PROXY header and the bytes given in
// one write(2): the ClientHello comes in the same segment as the header.
type headerFirst struct {
	net.Conn
	header []byte
}

func (c *headerFirst) Write(p []byte) (int, error) {
	if h := c.header; h != nil {
		c.header = nil
		n, err := c.Conn.Write(append(h, p...))
		return max(n-len(h), 0), err
	}
	return c.Conn.Write(p)
}

// proxyTLS connects to addr, sends the PROXY header as writes says (each piece written alone
// after a pause; "" ⇒ the whole header in the ClientHello's write) and handshakes with ALPN
// proto.
func proxyTLS(t *testing.T, addr string, header []byte, pieces int, proto string) *tls.Conn {
	t.Helper()
	raw, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	_ = raw.SetDeadline(time.Now().Add(10 * time.Second))
	var c net.Conn = raw
	if pieces == 0 {
		c = &headerFirst{Conn: raw, header: header}
	} else {
		step := (len(header) + pieces - 1) / pieces
		for i := 0; i < len(header); i += step {
			if _, err := raw.Write(header[i:min(i+step, len(header))]); err != nil {
				t.Fatal(err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	tc := tls.Client(c, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{proto}})
	if err := tc.Handshake(); err != nil {
		t.Fatalf("handshake after the PROXY header: %v", err)
	}
	if got := tc.ConnectionState().NegotiatedProtocol; got != proto {
		t.Fatalf("ALPN %q, want %q", got, proto)
	}
	return tc
}

// overConn is an HTTP/2 client whose only connection is c (ALPN h2 done).
func overConn(c *tls.Conn) *http.Client {
	tr := &http.Transport{ForceAttemptHTTP2: true, DialTLSContext: func(context.Context, string, string) (net.Conn, error) { return c, nil }}
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// TestTLSAcceptProxy: on a TLS listener with accept_proxy the PROXY header comes before the
// handshake, read on the shard: v1 whole, v1 in pieces, v1 in the ClientHello's own segment
// (the bytes after the header go to crypto/tls first), v2; then HTTP/1.1 or h2 by ALPN, and
// the backend sees the header's client in X-Forwarded-For either way (and the access log's
// client is the same address, through the same peer). Every connection is the engine's.
func TestTLSAcceptProxy(t *testing.T) {
	addr := httpBackend(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.Header.Get("X-Forwarded-For")+" "+r.Header.Get("X-Forwarded-Proto"))
	})
	te := startTLSProxyEngine(t, testConfig(testPool("p", "roundrobin", addr)))
	v1 := func(src string) []byte { return []byte("PROXY TCP4 " + src + " 127.0.0.1 40000 443\r\n") }
	v2 := proxyproto.Header{Version: proxyproto.V2, Transport: proxyproto.TCP,
		Src: netip.MustParseAddrPort("[2001:db8::7]:5555"), Dst: netip.MustParseAddrPort("[2001:db8::1]:443")}.Append(nil)
	for _, tc := range []struct {
		name   string
		header []byte
		pieces int // 0: with the ClientHello
		want   string
	}{
		{"v1", v1("198.51.100.1"), 1, "198.51.100.1"},
		{"v1 in pieces", v1("198.51.100.2"), 4, "198.51.100.2"},
		{"v1 with the ClientHello", v1("198.51.100.3"), 0, "198.51.100.3"},
		{"v2", v2, 1, "2001:db8::7"},
		{"v2 with the ClientHello", v2, 0, "2001:db8::7"},
	} {
		for _, proto := range []string{"http/1.1", "h2"} {
			c := proxyTLS(t, te.addr, tc.header, tc.pieces, proto)
			var status int
			var body string
			if proto == "h2" {
				resp, err := overConn(c).Get("https://app.test/")
				if err != nil {
					t.Fatalf("%s over h2: %v", tc.name, err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				status, body = resp.StatusCode, string(b)
			} else {
				io.WriteString(c, "GET / HTTP/1.1\r\nHost: app.test\r\n\r\n")
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				if err != nil {
					t.Fatalf("%s over HTTP/1.1: %v", tc.name, err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				status, body = resp.StatusCode, string(b)
			}
			if want := tc.want + " https"; status != 200 || body != want {
				t.Errorf("%s over %s: %d, the backend saw %q, want %q", tc.name, proto, status, body, want)
			}
		}
	}
	if st := te.Stats(); st.Accepted != 10 || st.Requests != 10 || st.TLSFailures != 0 {
		t.Errorf("accepted %d, requests %d, TLS failures %d; want 10, 10, 0", st.Accepted, st.Requests, st.TLSFailures)
	}
	if n, ok := te.ProxyRefused("web"); !ok || n != 0 {
		t.Errorf("ProxyRefused %d (%v), want 0 on a served accept_proxy listener", n, ok)
	}
}

// TestTLSAcceptProxyRefused: a connection without a PROXY header (a ClientHello first), a
// malformed header, and one whose header never comes within read_header_timeout are closed
// before any handshake, counted in ProxyRefused (and the last in HeaderTimeouts); a header
// followed by no handshake fails the handshake within what is left of read_header_timeout
// (TLSFailures); a peer outside trusted_proxies is closed at accept and counted.
func TestTLSAcceptProxyRefused(t *testing.T) {
	cfg := testConfig(testPool("p", "roundrobin", "127.0.0.1:9"))
	cfg.Listeners[0].ReadHeaderTimeout = dur(400 * time.Millisecond)
	te := startTLSProxyEngine(t, cfg)
	refused := func() uint64 { n, _ := te.ProxyRefused("web"); return n }
	closedQuietly := func(what string, c net.Conn) time.Duration {
		t.Helper()
		start := time.Now()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if b, err := io.ReadAll(c); len(b) != 0 || err != nil && !strings.Contains(err.Error(), "reset") {
			t.Errorf("%s: got %q, %v; want the connection closed without a byte", what, b, err)
		}
		return time.Since(start)
	}
	dial := func() net.Conn {
		c, err := net.Dial("tcp", te.addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}

	// A TLS client that sends no header: its ClientHello is not a PROXY header.
	raw := dial()
	go func() { _ = tls.Client(raw, &tls.Config{InsecureSkipVerify: true}).Handshake() }()
	closedQuietly("a ClientHello without a header", raw)
	if n := refused(); n != 1 {
		t.Errorf("after a ClientHello first: %d refused, want 1", n)
	}
	bad := dial()
	io.WriteString(bad, "PROXY TCP4 nonsense\r\n")
	closedQuietly("a malformed header", bad)
	if n := refused(); n != 2 {
		t.Errorf("after a malformed header: %d refused, want 2", n)
	}

	// A header that never ends: closed at read_header_timeout.
	slow := dial()
	io.WriteString(slow, "PROXY TCP4 198.51")
	if d := closedQuietly("a header that never ends", slow); d < 300*time.Millisecond {
		t.Errorf("a slow header was closed after %v, before read_header_timeout (400ms)", d)
	}
	if n, st := refused(), te.Stats(); n != 3 || st.HeaderTimeouts != 1 {
		t.Errorf("after a slow header: %d refused, %d header timeouts; want 3 and 1", n, st.HeaderTimeouts)
	}

	// A header, then no handshake: the handshake times out (counted), no answer.
	half := dial()
	io.WriteString(half, "PROXY TCP4 198.51.100.9 127.0.0.1 40000 443\r\n")
	if d := closedQuietly("a header without a handshake", half); d > 2*time.Second {
		t.Errorf("a header without a handshake was held %v (read_header_timeout 400ms)", d)
	}
	waitFor(t, "the handshake's failure counted and its place given back", func() bool {
		return te.Stats().TLSFailures == 1 && te.handshakes.Load() == 0
	})

	// An untrusted peer: closed at accept, before its header is read.
	te.SetProxyTrust(proxyproto.Trust{netip.MustParsePrefix("192.0.2.0/24")})
	untrusted := dial()
	io.WriteString(untrusted, "PROXY TCP4 198.51.100.7 127.0.0.1 40000 443\r\n")
	closedQuietly("an untrusted peer", untrusted)
	if n := refused(); n != 4 {
		t.Errorf("after an untrusted peer: %d refused, want 4", n)
	}
	if st := te.Stats(); st.Conns != 0 || st.Requests != 0 {
		t.Errorf("%d connections open, %d requests; want none", st.Conns, st.Requests)
	}
}

// TestTLSAcceptProxyHandshakeFlood: connections that send their PROXY header and then never
// finish the handshake hold at most maxHandshakes handshakes (each a goroutine); past that they
// are closed once their header is read (TLSRefused), and once the flood times out a client is
// served again. Connections still waiting for their header hold no goroutine.
func TestTLSAcceptProxyHandshakeFlood(t *testing.T) {
	addr := httpBackend(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.Header.Get("X-Forwarded-For"))
	})
	cfg := testConfig(testPool("p", "roundrobin", addr))
	// The header and the handshake of the client after the flood share this budget: under
	// -race on a loaded machine a second was seen to run out (the client's Finished unread).
	cfg.Listeners[0].ReadHeaderTimeout = dur(2 * time.Second)
	te := startTLSProxyEngine(t, cfg)
	te.maxHandshakes.Store(4)
	for i := range 10 {
		c, err := net.Dial("tcp", te.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if i < 9 {
			io.WriteString(c, "PROXY TCP4 198.51.100.9 127.0.0.1 40000 443\r\n")
		} // the last sends nothing: it waits for its header on the shard, not in a handshake
	}
	// The one without a header waits on its shard, not in a handshake.
	waitFor(t, "the refusals", func() bool { st := te.Stats(); return st.TLSRefused == 5 && st.Conns == 1 })
	if n := te.handshakes.Load(); n != 4 {
		t.Fatalf("%d handshakes in progress, want 4", n)
	}
	waitFor(t, "the flood's timeouts", func() bool { return te.handshakes.Load() == 0 && te.Stats().Conns == 0 })
	c := proxyTLS(t, te.addr, []byte("PROXY TCP4 198.51.100.10 127.0.0.1 40000 443\r\n"), 1, "http/1.1")
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: app.test\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("after the flood: %v (%+v)", err, te.Stats())
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "198.51.100.10" {
		t.Errorf("after the flood: %d %q", resp.StatusCode, b)
	}
	if st := te.Stats(); st.TLSFailures != 4 || st.HeaderTimeouts != 1 {
		t.Errorf("TLS failures %d, header timeouts %d; want the 4 timed-out handshakes and the 1 header", st.TLSFailures, st.HeaderTimeouts)
	}
}
