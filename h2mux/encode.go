package h2mux

import "errors"

// The HPACK encoder of responses: the static table and literals only, as HAProxy's. No
// dynamic table means no encoder state per connection (nothing to keep in step with the
// client's SETTINGS_HEADER_TABLE_SIZE beyond saying "0" once), no table memory per
// connection, and no string copies into a table: a field is written straight into the output
// as it is added. Literals are not Huffman-coded: copying is cheaper than coding, and a
// response head of a proxy is a few hundred bytes. What compression is lost: repeated
// fields (server, content-type, cache-control…) cost their bytes on every response instead
// of one byte after the first.

// staticName maps the names of the static table (RFC 7541 Appendix A) to their first index.
var staticName = map[string]uint8{
	":authority": 1, ":method": 2, ":path": 4, ":scheme": 6, ":status": 8,
	"accept-charset": 15, "accept-encoding": 16, "accept-language": 17, "accept-ranges": 18,
	"accept": 19, "access-control-allow-origin": 20, "age": 21, "allow": 22,
	"authorization": 23, "cache-control": 24, "content-disposition": 25,
	"content-encoding": 26, "content-language": 27, "content-length": 28,
	"content-location": 29, "content-range": 30, "content-type": 31, "cookie": 32,
	"date": 33, "etag": 34, "expect": 35, "expires": 36, "from": 37, "host": 38,
	"if-match": 39, "if-modified-since": 40, "if-none-match": 41, "if-range": 42,
	"if-unmodified-since": 43, "last-modified": 44, "link": 45, "location": 46,
	"max-forwards": 47, "proxy-authenticate": 48, "proxy-authorization": 49, "range": 50,
	"referer": 51, "refresh": 52, "retry-after": 53, "server": 54, "set-cookie": 55,
	"strict-transport-security": 56, "transfer-encoding": 57, "user-agent": 58, "vary": 59,
	"via": 60, "www-authenticate": 61,
}

// staticStatus is the index of ":status: N" in the static table, 0 if it is not there.
func staticStatus(code int) byte {
	switch code {
	case 200:
		return 8
	case 204:
		return 9
	case 206:
		return 10
	case 304:
		return 11
	case 400:
		return 12
	case 404:
		return 13
	case 500:
		return 14
	}
	return 0
}

// appendVarInt appends i with an n-bit prefix whose other bits are first (RFC 7541 §5.1).
func appendVarInt(b []byte, first byte, n uint, i uint64) []byte {
	k := uint64(1)<<n - 1
	if i < k {
		return append(b, first|byte(i))
	}
	b = append(b, first|byte(k))
	i -= k
	for ; i >= 128; i >>= 7 {
		b = append(b, byte(0x80|i&0x7f))
	}
	return append(b, byte(i))
}

// appendStatus appends :status code: indexed when the static table has it, else a literal
// without indexing of the indexed name.
func appendStatus(b []byte, code int) []byte {
	if i := staticStatus(code); i != 0 {
		return append(b, 0x80|i)
	}
	return append(b, 0x08, 3, byte('0'+code/100%10), byte('0'+code/10%10), byte('0'+code%10))
}

var errStatus = errors.New("h2mux: status code out of range, or an interim head that ends the stream")

// HeaderBlock builds a response head or trailer block for one stream; Conn.Headers and
// Conn.Trailers return the connection's one builder, which is valid until Send.
type HeaderBlock struct {
	c        *Conn
	s        *Stream
	buf      []byte
	status   int
	trailers bool
	request  bool // a request head (client side): te: trailers may go
	err      error
	lower    [64]byte
}

// Headers starts the response head of s with status code status (100–999; 1xx heads are
// interim and may be followed by others).
func (c *Conn) Headers(s *Stream, status int) *HeaderBlock {
	b := &c.hblock
	b.s, b.trailers, b.request, b.status, b.err = s, false, false, status, nil
	b.buf = b.buf[:0]
	switch {
	case status < 100 || status > 999:
		b.err = errStatus
	case s.released || s.localDone || s.headSent:
		b.err = ErrStreamClosed
	}
	b.buf = appendStatus(b.buf, status)
	return b
}

// Trailers starts the trailer block of s, which ends the stream when sent.
func (c *Conn) Trailers(s *Stream) *HeaderBlock {
	b := &c.hblock
	b.s, b.trailers, b.request, b.status, b.err = s, true, false, 0, nil
	b.buf = b.buf[:0]
	switch {
	case s.released || s.localDone:
		b.err = ErrStreamClosed
	case !s.headSent:
		b.err = ErrNoHeaders
	}
	return b
}

// Add adds a field. The name is lowercased; pseudo-header names, connection-specific fields
// (connection, keep-alive, proxy-connection, transfer-encoding, upgrade, te) and fields a
// client would find malformed (a name that is not a token, a value with NUL, CR or LF) are
// left out and counted (Counters.ResponseFieldsDropped): an HTTP/1.1 backend's response head
// becomes a valid HTTP/2 one.
func (b *HeaderBlock) Add(name, value string) { addField(b, name, value) }

// AddBytes is Add for byte slices (an HTTP/1.1 parser's fields), copied as they are added.
func (b *HeaderBlock) AddBytes(name, value []byte) { addField(b, name, value) }

func addField[T string | []byte](b *HeaderBlock, name, value T) {
	if b.err != nil {
		return
	}
	if len(name) == 0 || name[0] == ':' || !validValue(value) {
		b.c.ctr.ResponseFieldsDropped.Add(1)
		return
	}
	var lower []byte
	if len(name) <= len(b.lower) {
		lower = b.lower[:len(name)]
	} else {
		lower = make([]byte, len(name))
	}
	for i := 0; i < len(name); i++ {
		ch := name[i]
		if 'A' <= ch && ch <= 'Z' {
			ch += 'a' - 'A'
		} else if !tokenLower[ch] {
			b.c.ctr.ResponseFieldsDropped.Add(1)
			return
		}
		lower[i] = ch
	}
	switch string(lower) {
	case "te":
		if b.request && asciiEqualFold(string(value), "trailers") {
			break // the one te a request may carry (RFC 9113 §8.2.2), which gRPC needs
		}
		b.c.ctr.ResponseFieldsDropped.Add(1)
		return
	case "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade":
		b.c.ctr.ResponseFieldsDropped.Add(1)
		return
	}
	if i, ok := staticName[string(lower)]; ok {
		b.buf = appendVarInt(b.buf, 0x00, 4, uint64(i)) // literal without indexing, indexed name
	} else {
		b.buf = append(b.buf, 0x00)
		b.buf = appendVarInt(b.buf, 0, 7, uint64(len(lower)))
		b.buf = append(b.buf, lower...)
	}
	b.buf = appendVarInt(b.buf, 0, 7, uint64(len(value)))
	b.buf = append(b.buf, value...)
	if len(b.buf) > MaxResponseHeaderBlock {
		b.err = ErrHeadersTooLarge
	}
}

func validValue[T string | []byte](v T) bool {
	for i := 0; i < len(v); i++ {
		if b := v[i]; b == 0 || b == '\r' || b == '\n' {
			return false
		}
	}
	return true
}

// Send frames the block (HEADERS, CONTINUATION frames when it is larger than the client's
// SETTINGS_MAX_FRAME_SIZE). end ends the stream; trailers always do, interim heads never may.
// Header blocks are not flow-controlled and always fit in the output.
func (b *HeaderBlock) Send(end bool) error {
	c, s := b.c, b.s
	if b.err != nil {
		return b.err
	}
	if c.err != nil {
		return ErrConnClosed
	}
	if b.trailers {
		end = true
	} else if !b.request && b.status < 200 && end {
		return errStatus
	}
	c.enter()
	defer c.leave()
	c.writeHeaders(s.id, b.buf, end)
	if cap(b.buf) > maxKeptBlock {
		b.buf = nil // a rare large head: not kept for the connection's life
	}
	if !b.trailers && (b.status >= 200 || b.request) {
		s.headSent = true
	}
	b.s = nil
	if end {
		c.localEnd(s)
	}
	return nil
}

// writeHeaders frames a header block for stream id.
func (c *Conn) writeHeaders(id uint32, block []byte, end bool) {
	prefix := 0
	if c.tableUpdate {
		prefix = 1 // a dynamic table size update to 0 first: we never index (RFC 7541 §4.2)
		c.tableUpdate = false
	}
	total := prefix + len(block)
	max := c.peerMaxFrame
	out := c.grow(total + (total/max+1)*frameHeaderLen)
	flags := uint8(0)
	if end {
		flags |= flagEndStream
	}
	typ := uint8(frameHeaders)
	for first := true; first || total > 0; first = false {
		n := min(total, max)
		f := flags
		if n == total {
			f |= flagEndHeaders
		}
		out = appendFrameHeader(out, n, typ, f, id)
		m := n
		if first && prefix > 0 {
			out = append(out, 0x20)
			m--
		}
		out = append(out, block[:m]...)
		block = block[m:]
		total -= n
		typ, flags = frameContinuation, 0
	}
	c.wrote(out)
}

// writeStatusOnly answers stream id with a bare status and END_STREAM, for a request the
// connection refuses itself (431).
func (c *Conn) writeStatusOnly(id uint32, code int) {
	var tmp [8]byte
	c.writeHeaders(id, appendStatus(tmp[:0], code), true)
}
