package main

import (
	"fmt"
	"os"
	"path/filepath"
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
