//go:build linux

package h1

import (
	"bytes"
	"net/http"
	"strings"
	"testing"

	"ballast/config"
)

// TestPolicyThroughCore: the engine applies the core's policy on both sides of a request
// (the parity suite in package server runs the same cases over every plane): a request
// header rule reaches the backend, a response header rule and the sticky cookie reach the
// client, and a sticky request goes back to its backend.
func TestPolicyThroughCore(t *testing.T) {
	seen := make(chan string, 8)
	mk := func(name string) string {
		return httpBackend(t, func(w http.ResponseWriter, r *http.Request) {
			seen <- r.Header.Get("X-Rule")
			_, _ = w.Write([]byte(name))
		})
	}
	a, b := mk("a"), mk("b")
	pc := testPool("p", "roundrobin", a, b)
	pc.Sticky = &config.Sticky{Cookie: "bsticky"}
	cfg := testConfig(pc)
	cfg.Routes[0].RequestHeaders = &config.HeaderRules{Set: []string{"X-Rule: req"}}
	cfg.Routes[0].ResponseHeaders = &config.HeaderRules{Set: []string{"X-Out: resp"}}
	te := startEngine(t, cfg)
	c := testClient()
	resp, body := get(t, c, "GET", te.url("/"), nil, nil)
	if got := <-seen; got != "req" {
		t.Fatalf("backend got X-Rule %q, want req", got)
	}
	if resp.Header.Get("X-Out") != "resp" {
		t.Fatalf("response header rule missing: %v", resp.Header)
	}
	var cookie string
	for _, ck := range resp.Cookies() {
		if ck.Name == "bsticky" {
			cookie = ck.Name + "=" + ck.Value
		}
	}
	if cookie == "" {
		t.Fatalf("no sticky cookie: %v", resp.Header)
	}
	for range 4 {
		_, again := get(t, c, "GET", te.url("/"), nil, map[string]string{"Cookie": cookie})
		<-seen
		if !bytes.Equal(again, body) {
			t.Fatalf("sticky request went to %q, its cookie names %q", again, body)
		}
	}
}

// TestCompressionAfterReload: a reload that adds compression under a listener the engine
// serves compresses the next response (the route's policy is the new table's).
func TestCompressionAfterReload(t *testing.T) {
	page := strings.Repeat("compressible text ", 200)
	addr := httpBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte(page))
	})
	cfg := testConfig(testPool("p", "roundrobin", addr))
	te := startEngine(t, cfg)
	ae := map[string]string{"Accept-Encoding": "gzip"}
	resp, body := get(t, testClient(), "GET", te.url("/"), nil, ae)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Encoding") != "" || string(body) != page {
		t.Fatalf("before: %d, Content-Encoding %q, %d bytes (want 200, none, the page's %d)", resp.StatusCode, resp.Header.Get("Content-Encoding"), len(body), len(page))
	}
	next := testConfig(testPool("p", "roundrobin", addr))
	next.Routes[0].Compress = &config.Compress{Types: []string{"text/html"}, Algorithms: []string{"gzip"}}
	if err := te.Swap(next, te.pools); err != nil {
		t.Fatal(err)
	}
	resp, body = get(t, testClient(), "GET", te.url("/"), nil, ae)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Encoding") != "gzip" || string(decodeBody(t, "gzip", body)) != page {
		t.Fatalf("after the reload: %d, Content-Encoding %q, %d bytes", resp.StatusCode, resp.Header.Get("Content-Encoding"), len(body))
	}
}
