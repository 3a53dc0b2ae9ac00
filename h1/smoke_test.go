//go:build linux

package h1

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

func TestSmokeGet(t *testing.T) {
	addr := httpBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Path", r.URL.Path)
		_, _ = io.WriteString(w, "hello "+r.Header.Get("X-Forwarded-For"))
	})
	te := startEngine(t, testConfig(testPool("p", "roundrobin", addr)))
	c := testClient()
	for i := range 50 {
		resp, body := get(t, c, "GET", te.url("/x"), nil, nil)
		if resp.StatusCode != 200 || string(body) != "hello 127.0.0.1" || resp.Header.Get("X-Path") != "/x" {
			t.Fatalf("request %d: %d %q %v", i, resp.StatusCode, body, resp.Header)
		}
		if resp.Header.Get("X-Ballast-Backend") != addr {
			t.Fatalf("X-Ballast-Backend %q", resp.Header.Get("X-Ballast-Backend"))
		}
	}
	resp, body := get(t, c, "POST", te.url("/p"), strings.NewReader("abc"), nil)
	if resp.StatusCode != 200 {
		t.Fatalf("POST: %d %q", resp.StatusCode, body)
	}
	if st := te.Stats(); st.Requests != 51 || st.Connects < 1 {
		t.Fatalf("stats %+v", st)
	}
}
