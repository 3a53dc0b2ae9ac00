package h2proxy

import (
	"net"
	"net/http"
	"unsafe"

	"ballast/httpcore"
)

// The HTTP/2 request and response as package httpcore sees them. The request's fields are a
// copy of the stream's (http.Header, canonical keys), which the core edits into the fields
// the backend gets; the response's are the ResponseWriter's. The core names fields
// canonically, so lookups are plain map reads.

// h2Req is httpcore.Request over one stream.
type h2Req struct {
	r      *http.Request
	out    http.Header // the fields to forward, edited by the core
	target []byte      // :path, or a rewrite's target
	local  net.Addr
}

func (m *h2Req) init(r *http.Request, local net.Addr) {
	m.r, m.local = r, local
	m.out = make(http.Header, len(r.Header)+4)
	for k, vv := range r.Header {
		m.out[k] = vv
	}
	m.target = s2b(r.RequestURI)
}

func (m *h2Req) Peek(name []byte) []byte {
	if vv := m.out[b2s(name)]; len(vv) > 0 {
		return s2b(vv[0])
	}
	return nil
}

func (m *h2Req) AppendValues(dst, name []byte) []byte { return appendValues(dst, m.out[b2s(name)]) }
func (m *h2Req) Set(name, value []byte)               { m.out[key(name)] = []string{value1(value)} }
func (m *h2Req) Add(name, value []byte) {
	k := key(name)
	m.out[k] = append(m.out[k], value1(value))
}
func (m *h2Req) Del(name []byte)      { delete(m.out, b2s(name)) }
func (m *h2Req) Method() []byte       { return s2b(m.r.Method) }
func (m *h2Req) Host() []byte         { return s2b(m.r.Host) }
func (m *h2Req) Target() []byte       { return m.target }
func (m *h2Req) SetTarget(t []byte)   { m.target = []byte(string(t)) }
func (m *h2Req) Proto() []byte        { return proto2 }
func (m *h2Req) LocalAddr() net.Addr  { return m.local }
func (m *h2Req) ContentLength() int64 { return m.r.ContentLength }
func (m *h2Req) Cookie(n []byte) []byte {
	for _, v := range m.out["Cookie"] { // x/net joins a request's cookie fields into one
		if c := httpcore.CookieValue(s2b(v), n); c != nil {
			return c
		}
	}
	return nil
}

var proto2 = []byte("HTTP/2.0")

// h2Resp is httpcore.Response over the ResponseWriter's fields.
type h2Resp struct {
	h      http.Header
	status int
	cl     int64
}

func (m *h2Resp) Peek(name []byte) []byte {
	if vv := m.h[b2s(name)]; len(vv) > 0 {
		return s2b(vv[0])
	}
	return nil
}

func (m *h2Resp) AppendValues(dst, name []byte) []byte { return appendValues(dst, m.h[b2s(name)]) }
func (m *h2Resp) Set(name, value []byte)               { m.h[key(name)] = []string{value1(value)} }
func (m *h2Resp) Add(name, value []byte) {
	k := key(name)
	m.h[k] = append(m.h[k], value1(value))
}
func (m *h2Resp) Del(name []byte)      { delete(m.h, b2s(name)) }
func (m *h2Resp) Status() int          { return m.status }
func (m *h2Resp) ContentLength() int64 { return m.cl }

// key is a field name as a map key: the names the core sets on every request and response
// come from constants, not a new string each.
func key(name []byte) string {
	switch string(name) {
	case "X-Forwarded-For":
		return "X-Forwarded-For"
	case "X-Forwarded-Proto":
		return "X-Forwarded-Proto"
	case "X-Forwarded-Host":
		return "X-Forwarded-Host"
	case "Forwarded":
		return "Forwarded"
	case "X-Request-Id":
		return "X-Request-Id"
	case "X-Ballast-Backend":
		return "X-Ballast-Backend"
	case "Set-Cookie":
		return "Set-Cookie"
	case "Vary":
		return "Vary"
	case "Etag":
		return "Etag"
	case "Content-Encoding":
		return "Content-Encoding"
	}
	return string(name)
}

// value1 is a field value as a string; the scheme values are constants.
func value1(v []byte) string {
	switch string(v) {
	case "http":
		return "http"
	case "https":
		return "https"
	}
	return string(v)
}

// appendValues appends the non-empty values joined by ", ".
func appendValues(dst []byte, vv []string) []byte {
	n := 0
	for _, v := range vv {
		if v == "" {
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

// scanHeader notes every field of h in s.
func scanHeader(s *httpcore.Scan, h http.Header) {
	for k := range h {
		s.Note(s2b(k))
	}
}

// s2b returns the bytes of s without copying; the caller must not modify them.
func s2b(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// b2s returns b as a string without copying; b must not change while the string is used.
func b2s(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

var (
	_ httpcore.Request  = (*h2Req)(nil)
	_ httpcore.Response = (*h2Resp)(nil)
)
