package director

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"os"
	"runtime"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"ballast/balance"
)

var (
	vipAddr   = netip.MustParseAddr("10.0.0.100")
	clientIP  = netip.MustParseAddr("10.0.0.1")
	realAddrs = []netip.Addr{
		netip.MustParseAddr("10.0.0.11"), netip.MustParseAddr("10.0.0.12"), netip.MustParseAddr("10.0.0.13"),
		netip.MustParseAddr("10.0.0.14"), netip.MustParseAddr("10.0.0.15"),
	}
)

func testReals(n int) []Real {
	rs := make([]Real, n)
	for i := range rs {
		rs[i] = Real{Addr: realAddrs[i], Weight: 1, MAC: realMACs[i]}
	}
	return rs
}

// goPick is the real server Go's flow hash and Maglev table choose for f among usable reals.
func goPick(t testing.TB, reals []Real, size int, f frame, sourceHash bool) netip.Addr {
	t.Helper()
	var ids []string
	var ws []int
	var addrs []netip.Addr
	for _, r := range reals {
		ids, ws, addrs = append(ids, r.Addr.String()), append(ws, r.Weight), append(addrs, r.Addr)
	}
	table, err := balance.MaglevTable(ids, ws, size)
	if err != nil {
		t.Fatal(err)
	}
	h := balance.FlowHash(f.src, f.dst, f.sport, f.dport, f.proto)
	if sourceHash {
		h = balance.SourceHash(f.src)
	}
	return addrs[table[uint64(h)%uint64(size)]]
}

func macOf(reals []Real, mac []byte) netip.Addr {
	for _, r := range reals {
		if bytes.Equal(r.MAC, mac) {
			return r.Addr
		}
	}
	return netip.Addr{}
}

func counter(t testing.TB, d *Director, name string) uint64 {
	t.Helper()
	c, err := d.Counters()
	if err != nil {
		t.Fatal(err)
	}
	return c[name]
}

func vipStats(t testing.TB, d *Director, v VIP) VIPStats {
	t.Helper()
	st, err := d.Stats()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st {
		if s.VIP.key() == v.key() {
			return s
		}
	}
	t.Fatalf("no stats for VIP %s", v)
	return VIPStats{}
}

func TestDRFixture(t *testing.T) {
	d := newTestDirector(t, Options{Mode: DR, TableSize: 251})
	reals := testReals(3)
	tcp := VIP{Addr: vipAddr, Port: 80, Proto: TCP}
	udp := VIP{Addr: vipAddr, Port: 53, Proto: UDP}
	for _, v := range []VIP{tcp, udp} {
		if err := d.SetVIP(v, reals); err != nil {
			t.Fatal(err)
		}
	}
	var bytesIn uint64
	seen := map[netip.Addr]bool{}
	for i := range 40 {
		f := frame{src: clientIP, dst: vipAddr, sport: uint16(40000 + i), dport: 80, proto: 6, tcpFlags: 0x02, payload: []byte("hello")}
		if i%2 == 1 {
			f.dport, f.proto = 53, 17
		}
		in := f.build()
		ret, out := runXDP(t, d, in, 0)
		if ret != xdpTX {
			t.Fatalf("flow %d: action %d, want XDP_TX", i, ret)
		}
		want := goPick(t, reals, 251, f, false)
		seen[want] = true
		if len(out) != len(in) {
			t.Fatalf("flow %d: %d bytes out for %d in", i, len(out), len(in))
		}
		if got := macOf(reals, out[0:6]); got != want {
			t.Errorf("flow %d: sent to %s (MAC %s), Go picks %s", i, got, net.HardwareAddr(out[0:6]), want)
		}
		if !bytes.Equal(out[6:12], dirMAC) {
			t.Errorf("flow %d: source MAC %s, want the director's %s", i, net.HardwareAddr(out[6:12]), dirMAC)
		}
		if !bytes.Equal(out[12:], in[12:]) {
			t.Errorf("flow %d: DR changed bytes past the MACs", i)
		}
		checkIPv4(t, out[14:])
		if f.proto == 6 {
			bytesIn += uint64(len(in))
		}
	}
	if len(seen) < 2 {
		t.Errorf("40 flows all went to %v", seen)
	}
	st := vipStats(t, d, tcp)
	if st.Packets != 20 || st.NewFlows != 20 || st.Bytes != bytesIn {
		t.Errorf("TCP VIP stats %+v, want 20 packets, 20 new flows, %d bytes", st.Traffic, bytesIn)
	}
	if st.ActiveFlows != 20 {
		t.Errorf("TCP VIP active flows %d, want 20", st.ActiveFlows)
	}
	var realPackets uint64
	for _, r := range st.Reals {
		realPackets += r.Packets
	}
	if realPackets != 40 {
		t.Errorf("real servers counted %d packets, want 40 (both VIPs)", realPackets)
	}
	// The same flow again is established: same real server, no new flow.
	f := frame{src: clientIP, dst: vipAddr, sport: 40000, dport: 80, proto: 6, tcpFlags: 0x10}
	_, out := runXDP(t, d, f.build(), 0)
	if got, want := macOf(reals, out[0:6]), goPick(t, reals, 251, f, false); got != want {
		t.Errorf("established flow went to %s, want %s", got, want)
	}
	if st := vipStats(t, d, tcp); st.NewFlows != 20 || st.Packets != 21 {
		t.Errorf("after an established packet: %+v, want 21 packets, 20 new flows", st.Traffic)
	}
}

func TestTUNFixture(t *testing.T) {
	source := netip.MustParseAddr("10.0.0.2")
	d := newTestDirector(t, Options{Mode: TUN, TableSize: 251, Source: source})
	reals := testReals(3)
	v := VIP{Addr: vipAddr, Port: 80, Proto: TCP}
	if err := d.SetVIP(v, reals); err != nil {
		t.Fatal(err)
	}
	for i := range 30 {
		f := frame{src: clientIP, dst: vipAddr, sport: uint16(50000 + i), dport: 80, proto: 6, tcpFlags: 0x02, ttl: uint8(2 + i), payload: bytes.Repeat([]byte{byte(i)}, i)}
		in := f.build()
		ret, out := runXDP(t, d, in, 0)
		if ret != xdpTX {
			t.Fatalf("flow %d: action %d, want XDP_TX", i, ret)
		}
		if len(out) != len(in)+20 {
			t.Fatalf("flow %d: %d bytes out for %d in, want 20 more", i, len(out), len(in))
		}
		want := goPick(t, reals, 251, f, false)
		if got := macOf(reals, out[0:6]); got != want {
			t.Errorf("flow %d: frame to %s, Go picks %s", i, got, want)
		}
		if !bytes.Equal(out[6:12], dirMAC) || binary.BigEndian.Uint16(out[12:]) != 0x0800 {
			t.Errorf("flow %d: source MAC %s type %#x", i, net.HardwareAddr(out[6:12]), out[12:14])
		}
		outer := out[14:34]
		if outer[0] != 0x45 || outer[9] != 4 || outer[8] != 64 || outer[1] != in[15] {
			t.Errorf("flow %d: outer header version/IHL %#x protocol %d TTL %d TOS %d", i, outer[0], outer[9], outer[8], outer[1])
		}
		if got := int(binary.BigEndian.Uint16(outer[2:])); got != len(in)-14+20 {
			t.Errorf("flow %d: outer total length %d, want %d", i, got, len(in)-14+20)
		}
		if binary.BigEndian.Uint16(outer[6:]) != 0 {
			t.Errorf("flow %d: outer fragment field %#x", i, outer[6:8])
		}
		if addrAt(outer[12:]) != source || addrAt(outer[16:]) != want {
			t.Errorf("flow %d: outer %s -> %s, want %s -> %s", i, addrAt(outer[12:]), addrAt(outer[16:]), source, want)
		}
		if checksum(outer, 0) != 0 {
			t.Errorf("flow %d: outer header checksum %#x is wrong", i, outer[10:12])
		}
		if !bytes.Equal(out[34:], in[14:]) {
			t.Errorf("flow %d: the inner packet changed", i)
		}
		checkIPv4(t, out[34:])
	}
}

// inNetns moves the calling test goroutine into a fresh network namespace until the test ends.
func inNetns(t *testing.T) netns.NsHandle {
	t.Helper()
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	ns, err := netns.New()
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatalf("new network namespace: %v", err)
	}
	t.Cleanup(func() {
		netns.Set(orig)
		orig.Close()
		ns.Close()
		runtime.UnlockOSThread()
	})
	return ns
}

func writeSysctl(t testing.TB, path, value string) {
	t.Helper()
	if err := os.WriteFile("/proc/sys/"+path, []byte(value), 0o644); err != nil {
		t.Fatal(err)
	}
}

// natNetns builds, in the current (fresh) namespace, a veth whose neighbour table knows the
// client and real server 0 but not real server 1; it returns the veth's index and MAC.
func natNetns(t *testing.T) (int, net.HardwareAddr) {
	t.Helper()
	la := netlink.NewLinkAttrs()
	la.Name = "d0"
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: "d1"}); err != nil {
		t.Fatal(err)
	}
	d0, _ := netlink.LinkByName("d0")
	d1, _ := netlink.LinkByName("d1")
	addr, _ := netlink.ParseAddr("10.0.0.2/24")
	if err := netlink.AddrAdd(d0, addr); err != nil {
		t.Fatal(err)
	}
	for _, l := range []netlink.Link{d0, d1} {
		if err := netlink.LinkSetUp(l); err != nil {
			t.Fatal(err)
		}
	}
	for ip, mac := range map[netip.Addr]net.HardwareAddr{clientIP: clientMAC, realAddrs[0]: realMACs[0]} {
		n := &netlink.Neigh{LinkIndex: d0.Attrs().Index, IP: ip.AsSlice(), HardwareAddr: mac, State: netlink.NUD_PERMANENT, Family: netlink.FAMILY_V4}
		if err := netlink.NeighAdd(n); err != nil {
			t.Fatal(err)
		}
	}
	writeSysctl(t, "net/ipv4/ip_forward", "1")
	return d0.Attrs().Index, d0.Attrs().HardwareAddr
}

func TestNATFixture(t *testing.T) {
	requireBPF(t)
	inNetns(t)
	ifindex, ifMAC := natNetns(t)
	d := newTestDirector(t, Options{Mode: NAT, TableSize: 7})
	tcp := VIP{Addr: vipAddr, Port: 80, Proto: TCP}
	udp := VIP{Addr: vipAddr, Port: 53, Proto: UDP}
	one := []Real{{Addr: realAddrs[0], Weight: 1}}
	for _, v := range []VIP{tcp, udp} {
		if err := d.SetVIP(v, one); err != nil {
			t.Fatal(err)
		}
	}
	cases := []frame{
		{src: clientIP, dst: vipAddr, sport: 40000, dport: 80, proto: 6, tcpFlags: 0x02, payload: []byte("GET / HTTP/1.0\r\n\r\n")},
		{src: clientIP, dst: vipAddr, sport: 40001, dport: 53, proto: 17, payload: []byte("query")},
		{src: clientIP, dst: vipAddr, sport: 40002, dport: 53, proto: 17, payload: []byte("no checksum"), noUDPCsum: true},
	}
	// No subtests: they would run on another goroutine, outside this thread's namespace.
	for _, f := range cases {
		func() {
			in := f.build()
			ret, out := runXDP(t, d, in, ifindex)
			if ret != xdpTX {
				t.Fatalf("%s: forward: action %d, want XDP_TX (counters %v)", f, ret, must(d.Counters()))
			}
			checkNAT(t, f.String()+" forward", in, out, realMACs[0], ifMAC, clientIP, realAddrs[0])
			// The reply, from the real server to the client, goes back from the VIP.
			r := f
			r.src, r.dst, r.sport, r.dport = realAddrs[0], clientIP, f.dport, f.sport
			rin := r.build()
			ret, rout := runXDP(t, d, rin, ifindex)
			if ret != xdpTX {
				t.Fatalf("%s: reply: action %d, want XDP_TX", f, ret)
			}
			checkNAT(t, f.String()+" reply", rin, rout, clientMAC, ifMAC, vipAddr, clientIP)
		}()
	}
	if got := counter(t, d, "nat_reply"); got != 3 {
		t.Errorf("nat_reply counter %d, want 3", got)
	}
	// A reply to a flow the director never saw is not rewritten.
	stray := frame{src: realAddrs[0], dst: clientIP, sport: 80, dport: 39999, proto: 6, tcpFlags: 0x12}
	if ret, out := runXDP(t, d, stray.build(), ifindex); ret != xdpPass || !bytes.Equal(out, stray.build()) {
		t.Errorf("stray reply: action %d, changed %v; want XDP_PASS unchanged", ret, !bytes.Equal(out, stray.build()))
	}

	// A real server the kernel has no neighbour entry for: XDP passes the packet on unchanged,
	// and the tc program rewrites it and hands it to bpf_redirect_neigh (MACs filled in later).
	if err := d.SetVIP(tcp, []Real{{Addr: realAddrs[1], Weight: 1}}); err != nil {
		t.Fatal(err)
	}
	f := frame{src: clientIP, dst: vipAddr, sport: 41000, dport: 80, proto: 6, tcpFlags: 0x02}
	in := f.build()
	ret, out := runXDP(t, d, in, ifindex)
	if ret != xdpPass || !bytes.Equal(out[:len(in)], in) {
		t.Fatalf("no neighbour: action %d, changed %v; want XDP_PASS unchanged", ret, !bytes.Equal(out[:len(in)], in))
	}
	if got := counter(t, d, "pass_no_neigh"); got != 1 {
		t.Errorf("pass_no_neigh %d, want 1", got)
	}
	ret, out = runTC(t, d, in, ifindex)
	if ret != tcActRedirect {
		t.Fatalf("no neighbour, tc: verdict %d, want TC_ACT_REDIRECT (counters %v)", ret, must(d.Counters()))
	}
	if addrAt(out[30:]) != realAddrs[1] || out[22] != in[22]-1 || !bytes.Equal(out[:14], in[:14]) {
		t.Errorf("no neighbour, tc: destination %s TTL %d MACs changed %v; want rewritten to %s, TTL %d, MACs kept",
			addrAt(out[30:]), out[22], !bytes.Equal(out[:14], in[:14]), realAddrs[1], in[22]-1)
	}
	checkIPv4(t, out[14:len(in)])
	// Its reply, which XDP routes itself (the client is a known neighbour), and the same reply
	// through the tc program (as a GSO reply would go): from the VIP, both ways.
	r := f
	r.src, r.dst, r.sport, r.dport, r.tcpFlags = realAddrs[1], clientIP, f.dport, f.sport, 0x12
	rin := r.build()
	ret, out = runTC(t, d, rin, ifindex)
	if ret != tcActRedirect {
		t.Fatalf("reply, tc: verdict %d, want TC_ACT_REDIRECT", ret)
	}
	checkNAT(t, "reply, tc", rin, out[:len(rin)], clientMAC, ifMAC, vipAddr, clientIP)
	if got := counter(t, d, "tc_nat"); got != 2 {
		t.Errorf("tc_nat %d, want 2", got)
	}
	// The tc program leaves alone what is not a NAT flow's.
	if ret, _ := runTC(t, d, stray.build(), ifindex); ret != tcActUnspec {
		t.Errorf("stray reply, tc: verdict %d, want TC_ACT_UNSPEC (the next program, or the kernel)", ret)
	}

	// Larger than the egress MTU: XDP passes it on unchanged (a GSO packet in generic XDP is
	// larger, and the tc program sends it); a packet that is not GSO the tc program drops.
	if err := d.SetVIP(tcp, one); err != nil {
		t.Fatal(err)
	}
	d0, _ := netlink.LinkByIndex(ifindex)
	if err := netlink.LinkSetMTU(d0, 600); err != nil {
		t.Fatal(err)
	}
	big := frame{src: clientIP, dst: vipAddr, sport: 42000, dport: 80, proto: 6, tcpFlags: 0x10, payload: make([]byte, 1000)}
	in = big.build()
	ret, out = runXDP(t, d, in, ifindex)
	if ret != xdpPass || !bytes.Equal(out[:len(in)], in) {
		t.Errorf("too big: action %d, changed %v; want XDP_PASS unchanged", ret, !bytes.Equal(out[:len(in)], in))
	}
	if got := counter(t, d, "pass_too_big"); got != 1 {
		t.Errorf("pass_too_big %d, want 1", got)
	}
	if ret, _ := runTC(t, d, in, ifindex); ret != tcActShot {
		t.Errorf("too big, tc: verdict %d, want TC_ACT_SHOT", ret)
	}
	if got := counter(t, d, "tc_drop_too_big"); got != 1 {
		t.Errorf("tc_drop_too_big %d, want 1", got)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// checkNAT verifies a NAT-rewritten frame field by field.
func checkNAT(t *testing.T, what string, in, out []byte, dmac, smac net.HardwareAddr, src, dst netip.Addr) {
	t.Helper()
	if len(out) != len(in) {
		t.Fatalf("%s: %d bytes out for %d in", what, len(out), len(in))
	}
	if !bytes.Equal(out[0:6], dmac) || !bytes.Equal(out[6:12], smac) {
		t.Errorf("%s: MACs %s <- %s, want %s <- %s", what, net.HardwareAddr(out[0:6]), net.HardwareAddr(out[6:12]), dmac, smac)
	}
	ip, ipIn := out[14:], in[14:]
	if addrAt(ip[12:]) != src || addrAt(ip[16:]) != dst {
		t.Errorf("%s: %s -> %s, want %s -> %s", what, addrAt(ip[12:]), addrAt(ip[16:]), src, dst)
	}
	if ip[8] != ipIn[8]-1 {
		t.Errorf("%s: TTL %d, want %d", what, ip[8], ipIn[8]-1)
	}
	if ip[9] == 17 && binary.BigEndian.Uint16(ipIn[26:]) == 0 && binary.BigEndian.Uint16(ip[26:]) != 0 {
		t.Errorf("%s: a UDP datagram without checksum got one", what)
	}
	csum := 36 // the L4 checksum: every other L4 byte must be as it came
	if ip[9] == 17 {
		csum = 26
	}
	if !bytes.Equal(ip[20:csum], ipIn[20:csum]) || !bytes.Equal(ip[csum+2:], ipIn[csum+2:]) {
		t.Errorf("%s: L4 header or payload changed", what)
	}
	checkIPv4(t, ip)
}
