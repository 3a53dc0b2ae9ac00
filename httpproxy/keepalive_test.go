package httpproxy

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// The backend side of keep-alive follows keepalive.max_requests and keepalive.max_idle: the
// backend sees a new connection every max_requests requests, or for every request when no idle
// connection may be kept.
func TestBackendKeepAliveLimits(t *testing.T) {
	tests := []struct {
		name                 string
		maxIdle, maxRequests int
		requests, wantConns  int64
	}{
		{"unlimited reuse", 64, 0, 12, 1},
		{"max_requests 3", 64, 3, 12, 4},
		{"max_requests 1", 64, 1, 5, 5},
		{"max_idle 0", 0, 0, 5, 5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var conns atomic.Int64
			be := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = w.Write([]byte("ok"))
			}))
			be.Config.ConnState = func(_ net.Conn, s http.ConnState) {
				if s == http.StateNew {
					conns.Add(1)
				}
			}
			be.Start()
			t.Cleanup(be.Close)
			pc := testPool("k", "roundrobin", strings.TrimPrefix(be.URL, "http://"))
			pc.KeepAlive.MaxIdle, pc.KeepAlive.MaxRequests = tc.maxIdle, tc.maxRequests
			tp := startProxy(t, testConfig(pc))
			c := testClient()
			for range tc.requests { // one after the other, so one connection suffices
				if resp, body := get(t, c, "GET", tp.url("/"), nil, nil); resp.StatusCode != 200 {
					t.Fatalf("status %d %q", resp.StatusCode, body)
				}
			}
			if got := conns.Load(); got != tc.wantConns {
				t.Errorf("backend saw %d connections for %d requests, want %d", got, tc.requests, tc.wantConns)
			}
		})
	}
}
