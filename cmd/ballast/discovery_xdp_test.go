package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"syscall"
	"testing"

	"ballast/internal/netlab"
	"ballast/internal/peertest"
)

// TestServeDirectorDiscovery: the XDP director's pool takes its real servers from a discovery
// source, a watched file or a real unbound (started in the director's namespace, its zone
// changed with unbound-control); a real server that appears gets new flows, one that leaves
// drains (weight 0 in the director's table) and is then removed from it. The director plane
// follows the pool's snapshots, so discovery reaches the kernel's table without any code of
// its own.
func TestServeDirectorDiscovery(t *testing.T) {
	for _, source := range []string{"file", "dns"} {
		t.Run(source, func(t *testing.T) { testDirectorDiscovery(t, source) })
	}
}

func testDirectorDiscovery(t *testing.T, source string) {
	x := newXDPLab(t, 2)
	adminAddr := "127.0.0.1:9192"
	dir := t.TempDir()
	file, backends := filepath.Join(dir, "ballast.yaml"), filepath.Join(dir, "backends.yaml")
	const name = "reals.ballast.test."
	records := func(idx ...int) []string {
		var out []string
		for _, i := range idx {
			out = append(out, fmt.Sprintf("%s 1 IN A %s", name, netlab.RealIP(i)))
		}
		return out
	}
	var setReals func(idx ...int)
	var disc string
	switch source {
	case "file":
		setReals = func(idx ...int) {
			body := "backends:\n"
			for _, i := range idx {
				body += fmt.Sprintf("  - address: %s:80\n", netlab.RealIP(i))
			}
			writeFileAtomic(t, backends, body)
		}
		setReals(0)
		disc = "{file: " + backends + "}"
	case "dns":
		bin := peertest.Binary(t, "unbound", "unbound")
		var zone *peertest.Zone
		if err := x.In(x.Director.NS, func() error { zone = peertest.UnboundZone(t, bin, records(0)...); return nil }); err != nil {
			t.Fatal(err)
		}
		setReals = func(idx ...int) { zone.Set(name, records(idx...)...) }
		disc = fmt.Sprintf("{dns: {name: %s, type: a, port: 80, resolvers: [%s], min_ttl: 100ms, max_ttl: 200ms}}", name, zone.Addr)
	}
	e2eWriteFile(t, file, fmt.Sprintf(`listeners:
  - {name: vip, address: %s:80, protocol: tcp, forwarding: dr, interface: eth0}
pools:
  - name: reals
    discovery: %s
routes: [{listener: vip, pool: reals}]
admin: {address: %s}
`, netlab.VIP, disc, adminAddr))
	p := x.startIn(x.Director.NS, "serve", "-c", file)
	p.waitLine(false, 0, regexp.MustCompile(`^ballast: serving on VIP`))
	url := "http://" + netlab.VIP.String() + "/"
	if seen := x.spread(url, 10, netlab.ClientIP); seen["real0"] != 10 {
		t.Fatalf("with real0 alone in the %s, 10 connections reached %v", source, seen)
	}
	setReals(0, 1)
	e2eWaitFor(t, "real1 in the director's table", func() bool { return len(realsOf(t, x.status(adminAddr))) == 2 })
	if seen := x.spread(url, 30, netlab.ClientIP); seen["real0"] == 0 || seen["real1"] == 0 {
		t.Errorf("after real1 appeared, 30 connections reached %v, want both", seen)
	}
	setReals(1)
	e2eWaitFor(t, "real0 to drain in the director", func() bool {
		r := realsOf(t, x.status(adminAddr))
		return len(r) == 2 && r[0].Weight == 0
	})
	if seen := x.spread(url, 20, netlab.ClientIP); seen["real1"] != 20 {
		t.Errorf("with real0 draining, 20 new connections reached %v, want all on real1", seen)
	}
	e2eWaitFor(t, "real0 to leave the director's table", func() bool {
		r := realsOf(t, x.status(adminAddr))
		return len(r) == 1 && r[0].Backend == netlab.RealIP(1).String()+":80"
	})
	st := x.status(adminAddr)
	if len(st.Discovery) != 1 || st.Discovery[0].Removed != 1 || st.Discovery[0].Stale {
		t.Errorf("discovery status %+v", st.Discovery)
	}
	p.signal(syscall.SIGTERM)
	if code := p.wait(); code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0", code)
	}
}

// writeFileAtomic replaces path as configuration tools do: a new file (a new inode) renamed
// over it.
func writeFileAtomic(t *testing.T, path, body string) {
	t.Helper()
	e2eWriteFile(t, path+".tmp", body)
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}
