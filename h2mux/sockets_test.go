package h2mux_test

import (
	"crypto/tls"
	"encoding/xml"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"ballast/internal/h2muxtest"
	"ballast/internal/testcert"
)

// fronts starts the harness on a TLS listener (ALPN h2) and an h2c one and returns their
// addresses.
func fronts(t *testing.T, srv *h2muxtest.Server) (tlsAddr, h2cAddr string) {
	t.Helper()
	certFile, keyFile := testcert.Write(t, t.TempDir(), "cert", 1, "localhost")
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	tl, err := h2muxtest.Listen(srv, "", &cert)
	if err != nil {
		t.Fatal(err)
	}
	pl, err := h2muxtest.Listen(srv, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tl.Close(); pl.Close(); srv.Close() })
	return tl.Addr().String(), pl.Addr().String()
}

func page() *h2muxtest.Server {
	return &h2muxtest.Server{Page: []byte("hello from h2mux, long enough for the flow-control cases of h2spec\n")}
}

// h2specDeviations are the h2spec cases the harness fails, each with its reason; the test
// fails on any other failure and on a listed one that passes. None.
var h2specDeviations = map[string]string{}

// TestH2Spec runs h2spec against the state machine on sockets, TLS and h2c, and wants every
// case to pass.
func TestH2Spec(t *testing.T) {
	bin, err := exec.LookPath("h2spec")
	if err != nil {
		t.Skip("h2spec not installed")
	}
	if testing.Short() {
		t.Skip("h2spec takes about 15 s per front end")
	}
	srv := page()
	tlsAddr, h2cAddr := fronts(t, srv)
	for _, front := range []struct {
		name, addr string
		args       []string
	}{{"tls", tlsAddr, []string{"-t", "-k"}}, {"h2c", h2cAddr, nil}} {
		t.Run(front.name, func(t *testing.T) {
			_, port, _ := net.SplitHostPort(front.addr)
			report := filepath.Join(t.TempDir(), "junit.xml")
			args := append([]string{"-h", "127.0.0.1", "-p", port, "-o", "5", "-j", report}, front.args...)
			out, _ := exec.Command(bin, args...).CombinedOutput()
			passed, failed, sections := parseJUnit(t, report)
			if passed+len(failed) < 145 {
				t.Fatalf("h2spec ran %d cases:\n%s", passed+len(failed), tail(out))
			}
			want := map[string]bool{}
			for k := range h2specDeviations {
				want[k] = true
			}
			for _, f := range failed {
				if !want[f] {
					t.Errorf("h2spec failure: %s", f)
				}
				delete(want, f)
			}
			for k := range want {
				t.Errorf("documented deviation now passes (update the list): %s", k)
			}
			t.Logf("h2spec %s: %d passed, %d failed; per section: %s", front.name, passed, len(failed), sections)
			if t.Failed() {
				t.Logf("h2spec output:\n%s", tail(out))
			}
		})
	}
}

// parseJUnit reads h2spec's JUnit report: the passed cases, the failed ones as
// "package: case", and "section passed/run" per chapter.
func parseJUnit(t *testing.T, path string) (passed int, failed []string, sections string) {
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
	if err := xml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	type count struct{ ok, all int }
	per := map[string]*count{}
	for _, s := range doc.Suites {
		for _, c := range s.Cases {
			// "http2/6.5.3" counts in "http2/6", "generic/3.1" in "generic/3".
			sec := c.Package
			if i := strings.IndexByte(sec, '/'); i >= 0 {
				if j := strings.IndexByte(sec[i:], '.'); j >= 0 {
					sec = sec[:i+j]
				}
			}
			if per[sec] == nil {
				per[sec] = &count{}
			}
			switch {
			case c.Failure != nil || c.Error != nil:
				failed = append(failed, c.Package+": "+c.Name)
				per[sec].all++
			case c.Skipped == nil:
				passed++
				per[sec].ok++
				per[sec].all++
			}
		}
	}
	sort.Strings(failed)
	var names []string
	for k, v := range per {
		names = append(names, fmt.Sprintf("%s %d/%d", k, v.ok, v.all))
	}
	sort.Strings(names)
	return passed, failed, strings.Join(names, ", ")
}

func tail(b []byte) string {
	s := string(b)
	if len(s) > 6000 {
		s = s[len(s)-6000:]
	}
	return strings.TrimSpace(s)
}
