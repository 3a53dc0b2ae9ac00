//go:build linux

package h1

import (
	"ballast/internal/refused"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Failures Ballast answers itself reach a gRPC client as trailers-only responses with a gRPC
// status, never as an HTTP error page: no backend → 14, no route → 12, the client's
// grpc-timeout passing → 4 (and the backend's stream is cancelled).
func TestGRPCFailureStatuses(t *testing.T) {
	cancelled := make(chan struct{}, 1)
	slow := dualServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
			cancelled <- struct{}{}
		case <-time.After(5 * time.Second):
		}
	}))
	deadAddr := refused.TCP(t)
	s := startYAML(t, fmt.Sprintf(`
listeners: [{name: in, address: "127.0.0.1:0", h2c: true}]
pools:
  - {name: dead, protocol: h2c, backends: [{address: %s}]}
  - {name: slow, protocol: h2c, backends: [{address: %s}]}
routes:
  - {path_prefix: /dead., pool: dead}
  - {path_prefix: /slow., pool: slow}
`, deadAddr, slow))
	base := "http://" + s.Addr("in").String()
	tests := []struct {
		path, timeout, status, msgPart string
	}{
		{"/dead.Svc/M", "", "14", "backend connect failed"},
		{"/none.Svc/M", "", "12", "no route"},
		{"/slow.Svc/M", "200m", "4", "response timeout"},
	}
	for _, tt := range tests {
		req, _ := http.NewRequest("POST", base+tt.path, strings.NewReader("\x00\x00\x00\x00\x00"))
		req.Header.Set("Content-Type", "application/grpc")
		req.Header.Set("Te", "trailers")
		if tt.timeout != "" {
			req.Header.Set("Grpc-Timeout", tt.timeout)
		}
		begin := time.Now()
		resp, err := xh2c().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/grpc" || len(b) != 0 {
			t.Errorf("%s: HTTP %d %q body %q; want a trailers-only gRPC answer", tt.path, resp.StatusCode, resp.Header.Get("Content-Type"), b)
		}
		if got := resp.Header.Get("Grpc-Status"); got != tt.status {
			t.Errorf("%s: grpc-status %q, want %s", tt.path, got, tt.status)
		}
		if got := resp.Header.Get("Grpc-Message"); !strings.Contains(got, tt.msgPart) {
			t.Errorf("%s: grpc-message %q, want it to say %q", tt.path, got, tt.msgPart)
		}
		if tt.timeout != "" && time.Since(begin) > 3*time.Second {
			t.Errorf("%s: answered after %v; the grpc-timeout was %s", tt.path, time.Since(begin), tt.timeout)
		}
	}
	select {
	case <-cancelled:
	case <-time.After(5 * time.Second):
		t.Error("the backend stream was not cancelled when the grpc-timeout passed")
	}
}
