package httpproxy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"ballast/config"
	"ballast/internal/testcert"
)

// HTTP/1.1 to backends over TLS on the fasthttp path: verified against the pool's CA (or not,
// only when insecure_skip_verify is written), with a client certificate for mTLS. A backend
// whose certificate does not verify gets no request in cleartext: the client sees 502.
func TestBackendTLS(t *testing.T) {
	clientCert, clientKey := writeClientCert(t)
	clientPEM, _ := os.ReadFile(clientCert)
	clientCAs := x509.NewCertPool()
	clientCAs.AppendCertsFromPEM(clientPEM)

	backend := func(mtls bool) (*httptest.Server, string) {
		s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			peer := "none"
			if len(r.TLS.PeerCertificates) > 0 {
				peer = "client-cert"
			}
			fmt.Fprintf(w, "%s %s sni=%s peer=%s", r.Proto, r.URL.RequestURI(), r.TLS.ServerName, peer)
		}))
		s.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes are the point
		if mtls {
			s.TLS = &tls.Config{ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: clientCAs}
		}
		s.StartTLS()
		t.Cleanup(s.Close)
		ca := filepath.Join(t.TempDir(), "ca.pem")
		writePEMCert(t, ca, s.Certificate().Raw)
		return s, ca
	}
	plain, plainCA := backend(false)
	mutual, mutualCA := backend(true)
	otherCA, _ := testcert.Write(t, t.TempDir(), "cert", 1)

	tests := []struct {
		name   string
		addr   string
		tls    config.BackendTLS
		status int
		body   string
	}{
		{"verified by the pool's CA", plain.Listener.Addr().String(), config.BackendTLS{CA: plainCA, ServerName: "example.com"}, 200, "HTTP/1.1 /x?y=1 sni=example.com peer=none"},
		{"wrong CA: no cleartext fallback", plain.Listener.Addr().String(), config.BackendTLS{CA: otherCA}, 502, ""},
		{"system roots do not know a test CA", plain.Listener.Addr().String(), config.BackendTLS{}, 502, ""},
		{"insecure_skip_verify written", plain.Listener.Addr().String(), config.BackendTLS{InsecureSkipVerify: true}, 200, "HTTP/1.1 /x?y=1 sni= peer=none"},
		{"mTLS with a client certificate", mutual.Listener.Addr().String(), config.BackendTLS{CA: mutualCA, ServerName: "example.com", Cert: clientCert, Key: clientKey}, 200, "HTTP/1.1 /x?y=1 sni=example.com peer=client-cert"},
		{"mTLS without one", mutual.Listener.Addr().String(), config.BackendTLS{CA: mutualCA, ServerName: "example.com"}, 502, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pc := testPool("tls", "roundrobin", tt.addr)
			bt := tt.tls
			pc.TLS = &bt
			tp := startProxy(t, testConfig(pc))
			resp, body := get(t, testClient(), "GET", tp.url("/x?y=1"), nil, nil)
			if resp.StatusCode != tt.status || (tt.body != "" && string(body) != tt.body) {
				t.Errorf("got %d %q, want %d %q", resp.StatusCode, body, tt.status, tt.body)
			}
			if tt.status == 502 && strings.Contains(string(body), "HTTP/1.1") {
				t.Errorf("the backend answered: %q", body)
			}
		})
	}
}

func writePEMCert(t *testing.T, path string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// writeClientCert writes a self-signed client certificate (ExtKeyUsageClientAuth) and its key.
func writeClientCert(t *testing.T) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(7), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "client.pem"), filepath.Join(dir, "client.key")
	writePEMCert(t, certFile, der)
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}
