package vrrp

import (
	"bytes"
	"encoding/hex"
	"errors"
	"net/netip"
	"slices"
	"testing"
	"time"
)

// Adverts captured from keepalived 2.2.7 (Debian's) in a network namespace with tcpdump
// (the VRRP part of the IP packet): the golden truth of the default checksum form.
var keepalivedAdverts = []struct {
	name     string
	src, dst string
	hex      string
	want     Packet
}{
	{"multicast, two addresses", "10.99.0.2", "224.0.0.18", "3133960200 6437df 0a630064 0a630065",
		Packet{VRID: 51, Priority: 150, Interval: time.Second, Addrs: addrs("10.99.0.100", "10.99.0.101")}},
	{"multicast, priority 0 on stop", "10.99.0.2", "224.0.0.18", "3133000200 64cddf 0a630064 0a630065",
		Packet{VRID: 51, Priority: 0, Interval: time.Second, Addrs: addrs("10.99.0.100", "10.99.0.101")}},
	{"unicast peer, 100 ms", "10.99.0.2", "10.99.0.3", "3134780100 0a36a8 0a63006e",
		Packet{VRID: 52, Priority: 120, Interval: 100 * time.Millisecond, Addrs: addrs("10.99.0.110")}},
}

func addrs(s ...string) []netip.Addr {
	var out []netip.Addr
	for _, a := range s {
		out = append(out, netip.MustParseAddr(a))
	}
	return out
}

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(string(bytes.ReplaceAll([]byte(s), []byte(" "), nil)))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestPacketKeepalived(t *testing.T) {
	for _, c := range keepalivedAdverts {
		t.Run(c.name, func(t *testing.T) {
			src, dst := netip.MustParseAddr(c.src), netip.MustParseAddr(c.dst)
			raw := unhex(t, c.hex)
			p, err := Parse(raw, src, dst, 255, PseudoHeader)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if p.VRID != c.want.VRID || p.Priority != c.want.Priority || p.Interval != c.want.Interval || !slices.Equal(p.Addrs, c.want.Addrs) {
				t.Errorf("parsed %+v, want %+v", p, c.want)
			}
			out, err := c.want.Marshal(nil, src, dst, PseudoHeader)
			if err != nil || !bytes.Equal(out, raw) {
				t.Errorf("Marshal: % x (%v), keepalived sent % x", out, err, raw)
			}
			// The other form fails on keepalived's checksum.
			if _, err := Parse(raw, src, dst, 255, MessageOnly); !errors.Is(err, ErrChecksum) {
				t.Errorf("message-only Parse of keepalived's advert: %v, want ErrChecksum", err)
			}
		})
	}
}

func TestPacketMessageOnly(t *testing.T) {
	p := Packet{VRID: 7, Priority: 200, Interval: 20 * time.Millisecond, Addrs: addrs("192.0.2.1")}
	src, dst := netip.MustParseAddr("192.0.2.10"), Group
	b, err := p.Marshal(nil, src, dst, MessageOnly)
	if err != nil {
		t.Fatal(err)
	}
	// The checksum of the message alone does not depend on the addresses of the IP header.
	if _, err := Parse(b, netip.MustParseAddr("198.51.100.1"), netip.MustParseAddr("198.51.100.2"), -1, MessageOnly); err != nil {
		t.Errorf("message-only: %v", err)
	}
	if _, err := Parse(b, src, dst, 255, PseudoHeader); !errors.Is(err, ErrChecksum) {
		t.Errorf("message-only advert parsed with the pseudo-header: %v, want ErrChecksum", err)
	}
}

func TestParseErrors(t *testing.T) {
	src, grp, peer := netip.MustParseAddr("10.99.0.2"), Group, netip.MustParseAddr("10.99.0.3")
	good := unhex(t, keepalivedAdverts[0].hex)
	mod := func(f func([]byte) []byte) []byte { return f(bytes.Clone(good)) }
	// fix recomputes the checksum so that only the field under test is wrong.
	fix := func(b []byte) []byte {
		b[6], b[7] = 0, 0
		c := checksum(b, src, grp, PseudoHeader)
		b[6], b[7] = byte(c>>8), byte(c)
		return b
	}
	cases := []struct {
		name string
		b    []byte
		dst  netip.Addr
		ttl  int
		want error
	}{
		{"multicast TTL 254", good, grp, 254, ErrTTL},
		{"multicast TTL 1", good, grp, 1, ErrTTL},
		{"TTL unknown", good, grp, -1, nil},
		{"empty", nil, grp, 255, ErrLength},
		{"short header", good[:7], grp, 255, ErrLength},
		{"version 2", mod(func(b []byte) []byte { b[0] = 0x21; return fix(b) }), grp, 255, ErrVersion},
		{"type 2", mod(func(b []byte) []byte { b[0] = 0x32; return fix(b) }), grp, 255, ErrType},
		{"count says 3", mod(func(b []byte) []byte { b[3] = 3; return fix(b) }), grp, 255, ErrLength},
		{"count says 1", mod(func(b []byte) []byte { b[3] = 1; return fix(b) }), grp, 255, ErrLength},
		{"trailing byte", mod(func(b []byte) []byte { return fix(append(b, 0)) }), grp, 255, ErrLength},
		{"truncated address", good[:len(good)-1], grp, 255, ErrLength},
		{"checksum", mod(func(b []byte) []byte { b[7] ^= 1; return b }), grp, 255, ErrChecksum},
		{"priority changed", mod(func(b []byte) []byte { b[2]++; return b }), grp, 255, ErrChecksum},
		{"interval 0", mod(func(b []byte) []byte { b[4], b[5] = 0xf0, 0; return fix(b) }), grp, 255, ErrInterval},
		{"reserved bits set are ignored", mod(func(b []byte) []byte { b[4] |= 0xf0; return fix(b) }), grp, 255, nil},
		{"unicast advert with another TTL", mod(func(b []byte) []byte {
			b[6], b[7] = 0, 0
			c := checksum(b, src, peer, PseudoHeader)
			b[6], b[7] = byte(c>>8), byte(c)
			return b
		}), peer, 3, nil},
		{"sent to the group, summed for a unicast peer", good, peer, 255, ErrChecksum},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse(c.b, src, c.dst, c.ttl, PseudoHeader)
			if !errors.Is(err, c.want) || (c.want == nil && err != nil) {
				t.Errorf("Parse: %v, want %v", err, c.want)
			}
		})
	}
}

func TestMarshalErrors(t *testing.T) {
	src := netip.MustParseAddr("10.0.0.1")
	for _, c := range []struct {
		name string
		p    Packet
	}{
		{"interval 0", Packet{Interval: 0}},
		{"interval 5ms", Packet{Interval: 5 * time.Millisecond}},
		{"interval 15ms", Packet{Interval: 15 * time.Millisecond}},
		{"interval 41s", Packet{Interval: 41 * time.Second}},
		{"IPv6 address", Packet{Interval: time.Second, Addrs: addrs("2001:db8::1")}},
		{"256 addresses", Packet{Interval: time.Second, Addrs: make([]netip.Addr, 256)}},
	} {
		if b, err := c.p.Marshal(nil, src, Group, PseudoHeader); err == nil {
			t.Errorf("%s: marshalled % x, want an error", c.name, b)
		}
	}
	for _, iv := range []time.Duration{MinInterval, MaxInterval} {
		if _, err := (&Packet{Interval: iv}).Marshal(nil, src, Group, PseudoHeader); err != nil {
			t.Errorf("interval %v: %v", iv, err)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, c := range keepalivedAdverts {
		f.Add(unhex(f, c.hex), uint8(255))
	}
	f.Add([]byte{0x31}, uint8(255))
	src, dst := netip.MustParseAddr("10.99.0.2"), Group
	f.Fuzz(func(t *testing.T, b []byte, ttl uint8) {
		for _, c := range []Checksum{PseudoHeader, MessageOnly} {
			p, err := Parse(b, src, dst, int(ttl), c)
			if err != nil {
				continue
			}
			// Whatever parses marshals back to the same bytes, but for reserved bits.
			out, err := p.Marshal(nil, src, dst, c)
			if err != nil {
				t.Fatalf("parsed %+v does not marshal: %v", p, err)
			}
			in := bytes.Clone(b)
			in[4] &= 0x0f
			if !bytes.Equal(out[:6], in[:6]) || !bytes.Equal(out[8:], in[8:]) {
				t.Fatalf("round trip % x -> % x", b, out)
			}
		}
	})
}
