package vrrp

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/mdlayher/arp"
	"github.com/vishvananda/netlink"

	"ballast/internal/netlab"
)

// The virtual router of these tests: a director VIP (only answered for) and a listener
// address (on lo while master), both on the directors' segment so that the client ARPs for
// them.
var (
	testVIP    = netip.MustParseAddr("10.77.0.100")
	testLocal  = netip.MustParseAddr("10.77.0.101")
	testAddrs  = []netip.Addr{testLocal, testVIP}
	testVRID   = uint8(51)
	testIv     = 100 * time.Millisecond
	helperEnv  = "BALLAST_VRRP_HELPER"
	helperPrio = "BALLAST_VRRP_HELPER_PRIO"
)

func requireNetns(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipping: VRRP in network namespaces needs root")
	}
	var objs arpObjects
	if err := loadArpObjects(&objs, nil); err != nil {
		if errors.Is(err, ebpf.ErrNotSupported) || errors.Is(err, os.ErrPermission) {
			t.Skipf("skipping: BPF cannot load here: %v", err)
		}
		t.Fatalf("loading the ARP responder: %v", err)
	}
	objs.Close()
}

func newHALab(t *testing.T) *netlab.Lab {
	t.Helper()
	requireNetns(t)
	l, err := netlab.New(netlab.Options{Directors: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	return l
}

// router is a speaker and its addresses in one director's namespace.
type router struct {
	s *Speaker
	a *Addresses
}

func (r *router) close() {
	r.s.Close()
	r.a.Close()
}

func startRouter(t *testing.T, l *netlab.Lab, n *netlab.Node, prio uint8, peers ...netip.Addr) *router {
	t.Helper()
	r := &router{}
	err := l.In(n.NS, func() error {
		var err error
		r.a, err = NewAddresses(AddressOptions{Iface: "eth0", Local: []netip.Addr{testLocal}, Answer: []netip.Addr{testVIP}})
		if err != nil {
			return err
		}
		r.s, err = NewSpeaker(SpeakerConfig{
			Machine: Config{VRID: testVRID, Priority: prio, Interval: testIv, Preempt: true},
			Iface:   "eth0", Peers: peers, Owner: r.a,
		})
		if err != nil {
			r.a.Close()
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.close)
	return r
}

func wait(t *testing.T, what string, within time.Duration, ok func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !ok() {
		if time.Since(start) > within {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(2 * time.Millisecond)
	}
	return time.Since(start)
}

func macOf(t *testing.T, l *netlab.Lab, n *netlab.Node) net.HardwareAddr {
	t.Helper()
	var hw net.HardwareAddr
	if err := l.In(n.NS, func() error {
		eth0, err := netlink.LinkByName("eth0")
		if err == nil {
			hw = eth0.Attrs().HardwareAddr
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return hw
}

// resolve asks, from the client, who has ip; nil if nothing answers within 300 ms.
func resolve(t *testing.T, l *netlab.Lab, ip netip.Addr) net.HardwareAddr {
	t.Helper()
	var hw net.HardwareAddr
	err := l.In(l.Client.NS, func() error {
		ifi, err := net.InterfaceByName("eth0")
		if err != nil {
			return err
		}
		c, err := arp.Dial(ifi)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(300 * time.Millisecond))
		hw, err = c.Resolve(ip)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				hw, err = nil, nil
			}
		}
		return err
	})
	if err != nil {
		t.Fatalf("ARP for %s from the client: %v", ip, err)
	}
	return hw
}

// onLo reports whether ip is on lo in n's namespace.
func onLo(t *testing.T, l *netlab.Lab, n *netlab.Node, ip netip.Addr) bool {
	t.Helper()
	found := false
	if err := l.In(n.NS, func() error {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		addrs, err := netlink.AddrList(lo, netlink.FAMILY_V4)
		for _, a := range addrs {
			if a.IP.Equal(ip.AsSlice()) {
				found = true
			}
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return found
}

// checkOwner: exactly owner answers ARP for both addresses and holds the local one on lo.
func checkOwner(t *testing.T, l *netlab.Lab, owner *netlab.Node) {
	t.Helper()
	want := macOf(t, l, owner)
	for _, ip := range testAddrs {
		if got := resolve(t, l, ip); got.String() != want.String() {
			t.Errorf("%s is at %v, want %s's %v", ip, got, owner.Name, want)
		}
	}
	for _, n := range l.Directors {
		if got := onLo(t, l, n, testLocal); got != (n == owner) {
			t.Errorf("%s on %s's lo: %v, want %v", testLocal, n.Name, got, n == owner)
		}
	}
}

// TestSpeakersFailover: two speakers on one segment (multicast, 100 ms adverts): the higher
// priority is master and the only one that answers ARP for the addresses; a graceful stop
// hands over within Skew_Time; the old master's return preempts; a lost link hands over
// within the Master_Down_Interval, and one master remains when it is back.
func TestSpeakersFailover(t *testing.T) {
	l := newHALab(t)
	a := startRouter(t, l, l.Directors[0], 150)
	b := startRouter(t, l, l.Directors[1], 100)
	mdiA := NewMachine(Config{Priority: 150, Interval: testIv}).MasterDownInterval()
	mdiB := NewMachine(Config{Priority: 100, Interval: testIv}).MasterDownInterval()
	slack := 500 * time.Millisecond // scheduling on a shared machine

	wait(t, "A master", mdiA+slack, func() bool { return a.s.Status().State == Master })
	wait(t, "B backup of A", time.Second, func() bool {
		st := b.s.Status()
		return st.State == Backup && st.Master == l.Directors[0].IP && st.MasterPriority == 150
	})
	checkOwner(t, l, l.Directors[0])
	if st := b.s.Status(); st.AdvertsReceived == 0 || st.Errors["checksum"] != 0 {
		t.Errorf("B's counters: %+v", st)
	}

	// A stops gracefully: priority 0, and B is master after its Skew_Time.
	a.close()
	took := wait(t, "B master after A stopped", mdiB, func() bool { return b.s.Status().State == Master })
	t.Logf("graceful stop: B master after %v (Skew_Time %v)", took, NewMachine(Config{Priority: 100, Interval: testIv}).SkewTime())
	checkOwner(t, l, l.Directors[1])

	// A returns and preempts.
	a = startRouter(t, l, l.Directors[0], 150)
	wait(t, "A master again", mdiA+slack, func() bool { return a.s.Status().State == Master })
	wait(t, "B backup again", slack, func() bool { return b.s.Status().State == Backup })
	checkOwner(t, l, l.Directors[0])

	// A's machine is cut off: B takes over within its Master_Down_Interval.
	if err := l.SetSwitchPort(l.Directors[0], false); err != nil {
		t.Fatal(err)
	}
	took = wait(t, "B master after A's link went", mdiB+slack, func() bool { return b.s.Status().State == Master })
	t.Logf("link lost: B master after %v (Master_Down_Interval %v)", took, mdiB)
	if got, want := resolve(t, l, testVIP), macOf(t, l, l.Directors[1]); got.String() != want.String() {
		t.Errorf("VIP at %v after A was cut off, want B's %v", got, want)
	}
	// Back: two masters for a moment; one advert later only A (the higher priority) is.
	if err := l.SetSwitchPort(l.Directors[0], true); err != nil {
		t.Fatal(err)
	}
	healed := time.Now()
	wait(t, "B backup after the partition healed", testIv+slack, func() bool { return b.s.Status().State == Backup })
	t.Logf("partition healed: one master after %v", time.Since(healed))
	if a.s.Status().State != Master {
		t.Errorf("A is %s after the partition healed", a.s.Status().State)
	}
	checkOwner(t, l, l.Directors[0])
}

// TestSpeakersUnicast: the same election with unicast peers instead of multicast.
func TestSpeakersUnicast(t *testing.T) {
	l := newHALab(t)
	a := startRouter(t, l, l.Directors[0], 100, l.Directors[1].IP)
	b := startRouter(t, l, l.Directors[1], 200, l.Directors[0].IP)
	wait(t, "B master", 2*time.Second, func() bool { return b.s.Status().State == Master })
	wait(t, "A backup of B", time.Second, func() bool { return a.s.Status().Master == l.Directors[1].IP })
	checkOwner(t, l, l.Directors[1])
	b.close()
	wait(t, "A master", time.Second, func() bool { return a.s.Status().State == Master })
	checkOwner(t, l, l.Directors[0])
}

// TestSpeakerFault: a master put in fault hands over at once (priority 0) and takes part in
// nothing; cleared, it is a backup and (with preemption) master again.
func TestSpeakerFault(t *testing.T) {
	l := newHALab(t)
	a := startRouter(t, l, l.Directors[0], 150)
	b := startRouter(t, l, l.Directors[1], 100)
	wait(t, "A master", 2*time.Second, func() bool { return a.s.Status().State == Master })
	wait(t, "B backup", time.Second, func() bool { return b.s.Status().State == Backup })
	a.s.SetFault("pool web has no usable backend")
	wait(t, "B master after A's fault", time.Second, func() bool { return b.s.Status().State == Master })
	if st := a.s.Status(); st.State != Fault || st.Fault == "" || st.Priority != 0 {
		t.Errorf("A: %+v, want fault with a reason and priority 0", st)
	}
	checkOwner(t, l, l.Directors[1])
	a.s.SetFault("")
	wait(t, "A master after the fault cleared", 2*time.Second, func() bool { return a.s.Status().State == Master })
	wait(t, "B backup after A's return", time.Second, func() bool { return b.s.Status().State == Backup })
	checkOwner(t, l, l.Directors[0])
}

// TestHelperSpeaker is not a test: run by TestSpeakerSIGKILL as a child process in a
// director's namespace, it runs a speaker until killed.
func TestHelperSpeaker(t *testing.T) {
	if os.Getenv(helperEnv) != "1" {
		t.Skip("helper process for TestSpeakerSIGKILL")
	}
	prio, _ := strconv.Atoi(os.Getenv(helperPrio))
	a, err := NewAddresses(AddressOptions{Iface: "eth0", Local: []netip.Addr{testLocal}, Answer: []netip.Addr{testVIP}})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	s, err := NewSpeaker(SpeakerConfig{Machine: Config{VRID: testVRID, Priority: uint8(prio), Interval: testIv, Preempt: true}, Iface: "eth0", Owner: a})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	if err := s.Wait(context.Background(), Master); err == nil {
		fmt.Println("master")
	}
	select {}
}

// TestSpeakerSIGKILL: a master killed with SIGKILL leaves nothing that answers ARP for its
// addresses: the backup takes over within its Master_Down_Interval, and once the backup is
// gone too, nothing answers at all (the dead master's responder went with its process and its
// kernel does not answer for the address it left on lo). A new start removes that address.
func TestSpeakerSIGKILL(t *testing.T) {
	l := newHALab(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperSpeaker$", "-test.v")
	cmd.Env = append(os.Environ(), helperEnv+"=1", helperPrio+"=150")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := l.Start(l.Directors[0].NS, cmd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	timeout := time.After(5 * time.Second)
	for master := false; !master; {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatal("the helper ended before becoming master")
			}
			if strings.HasPrefix(line, "error") {
				t.Fatalf("helper: %s", line)
			}
			master = line == "master"
		case <-timeout:
			t.Fatal("the helper did not become master within 5 s")
		}
	}
	b := startRouter(t, l, l.Directors[1], 100)
	wait(t, "B backup", time.Second, func() bool { return b.s.Status().Master == l.Directors[0].IP })
	checkOwner(t, l, l.Directors[0])

	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	_ = cmd.Wait()
	mdi := NewMachine(Config{Priority: 100, Interval: testIv}).MasterDownInterval()
	wait(t, "B master after SIGKILL", mdi+500*time.Millisecond, func() bool { return b.s.Status().State == Master })
	t.Logf("SIGKILL: B master after %v (Master_Down_Interval %v)", time.Since(killed), mdi)
	for range 3 {
		if got, want := resolve(t, l, testVIP), macOf(t, l, l.Directors[1]); got.String() != want.String() {
			t.Errorf("after SIGKILL the VIP is at %v, want B's %v", got, want)
		}
	}
	// What the killed master left: the listener address on its lo. Its kernel must not
	// answer ARP for it (arp_ignore=1), which the next check shows.
	if !onLo(t, l, l.Directors[0], testLocal) {
		t.Errorf("%s is not on the killed master's lo: the check below proves nothing", testLocal)
	}
	b.close()
	for _, ip := range testAddrs {
		if got := resolve(t, l, ip); got != nil {
			t.Errorf("with the master killed and the backup stopped, %s is still answered for by %v", ip, got)
		}
	}
	// A new start on the killed master's machine removes what it left on lo.
	err = l.In(l.Directors[0].NS, func() error {
		a, err := NewAddresses(AddressOptions{Iface: "eth0", Local: []netip.Addr{testLocal}})
		if err == nil {
			a.Close()
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if onLo(t, l, l.Directors[0], testLocal) {
		t.Errorf("%s still on lo after a new start", testLocal)
	}
}

// TestAddressesSysctls: the ARP sysctls are set while Addresses is open and restored by Close.
func TestAddressesSysctls(t *testing.T) {
	l := newHALab(t)
	read := func(name string) string {
		var v []byte
		_ = l.In(l.Director.NS, func() error {
			var err error
			v, err = os.ReadFile("/proc/sys/net/ipv4/conf/eth0/" + name)
			return err
		})
		return strings.TrimSpace(string(v))
	}
	before := []string{read("arp_ignore"), read("arp_announce")}
	var a *Addresses
	if err := l.In(l.Director.NS, func() error {
		var err error
		a, err = NewAddresses(AddressOptions{Iface: "eth0", Answer: []netip.Addr{testVIP}})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if got := []string{read("arp_ignore"), read("arp_announce")}; !slices.Equal(got, []string{"1", "2"}) {
		t.Errorf("arp_ignore, arp_announce = %v while open, want [1 2]", got)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if got := []string{read("arp_ignore"), read("arp_announce")}; !slices.Equal(got, before) {
		t.Errorf("arp_ignore, arp_announce = %v after Close, want %v", got, before)
	}
}
