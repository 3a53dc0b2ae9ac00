package director

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	"ballast/balance"
)

// TestAgreement: for 100,000 random 5-tuples the BPF program sends each new flow to the real
// server that balance.FlowHash and balance.MaglevTable choose in Go.
func TestAgreement(t *testing.T) {
	d := newTestDirector(t, Options{Mode: DR, MaxVIPs: 4, ConnTableSize: 1 << 18})
	reals := testReals(5)
	for i := range reals {
		reals[i].Weight = i + 1
	}
	vips := []VIP{
		{Addr: vipAddr, Port: 80, Proto: TCP},
		{Addr: vipAddr, Port: 443, Proto: TCP},
		{Addr: netip.MustParseAddr("10.0.0.101"), Port: 53, Proto: UDP},
		{Addr: netip.MustParseAddr("10.0.0.102"), Port: 8080, Proto: TCP, SourceHash: true},
	}
	for _, v := range vips {
		if err := d.SetVIP(v, reals); err != nil {
			t.Fatal(err)
		}
	}
	var ids []string
	var ws []int
	for _, r := range reals {
		ids, ws = append(ids, r.Addr.String()), append(ws, r.Weight)
	}
	table, err := balance.MaglevTable(ids, ws, balance.MaglevDefaultSize)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 100_000
	per := make([]int, len(reals))
	for i := range n {
		v := vips[i%len(vips)]
		f := frame{
			src:   netip.AddrFrom4([4]byte{byte(rng.IntN(223) + 1), byte(rng.Uint32()), byte(rng.Uint32()), byte(rng.Uint32())}),
			dst:   v.Addr,
			sport: uint16(rng.Uint32()), dport: v.Port, proto: uint8(v.Proto), tcpFlags: 0x02,
		}
		h := balance.FlowHash(f.src, f.dst, f.sport, f.dport, f.proto)
		if v.SourceHash {
			h = balance.SourceHash(f.src)
		}
		k := table[uint64(h)%uint64(len(table))]
		ret, out := runXDP(t, d, f.build(), 0)
		if ret != xdpTX {
			t.Fatalf("tuple %d %s: action %d", i, f, ret)
		}
		if got := macOf(reals, out[:6]); got != reals[k].Addr {
			t.Fatalf("tuple %d %s (hash %#x): BPF sent it to %s, Go picks %s", i, f, h, got, reals[k].Addr)
		}
		per[k]++
	}
	// Weights 1..5 (sum 15) are honoured through the table.
	for k, c := range per {
		want := float64(n) * float64(k+1) / 15
		if float64(c) < want*0.9 || float64(c) > want*1.1 {
			t.Errorf("real server %d (weight %d) got %d of %d flows, want about %.0f", k, k+1, c, n, want)
		}
	}
}

// readRing returns the real addresses in vs's table as the BPF map holds them.
func readRing(t *testing.T, d *Director, v VIP, size int) []netip.Addr {
	t.Helper()
	var out []netip.Addr
	err := d.do(func() error {
		vs := d.st.vips[v.key()]
		for i := range size {
			var id uint32
			if err := d.objs.Ring.Lookup(vs.id*uint32(size)+uint32(i), &id); err != nil {
				return err
			}
			out = append(out, d.st.byID[id].addr)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func goTable(t *testing.T, reals []Real, size int) []netip.Addr {
	t.Helper()
	var ids []string
	var ws []int
	for _, r := range reals {
		ids, ws = append(ids, r.Addr.String()), append(ws, r.Weight)
	}
	pos, err := balance.MaglevTable(ids, ws, size)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]netip.Addr, size)
	for i, p := range pos {
		out[i] = reals[p].Addr
	}
	return out
}

func realIDs(t *testing.T, d *Director, v VIP) map[netip.Addr]uint32 {
	ids := map[netip.Addr]uint32{}
	for _, r := range vipStats(t, d, v).Reals {
		ids[r.Addr] = r.ID
	}
	return ids
}

// TestTableWritesOnlyChangedSlots: a change writes exactly the slots whose real server
// changed, real IDs are stable, and the map holds Go's table afterwards.
func TestTableWritesOnlyChangedSlots(t *testing.T) {
	const size = 1009
	d := newTestDirector(t, Options{Mode: DR, TableSize: size})
	v := VIP{Addr: vipAddr, Port: 80, Proto: TCP}
	all := testReals(4)
	steps := []struct {
		name  string
		reals []Real
	}{
		{"three real servers", all[:3]},
		{"the same again", all[:3]},
		{"a fourth added", all[:4]},
		{"weight of the first to 3", func() []Real { r := append([]Real{}, all[:4]...); r[0].Weight = 3; return r }()},
		{"the second removed", []Real{all[0], all[2], all[3]}},
		{"the second back", all[:4]},
	}
	var prev []netip.Addr
	firstIDs := map[netip.Addr]uint32{}
	for _, s := range steps {
		want := goTable(t, s.reals, size)
		diff := 0
		for i := range want {
			if prev == nil || prev[i] != want[i] {
				diff++
			}
		}
		before := d.TableWrites()
		if err := d.SetVIP(v, s.reals); err != nil {
			t.Fatal(err)
		}
		if got := d.TableWrites() - before; got != uint64(diff) {
			t.Errorf("%s: wrote %d slots, %d differ", s.name, got, diff)
		}
		if prev != nil && diff > size/2 {
			t.Errorf("%s: %d of %d slots moved; Maglev should move few", s.name, diff, size)
		}
		got := readRing(t, d, v, size)
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("%s: slot %d holds %s, Go's table %s", s.name, i, got[i], want[i])
			}
		}
		for addr, id := range realIDs(t, d, v) {
			if first, ok := firstIDs[addr]; ok && first != id {
				t.Errorf("%s: %s changed ID from %d to %d", s.name, addr, first, id)
			}
			firstIDs[addr] = id
		}
		prev = want
	}
}

// flowsTo opens n flows (SYN) from sport base and returns the real each went to.
func flowsTo(t *testing.T, d *Director, reals []Real, base, n int) map[int]netip.Addr {
	t.Helper()
	out := map[int]netip.Addr{}
	for i := base; i < base+n; i++ {
		f := frame{src: clientIP, dst: vipAddr, sport: uint16(i), dport: 80, proto: 6, tcpFlags: 0x02}
		ret, pkt := runXDP(t, d, f.build(), 0)
		if ret != xdpTX {
			t.Fatalf("flow %d: action %d", i, ret)
		}
		out[i] = macOf(reals, pkt[:6])
	}
	return out
}

// sendEstablished sends an ACK on each flow and reports those that changed real server.
func sendEstablished(t *testing.T, d *Director, reals []Real, flows map[int]netip.Addr, what string) {
	t.Helper()
	moved := 0
	for sport, was := range flows {
		f := frame{src: clientIP, dst: vipAddr, sport: uint16(sport), dport: 80, proto: 6, tcpFlags: 0x10}
		_, pkt := runXDP(t, d, f.build(), 0)
		if macOf(reals, pkt[:6]) != was {
			moved++
		}
	}
	if moved > 0 {
		t.Errorf("%s: %d of %d established flows moved", what, moved, len(flows))
	}
}

// TestEstablishedFlowsStay: adding, removing and draining real servers moves no established
// flow, while new flows follow the new table.
func TestEstablishedFlowsStay(t *testing.T) {
	d := newTestDirector(t, Options{Mode: DR, TableSize: 251})
	all := testReals(4)
	v := VIP{Addr: vipAddr, Port: 80, Proto: TCP}
	if err := d.SetVIP(v, all[:3]); err != nil {
		t.Fatal(err)
	}
	flows := flowsTo(t, d, all, 10000, 300)

	if err := d.SetVIP(v, all[:4]); err != nil {
		t.Fatal(err)
	}
	sendEstablished(t, d, all, flows, "after adding a real server")
	if n := count(flowsTo(t, d, all, 20000, 300), all[3].Addr); n == 0 {
		t.Errorf("no new flow went to the added real server")
	}

	if err := d.SetVIP(v, all[1:4]); err != nil {
		t.Fatal(err)
	}
	sendEstablished(t, d, all, flows, "after removing a real server")
	if n := count(flowsTo(t, d, all, 30000, 300), all[0].Addr); n != 0 {
		t.Errorf("%d new flows went to the removed real server", n)
	}

	drained := append([]Real{}, all[1:4]...)
	drained[0].Weight = 0
	if err := d.SetVIP(v, drained); err != nil {
		t.Fatal(err)
	}
	sendEstablished(t, d, all, flows, "after draining a real server")
	if n := count(flowsTo(t, d, all, 40000, 300), all[1].Addr); n != 0 {
		t.Errorf("%d new flows went to the drained real server", n)
	}
}

func count(flows map[int]netip.Addr, a netip.Addr) int {
	n := 0
	for _, v := range flows {
		if v == a {
			n++
		}
	}
	return n
}

// TestDownPolicy: a real server that health checks mark down gets no new flows at once; its
// established flows stay, or with MoveDownFlows are re-placed by the table.
func TestDownPolicy(t *testing.T) {
	for _, move := range []bool{false, true} {
		d := newTestDirector(t, Options{Mode: DR, TableSize: 251, MoveDownFlows: move})
		reals := testReals(3)
		v := VIP{Addr: vipAddr, Port: 80, Proto: TCP}
		if err := d.SetVIP(v, reals); err != nil {
			t.Fatal(err)
		}
		flows := flowsTo(t, d, reals, 10000, 300)
		down := reals[0].Addr
		d.do(func() error { d.st.setHealthy(d.st.reals[down], false, nil); return nil })
		if st := vipStats(t, d, v).Reals[0].State; st != StateDown {
			t.Fatalf("state %s, want down", st)
		}
		if n := count(flowsTo(t, d, reals, 20000, 300), down); n != 0 {
			t.Errorf("move=%v: %d new flows went to the down real server", move, n)
		}
		onDown := map[int]netip.Addr{}
		for sport, a := range flows {
			if a == down {
				onDown[sport] = a
			}
		}
		if len(onDown) == 0 {
			t.Fatal("no flow was on the real server taken down")
		}
		if !move {
			sendEstablished(t, d, reals, flows, "down, flows kept")
			continue
		}
		for sport := range onDown {
			f := frame{src: clientIP, dst: vipAddr, sport: uint16(sport), dport: 80, proto: 6, tcpFlags: 0x10}
			_, pkt := runXDP(t, d, f.build(), 0)
			if got, want := macOf(reals, pkt[:6]), goPick(t, reals[1:], 251, f, false); got != want {
				t.Errorf("move: flow %d of the down server went to %s, want %s", sport, got, want)
			}
		}
	}
}

// TestWLCReweighting: a real server holding more active flows gets fewer new ones once the
// director has re-weighted the table from its connection table.
func TestWLCReweighting(t *testing.T) {
	d := newTestDirector(t, Options{Mode: DR, TableSize: 1009})
	reals := testReals(2)
	v := VIP{Addr: vipAddr, Port: 80, Proto: TCP, Scheduler: WLC}
	if err := d.SetVIP(v, reals); err != nil {
		t.Fatal(err)
	}
	flows := flowsTo(t, d, reals, 10000, 400)
	busy, idle := reals[0].Addr, reals[1].Addr
	held := count(flows, busy)
	if held < 100 || count(flows, idle) < 100 {
		t.Fatalf("equal weights split 400 flows %d/%d", held, 400-held)
	}
	// The idle server's clients all close (FIN): it holds no active flow.
	for sport, a := range flows {
		if a == idle {
			f := frame{src: clientIP, dst: vipAddr, sport: uint16(sport), dport: 80, proto: 6, tcpFlags: 0x11}
			runXDP(t, d, f.build(), 0)
		}
	}
	d.do(func() error { d.st.tick(); return nil })
	st := vipStats(t, d, v)
	if st.Reals[0].ActiveFlows != held || st.Reals[1].ActiveFlows != 0 {
		t.Errorf("active flows %d/%d, want %d/0", st.Reals[0].ActiveFlows, st.Reals[1].ActiveFlows, held)
	}
	if st.Reals[0].EffectiveWeight >= st.Reals[1].EffectiveWeight {
		t.Errorf("effective weights %d (busy) / %d (idle)", st.Reals[0].EffectiveWeight, st.Reals[1].EffectiveWeight)
	}
	next := flowsTo(t, d, reals, 20000, 400)
	if b, i := count(next, busy), count(next, idle); b*4 >= i {
		t.Errorf("after re-weighting, new flows went %d to the busy server and %d to the idle one", b, i)
	}
}

// TestCountFlowsWholeTable fills the connection table with more entries than one batch read
// holds (flowBatch) and checks that every one is counted: active by VIP and real, closed and
// idle ones not active, and every real ID seen within two ActiveTimeouts live.
func TestCountFlowsWholeTable(t *testing.T) {
	d := newTestDirector(t, Options{Mode: DR, TableSize: 251, ConnTableSize: 1 << 16})
	now := monotonic()
	timeout := uint64(d.opts.ActiveTimeout)
	const n = 3*flowBatch + 123
	want := map[uint32]int{}
	for i := range n {
		id := uint32(1 + i%3)
		c := directorConn{RealId: id, SeenNs: now}
		switch {
		case id == 3:
			c.SeenNs = now - 3*timeout // idle for long: real 3 is not live
		case i%10 == 7:
			c.Flags = connFlagClosing
		case i%10 == 8:
			c.SeenNs = now - timeout - timeout/2 // idle, still live
		default:
			want[id]++
		}
		if err := d.objs.Conns.Put(flowKey(i), c); err != nil {
			t.Fatal(err)
		}
	}
	var active map[vipKey]map[uint32]int
	var live map[uint32]bool
	d.do(func() error { active, live = d.countFlows(); return nil })
	vk := vipKey{vipAddr, 80, TCP}
	if len(active) != 1 || fmt.Sprint(active[vk]) != fmt.Sprint(want) {
		t.Errorf("active flows %v, want %v for %v only", active, want, vk)
	}
	if len(live) != 2 || !live[1] || !live[2] {
		t.Errorf("live real IDs %v, want 1 and 2", live)
	}
}
