package balance

import (
	"net/netip"
	"testing"
)

// The expected values were computed by the kernel's <linux/jhash.h> functions compiled with gcc
// (the same macros a BPF program includes), so a change to the Go port that the BPF side would not
// share fails here.
func TestJhashMatchesKernel(t *testing.T) {
	k := []uint32{1, 2, 3, 4, 5, 6, 7, 8}
	for _, c := range []struct {
		name      string
		got, want uint32
	}{
		{"jhash_3words", Jhash3Words(0x0a000001, 0xc0a80001, 12345<<16|80, FlowSeed+6), 3327139821},
		{"jhash_1word", Jhash1Word(0x7f000001, FlowSeed), 3625334414},
		{"jhash_2words", Jhash2Words(7, 9, 11), 529812615},
		{"jhash2/8", Jhash2(k, FlowSeed+17), 627987380},
		{"jhash2/4", Jhash2(k[:4], FlowSeed), 3427749632},
		{"jhash2/7", Jhash2(k[:7], 1), 963868363},
		{"jhash2/3", Jhash2(k[:3], 0), 2757843189},
	} {
		if c.got != c.want {
			t.Errorf("%s = %d, kernel gives %d", c.name, c.got, c.want)
		}
	}
}

func TestFlowHashDefinition(t *testing.T) {
	src, dst := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("192.168.0.1")
	if got, want := FlowHash(src, dst, 12345, 80, 6), uint32(3327139821); got != want {
		t.Errorf("FlowHash v4 = %d, want jhash_3words value %d", got, want)
	}
	mapped := netip.AddrFrom16(src.As16())
	if FlowHash(mapped, dst, 12345, 80, 6) != FlowHash(src, dst, 12345, 80, 6) {
		t.Error("an IPv4-mapped source hashes differently from the plain address")
	}
	if SourceHash(netip.MustParseAddr("127.0.0.1")) != 3625334414 {
		t.Error("SourceHash v4 is not jhash_1word(saddr, FlowSeed)")
	}
	if FlowHash(src, dst, 12345, 80, 6) == FlowHash(src, dst, 12345, 80, 17) {
		t.Error("protocol does not enter the hash")
	}
	if FlowHash(src, dst, 12345, 80, 6) == FlowHash(src, dst, 12346, 80, 6) {
		t.Error("source port does not enter the hash")
	}
	v6a, v6b := netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8::2")
	if FlowHash(v6a, v6b, 1, 2, 6) == FlowHash(v6b, v6a, 1, 2, 6) {
		t.Error("IPv6 source and destination are symmetric in the hash")
	}
	if SourceHash(v6a) == SourceHash(v6b) {
		t.Error("IPv6 SourceHash ignores the address")
	}
}

func BenchmarkFlowHash(b *testing.B) {
	src, dst := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("192.168.0.1")
	b.ReportAllocs()
	var sink uint32
	for i := 0; b.Loop(); i++ {
		sink += FlowHash(src, dst, uint16(i), 80, 6)
	}
	_ = sink
}
