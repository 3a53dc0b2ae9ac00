package main

import (
	"fmt"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"ballast/admin"
	"ballast/lab/backend"
)

// e2eErrBackend is a `ballast backend` process answering a fixed set of its requests with 500.
type e2eErrBackend struct {
	name string
	rate float64
	seed uint64
	addr string
}

var e2eBackendRE = regexp.MustCompile(`listening on (\S+)`)

func e2eStartErrBackend(t *testing.T, name string, rate float64, seed uint64) *e2eErrBackend {
	t.Helper()
	p := e2eStart(t, "backend", "--listen", "127.0.0.1:0", "--name", name,
		"--error-rate", fmt.Sprint(rate), "--seed", fmt.Sprint(seed))
	m, _ := p.waitLine(false, 0, e2eBackendRE)
	return &e2eErrBackend{name: name, rate: rate, seed: seed, addr: m[1]}
}

// firstRun is the number of requests after which the backend has answered k 500s in a row for
// the first time (backend.Fails fixes which of its requests fail).
func (b *e2eErrBackend) firstRun(k int) int {
	run := 0
	for i := uint64(0); ; i++ {
		if backend.Fails(b.seed, b.rate, i) {
			if run++; run == k {
				return int(i) + 1
			}
		} else {
			run = 0
		}
	}
}

// minShare is the lowest share of failures, less one, over every run of at least volume
// consecutive requests among the backend's first n: whichever requests an interval holds, it
// cannot show less. The one is for a release landing between the two counter loads of a sweep.
func (b *e2eErrBackend) minShare(volume, n int) float64 {
	prefix := make([]int, n+1)
	for i := range n {
		prefix[i+1] = prefix[i]
		if backend.Fails(b.seed, b.rate, uint64(i)) {
			prefix[i+1]++
		}
	}
	low := 1.0
	for a := 0; a+volume <= n; a++ {
		for e := a + volume; e <= n; e++ {
			low = min(low, float64(prefix[e]-prefix[a]-1)/float64(e-a))
		}
	}
	return low
}

// e2eOutlierServe runs ballast over the backends with this outlier section and returns the
// process, the proxy URL and the admin URL.
func e2eOutlierServe(t *testing.T, outlier string, bs ...*e2eErrBackend) (*e2eProc, string, string) {
	t.Helper()
	var cfg strings.Builder
	cfg.WriteString("listeners:\n  - address: 127.0.0.1:0\nadmin:\n  address: 127.0.0.1:0\npools:\n  - name: web\n    backends:\n")
	for _, b := range bs {
		fmt.Fprintf(&cfg, "      - address: %s\n        name: %s\n", b.addr, b.name)
	}
	cfg.WriteString("    outlier:\n" + outlier)
	file := filepath.Join(t.TempDir(), "ballast.yaml")
	e2eWriteFile(t, file, cfg.String())
	p := e2eStart(t, "serve", "-c", file)
	m, _ := p.waitLine(false, 0, e2eServingRE)
	a, _ := p.waitLine(true, 0, e2eAdminRE)
	return p, m[1], a[1]
}

func e2eBackendView(t *testing.T, adminURL, id string) admin.BackendView {
	t.Helper()
	for _, b := range e2ePool(t, adminURL, "web").Backends {
		if b.ID == id {
			return b
		}
	}
	t.Fatalf("backend %s not in the pool", id)
	return admin.BackendView{}
}

// e2eSendOne sends one request and returns the name of the backend that answered and the status.
func e2eSendOne(t *testing.T, url string) (string, int) {
	t.Helper()
	resp, err := e2eClient.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	resp.Body.Close()
	return resp.Header.Get(backend.HeaderName), resp.StatusCode
}

// e2eWaitFor polls cond every 10 ms, bounded by e2eWait (a hang guard, not a timing test).
func e2eWaitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(e2eWait); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// TestServeOutlierConsecutiveFailures: behind roundrobin, `ballast backend --error-rate 0.5` and
// `--error-rate 0.9` are ejected by consecutive_failures: 3 once they have answered their first
// three 500s in a row (known in advance from the seed), although successes come between the
// runs; a healthy backend is never ejected; an ejected backend comes back when its ejection
// ends. The old sampling never ejected a backend that answered any success within 100 ms.
func TestServeOutlierConsecutiveFailures(t *testing.T) {
	// Seeds whose first run of three 500s comes after some successes, so that the test shows
	// them not resetting anything that matters.
	seed := func(rate float64) uint64 {
		for s := uint64(1); ; s++ {
			if b := (&e2eErrBackend{rate: rate, seed: s}); b.firstRun(3) >= 8 {
				return s
			}
		}
	}
	healthy := e2eStartErrBackend(t, "healthy", 0, 1)
	half := e2eStartErrBackend(t, "half", 0.5, seed(0.5))
	ninety := e2eStartErrBackend(t, "ninety", 0.9, seed(0.9))
	_, url, adminURL := e2eOutlierServe(t, "      consecutive_failures: 3\n      include_5xx: true\n      base_ejection: 1s\n      max_ejection_percent: 100\n", healthy, half, ninety)

	need := map[string]int{half.name: half.firstRun(3), ninety.name: ninety.firstRun(3)}
	t.Logf("requests until the first run of three 500s: %v", need)
	got := map[string]int{}
	bound := 3*max(need[half.name], need[ninety.name]) + 30
	for i := 0; got[half.name] < need[half.name] || got[ninety.name] < need[ninety.name]; i++ {
		if i == bound {
			t.Fatalf("after %d requests the backends answered %v, want at least %v", bound, got, need)
		}
		name, status := e2eSendOne(t, url+"/")
		if status != 200 && status != 500 {
			t.Fatalf("status %d from %q", status, name)
		}
		got[name]++
	}
	for _, b := range []*e2eErrBackend{half, ninety} {
		e2eWaitFor(t, b.name+" ejected", func() bool { return e2eBackendView(t, adminURL, b.name).Ejections >= 1 })
	}
	if v := e2eBackendView(t, adminURL, healthy.name); v.Ejections != 0 || v.State != "up" {
		t.Errorf("healthy backend: %d ejections, state %s", v.Ejections, v.State)
	}

	// Back after base_ejection (1 s, the first ejection), and not before it ends.
	for _, b := range []*e2eErrBackend{half, ninety} {
		v := e2eBackendView(t, adminURL, b.name)
		if v.State != "ejected" {
			continue // already back (a slow machine): nothing to time
		}
		until := *v.EjectedUntil
		e2eWaitFor(t, b.name+" back", func() bool { return e2eBackendView(t, adminURL, b.name).State != "ejected" })
		if now := time.Now(); now.Before(until) {
			t.Errorf("%s back at %v, before its ejection ended at %v", b.name, now, until)
		}
	}
}

// TestServeOutlierFailurePercentage: with failure_percentage alone (no consecutive_failures),
// the 50 % and 90 % backends are ejected at the end of an interval in which they had
// request_volume requests. The threshold is the lowest failure share any run of request_volume
// or more of their requests can show (computed from the seed), so whichever requests an
// interval holds, the ejection is certain; the healthy backend (0 %) never is.
func TestServeOutlierFailurePercentage(t *testing.T) {
	const volume, maxSent = 20, 3000
	healthy := e2eStartErrBackend(t, "healthy", 0, 1)
	half := e2eStartErrBackend(t, "half", 0.5, 9)
	ninety := e2eStartErrBackend(t, "ninety", 0.9, 9)
	threshold := int(100 * min(half.minShare(volume, maxSent), ninety.minShare(volume, maxSent)))
	if threshold < 1 {
		t.Fatalf("seeds give a run of %d requests with (almost) no failure; pick others", volume)
	}
	t.Logf("threshold %d%%", threshold)
	p, url, adminURL := e2eOutlierServe(t, fmt.Sprintf("      include_5xx: true\n      base_ejection: 30s\n      max_ejection_percent: 100\n"+
		"      interval: 500ms\n      failure_percentage:\n        threshold: %d\n        request_volume: %d\n", threshold, volume), healthy, half, ninety)

	ejected := func(name string) bool { return e2eBackendView(t, adminURL, name).Ejections >= 1 }
	sent := 0
	for !ejected(half.name) || !ejected(ninety.name) {
		for range 10 {
			if sent++; sent > maxSent {
				t.Fatalf("%d requests sent and %s / %s not both ejected", maxSent, half.name, ninety.name)
			}
			if _, status := e2eSendOne(t, url+"/"); status != 200 && status != 500 {
				t.Fatalf("status %d", status)
			}
		}
	}
	if v := e2eBackendView(t, adminURL, healthy.name); v.Ejections != 0 || v.State != "up" {
		t.Errorf("healthy backend: %d ejections, state %s", v.Ejections, v.State)
	}
	for _, b := range []*e2eErrBackend{half, ninety} {
		p.waitLine(true, 0, regexp.MustCompile(`backend ejected \(outlier detection\)" pool=web backend=`+b.name+` detail="\d+ of \d+ requests failed in 500ms \(failure_percentage threshold \d+%\)`))
	}
	// Everything now goes to the healthy backend.
	for range 20 {
		if name, status := e2eSendOne(t, url+"/"); name != healthy.name || status != http.StatusOK {
			t.Fatalf("with both failing backends ejected: %d from %q", status, name)
		}
	}
}
