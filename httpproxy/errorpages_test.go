package httpproxy

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"ballast/config"
)

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
