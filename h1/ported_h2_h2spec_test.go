//go:build linux

package h1

import (
	"ballast/internal/testcert"
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// h2specDeviations are the h2spec cases Ballast's front end fails, each with the reason (none:
// Ballast's own HTTP/2 state machine, h2mux, meets every case). The
// test fails on any other failure, and on a listed one that starts to pass (the list must stay
// true). Keys are "package: case".
var h2specDeviations = map[string]string{}

// h2cDeviations apply to the h2c listener only (none: bytes that are neither the HTTP/2
// preface nor an HTTP/1 request line close the connection, as h2spec 3.5 wants).
var h2cDeviations = map[string]string{}

// h2specBinary finds h2spec on PATH or where `go install` puts it.
func h2specBinary() string {
	if p, err := exec.LookPath("h2spec"); err == nil {
		return p
	}
	for _, dir := range []string{os.Getenv("GOBIN"), filepath.Join(os.Getenv("HOME"), "go", "bin")} {
		if p := filepath.Join(dir, "h2spec"); dir != "" {
			if _, err := os.Stat(p); err == nil {
				return p
			}
		}
	}
	return ""
}

// TestH2Spec runs h2spec (github.com/summerwind/h2spec) against the engine's TLS and h2c
// listeners, to an h2c and to an HTTP/1.1 pool, and compares its failures with the documented deviations.
func TestH2Spec(t *testing.T) {
	bin := h2specBinary()
	if bin == "" {
		t.Skip("h2spec not installed (go install github.com/summerwind/h2spec/cmd/h2spec@latest)")
	}
	if testing.Short() {
		t.Skip("h2spec takes about 15 s per front end")
	}
	backend := dualServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The request body first: an answer before it ends would be relayed, and the client's
		// stream reset with NO_ERROR (RFC 9113 §8.1), before h2spec sends what it wants a
		// stream error for (8.1's second HEADERS without END_STREAM) when this machine is slow
		// to read it; §5.1 then has the frames on the closed stream ignored.
		_, _ = io.Copy(io.Discard, r.Body)
		// h2spec needs a response with a body.
		w.Write([]byte("hello from the backend, long enough for the flow-control cases\n"))
	}))
	cert, key := testcert.Write(t, t.TempDir(), "cert", 1, "localhost")
	s := startYAML(t, fmt.Sprintf(`
listeners:
  - {name: tls, address: "127.0.0.1:0", tls: {cert: %s, key: %s}}
  - {name: h2c, address: "127.0.0.1:0", h2c: true}
pools: [{name: p, protocol: h2c, backends: [{address: %s}]}]
`, cert, key, backend))
	// The same backend over HTTP/1.1: the path that serves HTTP/2 streams to HTTP/1.1
	// backends (h2proxy's "-engine" fronts; both configurations are served on the shards).
	engine := startYAML(t, fmt.Sprintf(`
listeners:
  - {name: tls, address: "127.0.0.1:0", tls: {cert: %s, key: %s}}
  - {name: h2c, address: "127.0.0.1:0", h2c: true}
pools: [{name: p, backends: [{address: %s}]}]
`, cert, key, backend))
	for _, front := range []struct {
		name  string
		srv   *yamlEngine
		args  []string
		extra map[string]string
	}{
		{"tls-h2c-pool", s, []string{"-t", "-k"}, nil},
		{"h2c-h2c-pool", s, nil, h2cDeviations},
		{"tls-http1-pool", engine, []string{"-t", "-k"}, nil},
		{"h2c-http1-pool", engine, nil, h2cDeviations},
	} {
		t.Run(front.name, func(t *testing.T) {
			listener := "h2c"
			if front.args != nil {
				listener = "tls"
			}
			_, port, _ := net.SplitHostPort(front.srv.Addr(listener).String())
			report := filepath.Join(t.TempDir(), "junit.xml")
			args := append([]string{"-h", "127.0.0.1", "-p", port, "-o", "5", "-j", report}, front.args...)
			cmd := exec.Command(bin, args...)
			out, _ := cmd.CombinedOutput() // exits non-zero when a case fails
			passed, failed := parseJUnit(t, report)
			if passed+len(failed) < 140 {
				t.Fatalf("h2spec ran %d cases:\n%s", passed+len(failed), tail(out))
			}
			want := map[string]bool{}
			for k := range h2specDeviations {
				want[k] = true
			}
			for k := range front.extra {
				want[k] = true
			}
			for _, f := range failed {
				if !want[f] {
					t.Errorf("h2spec failure not among the documented deviations: %s\n%s", f, tail(out))
				}
				delete(want, f)
			}
			for k := range want {
				t.Errorf("documented deviation now passes (update the list): %s", k)
			}
			t.Logf("h2spec %s front end: %d passed, %d failed (documented deviations)", front.name, passed, len(failed))
		})
	}
}

// parseJUnit reads h2spec's JUnit report: the count of passed cases and the failed ones as
// "package: case".
func parseJUnit(t *testing.T, path string) (passed int, failed []string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("h2spec wrote no report: %v", err)
	}
	var doc struct {
		Suites []struct {
			Cases []struct {
				Package string    `xml:"package,attr"`
				Name    string    `xml:"classname,attr"`
				Failure *struct{} `xml:"failure"`
				Error   *struct{} `xml:"error"`
				Skipped *struct{} `xml:"skipped"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	data = bytes.ReplaceAll(data, []byte{0}, nil) // a failure message may quote a frame
	if err := xml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	for _, s := range doc.Suites {
		for _, c := range s.Cases {
			switch {
			case c.Failure != nil || c.Error != nil:
				failed = append(failed, c.Package+": "+c.Name)
			case c.Skipped == nil:
				passed++
			}
		}
	}
	sort.Strings(failed)
	return passed, failed
}

func tail(b []byte) string {
	s := string(b)
	if len(s) > 3000 {
		s = s[len(s)-3000:]
	}
	return strings.TrimSpace(s)
}
