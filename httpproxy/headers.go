package httpproxy

import (
	"bytes"
	"net"
	"net/netip"

	"github.com/valyala/fasthttp"
)

// hopByHop lists the headers that describe one connection, not the message (RFC 9110 §7.6.1),
// so a proxy must not forward them, by their canonical names (fasthttp canonicalises header
// names). Transfer-Encoding is left to fasthttp, which re-frames bodies itself; Trailer is
// kept because it announces the trailers of a chunked body. Expect is dropped from requests
// because the listener has already answered 100-continue.
var hopByHop = [...]string{
	"Connection",
	"Keep-Alive",
	"Proxy-Connection",
	"Te",
	"Upgrade",
	"Proxy-Authorization",
	"Proxy-Authenticate",
	"Expect",
}

// Bits of headerScan.hop, one per hopByHop entry.
const (
	hopConnection uint16 = 1 << iota
	hopKeepAlive
	hopProxyConnection
	hopTE
	hopUpgrade
	hopProxyAuthorization
	hopProxyAuthenticate
	hopExpect
)

// headerScan is what one pass over a message's headers found: which hop-by-hop headers are
// present and how many forwarding headers already exist, so the common message, which has
// none of them, costs one loop and no lookups.
type headerScan struct {
	hop uint16
	xff int // X-Forwarded-For fields
	fwd int // Forwarded fields
}

func scanHeaders(all func(yield func(k, v []byte) bool)) (s headerScan) {
	for k := range all {
		if len(k) < 2 {
			continue
		}
		switch string(k) {
		case "Connection":
			s.hop |= hopConnection
		case "Keep-Alive":
			s.hop |= hopKeepAlive
		case "Proxy-Connection":
			s.hop |= hopProxyConnection
		case "Te":
			s.hop |= hopTE
		case "Upgrade":
			s.hop |= hopUpgrade
		case "Proxy-Authorization":
			s.hop |= hopProxyAuthorization
		case "Proxy-Authenticate":
			s.hop |= hopProxyAuthenticate
		case "Expect":
			s.hop |= hopExpect
		case "X-Forwarded-For":
			s.xff++
		case "Forwarded":
			s.fwd++
		}
	}
	return s
}

// headerDeleter is the part of fasthttp's request and response headers that stripping needs.
type headerDeleter interface {
	Peek(key string) []byte
	DelBytes(key []byte)
	Del(key string)
}

// stripHopByHop removes the hop-by-hop headers and every header that Connection names.
// keepUpgrade keeps Connection and Upgrade, for a protocol switch that must reach the backend.
// hop is the set of hop-by-hop headers present (headerScan.hop).
func stripHopByHop(h headerDeleter, hop uint16, keepUpgrade bool) {
	if hop == 0 {
		return
	}
	if hop&hopConnection != 0 {
		forEachToken(h.Peek("Connection"), func(tok []byte) {
			if keepUpgrade && asciiEqualFold(tok, "upgrade") {
				return
			}
			if asciiEqualFold(tok, "close") || asciiEqualFold(tok, "keep-alive") {
				return // connection options, not header names
			}
			if asciiEqualFold(tok, "host") || asciiEqualFold(tok, "content-length") ||
				asciiEqualFold(tok, "transfer-encoding") || asciiEqualFold(tok, "trailer") {
				return // message framing and routing, which a client must not strip this way
			}
			h.DelBytes(tok)
		})
	}
	for i, name := range hopByHop {
		if hop&(1<<i) == 0 || keepUpgrade && (name == "Connection" || name == "Upgrade") {
			continue
		}
		h.Del(name)
	}
}

// forEachToken calls f with each non-empty, space-trimmed element of a comma-separated list.
// f must not retain the slice.
func forEachToken(list []byte, f func(tok []byte)) {
	for len(list) > 0 {
		var tok []byte
		if i := bytes.IndexByte(list, ','); i >= 0 {
			tok, list = list[:i], list[i+1:]
		} else {
			tok, list = list, nil
		}
		tok = bytes.TrimSpace(tok)
		if len(tok) > 0 {
			f(tok)
		}
	}
}

// asciiEqualFold reports whether b equals the lower-case ASCII string s, ignoring case.
func asciiEqualFold(b []byte, s string) bool {
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

// hasToken reports whether the comma-separated list contains tok (lower-case), ignoring case.
func hasToken(list []byte, tok string) bool {
	found := false
	forEachToken(list, func(t []byte) {
		if asciiEqualFold(t, tok) {
			found = true
		}
	})
	return found
}

// clientAddr returns the client's IP address, IPv4-mapped addresses unmapped.
func clientAddr(a net.Addr) netip.Addr {
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

// appendForwardedFor appends an RFC 7239 "for=" node: IPv6 addresses are bracketed and quoted,
// an unknown address is the "unknown" token.
func appendForwardedFor(dst []byte, ip netip.Addr) []byte {
	dst = append(dst, "for="...)
	switch {
	case !ip.IsValid():
		return append(dst, "unknown"...)
	case ip.Is6():
		dst = append(dst, `"[`...)
		dst = ip.AppendTo(dst)
		return append(dst, `]"`...)
	}
	return ip.AppendTo(dst)
}

// appendForwardedValue appends s as an RFC 7239 value: a token as is, anything else as a
// quoted-string with '"' and '\' escaped.
func appendForwardedValue(dst []byte, s []byte) []byte {
	if isToken(s) {
		return append(dst, s...)
	}
	dst = append(dst, '"')
	for _, c := range s {
		if c == '"' || c == '\\' {
			dst = append(dst, '\\')
		}
		if c < 0x20 && c != '\t' || c == 0x7f {
			continue // not representable in a quoted-string
		}
		dst = append(dst, c)
	}
	return append(dst, '"')
}

// isToken reports whether s is a non-empty RFC 9110 token.
func isToken(s []byte) bool {
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

// buildForwarded appends this hop's Forwarded element (RFC 7239 §4) to dst.
func buildForwarded(dst []byte, ip netip.Addr, proto string, host []byte) []byte {
	dst = appendForwardedFor(dst, ip)
	dst = append(dst, ";proto="...)
	dst = append(dst, proto...)
	if len(host) > 0 {
		dst = append(dst, ";host="...)
		dst = appendForwardedValue(dst, host)
	}
	return dst
}

var (
	keyXFF   = []byte("X-Forwarded-For")
	keyXFP   = []byte("X-Forwarded-Proto")
	keyXFH   = []byte("X-Forwarded-Host")
	keyFwd   = []byte("Forwarded")
	valHTTP  = []byte("http")
	valHTTPS = []byte("https")
)

// addForwardingHeaders appends the client to X-Forwarded-For and Forwarded and sets
// X-Forwarded-Proto and X-Forwarded-Host. sc says how many X-Forwarded-For and Forwarded
// fields exist. buf is scratch space; the grown buffer is returned.
func addForwardingHeaders(h *fasthttp.RequestHeader, sc headerScan, ip netip.Addr, tls bool, buf []byte) []byte {
	proto := valHTTP
	if tls {
		proto = valHTTPS
	}
	host := h.Host()

	// X-Forwarded-For: every earlier value, in order, then this client.
	buf = buf[:0]
	if sc.xff > 0 {
		buf = appendJoined(buf, h.PeekAll("X-Forwarded-For"))
		if len(buf) > 0 {
			buf = append(buf, ", "...)
		}
		if sc.xff > 1 {
			h.Del("X-Forwarded-For")
		}
	}
	if ip.IsValid() {
		buf = ip.AppendTo(buf)
	} else {
		buf = append(buf, "unknown"...)
	}
	h.SetCanonical(keyXFF, buf)
	h.SetCanonical(keyXFP, proto)
	if len(host) > 0 {
		h.SetCanonical(keyXFH, host)
	}

	buf = buf[:0]
	if sc.fwd > 0 {
		buf = appendJoined(buf, h.PeekAll("Forwarded"))
		if len(buf) > 0 {
			buf = append(buf, ", "...)
		}
		if sc.fwd > 1 {
			h.Del("Forwarded")
		}
	}
	buf = buildForwarded(buf, ip, string(proto), host)
	h.SetCanonical(keyFwd, buf)
	return buf
}

// appendJoined appends the non-empty values joined by ", ".
func appendJoined(dst []byte, vals [][]byte) []byte {
	n := 0
	for _, v := range vals {
		if len(v) == 0 {
			continue
		}
		if n > 0 {
			dst = append(dst, ", "...)
		}
		dst = append(dst, v...)
		n++
	}
	return dst
}
