package httpproxy

import (
	"strings"
	"testing"

	"ballast/config"
)

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
