//go:build linux

package h1

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/netip"

	"testing"
	"time"

	"ballast/config"
	"ballast/proxyproto"
)

// TestAcceptProxy: an accept_proxy listener takes the client from the PROXY header, whole or
// split across writes, v1 or v2 (the backend sees it in X-Forwarded-For); a connection without
// a valid header, or one that sends none within read_header_timeout, is closed without an
// answer and counted; a peer outside the trusted proxies is refused at accept.
func TestAcceptProxy(t *testing.T) {
	addr := httpBackend(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.Header.Get("X-Forwarded-For"))
	})
	cfg := testConfig(testPool("p", "roundrobin", addr))
	cfg.Listeners[0].AcceptProxy = true
	cfg.Listeners[0].ReadHeaderTimeout = dur(300 * time.Millisecond)
	te := startEngine(t, cfg)
	dial := func() net.Conn {
		c, err := net.Dial("tcp", te.addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		t.Cleanup(func() { c.Close() })
		return c
	}
	v2 := proxyproto.Header{Version: proxyproto.V2, Transport: proxyproto.TCP,
		Src: netip.MustParseAddrPort("[2001:db8::7]:5555"), Dst: netip.MustParseAddrPort("[2001:db8::1]:80")}.Append(nil)
	req := "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
	for _, tc := range []struct {
		name   string
		writes []string
		want   string
	}{
		{"v1", []string{"PROXY TCP4 198.51.100.7 127.0.0.1 40000 80\r\n" + req}, "198.51.100.7"},
		{"v1 split", []string{"PROXY TCP4 198.51.1", "00.8 127.0.0.1 40000 80\r\nGET / HT", "TP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"}, "198.51.100.8"},
		{"v2", []string{string(v2) + req}, "2001:db8::7"},
	} {
		c := dial()
		for _, w := range tc.writes {
			if _, err := io.WriteString(c, w); err != nil {
				t.Fatal(err)
			}
			time.Sleep(20 * time.Millisecond)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != tc.want {
			t.Errorf("%s: %d, backend saw X-Forwarded-For %q, want %q", tc.name, resp.StatusCode, body, tc.want)
		}
	}
	refused := func() uint64 { n, _ := te.ProxyRefused("web"); return n }
	for i, bad := range []string{req, "PROXY TCP4 nonsense\r\n", "PROXY TCP4 198.51"} { // the last one never ends
		c := dial()
		_, _ = io.WriteString(c, bad)
		if b, err := io.ReadAll(c); err != nil || len(b) != 0 {
			t.Errorf("%q: got %q, %v; want the connection closed without an answer", bad, b, err)
		}
		if n := refused(); n != uint64(i+1) {
			t.Errorf("%q: %d refused, want %d", bad, n, i+1)
		}
	}
	te.SetProxyTrust(proxyproto.Trust{netip.MustParsePrefix("192.0.2.0/24")})
	c := dial()
	_, _ = io.WriteString(c, "PROXY TCP4 198.51.100.7 127.0.0.1 40000 80\r\n"+req)
	if b, _ := io.ReadAll(c); len(b) != 0 || refused() != 4 {
		t.Errorf("an untrusted peer got %q (%d refused, want 4)", b, refused())
	}
}

// TestAcceptProxyRedirectNamesDestination: a redirect of an HTTP/1.0 request without Host names
// the address the client connected to, which behind a PROXY header is the header's
// destination, not the socket's.
func TestAcceptProxyRedirectNamesDestination(t *testing.T) {
	cfg := testConfig(testPool("p", "roundrobin", "127.0.0.1:9"))
	cfg.Listeners[0].AcceptProxy = true
	cfg.Routes = []config.Route{{RoutePolicy: config.RoutePolicy{Redirect: &config.Redirect{Status: 301}}}}
	te := startEngine(t, cfg)
	c, err := net.Dial("tcp", te.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	_, _ = io.WriteString(c, "PROXY TCP4 198.51.100.7 203.0.113.9 40000 8080\r\nGET /x HTTP/1.0\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if loc := resp.Header.Get("Location"); resp.StatusCode != 301 || loc != "http://203.0.113.9:8080/x" {
		t.Fatalf("%d Location %q, want 301 http://203.0.113.9:8080/x", resp.StatusCode, loc)
	}
}
