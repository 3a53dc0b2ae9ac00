package h2mux

import (
	"errors"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2/hpack"
)

// Config holds a connection's limits. The zero value of a field means its default (limits.go).
type Config struct {
	MaxConcurrentStreams int
	StreamWindow         int // receive window per stream, 65535 … 2^31-1
	ConnWindow           int // receive window of the connection, 65535 … 2^31-1
	MaxHeaderListSize    int
	MaxHeaderBlockSize   int
	MaxHeaderFields      int
	HeaderTableSize      int
	ResetBurst           int
	ResetRate            int // per second
	EmptyFrameBurst      int
	EmptyFrameRate       int // per second
	MaxQueuedControl     int
	MaxOutput            int
	StallTimeout         time.Duration
	SettingsTimeout      time.Duration
	// LingerTimeout is how long a stream whose response is complete, while its request is
	// still arriving, is read on before RST_STREAM NO_ERROR (Conn.localEnd). Zero:
	// DefaultLingerTimeout; negative: the reset goes at once.
	LingerTimeout time.Duration
	// IdleTimeout, when set, ends a connection that has had no stream open for that long
	// (GOAWAY NO_ERROR, then Done). Zero: the owner keeps its own idle timer.
	IdleTimeout time.Duration
	// PingAfter, when set, sends a PING once the client has sent nothing for that long, and
	// PingTimeout (default PingAfter) ends the connection when nothing arrives within it after
	// the PING (a peer that vanished without a FIN). Zero: no PINGs of Ballast's own.
	PingAfter, PingTimeout time.Duration

	// Now is the owner's clock in nanoseconds (a monotonic clock; the origin does not matter),
	// read once per call into the Conn: a shard passes its timer wheel's time. Nil: the
	// process's monotonic clock.
	Now func() int64
	// Counters receives the abuse counters; several connections (a shard, a listener) may
	// share one. Nil: the connection keeps its own (Conn.Counters).
	Counters *Counters
	// Buffers lends the input and output buffers, which the connection gives back whenever
	// they are empty, so an idle connection holds none. Nil: the connection keeps its own.
	Buffers BufferPool
}

// BufferPool lends byte buffers. Get returns an empty slice with some capacity; Put takes one
// back. Calls come from the goroutine that drives the connections using the pool.
type BufferPool interface {
	Get() []byte
	Put([]byte)
}

// Counters count what the limits refused and the streams' abnormal ends. The fields are
// atomics so that a metrics reader may load them while connections run; they change only on
// the events they count, never per frame of a well-behaved connection.
type Counters struct {
	Streams               atomic.Uint64 // streams opened to the owner
	ClientResets          atomic.Uint64 // RST_STREAM from the client on a stream not yet answered
	StreamErrors          atomic.Uint64 // RST_STREAM sent for the client's protocol errors (malformed requests included)
	MalformedRequests     atomic.Uint64 // of which: request heads or bodies that violate RFC 9113 §8
	MalformedResponses    atomic.Uint64 // client side, of which: response heads or bodies that do
	RefusedStreams        atomic.Uint64 // HEADERS past MAX_CONCURRENT_STREAMS or after GOAWAY
	HeadersTooLarge       atomic.Uint64 // request heads answered 431 (list size or field count)
	HeaderBytesPastLimit  atomic.Uint64 // header block bytes received after the list limit was passed
	StallResets           atomic.Uint64 // streams reset after StallTimeout without window
	LingerResets          atomic.Uint64 // complete responses whose request went on past LingerTimeout
	ConnErrors            atomic.Uint64 // connections ended by a connection error (all causes)
	ResetFloods           atomic.Uint64 // of which: reset budget spent (rapid reset, MadeYouReset)
	EmptyFrameFloods      atomic.Uint64 // of which: empty-frame budget spent
	ControlFloods         atomic.Uint64 // of which: too many control frames queued
	ContinuationFloods    atomic.Uint64 // of which: header block past MaxHeaderBlockSize
	OutputStalls          atomic.Uint64 // of which: output not drained for StallTimeout
	SettingsTimeouts      atomic.Uint64 // of which: SETTINGS not acknowledged in time
	PingTimeouts          atomic.Uint64 // of which: nothing came back after a PING on silence
	ResponseFieldsDropped atomic.Uint64 // response fields left out (connection-specific or invalid)
}

// Handler receives a connection's stream events. Its methods run synchronously inside the
// Conn call that produced them (Feed, Tick, Advance, Consumed, WriteData), on the owner's
// goroutine, and may call the Conn's methods for any stream, except that after Reset the
// stream must not be used again.
type Handler interface {
	// Request reports a new stream with its complete, validated request head. req is valid
	// only during the call (copy what you keep). end: the request has no body.
	Request(s *Stream, req *Request, end bool)
	// Data reports request body bytes; p is valid only during the call. end: the body is
	// complete (p may be empty then). Call Conn.Consumed as the bytes leave your buffers.
	Data(s *Stream, p []byte, end bool)
	// Trailers reports the request's trailers; the body is complete. Valid during the call.
	Trailers(s *Stream, trailers []hpack.HeaderField)
	// Reset reports that the stream ended abnormally: the client reset it, it broke a
	// protocol rule, it stalled, or the connection ended. The stream is gone.
	Reset(s *Stream, code ErrCode)
	// Writable reports that s, which WriteData could not take everything from, may write
	// again (the client's window grew or the output drained).
	Writable(s *Stream)
	// GoAway reports the client's GOAWAY: it opens no more streams.
	GoAway(code ErrCode, debug []byte)
}

// Refuser is an optional interface of a Handler: Refused reports a request head the
// connection refused itself and never handed over, for its access-log line: status 431 for a
// head past the header limits (answered 431), 400 for a malformed one (reset with
// PROTOCOL_ERROR). method and path are the head's :method and :path as decoded (maybe
// empty, unchecked); reason names the rule. It runs inside Feed, like the Handler's methods.
type Refuser interface {
	Refused(method, path string, status int, reason string)
}

// Request is a request head. Fields are the regular fields in order, lowercase and checked
// (RFC 9113 §8.2); a request's cookie may arrive split over several "cookie" fields (RFC 9113
// §8.2.3), which an HTTP/1.1 request joins with "; ".
type Request struct {
	Method, Scheme, Authority, Path string
	// Protocol is :protocol (RFC 8441); always empty, as the extended CONNECT is not offered.
	Protocol      string
	Fields        []hpack.HeaderField
	ContentLength int64 // -1: no content-length field
}

// ConnError is a connection error: the Conn wrote GOAWAY with Code and must be closed once its
// output is drained.
type ConnError struct {
	Code   ErrCode
	Reason string
}

func (e *ConnError) Error() string {
	return "http2: connection error " + e.Code.String() + ": " + e.Reason
}

// Errors of the owner's calls.
var (
	ErrStreamClosed    = errors.New("h2mux: stream closed for sending")
	ErrNoHeaders       = errors.New("h2mux: DATA before the response head")
	ErrHeadersTooLarge = errors.New("h2mux: response header block larger than MaxResponseHeaderBlock")
	ErrConnClosed      = errors.New("h2mux: connection closed")
)

// Stream is one stream the owner was handed by Handler.Request. It stays valid until the
// stream ends: Handler.Reset, or the owner's last write (END_STREAM) once the request is
// complete too; then the Conn recycles it.
type Stream struct {
	// User is the owner's: the Conn never reads it and clears it when the stream ends.
	User any

	id         uint32
	remoteDone bool // END_STREAM received (or the stream was reset)
	localDone  bool // END_STREAM sent (or the stream was reset)
	headSent   bool // the final response head went out
	blocked    bool // waiting for window or output room
	listed     bool // on c.blocked
	released   bool
	sendWindow int64 // the client's window for our DATA on this stream (may go negative)
	recvWindow int64 // what the client may still send us on this stream
	recvHeld   int64 // handed to the owner, not yet consumed
	recvAcked  int64 // consumed, not yet returned by WINDOW_UPDATE
	contentLen int64 // declared content-length, -1 when none
	received   int64 // request body bytes received
	stallSince int64 // when it blocked on the client's window (0: not blocked on it)
	linger     int64 // response complete, request still arriving: its rest is read (and
	// dropped) until then, for frame errors to be answered, then RST_STREAM NO_ERROR; 0: not
	respHead bool // client side: the final response head arrived
	noBody   bool // client side: a HEAD request, whose response has no body whatever its length
	next     *Stream
}

// ID returns the stream identifier.
func (s *Stream) ID() uint32 { return s.id }

// Conn is the server side of one HTTP/2 connection. It has no I/O: its owner feeds it the
// bytes read from the client (Feed), writes out what it framed (Output, Advance), calls Tick at
// Deadline, and answers the streams it reports through the Handler (HeaderBlock, WriteData).
// A Conn is used by one goroutine at a time.
type Conn struct {
	cfg Config
	h   Handler
	// client: the connection is the client side (NewClientConn): Ballast opens the streams
	// (odd identifiers, maxClientID the last opened), the peer answers them (ch hears the
	// response heads), and the rules of the server side that a client cannot break are not
	// applied (no preface to read, no lingering, no reset budget).
	client         bool
	ch             ClientHandler
	peerMaxStreams int // the server's SETTINGS_MAX_CONCURRENT_STREAMS (client side)
	resp           Response
	ctr            *Counters
	now            int64

	err      *ConnError
	preface  int  // bytes of the client preface seen
	settings bool // the client's first SETTINGS arrived

	in []byte // a frame begun in an earlier Feed

	dec    *hpack.Decoder
	hb     headerBlock
	fields []hpack.HeaderField
	req    Request

	// The client's settings.
	peerMaxFrame   int
	peerInitWindow int64
	tableUpdate    bool // the next header block starts with a dynamic table size update to 0

	sendWindow int64 // the client's connection window for our DATA
	recvWindow int64 // what the client may still send on the connection
	recvAcked  int64 // consumed, not yet returned by WINDOW_UPDATE

	streams     map[uint32]*Stream
	maxClientID uint32
	free        *Stream
	freeN       int
	releaseQ    []*Stream
	blocked     []*Stream // streams that may be blocked, in the order they blocked
	lingering   []*Stream // streams whose response is complete and request is not (localEnd)
	blockedNext []*Stream
	stalled     []*Stream // Tick's scratch
	waking      bool
	reset       [resetRingSize]uint32 // streams Ballast reset, newest at resetN-1
	resetN      int

	out        []byte // framed, not yet drained: out[outOff:]
	outOff     int
	queued     uint64 // bytes ever appended to out
	drained    uint64 // bytes ever drained
	ctrlMark   uint64 // queued just after the newest control frame
	ctrlQueued int    // control frames appended since the drain last passed ctrlMark
	drainedAt  int64  // last time the owner drained something (or the output became non-empty)

	resets  budget
	empties budget

	settingsSentAt int64 // 0 once acknowledged
	lastRead       int64 // when the client last sent bytes (Feed)
	pingSentAt     int64 // when the PING on silence went out (0: none outstanding)
	idleSince      int64 // when the last stream ended (0: streams open)
	goAwaySent     bool
	goAwayLast     uint32
	peerGoAway     bool
	depth          int

	hblock  HeaderBlock
	lastErr streamErrorInfo
}

type streamErrorInfo struct {
	id     uint32
	code   ErrCode
	reason string
}

// LastStreamError returns the most recent stream the connection reset or refused for
// something the client sent, with the error code and the rule broken, for the owner's log
// (id 0: none yet).
func (c *Conn) LastStreamError() (id uint32, code ErrCode, reason string) {
	return c.lastErr.id, c.lastErr.code, c.lastErr.reason
}

// NewConn returns a connection that reports to h, with its server preface (SETTINGS and the
// connection window's WINDOW_UPDATE) already framed in its output.
func NewConn(h Handler, cfg Config) *Conn {
	c := &Conn{h: h}
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
	c.sendWindow = initialWindow
	c.recvWindow = int64(cfg.ConnWindow)
	c.tableUpdate = true
	c.resets.init(cfg.ResetBurst, cfg.ResetRate, c.now)
	c.empties.init(cfg.EmptyFrameBurst, cfg.EmptyFrameRate, c.now)
	c.idleSince = c.now
	c.lastRead = c.now
	c.hblock.c = c

	// The server preface: our SETTINGS (only what differs from the protocol's defaults,
	// plus the limits a client must know), and the connection window.
	n := 3
	if cfg.StreamWindow != initialWindow {
		n++
	}
	if cfg.HeaderTableSize != DefaultHeaderTableSize {
		n++
	}
	b := c.grow(frameHeaderLen + 6*n + frameHeaderLen + 4)
	b = appendFrameHeader(b, 6*n, frameSettings, 0, 0)
	b = appendSetting(b, settingMaxConcurrentStreams, uint32(cfg.MaxConcurrentStreams))
	b = appendSetting(b, settingMaxHeaderListSize, uint32(cfg.MaxHeaderListSize))
	b = appendSetting(b, settingEnablePush, 0)
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

func appendSetting(b []byte, id uint16, v uint32) []byte {
	return appendUint32(append(b, byte(id>>8), byte(id)), v)
}

var clockOrigin = time.Now()

func monotonic() int64 { return int64(time.Since(clockOrigin)) }

func (cfg *Config) fill() {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&cfg.MaxConcurrentStreams, DefaultMaxConcurrentStreams)
	def(&cfg.StreamWindow, DefaultStreamWindow)
	def(&cfg.ConnWindow, DefaultConnWindow)
	def(&cfg.MaxHeaderListSize, DefaultMaxHeaderListSize)
	def(&cfg.MaxHeaderBlockSize, 2*cfg.MaxHeaderListSize)
	def(&cfg.MaxHeaderFields, DefaultMaxHeaderFields)
	def(&cfg.HeaderTableSize, DefaultHeaderTableSize)
	def(&cfg.ResetBurst, DefaultResetBurst)
	def(&cfg.ResetRate, DefaultResetRate)
	def(&cfg.EmptyFrameBurst, DefaultEmptyFrameBurst)
	def(&cfg.EmptyFrameRate, DefaultEmptyFrameRate)
	def(&cfg.MaxQueuedControl, DefaultMaxQueuedControl)
	def(&cfg.MaxOutput, DefaultMaxOutput)
	cfg.StreamWindow = min(max(cfg.StreamWindow, initialWindow), maxWindow)
	cfg.ConnWindow = min(max(cfg.ConnWindow, initialWindow), maxWindow)
	if cfg.StallTimeout <= 0 {
		cfg.StallTimeout = DefaultStallTimeout
	}
	if cfg.SettingsTimeout <= 0 {
		cfg.SettingsTimeout = DefaultSettingsTimeout
	}
	if cfg.LingerTimeout == 0 {
		cfg.LingerTimeout = DefaultLingerTimeout
	}
	if cfg.PingTimeout <= 0 {
		cfg.PingTimeout = cfg.PingAfter
	}
	if cfg.Now == nil {
		cfg.Now = monotonic
	}
}

// Counters returns the counters the connection adds to (Config.Counters or its own).
func (c *Conn) Counters() *Counters { return c.ctr }

// Err returns the connection error that ended the connection, or nil.
func (c *Conn) Err() error {
	if c.err == nil {
		return nil
	}
	return c.err
}

// Done reports that the owner should close the connection once Output is drained: a
// connection error, or a GOAWAY (either side's) with no stream left.
func (c *Conn) Done() bool {
	return c.err != nil || ((c.goAwaySent || c.peerGoAway) && len(c.streams) == 0 && !c.hb.active)
}

// NumStreams returns the number of open streams.
func (c *Conn) NumStreams() int { return len(c.streams) }

// enter and leave bracket every exported entry point: streams that end inside a call
// (perhaps inside a Handler call nested in it) are recycled when the outermost call returns,
// so no code still running on them sees them reused.
func (c *Conn) enter() {
	if c.depth == 0 {
		c.now = c.cfg.Now()
	}
	c.depth++
}

func (c *Conn) leave() {
	c.depth--
	if c.depth > 0 {
		return
	}
	for i, s := range c.releaseQ {
		c.releaseQ[i] = nil
		if c.freeN >= maxFreeStreams {
			continue // an idle connection keeps no more than a few
		}
		*s = Stream{next: c.free}
		c.free = s
		c.freeN++
	}
	c.releaseQ = c.releaseQ[:0]
	if c.outOff == len(c.out) && c.out != nil {
		c.out, c.outOff = c.out[:0], 0
		if c.cfg.Buffers != nil {
			c.cfg.Buffers.Put(c.out)
			c.out = nil
		}
	}
}

// Feed hands the connection bytes read from the client, all of them: it consumes them whole,
// keeping a frame that is not complete yet until the next Feed. A non-nil error is the
// connection error that ends the connection (a GOAWAY is in the output).
func (c *Conn) Feed(p []byte) error {
	if c.err != nil {
		return c.err
	}
	c.enter()
	defer c.leave()
	if len(p) > 0 {
		c.lastRead, c.pingSentAt = c.now, 0 // the client is there
	}
	if c.preface < len(clientPreface) {
		n := min(len(p), len(clientPreface)-c.preface)
		if string(p[:n]) != clientPreface[c.preface:c.preface+n] {
			return c.fail(ErrCodeProtocol, "invalid connection preface")
		}
		c.preface += n
		p = p[n:]
	}
	if len(c.in) > 0 {
		// Complete the frame begun earlier.
		if len(c.in) < frameHeaderLen {
			n := min(len(p), frameHeaderLen-len(c.in))
			c.in = append(c.in, p[:n]...)
			p = p[n:]
			if len(c.in) < frameHeaderLen {
				return nil
			}
			if err := c.checkHeader(parseFrameHeader(c.in)); err != nil {
				return err
			}
		}
		h := parseFrameHeader(c.in)
		need := frameHeaderLen + int(h.length) - len(c.in)
		n := min(len(p), need)
		c.in = append(c.in, p[:n]...)
		p = p[n:]
		if n < need {
			return nil
		}
		err := c.frame(h, c.in[frameHeaderLen:])
		c.in = c.in[:0]
		if c.cfg.Buffers != nil {
			c.cfg.Buffers.Put(c.in)
			c.in = nil
		}
		if err != nil {
			return err
		}
	}
	for len(p) >= frameHeaderLen {
		h := parseFrameHeader(p)
		if err := c.checkHeader(h); err != nil {
			return err
		}
		end := frameHeaderLen + int(h.length)
		if len(p) < end {
			break
		}
		if err := c.frame(h, p[frameHeaderLen:end]); err != nil {
			return err
		}
		p = p[end:]
	}
	if len(p) > 0 {
		if c.in == nil && c.cfg.Buffers != nil {
			c.in = c.cfg.Buffers.Get()
		}
		c.in = append(c.in, p...)
	}
	return nil
}

// checkHeader applies the rules a frame header alone decides, before its payload arrives:
// the size limit (a frame that may be 16 MiB is refused before a byte of it is buffered).
func (c *Conn) checkHeader(h frameHeader) error {
	if h.length > DefaultMaxFrameSize {
		return c.fail(ErrCodeFrameSize, "frame larger than SETTINGS_MAX_FRAME_SIZE")
	}
	if !c.settings && (h.typ != frameSettings || h.flags&flagAck != 0) {
		return c.fail(ErrCodeProtocol, "the client preface does not end with SETTINGS")
	}
	return nil
}

// frame processes one whole frame.
func (c *Conn) frame(h frameHeader, p []byte) error {
	if c.hb.active && (h.typ != frameContinuation || h.streamID != c.hb.id) {
		return c.fail(ErrCodeProtocol, "header block interrupted by another frame")
	}
	f, ferr := parseFrame(h, p)
	if ferr != nil {
		if ferr.stream {
			return c.streamError(h.streamID, ferr.code, ferr.reason)
		}
		return c.fail(ferr.code, ferr.reason)
	}
	switch h.typ {
	case frameData:
		return c.onData(&f)
	case frameHeaders:
		return c.onHeaders(&f)
	case frameContinuation:
		if !c.hb.active {
			return c.fail(ErrCodeProtocol, "CONTINUATION without a header block")
		}
		return c.onBlockFragment(&f)
	case framePriority:
		if f.streamDep == h.streamID {
			return c.streamError(h.streamID, ErrCodeProtocol, "stream depends on itself")
		}
		return c.spendEmpty("PRIORITY")
	case frameRSTStream:
		return c.onRSTStream(&f)
	case frameSettings:
		return c.onSettings(&f)
	case framePushPromise:
		return c.fail(ErrCodeProtocol, "PUSH_PROMISE from a client")
	case framePing:
		if h.flags&flagAck != 0 {
			return nil // the answer to a PING on silence: that anything came is what counts
		}
		b := c.grow(frameHeaderLen + 8)
		b = appendFrameHeader(b, 8, framePing, flagAck, 0)
		c.wrote(append(b, f.ping[:]...))
		return c.control()
	case frameGoAway:
		c.peerGoAway = true
		if c.client {
			c.refuseAbove(f.lastID)
		}
		c.h.GoAway(f.code, f.data)
		return nil
	case frameWindowUpdate:
		return c.onWindowUpdate(&f)
	}
	return nil // unknown frame types are ignored (RFC 9113 §5.5)
}

// idle reports whether id names a stream the client has not opened yet (RFC 9113 §5.1).
func (c *Conn) idle(id uint32) bool { return id > c.maxClientID }

func (c *Conn) onData(f *frame) error {
	n := int64(f.length)
	if n > c.recvWindow {
		return c.fail(ErrCodeFlowControl, "DATA past the connection window")
	}
	c.recvWindow -= n
	s := c.streams[f.streamID]
	if s == nil || s.remoteDone {
		// The bytes still count against the connection window: give them back at once.
		c.creditConn(n)
		if s == nil && c.idle(f.streamID) {
			return c.fail(ErrCodeProtocol, "DATA on an idle stream")
		}
		if s == nil && c.wasReset(f.streamID) {
			return nil // sent before the client saw our RST_STREAM
		}
		return c.streamError(f.streamID, ErrCodeStreamClosed, "DATA on a closed or half-closed stream")
	}
	if n > s.recvWindow {
		c.creditConn(n)
		return c.streamError(f.streamID, ErrCodeFlowControl, "DATA past the stream window")
	}
	s.recvWindow -= n
	end := f.flags&flagEndStream != 0
	data := f.data
	s.received += int64(len(data))
	if s.contentLen >= 0 && (s.received > s.contentLen || end && s.received != s.contentLen) {
		c.creditConn(n)
		c.ctr.MalformedRequests.Add(1)
		return c.streamError(f.streamID, ErrCodeProtocol, "request body length differs from content-length")
	}
	if c.client && !s.respHead {
		c.creditConn(n)
		return c.streamError(f.streamID, ErrCodeProtocol, "DATA before the response head")
	}
	if len(data) == 0 && !end {
		if err := c.spendEmpty("DATA"); err != nil {
			return err
		}
	}
	if f.padLen > 0 {
		s.recvAcked += int64(f.padLen)
		c.recvAcked += int64(f.padLen)
	}
	if s.linger != 0 { // the owner is done with it: the bytes are dropped here
		c.creditConn(n)
		if end {
			s.remoteDone = true
			c.release(s)
		}
		return nil
	}
	s.recvHeld += int64(len(data))
	if end {
		s.remoteDone = true
	}
	c.h.Data(s, data, end)
	if c.err != nil {
		return c.err
	}
	if !s.released {
		if end && s.localDone {
			c.release(s)
		} else if f.padLen > 0 {
			c.maybeWindowUpdate(s)
		}
	}
	if f.padLen > 0 {
		c.maybeConnWindowUpdate()
	}
	return nil
}

func (c *Conn) onRSTStream(f *frame) error {
	if c.idle(f.streamID) {
		return c.fail(ErrCodeProtocol, "RST_STREAM on an idle stream")
	}
	s := c.streams[f.streamID]
	if s == nil {
		return nil // closed: nothing to do
	}
	// An open stream is one whose response has not ended (the owner's last write ends it).
	c.endStream(s, f.code)
	c.ctr.ClientResets.Add(1)
	return c.spendReset()
}

func (c *Conn) onSettings(f *frame) error {
	if f.flags&flagAck != 0 {
		c.settingsSentAt = 0
		return nil
	}
	c.settings = true
	p := f.data
	for ; len(p) >= 6; p = p[6:] {
		id := uint16(p[0])<<8 | uint16(p[1])
		v := uint32(p[2])<<24 | uint32(p[3])<<16 | uint32(p[4])<<8 | uint32(p[5])
		switch id { // values parseFrame checked
		case settingHeaderTableSize:
			c.tableUpdate = true // we use no dynamic table; say so again (RFC 7541 §4.2)
		case settingInitialWindowSize:
			delta := int64(v) - c.peerInitWindow
			c.peerInitWindow = int64(v)
			for _, s := range c.streams {
				s.sendWindow += delta
				if s.sendWindow > maxWindow {
					return c.fail(ErrCodeFlowControl, "SETTINGS_INITIAL_WINDOW_SIZE overflows a stream window")
				}
			}
		case settingMaxFrameSize:
			c.peerMaxFrame = int(v)
		case settingMaxConcurrentStreams:
			c.peerMaxStreams = int(min(v, 1<<20))
		}
	}
	c.wrote(appendFrameHeader(c.grow(frameHeaderLen), 0, frameSettings, flagAck, 0))
	if err := c.control(); err != nil {
		return err
	}
	c.wakeBlocked()
	return c.err2()
}

func (c *Conn) onWindowUpdate(f *frame) error {
	inc := int64(f.increment)
	if f.streamID == 0 {
		if c.sendWindow+inc > maxWindow {
			return c.fail(ErrCodeFlowControl, "connection window above 2^31-1")
		}
		c.sendWindow += inc
		c.wakeBlocked()
		return c.err2()
	}
	if c.idle(f.streamID) {
		return c.fail(ErrCodeProtocol, "WINDOW_UPDATE on an idle stream")
	}
	s := c.streams[f.streamID]
	if s == nil {
		return nil // closed (RFC 9113 §6.9 allows it for a while)
	}
	if s.sendWindow+inc > maxWindow {
		return c.streamError(f.streamID, ErrCodeFlowControl, "stream window above 2^31-1")
	}
	s.sendWindow += inc
	if s.blocked && c.canWrite(s) {
		s.stallSince = 0
		s.blocked = false // still listed: wakeBlocked drops it, block will not list it twice
		c.h.Writable(s)
	}
	return c.err2()
}

// err2 returns the connection error a Handler call may have caused.
func (c *Conn) err2() error {
	if c.err != nil {
		return c.err
	}
	return nil
}

// spendReset takes one token of the reset budget and ends the connection when none is left.
func (c *Conn) spendReset() error {
	if c.client || c.resets.take(c.now) { // a backend's resets cost only its own streams
		return nil
	}
	c.ctr.ResetFloods.Add(1)
	return c.fail(ErrCodeEnhanceYourCalm, "too many streams reset")
}

func (c *Conn) spendEmpty(what string) error {
	if c.empties.take(c.now) {
		return nil
	}
	c.ctr.EmptyFrameFloods.Add(1)
	return c.fail(ErrCodeEnhanceYourCalm, "too many empty frames ("+what+")")
}

// streamError ends stream id with RST_STREAM code for something the client sent (RFC 9113
// §5.4.2), which costs a token of the reset budget (MadeYouReset). A stream error on an
// idle stream is a connection error: RST_STREAM must not name an idle stream.
func (c *Conn) streamError(id uint32, code ErrCode, reason string) error {
	if c.idle(id) {
		return c.fail(code, reason+" (idle stream)")
	}
	c.ctr.StreamErrors.Add(1)
	c.lastErr = streamErrorInfo{id, code, reason}
	if s := c.streams[id]; s != nil {
		c.endStream(s, code)
	}
	c.writeRST(id, code)
	if err := c.control(); err != nil {
		return err
	}
	return c.spendReset()
}

// endStream ends s abnormally: the owner is told (Handler.Reset) and the stream recycled.
func (c *Conn) endStream(s *Stream, code ErrCode) {
	s.remoteDone, s.localDone = true, true
	if s.linger == 0 { // a lingering stream's owner was done with it already
		c.h.Reset(s, code)
	}
	c.release(s)
}

// release removes an ended stream; the memory is recycled when the outermost call returns.
func (c *Conn) release(s *Stream) {
	if s.released {
		return
	}
	s.released = true
	c.unlist(s)
	if s.linger != 0 {
		for i, l := range c.lingering {
			if l == s {
				c.lingering = append(c.lingering[:i], c.lingering[i+1:]...)
				break
			}
		}
	}
	// Request bytes the owner held and will not consume go back to the connection window.
	c.creditConn(s.recvHeld)
	s.recvHeld = 0
	delete(c.streams, s.id)
	if len(c.streams) == 0 {
		c.idleSince = c.now
	}
	c.releaseQ = append(c.releaseQ, s)
}

// wasReset reports whether Ballast reset stream id recently.
func (c *Conn) wasReset(id uint32) bool {
	for _, r := range c.reset {
		if r == id {
			return true
		}
	}
	return false
}

func (c *Conn) writeRST(id uint32, code ErrCode) {
	b := c.grow(frameHeaderLen + 4)
	b = appendFrameHeader(b, 4, frameRSTStream, 0, id)
	c.wrote(appendUint32(b, uint32(code)))
	c.reset[c.resetN%resetRingSize] = id
	c.resetN++
}

// fail ends the connection with a connection error: GOAWAY, every stream reset.
func (c *Conn) fail(code ErrCode, reason string) error {
	if c.err != nil {
		return c.err
	}
	c.err = &ConnError{Code: code, Reason: reason}
	c.ctr.ConnErrors.Add(1)
	c.writeGoAway(code, reason)
	c.hb.active = false
	for _, s := range c.streams {
		c.endStream(s, code)
	}
	return c.err
}

func (c *Conn) writeGoAway(code ErrCode, debug string) {
	b := c.grow(frameHeaderLen + 8 + len(debug))
	b = appendFrameHeader(b, 8+len(debug), frameGoAway, 0, 0)
	last := c.maxClientID
	if c.client {
		last = 0 // the last stream the server opened: none (no push)
	}
	b = appendUint32(b, last)
	b = appendUint32(b, uint32(code))
	c.wrote(append(b, debug...))
	c.goAwaySent, c.goAwayLast = true, last
}

// Cancel ends s from the owner's side with RST_STREAM code (a response it cannot complete:
// its backend broke after the head). The stream is gone at once; the Handler is not told
// (no Reset), and the reset does not count against the client's reset budget.
func (c *Conn) Cancel(s *Stream, code ErrCode) {
	if s.released || c.err != nil {
		return
	}
	c.enter()
	defer c.leave()
	s.remoteDone, s.localDone = true, true
	c.writeRST(s.id, code)
	c.release(s)
}

// Shutdown starts a graceful close: GOAWAY NO_ERROR naming the last stream the client
// opened; the streams open go on, new ones are refused, and Done reports true once none is
// left.
func (c *Conn) Shutdown() {
	if c.err != nil || c.goAwaySent {
		return
	}
	c.enter()
	defer c.leave()
	c.writeGoAway(ErrCodeNo, "")
}

// Abort ends every stream (Handler.Reset with CANCEL) without writing anything: the owner
// calls it when the socket broke or it closes the connection.
func (c *Conn) Abort() {
	c.enter()
	defer c.leave()
	if c.err == nil {
		c.err = &ConnError{Code: ErrCodeCancel, Reason: "connection aborted"}
	}
	for _, s := range c.streams {
		c.endStream(s, ErrCodeCancel)
	}
}
