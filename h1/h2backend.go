//go:build linux

package h1

import (
	"bytes"
	"errors"
	"net/netip"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
	"golang.org/x/net/http2/hpack"

	"ballast/config"
	"ballast/evloop"
	"ballast/evloop/tlsconn"
	"ballast/h2mux"
	"ballast/httpcore"
	"ballast/upstream"
)

// HTTP/2 backends (pools with protocol h2c, and h2 over TLS: h2backendtls.go) on the shard. Each shard keeps, per backend, a
// few HTTP/2 connections (h2bConn), each an h2mux client Conn fed by the shard, carrying
// many streams. A request to such a pool is an attempt as to an HTTP/1.1 backend: its
// backendConn is virtual (bc.h2 set): no socket of its own, it is one stream of a
// connection. What the exchange writes to it (the forwarded HTTP/1.1 head, the body as
// Content-Length bytes or chunks, the chunked trailers) becomes HEADERS, DATA and trailer
// HEADERS; what it reads from it is the response rendered as HTTP/1.1 (the head, the body
// as it is with a content-length, chunked without one, the trailers as chunked trailers), so
// that the engine's response path (checks, the core's response side, HTTP/1.1 and HTTP/2
// clients, trailers to both) serves HTTP/2 backends unchanged, as h2stream.go does for
// HTTP/2 clients. The cost is one small head rendered and parsed per stream.
//
// Flow control both ways: a stream's rendered response holds at most the stream's receive
// window (h2bStreamWindow) plus framing; the window goes back to the backend
// (WINDOW_UPDATE) only as the exchange reads the bytes, so a client that does not take its
// response stops the backend's stream. A request body the backend's window does not take is
// held (at most one write, as a socket's) and the exchange's writes wait (ErrAgain), so the
// client is not read meanwhile.
//
// Bounds: streams per connection are the backend's SETTINGS_MAX_CONCURRENT_STREAMS (and
// h2bMaxStreams); beyond, another connection (up to h2bMaxConns per backend per shard); beyond
// those, the stream waits for a slot (up to h2bMaxWaiting per backend per shard, counted in
// H2BackendWaits) within timeouts.connect; past that bound the attempt fails at once
// (H2BackendOverflows). A GOAWAY from the backend refuses the streams it did not process
// (REFUSED_STREAM: sent again, whatever the method, as a request that never left), and the
// connection takes no new streams and closes when its last one ends. The connection's
// timers are the Conn's (SETTINGS acknowledgement, stalls, PING after silence, idle for
// timeouts.idle) on the connection's timer on the shard's wheel; the streams' are their
// backendConn's (timeouts.connect to a stream slot, timeouts.response).
//
// The socket is read and written through h2bIO: the descriptor for h2c, the TLS client
// connection for h2 (h2backendtls.go), the rest unchanged.

const (
	h2bMaxConns     = 8   // HTTP/2 connections per backend per shard
	h2bMaxStreams   = 100 // streams per connection, at most (besides the backend's own limit)
	h2bMaxWaiting   = 256 // streams waiting for a slot per backend per shard
	h2bStreamWindow = 256 << 10
	h2bConnWindow   = 4 << 20
)

var (
	errH2Reset    = errors.New("HTTP/2 backend stream reset")
	errH2Refused  = errors.New("HTTP/2 backend refused the stream (GOAWAY or REFUSED_STREAM)")
	errH2Conn     = errors.New("HTTP/2 backend connection failed")
	errH2Overflow = errors.New("HTTP/2 backend: too many streams waiting")
	errH2Upgrade  = errors.New("HTTP/2 backend: no Upgrade")
)

// h2Pool reports whether ps reaches its backends over HTTP/2 on the shards.
func h2Pool(ps *httpcore.Pool) bool {
	return ps != nil && ps.Conf != nil && (ps.Conf.Protocol == config.BackendH2C || ps.Conf.Protocol == config.BackendH2)
}

// h2bIO reads and writes a backend connection's socket without blocking (evloop.FD's
// contract): the descriptor itself for h2c, the tlsconn.Conn for h2 (h2backendtls.go).
type h2bIO interface {
	Read(p []byte) (int, error)
	Write(p []byte) (int, error)
}

// h2bShard is a shard's HTTP/2 backend state: the streams queued by Conn events, free
// stream records, counters.
type h2bShard struct {
	q       []*h2bStream
	running bool
	free    []*h2bStream
	all     []*h2bConn // every open HTTP/2 backend connection of the shard
	mux     h2mux.Counters
	st      h2bStats
}

type h2bStats struct {
	conns, connects, streams, waiting, waits, overflows, goaways, refused, connectFailures, tlsFailures atomic.Int64
}

// H2BackendStats sums the shards' HTTP/2 backend counters.
func (e *Engine) H2BackendStats() H2BackendStats {
	var s H2BackendStats
	for _, sh := range e.shards {
		st, m := &sh.h2b.st, &sh.h2b.mux
		s.Conns += st.conns.Load()
		s.Connects += st.connects.Load()
		s.Streams += st.streams.Load()
		s.Waiting += st.waiting.Load()
		s.Waits += st.waits.Load()
		s.Overflows += st.overflows.Load()
		s.GoAways += st.goaways.Load()
		s.Refused += st.refused.Load()
		s.ConnectFailures += st.connectFailures.Load()
		s.TLSFailures += st.tlsFailures.Load()
		s.Mux.StreamErrors += m.StreamErrors.Load()
		s.Mux.MalformedResponses += m.MalformedResponses.Load()
		s.Mux.StallResets += m.StallResets.Load()
		s.Mux.ConnErrors += m.ConnErrors.Load()
		s.Mux.PingTimeouts += m.PingTimeouts.Load()
		s.Mux.RefusedStreams += m.RefusedStreams.Load()
		s.Mux.PeerResets += m.ClientResets.Load()
		s.Mux.FieldsDropped += m.ResponseFieldsDropped.Load()
	}
	return s
}

// closeH2b closes every HTTP/2 backend connection of the shard (closeAll).
func (sh *shard) closeH2b() {
	for len(sh.h2b.all) > 0 {
		sh.h2b.all[len(sh.h2b.all)-1].close()
	}
}

// h2bPool is one shard's HTTP/2 connections to one backend, and the streams waiting for a
// slot on them.
type h2bPool struct {
	conns   []*h2bConn
	waiting []*h2bStream
}

// h2bConn is one HTTP/2 connection to a backend, owned by the shard that opened it.
type h2bConn struct {
	evloop.FD
	io         h2bIO
	timer      evloop.Timer
	sh         *shard
	b          *upstream.Backend
	pool       *h2bPool
	mux        *h2mux.Conn
	connecting bool
	dead       bool
	kicked     bool
	armed      int64
	connectBy  int64
	opened     int            // streams opened on it
	ap         netip.AddrPort // where it connects (and further connections for its waiters)
	ps         *httpcore.Pool // the pool whose timeouts it was opened with
	hs, tls    *tlsconn.Conn  // protocol h2: the handshake in progress, then the connection
	scheme     string         // :scheme of its requests: http (h2c), https (h2)
	tlsFor     *config.BackendTLS
}

// sameTLS reports whether the connection was made under ps's tls (none for h2c): pointers
// first (a table's pool keeps its section), then by value.
func (c *h2bConn) sameTLS(ps *httpcore.Pool) bool {
	want := ps.Conf.TLS
	switch {
	case want == c.tlsFor:
		return true
	case want == nil || c.tlsFor == nil || *want != *c.tlsFor:
		return false
	}
	c.tlsFor = want
	return true
}

// h2bStream is the HTTP/2 side of a virtual backendConn: one stream of an h2bConn.
type h2bStream struct {
	bc   *backendConn
	gen  uint32 // bc.gen when attached
	conn *h2bConn
	s    *h2mux.Stream

	// The request, as the exchange writes it.
	head    []byte // the head while it is incomplete
	wmode   uint8
	remain  int64
	dec     chunkDecoder
	pend    []byte // DATA the backend's window did not take yet
	pendEnd bool   // END_STREAM after pend
	trl     []byte // request trailers to send after pend
	wdone   bool
	wend    bool // END_STREAM went out

	// The response, rendered as HTTP/1.1 for the exchange to read.
	rbuf    []byte
	roff    int
	held    int64 // body bytes in rbuf not yet given back (Consumed)
	rmode   uint8
	rdone   bool // the response is complete in rbuf
	rerr    error
	refused bool

	opened  bool // the request head went out
	waiting bool
	queued  bool
	ev      evloop.Events
}

// Modes of the request body (wmode) and of the response body (rmode).
const (
	hmNone uint8 = iota
	hmLength
	hmChunked
	hmDrop
)

func (st *backendState) h2pool(sh *shard) *h2bPool {
	si := &st.shards[sh.id]
	if si.h2 == nil {
		si.h2 = new(h2bPool)
	}
	return si.h2
}

// duplex reports an exchange whose request body goes on after the response head began: an
// HTTP/2 client's stream to an HTTP/2 backend (gRPC's bidirectional streams). Elsewhere the
// body stops there (HTTP/1.1 has no such exchange to offer a backend or a client).
func (ex *exchange) duplex() bool {
	if _, ok := ex.c.(*h2stream); !ok {
		return false
	}
	return ex.a != nil && ex.a.bc != nil && ex.a.bc.h2 != nil
}

// connectH2 starts the attempt on a stream of an HTTP/2 connection to its backend: one that
// has a slot, else a new connection, else a wait for a slot.
func (a *attempt) connectH2(ap netip.AddrPort) {
	ex, sh := a.ex, a.ex.sh
	if ex.upgrade {
		a.failed(httpcore.BadGateway, errH2Upgrade)
		return
	}
	bc := sh.newBackend(a.b)
	hs := sh.newH2bStream()
	bc.h2, hs.bc, hs.gen = hs, bc, bc.gen
	a.attach(bc)
	pool := bc.st.h2pool(sh)
	if c := pool.slot(ex.ps); c != nil {
		hs.conn = c
		a.send()
		return
	}
	if len(pool.waiting) >= h2bMaxWaiting {
		sh.h2b.st.overflows.Add(1)
		a.failed(httpcore.Cancelled, errH2Overflow) // Ballast's bound, not the backend's failure
		return
	}
	bc.state = bcConnecting
	bc.arm(bConnect, sh.now+int64(ex.ps.ConnectTimeout))
	hs.waiting = true
	pool.waiting = append(pool.waiting, hs)
	sh.h2b.st.waiting.Add(1)
	if len(pool.conns) < h2bMaxConns && !pool.connecting() {
		sh.dialH2(a.b, pool, ap, ex.ps)
	} else {
		sh.h2b.st.waits.Add(1)
	}
}

// slot returns a live connection with a stream slot free, made under ps's tls, or nil. One
// made under another tls (a reload changed it, or the protocol) takes no more streams: it
// goes away (GOAWAY) once its streams end.
func (p *h2bPool) slot(ps *httpcore.Pool) *h2bConn {
	for _, c := range p.conns {
		if c.dead || c.connecting || c.mux.Available() <= 0 {
			continue
		}
		if !c.sameTLS(ps) {
			c.mux.Shutdown()
			c.kick()
			continue
		}
		return c
	}
	return nil
}

func (p *h2bPool) connecting() bool {
	for _, c := range p.conns {
		if c.connecting {
			return true
		}
	}
	return false
}

// dispatch gives the waiting streams the slots that are free, and opens another connection
// for the rest when it may.
func (p *h2bPool) dispatch(sh *shard, ap netip.AddrPort, ps *httpcore.Pool) {
	for len(p.waiting) > 0 {
		hs := p.waiting[0]
		bc := hs.bc
		live := bc != nil && bc.gen == hs.gen && bc.a != nil
		var c *h2bConn
		if live {
			if c = p.slot(bc.a.ex.ps); c == nil {
				ps = bc.a.ex.ps // a connection for it
				break
			}
		}
		p.waiting[0] = nil
		p.waiting = p.waiting[1:]
		hs.waiting = false
		sh.h2b.st.waiting.Add(-1)
		if !live {
			continue
		}
		hs.conn = c
		bc.Shard().Stop(&bc.timer)
		bc.a.connected(nil)
	}
	if len(p.waiting) == 0 {
		p.waiting = nil
	} else if ap.IsValid() && len(p.conns) < h2bMaxConns && !p.connecting() {
		sh.dialH2(p.waiting[0].bc.b, p, ap, ps)
	}
}

// dialH2 opens a new HTTP/2 connection to b.
func (sh *shard) dialH2(b *upstream.Backend, pool *h2bPool, ap netip.AddrPort, ps *httpcore.Pool) {
	c := &h2bConn{sh: sh, b: b, pool: pool, connecting: true}
	c.timer.Init(c)
	c.io, c.scheme = &c.FD, "http"
	if c.tlsFor = ps.Conf.TLS; c.tlsFor != nil {
		c.scheme = "https"
	}
	idle := config.Or(ps.Conf.Timeouts.Idle.Duration, config.DefaultBackendIdle)
	c.mux = h2mux.NewClientConn(c, h2mux.Config{
		MaxConcurrentStreams: h2bMaxStreams,
		StreamWindow:         h2bStreamWindow,
		ConnWindow:           h2bConnWindow,
		StallTimeout:         max(2*ps.ResponseTimeout, time.Second), // a backstop: timeouts.response ends a stalled attempt first
		IdleTimeout:          idle,
		PingAfter:            max(idle/2, time.Second),
		PingTimeout:          max(ps.ConnectTimeout, 100*time.Millisecond),
		Now:                  sh.clock,
		Buffers:              sh.muxBufs,
		Counters:             &sh.h2b.mux,
	})
	sh.h2b.st.connects.Add(1)
	sh.st.connects.Add(1)
	done, err := sh.s.Connect(&c.FD, ap, c)
	if err != nil {
		sh.st.connectFailures.Add(1)
		sh.h2b.st.connectFailures.Add(1)
		c.dead = true
		pool.failWaiting(sh, err)
		return
	}
	pool.conns = append(pool.conns, c)
	sh.h2b.all = append(sh.h2b.all, c)
	sh.h2b.st.conns.Add(1)
	sh.st.backendConns.Add(1)
	c.connectBy = sh.now + int64(ps.ConnectTimeout)
	c.ap, c.ps = ap, ps
	if done {
		c.connected(nil, ap, ps)
		return
	}
	sh.s.Arm(&c.timer, c.connectBy)
}

// failWaiting fails the streams waiting for a connection that could not be made.
func (p *h2bPool) failWaiting(sh *shard, err error) {
	w := p.waiting
	p.waiting = nil
	for _, hs := range w {
		hs.waiting = false
		sh.h2b.st.waiting.Add(-1)
		if bc := hs.bc; bc != nil && bc.gen == hs.gen && bc.a != nil {
			bc.sh.st.connectFailures.Add(1)
			bc.a.failed(httpcore.Connect, err)
		}
	}
}

func (c *h2bConn) connected(err error, ap netip.AddrPort, ps *httpcore.Pool) {
	c.connecting = false
	if err != nil {
		c.fail(err) // h2backendtls.go
		return
	}
	if c.tlsFor != nil && c.tls == nil {
		c.connecting = true
		c.startTLS() // h2: the streams get slots once it is back (h2backendtls.go)
		return
	}
	c.after()
	if !c.dead {
		c.pool.dispatch(c.sh, ap, ps)
	}
}

func (p *h2bPool) anyLive() bool {
	for _, c := range p.conns {
		if !c.dead {
			return true
		}
	}
	return false
}

// Event is the socket's readiness, or the deferred flush (kick).
func (c *h2bConn) Event(ev evloop.Events) {
	if c.dead {
		return
	}
	sh := c.sh
	sh.now = sh.s.Now()
	if ev == evloop.Deferred { // kick
		c.kicked = false
		c.after()
		return
	}
	if c.connecting {
		if c.hs != nil || c.Ready&(evloop.Writable|evloop.Hangup) == 0 {
			return // a TLS handshake in progress reads and writes off the shard
		}
		c.connected(c.ConnectResult(), c.ap, c.ps)
		return
	}
	for !c.dead && c.Ready&evloop.Readable != 0 {
		buf := sh.s.Buf()
		n, err := c.io.Read(buf)
		if err == evloop.ErrAgain {
			break
		}
		if err != nil {
			c.close()
			return
		}
		_ = c.mux.Feed(buf[:n])
		sh.runH2b()
	}
	if len(c.pool.waiting) > 0 && !c.dead {
		c.pool.dispatch(sh, c.ap, c.ps) // the backend's SETTINGS, or ended streams, freed slots
	}
	c.after()
}

// Expire runs the connection's timers: the connect's, then the Conn's.
func (c *h2bConn) Expire(now int64) {
	if c.dead {
		return
	}
	c.sh.now = now
	c.armed = 0
	if c.hs != nil {
		c.handshakeFailed(errHandshakeTimeout)
		return
	}
	if c.connecting {
		c.connected(errConnectTimeout, c.ap, c.ps)
		return
	}
	_ = c.mux.Tick()
	c.sh.runH2b()
	c.after()
}

// after writes what the Conn framed, closes a connection that is done, and sets the timer.
func (c *h2bConn) after() {
	for !c.dead && !c.connecting {
		out := c.mux.Output()
		if len(out) == 0 || c.Ready&evloop.Writable == 0 {
			break
		}
		n, err := c.io.Write(out)
		if err != nil && err != evloop.ErrAgain {
			c.close()
			return
		}
		if n > 0 {
			c.mux.Advance(n)
			c.sh.runH2b()
		}
		if n < len(out) {
			break
		}
	}
	if c.dead || c.connecting {
		return
	}
	if c.mux.Done() && len(c.mux.Output()) == 0 {
		c.close()
		return
	}
	switch d := c.mux.Deadline(); {
	case d == 0:
		if c.armed != 0 {
			c.armed = 0
			c.sh.s.Stop(&c.timer)
		}
	case d != c.armed:
		c.armed = d
		c.sh.s.Arm(&c.timer, d)
	}
}

// kick has the connection's output written after the shard's current events.
func (c *h2bConn) kick() {
	if !c.kicked && !c.dead {
		c.kicked = true
		c.sh.s.Later(c)
	}
}

// close ends the connection: its streams are reset (their exchanges fail or retry).
func (c *h2bConn) close() {
	if c.dead {
		return
	}
	c.dead = true
	sh := c.sh
	c.mux.Abort()
	sh.runH2b()
	sh.s.Stop(&c.timer)
	c.closeTLS()
	if c.Registered() {
		c.FD.Close()
	}
	for i, x := range c.pool.conns {
		if x == c {
			c.pool.conns = append(c.pool.conns[:i], c.pool.conns[i+1:]...)
			break
		}
	}
	for i, x := range sh.h2b.all {
		if x == c {
			sh.h2b.all = append(sh.h2b.all[:i], sh.h2b.all[i+1:]...)
			break
		}
	}
	sh.h2b.st.conns.Add(-1)
	sh.st.backendConns.Add(-1)
	if len(c.pool.waiting) > 0 && c.ps != nil {
		c.pool.dispatch(sh, c.ap, c.ps)
	}
}

// The h2mux.ClientHandler events, inside the Conn's calls: they render and queue.

func (c *h2bConn) Response(s *h2mux.Stream, r *h2mux.Response, end bool) {
	hs, ok := s.User.(*h2bStream)
	if !ok {
		return
	}
	hs.renderHead(r, end)
	hs.post(evloop.Readable)
}

func (c *h2bConn) Data(s *h2mux.Stream, p []byte, end bool) {
	hs, ok := s.User.(*h2bStream)
	if !ok {
		c.mux.Consumed(s, len(p))
		return
	}
	switch hs.rmode {
	case hmLength:
		hs.rbuf = append(hs.rbuf, p...)
	case hmChunked:
		if len(p) > 0 {
			hs.rbuf = appendChunk(hs.rbuf, p)
		}
		if end {
			hs.rbuf = appendLastChunk(hs.rbuf, nil)
		}
	default:
		c.mux.Consumed(s, len(p))
		p = nil
	}
	hs.held += int64(len(p))
	if end {
		hs.responseEnded()
	}
	hs.post(evloop.Readable)
}

func (c *h2bConn) Trailers(s *h2mux.Stream, fields []hpack.HeaderField) {
	hs, ok := s.User.(*h2bStream)
	if !ok {
		return
	}
	if hs.rmode == hmChunked {
		var t []byte
		for _, f := range fields {
			t = append(append(append(append(t, f.Name...), ": "...), f.Value...), "\r\n"...)
		}
		hs.rbuf = appendLastChunk(hs.rbuf, t)
	} // a Content-Length body cannot carry them to an HTTP/1.1 reader: dropped
	hs.responseEnded()
	hs.post(evloop.Readable)
}

func (c *h2bConn) Reset(s *h2mux.Stream, code h2mux.ErrCode) {
	hs, ok := s.User.(*h2bStream)
	if !ok {
		return
	}
	hs.s = nil
	switch {
	case code == h2mux.ErrCodeNo && hs.rdone:
		hs.wdone = true // the response is whole: the rest of the request is not wanted
	case code == h2mux.ErrCodeRefusedStream:
		hs.refused, hs.rerr = true, errH2Refused
		c.sh.h2b.st.refused.Add(1)
	default:
		hs.rerr = errH2Reset
	}
	hs.post(evloop.Readable | evloop.Writable)
}

func (c *h2bConn) Writable(s *h2mux.Stream) {
	if hs, ok := s.User.(*h2bStream); ok {
		hs.flushPend()
		if len(hs.pend) == 0 {
			hs.post(evloop.Writable)
		}
	}
}

func (c *h2bConn) GoAway(h2mux.ErrCode, []byte) { c.sh.h2b.st.goaways.Add(1) }

func (hs *h2bStream) post(ev evloop.Events) {
	hs.ev |= ev
	if !hs.queued {
		hs.queued = true
		sh := hs.conn.sh
		sh.h2b.q = append(sh.h2b.q, hs)
	}
}

// runH2b runs the stream events queued inside Conn calls, outside them.
func (sh *shard) runH2b() {
	if sh.h2b.running {
		return
	}
	sh.h2b.running = true
	for i := 0; i < len(sh.h2b.q); i++ {
		hs := sh.h2b.q[i]
		sh.h2b.q[i] = nil
		hs.queued = false
		ev := hs.ev
		hs.ev = 0
		bc := hs.bc
		if bc == nil || bc.gen != hs.gen {
			continue
		}
		if hs.refused && bc.a != nil {
			// Never processed by the backend: the request is as new (Outcome.Fresh).
			bc.a.reused, bc.a.wrote = true, false
		}
		bc.Ready |= ev
		bc.Event(ev)
	}
	sh.h2b.q = sh.h2b.q[:0]
	sh.h2b.running = false
}

// The virtual backendConn's socket: Read, Write, close.

// h2Read reads the rendered response.
func (hs *h2bStream) read(p []byte) (int, error) {
	if hs.roff == len(hs.rbuf) {
		hs.bc.Ready &^= evloop.Readable
		if hs.rerr != nil {
			return 0, hs.rerr
		}
		return 0, evloop.ErrAgain
	}
	n := copy(p, hs.rbuf[hs.roff:])
	hs.roff += n
	give := min(int64(n), hs.held)
	if hs.roff == len(hs.rbuf) {
		give = hs.held
		hs.roff, hs.rbuf = 0, hs.rbuf[:0]
		if cap(hs.rbuf) > 64<<10 {
			hs.bc.sh.s.PutBuf(hs.rbuf)
			hs.rbuf = nil
		}
	}
	if give > 0 {
		hs.held -= give
		if hs.s != nil {
			hs.conn.mux.Consumed(hs.s, int(give))
			hs.conn.kick()
		}
	}
	return n, nil
}

// write takes the exchange's HTTP/1.1 request bytes: the head, then the body.
func (hs *h2bStream) write(p []byte) (int, error) {
	if hs.rerr != nil {
		return 0, hs.rerr
	}
	if hs.wdone {
		return len(p), nil
	}
	if len(hs.pend) > 0 {
		hs.flushPend()
		if len(hs.pend) > 0 {
			hs.bc.Ready &^= evloop.Writable
			return 0, evloop.ErrAgain
		}
	}
	n := len(p)
	if !hs.opened {
		h := p
		if hs.head != nil {
			hs.head = append(hs.head, p...)
			h = hs.head
		}
		end := bytes.Index(h, crlfcrlf)
		if end < 0 {
			if len(h) > maxRespHead {
				return 0, errH2Conn
			}
			if hs.head == nil {
				hs.head = append([]byte(nil), p...)
			}
			return n, nil
		}
		if err := hs.open(h[:end+2]); err != nil {
			return 0, err
		}
		hs.opened = true
		p = h[end+4:]
	}
	hs.body(p)
	hs.head = nil
	hs.conn.kick()
	return n, nil
}

var crlfcrlf = []byte("\r\n\r\n")

// open parses the forwarded head (the engine's own rendering: request line, fields) and
// sends it as the stream's HEADERS.
func (hs *h2bStream) open(head []byte) error {
	c := hs.conn
	line, rest, _ := bytes.Cut(head, crlf)
	method, line, _ := bytes.Cut(line, sp)
	target, _, _ := bytes.Cut(line, sp)
	// Views of head, which outlives the Open call that copies them into the header block.
	authority, path := "", b2s(target)
	if i := bytes.Index(target, []byte("://")); i > 0 && target[0] != '/' {
		t := target[i+3:]
		j := bytes.IndexByte(t, '/')
		if j < 0 {
			authority, path = b2s(t), "/"
		} else {
			authority, path = b2s(t[:j]), b2s(t[j:])
		}
	}
	hs.wmode = hmNone
	chunked := false
	for p := rest; len(p) > 0; {
		l, r, _ := bytes.Cut(p, crlf)
		p = r
		k, v, ok := bytes.Cut(l, colon)
		if !ok {
			continue
		}
		v = bytes.TrimSpace(v)
		switch {
		case httpcore.LowerEqualFold(k, "host"):
			if authority == "" {
				authority = b2s(v)
			}
		case httpcore.LowerEqualFold(k, "content-length"):
			n, err := strconv.ParseInt(b2s(v), 10, 64)
			if err == nil && n > 0 {
				hs.wmode, hs.remain = hmLength, n
			}
		case httpcore.LowerEqualFold(k, "transfer-encoding"):
			chunked = true
		}
	}
	if chunked {
		hs.wmode = hmChunked
		hs.dec.reset()
	}
	s, hb, err := c.mux.Open(b2s(method), c.scheme, authority, path)
	if err != nil {
		return errH2Conn
	}
	hs.s = s
	s.User = hs
	c.sh.h2b.st.streams.Add(1)
	if c.opened > 0 && hs.bc.a != nil {
		// A connection that carried streams before is a pooled one: a stream it loses is the
		// keep-alive race (httpcore.Outcome.Fresh), sent again on a new connection if
		// idempotent or never sent.
		hs.bc.a.reused = true
	}
	c.opened++
	for p := rest; len(p) > 0; {
		l, r, _ := bytes.Cut(p, crlf)
		p = r
		k, v, ok := bytes.Cut(l, colon)
		if !ok || httpcore.LowerEqualFold(k, "host") {
			continue
		}
		hb.AddBytes(k, bytes.TrimSpace(v))
	}
	if err := hb.Send(hs.wmode == hmNone); err != nil {
		c.mux.Cancel(s, h2mux.ErrCodeInternal)
		hs.s = nil
		return errH2Conn
	}
	if hs.wmode == hmNone {
		hs.requestEnded()
	}
	return nil
}

var crlf = []byte("\r\n")

// body sends request body bytes (as the exchange frames them) as DATA; what the windows do
// not take waits in pend.
func (hs *h2bStream) body(p []byte) {
	switch hs.wmode {
	case hmLength:
		k := int(min(int64(len(p)), hs.remain))
		hs.remain -= int64(k)
		hs.data(p[:k], hs.remain == 0)
	case hmChunked:
		for len(p) > 0 && !hs.dec.done() {
			n, piece, err := hs.dec.decode(p)
			if err != nil {
				hs.rerr = errH2Reset
				return
			}
			p = p[n:]
			if len(piece) > 0 {
				hs.data(piece, false)
			}
		}
		if hs.dec.done() {
			if len(hs.dec.trailer) > 0 {
				hs.trl = append(hs.trl[:0], hs.dec.trailer...)
			}
			hs.data(nil, len(hs.trl) == 0)
			if len(hs.pend) == 0 {
				hs.sendTrailers()
			}
		}
	}
}

func (hs *h2bStream) data(p []byte, end bool) {
	if len(hs.pend) > 0 || hs.pendEnd {
		hs.pend = append(hs.pend, p...)
		hs.pendEnd = hs.pendEnd || end
		return
	}
	if hs.s == nil {
		return
	}
	n, err := hs.conn.mux.WriteData(hs.s, p, end)
	if err != nil {
		return
	}
	if n < len(p) {
		hs.pend = append(hs.bc.sh.s.GetBuf(len(p) - n)[:0], p[n:]...)
		hs.pendEnd = end
	} else if end {
		hs.requestEnded()
	}
}

// flushPend hands the Conn what waited for the windows.
func (hs *h2bStream) flushPend() {
	if hs.s == nil || len(hs.pend) == 0 && !hs.pendEnd {
		return
	}
	n, err := hs.conn.mux.WriteData(hs.s, hs.pend, hs.pendEnd)
	if err != nil {
		return
	}
	hs.pend = hs.pend[:copy(hs.pend, hs.pend[n:])]
	if len(hs.pend) == 0 {
		end := hs.pendEnd
		hs.bc.sh.s.PutBuf(hs.pend)
		hs.pend, hs.pendEnd = nil, false
		if end {
			hs.requestEnded()
		}
		hs.sendTrailers()
	}
	hs.conn.kick()
}

func (hs *h2bStream) sendTrailers() {
	if len(hs.trl) == 0 || hs.s == nil {
		return
	}
	hb := hs.conn.mux.Trailers(hs.s)
	for p := hs.trl; len(p) > 0; {
		l, r, _ := bytes.Cut(p, crlf)
		p = r
		if k, v, ok := bytes.Cut(l, colon); ok {
			hb.AddBytes(k, bytes.TrimSpace(v))
		}
	}
	hs.trl = hs.trl[:0]
	if err := hb.Send(true); err != nil {
		hs.conn.mux.Cancel(hs.s, h2mux.ErrCodeInternal)
		hs.s = nil
		return
	}
	hs.requestEnded()
}

// renderHead renders the response head as HTTP/1.1 for the exchange's reader, with the
// framing of the body that follows.
func (hs *h2bStream) renderHead(r *h2mux.Response, end bool) {
	b := hs.rbuf
	if b == nil {
		b = hs.bc.sh.s.GetBuf(512)[:0]
	}
	b = append(b, "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(r.Status), 10)
	b = append(b, ' ')
	b = append(b, fasthttp.StatusMessage(r.Status)...)
	b = append(b, "\r\n"...)
	announced := false // trailers announced (RFC 9110 §6.6.2)
	for _, f := range r.Fields {
		b = append(append(append(append(b, f.Name...), ": "...), f.Value...), "\r\n"...)
		announced = announced || f.Name == "trailer"
	}
	head := hs.bc.a != nil && hs.bc.a.ex.method == mHead
	switch {
	case head || r.Status == 204 || r.Status == 304:
		hs.rmode = hmDrop
	case end:
		if r.ContentLength < 0 {
			b = append(b, "content-length: 0\r\n"...)
		}
		hs.rmode = hmDrop
	case r.ContentLength >= 0 && !(announced && hs.toH2Client()):
		// (A body with a length and announced trailers goes chunked to an HTTP/2 client, its
		// content-length kept, so that the trailers follow it; an HTTP/1.1 client's
		// Content-Length body cannot carry them: dropped, as RFC 9110 §6.5.1 allows.)
		hs.rmode = hmLength
	default:
		b = append(b, "transfer-encoding: chunked\r\n"...)
		hs.rmode = hmChunked
	}
	hs.rbuf = append(b, "\r\n"...)
	if end {
		hs.responseEnded()
	}
}

// toH2Client reports a stream whose response goes to an HTTP/2 client.
func (hs *h2bStream) toH2Client() bool {
	if hs.bc.a == nil {
		return false
	}
	_, ok := hs.bc.a.ex.c.(*h2stream)
	return ok
}

// responseEnded and requestEnded note either side's END_STREAM: with both, the Conn recycles
// the stream, which is forgotten here.
func (hs *h2bStream) responseEnded() {
	hs.rdone = true
	if hs.wend {
		hs.s = nil
	}
}

func (hs *h2bStream) requestEnded() {
	hs.wend = true
	if hs.rdone {
		hs.s = nil
	}
}

// attachments to backendConn

// closeH2 ends a virtual backendConn: its stream is reset unless it ended, its record freed.
func (bc *backendConn) closeH2() {
	sh := bc.sh
	hs := bc.h2
	sh.s.Stop(&bc.timer)
	bc.releaseIn()
	if hs.waiting {
		p := bc.st.h2pool(sh)
		for i, w := range p.waiting {
			if w == hs {
				p.waiting = append(p.waiting[:i], p.waiting[i+1:]...)
				sh.h2b.st.waiting.Add(-1)
				break
			}
		}
	}
	c := hs.conn
	if hs.s != nil {
		hs.s.User = nil
		c.mux.Cancel(hs.s, h2mux.ErrCodeCancel)
		c.kick()
	}
	hs.release(sh)
	if c != nil && len(c.pool.waiting) > 0 && c.ps != nil {
		c.pool.dispatch(sh, c.ap, c.ps) // its slot (the Conn's) is free
	}
	bc.h2 = nil
	sh.freeBackend(bc)
}

func (sh *shard) newH2bStream() *h2bStream {
	if n := len(sh.h2b.free); n > 0 {
		hs := sh.h2b.free[n-1]
		sh.h2b.free = sh.h2b.free[:n-1]
		return hs
	}
	return new(h2bStream)
}

func (hs *h2bStream) release(sh *shard) {
	if hs.rbuf != nil {
		sh.s.PutBuf(hs.rbuf)
	}
	if hs.pend != nil {
		sh.s.PutBuf(hs.pend)
	}
	trl := hs.trl[:0]
	*hs = h2bStream{trl: trl}
	if len(sh.h2b.free) < maxFree {
		sh.h2b.free = append(sh.h2b.free, hs)
	}
}
