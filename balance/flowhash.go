package balance

import (
	"encoding/binary"
	"math/bits"
	"net/netip"
)

// FlowSeed is the seed of every flow hash. It is a fixed constant, so that a flow hashes the same
// in every process and in any BPF program computing the same jhash with it.
const FlowSeed uint32 = 0x8badf00d

// jhashInit is lookup3's JHASH_INITVAL, as in the kernel's <linux/jhash.h>.
const jhashInit uint32 = 0xdeadbeef

// The flow hash is Bob Jenkins' lookup3 "jhash" exactly as <linux/jhash.h> writes it, because a
// BPF program can compute it in a handful of instructions and the kernel headers already carry it:
//
//	5-tuple, IPv4:  jhash_3words(saddr, daddr, sport<<16 | dport, FlowSeed + proto)
//	source, IPv4:   jhash_1word(saddr, FlowSeed)
//	5-tuple, IPv6:  jhash_2words(jhash2(saddr[4] ‖ daddr[4], 8, FlowSeed + proto), sport<<16 | dport, FlowSeed)
//	source, IPv6:   jhash2(saddr[4], 4, FlowSeed)
//
// Addresses and ports are their numeric values (network byte order read big-endian, i.e. what
// bpf_ntohl/bpf_ntohs give). A picker is looked up with the 32-bit result widened to uint64, so
// maglev's table[key % size] is the same slot in Go and in BPF.

// FlowHash hashes a connection's 5-tuple. IPv4-mapped addresses hash as IPv4.
func FlowHash(src, dst netip.Addr, sport, dport uint16, proto uint8) uint32 {
	src, dst = src.Unmap(), dst.Unmap()
	ports := uint32(sport)<<16 | uint32(dport)
	if src.Is4() && dst.Is4() {
		return Jhash3Words(addr4(src), addr4(dst), ports, FlowSeed+uint32(proto))
	}
	var k [8]uint32
	words16(k[:4], src)
	words16(k[4:], dst)
	return Jhash2Words(Jhash2(k[:], FlowSeed+uint32(proto)), ports, FlowSeed)
}

// SourceHash hashes a client address alone, for persistence by source IP (LVS -p, HAProxy
// `balance source`).
func SourceHash(src netip.Addr) uint32 {
	src = src.Unmap()
	if src.Is4() {
		return Jhash1Word(addr4(src), FlowSeed)
	}
	var k [4]uint32
	words16(k[:], src)
	return Jhash2(k[:], FlowSeed)
}

func addr4(a netip.Addr) uint32 {
	b := a.As4()
	return binary.BigEndian.Uint32(b[:])
}

func words16(dst []uint32, a netip.Addr) {
	b := a.As16()
	for i := range 4 {
		dst[i] = binary.BigEndian.Uint32(b[4*i:])
	}
}

// Jhash3Words is the kernel's jhash_3words.
func Jhash3Words(a, b, c, initval uint32) uint32 {
	return jhashNWords(a, b, c, initval+jhashInit+(3<<2))
}

// Jhash2Words is the kernel's jhash_2words.
func Jhash2Words(a, b, initval uint32) uint32 {
	return jhashNWords(a, b, 0, initval+jhashInit+(2<<2))
}

// Jhash1Word is the kernel's jhash_1word.
func Jhash1Word(a, initval uint32) uint32 {
	return jhashNWords(a, 0, 0, initval+jhashInit+(1<<2))
}

// Jhash2 is the kernel's jhash2 over 32-bit words.
func Jhash2(k []uint32, initval uint32) uint32 {
	n := uint32(len(k))
	a := jhashInit + n<<2 + initval
	b, c := a, a
	for len(k) > 3 {
		a += k[0]
		b += k[1]
		c += k[2]
		a, b, c = jhashMix(a, b, c)
		k = k[3:]
	}
	switch len(k) {
	case 3:
		c += k[2]
		fallthrough
	case 2:
		b += k[1]
		fallthrough
	case 1:
		a += k[0]
		_, _, c = jhashFinal(a, b, c)
	}
	return c
}

func jhashNWords(a, b, c, initval uint32) uint32 {
	a += initval
	b += initval
	c += initval
	_, _, c = jhashFinal(a, b, c)
	return c
}

func jhashMix(a, b, c uint32) (uint32, uint32, uint32) {
	a -= c
	a ^= bits.RotateLeft32(c, 4)
	c += b
	b -= a
	b ^= bits.RotateLeft32(a, 6)
	a += c
	c -= b
	c ^= bits.RotateLeft32(b, 8)
	b += a
	a -= c
	a ^= bits.RotateLeft32(c, 16)
	c += b
	b -= a
	b ^= bits.RotateLeft32(a, 19)
	a += c
	c -= b
	c ^= bits.RotateLeft32(b, 4)
	b += a
	return a, b, c
}

func jhashFinal(a, b, c uint32) (uint32, uint32, uint32) {
	c ^= b
	c -= bits.RotateLeft32(b, 14)
	a ^= c
	a -= bits.RotateLeft32(c, 11)
	b ^= a
	b -= bits.RotateLeft32(a, 25)
	c ^= b
	c -= bits.RotateLeft32(b, 16)
	a ^= c
	a -= bits.RotateLeft32(c, 4)
	b ^= a
	b -= bits.RotateLeft32(a, 14)
	c ^= b
	c -= bits.RotateLeft32(b, 24)
	return a, b, c
}
