//go:build linux

package server

import (
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"ballast/internal/testcert"
)

// TestHTTP1MetricsScraped: the event-loop engine's counters reach /metrics: requests served,
// a head its checks refuse, a head that never ends (read_header_timeout) and a TLS handshake
// that fails, each seen in a scrape after it was driven over a socket.
func TestHTTP1MetricsScraped(t *testing.T) {
	dir := t.TempDir()
	cert, key := testcert.Write(t, dir, "cert", 1, "app.test")
	s, _ := startFile(t, fmt.Sprintf(`
listeners:
  - {name: web, address: "127.0.0.1:0", read_header_timeout: 300ms}
  - {name: tls, address: "127.0.0.1:0", read_header_timeout: 300ms, tls: {cert: %q, key: %q}}
pools: [{name: p, backends: [{address: %s}]}]
admin: {address: "127.0.0.1:0"}
`, cert, key, namedBackend(t, "a")))
	web, tlsAddr := s.Addr("web").String(), s.Addr("tls").String()
	scrape := func() map[string]string {
		_, body := get(t, "http://"+s.AdminAddr()+"/metrics")
		m := map[string]string{}
		for _, line := range strings.Split(body, "\n") {
			if strings.HasPrefix(line, "ballast_http1_") {
				if i := strings.LastIndexByte(line, ' '); i > 0 {
					m[line[:i]] = line[i+1:]
				}
			}
		}
		return m
	}
	if m := scrape(); m["ballast_http1_requests_total"] != "0" || m[`ballast_http1_events_total{event="tls_failure"}`] != "0" {
		t.Fatalf("before any traffic: %v", m)
	}
	for range 2 {
		if code, b := get(t, "http://"+web+"/"); code != 200 || b != "a" {
			t.Fatalf("GET: %d %q", code, b)
		}
	}
	raw := func(addr, data string) {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(c, data)
		_, _ = io.ReadAll(c)
	}
	raw(web, "GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n") // refused: two lengths
	raw(web, "GET / HTTP/1.1\r\nHost: a\r\n")                                               // never ends: 408 at read_header_timeout
	raw(tlsAddr, "GET / HTTP/1.1\r\nHost: a\r\n\r\n")                                       // not a ClientHello
	want := map[string]string{
		"ballast_http1_requests_total":                       "2",
		"ballast_http1_accepted_total":                       "4", // the GETs' kept-alive connection, two raw, one TLS
		`ballast_http1_events_total{event="refused_head"}`:   "2", // the two lengths, and the 408
		`ballast_http1_events_total{event="header_timeout"}`: "1",
		`ballast_http1_events_total{event="tls_failure"}`:    "1",
		"ballast_http1_backend_connects_total":               "1",
	}
	// The engine counts a refusal as it answers, before the close: scrape until all are in.
	var m map[string]string
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		m = scrape()
		missing := false
		for k, v := range want {
			missing = missing || m[k] != v
		}
		if !missing || time.Now().After(end) {
			break
		}
	}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("%s = %q, want %s", k, m[k], v)
		}
	}
}
