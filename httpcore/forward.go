package httpcore

import (
	"bytes"
	"net/netip"
)

// Forwarding rules: which fields belong to one connection and are not forwarded, who the
// client is when a trusted proxy speaks for it, and what this hop adds.

// hopByHop lists the fields that describe one connection, not the message (RFC 9110 §7.6.1),
// so a proxy must not forward them. Transfer-Encoding is the engines' (each frames bodies
// itself); Trailer is kept because it announces a body's trailers. Expect goes because the
// engine has already answered 100-continue. TE is kept on HTTP/2 requests when it is exactly
// "trailers", the one value HTTP/2 allows, which gRPC servers expect.
var hopByHop = [...][]byte{
	[]byte("Connection"),
	[]byte("Keep-Alive"),
	[]byte("Proxy-Connection"),
	keyTE,
	[]byte("Upgrade"),
	[]byte("Proxy-Authorization"),
	[]byte("Proxy-Authenticate"),
	[]byte("Expect"),
}

// Bits of Scan.Hop, one per hopByHop entry.
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

// Scan is what one pass over a message's fields found: which hop-by-hop fields are present
// and how many forwarding fields exist, so that the common message, which has none of them,
// costs one loop over its fields and no lookups. An engine calls Note for every field name.
type Scan struct {
	Hop uint16
	XFF int // X-Forwarded-For fields
	Fwd int // Forwarded fields
}

// Note counts one field name (any case).
func (s *Scan) Note(name []byte) {
	if len(name) < 2 {
		return
	}
	switch name[0] | 0x20 {
	case 'c':
		if EqualFold(name, hopByHop[0]) {
			s.Hop |= hopConnection
		}
	case 'k':
		if EqualFold(name, hopByHop[1]) {
			s.Hop |= hopKeepAlive
		}
	case 'p':
		switch {
		case EqualFold(name, hopByHop[2]):
			s.Hop |= hopProxyConnection
		case EqualFold(name, hopByHop[5]):
			s.Hop |= hopProxyAuthorization
		case EqualFold(name, hopByHop[6]):
			s.Hop |= hopProxyAuthenticate
		}
	case 't':
		if EqualFold(name, keyTE) {
			s.Hop |= hopTE
		}
	case 'u':
		if EqualFold(name, hopByHop[4]) {
			s.Hop |= hopUpgrade
		}
	case 'e':
		if EqualFold(name, hopByHop[7]) {
			s.Hop |= hopExpect
		}
	case 'x':
		if EqualFold(name, keyXFF) {
			s.XFF++
		}
	case 'f':
		if EqualFold(name, keyForwarded) {
			s.Fwd++
		}
	}
}

// Upgrade reports whether the scan saw an Upgrade field.
func (s *Scan) Upgrade() bool { return s.Hop&hopUpgrade != 0 }

// StripHopByHop removes from h (the request's or a response's fields) the hop-by-hop fields
// and every field Connection names (but the framing and routing fields, which a client must
// not strip this way). keepUpgrade keeps Connection and Upgrade, for a protocol switch that
// must reach the backend; keepTE keeps "TE: trailers" (HTTP/2 requests).
func (x *Exchange) StripHopByHop(h Header, s *Scan, keepUpgrade, keepTE bool) {
	if s.Hop == 0 {
		return
	}
	if s.Hop&hopConnection != 0 {
		list := h.Peek(keyConnection)
		for len(list) > 0 {
			var tok []byte
			tok, list = nextToken(list)
			switch {
			case len(tok) == 0:
			case keepUpgrade && LowerEqualFold(tok, "upgrade"):
			case LowerEqualFold(tok, "close") || LowerEqualFold(tok, "keep-alive"):
				// connection options, not field names
			case LowerEqualFold(tok, "host") || LowerEqualFold(tok, "content-length") ||
				LowerEqualFold(tok, "transfer-encoding") || LowerEqualFold(tok, "trailer"):
				// message framing and routing
			default:
				x.tmp = canonicalKey(append(x.tmp[:0], tok...))
				h.Del(x.tmp)
			}
		}
	}
	for i, name := range hopByHop {
		if s.Hop&(1<<i) == 0 || keepUpgrade && (i == 0 || i == 4) {
			continue
		}
		if i == 3 && keepTE && LowerEqualFold(h.Peek(keyTE), "trailers") {
			continue
		}
		h.Del(name)
	}
}

// canonicalKey puts tok in canonical field-name form ("x-foo" → "X-Foo"), in place.
func canonicalKey(tok []byte) []byte {
	upper := true
	for i, c := range tok {
		switch {
		case upper && 'a' <= c && c <= 'z':
			tok[i] = c - 'a' + 'A'
		case !upper && 'A' <= c && c <= 'Z':
			tok[i] = c - 'A' + 'a'
		}
		upper = c == '-'
	}
	return tok
}

// trusts reports whether a is one of the trusted proxies.
func (tp *tablePolicy) trusts(a netip.Addr) bool {
	for _, p := range tp.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// forwardedClient finds the client in X-Forwarded-For as sent by a trusted proxy: the
// rightmost address that is not itself a trusted proxy (the leftmost when all are). An
// unparsable element ends the walk: what lies left of it cannot be believed. list is every
// X-Forwarded-For value, joined.
func (tp *tablePolicy) forwardedClient(list []byte, peer netip.Addr) netip.Addr {
	client := peer
	for len(list) > 0 {
		j := bytes.LastIndexByte(list, ',')
		tok := trimSpace(list[j+1:])
		list = list[:max(j, 0)]
		if len(tok) == 0 {
			continue
		}
		a, err := netip.ParseAddr(b2s(tok))
		if err != nil {
			return client
		}
		client = a.Unmap()
		if !tp.trusts(client) {
			return client
		}
	}
	return client
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
	if IsToken(s) {
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

// AddForwarding appends the peer to X-Forwarded-For and Forwarded and sets X-Forwarded-Proto
// and X-Forwarded-Host (RFC 7239 §4 for Forwarded's element): this hop's forwarding fields.
// s says how many X-Forwarded-For and Forwarded fields there are (after ApplyPolicy dropped
// an untrusted client's).
func (x *Exchange) AddForwarding(req Request, s *Scan) {
	proto := schemeOf(x.tls)
	host := req.Host()
	ip := x.peer

	buf := x.buf[:0]
	if s.XFF > 0 {
		buf = req.AppendValues(buf, keyXFF)
		if len(buf) > 0 {
			buf = append(buf, ", "...)
		}
	}
	if ip.IsValid() {
		buf = ip.AppendTo(buf)
	} else {
		buf = append(buf, "unknown"...)
	}
	req.Set(keyXFF, buf)
	req.Set(keyXFP, proto)
	if len(host) > 0 {
		req.Set(keyXFH, host)
	}

	buf = buf[:0]
	if s.Fwd > 0 {
		buf = req.AppendValues(buf, keyForwarded)
		if len(buf) > 0 {
			buf = append(buf, ", "...)
		}
	}
	buf = appendForwardedFor(buf, ip)
	buf = append(buf, ";proto="...)
	buf = append(buf, proto...)
	if len(host) > 0 {
		buf = append(buf, ";host="...)
		buf = appendForwardedValue(buf, host)
	}
	req.Set(keyForwarded, buf)
	x.buf = buf
}
