package httpproxy

import (
	"net"
	"unsafe"

	"github.com/valyala/fasthttp"

	"ballast/httpcore"
)

// The HTTP/1 request and response as package httpcore sees them: views of fasthttp's parsed
// headers, held in the pooled exchange, so passing them to the core neither allocates nor
// copies. fasthttp canonicalises field names; the core names fields canonically.

// reqMsg is httpcore.Request over one fasthttp request.
type reqMsg struct {
	ctx   *fasthttp.RequestCtx
	h     *fasthttp.RequestHeader
	proto []byte // the client's version, for the access log (the backend may get HTTP/1.1)
}

func (m *reqMsg) init(ctx *fasthttp.RequestCtx) {
	m.ctx, m.h = ctx, &ctx.Request.Header
	m.proto = http11
	if !m.h.IsHTTP11() {
		m.proto = http10
	}
}

func (m *reqMsg) Peek(name []byte) []byte { return m.h.PeekBytes(name) }

func (m *reqMsg) AppendValues(dst, name []byte) []byte {
	return appendJoined(dst, m.h.PeekAll(b2s(name)))
}

func (m *reqMsg) Set(name, value []byte) { m.h.SetCanonical(name, value) }
func (m *reqMsg) Add(name, value []byte) { m.h.AddBytesKV(name, value) }
func (m *reqMsg) Del(name []byte)        { m.h.DelBytes(name) }
func (m *reqMsg) Method() []byte         { return m.h.Method() }
func (m *reqMsg) Host() []byte           { return m.h.Host() }
func (m *reqMsg) Target() []byte         { return m.h.RequestURI() }
func (m *reqMsg) Proto() []byte          { return m.proto }
func (m *reqMsg) Cookie(n []byte) []byte { return m.h.CookieBytes(n) }
func (m *reqMsg) LocalAddr() net.Addr    { return m.ctx.LocalAddr() }

// SetTarget replaces the target; the parsed URI is dropped so Write sends this one.
func (m *reqMsg) SetTarget(t []byte) { m.ctx.Request.SetRequestURIBytes(t) }

func (m *reqMsg) ContentLength() int64 {
	switch cl := m.h.ContentLength(); {
	case cl >= 0:
		return int64(cl)
	case cl == -1:
		return -1 // chunked
	}
	return 0 // -2: a request without a length has no body
}

// respMsg is httpcore.Response over a fasthttp response header.
type respMsg struct{ h *fasthttp.ResponseHeader }

func (m *respMsg) Peek(name []byte) []byte { return m.h.PeekBytes(name) }

func (m *respMsg) AppendValues(dst, name []byte) []byte {
	return appendJoined(dst, m.h.PeekAll(b2s(name)))
}

func (m *respMsg) Set(name, value []byte) { m.h.SetCanonical(name, value) }
func (m *respMsg) Add(name, value []byte) { m.h.AddBytesKV(name, value) }
func (m *respMsg) Del(name []byte)        { m.h.DelBytes(name) }
func (m *respMsg) Status() int            { return m.h.StatusCode() }

func (m *respMsg) ContentLength() int64 {
	if cl := m.h.ContentLength(); cl >= 0 {
		return int64(cl)
	}
	return -1
}

// scanRequest notes every field of h in s.
func scanRequest(s *httpcore.Scan, h *fasthttp.RequestHeader) {
	for k := range h.All() {
		s.Note(k)
	}
}

// scanResponse notes every field of h in s.
func scanResponse(s *httpcore.Scan, h *fasthttp.ResponseHeader) {
	for k := range h.All() {
		s.Note(k)
	}
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

var (
	http10 = []byte("HTTP/1.0")
	http11 = []byte("HTTP/1.1")
)

// b2s returns b as a string without copying; b must not change while the string is used.
func b2s(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

var (
	_ httpcore.Request  = (*reqMsg)(nil)
	_ httpcore.Response = (*respMsg)(nil)
)
