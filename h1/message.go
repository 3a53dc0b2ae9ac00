//go:build linux

package h1

import (
	"bytes"
	"net"
	"unsafe"

	"github.com/valyala/fasthttp"

	"ballast/httpcore"
)

// The request and response as package httpcore sees them: views held in the pooled exchange,
// so passing them to the core neither allocates nor boxes.

// reqMsg is httpcore.Request over the exchange's parsed request head (fasthttp's
// RequestHeader, which writes the forwarded head), with the Cookie fields kept beside it once
// the core changes them (a header rule): fasthttp parses a Cookie it is given into pairs,
// collecting the client's fields into the same list, and writes them again as one field of
// its own, so that a set rule's value reached the backend altered and beside the client's.
// Once edited, the Cookie fields are no longer in h; they are the values in cookies, written
// as configured after the head fasthttp renders (appendCookies).
type reqMsg struct {
	h     *fasthttp.RequestHeader
	c     front
	proto []byte // the client's version, for the access log (the backend may get HTTP/1.1)

	cookieEdited bool
	cookies      [][2]int32 // the Cookie field values once edited, in arena
	arena        []byte
}

// reset starts m on a new request, keeping its buffers.
func (m *reqMsg) reset(h *fasthttp.RequestHeader, c front, proto []byte) {
	*m = reqMsg{h: h, c: c, proto: proto, cookies: m.cookies[:0], arena: m.arena[:0]}
}

func isCookie(name []byte) bool { return httpcore.LowerEqualFold(name, "cookie") }

func (m *reqMsg) str(r [2]int32) []byte { return m.arena[r[0]:r[1]] }

// editCookies takes the Cookie fields out of h into cookies (copied when keep, dropped
// otherwise), once; after that only cookies holds them.
func (m *reqMsg) editCookies(keep bool) {
	if !m.cookieEdited {
		if keep {
			for _, v := range m.h.PeekAll(fasthttp.HeaderCookie) {
				m.addCookie(v)
			}
		}
		m.h.Del(fasthttp.HeaderCookie)
		m.cookieEdited = true
	}
	if !keep {
		m.cookies = m.cookies[:0]
	}
}

func (m *reqMsg) addCookie(v []byte) {
	at := int32(len(m.arena))
	m.arena = append(m.arena, v...)
	m.cookies = append(m.cookies, [2]int32{at, int32(len(m.arena))})
}

func (m *reqMsg) Peek(name []byte) []byte {
	if m.cookieEdited && isCookie(name) {
		if len(m.cookies) == 0 {
			return nil
		}
		return m.str(m.cookies[0])
	}
	return m.h.PeekBytes(name)
}

func (m *reqMsg) AppendValues(dst, name []byte) []byte {
	if m.cookieEdited && isCookie(name) {
		n := 0
		for _, r := range m.cookies {
			if v := m.str(r); len(v) > 0 {
				if n > 0 {
					dst = append(dst, ", "...)
				}
				dst = append(dst, v...)
				n++
			}
		}
		return dst
	}
	return appendJoined(dst, m.h.PeekAll(b2s(name)))
}

func (m *reqMsg) Set(name, value []byte) {
	if isCookie(name) {
		m.editCookies(false)
		m.addCookie(value)
		return
	}
	m.h.SetCanonical(name, value)
}

func (m *reqMsg) Add(name, value []byte) {
	if isCookie(name) {
		m.editCookies(true)
		m.addCookie(value)
		return
	}
	m.h.AddBytesKV(name, value)
}

func (m *reqMsg) Del(name []byte) {
	if isCookie(name) {
		m.editCookies(false)
		return
	}
	m.h.DelBytes(name)
}

func (m *reqMsg) Method() []byte     { return m.h.Method() }
func (m *reqMsg) Host() []byte       { return m.h.Host() }
func (m *reqMsg) Target() []byte     { return m.h.RequestURI() }
func (m *reqMsg) SetTarget(t []byte) { m.h.SetRequestURIBytes(t) }
func (m *reqMsg) Proto() []byte      { return m.proto }

// Cookie reads the raw Cookie fields (or the edited ones): fasthttp's CookieBytes would parse
// them into pairs, which AppendBytes then writes to the backend instead of the fields the
// client sent.
func (m *reqMsg) Cookie(n []byte) []byte {
	if m.cookieEdited {
		for _, r := range m.cookies {
			if v := httpcore.CookieValue(m.str(r), n); v != nil {
				return v
			}
		}
		return nil
	}
	for _, f := range m.h.PeekAll(fasthttp.HeaderCookie) {
		if v := httpcore.CookieValue(f, n); v != nil {
			return v
		}
	}
	return nil
}

// appendCookies adds the edited Cookie fields to head, a head fasthttp rendered (ending in
// its blank line); a head whose Cookie fields were not edited is returned as it is.
func (m *reqMsg) appendCookies(head []byte) []byte {
	if !m.cookieEdited || len(m.cookies) == 0 {
		return head
	}
	head = head[:len(head)-2]
	for _, r := range m.cookies {
		head = append(head, "Cookie: "...)
		head = append(head, m.str(r)...)
		head = append(head, '\r', '\n')
	}
	return append(head, '\r', '\n')
}

func (m *reqMsg) ContentLength() int64 {
	switch cl := m.h.ContentLength(); {
	case cl >= 0:
		return int64(cl)
	case cl == -1:
		return -1 // chunked
	}
	return 0
}

// LocalAddr is the address the client connected to (only a redirect of a request without
// Host needs it).
func (m *reqMsg) LocalAddr() net.Addr { return m.c.localAddr() }

// respMsg is httpcore.Response over a backend's response head as it arrived (raw, status line
// to blank line), with the core's changes kept beside it: names deleted and fields added, in
// the exchange's arena. The head the client gets is raw without the deleted fields, then the
// added ones (render); nothing is copied when the core changes nothing.
type respMsg struct {
	raw   []byte
	r     respHead   // a copy: the caller's stays on its stack
	arena []byte     // the names and values below
	dels  [][2]int32 // names deleted (their raw fields, and adds before the delete, go)
	adds  []added
}

type added struct{ name, value [2]int32 }

func (m *respMsg) reset(raw []byte, r *respHead) {
	m.raw = raw
	if r != nil {
		m.r = *r
	} else {
		m.r = respHead{}
	}
	m.arena, m.dels, m.adds = m.arena[:0], m.dels[:0], m.adds[:0]
}

func (m *respMsg) str(r [2]int32) []byte { return m.arena[r[0]:r[1]] }

func (m *respMsg) put(b []byte) [2]int32 {
	at := int32(len(m.arena))
	m.arena = append(m.arena, b...)
	return [2]int32{at, int32(len(m.arena))}
}

func (m *respMsg) deleted(name []byte) bool {
	for _, d := range m.dels {
		if httpcore.EqualFold(m.str(d), name) {
			return true
		}
	}
	return false
}

// nextField returns the first raw field line of p (the fields after the status line) and
// what follows it; ok is false at the blank line.
func nextField(p []byte) (name, value, rest []byte, ok bool) {
	eol := bytes.IndexByte(p, '\n')
	if eol < 0 {
		return nil, nil, nil, false
	}
	line := bytes.TrimSuffix(p[:eol], cr)
	i := bytes.IndexByte(line, ':')
	if i <= 0 {
		return nil, nil, nil, false // the blank line
	}
	return line[:i], trimOWS(line[i+1:]), p[eol+1:], true
}

// fieldsOf is the raw head's field lines.
func (m *respMsg) fieldsOf() []byte { return m.raw[bytes.IndexByte(m.raw, '\n')+1:] }

func (m *respMsg) Peek(name []byte) []byte {
	if !m.deleted(name) {
		for p := m.fieldsOf(); ; {
			k, v, rest, ok := nextField(p)
			if !ok {
				break
			}
			if httpcore.EqualFold(k, name) {
				return v
			}
			p = rest
		}
	}
	for _, a := range m.adds {
		if httpcore.EqualFold(m.str(a.name), name) {
			return m.str(a.value)
		}
	}
	return nil
}

func (m *respMsg) AppendValues(dst, name []byte) []byte {
	n := 0
	if !m.deleted(name) {
		for p := m.fieldsOf(); ; {
			k, v, rest, ok := nextField(p)
			if !ok {
				break
			}
			if httpcore.EqualFold(k, name) && len(v) > 0 {
				if n > 0 {
					dst = append(dst, ", "...)
				}
				dst = append(dst, v...)
				n++
			}
			p = rest
		}
	}
	for _, a := range m.adds {
		if v := m.str(a.value); httpcore.EqualFold(m.str(a.name), name) && len(v) > 0 {
			if n > 0 {
				dst = append(dst, ", "...)
			}
			dst = append(dst, v...)
			n++
		}
	}
	return dst
}

func (m *respMsg) Set(name, value []byte) {
	m.Del(name)
	m.Add(name, value)
}

func (m *respMsg) Add(name, value []byte) {
	m.adds = append(m.adds, added{name: m.put(name), value: m.put(value)})
}

func (m *respMsg) Del(name []byte) {
	kept := m.adds[:0]
	for _, a := range m.adds {
		if !httpcore.EqualFold(m.str(a.name), name) {
			kept = append(kept, a)
		}
	}
	m.adds = kept
	if !m.deleted(name) {
		m.dels = append(m.dels, m.put(name))
	}
}

func (m *respMsg) Status() int { return m.r.status }

func (m *respMsg) ContentLength() int64 {
	if m.r.chunked {
		return -1
	}
	return m.r.clen
}

// respMode says how the engine frames the response for its client, for render.
type respMode struct {
	chunk   bool // the body is re-framed as chunked (it was delimited by the backend's close)
	unchunk bool // a chunked body goes to an HTTP/1.0 client delimited by the close
	conn    []byte
}

var (
	connClose     = []byte("close")
	connKeepAlive = []byte("keep-alive")
	connUpgrade   = []byte("upgrade")
	cr            = []byte{'\r'}
)

// render writes the client's response head to dst: the status line as HTTP/1.1, every field
// as the backend wrote it except those the core deleted (hop-by-hop ones, those Connection
// names, its policy's), Transfer-Encoding when m re-frames the body, the fields the core
// added, and the Connection field m asks for. Line ends become CRLF.
func (m *respMsg) render(dst []byte, mode respMode) []byte {
	raw := m.raw
	eol := bytes.IndexByte(raw, '\n')
	dst = append(dst, "HTTP/1.1"...)
	dst = append(dst, bytes.TrimSuffix(raw[8:eol], cr)...)
	dst = append(dst, '\r', '\n')
	for p := raw[eol+1:]; len(p) > 0; {
		eol = bytes.IndexByte(p, '\n')
		line := bytes.TrimSuffix(p[:eol], cr)
		p = p[eol+1:]
		if len(line) == 0 {
			break
		}
		name := line[:bytes.IndexByte(line, ':')]
		if len(m.dels) > 0 && m.deleted(name) || httpcore.LowerEqualFold(name, "connection") ||
			mode.unchunk && httpcore.LowerEqualFold(name, "transfer-encoding") {
			continue
		}
		dst = append(dst, line...)
		dst = append(dst, '\r', '\n')
	}
	if mode.chunk {
		dst = append(dst, "Transfer-Encoding: chunked\r\n"...)
	}
	for _, a := range m.adds {
		dst = append(dst, m.str(a.name)...)
		dst = append(dst, ": "...)
		dst = append(dst, m.str(a.value)...)
		dst = append(dst, '\r', '\n')
	}
	if mode.conn != nil {
		dst = append(dst, "Connection: "...)
		dst = append(dst, mode.conn...)
		dst = append(dst, '\r', '\n')
	}
	return append(dst, '\r', '\n')
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

// b2s returns b as a string without copying; b must not change while the string is used.
func b2s(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// s2b returns the bytes of s without copying; the caller must not modify them.
func s2b(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

var (
	_ httpcore.Request  = (*reqMsg)(nil)
	_ httpcore.Response = (*respMsg)(nil)
)
