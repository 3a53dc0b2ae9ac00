package h2mux

import (
	"golang.org/x/net/http2/hpack"
)

// What a header block in progress is for.
const (
	blockRequest  = iota // a new stream's request head
	blockTrailers        // an open stream's trailers
	blockDiscard         // decoded only to keep the HPACK state in sync
	blockResponse        // client side: a stream's response head
)

// headerBlock is the header block being received: HEADERS and its CONTINUATION frames,
// decoded fragment by fragment as they arrive (nothing of the block itself is buffered).
type headerBlock struct {
	active  bool
	id      uint32
	kind    int
	end     bool // END_STREAM on the HEADERS frame
	size    int  // compressed bytes so far
	list    int  // decoded size so far (RFC 9113 §6.5.2)
	nfields int
	over    bool // the list size or field count limit was passed
	// For blockDiscard: the stream error to answer with once the block is decoded (0 and
	// an empty reason: none), and whether it is a refusal (REFUSED_STREAM).
	code   ErrCode
	reason string
	s      *Stream // blockTrailers
}

func (c *Conn) onHeaders(f *frame) error {
	id := f.streamID
	if c.client {
		return c.onResponseHeaders(f)
	}
	if id%2 == 0 {
		return c.fail(ErrCodeProtocol, "HEADERS on an even stream identifier")
	}
	hb := &c.hb
	*hb = headerBlock{active: true, id: id, kind: blockRequest, end: f.flags&flagEndStream != 0}
	switch s := c.streams[id]; {
	case s != nil:
		switch {
		case s.remoteDone:
			hb.kind, hb.code, hb.reason = blockDiscard, ErrCodeStreamClosed, "HEADERS on a half-closed stream"
		case !hb.end:
			hb.kind, hb.code, hb.reason = blockDiscard, ErrCodeProtocol, "trailers without END_STREAM"
			c.ctr.MalformedRequests.Add(1)
		default:
			hb.kind, hb.s = blockTrailers, s
		}
	case id <= c.maxClientID:
		if !c.wasReset(id) {
			return c.fail(ErrCodeProtocol, "HEADERS on a closed stream")
		}
		hb.kind = blockDiscard // sent before the client saw our RST_STREAM
	default:
		c.maxClientID = id
		switch {
		case f.hasPrio && f.streamDep == id:
			hb.kind, hb.code, hb.reason = blockDiscard, ErrCodeProtocol, "stream depends on itself"
		case c.goAwaySent || len(c.streams) >= c.cfg.MaxConcurrentStreams:
			hb.kind, hb.code = blockDiscard, ErrCodeRefusedStream
		}
	}
	c.fields = c.fields[:0]
	c.dec.SetEmitEnabled(hb.kind != blockDiscard)
	return c.onBlockFragment(f)
}

// onBlockFragment decodes the fragment of a HEADERS or CONTINUATION frame.
func (c *Conn) onBlockFragment(f *frame) error {
	hb := &c.hb
	hb.size += len(f.data)
	if hb.size > c.cfg.MaxHeaderBlockSize {
		c.ctr.ContinuationFloods.Add(1)
		return c.fail(ErrCodeEnhanceYourCalm, "header block larger than its limit")
	}
	endHeaders := f.flags&flagEndHeaders != 0
	if len(f.data) == 0 && !endHeaders {
		if err := c.spendEmpty("header block fragment"); err != nil {
			return err
		}
	}
	if hb.over {
		c.ctr.HeaderBytesPastLimit.Add(uint64(len(f.data)))
	}
	if _, err := c.dec.Write(f.data); err != nil {
		return c.fail(ErrCodeCompression, "HPACK: "+err.Error())
	}
	if !endHeaders {
		return nil
	}
	hb.active = false
	if err := c.dec.Close(); err != nil {
		return c.fail(ErrCodeCompression, "HPACK: "+err.Error())
	}
	switch hb.kind {
	case blockDiscard:
		switch {
		case hb.code == ErrCodeRefusedStream:
			c.ctr.RefusedStreams.Add(1)
			c.writeRST(hb.id, ErrCodeRefusedStream)
			if err := c.control(); err != nil {
				return err
			}
			if c.goAwaySent {
				return nil // not the client's doing
			}
			return c.spendReset()
		case hb.reason != "":
			return c.streamError(hb.id, hb.code, hb.reason)
		}
		return nil
	case blockTrailers:
		return c.endTrailers(hb.s)
	case blockResponse:
		return c.endResponse(hb.s)
	}
	return c.endRequest()
}

// onField receives each decoded field of a block that is not discarded.
func (c *Conn) onField(f hpack.HeaderField) {
	hb := &c.hb
	hb.list += len(f.Name) + len(f.Value) + 32
	hb.nfields++
	if hb.list > c.cfg.MaxHeaderListSize || hb.nfields > c.cfg.MaxHeaderFields {
		hb.over = true
		c.dec.SetEmitEnabled(false) // decode on, to keep the table in sync, but keep nothing
		return
	}
	c.fields = append(c.fields, f)
}

func (c *Conn) endRequest() error {
	hb := &c.hb
	if hb.over {
		// Too large: answered 431 here, never handed to the owner.
		c.ctr.HeadersTooLarge.Add(1)
		c.lastErr = streamErrorInfo{hb.id, ErrCodeNo, "request head past the header list limit (431)"}
		c.refused(431, c.lastErr.reason)
		c.writeStatusOnly(hb.id, 431)
		if !hb.end {
			c.writeRST(hb.id, ErrCodeNo)
		}
		return nil
	}
	if reason := c.parseRequest(); reason != "" {
		c.ctr.MalformedRequests.Add(1)
		c.refused(400, reason)
		return c.streamError(hb.id, ErrCodeProtocol, reason)
	}
	if hb.end && c.req.ContentLength > 0 {
		c.ctr.MalformedRequests.Add(1)
		c.refused(400, "content-length without a body")
		return c.streamError(hb.id, ErrCodeProtocol, "content-length without a body")
	}
	s := c.newStream(hb.id)
	s.contentLen = c.req.ContentLength
	s.remoteDone = hb.end
	c.ctr.Streams.Add(1)
	c.h.Request(s, &c.req, hb.end)
	return c.err2()
}

// refused tells a Handler that is a Refuser of a request head the connection refused, with
// the :method and :path it had (empty when they were not decoded).
func (c *Conn) refused(status int, reason string) {
	r, ok := c.h.(Refuser)
	if !ok {
		return
	}
	var method, path string
	for _, f := range c.fields {
		switch f.Name {
		case ":method":
			method = f.Value
		case ":path":
			path = f.Value
		}
	}
	r.Refused(method, path, status, reason)
}

func (c *Conn) endTrailers(s *Stream) error {
	if c.hb.over {
		c.ctr.HeadersTooLarge.Add(1)
		return c.streamError(s.id, ErrCodeEnhanceYourCalm, "trailers larger than the header list limit")
	}
	for _, f := range c.fields {
		reason := checkField(f.Name, f.Value)
		switch {
		case reason != "":
		case f.Name[0] == ':':
			reason = "pseudo-header field in trailers"
		case connectionSpecific(f.Name):
			reason = "connection-specific field " + f.Name
		}
		if reason != "" {
			c.ctr.MalformedRequests.Add(1)
			return c.streamError(s.id, ErrCodeProtocol, reason)
		}
	}
	if s.contentLen >= 0 && s.received != s.contentLen {
		c.ctr.MalformedRequests.Add(1)
		return c.streamError(s.id, ErrCodeProtocol, "body length differs from content-length")
	}
	s.remoteDone = true
	if s.linger != 0 {
		c.release(s)
		return nil
	}
	c.h.Trailers(s, c.fields)
	if c.err != nil {
		return c.err
	}
	if !s.released && s.localDone {
		c.release(s)
	}
	return nil
}

func (c *Conn) newStream(id uint32) *Stream {
	s := c.free
	if s != nil {
		c.free = s.next
		c.freeN--
		s.next = nil
	} else {
		s = new(Stream)
	}
	s.id = id
	s.sendWindow = c.peerInitWindow
	s.recvWindow = int64(c.cfg.StreamWindow)
	s.contentLen = -1
	c.streams[id] = s
	c.idleSince = 0
	return s
}

// parseRequest checks the decoded request head (RFC 9113 §8.2 and §8.3.1) and fills c.req;
// it returns why the request is malformed, or "".
func (c *Conn) parseRequest() string {
	r := &c.req
	*r = Request{ContentLength: -1}
	pseudo := 0
	host, hosts := "", 0
	for i, f := range c.fields {
		name, value := f.Name, f.Value
		if reason := checkField(name, value); reason != "" {
			return reason
		}
		if name[0] == ':' {
			if i != pseudo {
				return "pseudo-header field after a regular field"
			}
			pseudo++
			var dst *string
			switch name {
			case ":method":
				dst = &r.Method
			case ":scheme":
				dst = &r.Scheme
			case ":authority":
				dst = &r.Authority
			case ":path":
				dst = &r.Path
			default:
				return "unknown or response pseudo-header field " + name
			}
			if *dst != "" {
				return "duplicated pseudo-header field " + name
			}
			if value == "" {
				return "empty pseudo-header field " + name
			}
			*dst = value
			continue
		}
		if connectionSpecific(name) {
			return "connection-specific field " + name
		}
		switch name {
		case "te":
			if !asciiEqualFold(value, "trailers") {
				return "te other than trailers"
			}
		case "content-length":
			n, ok := parseContentLength(value)
			if !ok || (r.ContentLength >= 0 && n != r.ContentLength) {
				return "invalid or conflicting content-length"
			}
			r.ContentLength = n
		case "host":
			host = value
			hosts++
		}
	}
	r.Fields = c.fields[pseudo:]
	if r.Method == "" {
		return "no :method"
	}
	if !isToken(r.Method) {
		return "invalid :method"
	}
	if r.Method == "CONNECT" {
		if r.Scheme != "" || r.Path != "" || r.Authority == "" {
			return "CONNECT with :scheme or :path, or without :authority"
		}
	} else {
		if r.Scheme == "" || r.Path == "" {
			return "no :scheme or no :path"
		}
		if !isScheme(r.Scheme) {
			return "invalid :scheme"
		}
		if !validPath(r.Path, r.Method) {
			return "invalid :path"
		}
	}
	if r.Authority != "" && !validAuthority(r.Authority) {
		return "invalid :authority"
	}
	if hosts > 1 {
		return "more than one host field"
	}
	if hosts == 1 && r.Authority != "" && !asciiEqualFold(host, r.Authority) {
		return "host differs from :authority"
	}
	if hosts == 1 && !validAuthority(host) {
		return "invalid host"
	}
	return ""
}

// connectionSpecific reports the fields RFC 9113 §8.2.2 forbids (te is checked apart).
func connectionSpecific(name string) bool {
	switch name {
	case "connection", "proxy-connection", "keep-alive", "transfer-encoding", "upgrade":
		return true
	}
	return false
}

// checkField applies RFC 9113 §8.2.1 to a field as received: a name of lowercase token
// characters (a leading ':' for pseudo-header fields), a value without NUL, CR, LF or other
// control characters but HTAB (RFC 9110 §5.5, which a request forwarded as HTTP/1.1 must
// meet), and without leading or trailing whitespace.
func checkField(name, value string) string {
	if name == "" {
		return "empty field name"
	}
	n := name
	if n[0] == ':' {
		n = n[1:]
		if n == "" {
			return "empty field name"
		}
	}
	for i := 0; i < len(n); i++ {
		if !tokenLower[n[i]] {
			return "invalid character in field name (uppercase, separator or control)"
		}
	}
	if value == "" {
		return ""
	}
	if v0, vn := value[0], value[len(value)-1]; v0 == ' ' || v0 == '\t' || vn == ' ' || vn == '\t' {
		return "field value with leading or trailing whitespace"
	}
	for i := 0; i < len(value); i++ {
		if b := value[i]; b < ' ' && b != '\t' || b == 0x7f {
			return "control character in field value"
		}
	}
	return ""
}

// tokenLower holds RFC 9110's tchar without the uppercase letters.
var tokenLower = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()

func isToken(s string) bool {
	for i := 0; i < len(s); i++ {
		if b := s[i]; !tokenLower[b] && !('A' <= b && b <= 'Z') {
			return false
		}
	}
	return s != ""
}

// isScheme: ALPHA *( ALPHA / DIGIT / "+" / "-" / "." ) (RFC 3986 §3.1).
func isScheme(s string) bool {
	for i := 0; i < len(s); i++ {
		b := s[i]
		switch {
		case 'a' <= b|0x20 && b|0x20 <= 'z':
		case i > 0 && ('0' <= b && b <= '9' || b == '+' || b == '-' || b == '.'):
		default:
			return false
		}
	}
	return s != ""
}

// validPath: origin-form ("/…") or "*" for OPTIONS, with no byte that would break an
// HTTP/1.1 request line (controls, space, DEL).
func validPath(p, method string) bool {
	if p == "*" {
		return method == "OPTIONS"
	}
	if p[0] != '/' {
		return false
	}
	for i := 0; i < len(p); i++ {
		if b := p[i]; b <= ' ' || b == 0x7f {
			return false
		}
	}
	return true
}

// validAuthority: host [ ":" port ] of RFC 3986 characters, no userinfo (RFC 9113 §8.3.1).
func validAuthority(a string) bool {
	for i := 0; i < len(a); i++ {
		b := a[i]
		switch {
		case 'a' <= b && b <= 'z', 'A' <= b && b <= 'Z', '0' <= b && b <= '9':
		case b == '-' || b == '.' || b == '_' || b == '~' || b == '%' || b == ':' || b == '[' || b == ']':
		case b == '!' || b == '$' || b == '&' || b == '\'' || b == '(' || b == ')' || b == '*' || b == '+' || b == ',' || b == ';' || b == '=':
		default:
			return false
		}
	}
	return a != ""
}

func parseContentLength(v string) (int64, bool) {
	if v == "" || len(v) > 18 {
		return 0, false
	}
	var n int64
	for i := 0; i < len(v); i++ {
		b := v[i]
		if b < '0' || b > '9' {
			return 0, false
		}
		n = n*10 + int64(b-'0')
	}
	return n, true
}

func asciiEqualFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
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
