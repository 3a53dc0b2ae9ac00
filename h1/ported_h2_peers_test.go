//go:build linux

package h1

import (
	"ballast/internal/testcert"
	"fmt"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// peerSetup starts Ballast with a TLS and an h2c listener in front of one backend that
// answers with the protocol it got.
func peerSetup(t *testing.T) (tlsAddr, h2cAddr string) {
	t.Helper()
	backend := dualServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "backend saw %s %s", r.Proto, r.URL.Path)
	}))
	cert, key := testcert.Write(t, t.TempDir(), "cert", 1, "localhost")
	s := startYAML(t, fmt.Sprintf(`
listeners:
  - {name: tls, address: "127.0.0.1:0", tls: {cert: %s, key: %s}}
  - {name: h2c, address: "127.0.0.1:0", h2c: true}
pools: [{name: p, protocol: h2c, backends: [{address: %s}]}]
`, cert, key, backend))
	return s.Addr("tls").String(), s.Addr("h2c").String()
}

// curl negotiates h2 by ALPN on the TLS listener, speaks h2c with prior knowledge on the
// h2c listener, and falls back to HTTP/1.1 where asked. Every client the event-loop engine
// serves reaches the h2c pool over HTTP/2, HTTP/1.1 ones included (HTTP/1.1 on the h2c
// listener too: the engine serves it).
func TestCurlHTTP2(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Skip("curl not installed")
	}
	tlsAddr, h2cAddr := peerSetup(t)
	tests := []struct {
		name         string
		args         []string
		wantProto    string
		backendProto string
	}{
		{"--http2 over TLS", []string{"--http2", "-k", "https://" + tlsAddr + "/a"}, "2", "HTTP/2.0"},
		{"--http2-prior-knowledge", []string{"--http2-prior-knowledge", "http://" + h2cAddr + "/a"}, "2", "HTTP/2.0"},
		{"--http1.1 over TLS", []string{"--http1.1", "-k", "https://" + tlsAddr + "/a"}, "1.1", "HTTP/2.0"},
		{"HTTP/1.1 on the h2c listener", []string{"--http1.1", "http://" + h2cAddr + "/a"}, "1.1", "HTTP/2.0"},
	}
	for _, tt := range tests {
		out, err := exec.Command(curl, append([]string{"-sS", "--max-time", "10", "-w", "\n%{http_version} %{http_code}"}, tt.args...)...).CombinedOutput()
		if err != nil {
			t.Errorf("%s: %v\n%s", tt.name, err, out)
			continue
		}
		want := "backend saw " + tt.backendProto + " /a\n" + tt.wantProto + " 200"
		if string(out) != want {
			t.Errorf("%s: got %q, want %q", tt.name, out, want)
		}
	}
}

// h2load drives many multiplexed streams through both front ends; every request succeeds.
func TestH2LoadEndToEnd(t *testing.T) {
	h2load, err := exec.LookPath("h2load")
	if err != nil {
		t.Skip("h2load not installed (Debian package nghttp2-client)")
	}
	tlsAddr, h2cAddr := peerSetup(t)
	done := regexp.MustCompile(`requests: (\d+) total, \d+ started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored`)
	for _, url := range []string{"https://" + tlsAddr + "/load", "http://" + h2cAddr + "/load"} {
		out, err := exec.Command(h2load, "-n", "2000", "-c", "4", "-m", "10", url).CombinedOutput()
		if err != nil {
			t.Fatalf("h2load %s: %v\n%s", url, err, out)
		}
		m := done.FindStringSubmatch(string(out))
		if m == nil || m[1] != "2000" || m[3] != "2000" || m[4] != "0" || m[5] != "0" {
			t.Errorf("h2load %s: %q", url, m)
		}
		if !strings.Contains(string(out), "status codes: 2000 2xx") {
			t.Errorf("h2load %s: not all 2xx:\n%s", url, out)
		}
	}
}
