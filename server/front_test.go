//lint:file-ignore SA1019 issue 11 builds the HTTP/2 plane on golang.org/x/net/http2, deprecated since v0.62 in favour of net/http's own HTTP/2 (http.Server.Protocols, HTTP2Config); moving is a follow-up.

package server

import (
	"ballast/internal/testcert"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// protoBackend answers with the protocol and the X-Forwarded-Proto it got, and its name.
func protoBackend(t *testing.T, name string) string {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %s %s", name, r.Proto, r.Header.Get("X-Forwarded-Proto"))
	}))
	t.Cleanup(s.Close)
	return strings.TrimPrefix(s.URL, "http://")
}

func h2Client(tc *tls.Config) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http2.Transport{TLSClientConfig: tc}}
}

func h2cClient() *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http2.Transport{
		AllowHTTP: true,
		DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		},
	}}
}

func body(t *testing.T, c *http.Client, url string) (*http.Response, string) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// A TLS listener negotiates ALPN: h2 clients are served by the HTTP/2 plane, http/1.1 clients
// by fasthttp, both with X-Forwarded-Proto https, to the same HTTP/1.1 backend.
func TestTLSListenerALPNDispatch(t *testing.T) {
	dir := t.TempDir()
	cert, key := testcert.Write(t, dir, "a", 1)
	s, _ := startFile(t, fmt.Sprintf(`
listeners: [{name: web, address: "127.0.0.1:0", tls: {cert: %s, key: %s}}]
pools: [{name: p, backends: [{address: %s}]}]
`, cert, key, protoBackend(t, "b1")))
	addr := s.Addr("web").String()
	tc := &tls.Config{InsecureSkipVerify: true}

	tests := []struct {
		name      string
		client    *http.Client
		wantProto string
	}{
		{"h2", h2Client(tc), "HTTP/2.0"},
		{"http/1.1", &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}}}}, "HTTP/1.1"},
	}
	for _, tt := range tests {
		resp, got := body(t, tt.client, "https://"+addr+"/x")
		if resp.StatusCode != 200 || resp.Proto != tt.wantProto || got != "b1 HTTP/1.1 https" {
			t.Errorf("%s: status %d proto %s body %q; want 200 %s %q", tt.name, resp.StatusCode, resp.Proto, got, tt.wantProto, "b1 HTTP/1.1 https")
		}
		if resp.TLS == nil || resp.TLS.NegotiatedProtocol != map[string]string{"h2": "h2", "http/1.1": "http/1.1"}[tt.name] {
			t.Errorf("%s: negotiated %+v", tt.name, resp.TLS)
		}
	}
}

// Several certificates: the client's SNI chooses among them; no SNI or an unknown name gets
// the default. min_version 1.3 refuses a client that stops at TLS 1.2.
func TestTLSCertificatesBySNIAndMinVersion(t *testing.T) {
	dir := t.TempDir()
	defCert, defKey := testcert.Write(t, dir, "default", 10)
	apiCert, apiKey := testcert.Write(t, dir, "api", 20, "api.example.test")
	s, _ := startFile(t, fmt.Sprintf(`
listeners:
  - name: web
    address: "127.0.0.1:0"
    tls: {cert: %s, key: %s, certificates: [{cert: %s, key: %s}], min_version: "1.3"}
pools: [{name: p, backends: [{address: %s}]}]
`, defCert, defKey, apiCert, apiKey, protoBackend(t, "b1")))
	addr := s.Addr("web").String()
	tests := []struct {
		sni  string
		want int64
	}{{"", 10}, {"api.example.test", 20}, {"other.example.test", 10}}
	for _, tt := range tests {
		c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, ServerName: tt.sni})
		if err != nil {
			t.Fatalf("sni %q: %v", tt.sni, err)
		}
		got := c.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
		c.Close()
		if got != tt.want {
			t.Errorf("sni %q: certificate %d, want %d", tt.sni, got, tt.want)
		}
	}
	if c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, MaxVersion: tls.VersionTLS12}); err == nil {
		c.Close()
		t.Error("a TLS 1.2 client was accepted with min_version 1.3")
	}
}

// A reload re-reads the certificates: new connections get the new one, a connection opened
// before keeps working. A reload naming a missing file is refused and the old certificate
// keeps serving.
func TestTLSCertificateReload(t *testing.T) {
	dir := t.TempDir()
	cert, key := testcert.Write(t, dir, "a", 1)
	yaml := fmt.Sprintf(`
listeners: [{name: web, address: "127.0.0.1:0", tls: {cert: %s, key: %s}}]
pools: [{name: p, backends: [{address: %s}]}]
`, cert, key, protoBackend(t, "b1"))
	s, file := startFile(t, yaml)
	addr := s.Addr("web").String()
	old := h2Client(&tls.Config{InsecureSkipVerify: true})
	if resp, _ := body(t, old, "https://"+addr+"/"); resp.TLS.PeerCertificates[0].SerialNumber.Int64() != 1 {
		t.Fatal("first certificate not served")
	}
	testcert.Write(t, dir, "a", 2) // same files, new certificate
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	resp, got := body(t, old, "https://"+addr+"/again") // the same h2 connection
	if resp.StatusCode != 200 || got != "b1 HTTP/1.1 https" || resp.TLS.PeerCertificates[0].SerialNumber.Int64() != 1 {
		t.Errorf("old connection after reload: %d %q serial %d", resp.StatusCode, got, resp.TLS.PeerCertificates[0].SerialNumber.Int64())
	}
	fresh := h2Client(&tls.Config{InsecureSkipVerify: true})
	if resp, _ := body(t, fresh, "https://"+addr+"/"); resp.TLS.PeerCertificates[0].SerialNumber.Int64() != 2 {
		t.Errorf("new connection got serial %d, want 2", resp.TLS.PeerCertificates[0].SerialNumber.Int64())
	}
	writeFile(t, file, strings.Replace(yaml, key, key+".missing", 1))
	if err := s.Reload(); err == nil {
		t.Error("a reload with a missing key file was accepted")
	}
	if resp, _ := body(t, h2Client(&tls.Config{InsecureSkipVerify: true}), "https://"+addr+"/"); resp.TLS.PeerCertificates[0].SerialNumber.Int64() != 2 {
		t.Error("a refused reload changed the certificate")
	}
}

// An h2c listener serves HTTP/2 with prior knowledge and HTTP/1.1 on the same socket; a plain
// listener without h2c does not speak HTTP/2.
func TestH2CListener(t *testing.T) {
	s, _ := startFile(t, fmt.Sprintf(`
listeners:
  - {name: h2c, address: "127.0.0.1:0", h2c: true}
  - {name: plain, address: "127.0.0.1:0"}
pools: [{name: p, backends: [{address: %s}]}]
`, protoBackend(t, "b1")))
	h2cAddr, plainAddr := s.Addr("h2c").String(), s.Addr("plain").String()
	resp, got := body(t, h2cClient(), "http://"+h2cAddr+"/")
	if resp.Proto != "HTTP/2.0" || got != "b1 HTTP/1.1 http" {
		t.Errorf("h2c: %s %q", resp.Proto, got)
	}
	resp, got = body(t, client, "http://"+h2cAddr+"/")
	if resp.Proto != "HTTP/1.1" || got != "b1 HTTP/1.1 http" {
		t.Errorf("HTTP/1.1 on the h2c listener: %s %q", resp.Proto, got)
	}
	if _, err := h2cClient().Get("http://" + plainAddr + "/"); err == nil {
		t.Error("a listener without h2c answered HTTP/2 with prior knowledge")
	}
}

// Session resumption is on, and tickets issued before a certificate reload still resume.
func TestTLSSessionResumption(t *testing.T) {
	dir := t.TempDir()
	cert, key := testcert.Write(t, dir, "a", 1)
	s, _ := startFile(t, fmt.Sprintf(`
listeners: [{name: web, address: "127.0.0.1:0", tls: {cert: %s, key: %s}}]
pools: [{name: p, backends: [{address: %s}]}]
`, cert, key, protoBackend(t, "b1")))
	addr := s.Addr("web").String()
	cache := tls.NewLRUClientSessionCache(8)
	dial := func() bool {
		c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, ClientSessionCache: cache, ServerName: "localhost", NextProtos: []string{"http/1.1"}})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		// TLS 1.3 tickets arrive after the handshake: a request and its answer bring them in.
		fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		buf := make([]byte, 512)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(buf); err != nil {
			t.Fatal(err)
		}
		return c.ConnectionState().DidResume
	}
	if dial() {
		t.Fatal("the first connection resumed")
	}
	if !dial() {
		t.Error("the second connection did not resume a session")
	}
	testcert.Write(t, dir, "a", 2)
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	if !dial() {
		t.Error("a ticket from before the reload did not resume")
	}
}

// tls.ciphers narrows the TLS 1.2 suites: a TLS 1.2 client offering only another suite is
// refused, one offering a listed suite gets it.
func TestTLSCiphers(t *testing.T) {
	dir := t.TempDir()
	cert, key := testcert.Write(t, dir, "a", 1)
	s, _ := startFile(t, fmt.Sprintf(`
listeners: [{name: web, address: "127.0.0.1:0", tls: {cert: %s, key: %s, ciphers: [TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256]}}]
pools: [{name: p, backends: [{address: %s}]}]
`, cert, key, protoBackend(t, "b1")))
	addr := s.Addr("web").String()
	tests := []struct {
		suite uint16
		ok    bool
	}{
		{tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256, true},
		{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, false},
	}
	for _, tt := range tests {
		c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{tt.suite}})
		if (err == nil) != tt.ok {
			t.Errorf("suite %s: err %v, want ok=%v", tls.CipherSuiteName(tt.suite), err, tt.ok)
		}
		if err == nil {
			if got := c.ConnectionState().CipherSuite; got != tt.suite {
				t.Errorf("negotiated %s", tls.CipherSuiteName(got))
			}
			c.Close()
		}
	}
}
