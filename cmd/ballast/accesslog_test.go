package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestServeAccessLogRotation: the access log goes to its file, not stderr, and SIGUSR1 makes
// a running ballast reopen it after the file was renamed, as logrotate does.
func TestServeAccessLogRotation(t *testing.T) {
	a := e2eNewBackend(t, "a")
	dir := t.TempDir()
	file, log := filepath.Join(dir, "ballast.yaml"), filepath.Join(dir, "access.log")
	e2eWriteFile(t, file, fmt.Sprintf(`listeners:
  - address: 127.0.0.1:0
pools:
  - name: web
    backends:
      - address: %s
logging:
  access: true
  access_file: %s
  access_format: combined
`, a.addr(), log))
	p := e2eStart(t, "serve", "-c", file)
	m, _ := p.waitLine(false, 0, e2eServingRE)
	url := m[1]

	waitLog := func(path, want string) {
		t.Helper()
		deadline := time.Now().Add(e2eWait)
		for {
			data, _ := os.ReadFile(path)
			if strings.Contains(string(data), want) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s never contained %q; it has %q", path, want, data)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if _, status := e2eGet(t, url+"/one"); status != 200 {
		t.Fatalf("status %d", status)
	}
	waitLog(log, `"GET /one HTTP/1.1" 200`)
	if err := os.Rename(log, log+".1"); err != nil {
		t.Fatal(err)
	}
	p.signal(syscall.SIGUSR1)
	// The reopen is asynchronous to the signal: request until a line lands in the new file.
	deadline := time.Now().Add(e2eWait)
	for {
		if _, status := e2eGet(t, url+"/two"); status != 200 {
			t.Fatalf("status %d", status)
		}
		if data, _ := os.ReadFile(log); strings.Contains(string(data), "GET /two") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no line in the reopened access log")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if data, _ := os.ReadFile(log); strings.Contains(string(data), "GET /one") {
		t.Errorf("the new file has the line written before the rotation")
	}
	if strings.Contains(p.lines(&p.err), "GET /one") {
		t.Errorf("access lines reached stderr")
	}
}

// TestServeTrafficPolicy: a ballast process loaded from a file with traffic policy answers a
// redirect, adds headers, rate-limits with its error page and logs the request ID, all over
// real sockets; a reload that changes the policy applies it.
func TestServeTrafficPolicy(t *testing.T) {
	a := e2eNewBackend(t, "a")
	dir := t.TempDir()
	file, log := filepath.Join(dir, "ballast.yaml"), filepath.Join(dir, "access.log")
	conf := func(burst int) string {
		return fmt.Sprintf(`listeners:
  - address: 127.0.0.1:0
    request_id: true
routes:
  - path_prefix: /old/
    rewrite: {prefix: /old/, replacement: /new/}
    redirect: {status: 308}
  - pool: web
    rate_limit: {rate: 0.01, burst: %d}
    response_headers:
      set: ["X-Served-By: ${backend}"]
pools:
  - name: web
    backends:
      - {address: %s, name: a}
error_pages:
  - {status: 429, body: "slow down", content_type: text/plain}
logging:
  access: true
  access_file: %s
`, burst, a.addr(), log)
	}
	e2eWriteFile(t, file, conf(2))
	p := e2eStart(t, "serve", "-c", file)
	m, _ := p.waitLine(false, 0, e2eServingRE)
	url := m[1]
	c := &http.Client{Timeout: e2eWait, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	do := func(path string) *http.Response {
		t.Helper()
		resp, err := c.Get(url + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		resp.Header.Set("X-Body", string(body))
		return resp
	}
	if r := do("/old/x?y=1"); r.StatusCode != 308 || !strings.HasSuffix(r.Header.Get("Location"), "/new/x?y=1") {
		t.Errorf("redirect: %d %q", r.StatusCode, r.Header.Get("Location"))
	}
	r := do("/")
	if r.StatusCode != 200 || r.Header.Get("X-Served-By") != "a" || len(r.Header.Get("X-Request-Id")) != 32 {
		t.Errorf("first request: %d, X-Served-By %q, X-Request-Id %q", r.StatusCode, r.Header.Get("X-Served-By"), r.Header.Get("X-Request-Id"))
	}
	id := r.Header.Get("X-Request-Id")
	do("/")
	if r := do("/"); r.StatusCode != 429 || r.Header.Get("X-Body") != "slow down" || r.Header.Get("Retry-After") == "" {
		t.Errorf("over the burst: %d %q Retry-After %q", r.StatusCode, r.Header.Get("X-Body"), r.Header.Get("Retry-After"))
	}
	deadline := time.Now().Add(e2eWait)
	for {
		data, _ := os.ReadFile(log)
		if strings.Contains(string(data), `"request_id":"`+id+`"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the access log has no line with request_id %s: %q", id, data)
		}
		time.Sleep(10 * time.Millisecond)
	}

	// Reload with a larger burst on the same route: the bucket is kept (still empty), and a
	// route whose limit changed gets a new one. Here the limit changed: requests pass again.
	e2eWriteFile(t, file, conf(5))
	from := p.errCount()
	p.signal(syscall.SIGHUP)
	p.waitLine(true, from, regexp.MustCompile(`msg="configuration reloaded"`))
	if r := do("/"); r.StatusCode != 200 {
		t.Errorf("after the reload with a new limit: %d", r.StatusCode)
	}
}
