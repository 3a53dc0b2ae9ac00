package director

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"os"
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

func TestSyncDatagram(t *testing.T) {
	flows := []Flow{
		{Client: netip.MustParseAddrPort("192.0.2.7:40000"), VIP: netip.MustParseAddrPort("10.0.0.100:80"), Proto: TCP, Real: realAddrs[0]},
		{Client: netip.MustParseAddrPort("198.51.100.1:53535"), VIP: netip.MustParseAddrPort("10.0.0.100:53"), Proto: UDP, Real: realAddrs[1]},
	}
	b := appendFlows(nil, flows)
	if len(b) != syncHeader+2*syncEntry {
		t.Fatalf("%d bytes", len(b))
	}
	typ, got, err := parseSync(b, nil)
	if err != nil || typ != syncTypeFlows || !slices.Equal(got, flows) {
		t.Fatalf("parsed %d %v %v, want %v", typ, got, err, flows)
	}
	full := appendFlows(nil, slices.Repeat(flows[:1], syncBatch))
	if _, got, err := parseSync(full, nil); err != nil || len(got) != syncBatch {
		t.Errorf("a full datagram: %d flows, %v", len(got), err)
	}
	req := []byte{'B', 'F', 1, 2, 0, 0, 0, 0}
	if typ, _, err := parseSync(req, nil); err != nil || typ != syncTypeDumpRequest {
		t.Errorf("dump request: %d %v", typ, err)
	}
	mod := func(f func([]byte) []byte) []byte { return f(bytes.Clone(b)) }
	for name, bad := range map[string][]byte{
		"empty":            nil,
		"short":            b[:7],
		"magic":            mod(func(b []byte) []byte { b[0] = 'X'; return b }),
		"version 2":        mod(func(b []byte) []byte { b[2] = 2; return b }),
		"type 3":           mod(func(b []byte) []byte { b[3] = 3; return b }),
		"count says 3":     mod(func(b []byte) []byte { b[5] = 3; return b }),
		"count says 1":     mod(func(b []byte) []byte { b[5] = 1; return b }),
		"truncated entry":  b[:len(b)-1],
		"trailing byte":    append(bytes.Clone(b), 0),
		"protocol 1":       mod(func(b []byte) []byte { b[syncHeader+12] = 1; return b }),
		"padding set":      mod(func(b []byte) []byte { b[syncHeader+13] = 1; return b }),
		"VIP 0.0.0.0":      mod(func(b []byte) []byte { copy(b[syncHeader+4:], []byte{0, 0, 0, 0}); return b }),
		"real 255.x":       mod(func(b []byte) []byte { copy(b[syncHeader+16:], []byte{255, 255, 255, 255}); return b }),
		"too many":         appendFlows(nil, slices.Repeat(flows[:1], syncBatch+1)),
		"request with one": {'B', 'F', 1, 2, 0, 1, 0, 0},
	} {
		if _, _, err := parseSync(bad, nil); !errors.Is(err, errSyncDatagram) {
			t.Errorf("%s: %v, want errSyncDatagram", name, err)
		}
	}
}

func FuzzParseSync(f *testing.F) {
	f.Add(appendFlows(nil, []Flow{{Client: netip.MustParseAddrPort("192.0.2.7:1"), VIP: netip.MustParseAddrPort("10.0.0.100:80"), Proto: TCP, Real: realAddrs[0]}}))
	f.Add([]byte{'B', 'F', 1, 2, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		typ, flows, err := parseSync(b, nil)
		if err != nil {
			return
		}
		if typ == syncTypeFlows && !bytes.Equal(appendFlows(nil, flows), b) {
			t.Fatalf("round trip % x", b)
		}
	})
}

// TestFlowEventsInstall: the program reports each new flow (once), and a second director with
// another table, given the flow, sends its next packets to the same real server where its own
// table would not. Flows lists the table's active flows. Unattached directors, so that both run
// in one test with BPF_PROG_TEST_RUN.
func TestFlowEventsInstall(t *testing.T) {
	requireBPF(t)
	a := newTestDirector(t, Options{Mode: DR, TableSize: 251})
	b := newTestDirector(t, Options{Mode: DR, TableSize: 251})
	v := VIP{Addr: vipAddr, Port: 80, Proto: TCP}
	must0(t, a.SetVIP(v, testReals(2)))
	// b knows a third real server, as after one was added there: its table differs.
	must0(t, b.SetVIP(v, testReals(3)))
	ev, err := a.FlowEvents()
	must0(t, err)
	defer ev.Close()
	if _, err := a.FlowEvents(); err == nil {
		t.Error("a second FlowEvents reader was allowed")
	}

	// Find flows that the two tables place differently.
	var moved []frame
	for port := uint16(30000); len(moved) < 20 && port < 40000; port++ {
		f := frame{src: clientIP, dst: vipAddr, sport: port, dport: 80, proto: 6, tcpFlags: 0x02}
		if goPick(t, testReals(2), 251, f, false) != goPick(t, testReals(3), 251, f, false) {
			moved = append(moved, f)
		}
	}
	if len(moved) < 20 {
		t.Fatalf("only %d flows placed differently", len(moved))
	}
	want := map[Flow]bool{}
	for _, f := range moved {
		ret, out := runXDP(t, a, f.build(), 0)
		if ret != xdpTX {
			t.Fatalf("%s: action %d", f, ret)
		}
		want[Flow{Client: netip.AddrPortFrom(f.src, f.sport), VIP: netip.AddrPortFrom(f.dst, f.dport), Proto: TCP, Real: macOf(testReals(2), out[0:6])}] = true
		// An established packet of the flow is not a new flow: no second event.
		ack := f
		ack.tcpFlags = 0x10
		runXDP(t, a, ack.build(), 0)
	}
	var got []Flow
	deadline := time.Now().Add(2 * time.Second)
	for len(got) < len(want) && time.Now().Before(deadline) {
		got, err = ev.Read(got, time.Now().Add(100*time.Millisecond))
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatal(err)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("%d flow events, want %d: %v", len(got), len(want), got)
	}
	for _, f := range got {
		if !want[f] {
			t.Errorf("event %s, not one of the flows placed", f)
		}
	}
	if more, err := ev.Read(nil, time.Now().Add(50*time.Millisecond)); len(more) != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("events after the new flows: %v %v", more, err)
	}
	listed, err := a.Flows(1000)
	must0(t, err)
	if len(listed) != len(want) {
		t.Errorf("Flows lists %d, want %d", len(listed), len(want))
	}

	// Without the flows, b would send them elsewhere; with them, to the same real server.
	res, err := b.InstallFlows(got)
	if err != nil || res.Installed != len(got) {
		t.Fatalf("InstallFlows: %+v %v", res, err)
	}
	for _, f := range moved {
		ack := f
		ack.tcpFlags = 0x10
		_, out := runXDP(t, b, ack.build(), 0)
		wantReal := Flow{}
		for w := range want {
			if w.Client.Port() == f.sport {
				wantReal = w
			}
		}
		if got := macOf(testReals(3), out[0:6]); got != wantReal.Real {
			t.Errorf("%s at b: to %s, want %s (a's choice)", f, got, wantReal.Real)
		}
	}

	// What b does not serve is skipped and counted.
	other := []Flow{
		{Client: netip.MustParseAddrPort("192.0.2.1:1"), VIP: netip.MustParseAddrPort("10.0.0.200:80"), Proto: TCP, Real: realAddrs[0]},
		{Client: netip.MustParseAddrPort("192.0.2.1:2"), VIP: netip.AddrPortFrom(vipAddr, 80), Proto: TCP, Real: realAddrs[4]},
	}
	if res, err := b.InstallFlows(other); err != nil || res != (InstallResult{UnknownVIP: 1, UnknownReal: 1}) {
		t.Errorf("unknown VIP and real: %+v %v", res, err)
	}
}

// TestUnknownEstablishedFlowPlaced: a packet of an established flow the director has never
// seen (no SYN: it arrives after a failover) is placed by the table, not dropped, and reported.
func TestUnknownEstablishedFlowPlaced(t *testing.T) {
	requireBPF(t)
	d := newTestDirector(t, Options{Mode: DR, TableSize: 251})
	v := VIP{Addr: vipAddr, Port: 80, Proto: TCP}
	must0(t, d.SetVIP(v, testReals(3)))
	ev, err := d.FlowEvents()
	must0(t, err)
	defer ev.Close()
	f := frame{src: clientIP, dst: vipAddr, sport: 45678, dport: 80, proto: 6, tcpFlags: 0x18, payload: []byte("mid-stream")}
	ret, out := runXDP(t, d, f.build(), 0)
	if ret != xdpTX || macOf(testReals(3), out[0:6]) != goPick(t, testReals(3), 251, f, false) {
		t.Fatalf("action %d to %s, want XDP_TX to the table's %s", ret, macOf(testReals(3), out[0:6]), goPick(t, testReals(3), 251, f, false))
	}
	got, err := ev.Read(nil, time.Now().Add(time.Second))
	if err != nil || len(got) != 1 || got[0].Client.Port() != 45678 {
		t.Errorf("flow events %v %v, want the picked-up flow", got, err)
	}
}

// TestSyncLoopback: two Syncs on loopback UDP: flows placed by the sending one are installed
// by the other; a dump request is answered with the table's flows; a datagram from a source
// not accepted is counted and ignored; the queue bound holds.
func TestSyncLoopback(t *testing.T) {
	requireBPF(t)
	a := newTestDirector(t, Options{Mode: DR, TableSize: 251})
	b := newTestDirector(t, Options{Mode: DR, TableSize: 251})
	v := VIP{Addr: vipAddr, Port: 80, Proto: TCP}
	must0(t, a.SetVIP(v, testReals(2)))
	must0(t, b.SetVIP(v, testReals(3)))
	ca, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	must0(t, err)
	cb, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	must0(t, err)
	pa, pb := ca.LocalAddr().(*net.UDPAddr).AddrPort(), cb.LocalAddr().(*net.UDPAddr).AddrPort()
	var refuse atomic.Bool
	local := func(a netip.Addr) bool { return a.IsLoopback() && !refuse.Load() }
	// A flow placed before the sync starts is not reported; the dump request brings it.
	early := frame{src: clientIP, dst: vipAddr, sport: 20000, dport: 80, proto: 6, tcpFlags: 0x02}
	runXDP(t, a, early.build(), 0)
	sa, err := NewSync(a, SyncOptions{Conn: ca, Peers: []netip.AddrPort{pb}, Accept: local})
	must0(t, err)
	defer sa.Close()
	sb, err := NewSync(b, SyncOptions{Conn: cb, Peers: []netip.AddrPort{pa}, Accept: local})
	must0(t, err)
	defer sb.Close()

	sa.SetSending(true)
	for i := range 100 {
		f := frame{src: clientIP, dst: vipAddr, sport: uint16(30000 + i), dport: 80, proto: 6, tcpFlags: 0x02}
		runXDP(t, a, f.build(), 0)
	}
	waitFor(t, "100 flows installed at b", func() bool { return sb.Stats().Installed == 100 })
	if st := sa.Stats(); st.FlowsSent != 100 || st.Datagrams < 2 || st.Dropped != 0 {
		t.Errorf("a's stats %+v", st)
	}
	sb.RequestDump()
	waitFor(t, "the dump installed at b", func() bool { return sb.Stats().Installed == 201 })
	if st := sa.Stats(); st.DumpRequests != 1 || st.DumpsSent != 1 {
		t.Errorf("a's stats after the dump %+v", st)
	}
	flows, err := b.Flows(1000)
	must0(t, err)
	found := false
	for _, f := range flows {
		found = found || f.Client.Port() == 20000
	}
	if !found || len(flows) != 101 {
		t.Errorf("b's table after the dump: %d flows, the early one there: %v", len(flows), found)
	}

	// b does not send: its own new flows go nowhere.
	f := frame{src: clientIP, dst: vipAddr, sport: 50000, dport: 80, proto: 6, tcpFlags: 0x02}
	runXDP(t, b, f.build(), 0)
	time.Sleep(50 * time.Millisecond)
	if st := sb.Stats(); st.FlowsSent != 0 {
		t.Errorf("b sent %d flows while not sending", st.FlowsSent)
	}

	// A stranger's datagram is refused.
	refuse.Store(true)
	runXDP(t, a, frame{src: clientIP, dst: vipAddr, sport: 50001, dport: 80, proto: 6, tcpFlags: 0x02}.build(), 0)
	waitFor(t, "the refused datagram counted", func() bool { return sb.Stats().BadDatagrams == 1 })
	if st := sb.Stats(); st.Installed != 201 {
		t.Errorf("b installed %d after refusing a datagram", st.Installed)
	}
}

// TestSyncQueueBound: flows beyond MaxQueue are dropped and counted, not queued.
func TestSyncQueueBound(t *testing.T) {
	s := &Sync{o: SyncOptions{MaxQueue: 10}}
	q := s.enqueue(nil, make([]Flow, 7))
	q = s.enqueue(q, make([]Flow, 7))
	if len(q) != 10 || s.stats.dropped.Load() != 4 {
		t.Errorf("queue %d, dropped %d; want 10, 4", len(q), s.stats.dropped.Load())
	}
	q = s.enqueue(q, make([]Flow, 3))
	if len(q) != 10 || s.stats.dropped.Load() != 7 {
		t.Errorf("queue %d, dropped %d; want 10, 7", len(q), s.stats.dropped.Load())
	}
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 5 s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
