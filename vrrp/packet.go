package vrrp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"time"
)

// Protocol numbers and addresses of VRRP over IPv4.
const (
	IPProtocol = 112 // IP protocol number of VRRP
	TTL        = 255 // adverts are sent with this TTL; a multicast one with another is discarded
	Version    = 3
	typeAdvert = 1
	headerLen  = 8
	// MaxAddrs is the most IPv4 addresses one advert carries (the count is 8 bits).
	MaxAddrs = 255
)

// Group is the IPv4 multicast group adverts are sent to (RFC 9568 §5.1.1.2).
var Group = netip.AddrFrom4([4]byte{224, 0, 0, 18})

// Checksum selects how the checksum of an IPv4 advert is computed. VRRPv3 (RFC 5798, RFC 9568
// §5.2.8) sums the message and a pseudo-header; for IPv4, implementations differ on that
// pseudo-header.
type Checksum uint8

const (
	// PseudoHeader sums an IPv4 pseudo-header (source, destination as sent, zero, protocol
	// 112, VRRP length) and the message, as keepalived 2.2.7 (Debian's) and Wireshark do. The
	// default.
	PseudoHeader Checksum = iota
	// MessageOnly sums the VRRP message alone, as in VRRPv2 (RFC 3768), which some
	// implementations keep for IPv4 in version 3.
	MessageOnly
)

func (c Checksum) String() string {
	switch c {
	case PseudoHeader:
		return "pseudo-header"
	case MessageOnly:
		return "message-only"
	}
	return fmt.Sprintf("checksum(%d)", uint8(c))
}

// ParseChecksum reads "pseudo-header" or "message-only".
func ParseChecksum(s string) (Checksum, error) {
	for _, c := range []Checksum{PseudoHeader, MessageOnly} {
		if c.String() == s {
			return c, nil
		}
	}
	return 0, fmt.Errorf("vrrp: unknown checksum form %q (valid: pseudo-header, message-only)", s)
}

// Packet is a VRRPv3 advertisement for IPv4.
type Packet struct {
	VRID     uint8
	Priority uint8
	Interval time.Duration // Max Adver Int, a multiple of 10 ms up to 40.95 s
	Addrs    []netip.Addr  // IPv4
}

// Marshal appends the advert to b, with its checksum for an IP packet from src to dst.
func (p *Packet) Marshal(b []byte, src, dst netip.Addr, c Checksum) ([]byte, error) {
	if len(p.Addrs) > MaxAddrs {
		return b, fmt.Errorf("vrrp: %d addresses in one advert (at most %d)", len(p.Addrs), MaxAddrs)
	}
	cs := p.Interval / (10 * time.Millisecond)
	if cs < 1 || cs > 0xfff || p.Interval%(10*time.Millisecond) != 0 {
		return b, fmt.Errorf("vrrp: advert interval %v (a multiple of 10ms, 10ms to 40.95s)", p.Interval)
	}
	start := len(b)
	b = append(b, Version<<4|typeAdvert, p.VRID, p.Priority, uint8(len(p.Addrs)))
	b = binary.BigEndian.AppendUint16(b, uint16(cs))
	b = append(b, 0, 0) // checksum
	for _, a := range p.Addrs {
		if !a.Is4() {
			return b[:start], fmt.Errorf("vrrp: %s is not an IPv4 address", a)
		}
		a4 := a.As4()
		b = append(b, a4[:]...)
	}
	binary.BigEndian.PutUint16(b[start+6:], checksum(b[start:], src, dst, c))
	return b, nil
}

// Errors of Parse, one per check (RFC 9568 §7.1), counted separately by the speaker.
var (
	ErrTTL      = errors.New("vrrp: TTL is not 255")
	ErrVersion  = errors.New("vrrp: not version 3")
	ErrType     = errors.New("vrrp: not an advertisement")
	ErrLength   = errors.New("vrrp: length does not match the address count")
	ErrChecksum = errors.New("vrrp: bad checksum")
	ErrInterval = errors.New("vrrp: advert interval 0")
)

// Parse reads and validates an advert received in an IP packet from src to dst with the given
// TTL (ttl < 0: not known, not checked). The TTL must be 255 when dst is multicast; a
// unicast advert's TTL is not checked (routers may be several hops apart). The VRID is
// returned, not checked: the caller compares it with its own.
func Parse(b []byte, src, dst netip.Addr, ttl int, c Checksum) (Packet, error) {
	var p Packet
	if dst.IsMulticast() && ttl >= 0 && ttl != TTL {
		return p, ErrTTL
	}
	if len(b) < headerLen {
		return p, ErrLength
	}
	if b[0]>>4 != Version {
		return p, ErrVersion
	}
	if b[0]&0x0f != typeAdvert {
		return p, ErrType
	}
	n := int(b[3])
	if len(b) != headerLen+4*n {
		return p, ErrLength
	}
	if checksum(b, src, dst, c) != 0 {
		return p, ErrChecksum
	}
	cs := binary.BigEndian.Uint16(b[4:]) & 0x0fff
	if cs == 0 {
		return p, ErrInterval
	}
	p.VRID, p.Priority = b[1], b[2]
	p.Interval = time.Duration(cs) * 10 * time.Millisecond
	p.Addrs = make([]netip.Addr, n)
	for i := range n {
		p.Addrs[i] = netip.AddrFrom4([4]byte(b[headerLen+4*i:]))
	}
	return p, nil
}

// checksum is the Internet checksum of msg (whose checksum field may be zero, or hold the
// checksum: then the result is 0 when it is right), with the pseudo-header for c.
func checksum(msg []byte, src, dst netip.Addr, c Checksum) uint16 {
	var sum uint32
	if c == PseudoHeader {
		s, d := src.As4(), dst.As4()
		sum += uint32(s[0])<<8 | uint32(s[1])
		sum += uint32(s[2])<<8 | uint32(s[3])
		sum += uint32(d[0])<<8 | uint32(d[1])
		sum += uint32(d[2])<<8 | uint32(d[3])
		sum += IPProtocol
		sum += uint32(len(msg))
	}
	for i := 0; i+1 < len(msg); i += 2 {
		sum += uint32(msg[i])<<8 | uint32(msg[i+1])
	}
	if len(msg)%2 == 1 {
		sum += uint32(msg[len(msg)-1]) << 8
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}
