//go:build linux

package h1

import (
	"bytes"
	"errors"
	"net/netip"
	"strconv"

	"github.com/valyala/fasthttp"

	"ballast/accesslog"
	"ballast/evloop"
	"ballast/evloop/tlsconn"
	"ballast/httpcore"
	"ballast/proxyproto"
)

// clientConn is one client connection. Idle, it holds its socket and this record (no
// goroutine, no buffer); in holds bytes read but not consumed (the start of a head, a
// pipelined request, body bytes that came with the head), out the bytes of a response the
// client could not take yet. Both come from the shard's pool and go back when drained.
type clientConn struct {
	evloop.FD
	timer      evloop.Timer
	sh         *shard
	l          *listener
	peer       netip.AddrPort
	local      netip.AddrPort // the address the client connected to, as a PROXY header says
	in         []byte
	scan       int // headEnd's resume point in in
	out        []byte
	ex         *exchange
	h2         *h2conn // an HTTP/2 connection (h2c): its Conn and streams
	served     int
	since      int64         // when the current wait began (idle, head)
	tphase     uint8         // what timer times
	closeAfter bool          // close once the current response is written
	counted    bool          // counted against max_conns_per_client (httpcore.Core.AdmitConn)
	proxyWait  bool          // accept_proxy: the PROXY header has not been read yet
	sniffed    bool          // h2c listener: the first bytes said HTTP/1.1 (HTTP/2 sets h2)
	lingering  bool          // our side is shut down; reading what the client still sends, discarding it
	tls        *tlsconn.Conn // a TLS listener's connection: its records go through crypto/tls
	gen        uint32
	prev, next *clientConn
}

// Timer phases of a client connection.
const (
	tNone   uint8 = iota
	tIdle         // waiting for the next request (idle_timeout)
	tHead         // a head is arriving (read_header_timeout)
	tBody         // waiting for request body bytes (idle_timeout per 64 KiB)
	tQueue        // the request waits in the backlog (queue_timeout)
	tWrite        // the client does not take its response (idle_timeout)
	tHedge        // hedge.delay without a response head: send a copy
	tLinger       // discarding after the response, before the close
	tH2           // an HTTP/2 connection's next deadline (h2conn)
	tGone         // the client closed its side while its request waits (gone.go)
)

// lingerTime bounds how long a closing connection discards what its client still sends.
const lingerTime = int64(2e9)

// Event makes progress on whatever the connection is doing.
func (c *clientConn) Event(evloop.Events) {
	if !c.Registered() {
		return
	}
	c.sh.now = c.Shard().Now()
	if len(c.out) > 0 {
		if c.Ready&evloop.Writable == 0 || !c.flush() {
			return
		}
	}
	if c.lingering {
		c.discard()
		return
	}
	if c.h2 != nil {
		c.h2.event()
		return
	}
	if c.ex != nil {
		c.watchGone()
		c.ex.clientEvent()
		return
	}
	c.serve()
}

// Expire handles the connection's timer.
func (c *clientConn) Expire(now int64) {
	if !c.Registered() {
		return
	}
	c.sh.now = now
	switch c.tphase {
	case tIdle:
		c.sh.st.idleTimeouts.Add(1)
		c.close()
	case tHead:
		c.sh.st.headerTimeouts.Add(1)
		if c.proxyWait { // no PROXY header within read_header_timeout: no answer
			c.l.refused.Add(1)
			c.close()
			return
		}
		if len(c.in) == 0 && c.served == 0 {
			c.close() // nothing arrived at all
			return
		}
		c.refuse(headTimeout)
	case tBody:
		c.sh.st.bodyTimeouts.Add(1)
		if c.ex != nil {
			c.ex.clientTimeout()
		}
	case tQueue:
		if c.ex != nil {
			c.ex.queueTimeout()
		}
	case tWrite:
		c.sh.st.writeTimeouts.Add(1)
		c.abort()
	case tHedge:
		if c.ex != nil {
			c.ex.hedgeTimer()
		}
	case tLinger:
		c.close()
	case tH2:
		c.h2.expire()
	case tGone:
		c.gone()
	}
}

func (c *clientConn) arm(phase uint8, at int64) {
	c.tphase = phase
	c.Shard().Arm(&c.timer, at)
}

func (c *clientConn) disarm() {
	c.tphase = tNone
	c.Shard().Stop(&c.timer)
}

// serve reads and starts requests while the connection has none in flight.
func (c *clientConn) serve() {
	sh := c.sh
	for c.ex == nil && len(c.out) == 0 && c.Registered() {
		if c.closeAfter {
			c.finishClose()
			return
		}
		if c.proxyWait && !c.readProxy() {
			return
		}
		if c.l.h2c && !c.sniffed && len(c.in) > 0 && c.sniff(c.in, false) {
			return
		}
		if len(c.in) > 0 {
			// An h2c connection still undecided (the start of the preface) has no head yet.
			if end := headEnd(c.in, &c.scan); end > 0 && c.decided() {
				if end > c.l.maxHdr {
					c.refuse(headTooLarge)
					return
				}
				c.begin(c.in, end, false)
				continue
			}
			if len(c.in) >= c.l.maxHdr {
				c.refuse(headTooLarge)
				return
			}
			if c.Ready&evloop.Readable == 0 {
				c.waitHead()
				return
			}
			n, err := c.Read(c.in[len(c.in):min(cap(c.in), c.l.maxHdr+1)])
			if err == evloop.ErrAgain {
				c.waitHead()
				return
			}
			if err != nil {
				c.close() // gone in the middle of a head
				return
			}
			c.in = c.in[:len(c.in)+n]
			continue
		}
		if c.Ready&evloop.Readable == 0 {
			c.waitIdle()
			return
		}
		buf := sh.s.Buf()
		n, err := c.Read(buf)
		if err == evloop.ErrAgain {
			c.waitIdle()
			return
		}
		if err != nil {
			c.close() // the client closed its idle connection
			return
		}
		data := buf[:n]
		if c.l.h2c && !c.sniffed && c.sniff(data, true) {
			return
		}
		c.scan = 0
		if end := headEnd(data, &c.scan); end > 0 && c.decided() {
			if end > c.l.maxHdr {
				c.refuse(headTooLarge)
				return
			}
			c.begin(data, end, true)
			continue
		}
		if n >= c.l.maxHdr {
			c.refuse(headTooLarge)
			return
		}
		if c.served > 0 || c.tphase != tHead { // the first byte of this request: its head timeout starts
			c.since = sh.now
		}
		c.in = append(sh.s.GetBuf(c.l.maxHdr+1), data...)
	}
}

// readProxy reads the connection's PROXY header (v1 or v2) within read_header_timeout of the
// accept; the client it names becomes the connection's peer (then counted against
// max_conns_per_client). It reports whether the connection goes on to its first request; a
// missing or malformed header closes it without an answer, counted.
func (c *clientConn) readProxy() bool {
	sh := c.sh
	for {
		if len(c.in) > 0 {
			h, n, err := proxyproto.Parse(c.in)
			switch {
			case err == nil:
				c.proxyWait = false
				if h.HasAddrs() {
					c.peer = netip.AddrPortFrom(h.Src.Addr().Unmap(), h.Src.Port())
					c.local = h.Dst
				}
				c.in = c.in[:copy(c.in, c.in[n:])]
				if len(c.in) == 0 {
					c.releaseIn()
				}
				ok, counted := sh.e.core.AdmitConn(c.l.name, c.peer.Addr())
				if !ok {
					sh.st.connsRefused.Add(1)
					c.close()
					return false
				}
				c.counted = counted
				if c.l.tls != nil { // a TLS listener: the handshake follows the header (tls.go)
					c.toHandshake()
					return false
				}
				return true
			case !errors.Is(err, proxyproto.ErrIncomplete) || len(c.in) >= proxyproto.MaxHeaderLen:
				c.l.refused.Add(1)
				c.close()
				return false
			}
		}
		if c.Ready&evloop.Readable == 0 {
			c.waitHead()
			return false
		}
		if c.in == nil { // room for the header and the head after it
			c.in = sh.s.GetBuf(max(c.l.maxHdr+1, proxyproto.MaxHeaderLen))
		}
		n, err := c.Read(c.in[len(c.in):cap(c.in)])
		if err == evloop.ErrAgain {
			c.waitHead()
			return false
		}
		if err != nil {
			c.close()
			return false
		}
		c.in = c.in[:len(c.in)+n]
	}
}

// waitIdle waits for a request: a new connection within read_header_timeout of its accept,
// a kept-alive one within idle_timeout of its last response.
func (c *clientConn) waitIdle() {
	if c.served == 0 {
		if c.tphase != tHead {
			c.arm(tHead, c.since+c.l.readHdr)
		}
		return
	}
	c.arm(tIdle, c.since+c.l.idle)
}

// waitHead waits for the rest of a head: read_header_timeout from its first byte.
func (c *clientConn) waitHead() {
	if c.tphase != tHead {
		c.arm(tHead, c.since+c.l.readHdr)
	}
}

// begin starts the request whose head is data[:end] (data is the shard's buffer when fresh,
// else c.in): the head is checked and parsed, the bytes after it kept in c.in, and the
// request handed to a new exchange.
func (c *clientConn) begin(data []byte, end int, fresh bool) {
	sh := c.sh
	head := data[skipEmptyLines(data[:end]):end]
	var r reqHead
	if v := checkRequest(head, &r); v != headOK {
		c.refuseHead(v, head)
		return
	}
	ex := sh.newExchange(c)
	rh := ex.rh
	sh.rd.Reset(head)
	sh.br.Reset(&sh.rd)
	if err := rh.Read(sh.br); err != nil {
		ex.gone = true
		ex.freeIfDone()
		c.refuseHead(headMalformed, head)
		return
	}
	if r.authority != nil {
		rh.SetHostBytes(r.authority) // RFC 9112 §3.2.2: routed and forwarded with this host
	}
	// The bytes after the head are the body or the next request: keep them (the shard's
	// buffer is reused by the next read).
	rest := data[end:]
	switch {
	case !fresh:
		c.in = c.in[:copy(c.in, rest)]
		if len(c.in) == 0 {
			sh.s.PutBuf(c.in)
			c.in = nil
		}
	case len(rest) > 0:
		c.in = append(sh.s.GetBuf(len(rest)), rest...)
	}
	c.scan = 0
	c.disarm()
	sh.st.requests.Add(1)
	c.ex = ex
	ex.start(&r)
}

// refuse answers a request the engine refuses before it could read its head (too large, too
// slow), and closes.
func (c *clientConn) refuse(v verdict) {
	var head []byte
	if len(c.in) > 0 {
		head = c.in
	}
	c.refuseHead(v, head)
}

// refuseHead answers a head the checks did not accept, logs it with what its request line
// says, and closes: the framing of what follows cannot be trusted.
func (c *clientConn) refuseHead(v verdict, head []byte) {
	sh := c.sh
	sh.st.refused.Add(1)
	c.closeAfter = true
	rx := &sh.rx
	rx.Reset()
	switch v {
	case headConnect:
		rx.RefuseMethod()
	default:
		rx.Refuse(nil, v.status(), s2b(v.message()))
	}
	if l := sh.e.core.AccessLog(); l != nil {
		method, uri, proto := requestLine(head)
		if !bytes.Equal(proto, http10) {
			proto = http11 // the version answered in (a refused 1.2, or no version at all)
		}
		var e accesslog.Entry
		httpcore.FillRefused(&e, c.l.name, c.peer.Addr().Unmap(), method, uri, proto, rx.Reply.Status, rx.Reply.Term)
		sh.log.add(l, &e)
	}
	c.render(&rx.Reply, false)
}

// requestLine splits what there is of a request line into method, target and version.
func requestLine(head []byte) (method, uri, proto []byte) {
	if i := bytes.IndexByte(head, '\n'); i >= 0 {
		head = head[:i]
	}
	head = bytes.TrimSuffix(head, cr)
	method, rest, _ := bytes.Cut(head, sp)
	uri, proto, _ = bytes.Cut(rest, sp)
	return method, uri, proto
}

var sp = []byte{' '}

// render writes an answer of Ballast's own (the core's Reply) with its length; head leaves out
// the body (a HEAD request). Reply.Close, or a connection closing anyway, adds Connection:
// close.
func (c *clientConn) render(rp *httpcore.Reply, head bool) {
	b := c.sh.wbuf[:0]
	b = append(b, "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(rp.Status), 10)
	b = append(b, ' ')
	b = append(b, fasthttp.StatusMessage(rp.Status)...)
	b = append(b, "\r\n"...)
	if len(rp.ContentType) > 0 {
		b = appendField(b, "Content-Type", rp.ContentType)
	}
	b = append(b, "Content-Length: "...)
	b = strconv.AppendInt(b, int64(len(rp.Body)), 10)
	b = append(b, "\r\n"...)
	if len(rp.Location) > 0 {
		b = appendField(b, "Location", rp.Location)
	}
	if len(rp.RetryAfter) > 0 {
		b = appendField(b, "Retry-After", rp.RetryAfter)
	}
	if len(rp.Allow) > 0 {
		b = appendField(b, "Allow", rp.Allow)
	}
	if rp.Close || c.closeAfter {
		c.closeAfter = true
		b = append(b, "Connection: close\r\n"...)
	}
	b = append(b, "\r\n"...)
	if !head {
		b = append(b, rp.Body...)
	}
	c.sh.wbuf = b
	c.write(b, nil)
	if c.Registered() && len(c.out) == 0 && c.ex == nil && c.closeAfter {
		c.finishClose()
	}
}

func appendField(b []byte, name string, value []byte) []byte {
	b = append(b, name...)
	b = append(b, ": "...)
	b = append(b, value...)
	return append(b, "\r\n"...)
}

// write writes a then b to the client; what the socket does not take is kept in out, and
// the caller stops producing until flush has written it. A failed write aborts the
// connection.
func (c *clientConn) write(a, b []byte) bool {
	if len(c.out) > 0 { // a producer that did not wait: keep the order
		c.out = append(append(c.out, a...), b...)
		return true
	}
	n, err := c.Writev(a, b)
	if err != nil && err != evloop.ErrAgain {
		c.abort()
		return false
	}
	if n == len(a)+len(b) {
		return true
	}
	rest := len(a) + len(b) - n
	c.out = c.sh.s.GetBuf(rest)
	if n < len(a) {
		c.out = append(append(c.out, a[n:]...), b...)
	} else {
		c.out = append(c.out, b[n-len(a):]...)
	}
	c.arm(tWrite, c.sh.now+c.l.idle)
	return true
}

// flush writes what out holds; true when it is empty.
func (c *clientConn) flush() bool {
	n, err := c.Write(c.out)
	if err != nil && err != evloop.ErrAgain {
		c.abort()
		return false
	}
	c.out = c.out[:copy(c.out, c.out[n:])]
	if len(c.out) > 0 {
		if n > 0 {
			c.arm(tWrite, c.sh.now+c.l.idle) // progress: the client reads, if slowly
		}
		return false
	}
	c.sh.s.PutBuf(c.out)
	c.out = nil
	if c.tphase == tWrite {
		c.disarm()
	}
	if c.ex != nil {
		c.ex.clientDrained()
		return c.Registered() && len(c.out) == 0
	}
	if c.closeAfter {
		c.finishClose()
		return false
	}
	c.since = c.sh.now
	return true
}

// done ends the exchange in flight: the connection waits for the next request (or closes).
func (c *clientConn) done(closeAfter bool) {
	c.served++
	c.ex = nil
	if closeAfter || c.l.maxRequests > 0 && c.served >= c.l.maxRequests {
		c.closeAfter = true
	}
	c.since = c.sh.now
	if len(c.out) > 0 {
		return // flush continues
	}
	if c.closeAfter {
		c.finishClose()
		return
	}
	c.disarm()
	if len(c.in) > 0 || c.Ready&evloop.Readable != 0 {
		c.Shard().Later(c) // a pipelined request: read it after this event
		return
	}
	c.waitIdle()
}

// finishClose closes after the last response: at once when the client has nothing more to
// send, else the write side first, then whatever arrives is discarded for a while, so
// that the client reads the response before a reset could destroy it.
func (c *clientConn) finishClose() {
	if len(c.in) == 0 && c.Ready&evloop.Readable == 0 {
		c.close()
		return
	}
	c.releaseIn()
	c.ShutdownWrite()
	c.lingering = true
	c.arm(tLinger, c.sh.now+lingerTime)
	c.discard()
}

// discard reads and drops what a lingering connection's client sends, until its end.
func (c *clientConn) discard() {
	buf := c.sh.s.Buf()
	for c.Ready&evloop.Readable != 0 {
		if _, err := c.Read(buf); err != nil {
			if err != evloop.ErrAgain {
				c.close()
			}
			return
		}
	}
}

func (c *clientConn) releaseIn() {
	if c.in != nil {
		c.sh.s.PutBuf(c.in)
		c.in = nil
	}
}

// abort ends the connection at once, abandoning its exchange.
func (c *clientConn) abort() {
	if !c.Registered() {
		return
	}
	if ex := c.ex; ex != nil {
		c.ex = nil
		ex.abandon()
	}
	c.close()
}

// close closes the connection and gives its buffers and record back. An exchange still
// attached is abandoned.
func (c *clientConn) close() {
	if !c.Registered() {
		return
	}
	if ex := c.ex; ex != nil {
		c.ex = nil
		ex.abandon()
	}
	sh := c.sh
	if c.h2 != nil {
		c.h2.teardown()
	}
	if c.counted {
		sh.e.core.ReleaseConn(c.l.name, c.peer.Addr().Unmap())
	}
	c.Shard().Stop(&c.timer)
	if c.tls != nil {
		c.tls.Release()
	}
	c.FD.Close()
	c.releaseIn()
	if c.out != nil {
		sh.s.PutBuf(c.out)
	}
	sh.unlink(c)
	sh.st.conns.Add(-1)
	sh.freeClient(c)
}
