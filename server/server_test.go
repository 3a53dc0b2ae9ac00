package server

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"ballast/config"
	"ballast/internal/testcert"
	"ballast/upstream"
)

// namedBackend answers every request with its name.
func namedBackend(t *testing.T, name string) string {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, name) }))
	t.Cleanup(s.Close)
	return strings.TrimPrefix(s.URL, "http://")
}

// startFile writes yaml to a file, loads it and starts a Server on it, shut down at cleanup.
func startFile(t *testing.T, yaml string) (*Server, string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "ballast.yaml")
	writeFile(t, file, yaml)
	cfg, err := config.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Start(cfg, Options{File: file, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return s, file
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

var client = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
	TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, // the test's own self-signed certificate
}}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// adminPost sends a change to the admin API from 127.0.0.1 with Host: 127.0.0.1.
func adminPost(t *testing.T, addr, path, token string) int {
	t.Helper()
	_, port, _ := net.SplitHostPort(addr)
	req, _ := http.NewRequest("POST", "http://127.0.0.1:"+port+path, strings.NewReader("{}"))
	req.Host = "127.0.0.1"
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// Sockets are matched to listeners by name: two listeners both configured on port 0, each
// routed to its own pool, serve their own routes, before and after a reload.
func TestListenersServedByName(t *testing.T) {
	a, b := namedBackend(t, "A"), namedBackend(t, "B")
	yaml := fmt.Sprintf(`
listeners:
  - {name: one, address: "127.0.0.1:0"}
  - {name: two, address: "127.0.0.1:0"}
pools:
  - {name: pa, backends: [{address: %q}]}
  - {name: pb, backends: [{address: %q}]}
routes:
  - {listener: one, pool: pa}
  - {listener: two, pool: pb}
`, a, b)
	s, file := startFile(t, yaml)
	check := func(when string) {
		for name, want := range map[string]string{"one": "A", "two": "B"} {
			if code, body := get(t, "http://"+s.Addr(name).String()+"/"); code != 200 || body != want {
				t.Errorf("%s: listener %s answered %d %q, want %q", when, name, code, body, want)
			}
		}
	}
	check("at start")
	writeFile(t, file, yaml+"logging: {level: debug}\n")
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	check("after a reload")
}

// Issue 8 item 14: the start-up line names a TLS listener with https://, and the URL it prints
// answers over TLS.
func TestDescribeNamesTLSListenersHTTPS(t *testing.T) {
	cert, key := testcert.Write(t, t.TempDir(), "cert", 1)
	be := namedBackend(t, "A")
	s, _ := startFile(t, fmt.Sprintf(`
listeners:
  - {name: secure, address: "127.0.0.1:0", tls: {cert: %q, key: %q}}
  - {name: plain, address: "127.0.0.1:0"}
pools:
  - {name: p, backends: [{address: %q}]}
`, cert, key, be))
	line := s.Describe()
	want := fmt.Sprintf("https://%s, http://%s ", s.Addr("secure"), s.Addr("plain"))
	if !strings.HasPrefix(line, want) {
		t.Fatalf("start-up line %q, want it to begin %q", line, want)
	}
	for _, url := range strings.Split(strings.Fields(line)[0]+" "+strings.Fields(line)[1], " ") {
		url = strings.TrimSuffix(url, ",")
		if code, body := get(t, url+"/"); code != 200 || body != "A" {
			t.Errorf("%s answered %d %q", url, code, body)
		}
	}
}

// Issue 8 item 4: start with the admin listener on every interface and a token; a reload
// that moves admin.address to loopback (the socket cannot move) and drops the token is
// refused whole, and changes still need the token, even from 127.0.0.1 with Host: 127.0.0.1.
func TestReloadCannotUnprotectTheAdminAPI(t *testing.T) {
	if ln, err := net.Listen("tcp", "0.0.0.0:0"); err != nil {
		t.Skipf("cannot bind 0.0.0.0: %v", err)
	} else {
		ln.Close()
	}
	be := namedBackend(t, "A")
	s, file := startFile(t, fmt.Sprintf(`
listeners: [{address: "127.0.0.1:0"}]
pools: [{name: p, backends: [{name: a, address: %q}]}]
admin: {address: "0.0.0.0:0", token: T-0123456789abcdef}
`, be))
	adminAddr := s.AdminAddr()
	if !strings.HasPrefix(adminAddr, "0.0.0.0:") && !strings.HasPrefix(adminAddr, "[::]:") {
		t.Fatalf("admin bound to %s, want the wildcard", adminAddr)
	}
	_, port, _ := net.SplitHostPort(adminAddr)
	writeFile(t, file, fmt.Sprintf(`
listeners: [{address: "127.0.0.1:0"}]
pools: [{name: p, backends: [{name: a, address: %q, weight: 5}]}]
admin: {address: "127.0.0.1:%s"}
`, be, port))
	if err := s.Reload(); err == nil || !strings.Contains(err.Error(), "token") {
		t.Fatalf("Reload = %v, want a refusal naming the token", err)
	}
	if code := adminPost(t, adminAddr, "/api/pools/p/backends/a/disable", ""); code != http.StatusUnauthorized {
		t.Fatalf("change without the token after the refused reload: %d, want 401", code)
	}
	if w := s.pools["p"].Backend("a").ConfigWeight(); w != 1 {
		t.Errorf("the refused reload changed the weight to %d", w)
	}
	if code := adminPost(t, adminAddr, "/api/pools/p/backends/a/disable", "T-0123456789abcdef"); code != 200 {
		t.Fatalf("change with the token: %d", code)
	}
	if st := s.pools["p"].Backend("a").State(); st != upstream.StateDisabled {
		t.Fatalf("a is %v after an authorised disable", st)
	}
}

// TestFixedOptionsChanged: only options a served listener cannot take on count as changes.
func TestFixedOptionsChanged(t *testing.T) {
	base := config.Listener{Name: "a", Address: ":80", MaxHeaderBytes: 8192}
	tests := []struct {
		name   string
		change func(l *config.Listener)
		want   bool
	}{
		{"nothing", func(*config.Listener) {}, false},
		{"expose_backend applies live", func(l *config.Listener) { l.ExposeBackend = true }, false},
		{"header limit", func(l *config.Listener) { l.MaxHeaderBytes = 4096 }, true},
		{"tls added", func(l *config.Listener) { l.TLS = &config.TLS{Cert: "c", Key: "k"} }, true},
	}
	for _, tt := range tests {
		b := base
		tt.change(&b)
		if got := fixedOptionsChanged(base, b); got != tt.want {
			t.Errorf("%s: got %v, want %v", tt.name, got, tt.want)
		}
	}
	withTLS := base
	withTLS.TLS = &config.TLS{Cert: "c", Key: "k"}
	same := base
	same.TLS = &config.TLS{Cert: "c", Key: "k"}
	if fixedOptionsChanged(withTLS, same) {
		t.Error("equal TLS settings in different pointers count as a change")
	}
}
