//go:build linux

package h1

import (
	"bytes"
	"net"
	"net/netip"
	"strconv"

	"golang.org/x/net/http2/hpack"

	"ballast/accesslog"
	"ballast/evloop"
	"ballast/h2mux"
	"ballast/httpcore"
)

// h2stream is one HTTP/2 stream served on the shard: the client side (front) of an exchange.
// Its request head becomes an HTTP/1.1 head (buildHead), checked and parsed as a client's
// would be, so the exchange forwards it as it forwards an HTTP/1.1 request; DATA frames are
// its body (framed as chunks when the client declared no length), taken by the exchange as it
// takes a client's body bytes, the window going back to the client as the backend takes them.
// The response goes out as HEADERS and DATA within the client's windows: what they do not
// take waits in out (at most one read of the backend, readSize), and the backend is not read
// until Writable has drained it.
type h2stream struct {
	h      *h2conn
	s      *h2mux.Stream // nil once the stream ended on the Conn's side
	ex     *exchange
	timer  evloop.Timer
	tphase uint8
	gen    uint32
	inUse  bool
	queued bool   // on the shard's queue (sh.h2q); kept across frees, as the entry is
	ev     uint8  // what happened since the stream was last run
	hb     []byte // the request head as HTTP/1.1, until the exchange starts

	in      []byte // request body bytes received, not taken yet (chunk-framed when chunked)
	credit  int    // of which DATA payload bytes, whose window goes back when taken
	chunked bool   // no content-length: the body goes to the backend chunked
	bodyEnd bool   // END_STREAM came

	out      []byte // response body bytes the windows did not take
	endAfter bool   // out holds the last bytes: END_STREAM with them
	trl      []byte // a chunked response's trailer lines, sent as HEADERS once out is written
	ended    bool   // END_STREAM went out (or the stream was reset)
	finished bool   // the exchange is done: the record goes once out is written
	grpc     bool   // a gRPC request: Ballast's own answers are gRPC statuses (grpc.go)
	deadline int64  // its grpc-timeout, on the shard's clock (0: none)
	dtimer   evloop.Timer
	next     *h2stream
}

// Events queued for a stream.
const (
	evStart uint8 = 1 << iota
	evData
	evWritable
	evReset
)

// readSize bounds a read of the backend's body for an HTTP/2 stream: the bytes one stream may
// hold beyond the Conn's output bound while the client's window is shut.
const h2ReadSize = 16 << 10

func (sh *shard) newH2Stream(h *h2conn) *h2stream {
	st := sh.freeS
	if st != nil {
		sh.freeS = st.next
		sh.nfreeS--
		st.next = nil
	} else {
		st = &h2stream{}
		st.timer.Init(st)
		st.dtimer.Init((*streamDeadline)(st))
	}
	st.h, st.inUse = h, true
	return st
}

// free gives the record back; nothing of the stream remains.
func (st *h2stream) free() {
	if !st.inUse {
		return
	}
	sh := st.h.c.sh
	sh.s.Stop(&st.timer)
	sh.s.Stop(&st.dtimer)
	for _, b := range [...][]byte{st.in, st.out, st.hb, st.trl} {
		if b != nil {
			sh.s.PutBuf(b)
		}
	}
	*st = h2stream{timer: st.timer, dtimer: st.dtimer, gen: st.gen + 1, queued: st.queued}
	if sh.nfreeS < maxFree {
		st.next = sh.freeS
		sh.freeS = st
		sh.nfreeS++
	}
}

// post queues the stream to run once the Conn's call returns.
func (st *h2stream) post(ev uint8) {
	st.ev |= ev
	if !st.queued {
		st.queued = true
		sh := st.h.c.sh
		sh.h2q = append(sh.h2q, st)
	}
}

// work handles what was queued for the stream.
func (st *h2stream) work() {
	ev := st.ev
	st.ev = 0
	if !st.inUse || ev == 0 {
		return
	}
	h := st.h
	defer h.kick()
	if ev&evReset != 0 {
		if ex := st.ex; ex != nil {
			st.ex = nil
			ex.abandon()
		}
		st.free()
		return
	}
	if ev&evStart != 0 {
		st.start()
		if !st.inUse {
			return
		}
	}
	if ev&evData != 0 {
		if st.ex != nil {
			st.ex.clientEvent()
		} else if st.credit > 0 && st.s != nil {
			st.dropBody()
		}
		if !st.inUse {
			return
		}
	}
	if ev&evWritable != 0 {
		st.flushOut()
	}
}

// buildHead writes the request as an HTTP/1.1 head into st.hb: h2mux validated it (RFC 9113
// §8.2, §8.3), so nothing in it can end a line or a field early; cookie crumbs are joined
// (§8.2.3), :authority becomes Host, and a body without content-length is sent chunked.
func (st *h2stream) buildHead(req *h2mux.Request, end bool) {
	n := len(req.Method) + len(req.Path) + len(req.Authority) + 40
	for _, f := range req.Fields {
		n += len(f.Name) + len(f.Value) + 4
	}
	b := st.h.c.sh.s.GetBuf(n)
	b = append(b, req.Method...)
	b = append(b, ' ')
	if req.Method == "CONNECT" {
		b = append(b, req.Authority...)
	} else {
		b = append(b, req.Path...)
	}
	b = append(b, " HTTP/1.1\r\n"...)
	if req.Authority != "" {
		b = append(b, "host: "...)
		b = append(b, req.Authority...)
		b = append(b, '\r', '\n')
	}
	cookies := 0
	for _, f := range req.Fields {
		switch f.Name {
		case "host":
			if req.Authority != "" {
				continue // the same as :authority (h2mux checked)
			}
		case "cookie":
			cookies++
			continue
		case "content-type":
			st.grpc = httpcore.IsGRPC(f.Value)
		case "grpc-timeout":
			if d, ok := httpcore.GRPCTimeout(f.Value); ok {
				st.deadline = max(int64(d), 1)
			}
		}
		b = appendField(b, f.Name, s2b(f.Value))
	}
	if cookies > 0 {
		b = append(b, "cookie: "...)
		k := 0
		for _, f := range req.Fields {
			if f.Name == "cookie" {
				if k > 0 {
					b = append(b, "; "...)
				}
				b = append(b, f.Value...)
				k++
			}
		}
		b = append(b, '\r', '\n')
	}
	if !end && req.ContentLength < 0 {
		st.chunked = true
		b = append(b, "transfer-encoding: chunked\r\n"...)
	}
	st.hb = append(b, '\r', '\n')
}

// start checks and parses the head as a client's and starts its exchange.
func (st *h2stream) start() {
	sh := st.h.c.sh
	head := st.hb
	st.hb = nil
	defer sh.s.PutBuf(head)
	var r reqHead
	if v := checkRequest(head, &r); v != headOK {
		st.refuse(v, head)
		return
	}
	ex := sh.newExchange(st)
	sh.rd.Reset(head)
	sh.br.Reset(&sh.rd)
	if err := ex.rh.Read(sh.br); err != nil {
		ex.gone = true
		ex.freeIfDone()
		st.refuse(headMalformed, head)
		return
	}
	sh.st.requests.Add(1)
	st.ex = ex
	if st.grpc && st.deadline > 0 {
		st.deadline += sh.now
		sh.s.Arm(&st.dtimer, st.deadline)
	}
	ex.start(&r)
}

// refuse answers a head the HTTP/1.1 checks did not take (h2mux's validation leaves little:
// CONNECT, which the engine does not tunnel), logged as refused.
func (st *h2stream) refuse(v verdict, head []byte) {
	sh := st.h.c.sh
	sh.st.refused.Add(1)
	rx := &sh.rx
	rx.Reset()
	switch v {
	case headConnect:
		rx.RefuseMethod()
	default:
		rx.Refuse(nil, v.status(), s2b(v.message()))
	}
	if l := sh.e.core.AccessLog(); l != nil {
		method, uri, _ := requestLine(head)
		var e accesslog.Entry
		httpcore.FillRefused(&e, st.h.c.l.name, st.h.c.peer.Addr().Unmap(), method, uri, proto2, rx.Reply.Status, rx.Reply.Term)
		sh.log.add(l, &e)
	}
	st.render(&rx.Reply, false)
	if st.inUse {
		st.done(false)
	}
}

// gotData takes DATA the client sent.
func (st *h2stream) gotData(p []byte, end bool) {
	if st.finished {
		st.credit += len(p) // nobody takes it: its window goes back (dropBody)
		return
	}
	if st.in == nil && (len(p) > 0 || end && st.chunked) {
		st.in = st.h.c.sh.s.GetBuf(len(p) + 16)
	}
	if st.chunked {
		st.in = appendChunk(st.in, p)
		if end {
			st.in = appendLastChunk(st.in, nil)
		}
	} else {
		st.in = append(st.in, p...)
	}
	st.credit += len(p)
	if end {
		st.bodyEnd = true
	}
}

// gotTrailers ends the body with the client's trailers (a chunked body carries them to the
// backend; a body with a length has no place for them, and they are dropped).
func (st *h2stream) gotTrailers(fields []hpack.HeaderField) {
	st.bodyEnd = true
	if !st.chunked {
		return
	}
	if st.in == nil {
		st.in = st.h.c.sh.s.GetBuf(64)
	}
	st.in = append(st.in, '0', '\r', '\n')
	for _, f := range fields {
		st.in = appendField(st.in, f.Name, s2b(f.Value))
	}
	st.in = append(st.in, '\r', '\n')
}

// dropBody gives back the window of body bytes nobody will take.
func (st *h2stream) dropBody() {
	if st.s != nil && st.credit > 0 {
		st.h.mux.Consumed(st.s, st.credit)
	}
	st.credit = 0
	if st.in != nil {
		st.h.c.sh.s.PutBuf(st.in)
		st.in = nil
	}
}

// The front methods.

func (st *h2stream) pending() []byte { return st.in }

func (st *h2stream) consume(n int) {
	st.in = st.in[:copy(st.in, st.in[n:])]
	give := 0
	switch {
	case len(st.in) == 0:
		give = st.credit
		st.h.c.sh.s.PutBuf(st.in)
		st.in = nil
	case !st.chunked:
		give = min(n, st.credit)
	}
	if give > 0 {
		st.credit -= give
		if st.s != nil {
			st.h.mux.Consumed(st.s, give)
			st.h.kick() // a WINDOW_UPDATE may be due
		}
	}
}

func (st *h2stream) readable() bool           { return false }
func (st *h2stream) read([]byte) (int, error) { return 0, evloop.ErrAgain }
func (st *h2stream) phase() uint8             { return st.tphase }
func (st *h2stream) lst() *listener           { return st.h.c.l }
func (st *h2stream) peerAddr() netip.AddrPort { return st.h.c.peer }
func (st *h2stream) localAddr() net.Addr      { return st.h.c.localAddr() }
func (st *h2stream) alive() bool              { return st.inUse }
func (st *h2stream) generation() uint32       { return st.gen }
func (st *h2stream) expired(now int64) bool   { return st.deadline > 0 && now >= st.deadline }
func (st *h2stream) blocked() bool            { return len(st.out) > 0 }
func (st *h2stream) readSize() int            { return h2ReadSize }
func (st *h2stream) closing() bool            { return false }
func (st *h2stream) setClosing()              {}
func (st *h2stream) lastRequest() bool        { return false }
func (st *h2stream) raw() bool                { return true }

func (st *h2stream) arm(phase uint8, at int64) {
	st.tphase = phase
	st.h.c.sh.s.Arm(&st.timer, at)
}

func (st *h2stream) disarm() {
	st.tphase = tNone
	st.h.c.sh.s.Stop(&st.timer)
}

// Expire handles the stream's timer (the exchange's waits: body, backlog, hedge).
func (st *h2stream) Expire(now int64) {
	ex := st.ex
	if !st.inUse || ex == nil {
		return
	}
	h := st.h
	h.c.sh.now = now
	switch st.tphase {
	case tBody:
		h.c.sh.st.bodyTimeouts.Add(1)
		ex.clientTimeout()
	case tQueue:
		ex.queueTimeout()
	case tHedge:
		ex.hedgeTimer()
	}
	h.c.sh.runH2()
	h.after()
}

func (st *h2stream) continue100() {
	if st.s != nil {
		_ = st.h.mux.Headers(st.s, 100).Send(false)
		st.h.kick()
	}
}

// render answers with the core's Reply.
func (st *h2stream) render(rp *httpcore.Reply, head bool) {
	if st.s == nil {
		st.abort()
		return
	}
	if st.grpc {
		st.renderGRPC(rp)
		return
	}
	hb := st.h.mux.Headers(st.s, rp.Status)
	if len(rp.ContentType) > 0 {
		hb.AddBytes(fContentType, rp.ContentType)
	}
	var num [20]byte
	hb.AddBytes(fContentLength, strconv.AppendInt(num[:0], int64(len(rp.Body)), 10))
	if len(rp.Location) > 0 {
		hb.AddBytes(fLocation, rp.Location)
	}
	if len(rp.RetryAfter) > 0 {
		hb.AddBytes(fRetryAfter, rp.RetryAfter)
	}
	if len(rp.Allow) > 0 {
		hb.AddBytes(fAllow, rp.Allow)
	}
	body := !head && len(rp.Body) > 0
	if !st.sendHead(hb, !body) {
		return
	}
	if body {
		st.put(rp.Body, true)
	}
}

var (
	fContentType   = []byte("content-type")
	fContentLength = []byte("content-length")
	fLocation      = []byte("location")
	fRetryAfter    = []byte("retry-after")
	fAllow         = []byte("allow")
)

// sendHead sends a response head; end ends the stream with it.
func (st *h2stream) sendHead(hb *h2mux.HeaderBlock, end bool) bool {
	if err := hb.Send(end); err != nil {
		st.abort()
		return false
	}
	if end {
		st.s, st.ended = nil, true
	}
	st.h.kick()
	return true
}

// head sends the backend's response head as HEADERS: the fields the client gets over
// HTTP/1.1 (render) less the connection-specific ones and the framing of HTTP/1.1
// (Transfer-Encoding); Content-Length stays when the backend gave one.
func (st *h2stream) head(ex *exchange, _ respMode, w []byte) []byte {
	if st.s == nil {
		return w
	}
	rs := &ex.resp
	m := &ex.rm
	hb := st.h.mux.Headers(st.s, rs.status)
	for p := m.fieldsOf(); ; {
		k, v, rest, ok := nextField(p)
		if !ok {
			break
		}
		p = rest
		if len(m.dels) > 0 && m.deleted(k) || connectionField(k) {
			continue
		}
		hb.AddBytes(k, v)
	}
	for _, a := range m.adds {
		hb.AddBytes(m.str(a.name), m.str(a.value))
	}
	st.sendHead(hb, rs.framing == fNone || rs.framing == fLength && rs.remain == 0)
	return w
}

// connectionField reports the HTTP/1.1 fields that have no place in HTTP/2 (RFC 9113 §8.2.2).
func connectionField(name []byte) bool {
	switch len(name) {
	case 2:
		return httpcore.LowerEqualFold(name, "te")
	case 7:
		return httpcore.LowerEqualFold(name, "upgrade")
	case 10:
		return httpcore.LowerEqualFold(name, "connection") || httpcore.LowerEqualFold(name, "keep-alive")
	case 16:
		return httpcore.LowerEqualFold(name, "proxy-connection")
	case 17:
		return httpcore.LowerEqualFold(name, "transfer-encoding")
	}
	return false
}

// write sends body bytes a then b; the last of the response ends the stream.
func (st *h2stream) write(a, b []byte) bool {
	if len(a)+len(b) == 0 && !st.trailersDue() {
		return st.inUse
	}
	if st.ended {
		if st.s == nil && !st.finished && st.ex != nil && !st.ex.respDone() {
			st.abort() // reset meanwhile
			return false
		}
		return st.inUse
	}
	last := st.ex != nil && st.ex.resp.started && st.ex.respDone()
	if last && st.ex.resp.framing == fChunked && len(st.ex.resp.dec.trailer) > 0 {
		// The trailer section ends the stream (RFC 9113 §8.1): DATA without END_STREAM first.
		st.trl = append(st.h.c.sh.s.GetBuf(len(st.ex.resp.dec.trailer)), st.ex.resp.dec.trailer...)
		last = false
	}
	if len(a) > 0 && !st.put(a, last && len(b) == 0) {
		return false
	}
	if len(b) > 0 && !st.put(b, last) {
		return false
	}
	if st.trl != nil && len(st.out) == 0 {
		return st.sendTrailers()
	}
	return true
}

var colon = []byte{':'}

// trailersDue reports a chunked response complete with trailers not sent yet: its last read
// may have held only the last chunk and the trailer section, no data.
func (st *h2stream) trailersDue() bool {
	ex := st.ex
	return st.trl == nil && !st.ended && ex != nil && ex.resp.started && ex.respDone() &&
		ex.resp.framing == fChunked && len(ex.resp.dec.trailer) > 0
}

// sendTrailers sends the backend's trailer lines (name: value, each ended by CRLF, checked by
// the chunk decoder) as the stream's last HEADERS; h2mux leaves out connection-specific and
// malformed fields.
func (st *h2stream) sendTrailers() bool {
	trl := st.trl
	st.trl = nil
	defer st.h.c.sh.s.PutBuf(trl)
	if st.s == nil {
		st.abort()
		return false
	}
	hb := st.h.mux.Trailers(st.s)
	for p := trl; len(p) > 0; {
		line := p
		if i := bytes.IndexByte(p, '\n'); i >= 0 {
			line, p = p[:i], p[i+1:]
		} else {
			p = nil
		}
		line = bytes.TrimSuffix(line, cr)
		name, value, ok := bytes.Cut(line, colon)
		if !ok {
			continue
		}
		hb.AddBytes(name, bytes.Trim(value, " \t"))
	}
	return st.sendHead(hb, true)
}

// put hands p to the Conn as DATA within the client's windows; the rest waits in out.
func (st *h2stream) put(p []byte, end bool) bool {
	if len(st.out) > 0 {
		st.out = append(st.out, p...)
		st.endAfter = st.endAfter || end
		return true
	}
	if st.s == nil {
		st.abort()
		return false
	}
	n, err := st.h.mux.WriteData(st.s, p, end)
	if err != nil {
		st.abort()
		return false
	}
	st.h.kick()
	if n < len(p) {
		st.out = append(st.h.c.sh.s.GetBuf(len(p)-n), p[n:]...)
		st.endAfter = end
		return true
	}
	if end {
		st.s, st.ended = nil, true
	}
	return true
}

// flushOut writes what waited for the client's windows; drained, the exchange goes on (or
// the stream ends).
func (st *h2stream) flushOut() {
	if len(st.out) > 0 {
		if st.s == nil {
			st.abort()
			return
		}
		n, err := st.h.mux.WriteData(st.s, st.out, st.endAfter)
		if err != nil {
			st.abort()
			return
		}
		st.out = st.out[:copy(st.out, st.out[n:])]
		if len(st.out) > 0 {
			return
		}
		st.h.c.sh.s.PutBuf(st.out)
		st.out = nil
		if st.endAfter {
			st.s, st.ended = nil, true
		}
		if st.trl != nil && !st.sendTrailers() {
			return
		}
	}
	switch {
	case st.finished:
		st.end()
	case st.ex != nil:
		st.ex.clientDrained()
	}
}

func (st *h2stream) abort() {
	if !st.inUse {
		return
	}
	broken := false
	if ex := st.ex; ex != nil {
		broken = st.grpc && ex.resp.started && (ex.resp.term == accesslog.TermServerData || ex.resp.term == httpcore.Timeout.Termination())
		st.ex = nil
		ex.abandon()
	}
	if st.s != nil && !(broken && st.brokenStatus()) {
		st.h.mux.Cancel(st.s, h2mux.ErrCodeInternal)
	}
	st.s = nil
	st.h.kick()
	st.free()
}

// done: the exchange is over; the stream ends once its last bytes are out.
func (st *h2stream) done(bool) {
	st.ex = nil
	st.finished = true
	if len(st.out) > 0 {
		st.endAfter = st.trl == nil // else the trailers end the stream
		return
	}
	st.end()
}

// end sends END_STREAM if it has not gone yet, and frees the record.
func (st *h2stream) end() {
	if !st.ended && st.s != nil {
		_, _ = st.h.mux.WriteData(st.s, nil, true)
		st.s, st.ended = nil, true
		st.h.kick()
	}
	if st.credit > 0 || st.in != nil {
		st.dropBody() // the request's unread rest (the stream is closed: a no-op for its window)
	}
	st.free()
}

func (st *h2stream) secure() bool { return st.h.c.tls != nil }

// watchGone: a client that leaves resets the stream, or ends the connection.
func (st *h2stream) watchGone() {}
