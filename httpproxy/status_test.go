package httpproxy

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// Every response is counted by status class on its backend, and with outlier.include_5xx a 5xx
// counts as a failure whether its body was small enough to be buffered or had to stream.
func TestStatusClassesAndFailures(t *testing.T) {
	big := strings.Repeat("x", 64<<10) // above the buffered-body limit: streams
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/small-500":
			http.Error(w, "boom", http.StatusInternalServerError)
		case "/big-500":
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte(big))
		case "/404":
			http.NotFound(w, r)
		default:
			_, _ = w.Write([]byte("ok"))
		}
	}))
	t.Cleanup(be.Close)
	addr := strings.TrimPrefix(be.URL, "http://")

	for _, include := range []bool{false, true} {
		pc := testPool("web", "roundrobin", addr)
		pc.Outlier.Include5xx = include
		tp := startProxy(t, testConfig(pc))
		c := testClient()
		for _, path := range []string{"/", "/", "/404", "/small-500", "/big-500", "/small-500"} {
			resp, _ := get(t, c, "GET", tp.url(path), nil, nil)
			if path != "/" && path != "/404" && resp.StatusCode != 500 {
				t.Fatalf("%s: status %d, want the backend's 500", path, resp.StatusCode)
			}
		}
		b := tp.pools["web"].Backend(addr)
		waitFor(t, "every slot released", func() bool { return b.InFlight() == 0 })
		got := tp.Responses(b)
		if got[2] != 2 || got[4] != 1 || got[5] != 3 {
			t.Errorf("include_5xx=%v: responses by class = %v, want 2xx 2, 4xx 1, 5xx 3", include, got)
		}
		want := uint64(0)
		if include {
			want = 3
		}
		if f := b.Failures(); f != want {
			t.Errorf("include_5xx=%v: failures = %d, want %d", include, f, want)
		}
	}
}
