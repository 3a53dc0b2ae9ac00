package director

import (
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"

	"ballast/config"
	"ballast/health"
	"ballast/realserver"
)

// TestE2EDR: HTTP through the VIP in DR mode; the real servers see the client's address and
// no response byte crosses the director.
func TestE2EDR(t *testing.T) {
	l := newLab(t, 2, 1500)
	for _, r := range l.reals {
		l.realServer(r, realserver.DR)
		l.serve(r)
	}
	d := l.newDirector(Options{Mode: DR})
	v := VIP{Addr: labVIP, Port: 80, Proto: TCP}
	must0(t, d.SetVIP(v, l.realsOf(0, 1)))

	seen := l.spread(30)
	if len(seen) != 2 {
		t.Errorf("30 connections reached %v, want both real servers", seen)
	}
	const size = 2 << 20
	before := l.rxBytes()
	body, err := l.get(fmt.Sprintf("/bytes?n=%d", size))
	if err != nil || len(body) != size {
		t.Fatalf("download: %d bytes, %v", len(body), err)
	}
	if crossed := l.rxBytes() - before; crossed > size/4 {
		t.Errorf("the director received %d bytes during a %d-byte download: the response went through it", crossed, size)
	}
	st := vipStats(t, d, v)
	if st.NewFlows != 31 {
		t.Errorf("VIP counted %d new flows, want 31", st.NewFlows)
	}

	// UDP: each real server answers from the VIP (bound to it on lo).
	for _, r := range l.reals {
		l.serveUDP(r, 5353)
	}
	must0(t, d.SetVIP(VIP{Addr: labVIP, Port: 5353, Proto: UDP}, l.realsOf(0, 1)))
	udpSeen := map[string]int{}
	for i := range 20 {
		name, err := l.askUDP(5353, fmt.Sprintf("q%d", i))
		if err != nil {
			t.Fatalf("UDP query %d through the VIP: %v", i, err)
		}
		udpSeen[name]++
	}
	if len(udpSeen) != 2 {
		t.Errorf("20 UDP flows reached %v, want both real servers", udpSeen)
	}
}

// TestE2ETUN: HTTP through the VIP in TUN mode (tcx decapsulation on the real servers), with
// an upload that fills whole segments: the tunnel path has MTU 1600.
func TestE2ETUN(t *testing.T) {
	l := newLab(t, 2, 1600)
	for _, r := range l.reals {
		l.realServer(r, realserver.TUN)
		l.serve(r)
	}
	d := l.newDirector(Options{Mode: TUN})
	must0(t, d.SetVIP(VIP{Addr: labVIP, Port: 80, Proto: TCP}, l.realsOf(0, 1)))

	if seen := l.spread(30); len(seen) != 2 {
		t.Errorf("30 connections reached %v, want both real servers", seen)
	}
	const size = 200 << 10
	resp, err := l.http.Post("http://"+labVIP.String()+"/", "application/octet-stream", strings.NewReader(strings.Repeat("u", size)))
	if err != nil {
		t.Fatalf("upload through the tunnel: %v", err)
	}
	defer resp.Body.Close()
	var name, client string
	var got int
	fmt.Fscan(resp.Body, &name, &client, &got)
	if got != size || client != labClient.String() {
		t.Errorf("upload: real server %s read %d bytes from %s, want %d from %s", name, got, client, size, labClient)
	}
}

// TestE2ENAT: HTTP through the VIP in NAT mode; replies route through the director, which
// rewrites them back to the VIP.
func TestE2ENAT(t *testing.T) {
	l := newLab(t, 2, 1500)
	for _, r := range l.reals {
		l.serve(r)
		l.in(r.ns, func() {
			routeVia(t, labClient, labDirector)
		})
	}
	for _, k := range []string{"net/ipv4/ip_forward", "net/ipv4/conf/all/send_redirects", "net/ipv4/conf/eth0/send_redirects"} {
		v := "0"
		if k == "net/ipv4/ip_forward" {
			v = "1"
		}
		l.sysctl(l.director.ns, k, v)
	}
	d := l.newDirector(Options{Mode: NAT})
	v := VIP{Addr: labVIP, Port: 80, Proto: TCP}
	must0(t, d.SetVIP(v, l.realsOf(0, 1)))

	if seen := l.spread(30); len(seen) != 2 {
		t.Errorf("30 connections reached %v, want both real servers", seen)
	}
	body, err := l.get("/bytes?n=300000")
	if err != nil || len(body) != 300000 {
		t.Fatalf("download: %d bytes, %v", len(body), err)
	}
	c, _ := d.Counters()
	if c["nat_reply"] == 0 {
		t.Errorf("no reply was rewritten by the program: %v", c)
	}
}

// TestE2EFlowsSurviveChanges: keep-alive connections keep their real server while real
// servers are added and removed; new connections follow the new set.
func TestE2EFlowsSurviveChanges(t *testing.T) {
	l := newLab(t, 3, 1500)
	for _, r := range l.reals {
		l.realServer(r, realserver.DR)
		l.serve(r)
	}
	d := l.newDirector(Options{Mode: DR})
	v := VIP{Addr: labVIP, Port: 80, Proto: TCP}
	must0(t, d.SetVIP(v, l.realsOf(0, 1)))

	conns := make([]*persistent, 12)
	first := make([]string, len(conns))
	for i := range conns {
		conns[i] = l.open()
		var err error
		if first[i], err = conns[i].ask(); err != nil {
			t.Fatal(err)
		}
	}
	check := func(what string) {
		t.Helper()
		for i, c := range conns {
			name, err := c.ask()
			if err != nil || name != first[i] {
				t.Errorf("%s: connection %d answered by %q (%v), was %s", what, i, name, err, first[i])
			}
		}
	}
	must0(t, d.SetVIP(v, l.realsOf(0, 1, 2)))
	check("after adding real2")
	if seen := l.spread(30); seen["real2"] == 0 {
		t.Errorf("no new connection reached the added real server: %v", seen)
	}
	must0(t, d.SetVIP(v, l.realsOf(1, 2)))
	check("after removing real0")
	if seen := l.spread(30); seen["real0"] != 0 {
		t.Errorf("new connections reached the removed real server: %v", seen)
	}
}

// TestE2EHealth: a killed real server is taken out by the director's TCP health checks (the
// health package's prober) and new connections go to the others.
func TestE2EHealth(t *testing.T) {
	l := newLab(t, 3, 1500)
	for _, r := range l.reals {
		l.realServer(r, realserver.DR)
		l.serve(r)
	}
	prober, err := health.NewProber(config.HealthCheck{Type: "tcp"})
	must0(t, err)
	d := l.newDirector(Options{Mode: DR, Health: &HealthCheck{
		Prober: prober, Interval: 50 * time.Millisecond, Timeout: 200 * time.Millisecond, Rise: 1, Fall: 2,
	}})
	v := VIP{Addr: labVIP, Port: 80, Proto: TCP}
	must0(t, d.SetVIP(v, l.realsOf(0, 1, 2)))
	if seen := l.spread(30); seen["real1"] == 0 {
		t.Fatalf("real1 took no connection before being killed: %v", seen)
	}

	l.reals[1].srv.Close()
	deadline := time.Now().Add(5 * time.Second)
	for vipStats(t, d, v).Reals[1].State != StateDown {
		if time.Now().After(deadline) {
			t.Fatalf("real1 still %s 5 s after it was killed", vipStats(t, d, v).Reals[1].State)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if seen := l.spread(40); seen["real1"] != 0 || seen["real0"] == 0 || seen["real2"] == 0 {
		t.Errorf("after real1 went down, 40 connections reached %v", seen)
	}
	if st := vipStats(t, d, v).Reals[1]; st.Slots != 0 {
		t.Errorf("the down real server still holds %d table slots", st.Slots)
	}
}

// TestE2EDRNative: DR with the director attached in native (driver) mode on veth, best
// effort: as the notes found, native XDP_TX on veth needs an XDP program on the peer and tx
// checksum offload off on the client. The test skips if the driver refuses native mode.
func TestE2EDRNative(t *testing.T) {
	ethtool, err := exec.LookPath("ethtool")
	if err != nil {
		t.Skip("skipping: ethtool is not installed (needed to turn tx checksum offload off)")
	}
	l := newLab(t, 2, 1500)
	for _, r := range l.reals {
		l.realServer(r, realserver.DR)
		l.serve(r)
	}
	pass, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type: ebpf.XDP, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, xdpPass), asm.Return()},
	})
	must0(t, err)
	t.Cleanup(func() { pass.Close() })
	l.in(l.sw, func() {
		peer, err := netlink.LinkByName("v-director")
		must0(t, err)
		lk, err := link.AttachXDP(link.XDPOptions{Program: pass, Interface: peer.Attrs().Index, Flags: link.XDPDriverMode})
		if err != nil {
			t.Skipf("skipping: native XDP on veth refused: %v", err)
		}
		t.Cleanup(func() { lk.Close() })
	})
	l.in(l.client.ns, func() {
		if out, err := exec.Command(ethtool, "-K", "eth0", "tx", "off").CombinedOutput(); err != nil {
			t.Fatalf("ethtool -K eth0 tx off: %v: %s", err, out)
		}
	})
	var d *Director
	l.in(l.director.ns, func() {
		var err error
		if d, err = New(Options{Iface: "eth0", Mode: DR, Native: true}); err != nil {
			t.Skipf("skipping: native XDP attach refused: %v", err)
		}
	})
	t.Cleanup(func() { d.Close() })
	v := VIP{Addr: labVIP, Port: 80, Proto: TCP}
	must0(t, d.SetVIP(v, l.realsOf(0, 1)))
	if seen := l.spread(30); len(seen) != 2 {
		t.Errorf("30 connections reached %v, want both real servers", seen)
	}
	if st := vipStats(t, d, v); st.NewFlows != 30 {
		t.Errorf("the native program counted %d new flows, want 30", st.NewFlows)
	}
}

// TestE2ENATLarge moves responses of 1 MiB and 64 MiB through NAT, in generic and in native
// XDP, with the VIP held by the director's own host (as an HA master holds it, and as a
// director on the clients' subnet must to answer ARP for it). Two defects once stalled such a
// response after some 50-200 kB: the reply segments XDP cannot send itself (GSO packets larger
// than the MTU) were rewritten to come from the VIP and left to the kernel, which drops a packet
// from one of its own addresses as a martian; and their partial L4 checksums were updated as if
// complete. The tc half of NAT (bpf/nat_tc.h) now sends them. The director's tx checksum
// offload is off in the generic cases, so the kernel computes what the tc program left in the
// checksum field and the client verifies it (on veth a partial checksum is never computed).
func TestE2ENATLarge(t *testing.T) {
	cases := []struct {
		name      string
		native    bool
		vipHeld   bool
		wantTCNAT bool
	}{
		{name: "generic", wantTCNAT: true},
		{name: "generic-vip-held", vipHeld: true, wantTCNAT: true},
		{name: "native-vip-held", native: true, vipHeld: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := newLab(t, 2, 1500)
			for _, r := range l.reals {
				l.serve(r)
				l.in(r.ns, func() { routeVia(t, labClient, labDirector) })
			}
			l.natSysctls()
			if c.vipHeld {
				l.in(l.director.ns, func() {
					eth0, err := netlink.LinkByName("eth0")
					must0(t, err)
					a, _ := netlink.ParseAddr(labVIP.String() + "/32")
					must0(t, netlink.AddrAdd(eth0, a))
				})
			}
			var d *Director
			if c.native {
				// Native XDP on veth (docs/xdp.md): an XDP program on the peer, and tx
				// checksum offload off on the senders whose packets cross the director.
				l.xdpPassOnPeer("v-director")
				l.ethtool(l.client.ns, "tx", "off")
				for _, r := range l.reals {
					l.ethtool(r.ns, "tx", "off")
				}
				l.in(l.director.ns, func() {
					var err error
					if d, err = New(Options{Iface: "eth0", Mode: NAT, Native: true}); err != nil {
						t.Skipf("skipping: native XDP attach refused: %v", err)
					}
				})
				t.Cleanup(func() { d.Close() })
			} else {
				l.ethtool(l.director.ns, "tx", "off")
				d = l.newDirector(Options{Mode: NAT})
			}
			must0(t, d.SetVIP(VIP{Addr: labVIP, Port: 80, Proto: TCP}, l.realsOf(0, 1)))

			csum0 := l.tcpInCsumErrors(l.client.ns)
			for _, size := range []int{1 << 20, 64 << 20} {
				got, err := l.download(size, 60*time.Second)
				if err != nil || got != int64(size) {
					t.Fatalf("%d-byte response through NAT: %d bytes, %v", size, got, err)
				}
			}
			if n := l.tcpInCsumErrors(l.client.ns) - csum0; n != 0 {
				t.Errorf("the client counted %d TCP checksum errors", n)
			}
			cnt, err := d.Counters()
			must0(t, err)
			if cnt["nat_reply"] == 0 {
				t.Errorf("no reply was rewritten by the XDP program: %v", cnt)
			}
			if c.wantTCNAT && cnt["tc_nat"] == 0 {
				t.Errorf("no packet went the tc way (GSO replies in generic XDP): %v", cnt)
			}
			if cnt["tc_drop_too_big"] != 0 {
				t.Errorf("the tc program dropped %d packets as too big", cnt["tc_drop_too_big"])
			}
		})
	}
}

// TestE2EFlowSyncFailover: keep-alive connections through director A keep their real server
// when the client's traffic moves to director B (a failover), because A's Sync sent their
// flows to B's: B's own table differs (it has a real server more, as after one was added,
// and re-weights by its own flow counts under wlc) and would send some of them elsewhere,
// where they would be reset. The control case without sync shows that it would.
func TestE2EFlowSyncFailover(t *testing.T) {
	for _, c := range []struct {
		name string
		mode Mode
		sync bool
	}{
		{"dr", DR, true}, {"tun", TUN, true}, {"nat", NAT, true}, {"dr-without-sync", DR, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			mtu := 1500
			if c.mode == TUN {
				mtu = 1600
			}
			l := newLab(t, 3, mtu)
			dirB := l.addNode("director1", labDirectorB, mtu)
			for _, r := range l.reals {
				switch c.mode {
				case DR:
					l.realServer(r, realserver.DR)
				case TUN:
					l.realServer(r, realserver.TUN)
				case NAT:
					l.in(r.ns, func() { routeVia(t, labClient, labDirector) })
				}
				l.serve(r)
			}
			if c.mode == NAT {
				l.natSysctls()
				for _, k := range []string{"net/ipv4/ip_forward", "net/ipv4/conf/all/send_redirects", "net/ipv4/conf/eth0/send_redirects"} {
					v := map[bool]string{true: "1", false: "0"}[k == "net/ipv4/ip_forward"]
					l.sysctl(dirB.ns, k, v)
				}
			}
			v := VIP{Addr: labVIP, Port: 80, Proto: TCP, Scheduler: WLC}
			a := l.newDirector(Options{Mode: c.mode, Interval: 100 * time.Millisecond})
			var b *Director
			l.in(dirB.ns, func() {
				var err error
				b, err = New(Options{Iface: "eth0", Mode: c.mode, Interval: 100 * time.Millisecond})
				must0(t, err)
			})
			t.Cleanup(func() { b.Close() })
			must0(t, a.SetVIP(v, l.realsOf(0, 1)))
			must0(t, b.SetVIP(v, l.realsOf(0, 1, 2)))
			var sb *Sync
			if c.sync {
				ca, cb := l.udpIn(l.director.ns, labDirector), l.udpIn(dirB.ns, labDirectorB)
				peers := func(c *net.UDPConn) []netip.AddrPort {
					return []netip.AddrPort{c.LocalAddr().(*net.UDPAddr).AddrPort()}
				}
				sa, err := NewSync(a, SyncOptions{Conn: ca, Peers: peers(cb)})
				must0(t, err)
				t.Cleanup(func() { sa.Close() })
				var err2 error
				sb, err2 = NewSync(b, SyncOptions{Conn: cb, Peers: peers(ca)})
				must0(t, err2)
				t.Cleanup(func() { sb.Close() })
				sa.SetSending(true)
			}

			conns := make([]*persistent, 40)
			first := make([]string, len(conns))
			for i := range conns {
				conns[i] = l.open()
				var err error
				if first[i], err = conns[i].ask(); err != nil {
					t.Fatal(err)
				}
			}
			if c.sync { // every flow's batch installed on B before the failover
				deadline := time.Now().Add(10 * time.Second)
				for sb.Stats().Installed < uint64(len(conns)) {
					if time.Now().After(deadline) {
						t.Fatalf("B installed %d of %d synced flows: %+v", sb.Stats().Installed, len(conns), sb.Stats())
					}
					time.Sleep(10 * time.Millisecond)
				}
			} else {
				time.Sleep(100 * time.Millisecond) // as long as a batch would take: no sync to wait for
			}
			// Failover: the client (and, in NAT, the real servers) now reach B.
			l.in(l.client.ns, func() { replaceRoute(t, labVIP, labDirectorB) })
			if c.mode == NAT {
				for _, r := range l.reals {
					l.in(r.ns, func() { replaceRoute(t, labClient, labDirectorB) })
				}
			}
			broken := 0
			for i, p := range conns {
				name, err := p.ask()
				if err != nil || name != first[i] {
					broken++
					if c.sync {
						t.Errorf("connection %d: answered by %q (%v) after the failover, was %s", i, name, err, first[i])
					}
				}
			}
			if !c.sync && broken == 0 {
				t.Errorf("without sync no connection broke: the test would not tell sync from no sync")
			}
			t.Logf("%d of %d connections broken after the failover", broken, len(conns))
			if st := vipStats(t, b, v); st.Packets == 0 {
				t.Errorf("director B forwarded nothing: the failover did not happen")
			}
		})
	}
}

// TestNATGuard: a NAT director keeps one blackhole rule per real server and VIP port, so that
// once its programs are gone (the process killed) its kernel drops the real servers'
// replies instead of forwarding them unrewritten (which the client would reset); the control
// without the guard forwards them. Close removes the rules; New removes what a killed
// director left.
func TestNATGuard(t *testing.T) {
	for _, guard := range []bool{true, false} {
		t.Run(map[bool]string{true: "guard", false: "no-guard"}[guard], func(t *testing.T) {
			l := newLab(t, 2, 1500)
			for _, r := range l.reals {
				l.in(r.ns, func() { routeVia(t, labClient, labDirector) })
			}
			l.natSysctls()
			d := l.newDirector(Options{Mode: NAT, NoGuard: !guard})
			tcp, udp := VIP{Addr: labVIP, Port: 80, Proto: TCP}, VIP{Addr: labVIP, Port: 5353, Proto: UDP}
			must0(t, d.SetVIP(tcp, l.realsOf(0, 1)))
			must0(t, d.SetVIP(udp, l.realsOf(0)))
			want := map[bool]int{true: 3, false: 0}[guard]
			if n := l.guardRules(); n != want {
				t.Fatalf("%d guard rules in the director's namespace, want %d", n, want)
			}
			must0(t, d.SetVIP(tcp, l.realsOf(1)))
			if n := l.guardRules(); guard && n != want-1 {
				t.Errorf("after dropping real0 from the TCP VIP: %d rules, want %d", n, want-1)
			}
			// The director dies: its programs are gone, its rules stay.
			must0(t, d.xdp.Close())
			must0(t, d.natTC.Close())
			var cl *net.UDPConn
			l.in(l.client.ns, func() {
				var err error
				cl, err = net.ListenUDP("udp4", &net.UDPAddr{Port: 40000})
				must0(t, err)
			})
			defer cl.Close()
			l.in(l.reals[0].ns, func() {
				c, err := net.DialUDP("udp4", &net.UDPAddr{IP: labReal(0).AsSlice(), Port: 5353}, &net.UDPAddr{IP: labClient.AsSlice(), Port: 40000})
				must0(t, err)
				defer c.Close()
				for range 3 {
					c.Write([]byte("reply"))
				}
			})
			cl.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
			buf := make([]byte, 64)
			_, from, err := cl.ReadFromUDPAddrPort(buf)
			if guard && err == nil {
				t.Errorf("with the guard, the dead director's kernel forwarded a real server's reply (from %s)", from)
			}
			if !guard && err != nil {
				t.Errorf("without the guard the reply was not forwarded (%v): the test would not tell them apart", err)
			}
			d.xdp, d.natTC = nil, nil
			must0(t, d.Close())
			if n := l.guardRules(); n != 0 {
				t.Errorf("%d guard rules after Close", n)
			}
			if !guard {
				return
			}
			// A rule left by a killed director is removed by the next one.
			l.in(l.director.ns, func() {
				must0(t, netlink.RuleAdd(guardRule{labReal(0), UDP, 5353}.rule("eth0")))
			})
			l.newDirector(Options{Mode: NAT})
			if n := l.guardRules(); n != 0 {
				t.Errorf("%d stale guard rules after a new start", n)
			}
		})
	}
}
