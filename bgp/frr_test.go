package bgp

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"ballast/internal/netlab"
)

// The tests run each speaker as a child process started in a director's namespace (a process
// lives in the namespace it was forked in; GoBGP's goroutines would wander off a namespace
// the test's thread entered). The child reads commands on stdin and answers with JSON.
const childEnv = "BALLAST_BGP_TEST_CHILD"

func TestMain(m *testing.M) {
	if c := os.Getenv(childEnv); c != "" {
		os.Exit(runChild(c))
	}
	os.Exit(m.Run())
}

func runChild(conf string) int {
	var c Config
	if err := json.Unmarshal([]byte(conf), &c); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	sp, err := Start(contextBG(), c)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer sp.Close()
	in := bufio.NewScanner(os.Stdin)
	enc := json.NewEncoder(os.Stdout)
	var routes []Route
	for in.Scan() {
		verb, arg, _ := strings.Cut(in.Text(), " ")
		switch verb {
		case "announce", "withdraw":
			p := netip.MustParsePrefix(arg)
			routes = slices.DeleteFunc(routes, func(r Route) bool { return r.Prefix == p })
			routes = append(routes, Route{Prefix: p, Announce: verb == "announce", Reason: "test"})
			if err := sp.Set(routes); err != nil {
				fmt.Fprintln(os.Stderr, err)
			}
			enc.Encode(map[string]string{"ok": verb})
		case "status":
			enc.Encode(sp.Status(contextBG()))
		}
	}
	return 0
}

// child is a speaker process in a director's namespace.
type child struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *json.Decoder
}

func startChild(t *testing.T, l *netlab.Lab, n *netlab.Node, c Config) *child {
	t.Helper()
	b, _ := json.Marshal(c)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+string(b))
	cmd.Stderr = os.Stderr
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := l.Start(n.NS, cmd); err != nil {
		t.Fatal(err)
	}
	ch := &child{cmd: cmd, in: in, out: json.NewDecoder(out)}
	t.Cleanup(func() { ch.in.Close(); _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return ch
}

func (c *child) do(t *testing.T, line string, v any) {
	t.Helper()
	if _, err := fmt.Fprintln(c.in, line); err != nil {
		t.Fatalf("%s: %v", line, err)
	}
	if err := c.out.Decode(v); err != nil {
		t.Fatalf("%s: %v", line, err)
	}
}

func (c *child) status(t *testing.T) Status {
	var st Status
	c.do(t, "status", &st)
	return st
}

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: network namespaces and FRR")
	}
	if why := netlab.FRRMissing(); why != "" {
		t.Skip(why)
	}
}

// frrConf is a router in AS 65000 with maximum-paths ECMP and, with bfd, a BFD session
// (profile fast: 100 ms × 3) with each director: bgpd's configuration and bfdd's.
func frrConf(directors []netip.Addr, bfd bool) (bgpd, bfdd string) {
	var b strings.Builder
	fmt.Fprintf(&b, "router bgp 65000\n bgp router-id %s\n no bgp ebgp-requires-policy\n bgp bestpath as-path multipath-relax\n", netlab.RouterIP)
	for _, d := range directors {
		fmt.Fprintf(&b, " neighbor %s remote-as 65010\n neighbor %s timers 3 9\n neighbor %s timers connect 1\n", d, d, d)
		if bfd {
			fmt.Fprintf(&b, " neighbor %s bfd profile fast\n", d)
		}
	}
	b.WriteString(" address-family ipv4 unicast\n  maximum-paths 8\n exit-address-family\nexit\n")
	return b.String(), "bfd\n profile fast\n  receive-interval 100\n  transmit-interval 100\n  detect-multiplier 3\n exit\nexit\n"
}

func waitNexthops(t *testing.T, l *netlab.Lab, want []netip.Addr, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	var got []netip.Addr
	for time.Since(start) < within {
		var err error
		if got, err = l.Nexthops(l.Router.NS, netlab.VIP); err != nil {
			t.Fatal(err)
		}
		if slices.Equal(got, want) {
			return time.Since(start)
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("router's next hops for %s: %v after %v, want %v", netlab.VIP, got, within, want)
	return 0
}

// TestFRRAnnounceWithdrawBFD: two speakers announce the VIP to a real FRR router, which
// installs one route over both (ECMP); one withdraws and the router keeps the other; the other
// is killed (SIGKILL, no Cease) and BFD takes its route out well before the hold time.
func TestFRRAnnounceWithdrawBFD(t *testing.T) {
	requireRoot(t)
	l, err := netlab.New(netlab.Options{Directors: 2, Router: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	d0, d1 := l.Directors[0].IP, l.Directors[1].IP
	bgpd, bfdd := frrConf([]netip.Addr{d0, d1}, true)
	frr, err := l.StartFRR(l.Router, bgpd, bfdd)
	if err != nil {
		t.Fatal(err)
	}
	var kids []*child
	for _, n := range l.Directors {
		kids = append(kids, startChild(t, l, n, Config{
			ASN: 65010, RouterID: n.IP, ListenPort: -1, HoldTime: 9 * time.Second,
			BFDInterval: 100 * time.Millisecond, BFDMultiplier: 3,
			Peers: []Peer{{Addr: netlab.RouterIP, ASN: 65000, BFD: true}}, Communities: []uint32{65010<<16 | 100}, MED: 5,
		}))
	}
	vip := netip.PrefixFrom(netlab.VIP, 32)
	var ok map[string]string
	for _, k := range kids {
		k.do(t, "announce "+vip.String(), &ok)
	}
	took := waitNexthops(t, l, []netip.Addr{d0, d1}, 30*time.Second)
	t.Logf("router has the VIP over both directors %v after the announcements", took)

	// Each speaker shows its session established, one prefix sent and BFD up.
	deadline := time.Now().Add(10 * time.Second)
	for _, k := range kids {
		for {
			st := k.status(t)
			if len(st.Sessions) == 1 && st.Sessions[0].State == "established" && st.Sessions[0].PrefixesSent == 1 && st.Sessions[0].BFD == "up" {
				if st.Announced != 1 || st.Sessions[0].Since.IsZero() || st.Sessions[0].HoldTime != 9 {
					t.Errorf("status %+v", st)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("session not established with BFD up: %+v", st)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	// The router has the route with our community and MED, learned from both.
	out, err := frr.Vtysh("show bgp ipv4 unicast " + vip.String())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "65010:100") || !strings.Contains(out, "metric 5") || !strings.Contains(out, "(2 available") {
		t.Errorf("router's view of %s lacks the community, the MED or a path:\n%s", vip, out)
	}
	if os.Getenv("BALLAST_BFD_DEBUG") != "" {
		full, _ := frr.Vtysh("show bfd peers")
		t.Log(full)
	}
	bfd, _ := frr.Vtysh("show bfd peers brief")
	if strings.Count(bfd, " up ") < 2 {
		t.Errorf("router's BFD peers are not both up:\n%s", bfd)
	}

	// A withdrawal takes that director out; the other stays.
	kids[1].do(t, "withdraw "+vip.String(), &ok)
	took = waitNexthops(t, l, []netip.Addr{d0}, 5*time.Second)
	t.Logf("withdrawal followed by the router in %v", took)
	if st := kids[1].status(t); st.Announced != 0 || st.Withdrawals != 1 || st.Sessions[0].PrefixesSent != 0 {
		t.Errorf("after the withdrawal: %+v", st)
	}
	kids[1].do(t, "announce "+vip.String(), &ok)
	waitNexthops(t, l, []netip.Addr{d0, d1}, 5*time.Second)

	// The first director's machine is lost (cut off the segment, no carrier change): no Cease,
	// no TCP reset. BFD (100 ms × 3) takes its route out; the hold time (9 s) would take far
	// longer.
	lost := time.Now()
	if err := l.Partition(l.Directors[0], true); err != nil {
		t.Fatal(err)
	}
	took = waitNexthops(t, l, []netip.Addr{d1}, 8*time.Second)
	t.Logf("a lost director's route left the router's FIB %v after the cut (BFD 100 ms × 3)", time.Since(lost))
	if took > 3*time.Second {
		t.Errorf("BFD took %v to remove a lost director's route", took)
	}
	// SIGKILL of the other: its kernel closes the session's socket, and the router drops the
	// route on the TCP close at once, BFD or not.
	killed := time.Now()
	if err := kids[1].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitNexthops(t, l, nil, 8*time.Second)
	t.Logf("a killed director's route left the router's FIB %v after SIGKILL", time.Since(killed))
}

// TestFRRHoldTime: without BFD, the route of a director whose machine is lost (no TCP close
// reaches the router) stays until the hold time expires.
func TestFRRHoldTime(t *testing.T) {
	requireRoot(t)
	l, err := netlab.New(netlab.Options{Directors: 1, Router: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	d0 := l.Directors[0].IP
	bgpd, bfdd := frrConf([]netip.Addr{d0}, false)
	if _, err := l.StartFRR(l.Router, bgpd, bfdd); err != nil {
		t.Fatal(err)
	}
	k := startChild(t, l, l.Directors[0], Config{ASN: 65010, RouterID: d0, ListenPort: -1, HoldTime: 3 * time.Second,
		Peers: []Peer{{Addr: netlab.RouterIP, ASN: 65000}}})
	var ok map[string]string
	k.do(t, "announce "+netip.PrefixFrom(netlab.VIP, 32).String(), &ok)
	waitNexthops(t, l, []netip.Addr{d0}, 30*time.Second)
	killed := time.Now()
	if err := l.Partition(l.Directors[0], true); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if got, _ := l.Nexthops(l.Router.NS, netlab.VIP); len(got) != 1 {
		t.Fatalf("route gone %v after the cut without BFD, before the 3 s hold time: %v", time.Since(killed), got)
	}
	waitNexthops(t, l, nil, 10*time.Second)
	t.Logf("without BFD the route left %v after the cut (hold time 3 s)", time.Since(killed))
	if d := time.Since(killed); d < 2*time.Second {
		t.Errorf("route left after %v, before the hold time", d)
	}
}

func contextBG() context.Context { return context.Background() }
