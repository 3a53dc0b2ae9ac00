package main

import (
	"bufio"
	"bytes"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

func TestRealserverCommandFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"--mode", "dr"}, 1, "no VIP"},
		{[]string{"--vip", "10.0.0.1", "--mode", "nat"}, 1, `mode "nat"`},
		{[]string{"--vip", "10.0.0.1", "--mode", "tun"}, 1, "--iface"},
		{[]string{"--vip", "fe80::1"}, 2, "not an IPv4 address"},
		{[]string{"--vip", "10.0.0.1", "extra"}, 2, "unexpected argument"},
		{[]string{"-h"}, 0, "-vip address"},
	} {
		var out, errb bytes.Buffer
		stop := make(chan struct{})
		close(stop)
		code := serveRealserver(tc.args, &out, &errb, stop)
		if code != tc.code || !strings.Contains(errb.String(), tc.msg) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tc.args, code, errb.String(), tc.code, tc.msg)
		}
	}
}

var (
	realserverBinOnce sync.Once
	realserverBin     string
	realserverBinErr  error
)

// buildBallast builds the ballast binary once for the tests that run it as a process.
func buildBallast(t *testing.T) string {
	realserverBinOnce.Do(func() {
		dir, err := os.MkdirTemp("", "ballast-realserver-")
		if err != nil {
			realserverBinErr = err
			return
		}
		realserverBin = filepath.Join(dir, "ballast")
		out, err := exec.Command("go", "build", "-o", realserverBin, ".").CombinedOutput()
		if err != nil {
			realserverBinErr = err
			t.Logf("%s", out)
		}
	})
	if realserverBinErr != nil {
		t.Fatalf("building ballast: %v", realserverBinErr)
	}
	return realserverBin
}

func readSysctl(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/" + path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// TestRealserverCommandUndoesOnSIGTERM runs `ballast realserver` in a fresh network namespace,
// checks what it set up, sends SIGTERM and checks that everything is as before.
func TestRealserverCommandUndoesOnSIGTERM(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping: network namespaces and BPF need root")
	}
	bin := buildBallast(t)
	for _, mode := range []string{"dr", "tun"} {
		realserverRound(t, bin, mode)
	}
}

func realserverRound(t *testing.T, bin, mode string) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	ns, err := netns.New()
	if err != nil {
		t.Fatalf("new network namespace: %v", err)
	}
	defer ns.Close()
	defer netns.Set(orig)

	la := netlink.NewLinkAttrs()
	la.Name = "eth0"
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: "eth1"}); err != nil {
		t.Fatal(err)
	}
	eth0, _ := netlink.LinkByName("eth0")
	netlink.LinkSetUp(eth0)
	lo, _ := netlink.LinkByName("lo")
	kept, _ := netlink.ParseAddr("10.9.9.1/32") // already on lo: must stay after the undo
	if err := netlink.AddrAdd(lo, kept); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile("/proc/sys/net/ipv4/conf/eth0/arp_announce", []byte("1"), 0o644); err != nil {
		t.Fatal(err)
	}
	sysctls := []string{"all/arp_ignore", "all/arp_announce", "eth0/arp_ignore", "eth0/arp_announce"}
	before := map[string]string{}
	for _, s := range sysctls {
		before[s] = readSysctl(t, "net/ipv4/conf/"+s)
	}

	// Started from this thread, the process lives in the namespace.
	cmd := exec.Command(bin, "realserver", "--vip", "10.9.9.1", "--vip", "10.9.9.2", "--mode", mode, "--iface", "eth0")
	stdout, _ := cmd.StdoutPipe()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := make(chan string, 16)
	go func() {
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			lines <- s.Text()
		}
		close(lines)
	}()
	select {
	case l, ok := <-lines:
		if !ok || !strings.Contains(l, "ready") {
			cmd.Wait()
			t.Fatalf("%s: first line %q, stderr %s", mode, l, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: not ready after 30 s; stderr %s", mode, stderr.String())
	}

	vips := func() map[string]bool {
		addrs, _ := netlink.AddrList(lo, netlink.FAMILY_V4)
		m := map[string]bool{}
		for _, a := range addrs {
			m[a.IPNet.String()] = true
		}
		return m
	}
	tcx := func() int {
		r, err := link.QueryPrograms(link.QueryOptions{Target: eth0.Attrs().Index, Attach: ebpf.AttachTCXIngress})
		if err != nil {
			t.Fatalf("querying tcx: %v", err)
		}
		return len(r.Programs)
	}
	if v := vips(); !v["10.9.9.1/32"] || !v["10.9.9.2/32"] {
		t.Errorf("%s: lo holds %v, want both VIPs", mode, v)
	}
	for s, want := range map[string]string{"all/arp_ignore": "1", "all/arp_announce": "2", "eth0/arp_ignore": "1", "eth0/arp_announce": "2"} {
		if got := readSysctl(t, "net/ipv4/conf/"+s); got != want {
			t.Errorf("%s: %s = %s, want %s", mode, s, got, want)
		}
	}
	if l, _ := netlink.LinkByName("lo"); l.Attrs().Flags&net.FlagUp == 0 {
		t.Errorf("%s: lo is down while serving", mode)
	}
	wantTCX := map[string]int{"dr": 0, "tun": 1}[mode]
	if n := tcx(); n != wantTCX {
		t.Errorf("%s: %d tcx ingress programs on eth0, want %d", mode, n, wantTCX)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var rest []string
	for l := range lines {
		rest = append(rest, l)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("%s: exit after SIGTERM: %v; stderr %s", mode, err, stderr.String())
	}
	if !strings.Contains(strings.Join(rest, "\n"), "undone") {
		t.Errorf("%s: output after SIGTERM %q", mode, rest)
	}
	if v := vips(); !v["10.9.9.1/32"] || v["10.9.9.2/32"] {
		t.Errorf("%s: after undo lo holds %v, want only the address it had before", mode, v)
	}
	for _, s := range sysctls {
		if got := readSysctl(t, "net/ipv4/conf/"+s); got != before[s] {
			t.Errorf("%s: after undo %s = %s, want %s as before", mode, s, got, before[s])
		}
	}
	if l, _ := netlink.LinkByName("lo"); l.Attrs().Flags&net.FlagUp != 0 {
		t.Errorf("%s: lo was left up; it was down before", mode)
	}
	if n := tcx(); n != 0 {
		t.Errorf("%s: %d tcx programs left on eth0", mode, n)
	}
}
