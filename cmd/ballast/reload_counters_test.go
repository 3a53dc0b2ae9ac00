package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"ballast/admin"
)

var e2eAdminRE = regexp.MustCompile(`msg="admin listening" address=(http://\S+)`)

// e2ePool reads one pool from a running process's admin API.
func e2ePool(t *testing.T, adminURL, pool string) admin.PoolView {
	t.Helper()
	resp, err := e2eClient.Get(adminURL + "/api/pools/" + pool)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v admin.PoolView
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /api/pools/%s: %d %v", pool, resp.StatusCode, err)
	}
	return v
}

// TestServeReloadKeepsQueueCounters: the backlog counters of a pool (here: requests rejected
// because its only backend is at max_conns and there is no queue) survive SIGHUP, as the
// backends' counters do, and keep counting afterwards.
func TestServeReloadKeepsQueueCounters(t *testing.T) {
	entered := make(chan struct{}, 4)
	gate := make(chan struct{})
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			entered <- struct{}{}
			<-gate
		}
		fmt.Fprintln(w, "ok")
	}))
	t.Cleanup(be.Close)
	file := filepath.Join(t.TempDir(), "ballast.yaml")
	e2eWriteFile(t, file, fmt.Sprintf(`listeners:
  - address: 127.0.0.1:0
admin:
  address: 127.0.0.1:0
pools:
  - name: web
    max_conns: 1
    backends:
      - address: %s
`, strings.TrimPrefix(be.URL, "http://")))
	p := e2eStart(t, "serve", "-c", file)
	m, _ := p.waitLine(false, 0, e2eServingRE)
	url := m[1]
	m, _ = p.waitLine(true, 0, e2eAdminRE)
	adminURL := m[1]

	// reject holds the only slot with /hold and sends one request that finds it taken.
	reject := func() {
		t.Helper()
		held := make(chan int, 1)
		go func() {
			resp, err := e2eClient.Get(url + "/hold")
			if err != nil {
				held <- -1
				return
			}
			resp.Body.Close()
			held <- resp.StatusCode
		}()
		<-entered
		if body, status := e2eGet(t, url+"/"); status != http.StatusServiceUnavailable {
			t.Fatalf("with the slot taken: %d %q, want 503", status, body)
		}
		gate <- struct{}{}
		if s := <-held; s != 200 {
			t.Fatalf("the held request: status %d", s)
		}
	}
	reject()
	if got := e2ePool(t, adminURL, "web").QueueStats.Rejected; got != 1 {
		t.Fatalf("rejected = %d before the reload, want 1", got)
	}

	from := p.errCount()
	p.signal(syscall.SIGHUP)
	p.waitLine(true, from, regexp.MustCompile(`msg="configuration reloaded"`))
	if got := e2ePool(t, adminURL, "web").QueueStats.Rejected; got != 1 {
		t.Fatalf("rejected = %d after the reload, want the 1 from before", got)
	}
	reject()
	if got := e2ePool(t, adminURL, "web").QueueStats.Rejected; got != 2 {
		t.Fatalf("rejected = %d after one more rejection, want 2", got)
	}
	p.signal(syscall.SIGTERM)
	if code := p.wait(); code != 0 {
		t.Errorf("exit code %d after SIGTERM", code)
	}
}
