//go:build linux

package h1

import (
	"ballast/config"
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestAccessControl: allow and deny lists on listeners and routes, judged on the client
// address, which X-Forwarded-For supplies only through trusted proxies. Every client here
// connects from 127.0.0.1.
func TestAccessControl(t *testing.T) {
	tests := []struct {
		name           string
		trusted        []string
		listener       config.ListenerPolicy
		route          config.RoutePolicy
		xff            string
		status         int
		backendSeesXFF string // X-Forwarded-For the backend gets, when the request passes
		clientIP       string // ${client_ip} as the backend sees it
	}{
		{name: "no lists", status: 200, backendSeesXFF: "127.0.0.1", clientIP: "127.0.0.1"},
		{name: "route deny", route: config.RoutePolicy{Deny: []string{"127.0.0.0/8"}}, status: 403},
		{name: "route allow elsewhere", route: config.RoutePolicy{Allow: []string{"10.0.0.0/8"}}, status: 403},
		{name: "route allow us", route: config.RoutePolicy{Allow: []string{"10.0.0.0/8", "127.0.0.1"}}, status: 200, backendSeesXFF: "127.0.0.1", clientIP: "127.0.0.1"},
		{name: "deny wins over allow", route: config.RoutePolicy{Allow: []string{"127.0.0.0/8"}, Deny: []string{"127.0.0.1"}}, status: 403},
		{name: "listener deny", listener: config.ListenerPolicy{Deny: []string{"127.0.0.1/32"}}, status: 403},
		{name: "listener allow, route deny", listener: config.ListenerPolicy{Allow: []string{"127.0.0.0/8"}}, route: config.RoutePolicy{Deny: []string{"127.0.0.0/8"}}, status: 403},
		{name: "untrusted XFF is not believed", route: config.RoutePolicy{Allow: []string{"203.0.113.0/24"}}, xff: "203.0.113.9", status: 403},
		{name: "untrusted XFF is appended without trusted_proxies", xff: "203.0.113.9", status: 200, backendSeesXFF: "203.0.113.9, 127.0.0.1", clientIP: "127.0.0.1"},
		{name: "untrusted XFF is dropped with trusted_proxies", trusted: []string{"10.0.0.0/8"}, xff: "203.0.113.9", status: 200, backendSeesXFF: "127.0.0.1", clientIP: "127.0.0.1"},
		{name: "trusted XFF allows", trusted: []string{"127.0.0.1"}, route: config.RoutePolicy{Allow: []string{"203.0.113.0/24"}}, xff: "203.0.113.9", status: 200, backendSeesXFF: "203.0.113.9, 127.0.0.1", clientIP: "203.0.113.9"},
		{name: "trusted XFF denies", trusted: []string{"127.0.0.1"}, route: config.RoutePolicy{Deny: []string{"198.51.100.0/24"}}, xff: "198.51.100.1", status: 403},
		{name: "rightmost untrusted hop", trusted: []string{"127.0.0.1", "10.0.0.0/8"}, xff: "6.6.6.6, 203.0.113.9, 10.1.1.1", status: 200, backendSeesXFF: "6.6.6.6, 203.0.113.9, 10.1.1.1, 127.0.0.1", clientIP: "203.0.113.9"},
		{name: "garbage stops the walk", trusted: []string{"127.0.0.1", "10.0.0.0/8"}, xff: "203.0.113.9, junk, 10.1.1.1", status: 200, backendSeesXFF: "203.0.113.9, junk, 10.1.1.1, 127.0.0.1", clientIP: "10.1.1.1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := newRecorder(t, nil)
			cfg := testConfig(testPool("p", "roundrobin", hostOf(rec.Server)))
			cfg.TrustedProxies = tc.trusted
			cfg.Listeners[0].ListenerPolicy = tc.listener
			cfg.Routes[0].RoutePolicy = tc.route
			cfg.Routes[0].RequestHeaders = &config.HeaderRules{Set: []string{"X-Client: ${client_ip}"}}
			tp := startProxy(t, cfg)
			req := "GET /x HTTP/1.1\r\nHost: h\r\n"
			if tc.xff != "" {
				req += "X-Forwarded-For: " + tc.xff + "\r\n"
			}
			resp, body := rawDo(t, tp.addr, req+"\r\n")
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d (%q), want %d", resp.StatusCode, body, tc.status)
			}
			if tc.status != 200 {
				if rec.count() != 0 {
					t.Errorf("a refused request reached the backend")
				}
				return
			}
			got := rec.last(t).header
			if g := got.Get("X-Forwarded-For"); g != tc.backendSeesXFF {
				t.Errorf("backend X-Forwarded-For %q, want %q", g, tc.backendSeesXFF)
			}
			if g := got.Get("X-Client"); g != tc.clientIP {
				t.Errorf("client_ip %q, want %q", g, tc.clientIP)
			}
		})
	}
}

// TestHeaderRules: request and response rules remove, set and add fields, with the
// variables expanded per request, through real sockets.
func TestHeaderRules(t *testing.T) {
	rec := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Server", "leaky/1.0")
		w.Header().Add("Cache-Control", "no-store")
		_, _ = w.Write([]byte("ok"))
	})
	cfg := testConfig(testPool("p", "roundrobin", hostOf(rec.Server)))
	cfg.Listeners[0].RequestID = true
	cfg.Routes[0].RequestHeaders = &config.HeaderRules{
		Remove: []string{"x-secret"},
		Set: []string{"X-Client: ${client_ip}", "X-Scheme: ${scheme}", "X-Host: [${host}]",
			"X-Id: id=${request_id}", "X-Literal: costs $$5", "X-Empty:"},
		Add: []string{"X-Multi: b"},
	}
	cfg.Routes[0].ResponseHeaders = &config.HeaderRules{
		Remove: []string{"Server"},
		Set:    []string{"X-Served-By: ${backend} for ${client_ip}"},
		Add:    []string{"Cache-Control: private"},
	}
	tp := startProxy(t, cfg)
	resp, _ := get(t, testClient(), "GET", tp.url("/"), nil, map[string]string{
		"X-Secret": "hunter2", "X-Multi": "a", "Host": "Example.COM:8080", "X-Literal": "client's",
	})
	got := rec.last(t).header
	id := resp.Header.Get("X-Request-Id")
	want := map[string][]string{
		"X-Secret":  nil,
		"X-Client":  {"127.0.0.1"},
		"X-Scheme":  {"http"},
		"X-Host":    {"[Example.COM:8080]"},
		"X-Id":      {"id=" + id},
		"X-Literal": {"costs $5"},
		"X-Empty":   {""},
		"X-Multi":   {"a", "b"},
	}
	for k, v := range want {
		if g := got.Values(k); !reflect.DeepEqual(g, v) && !(len(g) == 0 && len(v) == 0) {
			t.Errorf("backend got %s = %q, want %q", k, g, v)
		}
	}
	if s := resp.Header.Values("Server"); len(s) != 0 { // the backend's is gone; Ballast adds none (as over HTTP/2)
		t.Errorf("Server %q, want none", s)
	}
	if s := resp.Header.Get("X-Served-By"); s != hostOf(rec.Server)+" for 127.0.0.1" {
		t.Errorf("X-Served-By = %q", s)
	}
	if cc := resp.Header.Values("Cache-Control"); !reflect.DeepEqual(cc, []string{"no-store", "private"}) {
		t.Errorf("Cache-Control = %q, want the backend's and the added one", cc)
	}
}

// TestHeaderRulesOnlyTheirRoute: a route's rules do not touch requests of another route.
func TestHeaderRulesOnlyTheirRoute(t *testing.T) {
	rec := newRecorder(t, nil)
	cfg := testConfig(testPool("p", "roundrobin", hostOf(rec.Server)))
	cfg.Routes = append([]config.Route{{PathPrefix: "/tagged/", Pool: "p", RoutePolicy: config.RoutePolicy{
		RequestHeaders: &config.HeaderRules{Set: []string{"X-Tag: yes"}}}}}, cfg.Routes...)
	tp := startProxy(t, cfg)
	c := testClient()
	get(t, c, "GET", tp.url("/tagged/x"), nil, nil)
	if g := rec.last(t).header.Get("X-Tag"); g != "yes" {
		t.Errorf("tagged route: X-Tag %q", g)
	}
	get(t, c, "GET", tp.url("/plain"), nil, nil)
	if g := rec.last(t).header.Get("X-Tag"); g != "" {
		t.Errorf("plain route: X-Tag %q", g)
	}
}

// TestRewriteRaw: the request target the backend receives, byte for byte, for each kind of
// rewrite: the rule applies to the normalised path and its result is encoded again; the query
// string passes unchanged.
func TestRewriteRaw(t *testing.T) {
	rec := newRecorder(t, nil)
	cfg := testConfig(testPool("p", "roundrobin", hostOf(rec.Server)))
	cfg.Routes = []config.Route{
		{PathPrefix: "/api/", Pool: "p", RoutePolicy: config.RoutePolicy{Rewrite: &config.Rewrite{StripPrefix: "/api"}}},
		{PathPrefix: "/old/", Pool: "p", RoutePolicy: config.RoutePolicy{Rewrite: &config.Rewrite{Prefix: "/old/", Replacement: "/new/v2/"}}},
		{PathPrefix: "/u/", Pool: "p", RoutePolicy: config.RoutePolicy{Rewrite: &config.Rewrite{Regex: `^/u/(\d+)/?$`, Replacement: "/users/${1}x"}}},
		{PathPrefix: "/whole/", Pool: "p", RoutePolicy: config.RoutePolicy{Rewrite: &config.Rewrite{StripPrefix: "/whole/"}}},
		{Pool: "p"},
	}
	tp := startProxy(t, cfg)
	tests := []struct{ target, want string }{
		{"/api/users?id=1&x=%20", "/users?id=1&x=%20"},
		{"/api/", "/"},
		{"/api/a%2Fb", "/a/b"}, // the rule works on the decoded path; the result is encoded again
		{"/api/sp%20ace", "/sp%20ace"},
		{"/old/thing?q", "/new/v2/thing?q"},
		{"/u/42", "/users/42x"},
		{"/u/42/?full=1", "/users/42x?full=1"},
		{"/u/abc", "/u/abc"}, // no match: unchanged
		{"/whole/", "/"},
		{"/whole/rest", "/rest"},
		{"/other?a=b", "/other?a=b"},
	}
	for _, tc := range tests {
		resp, _ := rawDo(t, tp.addr, "GET "+tc.target+" HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
		if resp.StatusCode != 200 {
			t.Errorf("%s: status %d", tc.target, resp.StatusCode)
			continue
		}
		if got := rec.last(t).uri; got != tc.want {
			t.Errorf("%s: backend got %q, want %q", tc.target, got, tc.want)
		}
	}
}

// TestRedirects: answered by Ballast with the configured status and Location; the backend
// never sees the request.
func TestRedirects(t *testing.T) {
	rec := newRecorder(t, nil)
	cfg := testConfig(testPool("p", "roundrobin", hostOf(rec.Server)))
	cfg.Routes = []config.Route{
		{Host: "plain.example", Pool: "", RoutePolicy: config.RoutePolicy{Redirect: &config.Redirect{Status: 301, Scheme: "https"}}},
		{Host: "example.com", RoutePolicy: config.RoutePolicy{Redirect: &config.Redirect{Status: 308, Host: "www.example.com"}}},
		{Host: "port.example", RoutePolicy: config.RoutePolicy{Redirect: &config.Redirect{Status: 307, Scheme: "https", Port: 8443}}},
		{PathPrefix: "/old/", RoutePolicy: config.RoutePolicy{
			Redirect: &config.Redirect{Status: 302}, Rewrite: &config.Rewrite{Prefix: "/old/", Replacement: "/new/"}}},
		{PathPrefix: "/moved", RoutePolicy: config.RoutePolicy{Redirect: &config.Redirect{Status: 301, Path: "/here"}}},
		{Pool: "p"},
	}
	tp := startProxy(t, cfg)
	tests := []struct {
		req      string
		status   int
		location string
	}{
		{"GET /a/b?c=d HTTP/1.1\r\nHost: plain.example:8080\r\n\r\n", 301, "https://plain.example/a/b?c=d"},
		{"POST /form HTTP/1.1\r\nHost: EXAMPLE.com\r\nContent-Length: 3\r\n\r\nabc", 308, "http://www.example.com/form"},
		{"GET / HTTP/1.1\r\nHost: port.example:80\r\n\r\n", 307, "https://port.example:8443/"},
		{"GET /old/x/y?z HTTP/1.1\r\nHost: h:81\r\n\r\n", 302, "http://h:81/new/x/y?z"},
		{"GET /moved/away?k=v HTTP/1.1\r\nHost: h\r\n\r\n", 301, "http://h/here?k=v"},
		{"GET /upgrade HTTP/1.1\r\nHost: plain.example\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", 301, "https://plain.example/upgrade"},
	}
	for _, tc := range tests {
		resp, body := rawDo(t, tp.addr, tc.req)
		if resp.StatusCode != tc.status || resp.Header.Get("Location") != tc.location || body != "" {
			t.Errorf("%q: %d Location %q body %q; want %d %q", strings.SplitN(tc.req, "\r\n", 2)[0], resp.StatusCode, resp.Header.Get("Location"), body, tc.status, tc.location)
		}
	}
	if n := rec.count(); n != 0 {
		t.Errorf("the backend received %d redirected requests", n)
	}
	// A reload of a table with pool-less routes (the retry budget is carried over by pool).
	if err := tp.Swap(cfg, tp.pools); err != nil {
		t.Fatal(err)
	}
	if resp, _ := rawDo(t, tp.addr, tests[0].req); resp.StatusCode != 301 {
		t.Errorf("after a reload: %d", resp.StatusCode)
	}
}

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

// TestStickyCookie: the first response names its backend in an opaque cookie; requests with
// it stay on that backend; when it becomes unusable they are rebalanced and the cookie
// replaced; a forged cookie is ignored.
func TestStickyCookie(t *testing.T) {
	var addrs []string
	for _, name := range []string{"a", "b", "c"} {
		rec := newRecorder(t, func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, name) })
		addrs = append(addrs, hostOf(rec.Server))
	}
	pc := testPool("p", "roundrobin", addrs...)
	for i, n := range []string{"a", "b", "c"} {
		pc.Backends[i].Name = n
	}
	pc.Sticky = &config.Sticky{Cookie: "SRV", Path: "/", MaxAge: dur(time.Hour), HTTPOnly: true}
	tp := startProxy(t, testConfig(pc))
	c := testClient()
	send := func(cookie string) (string, string) {
		h := map[string]string{}
		if cookie != "" {
			h["Cookie"] = "other=1; SRV=" + cookie
		}
		resp, body := get(t, c, "GET", tp.url("/"), nil, h)
		return string(body), resp.Header.Get("Set-Cookie")
	}
	re := regexp.MustCompile(`^SRV=([0-9a-f]{16}); Path=/; Max-Age=3600; HttpOnly$`)
	first, set := send("")
	m := re.FindStringSubmatch(set)
	if m == nil {
		t.Fatalf("first response Set-Cookie %q", set)
	}
	tok := m[1]
	for _, a := range addrs {
		if strings.Contains(set, a) || strings.Contains(set, strings.Split(a, ":")[1]) {
			t.Errorf("the cookie %q reveals the backend's address", set)
		}
	}
	for i := range 12 {
		if got, set := send(tok); got != first || set != "" {
			t.Fatalf("request %d with the cookie: served by %s (want %s), Set-Cookie %q", i, got, first, set)
		}
	}

	// The pinned backend is disabled: rebalanced, and the cookie now names the new one.
	if err := tp.pools["p"].Disable(first); err != nil {
		t.Fatal(err)
	}
	got, set := send(tok)
	m2 := re.FindStringSubmatch(set)
	if got == first || m2 == nil || m2[1] == tok {
		t.Fatalf("after disabling %s: served by %s, Set-Cookie %q", first, got, set)
	}
	for range 6 {
		if again, _ := send(m2[1]); again != got {
			t.Fatalf("the replaced cookie sends to %s, want %s", again, got)
		}
	}
	// Back in rotation, the old cookie works again; a forged one is rebalanced and replaced.
	if err := tp.pools["p"].Enable(first); err != nil {
		t.Fatal(err)
	}
	if again, set := send(tok); again != first || set != "" {
		t.Errorf("old cookie after re-enabling: %s, Set-Cookie %q", again, set)
	}
	if _, set := send("0123456789abcdef"); re.FindStringSubmatch(set) == nil {
		t.Errorf("forged cookie: Set-Cookie %q, want a fresh one", set)
	}
}

// TestErrorPages: every status Ballast produces itself gets the configured body and type;
// its other headers (Retry-After) stay; backends' own errors pass untouched.
func TestErrorPages(t *testing.T) {
	rec := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/slow":
			select {
			case <-time.After(2 * time.Second):
			case <-r.Context().Done():
			}
		case "/own503":
			w.WriteHeader(503)
			_, _ = w.Write([]byte("backend's own"))
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	file := filepath.Join(t.TempDir(), "403.html")
	if err := os.WriteFile(file, []byte("<h1>go away</h1>"), 0o644); err != nil {
		t.Fatal(err)
	}
	live := testPool("live", "roundrobin", hostOf(rec.Server))
	dead := testPool("dead", "roundrobin", deadAddr(t))
	dead.Retries.Attempts = 1
	down := testPool("down", "roundrobin", hostOf(rec.Server))
	down.Backends[0].Down = true
	cfg := testConfig(live, dead, down)
	cfg.Routes = []config.Route{
		{PathPrefix: "/dead/", Pool: "dead"},
		{PathPrefix: "/down/", Pool: "down"},
		{PathPrefix: "/deny/", Pool: "live", RoutePolicy: config.RoutePolicy{Deny: []string{"127.0.0.0/8"}}},
		{PathPrefix: "/rate/", Pool: "live", RoutePolicy: config.RoutePolicy{RateLimit: &config.RateLimit{Rate: 0.01, Burst: 1, Key: "source_ip", MaxKeys: 10}}},
		{PathPrefix: "/small/", Pool: "live", RoutePolicy: config.RoutePolicy{MaxBodyBytes: 1}},
		{PathPrefix: "/slow", Pool: "live", RoutePolicy: config.RoutePolicy{Timeouts: &config.RouteTimeouts{Response: dur(100 * time.Millisecond)}}},
		{PathPrefix: "/own503", Pool: "live"},
		{Host: "known", Pool: "live"},
	}
	cfg.ErrorPages = []config.ErrorPage{
		{Status: 403, File: file, ContentType: "text/html"},
		{Status: 404, Body: "no such site", ContentType: "text/plain"},
		{Status: 413, Body: "too big", ContentType: "text/plain"},
		{Status: 429, Body: "slow down", ContentType: "text/plain"},
		{Status: 502, Body: `{"error":"bad gateway"}`, ContentType: "application/json"},
		{Status: 503, Body: "maintenance", ContentType: "text/plain"},
		{Status: 504, Body: "took too long", ContentType: "text/plain"},
	}
	tp := startProxy(t, cfg)
	c := testClient()
	tests := []struct {
		method, path, host, body string
		status                   int
		want, ctype              string
	}{
		{"GET", "/x", "elsewhere", "", 404, "no such site", "text/plain"},
		{"GET", "/deny/", "known", "", 403, "<h1>go away</h1>", "text/html"},
		{"POST", "/small/", "known", "12", 413, "too big", "text/plain"},
		{"GET", "/dead/", "known", "", 502, `{"error":"bad gateway"}`, "application/json"},
		{"GET", "/down/", "known", "", 503, "maintenance", "text/plain"},
		{"GET", "/slow", "known", "", 504, "took too long", "text/plain"},
		{"GET", "/rate/", "known", "", 200, "ok", ""},
		{"GET", "/rate/", "known", "", 429, "slow down", "text/plain"},
		{"GET", "/own503", "known", "", 503, "backend's own", ""},
	}
	for _, tc := range tests {
		var body *strings.Reader
		if tc.body != "" {
			body = strings.NewReader(tc.body)
		}
		var resp *http.Response
		var got []byte
		if body != nil {
			resp, got = get(t, c, tc.method, tp.url(tc.path), body, map[string]string{"Host": tc.host})
		} else {
			resp, got = get(t, c, tc.method, tp.url(tc.path), nil, map[string]string{"Host": tc.host})
		}
		if resp.StatusCode != tc.status || string(got) != tc.want {
			t.Errorf("%s %s: %d %q, want %d %q", tc.method, tc.path, resp.StatusCode, got, tc.status, tc.want)
		}
		if tc.ctype != "" && resp.Header.Get("Content-Type") != tc.ctype {
			t.Errorf("%s: Content-Type %q, want %q", tc.path, resp.Header.Get("Content-Type"), tc.ctype)
		}
		if tc.status == 429 && resp.Header.Get("Retry-After") == "" {
			t.Errorf("429 lost its Retry-After")
		}
	}
}

// TestMaxBody: a body over max_body_bytes gets 413 whether it declares its length or is
// chunked; one at the limit passes whole.
func TestMaxBody(t *testing.T) {
	rec := newRecorder(t, nil)
	cfg := testConfig(testPool("p", "roundrobin", hostOf(rec.Server)))
	cfg.Routes[0].MaxBodyBytes = 2000
	tp := startProxy(t, cfg)
	tests := []struct {
		name    string
		req     string
		status  int
		reached bool
	}{
		{"length at the limit", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 2000\r\n\r\n" + strings.Repeat("a", 2000), 200, true},
		{"length over the limit", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 2001\r\n\r\n" + strings.Repeat("a", 2001), 413, false},
		// Answered once the first part of the body is in, long before 5 MB would be.
		{"huge declared length", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5000000\r\n\r\n" + strings.Repeat("d", 20000), 413, false},
		{"chunked at the limit", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked(strings.Repeat("b", 2000)), 200, true},
		{"chunked over the limit", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked(strings.Repeat("c", 200000)), 413, false},
		{"no body", "GET / HTTP/1.1\r\nHost: h\r\n\r\n", 200, true},
	}
	for i, tc := range tests {
		// Each request has its own path, so what the backend got can be told apart (a chunked
		// body cut at the limit reaches the backend in part, and it notes it when it notices).
		path := fmt.Sprintf("/%d", i)
		resp, body := rawDo(t, tp.addr, strings.Replace(tc.req, " / ", " "+path+" ", 1))
		if resp.StatusCode != tc.status {
			t.Errorf("%s: status %d %q, want %d", tc.name, resp.StatusCode, body, tc.status)
			continue
		}
		if tc.status == 413 && !resp.Close {
			t.Errorf("%s: 413 without Connection: close (the body was not read)", tc.name)
		}
		want := 0
		switch {
		case strings.Contains(tc.req, "chunked"):
			want = 2000
		case strings.HasPrefix(tc.req, "POST"):
			want = len(tc.req) - strings.Index(tc.req, "\r\n\r\n") - 4
		}
		got, ok := rec.find(path)
		switch {
		case tc.reached && !ok:
			t.Errorf("%s: the backend got no request", tc.name)
		case tc.reached && len(got.body) != want:
			t.Errorf("%s: the backend got %d bytes, want %d", tc.name, len(got.body), want)
		case !tc.reached && ok && !strings.Contains(tc.req, "chunked"):
			t.Errorf("%s: a request refused for its declared length reached the backend", tc.name)
		}
	}
}

// TestRouteTimeoutsAndRetries: a route's response timeout and retry attempts replace the
// pool's for that route only.
func TestRouteTimeoutsAndRetries(t *testing.T) {
	slow := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			select {
			case <-time.After(2 * time.Second):
			case <-r.Context().Done():
			}
		}
		_, _ = w.Write([]byte("ok"))
	})
	cfg := testConfig(testPool("p", "roundrobin", hostOf(slow.Server)))
	cfg.Routes = []config.Route{
		{PathPrefix: "/slow", Pool: "p", RoutePolicy: config.RoutePolicy{Timeouts: &config.RouteTimeouts{Response: dur(200 * time.Millisecond)}}},
		{Pool: "p"},
	}
	tp := startProxy(t, cfg)
	c := testClient()
	if resp, _ := get(t, c, "GET", tp.url("/slow"), nil, nil); resp.StatusCode != 504 {
		t.Errorf("route with a 200ms response timeout: status %d, want 504", resp.StatusCode)
	}
	if resp, _ := get(t, c, "GET", tp.url("/fast"), nil, nil); resp.StatusCode != 200 {
		t.Errorf("other route: status %d", resp.StatusCode)
	}

	// Retries: a pool with one dead and one live backend and no retries fails the request
	// that lands on the dead one; a route with attempts: 2 moves it to the live one.
	for _, tc := range []struct {
		name     string
		retries  *config.RouteRetries
		failures int
	}{{"pool's attempts: 1", nil, 1}, {"route's attempts: 2", &config.RouteRetries{Attempts: 2}, 0}} {
		live := newRecorder(t, nil)
		pc := testPool("p", "roundrobin", deadAddr(t), hostOf(live.Server))
		pc.Retries.Attempts = 1
		cfg := testConfig(pc)
		cfg.Routes[0].Retries = tc.retries
		tp := startProxy(t, cfg)
		failures := 0
		for range 2 { // round robin: one of the two starts on the dead backend
			if resp, _ := get(t, c, "GET", tp.url("/"), nil, nil); resp.StatusCode != 200 {
				failures++
			}
		}
		if failures != tc.failures {
			t.Errorf("%s: %d of 2 requests failed, want %d", tc.name, failures, tc.failures)
		}
	}
}
