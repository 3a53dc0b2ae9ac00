//go:build linux

package h1

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"

	"ballast/accesslog"
	"ballast/balance"
	"ballast/config"
	"ballast/evloop"
	"ballast/httpcore"
	"ballast/upstream"
)

// maxBufferedBody is the largest request body read whole before it is forwarded, so that it
// can be sent again (a retry); larger and chunked bodies stream.
const maxBufferedBody = 64 << 10

// bodyMark is how much of a request body must arrive within idle_timeout.
const bodyMark = 64 << 10

// exchange is one request and its response. It lives from the request head to the response's
// last byte (or the failure), in the shard's free list otherwise.
type exchange struct {
	c  front // the client: an HTTP/1.1 connection or an HTTP/2 stream
	sh *shard
	ps *httpcore.Pool // the route's pool; nil until the request is admitted

	// The request as the HTTP core follows it, and its head and response as the core sees
	// them; rh is allocated once per record and kept with it.
	cx   httpcore.Exchange
	rh   *fasthttp.RequestHeader
	msg  reqMsg
	rm   respMsg
	scan httpcore.Scan

	// The request as it goes to the backend: the forwarded head, and a small body after it.
	req     []byte
	hostAt  int   // -1, or where a head without Host gets "Host: <backend>" (HTTP/1.0)
	bodyLen int64 // Content-Length; -1 chunked; 0 none
	stream  bool  // the body streams (over maxBufferedBody, or chunked)
	remain  int64 // bytes of a Content-Length body still to come from the client
	bodyIn  int64 // body bytes read from the client
	mark    int64 // bodyIn when the body timer was last armed
	dec     chunkDecoder
	limit   int64  // max_body_bytes of a chunked body; 0: none
	up      []byte // streamed body bytes the backend has not taken yet
	reqDone bool   // the request went to the backend whole

	method     uint8
	idem       bool
	http10     bool
	keepAlive  bool // the client may keep the connection (its version and Connection field)
	upgrade    bool
	hedged     bool // copies go to other backends each hedge.delay without a response
	key        uint64
	tried      balance.Tried
	try, stale int
	retrying   bool // a retry was decided: counted once another backend takes it

	ticket  *upstream.Ticket // allocated the first time the record waits; kept with it
	queued  bool             // waiting in the backlog
	pending int              // tasks posted for this exchange not run yet (a grant, a DNS answer)
	gone    bool             // abandoned while tasks were pending: free it when they have run
	grantB  *upstream.Backend
	grantE  error

	// The attempts: att holds the one running (or, hedged, up to 1+max_hedges at once: more
	// holds those past two, allocated once per record); a is the one the response comes from
	// (the first one sent, until another's response head wins); hedges counts the copies.
	att     [2]attempt
	more    []attempt
	a       *attempt
	running int
	hedges  int
	last    httpcore.Outcome // the last failed attempt's
	resp    respState

	logged bool   // the access-log line is written
	gen    uint32 // changes when the record is freed (a caller holding it across calls checks)
}

// Methods the engine tells apart.
const (
	mOther uint8 = iota
	mGet
	mHead
)

// attempt is one try of the request on one backend.
type attempt struct {
	ex      *exchange
	live    bool
	b       *upstream.Backend
	bc      *backendConn
	wire    []byte // what it sends: ex.req, or a copy with the backend's Host line
	sent    int    // bytes of wire written
	reused  bool
	wrote   bool
	start   int64
	ttfb    int64
	freed   bool // the slot released when the response was read whole (releaseRead)
	dnsAddr netip.AddrPort
	dnsErr  error
}

// start routes the request whose head the connection just parsed into ex.rh and sends it
// on: the core's steps (Begin, Route, Admit, Prepare, Key) in the order httpcore gives.
func (ex *exchange) start(r *reqHead) {
	c, sh := ex.c, ex.sh
	rh := ex.rh
	t := sh.e.core.Table()
	ex.hostAt = -1
	switch {
	case rh.IsGet():
		ex.method = mGet
	case rh.IsHead():
		ex.method = mHead
	}
	ex.idem = httpcore.Idempotent(rh.Method())
	ex.http10 = r.http10
	ex.keepAlive = !r.connClose && (!r.http10 || r.connKeepAlive)
	ex.upgrade = r.isUpgrade()
	// The framing first: an answer of Ballast's own before the body was read (404) must know
	// that the connection cannot be kept.
	switch {
	case r.chunked:
		ex.bodyLen, ex.stream = -1, true
	case r.clen > 0:
		ex.bodyLen, ex.remain = r.clen, r.clen
		ex.stream = r.clen > maxBufferedBody
	}
	proto, h2 := http11, false
	switch {
	case r.http10:
		proto = http10
	case c.raw():
		proto, h2 = proto2, true // an HTTP/2 stream's (h2stream), forwarded as HTTP/1.1
	}
	ex.msg.reset(rh, c, proto)
	cx := &ex.cx
	cx.Begin(t, c.lst().view(sh, t), &ex.msg, httpcore.Conn{Peer: c.peerAddr().Addr().Unmap(), TLS: c.secure(), HTTP2: h2})
	route := cx.Route(&ex.msg)
	if route == nil || !cx.Admit(&ex.msg) { // no route; access control, limits, redirects
		ex.reply()
		return
	}
	ps := route.Pool()
	ex.ps = ps
	rh.SetNoDefaultContentType(true) // forward what the client sent: no Content-Type added
	// checkRequest's note of the fields (a pass over rh.All() would make fasthttp rewrite Cookie)
	ex.scan = r.scan
	rh.ResetConnectionClose() // the backend connection stays open whatever the client does
	if len(rh.Host()) > 0 && r.http10 {
		// Sent as HTTP/1.1 (it has a Host), an HTTP/1.0 request keeps the pooled connection.
		rh.SetProtocolBytes(http11)
	}
	cx.Prepare(&ex.msg, &ex.scan, ex.upgrade)
	switch {
	case r.chunked:
		rh.SetContentLength(-1)
		ex.limit = cx.BodyLimit()
	case r.clen > 0:
	case ex.upgrade:
		rh.Del("Content-Length") // a switch has no body: the tunnel's bytes follow the head
	case ex.method != mGet && ex.method != mHead:
		rh.SetContentLength(0) // no body, said explicitly (as fasthttp's client does)
	}
	est := 512 + len(rh.RequestURI()) + len(rh.RawHeaders())
	if !ex.stream && ex.bodyLen > 0 {
		est += int(ex.bodyLen)
	}
	est += len(ex.msg.arena) + 10*len(ex.msg.cookies)
	ex.req = ex.msg.appendCookies(rh.AppendBytes(sh.s.GetBuf(est)))
	if len(rh.Host()) == 0 { // HTTP/1.0 without Host: each backend gets its own name
		ex.hostAt = lineEnd(ex.req, 0)
		if len(rh.UserAgent()) > 0 {
			ex.hostAt = lineEnd(ex.req, ex.hostAt)
		}
	}
	ps.CountRequest()
	ex.key = ps.Key(&ex.msg, cx.Client())
	ex.hedged = ps.HedgeDelay > 0 && ex.idem && !ex.stream && !ex.upgrade
	ex.try = 1
	if r.expect100 && ex.bodyLen != 0 && len(c.pending()) == 0 {
		c.continue100() // the client waits for it before sending the body
		if !c.alive() {
			return
		}
	}
	if ex.bodyLen > 0 && !ex.stream {
		ex.readSmallBody()
		return
	}
	ex.pick()
}

var continue100 = []byte("HTTP/1.1 100 Continue\r\n\r\n")

// lineEnd returns the offset after the line that starts at p.
func lineEnd(b []byte, p int) int {
	for i := p; i < len(b); i++ {
		if b[i] == '\n' {
			return i + 1
		}
	}
	return len(b)
}

// clientEvent is the client side's progress while the exchange runs: body bytes to read.
func (ex *exchange) clientEvent() {
	switch {
	case ex.resp.tunnel:
		ex.tunnelEvent()
	case ex.draining():
		ex.drainBody()
	case ex.bodyLen > 0 && !ex.stream && ex.a == nil && !ex.queued && ex.pending == 0:
		ex.readSmallBody()
	case ex.stream && !ex.reqDone && (!ex.resp.started || ex.duplex()) && ex.a != nil && ex.a.bc != nil && ex.a.bc.state == bcActive && ex.a.sent == len(ex.a.wire):
		ex.pumpBody()
	}
}

// readSmallBody reads a body of at most maxBufferedBody bytes after the head in req, then
// picks a backend.
func (ex *exchange) readSmallBody() {
	c := ex.c
	for ex.remain > 0 {
		if in := c.pending(); len(in) > 0 {
			k := int(min(int64(len(in)), ex.remain))
			ex.req = append(ex.req, in[:k]...)
			c.consume(k)
			ex.got(int64(k))
			continue
		}
		if !c.readable() {
			ex.waitBody()
			return
		}
		if cap(ex.req)-len(ex.req) < int(ex.remain) {
			ex.req = append(ex.req, make([]byte, ex.remain)...)[:len(ex.req)]
		}
		n, err := c.read(ex.req[len(ex.req) : len(ex.req)+int(ex.remain)])
		if err == evloop.ErrAgain {
			ex.waitBody()
			return
		}
		if err != nil {
			ex.failClient(httpcore.ClientFailed)
			return
		}
		ex.req = ex.req[:len(ex.req)+n]
		ex.got(int64(n))
	}
	c.disarm()
	ex.pick()
}

// got counts n body bytes read from the client.
func (ex *exchange) got(n int64) {
	ex.bodyIn += n
	if ex.bodyLen > 0 {
		ex.remain -= n
	}
	if ex.bodyIn-ex.mark >= bodyMark {
		ex.mark = ex.bodyIn
		ex.c.arm(tBody, ex.sh.now+ex.c.lst().idle)
	}
}

// waitBody waits for body bytes: every bodyMark of them within idle_timeout.
func (ex *exchange) waitBody() {
	if ex.c.phase() != tBody {
		ex.c.arm(tBody, ex.sh.now+ex.c.lst().idle)
	}
}

// bodyRead reports that the client's body has been read to its end.
func (ex *exchange) bodyRead() bool {
	switch {
	case ex.bodyLen > 0:
		return ex.remain == 0
	case ex.bodyLen < 0:
		return ex.dec.done()
	}
	return true
}

// clientTimeout: the body did not come in time.
func (ex *exchange) clientTimeout() { ex.failClient(httpcore.ClientTimeout) }

// failClient ends an exchange whose client failed to send its body (or sent more than
// max_body_bytes): 400, 408 or 413 when no response has started, and the connection closes.
func (ex *exchange) failClient(f httpcore.Failure) {
	c := ex.c
	c.setClosing()
	if ex.resp.started {
		ex.resp.term = accesslog.TermClientData
		c.abort()
		return
	}
	ex.dropAll()
	ex.cx.Fail(&httpcore.Outcome{Failure: f})
	ex.reply()
}

// pick acquires a backend, or queues the request, or answers why not.
func (ex *exchange) pick() {
	if ex.ticket == nil {
		ex.ticket = new(upstream.Ticket)
	}
	b, queued, err := ex.ps.AcquireAsync(&ex.msg, ex.key, ex.tried, ex.ticket, ex)
	if err != nil {
		if ex.try > 1 || ex.stale > 0 { // a retry found no backend: the last failure answers
			ex.failAttempts()
			return
		}
		ex.cx.AcquireFailed(err)
		ex.reply()
		return
	}
	if queued {
		ex.queued = true
		ex.pending++
		ex.sh.st.queued.Add(1)
		if d := ex.ps.Upstream.QueueTimeout(); d > 0 {
			ex.c.arm(tQueue, ex.sh.now+int64(d))
		}
		return
	}
	ex.launch(b)
}

// Granted hears the backlog's answer, on whichever goroutine freed a slot: it only posts
// the exchange to its shard (Run).
func (ex *exchange) Granted(_ *upstream.Ticket, b *upstream.Backend, err error) {
	ex.grantB, ex.grantE = b, err
	ex.sh.s.Post(ex)
}

// Run continues the exchange on its shard after the backlog granted it a slot.
func (ex *exchange) Run(s *evloop.Shard) {
	ex.sh.now = s.Now()
	ex.pending--
	{
		ex.queued = false
		b, err := ex.grantB, ex.grantE
		ex.grantB, ex.grantE = nil, nil
		if ex.gone {
			if b != nil {
				ex.ps.Release(b, 0, 0, false)
			}
			ex.freeIfDone()
			return
		}
		if ex.c.phase() == tQueue {
			ex.c.disarm()
		}
		if err != nil {
			ex.cx.AcquireFailed(err)
			ex.reply()
			return
		}
		ex.launch(b)
	}
}

// Run continues the attempt on its shard once its backend's name is resolved.
func (a *attempt) Run(s *evloop.Shard) {
	ex := a.ex
	ex.sh.now = s.Now()
	ex.pending--
	if ex.gone || !a.live {
		ex.freeIfDone()
		return
	}
	if a.dnsErr != nil {
		a.failed(httpcore.Connect, a.dnsErr)
		return
	}
	a.connect(a.dnsAddr)
}

// queueTimeout: the request waited queue_timeout in the backlog.
func (ex *exchange) queueTimeout() {
	if !ex.queued || !ex.ticket.Cancel(true) {
		return // granted meanwhile: the grant is on its way (Run)
	}
	ex.queued = false
	ex.pending--
	ex.cx.AcquireFailed(upstream.ErrQueueTimeout)
	ex.reply()
}

// launch starts an attempt on b, in a free place of att: an idle connection of this shard to
// b, or a new one. The first attempt is the one the response is expected from.
func (ex *exchange) launch(b *upstream.Backend) {
	sh := ex.sh
	a := ex.freeAttempt()
	if a == nil {
		ex.ps.Release(b, 0, 0, false)
		return
	}
	if ex.retrying {
		ex.retrying = false
		ex.cx.Retried(ex.ps)
	}
	*a = attempt{ex: ex, live: true, b: b, start: sh.now, wire: ex.req}
	ex.running++
	if ex.a == nil {
		ex.a = a
	}
	if ex.hostAt >= 0 {
		a.wire = append(append(append(append(sh.s.GetBuf(len(ex.req)+len(b.Address)+8), ex.req[:ex.hostAt]...), "Host: "...), b.Address...), "\r\n"...)
		a.wire = append(a.wire, ex.req[ex.hostAt:]...)
	}
	st := stateOf(b)
	if !ex.upgrade {
		for {
			bc := sh.takeIdle(st)
			if bc == nil {
				break
			}
			if bc.staleTLS(ex.ps) { // made under a tls a reload changed since
				bc.close()
				continue
			}
			if !ex.idem && bc.PeerGone() {
				// The backend closed it: nothing was sent, so the request may go out on another
				// connection whatever its method. Checked only for requests that could not be
				// replayed once written: it costs a system call.
				bc.close()
				continue
			}
			a.reused = true
			a.attach(bc)
			a.send()
			return
		}
	}
	ap, ok := b.AddrPort()
	if !ok {
		if r := st.resolved.Load(); r != nil && sh.now < r.until {
			ap, ok = r.ap, true
		}
	}
	if !ok {
		a.resolve(b.Address, st) // a host name: resolved off the shard
		return
	}
	a.connect(ap)
}

// freeAttempt returns a place for a new attempt.
func (ex *exchange) freeAttempt() *attempt {
	for i := range ex.att {
		if !ex.att[i].live {
			return &ex.att[i]
		}
	}
	if ex.more == nil { // never reallocated: attempts are referred to by pointer
		ex.more = make([]attempt, config.MaxHedges-1)
	}
	for i := range ex.more {
		if !ex.more[i].live {
			return &ex.more[i]
		}
	}
	return nil // not reached: running attempts are at most 1+max_hedges
}

// attemptAt returns attempt place i, for i < ex.places().
func (ex *exchange) attemptAt(i int) *attempt {
	if i < len(ex.att) {
		return &ex.att[i]
	}
	return &ex.more[i-len(ex.att)]
}

func (ex *exchange) places() int { return len(ex.att) + len(ex.more) }

// resolve looks a backend's host name up in a goroutine of its own and posts the answer.
func (a *attempt) resolve(address string, st *backendState) {
	ex := a.ex
	ex.pending++
	timeout := ex.ps.ConnectTimeout
	now := ex.sh.now
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		host, port, err := net.SplitHostPort(address)
		var ap netip.AddrPort
		if err == nil {
			var addrs []netip.Addr
			addrs, err = net.DefaultResolver.LookupNetIP(ctx, "ip", host)
			if err == nil && len(addrs) == 0 {
				err = errors.New("no address")
			}
			if err == nil {
				var p uint64
				p, err = parsePort(port)
				ap = netip.AddrPortFrom(addrs[0].Unmap(), uint16(p))
			}
		}
		if err == nil {
			st.resolved.Store(&resolvedAddr{ap: ap, until: now + dnsTTL})
		}
		a.dnsAddr, a.dnsErr = ap, err
		ex.sh.s.Post(a)
	}()
}

func parsePort(s string) (uint64, error) {
	var p uint64
	if s == "" || len(s) > 5 {
		return 0, errors.New("bad port")
	}
	for _, c := range []byte(s) {
		if !isDigit(c) {
			return 0, errors.New("bad port")
		}
		p = p*10 + uint64(c-'0')
	}
	if p > 65535 {
		return 0, errors.New("bad port")
	}
	return p, nil
}

// connect opens a new connection to the attempt's backend.
func (a *attempt) connect(ap netip.AddrPort) {
	ex, sh := a.ex, a.ex.sh
	if h2Pool(ex.ps) {
		a.connectH2(ap) // a stream of an HTTP/2 connection (h2backend.go)
		return
	}
	bc := sh.newBackend(a.b)
	sh.st.connects.Add(1)
	done, err := sh.s.Connect(&bc.FD, ap, bc)
	if err != nil {
		sh.freeBackend(bc)
		sh.st.connectFailures.Add(1)
		a.failed(httpcore.Connect, err)
		return
	}
	sh.st.backendConns.Add(1)
	sh.linkAll(bc)
	a.attach(bc)
	if !done {
		bc.state = bcConnecting
		bc.arm(bConnect, sh.now+int64(ex.ps.ConnectTimeout))
		return
	}
	a.established()
}

func (a *attempt) attach(bc *backendConn) {
	bc.a, bc.state = a, bcActive
	bc.scan = 0
	a.bc = bc
}

// connected: a connect in progress ended.
func (a *attempt) connected(err error) {
	if err != nil {
		a.ex.sh.st.connectFailures.Add(1)
		a.failed(httpcore.Connect, err)
		return
	}
	a.bc.state = bcActive
	a.established()
}

// send writes the request (what is left of it) to the backend, then, for the first attempt,
// streams the body.
func (a *attempt) send() {
	ex := a.ex
	bc := a.bc
	for a.sent < len(a.wire) {
		n, err := bc.Write(a.wire[a.sent:])
		if n > 0 {
			a.sent += n
			a.wrote = true
		}
		if err == evloop.ErrAgain || err == nil && a.sent < len(a.wire) {
			bc.arm(bResponse, ex.sh.now+int64(ex.ps.ResponseTimeout))
			return // the rest when the socket drains
		}
		if err != nil {
			a.failed(writeFailure(a), err)
			return
		}
	}
	if ex.stream && !ex.reqDone {
		// From here the backend's timer is timeouts.response (inactivity while the body
		// streams, moved by each write), no longer the connect's: a body slower to come than
		// timeouts.connect is no connect failure.
		bc.arm(bResponse, ex.sh.now+int64(ex.ps.ResponseTimeout))
		ex.pumpBody()
		return
	}
	ex.reqDone = true
	bc.arm(bResponse, ex.sh.now+int64(ex.ps.ResponseTimeout))
	ex.armHedge()
	ex.c.watchGone() // a client that closed its side with the request
	if bc.Ready&evloop.Readable != 0 {
		a.readResponse() // an early response, or a close, already waits
	}
}

// writeFailure classifies a failed write of the request (and a failed read of its
// response head): a pooled connection that took nothing was stale.
func writeFailure(a *attempt) httpcore.Failure {
	if a.reused && !a.wrote {
		return httpcore.Stale
	}
	return httpcore.Closed
}

// pumpBody streams the request body from the client to the backend, a read at a time, and
// stops while the backend does not take it (the client is not read meanwhile) or the client
// has nothing (the body timer runs).
func (ex *exchange) pumpBody() {
	c, bc, sh := ex.c, ex.a.bc, ex.sh
	gen := bc.gen
	for !ex.reqDone {
		if len(ex.up) > 0 {
			n, err := bc.Write(ex.up)
			if err != nil && err != evloop.ErrAgain {
				ex.uploadFailed(err)
				return
			}
			ex.up = ex.up[:copy(ex.up, ex.up[n:])]
			if len(ex.up) > 0 {
				bc.arm(bResponse, sh.now+int64(ex.ps.ResponseTimeout))
				return
			}
			sh.s.PutBuf(ex.up)
			ex.up = nil
			continue
		}
		if ex.bodyLen > 0 && ex.remain == 0 || ex.bodyLen < 0 && ex.dec.done() {
			ex.reqDone = true
			c.disarm()
			bc.arm(bResponse, sh.now+int64(ex.ps.ResponseTimeout))
			return
		}
		var data []byte
		fromIn := len(c.pending()) > 0
		if fromIn {
			data = c.pending()
		} else {
			if !c.readable() {
				ex.waitBody()
				return
			}
			buf := sh.s.Buf()
			if ex.bodyLen > 0 {
				buf = buf[:min(int64(len(buf)), ex.remain)]
			}
			n, err := c.read(buf)
			if err == evloop.ErrAgain {
				ex.waitBody()
				return
			}
			if err != nil {
				ex.failClient(httpcore.ClientFailed)
				return
			}
			data = buf[:n]
		}
		used, out, err := ex.frameBody(data)
		if err != nil {
			ex.failClient(httpcore.ClientFailed)
			return
		}
		if ex.limit > 0 && ex.bodyIn > ex.limit {
			ex.failClient(httpcore.BodyTooLarge)
			return
		}
		if cc, ok := c.(*clientConn); ok && !fromIn && used < len(data) { // the next request came with the body's end
			cc.in = append(sh.s.GetBuf(len(data)-used), data[used:]...)
		}
		// A body with a length is sent from where it was read (out is data's start): pending
		// bytes are consumed only once written or copied into up, since consuming them moves
		// what follows over them, or gives their buffer back to the pool, where the next
		// GetBuf (a frame to an HTTP/2 backend, more DATA from an HTTP/2 client) takes it.
		n, werr := 0, error(nil)
		if len(out) > 0 {
			n, werr = bc.Write(out)
			if (werr == nil || werr == evloop.ErrAgain) && bc.gen == gen && n < len(out) {
				ex.up = append(sh.s.GetBuf(len(out)-n), out[n:]...)
			}
		}
		if fromIn {
			c.consume(used)
		}
		if len(out) == 0 {
			continue
		}
		if werr != nil && werr != evloop.ErrAgain {
			ex.uploadFailed(werr)
			return
		}
		if bc.gen != gen {
			return
		}
		bc.arm(bResponse, sh.now+int64(ex.ps.ResponseTimeout))
	}
}

// frameBody takes the request body's bytes from data: a Content-Length body as it is, a
// chunked one decoded and chunked again (sizes as they came, extensions dropped, trailers
// kept). It returns how much of data was the body's and what goes to the backend.
func (ex *exchange) frameBody(data []byte) (used int, out []byte, err error) {
	if ex.bodyLen > 0 {
		k := int(min(int64(len(data)), ex.remain))
		ex.got(int64(k))
		return k, data[:k], nil
	}
	w := ex.sh.wbuf[:0]
	for used < len(data) && !ex.dec.done() {
		n, piece, err := ex.dec.decode(data[used:])
		if err != nil {
			return used, nil, err
		}
		used += n
		if len(piece) > 0 {
			ex.got(int64(len(piece)))
			w = appendChunk(w, piece)
		}
	}
	if ex.dec.done() {
		w = appendLastChunk(w, ex.dec.trailer)
	}
	ex.sh.wbuf = w
	return used, w, nil
}

// uploadFailed: the backend stopped taking the body. It may have answered first (an early
// 413, then its close with the rest of the body unread, which resets the connection): what
// it sent is still readable and goes to the client (earlyResponse); the attempt fails when
// there is nothing.
func (ex *exchange) uploadFailed(err error) {
	if ex.resp.started {
		ex.c.abort() // the response is on its way: the client cannot be told
		return
	}
	if ex.earlyResponse() {
		return
	}
	ex.a.failed(httpcore.Closed, err)
}

// failed ends the attempt on its backend and applies the core's decision: a fresh
// connection (the keep-alive race, up to twice), another backend, or the answer. With other
// attempts of a hedged request still running, it only ends this one (and may send a retry
// beside them).
func (a *attempt) failed(f httpcore.Failure, err error) {
	ex := a.ex
	ps := ex.ps
	b := a.b
	if a.reused && (errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)) {
		err = io.EOF // a pooled connection the backend closed as the request went out
	}
	o := httpcore.Outcome{Failure: f, Err: err, Reused: a.reused, Sent: a.wrote}
	if !ex.resp.started {
		ex.resp.backend = b // the log names the last backend tried
	}
	a.drop(&o)
	ps.Release(b, time.Duration(ex.sh.now-a.start), 0, ps.BackendFailure(&o))
	if f == httpcore.Connect && err != errBackendHandshakes { // our own bound is no fault of b's
		ps.Upstream.Unreachable(b)
	}
	untouched := !ex.stream || ex.bodyIn == 0
	expired := ex.c.expired(ex.sh.now) // no retry past the client's own deadline
	if ex.running > 0 {                // a hedged request: the others run on; a retry may join them
		if !expired && ex.try < ps.Attempts && ps.Retryable(&o, ex.idem, untouched) && ps.SpendRetry() {
			ex.markTried(b)
			if nb, err := ps.Upstream.TryAcquire(ex.key, ex.tried); err == nil {
				ex.try++
				ex.markTried(nb)
				ex.cx.Retried(ps)
				ex.launch(nb)
			}
		}
		return
	}
	switch {
	case expired:
		ex.failAttempts()
	case ex.stale < 2 && untouched && o.Fresh(ex.idem):
		ex.stale++
		ex.sh.closeIdle(stateOf(b)) // those idle beside the dead one are suspect too
		ex.pick()
	case ex.try < ps.Attempts && ps.Retryable(&o, ex.idem, untouched) && ps.SpendRetry():
		ex.markTried(b)
		ex.try++
		ex.retrying = true
		ex.pick()
	default:
		ex.failAttempts()
	}
}

// armHedge starts the hedge timer once the request went out whole.
func (ex *exchange) armHedge() {
	if !ex.hedged || ex.resp.started || ex.hedges >= ex.ps.MaxHedges || ex.c.phase() == tHedge {
		return
	}
	if ex.a != nil {
		ex.markTried(ex.a.b) // a copy goes elsewhere
	}
	ex.c.arm(tHedge, ex.sh.now+int64(ex.ps.HedgeDelay))
}

// hedgeTimer: hedge.delay passed without a response head: another copy, to another backend
// that can take it now, within hedge.max_hedges and the retry budget.
func (ex *exchange) hedgeTimer() {
	if ex.resp.started || ex.running == 0 {
		return
	}
	ps := ex.ps
	if ex.hedges < ps.MaxHedges && ps.SpendHedge() {
		if b, err := ps.Upstream.TryAcquire(ex.key, ex.tried); err == nil {
			ex.hedges++
			ex.markTried(b)
			ex.launch(b)
		}
	}
	if ex.hedges < ps.MaxHedges && !ex.resp.started && ex.c.phase() != tHedge {
		ex.c.arm(tHedge, ex.sh.now+int64(ps.HedgeDelay))
	}
}

// markTried adds b to the backends the request has used, so that a retry or hedge avoids it.
func (ex *exchange) markTried(b *upstream.Backend) { httpcore.MarkTried(&ex.tried, b) }

// drop closes the attempt's connection (unusable after a failure, or a loser's) and frees
// its place; o, when the attempt failed, is kept as the exchange's last failure.
func (a *attempt) drop(o *httpcore.Outcome) {
	ex := a.ex
	if o != nil {
		ex.last = *o
	}
	if a.bc != nil {
		a.bc.close()
		a.bc = nil
	}
	if len(a.wire) > 0 && &a.wire[0] != &ex.req[0] {
		ex.sh.s.PutBuf(a.wire)
	}
	a.wire = nil
	a.sent, a.wrote = 0, false
	a.b = nil
	if a.live {
		a.live = false
		ex.running--
	}
	if ex.a == a {
		ex.a = nil
	}
}

// failAttempts answers a request whose last attempt failed: past the client's own deadline
// (grpc-timeout) as a timeout, whatever broke the attempt, since a backend that honours the
// deadline resets its stream at about the instant the shard's timer would have answered.
func (ex *exchange) failAttempts() {
	o := &ex.last
	if ex.c.expired(ex.sh.now) {
		o.Failure = httpcore.Timeout
	}
	if o.Failure == httpcore.ClientFailed || o.Failure == httpcore.ClientTimeout {
		ex.c.setClosing()
	}
	ex.sh.e.logger.Warn("request failed", "pool", ex.ps.Name, "reason", o.Failure.String(), "err", o.Err)
	ex.cx.Fail(o)
	ex.reply()
}

// reply ends the exchange with the core's answer (ex.cx.Reply).
func (ex *exchange) reply() {
	c := ex.c
	rp := &ex.cx.Reply
	if rp.Close || !ex.keepAlive || !ex.bodyRead() {
		c.setClosing() // the body's rest cannot be told from the next request
	}
	ex.resp.status, ex.resp.term = rp.Status, rp.Term
	c.render(rp, ex.method == mHead)
	if !c.alive() {
		return
	}
	ex.logAccess()
	ex.finish(c.closing())
}

// abandon ends the exchange because its client went away (or the engine shuts down).
func (ex *exchange) abandon() {
	if ex.queued && ex.ticket.Cancel(false) {
		ex.queued = false
		ex.pending--
	}
	if ex.resp.tunnel {
		ex.resp.tunnel = false
		ex.sh.st.tunnels.Add(-1)
	}
	switch {
	case ex.resp.term != "":
	case !ex.resp.started:
		ex.resp.status, ex.resp.term = httpcore.ClientGone.Status(), httpcore.ClientGone.Termination()
	default:
		ex.resp.term = accesslog.TermClientData // cut off in the middle of the response
	}
	ex.dropAll()
	if !ex.logged {
		ex.logAccess()
	}
	ex.gone = true
	ex.freeIfDone()
}

// dropAll ends every attempt still running, releasing their slots as not the backends'
// failures.
func (ex *exchange) dropAll() {
	for i := range ex.places() {
		a := ex.attemptAt(i)
		if !a.live {
			continue
		}
		if a.freed {
			a.drop(nil)
			continue
		}
		b, lat := a.b, a.ttfb
		if lat == 0 {
			lat = ex.sh.now - a.start
		}
		status := 0
		if a == ex.a {
			status = ex.resp.status
		}
		a.drop(nil)
		ex.ps.Release(b, time.Duration(lat), status, false)
	}
}

// finish gives the exchange back; the client connection goes on.
func (ex *exchange) finish(closeAfter bool) {
	c := ex.c
	ex.gone = true
	ex.freeIfDone()
	c.done(closeAfter)
}

// freeIfDone frees an exchange that nothing refers to any more.
func (ex *exchange) freeIfDone() {
	if ex.gone {
		ex.dropEncoder()
	}
	if !ex.gone || ex.pending > 0 {
		return
	}
	sh := ex.sh
	if ex.req != nil {
		sh.s.PutBuf(ex.req)
	}
	if ex.up != nil {
		sh.s.PutBuf(ex.up)
	}
	sh.freeExchange(ex)
}

// logAccess writes the access-log line of a finished exchange (through the shard's writer),
// once.
func (ex *exchange) logAccess() {
	if ex.logged {
		return
	}
	ex.logged = true
	l := ex.sh.e.core.AccessLog()
	if l == nil {
		return
	}
	rs := &ex.resp
	d := httpcore.Done{
		Status: rs.status, BytesIn: ex.bodyIn, BytesOut: rs.bytesOut,
		Pool: ex.ps, Backend: rs.backend, Upstream: time.Duration(rs.ttfb), Term: rs.term,
	}
	var e accesslog.Entry
	if ex.cx.Fill(&e, &ex.msg, &d) {
		ex.sh.log.add(l, &e)
	}
}
