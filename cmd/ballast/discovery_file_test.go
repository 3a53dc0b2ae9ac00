package main

import (
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// TestServeFileDiscovery: a pool takes backends from a watched file beside its configured one;
// an edit adds and drains backends; a bad file keeps the last good set and the API names
// file:line and the field; a reload keeps the discovered backends with their counters.
func TestServeFileDiscovery(t *testing.T) {
	s, a, b, c := e2eNewBackend(t, "s"), e2eNewBackend(t, "a"), e2eNewBackend(t, "b"), e2eNewBackend(t, "c")
	dir := t.TempDir()
	file, list := filepath.Join(dir, "ballast.yaml"), filepath.Join(dir, "backends.yaml")
	writeFileAtomic(t, list, fmt.Sprintf("backends:\n  - address: %s\n  - {address: %s, weight: 2}\n", a.addr(), b.addr()))
	conf := func(extra string) {
		e2eWriteFile(t, file, fmt.Sprintf(`listeners: [{address: "127.0.0.1:0"}]
pools:
  - name: web
    backends: [{address: %s}]
    discovery: {file: %s}
%sadmin: {address: "127.0.0.1:0"}
`, s.addr(), list, extra))
	}
	conf("")
	p := e2eStart(t, "serve", "-c", file)
	m, _ := p.waitLine(false, 0, e2eServingRE)
	url := m[1] + "/"
	am, _ := p.waitLine(true, 0, e2eAdminRE)
	adminURL := am[1]
	if got := e2eSplit(t, url, 40); got["s"] == 0 || got["a"] == 0 || got["b"] == 0 {
		t.Fatalf("40 requests reached %v, want s, a and b", got)
	}
	live := func() []string { return liveIDs(findPool(t, adminPools(t, adminURL), "web")) }
	want := func(bs ...*e2eBackend) []string {
		var out []string
		for _, x := range bs {
			out = append(out, x.addr())
		}
		slices.Sort(out)
		return out
	}

	// A bad edit: nothing changes, and the API says where the problem is.
	writeFileAtomic(t, list, fmt.Sprintf("backends:\n  - address: %s\n  - address: 127.0.0.1\n", a.addr()))
	e2eWaitFor(t, "the bad file to be reported", func() bool {
		d := adminPools(t, adminURL).Discovery
		return len(d) == 1 && d[0].Stale
	})
	d := adminPools(t, adminURL).Discovery[0]
	if !strings.Contains(d.LastError, list+`:3:14: backends[1].address: "127.0.0.1" is not host:port`) || d.Source != "file "+list {
		t.Errorf("discovery status %+v", d)
	}
	if got := live(); !slices.Equal(got, want(s, a, b)) {
		t.Errorf("after a bad file the pool has %v", got)
	}

	// A good edit: b drains and goes, c comes.
	writeFileAtomic(t, list, fmt.Sprintf("backends:\n  - address: %s\n  - address: %s\n", a.addr(), c.addr()))
	e2eWaitFor(t, "the edit to apply", func() bool { return slices.Equal(live(), want(s, a, c)) })
	e2eWaitFor(t, "b to be removed", func() bool {
		for _, x := range findPool(t, adminPools(t, adminURL), "web").Backends {
			if x.ID == b.addr() {
				return false
			}
		}
		return true
	})
	if got := e2eSplit(t, url, 30); got["b"] != 0 || got["c"] == 0 {
		t.Errorf("after the edit 30 requests reached %v", got)
	}

	// A reload keeps the discovered backends and their counters.
	var before uint64
	for _, x := range findPool(t, adminPools(t, adminURL), "web").Backends {
		if x.ID == a.addr() {
			before = x.Requests
		}
	}
	conf("    slow_start: 1s\n")
	from := p.errCount()
	p.signal(syscall.SIGHUP)
	p.waitLine(true, from, regexp.MustCompile(`configuration reloaded`))
	pv := findPool(t, adminPools(t, adminURL), "web")
	var after uint64
	for _, x := range pv.Backends {
		if x.ID == a.addr() {
			after = x.Requests
		}
	}
	if got := liveIDs(pv); !slices.Equal(got, want(s, a, c)) || after < before || before == 0 {
		t.Errorf("after the reload: %v, a's requests %d → %d (want kept)", got, before, after)
	}
	if len(pv.Overrides.Added) != 0 {
		t.Errorf("discovered backends listed as runtime additions: %v", pv.Overrides.Added)
	}
	if got := e2eSplit(t, url, 30); got["a"] == 0 || got["c"] == 0 || got["s"] == 0 {
		t.Errorf("after the reload 30 requests reached %v", got)
	}
}
