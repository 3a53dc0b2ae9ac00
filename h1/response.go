//go:build linux

package h1

import (
	"time"

	"ballast/accesslog"
	"ballast/evloop"
	"ballast/httpcore"
	"ballast/upstream"
)

// respState is the response side of an exchange.
type respState struct {
	started  bool // the head went to the client
	framing  uint8
	remain   int64 // Content-Length bytes still to come
	dec      chunkDecoder
	out      uint8 // how the client gets the body
	reusable bool  // the backend connection can serve another request after this response
	broken   bool  // the backend's chunked framing was malformed
	tunnel   bool  // a 101: the exchange is a tunnel (tunnel.go)
	upEOF    bool  // tunnel: the client has finished sending
	downEOF  bool  // tunnel: the backend has finished sending
	status   int
	interim  int
	bytesOut int64
	backend  *upstream.Backend
	ttfb     int64
	term     string // the access log's termination state, when not a normal end

	z      *httpcore.Encoder // the body is compressed (compress.go)
	zchunk bool              // the coded body goes chunked (an HTTP/1.1 client)
}

// Framings of a response body, from the backend.
const (
	fNone    uint8 = iota // no body (HEAD, 1xx, 204, 304)
	fLength               // Content-Length
	fChunked              // chunked
	fClose                // until the backend closes
)

// What the client gets.
const (
	oAsIs    uint8 = iota // the same framing (Content-Length; chunked to an HTTP/1.1 client)
	oChunk                // chunked, from a close-delimited body (HTTP/1.1 client)
	oRaw                  // the data alone, delimited by our close (HTTP/1.0 client)
	oRechunk              // chunked, decoded and encoded again (HTTP/1.1 client)
)

// maxRespHead bounds a backend's response head.
const maxRespHead = 64 << 10

// maxInterim bounds the 1xx responses skipped before the final one.
const maxInterim = 8

// readResponse reads from the backend: the response head, then the body, passing each read
// on to the client as it arrives; it stops while the client has not taken the last one.
func (a *attempt) readResponse() {
	ex := a.ex
	if ex.resp.started && a == ex.a {
		ex.pumpResponse()
		return
	}
	bc := a.bc
	c := ex.c
	gen, cgen, xgen := bc.gen, c.generation(), ex.gen
	for !ex.resp.started {
		if bc.Ready&evloop.Readable == 0 {
			return
		}
		var data []byte
		if len(bc.in) > 0 {
			n, err := bc.Read(bc.in[len(bc.in):cap(bc.in)])
			if err == evloop.ErrAgain {
				return
			}
			if err != nil {
				a.failed(writeFailure(a), err)
				return
			}
			bc.in = bc.in[:len(bc.in)+n]
			data = bc.in
		} else {
			buf := ex.sh.s.Buf()
			n, err := bc.Read(buf)
			if err == evloop.ErrAgain {
				return
			}
			if err != nil {
				a.failed(writeFailure(a), err)
				return
			}
			data = buf[:n]
			bc.scan = 0
		}
		for {
			end := headEnd(data, &bc.scan)
			if end == 0 {
				if len(data) >= maxRespHead {
					a.failed(httpcore.BadGateway, nil)
					return
				}
				if len(bc.in) == 0 { // keep the partial head: the shard's buffer is reused
					bc.in = append(ex.sh.s.GetBuf(maxRespHead), data...)
				}
				break
			}
			var r respHead
			if !checkResponse(data[:end], &r) {
				a.failed(httpcore.BadGateway, nil)
				return
			}
			if r.status >= 100 && r.status < 200 && r.status != 101 {
				if ex.resp.interim++; ex.resp.interim > maxInterim {
					a.failed(httpcore.BadGateway, nil)
					return
				}
				data = data[end:] // skip it (the client got its own 100 Continue)
				bc.scan = 0
				if len(bc.in) > 0 {
					bc.in = bc.in[:copy(bc.in, data)]
					data = bc.in
				}
				if len(data) == 0 {
					bc.releaseIn()
					break
				}
				continue
			}
			ex.win(a)
			ex.responseHead(data[:end], &r, data[end:])
			if bc.gen != gen || c.generation() != cgen || ex.gen != xgen || ex.resp.tunnel {
				return // finished (or failed) with its head
			}
			break
		}
	}
	if a == ex.a {
		ex.pumpResponse()
	}
}

// win makes a, whose response head came first, the exchange's attempt: the others (hedged
// copies) are dropped, their slots released as not their backends' failures.
func (ex *exchange) win(a *attempt) {
	if ex.running == 1 && ex.a == a {
		return
	}
	ex.a = a
	for i := range ex.places() {
		o := ex.attemptAt(i)
		if o == a || !o.live {
			continue
		}
		b := o.b
		o.drop(nil)
		ex.ps.Release(b, time.Duration(ex.sh.now-o.start), 0, false)
	}
	ex.a = a
	if ex.c.phase() == tHedge {
		ex.c.disarm()
	}
}

// responseHead sends the response head to the client, with the body bytes that came with
// it, and decides how the body is framed both ways.
func (ex *exchange) responseHead(raw []byte, r *respHead, rest []byte) {
	a, c, sh := ex.a, ex.c, ex.sh
	bc := a.bc
	a.ttfb = sh.now - a.start
	rs := &ex.resp
	rs.status, rs.backend, rs.ttfb = r.status, a.b, a.ttfb
	if r.status == 101 {
		if !ex.upgrade {
			a.failed(httpcore.BadGateway, nil)
			return
		}
		ex.tunnel(raw, r, rest)
		return
	}
	rs.reusable = !r.close && !r.ambiguous && !ex.upgrade
	// The core's response side: hop-by-hop fields out, expose_backend, request ID, sticky
	// cookie, header rules, compression (compress.go).
	ex.rm.reset(raw, r)
	sc := r.scan
	ex.cx.StripHopByHop(&ex.rm, &sc, false, false)
	ex.limitCompression()
	enc := ex.cx.Respond(&ex.msg, &ex.rm, a.b)
	m := respMode{}
	switch {
	case noBody(r.status, ex.method == mHead):
		rs.framing = fNone
	case r.chunked:
		rs.framing = fChunked
		rs.dec.reset()
		if c.raw() {
			rs.out = oRaw
			m.unchunk = true
		} else {
			rs.out = oRechunk
		}
	case r.clen >= 0:
		rs.framing, rs.remain = fLength, r.clen
	default:
		rs.framing = fClose
		rs.reusable = false
		if c.raw() {
			rs.out = oRaw
		} else {
			rs.out = oChunk
			m.chunk = true
		}
	}
	ex.compress(enc, &m)
	closeClient := !ex.keepAlive || c.closing() || rs.out == oRaw || ex.upgrade || c.lastRequest() ||
		!ex.bodyRead() && !ex.mayDrain() // an early answer: the rest of the body, unless drained (early.go), cannot be told from a request
	switch {
	case closeClient:
		m.conn = connClose
		c.setClosing()
	case ex.http10:
		m.conn = connKeepAlive
	}
	rs.started = true
	bc.arm(bResponse, sh.now+int64(ex.ps.ResponseTimeout)) // from here: backend inactivity
	w := c.head(ex, m, sh.wbuf[:0])
	// The body bytes that came with the head go out in the same write when they are few.
	var body []byte
	used := 0
	if len(rest) > 0 && rs.framing != fNone {
		used, w, body = ex.frameResponse(rest, w)
	} else if len(rest) > 0 {
		rs.reusable = false // bytes after a bodiless response: not ours to forward
		used = len(rest)
	}
	if used < len(rest) {
		rs.reusable = false // more than the response: the connection is out of step
	}
	bc.releaseIn()
	sh.wbuf = w
	if !rs.broken && ex.respDone() {
		ex.releaseRead()
	}
	if !c.write(w, body) {
		return
	}
	if rs.broken {
		ex.responseFailed()
		return
	}
	if ex.respDone() {
		ex.finishResponse()
	}
}

// frameResponse frames body bytes p of the response for the client after w: a
// Content-Length body is passed as it is (returned apart, to be written from where it is),
// the others are encoded into w.
func (ex *exchange) frameResponse(p, w []byte) (used int, out, body []byte) {
	rs := &ex.resp
	if rs.z != nil {
		used, out = ex.frameCompressed(p, w)
		return used, out, nil
	}
	switch rs.framing {
	case fLength:
		k := int(min(int64(len(p)), rs.remain))
		rs.remain -= int64(k)
		rs.bytesOut += int64(k)
		if k <= 4<<10 { // small: one buffer, one write
			return k, append(w, p[:k]...), nil
		}
		return k, w, p[:k]
	case fClose:
		rs.bytesOut += int64(len(p))
		if rs.out == oChunk {
			return len(p), appendChunk(w, p), nil
		}
		return len(p), w, p
	}
	for used < len(p) && !rs.dec.done() {
		n, piece, err := rs.dec.decode(p[used:])
		if err != nil {
			rs.reusable, rs.broken = false, true // the client is cut off after what was valid
			return used, w, nil
		}
		used += n
		if len(piece) > 0 {
			rs.bytesOut += int64(len(piece))
			if rs.out == oRechunk {
				w = appendChunk(w, piece)
			} else {
				w = append(w, piece...)
			}
		}
	}
	if rs.dec.done() && rs.out == oRechunk {
		w = appendLastChunk(w, rs.dec.trailer)
	}
	return used, w, nil
}

// respDone reports that the whole body has been passed on.
func (ex *exchange) respDone() bool {
	rs := &ex.resp
	switch rs.framing {
	case fNone:
		return true
	case fLength:
		return rs.remain == 0
	case fChunked:
		return rs.dec.done()
	}
	return false
}

// pumpResponse passes the body on, a read at a time, while the client takes it.
func (ex *exchange) pumpResponse() {
	c, sh := ex.c, ex.sh
	bc := ex.a.bc
	gen, cgen, xgen := bc.gen, c.generation(), ex.gen
	rs := &ex.resp
	for !c.blocked() && !ex.respDone() {
		if bc.Ready&evloop.Readable == 0 {
			ex.zhold()
			return
		}
		buf := sh.s.Buf()[:c.readSize()]
		if rs.framing == fLength {
			buf = buf[:min(int64(len(buf)), rs.remain)]
		}
		n, err := bc.Read(buf)
		if err == evloop.ErrAgain {
			ex.zhold()
			return
		}
		if err != nil {
			if rs.framing == fClose { // the end of a close-delimited body
				switch {
				case rs.z != nil:
					sh.wbuf = ex.zend(sh.wbuf[:0])
				case rs.out == oChunk:
					sh.wbuf = appendLastChunk(sh.wbuf[:0], nil)
				default:
					sh.wbuf = sh.wbuf[:0]
				}
				ex.releaseRead()
				if len(sh.wbuf) > 0 && !c.write(sh.wbuf, nil) {
					return
				}
				rs.framing = fNone
				break
			}
			ex.responseFailed()
			return
		}
		used, w, body := ex.frameResponse(buf[:n], sh.wbuf[:0])
		sh.wbuf = w
		if used < n {
			rs.reusable = false
		}
		if !rs.broken && ex.respDone() {
			ex.releaseRead()
		}
		if !c.write(w, body) || bc.gen != gen || c.generation() != cgen || ex.gen != xgen {
			return
		}
		if rs.broken {
			ex.responseFailed()
			return
		}
		bc.arm(bResponse, sh.now+int64(ex.ps.ResponseTimeout))
	}
	if ex.respDone() {
		ex.finishResponse()
	}
}

// clientDrained: the client took everything; the body may go on.
func (ex *exchange) clientDrained() {
	if ex.resp.tunnel {
		ex.tunnelEvent()
		return
	}
	if ex.resp.started && ex.a != nil && ex.a.bc != nil && !ex.respDone() {
		ex.pumpResponse()
		return
	}
	if ex.respDone() && ex.resp.started {
		return // finished already
	}
	if ex.stream && !ex.reqDone && ex.a != nil && ex.a.bc != nil && !ex.resp.started {
		ex.pumpBody()
	}
}

// responseFailed: the backend broke off (or sent a malformed body) after the head went to
// the client, who can only be told by the connection's end.
func (ex *exchange) responseFailed() {
	if a := ex.a; a != nil && a.live {
		b := a.b
		a.drop(nil)
		ex.ps.Release(b, time.Duration(ex.resp.ttfb), ex.resp.status, true)
	}
	ex.resp.term = accesslog.TermServerData
	ex.logAccess()
	ex.c.abort()
}

// releaseRead releases the backend's slot of a response read whole, before its last bytes
// are written to the client: the backend is done with the request, and the write, which
// wakes the client, can take the shard off its CPU for longer than the client takes to read
// the response and send its next request, which a least-loaded balancer must not see
// counted against the backend it was just answered by. The attempt keeps its connection
// until finishResponse.
func (ex *exchange) releaseRead() {
	a := ex.a
	if a == nil || !a.live || a.freed {
		return
	}
	a.freed = true
	rs := &ex.resp
	o := httpcore.Outcome{Status: rs.status}
	ex.ps.Release(a.b, time.Duration(rs.ttfb), rs.status, ex.ps.BackendFailure(&o))
}

// finishResponse: the response went to the client whole.
func (ex *exchange) finishResponse() {
	a := ex.a
	rs := &ex.resp
	if bc := a.bc; bc != nil {
		a.bc = nil
		if rs.reusable && ex.reqDone && len(bc.in) == 0 {
			ex.sh.putIdle(bc, ex.ps)
		} else {
			bc.close()
		}
	}
	ex.releaseRead()
	a.drop(nil)
	ex.logAccess()
	if ex.draining() && !ex.c.closing() {
		ex.drainBody() // an early answer: the rest of the body, then the next request
		return
	}
	ex.finish(ex.c.closing())
}
