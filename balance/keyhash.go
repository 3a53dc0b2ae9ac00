package balance

import (
	"bytes"
	"math/bits"
	"net/netip"

	"github.com/cespare/xxhash/v2"
)

// The request-key helpers below turn a request attribute into the 64-bit key that hash
// algorithms map to a backend. They are deterministic across processes, machines and releases
// (no per-process seed, unlike hash/maphash), because every node of a cluster must send the same
// key to the same backend. None of them allocates.

// KeyHash is the general request-key hash: xxHash64 (seed 0) of b. It is fast (a few ns for a
// short URI) and well mixed in all 64 bits, so both key % M (maglev) and ring lookups spread.
func KeyHash(b []byte) uint64 { return xxhash.Sum64(b) }

// KeyHashString is KeyHash for a string, without converting it to a byte slice.
func KeyHashString(s string) uint64 { return xxhash.Sum64String(s) }

// HashSourceIP hashes a client address. IPv4-mapped IPv6 addresses hash like the plain IPv4
// address, so a dual-stack listener keeps a client on the same backend; the zone is ignored.
// The invalid (zero) Addr hashes to a fixed value.
func HashSourceIP(ip netip.Addr) uint64 {
	ip = ip.Unmap()
	if ip.Is4() {
		a := ip.As4()
		return xxhash.Sum64(a[:])
	}
	a := ip.As16()
	return xxhash.Sum64(a[:])
}

// HashURI hashes a request URI (origin form, "/path?query"). With withQuery false only the part
// before the first '?' counts, so a cache partitioned by path keeps all variants of a page
// together (HAProxy's `balance uri` default); with true the whole URI counts.
func HashURI(uri []byte, withQuery bool) uint64 {
	if !withQuery {
		if q := bytes.IndexByte(uri, '?'); q >= 0 {
			uri = uri[:q]
		}
	}
	return xxhash.Sum64(uri)
}

// HashHeader hashes the value of a request header. The name is not mixed in: one pool hashes
// one header, and the value alone is what must be stable. A missing header is the caller's
// business (it usually falls back to a random key, as HAProxy falls back to round robin).
func HashHeader(value []byte) uint64 { return xxhash.Sum64(value) }

// HashCookie hashes the value of a cookie; see HashHeader for the missing-cookie rule.
func HashCookie(value []byte) uint64 { return xxhash.Sum64(value) }

// CARPURLHash is the URL hash of draft-vinod-carp-v1-03 §3.1, returned in the low 32 bits of
// the key (the high 32 bits are zero). The carp algorithm combines exactly these low 32 bits
// with each member's hash, so a proxy that passes CARPURLHash(url) as the key routes URLs as
// every other CARP implementation does. Bytes are taken as unsigned (0..255); URLs are ASCII on
// the wire, where signed and unsigned chars agree.
func CARPURLHash(url []byte) uint64 {
	var h uint32
	for _, c := range url {
		h += bits.RotateLeft32(h, 19) + uint32(c)
	}
	return uint64(h)
}

// CARPURLHashString is CARPURLHash for a string.
func CARPURLHashString(url string) uint64 {
	var h uint32
	for i := 0; i < len(url); i++ {
		h += bits.RotateLeft32(h, 19) + uint32(url[i])
	}
	return uint64(h)
}

// mix64 is the MurmurHash3 64-bit finaliser: a bijection that spreads every input bit over
// every output bit. Hash algorithms use it to derive further well-mixed values (ring points,
// Maglev skips) from one hash of an ID.
func mix64(x uint64) uint64 {
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}

// idHash hashes a backend ID with a seed; different seeds give independent hashes of the same
// ID (Maglev's offset and skip, ring points). It runs at build time only.
func idHash(id string, seed uint64) uint64 {
	d := xxhash.NewWithSeed(seed)
	_, _ = d.WriteString(id)
	return d.Sum64()
}
