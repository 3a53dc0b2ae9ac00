package director

import (
	"bytes"
	"testing"

	"ballast/balance"
)

// TestSecondChanceMark: after a real server is added, a flow picked up established (not a
// SYN) on a slot that changed goes to the slot's new real server with the previous one's
// address in the source MAC (SC marker 32:c5), on its first packet and on the next ones (the
// connection table keeps it); a SYN on such a slot, and a flow on an unchanged slot, go out
// unmarked; without Options.SecondChance nothing is marked.
func TestSecondChanceMark(t *testing.T) {
	const size = 251
	v := VIP{Addr: vipAddr, Port: 80, Proto: TCP}
	three, four := testReals(3), testReals(4)
	before, _ := Table(0, three, size)
	after, _ := Table(0, four, size)
	for _, on := range []bool{true, false} {
		d := newTestDirector(t, Options{Mode: DR, TableSize: size, SecondChance: on})
		must0(t, d.SetVIP(v, three))
		must0(t, d.SetVIP(v, four))
		var changed, same, syn int
		for port := uint16(1000); port < 3000 && (changed < 20 || same < 20 || syn < 5); port++ {
			f := frame{src: clientIP, dst: vipAddr, sport: port, dport: 80, proto: 6, tcpFlags: 0x10, payload: []byte("x")}
			slot := goSlot(f, size)
			moved := before[slot] != after[slot]
			if moved && syn < 5 { // a new connection on a moved slot: never marked
				s := f
				s.tcpFlags = 0x02
				_, out := runXDP(t, d, s.build(), 0)
				if !bytes.Equal(out[6:12], dirMAC) {
					t.Errorf("on=%v: a SYN on a moved slot left with source MAC %x", on, out[6:12])
				}
				syn++
				continue
			}
			for pkt := range 2 { // the first packet and the next, through the connection table
				ret, out := runXDP(t, d, f.build(), 0)
				if ret != xdpTX || macOf(four, out[0:6]) != after[slot] {
					t.Fatalf("on=%v: flow %d to %s, want XDP_TX to the table's %s", on, port, macOf(four, out[0:6]), after[slot])
				}
				marked := out[6] == 0x32 && out[7] == 0xc5
				switch {
				case on && moved:
					want := before[slot].As4()
					if !marked || !bytes.Equal(out[8:12], want[:]) {
						t.Errorf("flow %d packet %d on a moved slot: source MAC %x, want 32:c5 and %s", port, pkt, out[6:12], before[slot])
					}
				case marked:
					t.Errorf("on=%v moved=%v: flow %d packet %d marked %x", on, moved, port, pkt, out[6:12])
				}
			}
			if moved {
				changed++
			} else {
				same++
			}
		}
		if changed < 20 || same < 20 || syn < 5 {
			t.Fatalf("flows on moved slots %d, unchanged %d, SYNs %d: too few", changed, same, syn)
		}
		c, err := d.Counters()
		if err != nil {
			t.Fatal(err)
		}
		if on != (c["second_chance"] == uint64(2*changed)) {
			t.Errorf("on=%v: second_chance counter %d for %d marked packets", on, c["second_chance"], 2*changed)
		}
	}
}

// goSlot is the table slot Go's flow hash gives f.
func goSlot(f frame, size int) int {
	h := balance.FlowHash(f.src, f.dst, f.sport, f.dport, f.proto)
	return int(uint64(h) % uint64(size))
}
