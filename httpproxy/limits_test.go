package httpproxy

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"ballast/config"
)

// chunked encodes body as one chunk per 1000 bytes.
func chunked(body string) string {
	var b strings.Builder
	for len(body) > 0 {
		n := min(len(body), 1000)
		fmt.Fprintf(&b, "%x\r\n%s\r\n", n, body[:n])
		body = body[n:]
	}
	return b.String() + "0\r\n\r\n"
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
