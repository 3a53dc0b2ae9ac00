package director

import (
	"bytes"
	"encoding/binary"
	"testing"
)

func badPacketDirector(t testing.TB) *Director {
	d := newTestDirector(t, Options{Mode: DR, TableSize: 13})
	if err := d.SetVIP(VIP{Addr: vipAddr, Port: 80, Proto: TCP}, testReals(2)); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestBadPackets: every packet the director does not balance goes to the kernel unchanged
// and is counted under its reason; nothing is read past the frame.
func TestBadPackets(t *testing.T) {
	d := badPacketDirector(t)
	good := frame{src: clientIP, dst: vipAddr, sport: 40000, dport: 80, proto: 6, tcpFlags: 0x02, payload: []byte("x")}
	with := func(f func(b []byte) []byte) []byte { return f(good.build()) }
	alter := func(f frame, edit func(*frame)) []byte { edit(&f); return f.build() }
	cases := []struct {
		name    string
		pkt     []byte
		counter string
	}{
		{"ethernet header only", with(func(b []byte) []byte { return b[:14] }), "pass_truncated"},
		{"IPv4 header cut short", with(func(b []byte) []byte { return b[:14+12] }), "pass_truncated"},
		{"TCP header cut short", with(func(b []byte) []byte { return b[:14+20+10] }), "pass_truncated"},
		{"total length past the frame", with(func(b []byte) []byte { binary.BigEndian.PutUint16(b[16:], 1400); return b }), "pass_truncated"},
		{"total length shorter than TCP header", with(func(b []byte) []byte { binary.BigEndian.PutUint16(b[16:], 30); return b }), "pass_truncated"},
		{"TCP data offset below 5", with(func(b []byte) []byte { b[14+20+12] = 4 << 4; return b }), "pass_truncated"},
		{"IHL below 5", with(func(b []byte) []byte { b[14] = 0x44; return b }), "pass_truncated"},
		{"IP options", alter(good, func(f *frame) { f.options = []byte{1, 1, 1, 0} }), "pass_ip_options"},
		{"first fragment (MF)", alter(good, func(f *frame) { f.fragOff = 0x2000 }), "pass_fragment"},
		{"later fragment (offset)", alter(good, func(f *frame) { f.fragOff = 0x0010 }), "pass_fragment"},
		{"ICMP to the VIP", alter(good, func(f *frame) { f.proto = 1 }), "pass_not_l4"},
		{"TTL 1", alter(good, func(f *frame) { f.ttl = 1 }), "pass_ttl"},
		{"VIP address, other port", alter(good, func(f *frame) { f.dport = 81 }), "pass_not_vip"},
		{"VIP address and port, UDP", alter(good, func(f *frame) { f.proto = 17 }), "pass_not_vip"},
		{"other address", alter(good, func(f *frame) { f.dst = realAddrs[4] }), "pass_not_vip"},
		{"ARP", with(func(b []byte) []byte { b[12], b[13] = 0x08, 0x06; return b }), "pass_not_ipv4"},
		{"IPv6 ethertype", with(func(b []byte) []byte { b[12], b[13] = 0x86, 0xdd; return b }), "pass_not_ipv4"},
		{"VLAN tag", with(func(b []byte) []byte { b[12], b[13] = 0x81, 0x00; return b }), "pass_not_ipv4"},
		{"IP version 6 in an IPv4 frame", with(func(b []byte) []byte { b[14] = 0x65; return b }), "pass_not_ipv4"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before, err := d.Counters()
			if err != nil {
				t.Fatal(err)
			}
			ret, out := runXDP(t, d, c.pkt, 0)
			if ret != xdpPass {
				t.Errorf("action %d, want XDP_PASS", ret)
			}
			if !bytes.Equal(out, c.pkt) {
				t.Errorf("the packet was changed")
			}
			after, _ := d.Counters()
			for name, v := range after {
				want := before[name]
				if name == c.counter {
					want++
				}
				if v != want {
					t.Errorf("counter %s went from %d to %d, want %d", name, before[name], v, want)
				}
			}
		})
	}
	if st := vipStats(t, d, VIP{Addr: vipAddr, Port: 80, Proto: TCP}); st.Packets != 0 {
		t.Errorf("VIP counted %d packets of bad traffic", st.Packets)
	}
}

// TestNoUsableRealDrops: a VIP whose real servers are all down, drained or disabled drops its
// packets and counts them; a usable one brings it back.
func TestNoUsableRealDrops(t *testing.T) {
	d := newTestDirector(t, Options{Mode: DR, TableSize: 13})
	v := VIP{Addr: vipAddr, Port: 80, Proto: TCP}
	reals := testReals(2)
	reals[0].Weight = 0
	reals[1].Down = true
	if err := d.SetVIP(v, reals); err != nil {
		t.Fatal(err)
	}
	f := frame{src: clientIP, dst: vipAddr, sport: 40000, dport: 80, proto: 6, tcpFlags: 0x02}
	if ret, _ := runXDP(t, d, f.build(), 0); ret != xdpDrop {
		t.Fatalf("action %d, want XDP_DROP", ret)
	}
	st := vipStats(t, d, v)
	if st.Drops != 1 || st.NewFlows != 0 || counter(t, d, "drop_no_real") != 1 {
		t.Errorf("stats %+v, drop_no_real %d; want 1 drop", st.Traffic, counter(t, d, "drop_no_real"))
	}
	if st.Reals[0].State != StateDrain || st.Reals[1].State != StateDisabled {
		t.Errorf("states %s, %s; want drain, disabled", st.Reals[0].State, st.Reals[1].State)
	}
	reals[1].Down = false
	if err := d.SetVIP(v, reals); err != nil {
		t.Fatal(err)
	}
	ret, out := runXDP(t, d, f.build(), 0)
	if ret != xdpTX || !bytes.Equal(out[:6], realMACs[1]) {
		t.Errorf("after enabling real server 1: action %d to %x", ret, out[:6])
	}
}

// FuzzDirector runs arbitrary frames through the program: it must never fail to run, and
// anything it passes to the kernel it passes unchanged.
func FuzzDirector(f *testing.F) {
	for _, fr := range []frame{
		{src: clientIP, dst: vipAddr, sport: 40000, dport: 80, proto: 6, tcpFlags: 0x02},
		{src: clientIP, dst: vipAddr, sport: 40000, dport: 80, proto: 6, options: []byte{1, 1, 1, 0}},
		{src: clientIP, dst: vipAddr, sport: 40000, dport: 80, proto: 17},
		{src: clientIP, dst: vipAddr, sport: 40000, dport: 80, proto: 1},
		{src: clientIP, dst: vipAddr, sport: 40000, dport: 80, proto: 6, fragOff: 0x2000},
	} {
		f.Add(fr.build())
	}
	f.Add(make([]byte, 14))
	d := badPacketDirector(f)
	f.Fuzz(func(t *testing.T, pkt []byte) {
		if len(pkt) < 14 {
			return // the kernel refuses to test-run shorter XDP input
		}
		ret, out := runXDP(t, d, pkt, 0)
		switch ret {
		case xdpPass:
			if !bytes.Equal(out, pkt) {
				t.Errorf("passed a changed packet")
			}
		case xdpTX:
			if len(out) != len(pkt) || !bytes.Equal(out[12:], pkt[12:]) {
				t.Errorf("DR changed more than the MACs")
			}
		case xdpDrop:
		default:
			t.Errorf("action %d", ret)
		}
	})
}
