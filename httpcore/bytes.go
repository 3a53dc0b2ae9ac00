package httpcore

import (
	"bytes"
	"net"
	"net/netip"
	"unsafe"
)

// nextToken splits the first element off a comma-separated list: tok is trimmed of spaces and
// tabs and may be empty; rest is what follows its comma (nil at the end).
func nextToken(list []byte) (tok, rest []byte) {
	if i := bytes.IndexByte(list, ','); i >= 0 {
		return trimSpace(list[:i]), list[i+1:]
	}
	return trimSpace(list), nil
}

// HasToken reports whether the comma-separated list contains tok (lower case), ignoring case.
func HasToken(list []byte, tok string) bool {
	for len(list) > 0 {
		var t []byte
		t, list = nextToken(list)
		if LowerEqualFold(t, tok) {
			return true
		}
	}
	return false
}

// LowerEqualFold reports whether b equals the lower-case ASCII string s, ignoring case.
func LowerEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}

// EqualFold reports whether two field names are equal ignoring ASCII case: the comparison an
// engine's Header uses.
func EqualFold(a, b []byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// trimSpace trims spaces and tabs at both ends.
func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}

// b2s returns b as a string without copying; b must not change while the string is used.
func b2s(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// s2b returns the bytes of s without copying; the caller must not modify them.
func s2b(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// ClientAddr returns the IP address of a connection's remote address, IPv4-mapped addresses
// unmapped; the zero Addr when there is none.
func ClientAddr(a net.Addr) netip.Addr {
	switch x := a.(type) {
	case *net.TCPAddr:
		ip, _ := netip.AddrFromSlice(x.IP)
		return ip.Unmap()
	case nil:
		return netip.Addr{}
	}
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}

// IsToken reports whether s is a non-empty RFC 9110 token.
func IsToken(s []byte) bool {
	if len(s) == 0 {
		return false
	}
	for _, c := range s {
		if !tchar[c] {
			return false
		}
	}
	return true
}

// IsTChar reports whether c may stand in an RFC 9110 token.
func IsTChar(c byte) bool { return tchar[c] }

var tchar = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
		t[c-'a'+'A'] = true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()

const hexDigits = "0123456789abcdef"

// stripPort removes a :port from a Host value (IPv6 literals keep their brackets).
func stripPort(host []byte) []byte {
	if i := bytes.LastIndexByte(host, ':'); i >= 0 && bytes.IndexByte(host[i:], ']') < 0 {
		return host[:i]
	}
	return host
}

// Idempotent reports whether a request with this method may be sent twice (RFC 9110 §9.2.2):
// the one rule for retries, hedges and fresh-connection replays on every HTTP engine.
func Idempotent(method []byte) bool {
	switch string(method) {
	case "GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE":
		return true
	}
	return false
}

// CookieValue returns the value of the cookie called name in a Cookie field value
// ("a=1; b=2"), nil when it is not there.
func CookieValue(field, name []byte) []byte {
	for len(field) > 0 {
		var pair []byte
		if i := bytes.IndexByte(field, ';'); i >= 0 {
			pair, field = field[:i], field[i+1:]
		} else {
			pair, field = field, nil
		}
		pair = trimSpace(pair)
		if len(pair) > len(name) && pair[len(name)] == '=' && bytes.Equal(pair[:len(name)], name) {
			return pair[len(name)+1:]
		}
	}
	return nil
}

// AbsoluteAuthority returns the authority of an absolute-form target (http or https, no
// userinfo), or false.
func AbsoluteAuthority(target []byte) ([]byte, bool) {
	var rest []byte
	switch {
	case len(target) > 7 && LowerEqualFold(target[:7], "http://"):
		rest = target[7:]
	case len(target) > 8 && LowerEqualFold(target[:8], "https://"):
		rest = target[8:]
	default:
		return nil, false
	}
	n := 0
	for n < len(rest) && rest[n] != '/' && rest[n] != '?' {
		n++
	}
	if !ValidAuthority(rest[:n]) {
		return nil, false
	}
	return rest[:n], true
}

// ValidAuthority reports a non-empty host with an optional port (RFC 3986 §3.2.2-3.2.3,
// without userinfo).
func ValidAuthority(a []byte) bool {
	if len(a) == 0 || a[0] == ':' {
		return false
	}
	for _, c := range a {
		if !authorityChar[c] {
			return false
		}
	}
	return true
}

var authorityChar = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
		t[c-'a'+'A'] = true
	}
	for _, c := range "-._~%!$&'()*+,;=:[]" {
		t[c] = true
	}
	return t
}()

// RequestLine reports whether line (without its end) looks like an HTTP/1 request line: a
// token, a space, a target without spaces, a space, and HTTP/ with a one-digit major and
// minor version. On an h2c listener, first bytes that are neither the HTTP/2 client preface
// nor such a line are an HTTP/2 client's invalid preface (RFC 9113 §3.4), closed without an
// answer.
func RequestLine(line []byte) bool {
	method, rest, ok := bytes.Cut(line, []byte(" "))
	if !ok || !IsToken(method) {
		return false
	}
	target, version, ok := bytes.Cut(rest, []byte(" "))
	if !ok || len(target) == 0 || len(version) != 8 || !bytes.HasPrefix(version, []byte("HTTP/")) {
		return false
	}
	return '0' <= version[5] && version[5] <= '9' && version[6] == '.' && '0' <= version[7] && version[7] <= '9'
}
