package h1

import (
	"bytes"
	"net/netip"
	"unsafe"

	"github.com/valyala/fasthttp"
)

// The forwarding-header rules of the boundary (core.go), as package httpproxy applies them;
// they move to the protocol-neutral core with the rest of core.go.

// hopByHop lists the fields that describe one connection (RFC 9110 §7.6.1), by the canonical
// names fasthttp gives them. Expect goes because the engine answers 100-continue itself.
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

// headerScan is what one pass over a message's fields found.
type headerScan struct {
	hop uint16
	xff int
	fwd int
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

type headerDeleter interface {
	Peek(key string) []byte
	DelBytes(key []byte)
	Del(key string)
}

// stripHopByHop removes the hop-by-hop fields and every field Connection names; keepUpgrade
// keeps Connection and Upgrade for a protocol switch.
func stripHopByHop(h headerDeleter, hop uint16, keepUpgrade bool) {
	if hop == 0 {
		return
	}
	if hop&hopConnection != 0 {
		forEachToken(h.Peek("Connection"), func(tok []byte) {
			if keepUpgrade && asciiEqualFold(tok, "upgrade") {
				return
			}
			if asciiEqualFold(tok, "close") || asciiEqualFold(tok, "keep-alive") ||
				asciiEqualFold(tok, "host") || asciiEqualFold(tok, "content-length") ||
				asciiEqualFold(tok, "transfer-encoding") || asciiEqualFold(tok, "trailer") {
				return // options, or framing and routing a client must not strip this way
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

// forEachToken calls f with each non-empty, trimmed element of a comma-separated list.
func forEachToken(list []byte, f func(tok []byte)) {
	for len(list) > 0 {
		var tok []byte
		if i := bytes.IndexByte(list, ','); i >= 0 {
			tok, list = list[:i], list[i+1:]
		} else {
			tok, list = list, nil
		}
		if tok = bytes.TrimSpace(tok); len(tok) > 0 {
			f(tok)
		}
	}
}

var (
	keyXFF     = []byte("X-Forwarded-For")
	keyXFP     = []byte("X-Forwarded-Proto")
	keyXFH     = []byte("X-Forwarded-Host")
	keyFwd     = []byte("Forwarded")
	keyBackend = []byte("X-Ballast-Backend")
	valHTTP    = []byte("http")
	valHTTPS   = []byte("https")
	http10     = []byte("HTTP/1.0")
	http11     = []byte("HTTP/1.1")
)

// addForwardingHeaders appends the client to X-Forwarded-For and Forwarded (RFC 7239) and sets
// X-Forwarded-Proto and X-Forwarded-Host.
func addForwardingHeaders(h *fasthttp.RequestHeader, sc headerScan, ip netip.Addr, tls bool, buf []byte) []byte {
	proto := valHTTP
	if tls {
		proto = valHTTPS
	}
	host := h.Host()
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
	buf = appendForwardedFor(buf, ip)
	buf = append(buf, ";proto="...)
	buf = append(buf, proto...)
	if len(host) > 0 {
		buf = append(buf, ";host="...)
		buf = appendForwardedValue(buf, host)
	}
	h.SetCanonical(keyFwd, buf)
	return buf
}

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
			continue
		}
		dst = append(dst, c)
	}
	return append(dst, '"')
}

// s2b returns the bytes of s without copying; the caller must not modify them.
func s2b(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }
