package proxyproto

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/netip"
	"strconv"
)

// Version is the PROXY protocol version: V1 is the text form, V2 the binary one.
type Version uint8

// The two protocol versions.
const (
	V1 Version = 1
	V2 Version = 2
)

// ParseVersion maps the configuration's "v1"/"v2" (or "1"/"2") to a Version; "" is 0 (off).
func ParseVersion(s string) (Version, error) {
	switch s {
	case "":
		return 0, nil
	case "v1", "1":
		return V1, nil
	case "v2", "2":
		return V2, nil
	}
	return 0, errors.New(`send_proxy must be "v1" or "v2"`)
}

// String is "v1" or "v2".
func (v Version) String() string {
	switch v {
	case V1:
		return "v1"
	case V2:
		return "v2"
	}
	return "off"
}

// Transport is the protocol the addresses of a header belong to.
type Transport uint8

// Transports a header can name. Unspec is v1's UNKNOWN and v2's AF_UNSPEC (and AF_UNIX, whose
// addresses Ballast does not use).
const (
	Unspec Transport = iota
	TCP
	UDP
)

// Header is one PROXY protocol header.
type Header struct {
	Version Version
	// Local is v2's LOCAL command: the connection was made by the proxy itself (a health
	// check), the addresses are meaningless and the receiver uses the socket's own.
	Local     bool
	Transport Transport
	// Src is the original client, Dst the address it connected to.
	Src, Dst netip.AddrPort
}

// HasAddrs reports whether the header carries addresses the receiver should use.
func (h Header) HasAddrs() bool { return !h.Local && h.Transport != Unspec }

// The limits of what is accepted.
const (
	// MaxV1Len is the longest v1 header, CRLF included (the specification's 107).
	MaxV1Len = 107
	// MaxHeaderLen bounds a v2 header: 16 fixed bytes and at most MaxHeaderLen-16 of addresses
	// and TLVs. Longer declared lengths are refused rather than read.
	MaxHeaderLen = 1024
	v2FixedLen   = 16
)

// sigV2 is the v2 signature; v1 headers start with "PROXY ".
var sigV2 = [12]byte{0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D, 0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A}

var sigV1 = []byte("PROXY ")

// Errors Parse and Read return. Every one but ErrIncomplete refuses the connection.
var (
	ErrIncomplete  = errors.New("proxyproto: incomplete header")
	ErrNoHeader    = errors.New("proxyproto: no PROXY protocol header")
	ErrTooLong     = errors.New("proxyproto: header too long")
	ErrBadV1       = errors.New("proxyproto: malformed v1 header")
	ErrBadV2       = errors.New("proxyproto: malformed v2 header")
	ErrUnsupported = errors.New("proxyproto: unsupported version or command")
)

// Append encodes h after dst. A header without usable addresses, and a UDP header in v1 (which
// has no UDP), become UNKNOWN (v1) or LOCAL/UNSPEC as h says (v2). IPv4-mapped addresses are
// sent as IPv4 when both ends are IPv4; otherwise both are sent as IPv6.
func (h Header) Append(dst []byte) []byte {
	src, dstA, six, ok := h.addrs()
	if h.Version == V1 {
		if !ok || h.Local || h.Transport != TCP {
			return append(dst, "PROXY UNKNOWN\r\n"...)
		}
		dst = append(dst, "PROXY TCP4 "...)
		if six {
			dst[len(dst)-2] = '6'
		}
		dst = src.Addr().AppendTo(dst)
		dst = append(dst, ' ')
		dst = dstA.Addr().AppendTo(dst)
		dst = append(dst, ' ')
		dst = strconv.AppendUint(dst, uint64(src.Port()), 10)
		dst = append(dst, ' ')
		dst = strconv.AppendUint(dst, uint64(dstA.Port()), 10)
		return append(dst, '\r', '\n')
	}
	dst = append(dst, sigV2[:]...)
	if h.Local {
		dst = append(dst, 0x20)
	} else {
		dst = append(dst, 0x21)
	}
	if !ok || h.Transport == Unspec {
		return append(dst, 0x00, 0, 0)
	}
	fam := byte(0x10)
	if six {
		fam = 0x20
	}
	if h.Transport == UDP {
		fam |= 0x02
	} else {
		fam |= 0x01
	}
	dst = append(dst, fam)
	if six {
		dst = binary.BigEndian.AppendUint16(dst, 36)
		a, b := src.Addr().As16(), dstA.Addr().As16()
		dst = append(dst, a[:]...)
		dst = append(dst, b[:]...)
	} else {
		dst = binary.BigEndian.AppendUint16(dst, 12)
		a, b := src.Addr().As4(), dstA.Addr().As4()
		dst = append(dst, a[:]...)
		dst = append(dst, b[:]...)
	}
	dst = binary.BigEndian.AppendUint16(dst, src.Port())
	return binary.BigEndian.AppendUint16(dst, dstA.Port())
}

// addrs normalises the two addresses to one family: IPv4 when both are (mapped or not), IPv6
// otherwise. ok is false when either is invalid.
func (h Header) addrs() (src, dst netip.AddrPort, six, ok bool) {
	s, d := h.Src.Addr().Unmap(), h.Dst.Addr().Unmap()
	if !s.IsValid() || !d.IsValid() {
		return h.Src, h.Dst, false, false
	}
	if s.Is4() && d.Is4() {
		return netip.AddrPortFrom(s, h.Src.Port()), netip.AddrPortFrom(d, h.Dst.Port()), false, true
	}
	s, d = netip.AddrFrom16(s.As16()), netip.AddrFrom16(d.As16())
	return netip.AddrPortFrom(s, h.Src.Port()), netip.AddrPortFrom(d, h.Dst.Port()), true, true
}

// Parse decodes the header at the front of b and returns it with its length in bytes. It
// returns ErrIncomplete when b is a valid prefix of a header that needs more bytes, and
// another error when b cannot start a valid header within the limits.
func Parse(b []byte) (Header, int, error) {
	if len(b) == 0 {
		return Header{}, 0, ErrIncomplete
	}
	switch b[0] {
	case sigV2[0]:
		return parseV2(b)
	case sigV1[0]:
		return parseV1(b)
	}
	return Header{}, 0, ErrNoHeader
}

func parseV1(b []byte) (Header, int, error) {
	if n := min(len(b), len(sigV1)); !bytes.Equal(b[:n], sigV1[:n]) {
		return Header{}, 0, ErrNoHeader
	}
	end := bytes.IndexByte(b[:min(len(b), MaxV1Len)], '\n')
	if end < 0 {
		if len(b) >= MaxV1Len {
			return Header{}, 0, ErrTooLong
		}
		if bytes.IndexByte(b, '\r') >= 0 && b[len(b)-1] != '\r' {
			return Header{}, 0, ErrBadV1 // a CR not followed by LF
		}
		return Header{}, 0, ErrIncomplete
	}
	if end == 0 || b[end-1] != '\r' {
		return Header{}, 0, ErrBadV1
	}
	line := b[len(sigV1) : end-1]
	h := Header{Version: V1}
	if bytes.HasPrefix(line, []byte("UNKNOWN")) {
		if len(line) > 7 && line[7] != ' ' {
			return Header{}, 0, ErrBadV1
		}
		if bytes.IndexByte(line, '\r') >= 0 {
			return Header{}, 0, ErrBadV1
		}
		return h, end + 1, nil
	}
	var fields [5][]byte
	k := 0
	for f := range bytes.SplitSeq(line, []byte{' '}) {
		if k == len(fields) {
			return Header{}, 0, ErrBadV1
		}
		fields[k] = f
		k++
	}
	if k != len(fields) {
		return Header{}, 0, ErrBadV1
	}
	var want4 bool
	switch string(fields[0]) {
	case "TCP4":
		want4 = true
	case "TCP6":
	default:
		return Header{}, 0, ErrBadV1
	}
	src, err1 := netip.ParseAddr(string(fields[1]))
	dst, err2 := netip.ParseAddr(string(fields[2]))
	sp, ok1 := parsePort(fields[3])
	dp, ok2 := parsePort(fields[4])
	if err1 != nil || err2 != nil || !ok1 || !ok2 || src.Zone() != "" || dst.Zone() != "" {
		return Header{}, 0, ErrBadV1
	}
	if src.Is4() != want4 || dst.Is4() != want4 {
		return Header{}, 0, ErrBadV1
	}
	h.Transport = TCP
	h.Src = netip.AddrPortFrom(src, sp)
	h.Dst = netip.AddrPortFrom(dst, dp)
	return h, end + 1, nil
}

// parsePort accepts a decimal 0..65535 without sign or leading zero.
func parsePort(b []byte) (uint16, bool) {
	if len(b) == 0 || len(b) > 5 || (b[0] == '0' && len(b) > 1) {
		return 0, false
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return uint16(n), n <= 65535
}

func parseV2(b []byte) (Header, int, error) {
	if n := min(len(b), len(sigV2)); !bytes.Equal(b[:n], sigV2[:n]) {
		return Header{}, 0, ErrNoHeader
	}
	if len(b) < v2FixedLen {
		return Header{}, 0, ErrIncomplete
	}
	verCmd, fam := b[12], b[13]
	if verCmd>>4 != 2 {
		return Header{}, 0, ErrUnsupported
	}
	h := Header{Version: V2}
	switch verCmd & 0x0F {
	case 0:
		h.Local = true
	case 1:
	default:
		return Header{}, 0, ErrUnsupported
	}
	l := int(binary.BigEndian.Uint16(b[14:16]))
	total := v2FixedLen + l
	if total > MaxHeaderLen {
		return Header{}, 0, ErrTooLong
	}
	if len(b) < total {
		return Header{}, 0, ErrIncomplete
	}
	body := b[v2FixedLen:total]
	var alen int
	switch fam >> 4 {
	case 0: // AF_UNSPEC
	case 1:
		alen = 12
	case 2:
		alen = 36
	case 3: // AF_UNIX: the addresses are paths, of no use to Ballast
		alen = 216
	default:
		return Header{}, 0, ErrBadV2
	}
	var tr Transport
	switch fam & 0x0F {
	case 0:
	case 1:
		tr = TCP
	case 2:
		tr = UDP
	default:
		return Header{}, 0, ErrBadV2
	}
	if (fam>>4 == 0) != (tr == Unspec) {
		return Header{}, 0, ErrBadV2
	}
	if len(body) < alen {
		return Header{}, 0, ErrBadV2
	}
	switch fam >> 4 {
	case 1:
		h.Src = netip.AddrPortFrom(netip.AddrFrom4([4]byte(body[0:4])), binary.BigEndian.Uint16(body[8:10]))
		h.Dst = netip.AddrPortFrom(netip.AddrFrom4([4]byte(body[4:8])), binary.BigEndian.Uint16(body[10:12]))
		h.Transport = tr
	case 2:
		h.Src = netip.AddrPortFrom(netip.AddrFrom16([16]byte(body[0:16])), binary.BigEndian.Uint16(body[32:34]))
		h.Dst = netip.AddrPortFrom(netip.AddrFrom16([16]byte(body[16:32])), binary.BigEndian.Uint16(body[34:36]))
		h.Transport = tr
	}
	if h.Local {
		h.Src, h.Dst, h.Transport = netip.AddrPort{}, netip.AddrPort{}, Unspec
	}
	// TLVs: type, 16-bit length, value. They are walked so that a malformed one is refused,
	// and otherwise ignored.
	for t := body[alen:]; len(t) > 0; {
		if len(t) < 3 {
			return Header{}, 0, ErrBadV2
		}
		n := 3 + int(binary.BigEndian.Uint16(t[1:3]))
		if n > len(t) {
			return Header{}, 0, ErrBadV2
		}
		t = t[n:]
	}
	return h, total, nil
}
