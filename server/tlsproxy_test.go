//go:build linux

package server

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"ballast/internal/testcert"
)

// TestTLSAcceptProxyOnEngine: a TLS listener with accept_proxy is served by the event-loop
// engine: the PROXY header, then the handshake, then HTTP/1.1 or h2 by ALPN; the header's
// client is the one the backend's X-Forwarded-For and the access log name, over both; a
// malformed header is refused and counted on /metrics.
func TestTLSAcceptProxyOnEngine(t *testing.T) {
	dir := t.TempDir()
	cert, key := testcert.Write(t, dir, "cert", 1, "app.test")
	logFile := filepath.Join(dir, "access.log")
	be := xffBackend(t)
	s, _ := startFile(t, fmt.Sprintf(`
listeners:
  - {name: tls, address: "127.0.0.1:0", accept_proxy: true, tls: {cert: %q, key: %q}}
pools: [{name: p, backends: [{address: %s}]}]
logging: {access: true, access_file: %q, access_format: json}
admin: {address: "127.0.0.1:0"}
`, cert, key, be, logFile))
	hp := engineOf(t, s)
	addr := s.Addr("tls").String()
	before := hp.engine.Stats()
	for i, proto := range []string{"http/1.1", "h2"} {
		client := fmt.Sprintf("198.51.100.%d", 10+i)
		raw, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer raw.Close()
		_ = raw.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(raw, "PROXY TCP4 %s 127.0.0.1 40000 443\r\n", client)
		c := tls.Client(raw, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{proto}, ServerName: "app.test"})
		if err := c.Handshake(); err != nil {
			t.Fatalf("%s: handshake: %v", proto, err)
		}
		var resp *http.Response
		if proto == "h2" {
			tr := &http.Transport{ForceAttemptHTTP2: true, DialTLSContext: func(context.Context, string, string) (net.Conn, error) { return c, nil }}
			if resp, err = (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get("https://app.test/h2"); err != nil {
				t.Fatalf("h2: %v", err)
			}
			if resp.ProtoMajor != 2 {
				t.Fatalf("h2: the response came over %s", resp.Proto)
			}
		} else {
			io.WriteString(c, "GET /http1 HTTP/1.1\r\nHost: app.test\r\n\r\n")
			if resp, err = http.ReadResponse(bufio.NewReader(c), nil); err != nil {
				t.Fatalf("HTTP/1.1: %v", err)
			}
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != client {
			t.Errorf("%s: %d, the backend saw X-Forwarded-For %q, want %q", proto, resp.StatusCode, b, client)
		}
	}
	if n := hp.engine.Stats().Requests - before.Requests; n != 2 {
		t.Errorf("the engine read %d requests, want 2", n)
	}
	// The access log names the header's clients.
	var clients []string
	waitUntil(t, "two access-log lines", func() bool {
		data, _ := os.ReadFile(logFile)
		clients = clients[:0]
		for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			var e map[string]any
			if json.Unmarshal([]byte(line), &e) == nil {
				clients = append(clients, fmt.Sprint(e["proto"], " ", e["client"]))
			}
		}
		return len(clients) == 2
	})
	if want := []string{"HTTP/1.1 198.51.100.10", "HTTP/2.0 198.51.100.11"}; strings.Join(clients, ",") != strings.Join(want, ",") {
		t.Errorf("access log: %q, want %q", clients, want)
	}
	// A malformed header: closed, counted on /metrics.
	bad, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	_ = bad.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(bad, "PROXY nonsense\r\n")
	if b, _ := io.ReadAll(bad); len(b) != 0 {
		t.Errorf("a malformed header got %q", b)
	}
	const metric = `ballast_listener_proxy_refused_total{listener="tls",protocol="http"} 1`
	waitUntil(t, metric+" on /metrics", func() bool {
		_, body := get(t, "http://"+s.AdminAddr()+"/metrics")
		return strings.Contains(body, metric)
	})
}

// xffBackend is a backend that answers with the X-Forwarded-For it got.
func xffBackend(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.Header.Get("X-Forwarded-For"))
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}
