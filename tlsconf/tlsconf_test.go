package tlsconf

import (
	"crypto/tls"
	"path/filepath"
	"strings"
	"testing"

	"ballast/config"
	"ballast/internal/testcert"
)

// Build reads every certificate, applies the policy and names the file that failed; Install
// changes what the next handshake gets while the outer Config stays the same.
func TestServerBuildAndInstall(t *testing.T) {
	dir := t.TempDir()
	c1, k1 := testcert.Write(t, dir, "a", 1, "a.test")
	c2, k2 := testcert.Write(t, dir, "b", 2, "b.test")
	cfg := &config.TLS{Cert: c1, Key: k1, Certificates: []config.Certificate{{Cert: c2, Key: k2}}, MinVersion: "1.3"}
	inner, err := Build(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(inner.Certificates) != 2 || inner.MinVersion != tls.VersionTLS13 || inner.NextProtos[0] != ALPNH2 {
		t.Errorf("built %d certificates, min %x, ALPN %v", len(inner.Certificates), inner.MinVersion, inner.NextProtos)
	}
	s := NewServer(inner)
	outer := s.Config()
	got, _ := outer.GetConfigForClient(&tls.ClientHelloInfo{})
	if got != inner {
		t.Error("the handshake does not get the built configuration")
	}
	again, _ := Build(&config.TLS{Cert: c2, Key: k2, MinVersion: "1.2"})
	s.Install(again)
	if got, _ := s.Config().GetConfigForClient(&tls.ClientHelloInfo{}); got != again || s.Config() != outer {
		t.Error("Install did not swap the inner configuration, or replaced the outer one")
	}
	if _, err := Build(&config.TLS{Cert: c1, Key: filepath.Join(dir, "missing.key")}); err == nil || !strings.Contains(err.Error(), "missing.key") {
		t.Errorf("missing key: %v", err)
	}
	if _, err := Build(&config.TLS{Cert: c1, Key: k1, Certificates: []config.Certificate{{Cert: c2, Key: k1}}}); err == nil || !strings.Contains(err.Error(), c2) {
		t.Errorf("mismatched pair: %v", err)
	}
}

// Backend: the server name defaults to the backend's host, verification is skipped only when
// written, a CA file without certificates and a missing client key are errors.
func TestBackend(t *testing.T) {
	dir := t.TempDir()
	c, k := testcert.Write(t, dir, "client", 3, "client.test")
	tests := []struct {
		name    string
		tls     config.BackendTLS
		addr    string
		sni     string
		skip    bool
		wantErr string
	}{
		{"defaults", config.BackendTLS{}, "db.internal:443", "db.internal", false, ""},
		{"server_name", config.BackendTLS{ServerName: "api.example"}, "10.0.0.1:443", "api.example", false, ""},
		{"skip only when written", config.BackendTLS{InsecureSkipVerify: true}, "h:1", "h", true, ""},
		{"CA file", config.BackendTLS{CA: c}, "h:1", "h", false, ""},
		{"client certificate", config.BackendTLS{Cert: c, Key: k}, "h:1", "h", false, ""},
		{"CA without PEM", config.BackendTLS{CA: k}, "h:1", "", false, "no PEM certificate"},
		{"missing client key", config.BackendTLS{Cert: c, Key: filepath.Join(dir, "nope")}, "h:1", "", false, "nope"},
	}
	for _, tt := range tests {
		bt := tt.tls
		got, err := Backend(&bt, tt.addr, []string{ALPNH2})
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%s: error %v, want %q", tt.name, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if got.ServerName != tt.sni || got.InsecureSkipVerify != tt.skip || got.MinVersion != tls.VersionTLS12 {
			t.Errorf("%s: sni %q skip %v min %x", tt.name, got.ServerName, got.InsecureSkipVerify, got.MinVersion)
		}
	}
}
