package main

import (
	"io"
	"regexp"
	"strings"
	"syscall"
	"testing"
)

// TestDemo: the demo starts its three backends and Ballast, serves, and stops cleanly on SIGINT.
func TestDemo(t *testing.T) {
	p := e2eStart(t, "demo", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0")
	m, _ := p.waitLine(false, 0, regexp.MustCompile(`^  ballast (http://\S+)`))
	status, _ := p.waitLine(false, 0, regexp.MustCompile(`^  status  (http://\S+)`))
	p.waitLine(false, 0, regexp.MustCompile(`bench -k -n 2000 -c 16 http://`))
	p.waitLine(false, 0, regexp.MustCompile(`^Ctrl-C stops everything`))
	seen := map[string]int{}
	for range 30 {
		resp, err := e2eClient.Get(m[1])
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		seen[resp.Header.Get("X-Ballast-Backend")]++
	}
	for name := range seen {
		if name != "fast" && name != "medium" && name != "slow" {
			t.Errorf("unexpected X-Ballast-Backend %q (all: %v)", name, seen)
		}
	}
	resp, err := e2eClient.Get(status[1] + "api/pools")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"name": "demo"`) {
		t.Errorf("status API: %d %.200s", resp.StatusCode, body)
	}
	p.signal(syscall.SIGINT)
	if code := p.wait(); code != 0 {
		t.Errorf("exit code %d after SIGINT, want 0", code)
	}
}
