//go:build linux

package h1

import (
	"bytes"

	"golang.org/x/net/http2/hpack"

	"ballast/accesslog"
	"ballast/evloop"
	"ballast/h2mux"
	"ballast/httpcore"
)

// HTTP/2 connections on the shard (h2c with prior knowledge): a connection of an h2c listener
// whose first bytes are the client preface gets an h2mux.Conn, Ballast's HTTP/2 state machine,
// which has no I/O of its own. The client connection's socket stays the clientConn's; its
// reads (into the shard's buffer) are fed to the Conn, and what the Conn frames is written
// without blocking, the rest when the socket is writable again; the Conn's timers (SETTINGS
// acknowledgement, output and zero-window stalls, PING on silence, idle) run on the
// connection's timer on the shard's wheel. No goroutine serves a connection or a stream: each
// stream is an h2stream, the client side (front) of an h1 exchange, so that its request goes
// through the HTTP core and the shard's HTTP/1.1 backend pools as an HTTP/1.1 request does.
//
// Handler events (Request, Data, Trailers, Reset, Writable) arrive inside the Conn's calls:
// they only note what happened and queue the stream on its shard (postH2); the queue is run
// once the Conn's call has returned, so that an exchange never runs inside one.

// http2 is the version the access log gives a request that came over HTTP/2.
var proto2 = []byte("HTTP/2.0")

// h2conn is one HTTP/2 client connection on the shard; c holds its socket.
type h2conn struct {
	c        *clientConn
	mux      *h2mux.Conn
	armed    int64 // the Deadline the connection's timer is set for (0: none)
	kicked   bool  // a deferred flush is queued (Shard.Later)
	closing  bool  // Done: the last output went out, the socket is closing
	dead     bool  // the connection is closed
	lingered int   // bytes read after the Conn was done
}

// muxBuffers lends a shard's pooled buffers to its Conns' input and output.
type muxBuffers struct{ s *evloop.Shard }

func (b *muxBuffers) Get() []byte  { return b.s.GetBuf(16 << 10) }
func (b *muxBuffers) Put(p []byte) { b.s.PutBuf(p) }

// startH2 makes c an HTTP/2 connection: data (the shard's buffer when fresh, else c.in) holds
// the first bytes read, the preface's start among them.
func (c *clientConn) startH2(data []byte, fresh bool) {
	sh := c.sh
	h := &h2conn{c: c}
	c.h2 = h
	c.disarm() // the Conn times the connection from here on
	cfg := c.l.h2
	cfg.Now = sh.clock
	cfg.Buffers = sh.muxBufs
	cfg.Counters = sh.e.h2counters
	h.mux = h2mux.NewConn(h, cfg)
	if sh.e.stopping.Load() {
		h.mux.Shutdown()
	}
	_ = h.mux.Feed(data) // an error leaves its GOAWAY in the output
	if !fresh {
		c.releaseIn()
	}
	c.in, c.scan = nil, 0
	sh.runH2()
	h.read()
}

// startTLSH2 serves a TLS connection that negotiated h2 by ALPN, back on its shard after the
// handshake.
func (c *clientConn) startTLSH2() {
	sh := c.sh
	sh.st.conns.Add(1)
	sh.link(c)
	c.since = sh.now
	c.sniffed = true
	c.Ready = evloop.Readable | evloop.Writable // the preface may have come with the handshake
	c.startH2(nil, true)
}

// event is the socket's readiness.
func (h *h2conn) event() {
	if h.c.Ready&evloop.Writable != 0 && len(h.mux.Output()) > 0 {
		h.flush()
		if h.dead {
			return
		}
	}
	h.read()
}

// read feeds the Conn what the client sent, a shard buffer at a time, then writes what it
// framed.
func (h *h2conn) read() {
	c := h.c
	for !h.dead && c.Ready&evloop.Readable != 0 {
		buf := c.sh.s.Buf()
		n, err := c.Read(buf)
		if err == evloop.ErrAgain {
			break
		}
		if err != nil {
			h.abort()
			return
		}
		if h.closing || h.mux.Err() != nil {
			// Done (its last output written), or failed (its GOAWAY maybe still waiting on a
			// full socket): what the client sends now is only counted, and a flood closes at
			// once.
			if h.lingered += n; h.lingered > maxLinger {
				h.abort()
				return
			}
			continue
		}
		_ = h.mux.Feed(buf[:n])
		c.sh.runH2()
	}
	h.after()
}

// maxLinger is how many bytes a failed connection still reads before it closes: what a
// client had in flight, not a flood.
const maxLinger = 64 << 10

// after writes what the Conn framed and sets the connection's timer for its next deadline.
func (h *h2conn) after() {
	if h.dead {
		return
	}
	h.flush()
	if h.dead || h.closing {
		return
	}
	c := h.c
	switch d := h.mux.Deadline(); {
	case d == 0:
		if h.armed != 0 {
			h.armed = 0
			c.disarm()
		}
	case d != h.armed:
		h.armed = d
		c.arm(tH2, d)
	}
}

// flush writes the Conn's output while the socket takes it; a Conn that is done closes the
// connection once its last bytes are out.
func (h *h2conn) flush() {
	c := h.c
	for {
		out := h.mux.Output()
		if len(out) == 0 {
			break
		}
		if c.Ready&evloop.Writable == 0 {
			return // the rest when the socket drains (Event)
		}
		n, err := c.Write(out)
		if err != nil && err != evloop.ErrAgain {
			h.abort()
			return
		}
		if n > 0 {
			h.mux.Advance(n) // streams that waited for output room may go on
			c.sh.runH2()
			if h.dead {
				return
			}
		}
		if n < len(out) {
			return
		}
	}
	if h.mux.Done() && !h.closing {
		h.closing = true
		c.disarm()
		c.sh.runH2()
		// Always a half-close first, then what the client still sends is read and dropped:
		// bytes it sent after our last read (a SETTINGS ack, a PING) would make a close reset
		// the connection, and the GOAWAY with it.
		// At most maxLinger bytes, for lingerTime (read).
		c.ShutdownWrite()
		c.arm(tLinger, c.sh.now+lingerTime)
		h.read()
	}
}

// kick has the connection's output written after the shard's current events (one write for
// every stream that answered in them).
func (h *h2conn) kick() {
	if !h.kicked && !h.dead {
		h.kicked = true
		h.c.sh.s.Later(h)
	}
}

// Event is the deferred flush (kick).
func (h *h2conn) Event(evloop.Events) {
	h.kicked = false
	if h.dead {
		return
	}
	h.c.sh.now = h.c.Shard().Now()
	h.after()
}

// expire runs the Conn's timers.
func (h *h2conn) expire() {
	h.armed = 0
	_ = h.mux.Tick()
	h.c.sh.runH2()
	h.after()
}

// shutdown sends GOAWAY: the open streams go on, new ones are refused, and the connection
// closes when the last one ends.
func (h *h2conn) shutdown() {
	if h.dead {
		return
	}
	h.mux.Shutdown()
	h.after()
}

// abort ends the connection at once (the socket failed).
func (h *h2conn) abort() { h.c.close() }

// teardown ends every stream of a connection that is closing: their exchanges are
// abandoned. clientConn.close calls it.
func (h *h2conn) teardown() {
	if h.dead {
		return
	}
	h.mux.Abort()
	h.c.sh.runH2()
	h.dead = true
}

// The h2mux.Handler events, inside the Conn's calls: they note and queue.

func (h *h2conn) Request(s *h2mux.Stream, req *h2mux.Request, end bool) {
	st := h.c.sh.newH2Stream(h)
	st.s = s
	s.User = st
	st.bodyEnd = end
	st.buildHead(req, end)
	st.post(evStart)
}

func (h *h2conn) Data(s *h2mux.Stream, p []byte, end bool) {
	st := s.User.(*h2stream)
	st.gotData(p, end)
	st.post(evData)
}

func (h *h2conn) Trailers(s *h2mux.Stream, fields []hpack.HeaderField) {
	st := s.User.(*h2stream)
	st.gotTrailers(fields)
	st.post(evData)
}

func (h *h2conn) Reset(s *h2mux.Stream, _ h2mux.ErrCode) {
	st := s.User.(*h2stream)
	st.s, st.ended = nil, true
	st.post(evReset)
}

func (h *h2conn) Writable(s *h2mux.Stream) {
	if st, ok := s.User.(*h2stream); ok {
		st.post(evWritable)
	}
}

func (h *h2conn) GoAway(h2mux.ErrCode, []byte) {}

// Refused logs a request head the Conn refused itself (431, or a malformed head reset with
// PROTOCOL_ERROR as 400): every request gets its access-log line, as over HTTP/1.1.
func (h *h2conn) Refused(method, path string, status int, _ string) {
	sh := h.c.sh
	sh.st.refused.Add(1)
	if l := sh.e.core.AccessLog(); l != nil {
		var e accesslog.Entry
		httpcore.FillRefused(&e, h.c.l.name, h.c.peer.Addr().Unmap(), s2b(method), s2b(path), proto2, status, accesslog.TermRefused)
		sh.log.add(l, &e)
	}
}

// runH2 runs what the streams of the shard's HTTP/2 connections have to do (queued by the
// Handler events), outside the Conn calls that queued it.
func (sh *shard) runH2() {
	if sh.h2running {
		return // the outer run takes what is queued meanwhile
	}
	sh.h2running = true
	for i := 0; i < len(sh.h2q); i++ {
		st := sh.h2q[i]
		sh.h2q[i] = nil
		st.queued = false
		st.work()
	}
	sh.h2q = sh.h2q[:0]
	sh.h2running = false
}

// clientPreface is the HTTP/2 client connection preface (RFC 9113 §3.4).
const clientPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// sniff decides what a connection of an h2c listener speaks from its first bytes, data (the
// shard's buffer when fresh, else c.in): the whole client preface makes it HTTP/2 on the
// shard (its first 18 bytes are also an HTTP/1 head, "PRI * HTTP/2.0"), a request line
// HTTP/1.1, served here as on a plain listener, the bytes already read its first input. It
// reports whether the connection was taken (HTTP/2, or closed); false: HTTP/1.1 (c.sniffed
// set) or not enough bytes yet (c.sniffed unset: decided is false, no head is read).
func (c *clientConn) sniff(data []byte, fresh bool) bool {
	n := min(len(data), len(clientPreface))
	if string(data[:n]) == clientPreface[:n] {
		if n < len(clientPreface) {
			return false // the whole preface, or an HTTP/1 request whose line starts "PRI * HTTP/"
		}
		c.sniffed = true
		c.startH2(data, fresh)
		return true
	}
	// HTTP/1.1: its request line decides (as the sniffing front does for the listeners the
	// engine does not serve): anything else is an invalid preface, closed without an answer.
	line := bytes.TrimLeft(data, "\r\n") // RFC 9112 §2.2: empty lines before a request are skipped
	i := bytes.IndexByte(line, '\n')
	switch {
	case i < 0 && len(data) < c.l.maxHdr:
		return false // the line's end is still to come
	case i >= 0 && !httpcore.RequestLine(bytes.TrimSuffix(line[:i], cr)):
		c.close()
		return true
	}
	c.sniffed = true
	return false
}

// decided reports whether the connection's protocol is known: always on a listener without
// h2c; on an h2c one once sniff has seen the preface or a request line.
func (c *clientConn) decided() bool { return !c.l.h2c || c.sniffed }
