package httpproxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"ballast/config"
)

// TestRateLimit: a token bucket per key; over it, 429 with Retry-After and nothing reaches
// the backend; another key has its own bucket; a bucket refills with time.
func TestRateLimit(t *testing.T) {
	rec := newRecorder(t, nil)
	cfg := testConfig(testPool("p", "roundrobin", hostOf(rec.Server)))
	cfg.Routes = []config.Route{
		{PathPrefix: "/ip/", Pool: "p", RoutePolicy: config.RoutePolicy{RateLimit: &config.RateLimit{Rate: 0.5, Burst: 3, Key: "source_ip", MaxKeys: 100}}},
		{PathPrefix: "/key/", Pool: "p", RoutePolicy: config.RoutePolicy{RateLimit: &config.RateLimit{Rate: 20, Burst: 1, Key: "header", Name: "X-Api-Key", MaxKeys: 100}}},
		{Pool: "p"},
	}
	tp := startProxy(t, cfg)
	c := testClient()
	for i := range 3 {
		if resp, _ := get(t, c, "GET", tp.url("/ip/"), nil, nil); resp.StatusCode != 200 {
			t.Fatalf("request %d within the burst: %d", i+1, resp.StatusCode)
		}
	}
	resp, body := get(t, c, "GET", tp.url("/ip/"), nil, nil)
	if resp.StatusCode != 429 {
		t.Fatalf("request over the burst: %d %q, want 429", resp.StatusCode, body)
	}
	if ra, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || ra < 1 || ra > 2 {
		t.Errorf("Retry-After %q, want 1 or 2 (a token every 2 s)", resp.Header.Get("Retry-After"))
	}
	if n := rec.count(); n != 3 {
		t.Errorf("the backend got %d requests, want 3", n)
	}
	if resp, _ := get(t, c, "GET", tp.url("/other"), nil, nil); resp.StatusCode != 200 {
		t.Errorf("a route without a limit: %d", resp.StatusCode)
	}

	// Keyed by header: a's bucket empties, b's is untouched; a's refills (20/s) within a
	// bounded wait.
	key := func(k string) int {
		h := map[string]string{}
		if k != "" {
			h["X-Api-Key"] = k
		}
		resp, _ := get(t, c, "GET", tp.url("/key/"), nil, h)
		return resp.StatusCode
	}
	if key("a") != 200 || key("a") != 429 {
		t.Fatal("key a: want 200 then 429")
	}
	if key("b") != 200 {
		t.Error("key b is limited by a's bucket")
	}
	waitFor(t, "key a to refill", func() bool { return key("a") == 200 })
}

// TestConnsPerClient: a client over listeners[].max_conns_per_client has its extra
// connection closed unanswered; closing one lets the next in.
func TestConnsPerClient(t *testing.T) {
	rec := newRecorder(t, nil)
	cfg := testConfig(testPool("p", "roundrobin", hostOf(rec.Server)))
	cfg.Listeners[0].MaxConnsPerClient = 2
	tp := startProxy(t, cfg)
	served := func(c net.Conn) bool {
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: h\r\n\r\n"); err != nil {
			return false
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}
	dial := func() net.Conn {
		c, err := net.Dial("tcp", tp.addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	a, b := dial(), dial()
	if !served(a) || !served(b) {
		t.Fatal("the first two connections were not served")
	}
	if served(dial()) {
		t.Fatal("a third connection was served")
	}
	a.Close()
	waitFor(t, "a place to free up", func() bool { return served(dial()) })
}

// TestLimiterSurvivesReload: a reload that keeps a route's rate limit keeps its buckets (no
// fresh burst for everyone); one that changes the limit starts new buckets.
func TestLimiterSurvivesReload(t *testing.T) {
	rec := newRecorder(t, nil)
	cfg := testConfig(testPool("p", "roundrobin", hostOf(rec.Server)))
	cfg.Routes[0].RateLimit = &config.RateLimit{Rate: 0.01, Burst: 1, Key: "source_ip", MaxKeys: 10}
	tp := startProxy(t, cfg)
	c := testClient()
	if resp, _ := get(t, c, "GET", tp.url("/"), nil, nil); resp.StatusCode != 200 {
		t.Fatalf("first request: %d", resp.StatusCode)
	}
	if err := tp.Swap(cfg, tp.pools); err != nil {
		t.Fatal(err)
	}
	if resp, _ := get(t, c, "GET", tp.url("/"), nil, nil); resp.StatusCode != 429 {
		t.Errorf("after a reload with the same limit: %d, want 429 (the bucket is kept)", resp.StatusCode)
	}
	cfg2 := testConfig(testPool("p", "roundrobin", hostOf(rec.Server)))
	cfg2.Listeners[0].Address = tp.addr
	cfg2.Routes[0].RateLimit = &config.RateLimit{Rate: 0.01, Burst: 2, Key: "source_ip", MaxKeys: 10}
	if err := tp.Swap(cfg2, tp.pools); err != nil {
		t.Fatal(err)
	}
	if resp, _ := get(t, c, "GET", tp.url("/"), nil, nil); resp.StatusCode != 200 {
		t.Errorf("after a reload with a new limit: %d, want 200 (new buckets)", resp.StatusCode)
	}
}
