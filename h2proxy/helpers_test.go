//lint:file-ignore SA1019 issue 11 builds the HTTP/2 plane on golang.org/x/net/http2, deprecated since v0.62 in favour of net/http's own HTTP/2 (http.Server.Protocols, HTTP2Config); moving is a follow-up.

package h2proxy_test

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"ballast/config"
	"ballast/internal/testcert"
	"ballast/server"
)

// start loads yaml and starts a Ballast server, shut down at cleanup.
func start(t testing.TB, yaml string) *server.Server {
	t.Helper()
	file := filepath.Join(t.TempDir(), "ballast.yaml")
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return startFile(t, file)
}

// startFile starts a Ballast server on the configuration file (which a test may rewrite and
// reload), shut down at cleanup.
func startFile(t testing.TB, file string) *server.Server {
	t.Helper()
	cfg, err := config.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	s, err := server.Start(cfg, server.Options{File: file, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return s
}

// h2c is an HTTP/2 client with prior knowledge (cleartext).
func h2c() *http.Client {
	return &http.Client{Timeout: 20 * time.Second, Transport: &http2.Transport{
		AllowHTTP: true,
		DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		},
	}}
}

// h2cServer serves h with HTTP/2 cleartext (prior knowledge) and HTTP/1.1 on a loopback port.
func h2cServer(t testing.TB, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: h, Protocols: &p}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// tlsServer serves h over TLS with HTTP/2 and HTTP/1.1; it returns the address and the CA file
// that verifies it (a self-signed certificate for 127.0.0.1).
func tlsServer(t *testing.T, h http.Handler) (addr, caFile string) {
	t.Helper()
	certFile, keyFile := testcert.Write(t, t.TempDir(), "cert", 1, "localhost")
	kp, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{kp}, NextProtos: []string{"h2", "http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	if err := http2.ConfigureServer(srv, nil); err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String(), certFile
}

// waitFor polls cond every 10 ms until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
