package main

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"ballast/admin"
	"ballast/internal/peertest"
)

// The UDP flood (issue 25): a udp listener flooded with datagrams from thousands of source
// addresses, each a new flow, while one established flow keeps talking, the admin API is read
// and a tcp listener takes connections. ballast runs under a descriptor limit of
// floodNoFile, so the flood is far more flows than it has descriptors for.

const (
	floodNoFile  = 4096 // the child's RLIMIT_NOFILE
	floodSources = 8000 // spoofed clients, one datagram each
	floodRate    = 4000 // their datagrams per second
	// floodRSSPerFlow bounds the resident memory one flow adds (the flow, its map entries,
	// its first datagram until the backend answers); a flow used to cost ~128 KiB (a goroutine
	// whose 64 KiB buffer grew its stack).
	floodRSSPerFlow = 8 << 10
)

// TestServeUDPFlood: flows cost bytes, not goroutines and buffers, and a flood of new flows
// (8000 source addresses at 4000/s, under a descriptor limit of 4096) is stopped by the
// descriptor budget and the new-flow rate, counted, and harms nothing else: the admin API
// answers throughout, a tcp listener accepts, an established flow loses under 1 % of its
// datagrams, no backend is blamed, the process keeps its descriptor reserve, and every
// datagram read is forwarded or counted in one drop reason.
func TestServeUDPFlood(t *testing.T) {
	if _, err := exec.LookPath("prlimit"); err != nil {
		t.Skip("needs prlimit (util-linux)")
	}
	ua, ub := peertest.UDPNamer(t, "ua"), peertest.UDPNamer(t, "ub")
	tb := peertest.TCPGreeter(t, "tb")
	file := filepath.Join(t.TempDir(), "ballast.yaml")
	e2eWriteFile(t, file, fmt.Sprintf(`
listeners:
  - {name: dns, address: "127.0.0.1:0", protocol: udp, new_flow_rate: 2000, new_flow_burst: 200}
  - {name: db, address: "127.0.0.1:0", protocol: tcp}
pools:
  - {name: udp, backends: [{name: ua, address: %q}, {name: ub, address: %q}]}
  - {name: tcp, backends: [{name: tb, address: %q}]}
routes:
  - {listener: dns, pool: udp}
  - {listener: db, pool: tcp}
admin: {address: "127.0.0.1:0"}
`, ua, ub, tb))
	p := e2eStartCmd(t, exec.Command("prlimit", fmt.Sprintf("--nofile=%d:%d", floodNoFile, floodNoFile), "--", e2eBin, "serve", "-c", file))
	ls := e2eListeners(p)
	am, _ := p.waitLine(true, 0, e2eAdminRE)
	base := am[1]
	pid := p.cmd.Process.Pid
	udpAddr := netip.MustParseAddrPort(ls["udp"][0])

	// The established flow: a datagram every 5 ms, each answered, through the whole flood.
	_, est := udpAsk(t, udpAddr.String(), "hello")
	before := adminPools(t, base)
	rssBefore := procRSS(t, pid)
	var estSent, estGot atomic.Int64
	stopEst := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		buf := make([]byte, 256)
		for {
			_ = est.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
			n, err := est.Read(buf)
			if err != nil {
				select {
				case <-stopEst:
					return
				default:
					continue
				}
			}
			if strings.HasSuffix(string(buf[:n]), ":est") {
				estGot.Add(1)
			}
		}
	}()
	go func() {
		defer wg.Done()
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stopEst:
				return
			case <-tick.C:
				if _, err := est.Write([]byte("est")); err == nil {
					estSent.Add(1)
				}
			}
		}
	}()

	// The admin API and the tcp listener, polled throughout.
	var adminOK, adminFail, tcpOK, tcpFail atomic.Int64
	var firstFail atomic.Value
	stopPoll := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		c := &http.Client{Timeout: 2 * time.Second}
		for {
			select {
			case <-stopPoll:
				return
			case <-time.After(50 * time.Millisecond):
			}
			resp, err := c.Get(base + "/metrics")
			if err == nil {
				resp.Body.Close()
			}
			if err != nil || resp.StatusCode != 200 {
				adminFail.Add(1)
				firstFail.CompareAndSwap(nil, fmt.Sprintf("GET /metrics: %v", err))
			} else {
				adminOK.Add(1)
			}
			tc, err := net.DialTimeout("tcp", ls["tcp"][0], 2*time.Second)
			if err == nil {
				_ = tc.SetReadDeadline(time.Now().Add(2 * time.Second))
				buf := make([]byte, 3)
				_, err = tc.Read(buf)
				tc.Close()
			}
			if err != nil {
				tcpFail.Add(1)
				firstFail.CompareAndSwap(nil, fmt.Sprintf("tcp listener: %v", err))
			} else {
				tcpOK.Add(1)
			}
		}
	}()

	// The flood: each datagram from its own address in 127.3.0.0/16, paced at floodRate.
	start := time.Now()
	sent := 0
	for sent < floodSources {
		due := int(time.Since(start).Seconds()*floodRate) + 1
		for ; sent < min(due, floodSources); sent++ {
			floodOne(t, sent, udpAddr)
		}
		time.Sleep(time.Millisecond)
	}
	floodTook := time.Since(start)
	time.Sleep(200 * time.Millisecond) // the established flow keeps talking after the flood
	rssAfter := procRSS(t, pid)
	fds := procFDs(t, pid)
	close(stopPoll)
	close(stopEst)
	wg.Wait()

	// A last datagram of the established flow makes the kernel's drop count current.
	lastSent := 0
	buf := make([]byte, 256)
	for ; lastSent < 10; lastSent++ {
		_, _ = est.Write([]byte("last"))
		_ = est.SetReadDeadline(time.Now().Add(time.Second))
		if n, err := est.Read(buf); err == nil && strings.HasSuffix(string(buf[:n]), ":last") {
			lastSent++
			break
		}
	}
	var after admin.ListenerStats
	eventually(t, func() bool {
		after = findListener(t, adminPools(t, base), "dns")
		return after.Datagrams >= uint64(floodSources)
	})
	bl := findListener(t, before, "dns")
	t.Logf("flood: %d sources in %v; flows %d (cap in force %d), datagrams %d, forwarded %d, dropped: descriptors %d, rate %d, max_flows %d, no_backend %d, send %d, overflow %d",
		floodSources, floodTook.Round(time.Millisecond), after.Flows, after.MaxFlows, after.Datagrams, after.Forwarded,
		after.DroppedDescriptors, after.DroppedRate, after.DroppedMaxFlows, after.DroppedNoBackend, after.DroppedSend, after.DroppedOverflow)
	flows := int64(after.Flows - bl.Flows)
	perFlow := (rssAfter - rssBefore) / max(flows, 1)
	t.Logf("established flow: %d sent, %d answered; admin %d ok %d failed; tcp %d ok %d failed; RSS %d → %d kB (%d B per flow); %d descriptors open",
		estSent.Load(), estGot.Load(), adminOK.Load(), adminFail.Load(), tcpOK.Load(), tcpFail.Load(), rssBefore>>10, rssAfter>>10, perFlow, fds)

	if adminFail.Load() > 0 || tcpFail.Load() > 0 || adminOK.Load() == 0 || tcpOK.Load() == 0 {
		t.Errorf("admin API %d ok / %d failed, tcp listener %d ok / %d failed during the flood; first failure: %v",
			adminOK.Load(), adminFail.Load(), tcpOK.Load(), tcpFail.Load(), firstFail.Load())
	}
	if s, g := estSent.Load(), estGot.Load(); s < 100 || float64(s-g) > 0.01*float64(s) {
		t.Errorf("the established flow lost %d of %d datagrams (want under 1 %%)", s-g, s)
	}
	// The reserve is a quarter of the limit (docs/l4.md); half of it must still be free.
	if after.MaxFlows <= 0 || after.MaxFlows > floodNoFile*3/4 {
		t.Errorf("flow cap in force %d: the descriptor budget should leave a quarter of %d descriptors", after.MaxFlows, floodNoFile)
	}
	if after.Active > int64(after.MaxFlows) || fds > floodNoFile*7/8 {
		t.Errorf("%d live flows (cap %d), %d descriptors open of %d: the reserve was not kept", after.Active, after.MaxFlows, fds, floodNoFile)
	}
	if after.DroppedDescriptors == 0 || after.DroppedRate == 0 {
		t.Errorf("the flood should meet both the descriptor budget and the new-flow rate: %+v", after)
	}
	if perFlow > floodRSSPerFlow {
		t.Errorf("RSS grew %d bytes per flow over %d flows, want at most %d", perFlow, flows, floodRSSPerFlow)
	}
	// Every datagram read is forwarded or dropped for one reason; with the kernel's drops,
	// that is every datagram sent.
	read := after.Datagrams - bl.Datagrams
	accounted := (after.Forwarded - bl.Forwarded) + (after.DroppedDescriptors - bl.DroppedDescriptors) + (after.DroppedRate - bl.DroppedRate) +
		(after.DroppedMaxFlows - bl.DroppedMaxFlows) + (after.DroppedNoBackend - bl.DroppedNoBackend) + (after.DroppedSend - bl.DroppedSend)
	if read != accounted {
		t.Errorf("%d datagrams read, %d forwarded or dropped by reason", read, accounted)
	}
	total := uint64(floodSources) + uint64(estSent.Load()) + uint64(lastSent)
	if got := read + after.DroppedOverflow - bl.DroppedOverflow; got != total {
		t.Errorf("%d datagrams sent, %d read or dropped by the kernel (SO_RXQ_OVFL)", total, got)
	}
	for _, b := range findPool(t, adminPools(t, base), "udp").Backends {
		if b.Failures != 0 || b.State != "up" {
			t.Errorf("backend %s: %d failures, state %s: the flood was held against it", b.ID, b.Failures, b.State)
		}
	}
}

// floodOne sends one datagram to dst from a socket of its own bound to 127.3.x.y (x.y = i):
// a new client address each time, which the proxy cannot tell from a spoofed one.
func floodOne(t *testing.T, i int, dst netip.AddrPort) {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	src := &syscall.SockaddrInet4{Addr: [4]byte{127, 3, byte(i >> 8), byte(i)}, Port: 9999}
	if err := syscall.Bind(fd, src); err != nil {
		t.Fatalf("bind %v: %v", src.Addr, err)
	}
	if err := syscall.Sendto(fd, []byte("flood"), 0, &syscall.SockaddrInet4{Addr: dst.Addr().As4(), Port: int(dst.Port())}); err != nil {
		t.Fatalf("sendto: %v", err)
	}
}

// procRSS is a process's resident set in bytes.
func procRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// procFDs counts a process's open descriptors.
func procFDs(t *testing.T, pid int) int {
	t.Helper()
	es, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	return len(es)
}

// eventually polls cond until it holds, for at most e2eWait.
func eventually(t *testing.T, cond func() bool) {
	t.Helper()
	end := time.Now().Add(e2eWait)
	for !cond() {
		if time.Now().After(end) {
			t.Fatal("condition not reached")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
