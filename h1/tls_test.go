//go:build linux

package h1

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"ballast/config"
	"ballast/internal/h1conformance"
	"ballast/internal/testcert"
)

// startTLSEngine is startEngine for a TLS listener (ALPN h2 and http/1.1, both on the shards).
func startTLSEngine(t testing.TB, cfg *config.Config) *testEngine {
	t.Helper()
	tc := &tls.Config{Certificates: []tls.Certificate{testcert.New(t, "app.test")}, NextProtos: []string{"h2", "http/1.1"}}
	return serveEngine(t, cfg, nil, func(e *Engine, name string, ln net.Listener) error { return e.ServeTLS(name, ln, tc) })
}

func dialTLS(t testing.TB, addr string, protos ...string) *tls.Conn {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: protos})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// exchangeRawTLS is exchangeRaw over TLS: raw in one write, then close_notify and the
// half-close, and everything the proxy answers up to its close.
func exchangeRawTLS(t testing.TB, addr string, raw []byte) []byte {
	t.Helper()
	c := dialTLS(t, addr, "http/1.1")
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write(raw); err != nil {
		t.Fatalf("writing the request: %v", err)
	}
	_ = c.CloseWrite()
	var out []byte
	p := make([]byte, 32<<10)
	for {
		n, err := c.Read(p)
		out = append(out, p[:n]...)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Errorf("the proxy did not close the connection within 10 s; got %q", out)
			}
			return out
		}
	}
}

// hangingBackend accepts connections, reads what comes and never answers; closed reports each
// connection the proxy closed.
func hangingBackend(t testing.TB) (addr string, closed chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed = make(chan struct{}, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 4096)
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

// TestClientLeavesBeforeResponse: a client that closes its connection while its request waits
// for the response head has the exchange abandoned about watchSlice later (its backend
// connection closed, long before the response timeout), over plain TCP and over TLS.
func TestClientLeavesBeforeResponse(t *testing.T) {
	for _, overTLS := range []bool{false, true} {
		name := "plain"
		if overTLS {
			name = "tls"
		}
		t.Run(name, func(t *testing.T) {
			addr, closed := hangingBackend(t)
			cfg := testConfig(testPool("p", "roundrobin", addr))
			var c net.Conn
			if overTLS {
				te := startTLSEngine(t, cfg)
				c = dialTLS(t, te.addr, "http/1.1")
			} else {
				te := startEngine(t, cfg)
				var err error
				if c, err = net.Dial("tcp", te.addr); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := c.Write([]byte("GET /slow HTTP/1.1\r\nHost: app.test\r\n\r\n")); err != nil {
				t.Fatal(err)
			}
			time.Sleep(200 * time.Millisecond) // the request reaches the backend
			start := time.Now()
			_ = c.Close()
			select {
			case <-closed:
			case <-time.After(5 * time.Second):
				t.Fatal("the backend connection stayed open 5 s after the client left")
			}
			if d := time.Since(start); d < 500*time.Millisecond {
				t.Fatalf("abandoned after %v: a client that only half-closed gets watchSlice to be answered", d)
			}
		})
	}
}

// TestTLSListener: requests over TLS reach the backend with the https scheme, keep-alive on
// one connection; a connection that negotiates h2 is served by the engine's HTTP/2 on the
// shard and holds its place against max_conns_per_client until it closes; a handshake that
// never comes is counted and closed.
func TestTLSListener(t *testing.T) {
	rb := h1conformance.NewRawBackend(t)
	cfg := conformanceConfig(rb.Addr())
	cfg.Listeners[0].MaxConnsPerClient = 2 // counted; 127.0.0.1 is no trusted proxy here
	te := startTLSEngine(t, cfg)
	c := dialTLS(t, te.addr, "http/1.1")
	br := make([]byte, 4096)
	for i := range 3 {
		if _, err := c.Write([]byte("GET /api/x HTTP/1.1\r\nHost: public.example\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, err := c.Read(br)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if got := string(br[:n]); got[:12] != "HTTP/1.1 200" {
			t.Fatalf("request %d: %q", i, got)
		}
	}
	got, reqs := rb.Take(t)
	if len(reqs) != 3 || !bytes.Contains(got, []byte("X-Forwarded-Proto: https\r\n")) {
		t.Fatalf("backend got %d requests:\n%s", len(reqs), got)
	}
	if st := te.Stats(); st.Accepted != 1 || st.Requests != 3 {
		t.Fatalf("accepted %d, requests %d; want 1 and 3", st.Accepted, st.Requests)
	}
	h2 := dialTLS(t, te.addr, "h2")
	if p := h2.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Fatalf("negotiated %q", p)
	}
	// The engine's HTTP/2 answers the preface with its SETTINGS.
	if _, err := io.WriteString(h2, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	_ = h2.SetReadDeadline(time.Now().Add(5 * time.Second))
	if f, err := http2.NewFramer(io.Discard, h2).ReadFrame(); err != nil || f.Header().Type != http2.FrameSettings {
		t.Fatalf("the h2 connection's first frame: %v, %v; want the engine's SETTINGS", f, err)
	}
	if st := te.Stats(); st.Conns != 2 {
		t.Fatalf("%d connections open, want the HTTP/1.1 one and the h2 one on the shards", st.Conns)
	}
	// Two connections held (the HTTP/1.1 one and this): a third is refused until this one
	// closes and gives its place back.
	if c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", te.addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}}); err == nil {
		_ = c.Close()
		t.Fatal("a third connection was handshaken while two were held (max_conns_per_client 2)")
	}
	_ = h2.Close()
	waitFor(t, "the h2 connection's close", func() bool { return te.Stats().Conns == 1 })
	third := dialTLS(t, te.addr, "http/1.1")
	if _, err := third.Write([]byte("GET /api/x HTTP/1.1\r\nHost: public.example\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	_ = third.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := third.Read(br); err != nil || !bytes.HasPrefix(br[:n], []byte("HTTP/1.1 200")) {
		t.Fatalf("a third connection after the h2 one closed: %q, %v", br[:n], err)
	}
	_ = third.Close()
	waitFor(t, "the third connection's close", func() bool { return te.Stats().Conns == 1 })
	quiet, err := net.Dial("tcp", te.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer quiet.Close()
	deadline := time.Now().Add(10 * time.Second)
	for te.Stats().TLSFailures == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if te.Stats().TLSFailures != 1 {
		t.Fatal("a client that never handshakes was not counted within read_header_timeout")
	}
}

// TestTLSHandshakeFlood: connections that never finish their handshake hold at most
// maxHandshakes goroutines; past it new ones are closed at accept and counted, and once the
// flood's handshakes time out, a client is served again.
func TestTLSHandshakeFlood(t *testing.T) {
	rb := h1conformance.NewRawBackend(t)
	cfg := conformanceConfig(rb.Addr())
	cfg.Listeners[0].ReadHeaderTimeout = dur(time.Second)
	te := startTLSEngine(t, cfg)
	te.maxHandshakes.Store(4)
	var flood []net.Conn
	defer func() {
		for _, c := range flood {
			_ = c.Close()
		}
	}()
	for range 10 {
		c, err := net.Dial("tcp", te.addr)
		if err != nil {
			t.Fatal(err)
		}
		flood = append(flood, c)
	}
	waitFor(t, "the refusals", func() bool { return te.Stats().TLSRefused == 6 })
	if n := te.handshakes.Load(); n != 4 {
		t.Fatalf("%d handshakes in progress, want 4", n)
	}
	waitFor(t, "the flood's timeouts", func() bool { return te.handshakes.Load() == 0 })
	c := dialTLS(t, te.addr, "http/1.1")
	if _, err := c.Write([]byte("GET /api/x HTTP/1.1\r\nHost: public.example\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 512)
	if n, err := c.Read(buf); err != nil || !bytes.HasPrefix(buf[:n], []byte("HTTP/1.1 200")) {
		t.Fatalf("after the flood: %q, %v", buf[:n], err)
	}
	if st := te.Stats(); st.TLSFailures != 4 {
		t.Fatalf("TLS failures %d, want the 4 timed-out handshakes", st.TLSFailures)
	}
}

// TestTLSBadRecordCloses: after the handshake, a record that does not decrypt (and one longer
// than TLS allows) closes the connection at once, with the engine's record of it freed.
func TestTLSBadRecordCloses(t *testing.T) {
	rb := h1conformance.NewRawBackend(t)
	te := startTLSEngine(t, conformanceConfig(rb.Addr()))
	for _, rec := range [][]byte{
		[]byte("\x17\x03\x03\x00\x20" + strings.Repeat("x", 32)), // application data that does not authenticate
		[]byte("\x17\x03\x03\xff\xff"),                           // a length past the largest record
	} {
		raw, err := net.Dial("tcp", te.addr)
		if err != nil {
			t.Fatal(err)
		}
		tc := tls.Client(raw, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
		if err := tc.Handshake(); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the connection on its shard", func() bool { return te.Stats().Conns == 1 })
		if _, err := raw.Write(rec); err != nil {
			t.Fatal(err)
		}
		_ = raw.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadAll(raw); err != nil && !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("%q: %v (want the server's alert, then its close)", rec[:5], err)
		}
		_ = raw.Close()
		waitFor(t, "the connection's close", func() bool { return te.Stats().Conns == 0 })
	}
}
