package httpproxy

import (
	"crypto/tls"
	"encoding/json"
	"net/http"
	"testing"

	"ballast/config"
	"ballast/internal/testcert"
)

func TestTLSListener(t *testing.T) {
	hb := startHTTPBin(t)
	certFile, keyFile := testcert.Write(t, t.TempDir(), "cert", 1)
	cfg := testConfig(testPool("bin", "roundrobin", hostOf(hb)))
	cfg.Listeners[0].TLS = &config.TLS{Cert: certFile, Key: keyFile}
	tp := startProxy(t, cfg)
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, body := get(t, c, "GET", "https://"+tp.addr+"/headers", nil, nil)
	if resp.StatusCode != 200 || resp.TLS == nil {
		t.Fatalf("status %d, TLS %v", resp.StatusCode, resp.TLS != nil)
	}
	var e echoed
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatal(err)
	}
	if got := e.Headers["X-Forwarded-Proto"]; len(got) != 1 || got[0] != "https" {
		t.Errorf("X-Forwarded-Proto = %q", got)
	}
}
