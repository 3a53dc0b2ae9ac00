package director

import (
	"net/netip"
	"slices"
	"testing"
)

// TestClusterTables: directors with the same seed and real servers build the same table, in
// the BPF map, whatever order the real servers came in and whatever IDs they hold; it is
// Table's; another seed gives another table.
func TestClusterTables(t *testing.T) {
	const size = 1009
	reals := testReals(4)
	reals[2].Weight = 3
	v := VIP{Addr: vipAddr, Port: 80, Proto: TCP}

	a := newTestDirector(t, Options{Mode: DR, TableSize: size, Seed: 7})
	if err := a.SetVIP(v, reals); err != nil {
		t.Fatal(err)
	}
	b := newTestDirector(t, Options{Mode: DR, TableSize: size, Seed: 7})
	// b learns of another real server first (it takes ID 1), then the same ones reversed.
	other := Real{Addr: netip.MustParseAddr("10.0.0.99"), Weight: 1, MAC: realMACs[4]}
	if err := b.SetVIP(v, []Real{other}); err != nil {
		t.Fatal(err)
	}
	rev := slices.Clone(reals)
	slices.Reverse(rev)
	if err := b.SetVIP(v, rev); err != nil {
		t.Fatal(err)
	}
	if ia, ib := realIDs(t, a, v), realIDs(t, b, v); ia[reals[0].Addr] == ib[reals[0].Addr] {
		t.Fatalf("the directors gave the real servers the same IDs (%v, %v): the test shows nothing", ia, ib)
	}
	ta, tb := readRing(t, a, v, size), readRing(t, b, v, size)
	if !slices.Equal(ta, tb) {
		t.Fatal("two directors with the same seed and real servers hold different tables")
	}
	want, err := Table(7, reals, size)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ta, want) {
		t.Fatal("the director's table is not Table(seed, reals)")
	}
	unseeded, _ := Table(0, reals, size)
	seeded8, _ := Table(8, reals, size)
	for name, other := range map[string][]netip.Addr{"no seed": unseeded, "seed 8": seeded8} {
		same := 0
		for i := range want {
			if want[i] == other[i] {
				same++
			}
		}
		if same > size/2 {
			t.Errorf("%s: %d of %d slots equal to seed 7's table; want another table", name, same, size)
		}
	}
	u, err := b.Usable()
	if err != nil || u[v] != len(reals) {
		t.Errorf("Usable: %v %v, want %d", u, err, len(reals))
	}
	down := slices.Clone(reals)
	down[0].Down, down[1].Weight = true, 0
	if err := b.SetVIP(v, down); err != nil {
		t.Fatal(err)
	}
	if u, _ := b.Usable(); u[v] != len(reals)-2 {
		t.Errorf("Usable with one down and one drained: %v, want %d", u, len(reals)-2)
	}
}

// TestOwnMACOnly: with OwnMACOnly a VIP's frame sent to another host's MAC (a switch flooding
// a lost director's frames) is passed to the kernel and counted, not forwarded; one sent to
// the director's own MAC is balanced; without the option both are.
func TestOwnMACOnly(t *testing.T) {
	v := VIP{Addr: vipAddr, Port: 80, Proto: TCP}
	f := frame{src: clientIP, dst: vipAddr, sport: 40000, dport: 80, proto: 6, tcpFlags: 0x02}
	other := f.build()
	copy(other[0:6], []byte{0x02, 0xd1, 0, 0, 0, 0x03}) // the next director's MAC
	for _, own := range []bool{true, false} {
		d := newTestDirector(t, Options{Mode: DR, TableSize: 251, OwnMACOnly: own})
		if err := d.SetVIP(v, testReals(2)); err != nil {
			t.Fatal(err)
		}
		if ret, _ := runXDP(t, d, f.build(), 0); ret != xdpTX {
			t.Errorf("own=%v: a frame to the director's MAC: action %d, want XDP_TX", own, ret)
		}
		ret, _ := runXDP(t, d, other, 0)
		c, err := d.Counters()
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case own && (ret != xdpPass || c["pass_other_host"] != 1):
			t.Errorf("a frame to another MAC: action %d, pass_other_host %d; want XDP_PASS, 1", ret, c["pass_other_host"])
		case !own && ret != xdpTX:
			t.Errorf("without OwnMACOnly a frame to another MAC: action %d, want XDP_TX", ret)
		}
	}
}
