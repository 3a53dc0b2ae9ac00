package director

import (
	"encoding/binary"
	"net/netip"
	"testing"
	"time"
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

// BenchmarkProgramDRNewFlow reports the program's time for the first packet of a new flow,
// as the lab's load (a new connection per request) sends: a conns miss, a table pick and an
// insert. In "room" the connection table never fills (the flows are deleted, untimed, every
// 8192 packets); in "full" a 1024-entry table evicts an entry on every insert. "established"
// repeats one flow's packet, timed the same way (one run per call), for comparison.
func BenchmarkProgramDRNewFlow(b *testing.B) {
	for _, c := range []struct {
		name  string
		size  int
		clear bool
	}{{"established", 1 << 16, false}, {"room", 1 << 16, true}, {"full", 1024, false}} {
		b.Run(c.name, func(b *testing.B) {
			d := newTestDirector(b, Options{Mode: DR, TableSize: 251, ConnTableSize: c.size})
			if err := d.SetVIP(VIP{Addr: vipAddr, Port: 80, Proto: TCP}, testReals(3)); err != nil {
				b.Fatal(err)
			}
			pkt := frame{src: clientIP, dst: vipAddr, sport: 1, dport: 80, proto: 6, tcpFlags: 0x02}.build()
			var total time.Duration
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if c.clear && i > 0 && i%8192 == 0 {
					for j := i - 8192; j < i; j++ {
						_ = d.objs.Conns.Delete(flowKey(j))
					}
				}
				if c.name != "established" {
					setFlow(pkt, i)
				}
				ret, per, err := d.objs.BallastDirector.Benchmark(pkt, 1, nil)
				if err != nil {
					b.Fatal(err)
				}
				if ret != xdpTX {
					b.Fatalf("action %d", ret)
				}
				total += per
			}
			b.ReportMetric(float64(total.Nanoseconds())/float64(b.N), "ns/packet")
		})
	}
}

// flowSrc is flow i's client address 10.x.y.z (from i's high bits) and port (its low bits).
func flowSrc(i int) ([4]byte, uint16) {
	var a [4]byte
	binary.BigEndian.PutUint32(a[:], 10<<24|uint32(i>>16)&0xffffff)
	return a, uint16(i)
}

// setFlow makes pkt a packet of flow i.
func setFlow(pkt []byte, i int) {
	a, port := flowSrc(i)
	copy(pkt[14+12:], a[:])
	binary.BigEndian.PutUint16(pkt[14+20:], port)
}

// flowKey is the connection table key of flow i to vipAddr:80/tcp.
func flowKey(i int) *directorFlowKey {
	a, port := flowSrc(i)
	return &directorFlowKey{Src: be32(netip.AddrFrom4(a)), Dst: be32(vipAddr), Sport: htons(port), Dport: htons(80), Proto: 6}
}
