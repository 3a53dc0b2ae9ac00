package proxyproto

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io"
	"net/netip"
	"strings"
	"testing"
)

func v2(verCmd, fam byte, body ...byte) []byte {
	b := append([]byte(nil), sigV2[:]...)
	b = append(b, verCmd, fam)
	b = binary.BigEndian.AppendUint16(b, uint16(len(body)))
	return append(b, body...)
}

var v4body = []byte{192, 0, 2, 1, 198, 51, 100, 7, 0x30, 0x39, 0x01, 0xBB} // 192.0.2.1:12345 → 198.51.100.7:443

func v6body() []byte {
	s := netip.MustParseAddr("2001:db8::1").As16()
	d := netip.MustParseAddr("2001:db8::2").As16()
	b := append(s[:], d[:]...)
	return append(b, 0x30, 0x39, 0x01, 0xBB)
}

func ap(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

func TestParse(t *testing.T) {
	tlv := append(append([]byte(nil), v4body...), 0x04, 0x00, 0x02, 'h', 'i', 0xEE, 0x00, 0x00)
	big := make([]byte, MaxHeaderLen) // declared length beyond the bound
	cases := []struct {
		name string
		in   []byte
		want Header
		n    int
		err  error
	}{
		{"v1 tcp4", []byte("PROXY TCP4 192.0.2.1 198.51.100.7 12345 443\r\nGET"), Header{V1, false, TCP, ap("192.0.2.1:12345"), ap("198.51.100.7:443")}, 45, nil},
		{"v1 tcp6", []byte("PROXY TCP6 2001:db8::1 2001:db8::2 12345 443\r\n"), Header{V1, false, TCP, ap("[2001:db8::1]:12345"), ap("[2001:db8::2]:443")}, 46, nil},
		{"v1 unknown", []byte("PROXY UNKNOWN\r\nX"), Header{Version: V1}, 15, nil},
		{"v1 unknown with addresses", []byte("PROXY UNKNOWN ffff:: ffff:: 1 2\r\n"), Header{Version: V1}, 33, nil},
		{"v1 ports 0 and 65535", []byte("PROXY TCP4 1.2.3.4 5.6.7.8 0 65535\r\n"), Header{V1, false, TCP, ap("1.2.3.4:0"), ap("5.6.7.8:65535")}, 36, nil},
		{"v1 longest", []byte("PROXY TCP6 ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff 65535 65535\r\n"),
			Header{V1, false, TCP, ap("[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535"), ap("[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535")}, 104, nil},
		{"v1 truncated", []byte("PROXY TCP4 192.0.2.1 198.51"), Header{}, 0, ErrIncomplete},
		{"v1 truncated before CRLF", []byte("PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r"), Header{}, 0, ErrIncomplete},
		{"v1 prefix", []byte("PRO"), Header{}, 0, ErrIncomplete},
		{"v1 bare LF", []byte("PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n"), Header{}, 0, ErrBadV1},
		{"v1 CR without LF", []byte("PROXY TCP4 1.2.3.4 5.6.7.8 1 2\rxx"), Header{}, 0, ErrBadV1},
		{"v1 oversized", []byte("PROXY UNKNOWN " + strings.Repeat("a", 100) + "\r\n"), Header{}, 0, ErrTooLong},
		{"v1 family mismatch", []byte("PROXY TCP4 2001:db8::1 1.2.3.4 1 2\r\n"), Header{}, 0, ErrBadV1},
		{"v1 tcp6 with v4", []byte("PROXY TCP6 1.2.3.4 5.6.7.8 1 2\r\n"), Header{}, 0, ErrBadV1},
		{"v1 udp", []byte("PROXY UDP4 1.2.3.4 5.6.7.8 1 2\r\n"), Header{}, 0, ErrBadV1},
		{"v1 port too big", []byte("PROXY TCP4 1.2.3.4 5.6.7.8 65536 2\r\n"), Header{}, 0, ErrBadV1},
		{"v1 leading zero port", []byte("PROXY TCP4 1.2.3.4 5.6.7.8 01 2\r\n"), Header{}, 0, ErrBadV1},
		{"v1 double space", []byte("PROXY TCP4  1.2.3.4 5.6.7.8 1 2\r\n"), Header{}, 0, ErrBadV1},
		{"v1 extra field", []byte("PROXY TCP4 1.2.3.4 5.6.7.8 1 2 3\r\n"), Header{}, 0, ErrBadV1},
		{"v1 missing field", []byte("PROXY TCP4 1.2.3.4 5.6.7.8 1\r\n"), Header{}, 0, ErrBadV1},
		{"v1 zone", []byte("PROXY TCP6 fe80::1%eth0 fe80::2 1 2\r\n"), Header{}, 0, ErrBadV1},
		{"v1 lower case", []byte("proxy TCP4 1.2.3.4 5.6.7.8 1 2\r\n"), Header{}, 0, ErrNoHeader},
		{"v1 UNKNOWNX", []byte("PROXY UNKNOWNX\r\n"), Header{}, 0, ErrBadV1},
		{"no header http", []byte("GET / HTTP/1.1\r\n"), Header{}, 0, ErrNoHeader},
		{"no header tls", []byte{0x16, 0x03, 0x01}, Header{}, 0, ErrNoHeader},
		{"empty", nil, Header{}, 0, ErrIncomplete},
		{"v2 tcp4", v2(0x21, 0x11, v4body...), Header{V2, false, TCP, ap("192.0.2.1:12345"), ap("198.51.100.7:443")}, 28, nil},
		{"v2 udp4", v2(0x21, 0x12, v4body...), Header{V2, false, UDP, ap("192.0.2.1:12345"), ap("198.51.100.7:443")}, 28, nil},
		{"v2 tcp6", v2(0x21, 0x21, v6body()...), Header{V2, false, TCP, ap("[2001:db8::1]:12345"), ap("[2001:db8::2]:443")}, 52, nil},
		{"v2 udp6", v2(0x21, 0x22, v6body()...), Header{V2, false, UDP, ap("[2001:db8::1]:12345"), ap("[2001:db8::2]:443")}, 52, nil},
		{"v2 local", v2(0x20, 0x00), Header{Version: V2, Local: true}, 16, nil},
		{"v2 local with addresses", v2(0x20, 0x11, v4body...), Header{Version: V2, Local: true}, 28, nil},
		{"v2 unspec proxy", v2(0x21, 0x00), Header{Version: V2}, 16, nil},
		{"v2 unix", v2(0x21, 0x31, make([]byte, 216)...), Header{Version: V2}, 232, nil},
		{"v2 tlvs skipped", v2(0x21, 0x11, tlv...), Header{V2, false, TCP, ap("192.0.2.1:12345"), ap("198.51.100.7:443")}, 16 + len(tlv), nil},
		{"v2 tlv overruns", v2(0x21, 0x11, append(append([]byte(nil), v4body...), 0x04, 0x00, 0x09, 'h')...), Header{}, 0, ErrBadV2},
		{"v2 tlv short", v2(0x21, 0x11, append(append([]byte(nil), v4body...), 0x04, 0x00)...), Header{}, 0, ErrBadV2},
		{"v2 truncated fixed", v2(0x21, 0x11, v4body...)[:14], Header{}, 0, ErrIncomplete},
		{"v2 truncated body", v2(0x21, 0x11, v4body...)[:20], Header{}, 0, ErrIncomplete},
		{"v2 short addresses", v2(0x21, 0x11, v4body[:8]...), Header{}, 0, ErrBadV2},
		{"v2 short v6 addresses", v2(0x21, 0x21, v4body...), Header{}, 0, ErrBadV2},
		{"v2 oversized length", v2(0x21, 0x11, big...), Header{}, 0, ErrTooLong},
		{"v2 version 1", v2(0x11, 0x11, v4body...), Header{}, 0, ErrUnsupported},
		{"v2 command 2", v2(0x22, 0x11, v4body...), Header{}, 0, ErrUnsupported},
		{"v2 family 4", v2(0x21, 0x41, v4body...), Header{}, 0, ErrBadV2},
		{"v2 transport 3", v2(0x21, 0x13, v4body...), Header{}, 0, ErrBadV2},
		{"v2 inet without transport", v2(0x21, 0x10, v4body...), Header{}, 0, ErrBadV2},
		{"v2 bad signature", append([]byte{0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D, 0x0A, 0x51, 0x55, 0x49, 0x54, 0x0B}, 0x21, 0x11, 0, 0), Header{}, 0, ErrNoHeader},
		{"v2 signature prefix", sigV2[:5], Header{}, 0, ErrIncomplete},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h, n, err := Parse(c.in)
			if !errors.Is(err, c.err) {
				t.Fatalf("err = %v, want %v", err, c.err)
			}
			if h != c.want || n != c.n {
				t.Fatalf("got %+v, %d; want %+v, %d", h, n, c.want, c.n)
			}
		})
	}
}

// TestAppend pins the exact bytes sent to a backend.
func TestAppend(t *testing.T) {
	cases := []struct {
		name string
		h    Header
		want string // v1 as text, v2 as hex
	}{
		{"v1 tcp4", Header{V1, false, TCP, ap("192.0.2.1:12345"), ap("198.51.100.7:443")}, "PROXY TCP4 192.0.2.1 198.51.100.7 12345 443\r\n"},
		{"v1 mapped is tcp4", Header{V1, false, TCP, ap("[::ffff:192.0.2.1]:1"), ap("198.51.100.7:2")}, "PROXY TCP4 192.0.2.1 198.51.100.7 1 2\r\n"},
		{"v1 tcp6", Header{V1, false, TCP, ap("[2001:db8::1]:1"), ap("[2001:db8::2]:2")}, "PROXY TCP6 2001:db8::1 2001:db8::2 1 2\r\n"},
		{"v1 mixed families", Header{V1, false, TCP, ap("192.0.2.1:1"), ap("[2001:db8::2]:2")}, "PROXY TCP6 ::ffff:192.0.2.1 2001:db8::2 1 2\r\n"},
		{"v1 udp is unknown", Header{V1, false, UDP, ap("192.0.2.1:1"), ap("198.51.100.7:2")}, "PROXY UNKNOWN\r\n"},
		{"v1 no addresses", Header{Version: V1}, "PROXY UNKNOWN\r\n"},
		{"v2 tcp4", Header{V2, false, TCP, ap("192.0.2.1:12345"), ap("198.51.100.7:443")}, "0d0a0d0a000d0a515549540a" + "21" + "11" + "000c" + "c0000201" + "c6336407" + "3039" + "01bb"},
		{"v2 udp4", Header{V2, false, UDP, ap("192.0.2.1:12345"), ap("198.51.100.7:443")}, "0d0a0d0a000d0a515549540a" + "21" + "12" + "000c" + "c0000201" + "c6336407" + "3039" + "01bb"},
		{"v2 tcp6", Header{V2, false, TCP, ap("[2001:db8::1]:12345"), ap("[2001:db8::2]:443")}, "0d0a0d0a000d0a515549540a" + "21" + "21" + "0024" + "20010db8000000000000000000000001" + "20010db8000000000000000000000002" + "3039" + "01bb"},
		{"v2 local", Header{Version: V2, Local: true}, "0d0a0d0a000d0a515549540a" + "20" + "00" + "0000"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := c.h.Append(nil)
			want := []byte(c.want)
			if c.h.Version == V2 {
				want, _ = hex.DecodeString(c.want)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("got %q\nwant %q", got, want)
			}
		})
	}
}

// TestRead checks that Read returns the bytes after the header, however the stream is split.
func TestRead(t *testing.T) {
	msgs := [][]byte{
		append([]byte("PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r\n"), "hello"...),
		append(v2(0x21, 0x11, v4body...), "hello"...),
		append(v2(0x21, 0x31, make([]byte, 600)...), "hello"...), // grows past the first buffer
	}
	for i, m := range msgs {
		for _, chunk := range []int{1, 3, 16, 4096} {
			r := &chunked{b: m, n: chunk}
			h, rest, err := Read(r, make([]byte, 0, 256))
			if err != nil {
				t.Fatalf("msg %d chunk %d: %v", i, chunk, err)
			}
			stream := append(append([]byte(nil), rest...), m[r.off:]...)
			if string(stream) != "hello" || h.Version == 0 {
				t.Fatalf("msg %d chunk %d: header %+v, stream after it %q", i, chunk, h, stream)
			}
		}
	}
	if _, _, err := Read(&chunked{b: []byte("PROXY TCP4 1.2"), n: 4}, make([]byte, 0, 64)); !errors.Is(err, ErrIncomplete) {
		t.Fatalf("truncated stream: %v, want ErrIncomplete", err)
	}
	if _, _, err := Read(&chunked{}, make([]byte, 0, 64)); !errors.Is(err, ErrNoHeader) {
		t.Fatalf("empty stream: %v, want ErrNoHeader", err)
	}
	r := &chunked{b: []byte("PROXY UNKNOWN " + strings.Repeat("x", 5000)), n: 7}
	if _, _, err := Read(r, make([]byte, 0, 64)); !errors.Is(err, ErrTooLong) {
		t.Fatalf("endless v1: %v, want ErrTooLong", err)
	}
	if r.off > MaxV1Len+7 {
		t.Fatalf("read %d bytes of an endless v1 header, bound is %d", r.off, MaxV1Len)
	}
}

// chunked yields b at most n bytes per Read.
type chunked struct {
	b   []byte
	n   int
	off int
}

func (c *chunked) Read(p []byte) (int, error) {
	if c.off == len(c.b) {
		return 0, io.EOF
	}
	k := copy(p[:min(len(p), c.n)], c.b[c.off:])
	c.off += k
	return k, nil
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("PROXY TCP4 192.0.2.1 198.51.100.7 12345 443\r\n"))
	f.Add([]byte("PROXY TCP6 2001:db8::1 2001:db8::2 1 2\r\nxyz"))
	f.Add([]byte("PROXY UNKNOWN\r\n"))
	f.Add(v2(0x21, 0x11, v4body...))
	f.Add(v2(0x21, 0x22, v6body()...))
	f.Add(v2(0x20, 0x00))
	f.Add(v2(0x21, 0x11, append(append([]byte(nil), v4body...), 1, 0, 1, 9)...))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, n, err := Parse(b)
		if err != nil {
			return
		}
		if n <= 0 || n > len(b) || n > MaxHeaderLen || (h.Version == V1 && n > MaxV1Len) {
			t.Fatalf("length %d of %d", n, len(b))
		}
		// What Parse accepts, Append re-encodes into a header that parses to the same value.
		enc := h.Append(nil)
		h2, n2, err := Parse(enc)
		if err != nil || n2 != len(enc) {
			t.Fatalf("re-encoded %q: %v (%d of %d)", enc, err, n2, len(enc))
		}
		if norm(h2) != norm(h) {
			t.Fatalf("round trip: %+v → %q → %+v", h, enc, h2)
		}
	})
}

// norm unmaps addresses: Append sends IPv4-mapped IPv6 addresses as IPv4 when both ends are.
func norm(h Header) Header {
	h.Src = netip.AddrPortFrom(h.Src.Addr().Unmap(), h.Src.Port())
	h.Dst = netip.AddrPortFrom(h.Dst.Addr().Unmap(), h.Dst.Port())
	return h
}
