package h2mux

import (
	"errors"

	"golang.org/x/net/http2/hpack"
)

// The client side of a connection (HAProxy's mux_h2 serves both sides the same way): the
// same Conn, frame parser, HPACK decoder, flow control, output, limits and timers as the
// server side, with the roles of the streams turned round. Ballast opens the streams (Open),
// sends request heads and bodies (HeaderBlock, WriteData, Trailers), and hears the backend's
// response heads (ClientHandler.Response), bodies (Data, given back with Consumed as the
// owner passes them on: a client that does not read stops the WINDOW_UPDATEs) and trailers.
// A GOAWAY from the backend resets the streams above its last-stream-id with
// REFUSED_STREAM (never processed: safe to send again elsewhere) before GoAway is told;
// RST_STREAM REFUSED_STREAM from the backend means the same.

// ClientHandler receives a client connection's stream events, as Handler does a server
// connection's (same calls, same rules); Data, Trailers, Reset, Writable and GoAway mean
// the same with the response in place of the request.
type ClientHandler interface {
	// Response reports the final response head of s (interim 1xx heads are skipped); resp
	// is valid only during the call. end: the response has no body.
	Response(s *Stream, resp *Response, end bool)
	Data(s *Stream, p []byte, end bool)
	Trailers(s *Stream, trailers []hpack.HeaderField)
	Reset(s *Stream, code ErrCode)
	Writable(s *Stream)
	GoAway(code ErrCode, debug []byte)
}

// Response is a response head: the status and the regular fields in order, lowercase and
// checked (RFC 9113 §8.2, §8.3.2).
type Response struct {
	Status        int
	Fields        []hpack.HeaderField
	ContentLength int64 // -1: no content-length field
}

// clientShim gives a ClientHandler the Handler's shape; the client side never calls Request.
type clientShim struct{ ClientHandler }

func (clientShim) Request(*Stream, *Request, bool) {}

// Errors of Open.
var (
	ErrNoStreams = errors.New("h2mux: no stream can be opened on this connection now")
	ErrNotClient = errors.New("h2mux: Open on a server connection")
)

// defaultPeerStreams is what the client side assumes of a server's
// SETTINGS_MAX_CONCURRENT_STREAMS until its SETTINGS say otherwise (RFC 9113 §6.5.2 allows
// any number; 100 is its recommended floor).
const defaultPeerStreams = 100

// maxStreamID is the highest stream identifier (RFC 9113 §5.1.1).
const maxStreamID = 1<<31 - 1

// NewClientConn returns the client side of a connection that reports to h, with the client
// preface, its SETTINGS and the connection window's WINDOW_UPDATE already in its output.
// cfg.MaxConcurrentStreams caps the streams Ballast opens at once on it (besides the
// server's own limit); the other limits are the server side's, applied to the responses.
func NewClientConn(h ClientHandler, cfg Config) *Conn {
	c := &Conn{h: clientShim{h}, ch: h, client: true}
	cfg.fill()
	c.cfg = cfg
	c.ctr = cfg.Counters
	if c.ctr == nil {
		c.ctr = new(Counters)
	}
	c.now = c.cfg.Now()
	c.dec = hpack.NewDecoder(uint32(cfg.HeaderTableSize), c.onField)
	c.dec.SetMaxStringLength(cfg.MaxHeaderListSize)
	c.streams = make(map[uint32]*Stream)
	c.peerMaxFrame = DefaultMaxFrameSize
	c.peerInitWindow = initialWindow
	c.peerMaxStreams = defaultPeerStreams
	c.sendWindow = initialWindow
	c.recvWindow = int64(cfg.ConnWindow)
	c.tableUpdate = true
	c.preface = len(clientPreface) // nothing to read before the server's SETTINGS
	c.resets.init(cfg.ResetBurst, cfg.ResetRate, c.now)
	c.empties.init(cfg.EmptyFrameBurst, cfg.EmptyFrameRate, c.now)
	c.idleSince = c.now
	c.lastRead = c.now
	c.hblock.c = c

	n := 2
	if cfg.StreamWindow != initialWindow {
		n++
	}
	if cfg.HeaderTableSize != DefaultHeaderTableSize {
		n++
	}
	b := c.grow(len(clientPreface) + frameHeaderLen + 6*n + frameHeaderLen + 4)
	b = append(b, clientPreface...)
	b = appendFrameHeader(b, 6*n, frameSettings, 0, 0)
	b = appendSetting(b, settingEnablePush, 0)
	b = appendSetting(b, settingMaxHeaderListSize, uint32(cfg.MaxHeaderListSize))
	if cfg.StreamWindow != initialWindow {
		b = appendSetting(b, settingInitialWindowSize, uint32(cfg.StreamWindow))
	}
	if cfg.HeaderTableSize != DefaultHeaderTableSize {
		b = appendSetting(b, settingHeaderTableSize, uint32(cfg.HeaderTableSize))
	}
	if cfg.ConnWindow > initialWindow {
		b = appendFrameHeader(b, 4, frameWindowUpdate, 0, 0)
		b = appendUint32(b, uint32(cfg.ConnWindow-initialWindow))
	}
	c.wrote(b)
	c.settingsSentAt = c.now
	return c
}

// Available returns how many more streams Open may start now: the server's
// SETTINGS_MAX_CONCURRENT_STREAMS (one stream before its SETTINGS arrive) and
// Config.MaxConcurrentStreams less the open ones; 0
// after either side's GOAWAY, a connection error, or when the identifiers are spent.
func (c *Conn) Available() int {
	if !c.client || c.err != nil || c.goAwaySent || c.peerGoAway || c.maxClientID+2 > maxStreamID {
		return 0
	}
	limit := min(c.peerMaxStreams, c.cfg.MaxConcurrentStreams)
	if !c.settings {
		limit = 1 // until the server's SETTINGS say how many it takes: more could be refused
	}
	return max(0, limit-len(c.streams))
}

// Open starts a request stream with its pseudo-header fields; the owner adds the regular
// fields to the returned HeaderBlock and sends it (Send(end): end when there is no body),
// before any other call into the Conn. The stream is valid until its Reset, or until both
// its request and its response have ended.
func (c *Conn) Open(method, scheme, authority, path string) (*Stream, *HeaderBlock, error) {
	if !c.client {
		return nil, nil, ErrNotClient
	}
	if c.Available() == 0 {
		return nil, nil, ErrNoStreams
	}
	c.enter()
	defer c.leave()
	if c.maxClientID == 0 {
		c.maxClientID = 1
	} else {
		c.maxClientID += 2
	}
	s := c.newStream(c.maxClientID)
	s.noBody = method == "HEAD"
	c.ctr.Streams.Add(1)
	b := &c.hblock
	b.s, b.trailers, b.request, b.status, b.err = s, false, true, 0, nil
	b.buf = appendPseudo(b.buf[:0], 2, method)
	if method != "CONNECT" {
		b.buf = appendPseudo(b.buf, 6, scheme)
		b.buf = appendPseudo(b.buf, 4, path)
	}
	if authority != "" {
		b.buf = appendPseudo(b.buf, 1, authority)
	}
	return s, b, nil
}

// appendPseudo appends a pseudo-header field as a literal without indexing of the static
// table's name at index i.
func appendPseudo(b []byte, i uint64, value string) []byte {
	b = appendVarInt(b, 0x00, 4, i)
	b = appendVarInt(b, 0, 7, uint64(len(value)))
	return append(b, value...)
}

// onResponseHeaders starts a header block from the server: the response head of a stream
// Ballast opened, or its trailers.
func (c *Conn) onResponseHeaders(f *frame) error {
	id := f.streamID
	if id%2 == 0 || c.idle(id) {
		return c.fail(ErrCodeProtocol, "HEADERS on a stream the client did not open")
	}
	hb := &c.hb
	*hb = headerBlock{active: true, id: id, kind: blockDiscard, end: f.flags&flagEndStream != 0}
	switch s := c.streams[id]; {
	case s == nil:
		// Closed, or reset by Ballast: decoded for the HPACK state only.
	case s.remoteDone:
		hb.code, hb.reason = ErrCodeStreamClosed, "HEADERS on a half-closed stream"
	case !s.respHead:
		hb.kind, hb.s = blockResponse, s
	case !hb.end:
		hb.code, hb.reason = ErrCodeProtocol, "trailers without END_STREAM"
		c.ctr.MalformedResponses.Add(1)
	default:
		hb.kind, hb.s = blockTrailers, s
	}
	c.fields = c.fields[:0]
	c.dec.SetEmitEnabled(hb.kind != blockDiscard)
	return c.onBlockFragment(f)
}

// endResponse hands the owner a complete, checked response head; an interim one (1xx) is
// dropped.
func (c *Conn) endResponse(s *Stream) error {
	hb := &c.hb
	if hb.over {
		c.ctr.HeadersTooLarge.Add(1)
		return c.streamError(s.id, ErrCodeProtocol, "response head past the header list limit")
	}
	if reason := c.parseResponse(); reason != "" {
		c.ctr.MalformedResponses.Add(1)
		return c.streamError(s.id, ErrCodeProtocol, reason)
	}
	r := &c.resp
	if r.Status < 200 {
		if hb.end || r.Status == 101 {
			c.ctr.MalformedResponses.Add(1)
			return c.streamError(s.id, ErrCodeProtocol, "interim response that ends the stream, or 101")
		}
		return nil
	}
	s.respHead = true
	s.contentLen = r.ContentLength
	if s.noBody || r.Status == 204 || r.Status == 304 {
		s.contentLen = -1 // the length is the representation's, not this message's
	}
	if hb.end && s.contentLen > 0 {
		c.ctr.MalformedResponses.Add(1)
		return c.streamError(s.id, ErrCodeProtocol, "content-length without a body")
	}
	s.remoteDone = hb.end
	c.ch.Response(s, r, hb.end)
	if c.err != nil {
		return c.err
	}
	if hb.end && !s.released && s.localDone {
		c.release(s)
	}
	return nil
}

// parseResponse checks a decoded response head (RFC 9113 §8.3.2, §8.2) and fills c.resp; it
// returns why it is malformed, or "".
func (c *Conn) parseResponse() string {
	r := &c.resp
	*r = Response{ContentLength: -1}
	pseudo := 0
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
			if name != ":status" || r.Status != 0 {
				return "pseudo-header field other than one :status"
			}
			if len(value) != 3 || value[0] < '1' || value[0] > '9' || value[1] < '0' || value[1] > '9' || value[2] < '0' || value[2] > '9' {
				return "invalid :status"
			}
			r.Status = int(value[0]-'0')*100 + int(value[1]-'0')*10 + int(value[2]-'0')
			continue
		}
		if connectionSpecific(name) {
			return "connection-specific field " + name
		}
		if name == "content-length" {
			n, ok := parseContentLength(value)
			if !ok || (r.ContentLength >= 0 && n != r.ContentLength) {
				return "invalid or conflicting content-length"
			}
			r.ContentLength = n
		}
	}
	if r.Status == 0 {
		return "no :status"
	}
	r.Fields = c.fields[pseudo:]
	return ""
}

// refuseAbove ends the streams the server's GOAWAY says it never processed (above last) with
// REFUSED_STREAM, which the owner may send again on another connection whatever the method.
func (c *Conn) refuseAbove(last uint32) {
	for id, s := range c.streams {
		if id > last {
			c.ctr.RefusedStreams.Add(1)
			c.endStream(s, ErrCodeRefusedStream)
		}
	}
}
