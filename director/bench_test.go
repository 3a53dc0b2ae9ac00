package director

import (
	"testing"
)

// BenchmarkProgramDR reports the program's own time per packet for an established DR flow
// (the first run places it; the kernel repeats the same packet b.N times). TUN and NAT cannot
// be measured this way: the kernel repeats the program on its own output, already rewritten.
func BenchmarkProgramDR(b *testing.B) {
	d := newTestDirector(b, Options{Mode: DR, TableSize: 251})
	if err := d.SetVIP(VIP{Addr: vipAddr, Port: 80, Proto: TCP}, testReals(3)); err != nil {
		b.Fatal(err)
	}
	pkt := frame{src: clientIP, dst: vipAddr, sport: 40000, dport: 80, proto: 6, tcpFlags: 0x10, payload: make([]byte, 64)}.build()
	b.ReportAllocs()
	ret, per, err := d.objs.BallastDirector.Benchmark(pkt, b.N, b.ResetTimer)
	if err != nil {
		b.Fatal(err)
	}
	if ret != xdpTX {
		b.Fatalf("action %d", ret)
	}
	b.ReportMetric(float64(per.Nanoseconds()), "ns/packet")
}

// BenchmarkSetVIPAddRemove measures a table change on the default 65537-slot table: Maglev
// build, diff and the write of the slots that moved.
func BenchmarkSetVIPAddRemove(b *testing.B) {
	d := newTestDirector(b, Options{Mode: DR})
	v := VIP{Addr: vipAddr, Port: 80, Proto: TCP}
	reals := testReals(5)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if err := d.SetVIP(v, reals[:4+i%2]); err != nil {
			b.Fatal(err)
		}
	}
}
