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
	c  *clientConn
	sh *shard
	t  *table
	ps *poolState

	// The request as it goes to the backend: the forwarded head, and a small body after it.
	req     []byte
	hostAt  int   // -1, or where a head without Host gets "Host: <backend>" (HTTP/1.0)
	bodyLen int64 // Content-Length; -1 chunked; 0 none
	stream  bool  // the body streams (over maxBufferedBody, or chunked)
	remain  int64 // bytes of a Content-Length body still to come from the client
	bodyIn  int64 // body bytes read from the client
	mark    int64 // bodyIn when the body timer was last armed
	dec     chunkDecoder
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
	began      int64

	ticket  *upstream.Ticket // allocated the first time the record waits; kept with it
	queued  bool             // waiting in the backlog
	pending int              // tasks posted for this exchange not run yet (a grant, a DNS answer)
	gone    bool             // abandoned while tasks were pending: free it when they have run
	grantB  *upstream.Backend
	grantE  error

	// The attempts: att holds the one running (or, hedged, up to 1+max_hedges at once: more
	// holds those past two, allocated once per record); a is the one the response comes from
	// (the first one sent, until another's response head wins); hedges counts the copies.
	att       [2]attempt
	more      []attempt
	a         *attempt
	running   int
	hedges    int
	lastClass errClass // the last failed attempt's
	resp      respState

	logb []byte // the access log's request fields, copied when logging is on
	logf logFields
	gen  uint32 // changes when the record is freed (a caller holding it across calls checks)
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
	dnsAddr netip.AddrPort
	dnsErr  error
}

// logFields locate the access log's request fields in logb.
type logFields struct{ method, uri, proto, host, referer, ua [2]int32 }

// start routes the request whose head the connection just parsed into rh and sends it on.
func (ex *exchange) start(r *reqHead, rh *fasthttp.RequestHeader) {
	c, sh := ex.c, ex.sh
	t := sh.e.table.Load()
	ex.t, ex.began = t, sh.now
	ex.hostAt = -1
	switch {
	case rh.IsGet():
		ex.method = mGet
	case rh.IsHead():
		ex.method = mHead
	}
	ex.idem = idempotent(rh.Method())
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
	if t.access {
		ex.copyLogFields(rh)
	}
	var path []byte
	if t.needPath {
		sh.uri.Parse(rh.Host(), rh.RequestURI())
		path = sh.uri.Path()
	}
	ps, ans := t.route(c.l.name, rh.Host(), path)
	if ps == nil {
		ex.answer(ans)
		return
	}
	ex.ps = ps
	rh.SetNoDefaultContentType(true) // forward what the client sent: no Content-Type added
	ip := c.peer.Addr().Unmap()
	sh.fwd = ps.forward(rh, ip, false, ex.upgrade, sh.fwd)
	switch {
	case r.chunked:
		rh.SetContentLength(-1)
	case r.clen > 0:
	case ex.upgrade:
		rh.Del("Content-Length") // a switch has no body: the tunnel's bytes follow the head
	case ex.method != mGet && ex.method != mHead:
		rh.SetContentLength(0) // no body, said explicitly (as fasthttp's client does)
	}
	est := 512 + len(rh.RequestURI()) + len(rh.RawHeaders()) + len(sh.fwd)
	if !ex.stream && ex.bodyLen > 0 {
		est += int(ex.bodyLen)
	}
	ex.req = rh.AppendBytes(sh.s.GetBuf(est))
	if len(rh.Host()) == 0 { // HTTP/1.0 without Host: each backend gets its own name
		ex.hostAt = lineEnd(ex.req, 0)
		if len(rh.UserAgent()) > 0 {
			ex.hostAt = lineEnd(ex.req, ex.hostAt)
		}
	}
	ps.budget.request(sh.now / int64(time.Second))
	ex.key = ps.key(rh, ip)
	ex.hedged = ps.hedged(ex.idem, ex.stream, ex.upgrade)
	ex.try = 1
	if r.expect100 && ex.bodyLen != 0 && len(c.in) == 0 {
		c.write(continue100, nil) // the client waits for it before sending the body
		if !c.Registered() {
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

func (ex *exchange) copyLogFields(rh *fasthttp.RequestHeader) {
	b := ex.logb[:0]
	put := func(f *[2]int32, v []byte) {
		f[0] = int32(len(b))
		b = append(b, v...)
		f[1] = int32(len(b))
	}
	put(&ex.logf.method, rh.Method())
	put(&ex.logf.uri, rh.RequestURI())
	put(&ex.logf.proto, rh.Protocol())
	put(&ex.logf.host, rh.Host())
	put(&ex.logf.referer, rh.Referer())
	put(&ex.logf.ua, rh.UserAgent())
	ex.logb = b
}

// clientEvent is the client side's progress while the exchange runs: body bytes to read.
func (ex *exchange) clientEvent() {
	switch {
	case ex.resp.tunnel:
		ex.tunnelEvent()
	case ex.bodyLen > 0 && !ex.stream && ex.a == nil && !ex.queued && ex.pending == 0:
		ex.readSmallBody()
	case ex.stream && !ex.reqDone && !ex.resp.started && ex.a != nil && ex.a.bc != nil && ex.a.bc.state == bcActive && ex.a.sent == len(ex.a.wire):
		ex.pumpBody()
	}
}

// readSmallBody reads a body of at most maxBufferedBody bytes after the head in req, then
// picks a backend.
func (ex *exchange) readSmallBody() {
	c := ex.c
	for ex.remain > 0 {
		if len(c.in) > 0 {
			k := int(min(int64(len(c.in)), ex.remain))
			ex.req = append(ex.req, c.in[:k]...)
			c.in = c.in[:copy(c.in, c.in[k:])]
			if len(c.in) == 0 {
				c.releaseIn()
			}
			ex.got(int64(k))
			continue
		}
		if c.Ready&evloop.Readable == 0 {
			ex.waitBody()
			return
		}
		if cap(ex.req)-len(ex.req) < int(ex.remain) {
			ex.req = append(ex.req, make([]byte, ex.remain)...)[:len(ex.req)]
		}
		n, err := c.Read(ex.req[len(ex.req) : len(ex.req)+int(ex.remain)])
		if err == evloop.ErrAgain {
			ex.waitBody()
			return
		}
		if err != nil {
			ex.failClient(errClient)
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
		ex.c.arm(tBody, ex.sh.now+ex.c.l.idle)
	}
}

// waitBody waits for body bytes: every bodyMark of them within idle_timeout.
func (ex *exchange) waitBody() {
	if ex.c.tphase != tBody {
		ex.c.arm(tBody, ex.sh.now+ex.c.l.idle)
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
func (ex *exchange) clientTimeout() { ex.failClient(errClientTimeout) }

// failClient ends an exchange whose client failed to send its body: 400 or 408 when no
// response has started, and the connection closes.
func (ex *exchange) failClient(class errClass) {
	c := ex.c
	c.closeAfter = true
	if ex.resp.started {
		c.abort()
		return
	}
	ex.dropAll(class, false)
	ex.answer(answer{status: class.status(), msg: "ballast: " + class.String() + "\n", close: true})
}

// pick acquires a backend, or queues the request, or answers why not.
func (ex *exchange) pick() {
	if ex.ticket == nil {
		ex.ticket = new(upstream.Ticket)
	}
	b, queued, ans := ex.ps.acquire(ex.key, ex.tried, ex.ticket, ex)
	if ans.status != 0 {
		if ex.try > 1 || ex.stale > 0 {
			ex.failAttempts(ex.lastClass)
			return
		}
		ex.answer(ans)
		return
	}
	if queued {
		ex.queued = true
		ex.pending++
		ex.sh.st.queued.Add(1)
		if d := ex.ps.pool.QueueTimeout(); d > 0 {
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
				ex.ps.release(b, 0, 0, false)
			}
			ex.freeIfDone()
			return
		}
		if ex.c.tphase == tQueue {
			ex.c.disarm()
		}
		if err != nil {
			ex.answer(acquireAnswer(err))
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
		a.failed(errConnect, a.dnsErr)
		return
	}
	a.connect(a.dnsAddr)
}

// queueTimeout: the request waited queue_timeout in the backlog.
func (ex *exchange) queueTimeout() {
	if !ex.queued || !ex.ps.pool.Cancel(ex.ticket, true) {
		return // granted meanwhile: the grant is on its way (Run)
	}
	ex.queued = false
	ex.pending--
	ex.answer(acquireAnswer(upstream.ErrQueueTimeout))
}

// launch starts an attempt on b, in a free place of att: an idle connection of this shard to
// b, or a new one. The first attempt is the one the response is expected from.
func (ex *exchange) launch(b *upstream.Backend) {
	sh := ex.sh
	a := ex.freeAttempt()
	if a == nil {
		ex.ps.release(b, 0, 0, false)
		return
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
	timeout := ex.ps.connectTimeout
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
	bc := sh.newBackend(a.b)
	sh.st.connects.Add(1)
	done, err := sh.s.Connect(&bc.FD, ap, bc)
	if err != nil {
		sh.freeBackend(bc)
		sh.st.connectFailures.Add(1)
		a.failed(errConnect, err)
		return
	}
	sh.st.backendConns.Add(1)
	sh.linkAll(bc)
	a.attach(bc)
	if !done {
		bc.state = bcConnecting
		bc.arm(bConnect, sh.now+int64(ex.ps.connectTimeout))
		return
	}
	a.send()
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
		a.failed(errConnect, err)
		return
	}
	a.bc.state = bcActive
	a.send()
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
			bc.arm(bResponse, ex.sh.now+int64(ex.ps.respTimeout))
			return // the rest when the socket drains
		}
		if err != nil {
			a.failed(writeClass(a, err), err)
			return
		}
	}
	if ex.stream && !ex.reqDone {
		ex.pumpBody()
		return
	}
	ex.reqDone = true
	bc.arm(bResponse, ex.sh.now+int64(ex.ps.respTimeout))
	ex.armHedge()
	if bc.Ready&evloop.Readable != 0 {
		a.readResponse() // an early response, or a close, already waits
	}
}

// writeClass classifies a failed write of the request.
func writeClass(a *attempt, err error) errClass {
	if a.reused && !a.wrote {
		return errStale
	}
	return errClosed
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
				bc.arm(bResponse, sh.now+int64(ex.ps.respTimeout))
				return
			}
			sh.s.PutBuf(ex.up)
			ex.up = nil
			continue
		}
		if ex.bodyLen > 0 && ex.remain == 0 || ex.bodyLen < 0 && ex.dec.done() {
			ex.reqDone = true
			c.disarm()
			bc.arm(bResponse, sh.now+int64(ex.ps.respTimeout))
			return
		}
		var data []byte
		fromIn := len(c.in) > 0
		if fromIn {
			data = c.in
		} else {
			if c.Ready&evloop.Readable == 0 {
				ex.waitBody()
				return
			}
			buf := sh.s.Buf()
			if ex.bodyLen > 0 {
				buf = buf[:min(int64(len(buf)), ex.remain)]
			}
			n, err := c.Read(buf)
			if err == evloop.ErrAgain {
				ex.waitBody()
				return
			}
			if err != nil {
				ex.failClient(errClient)
				return
			}
			data = buf[:n]
		}
		used, out, err := ex.frameBody(data)
		if err != nil {
			ex.failClient(errClient)
			return
		}
		if fromIn {
			c.in = c.in[:copy(c.in, c.in[used:])]
			if len(c.in) == 0 {
				c.releaseIn()
			}
		} else if used < len(data) { // the next request came with the body's end
			c.in = append(sh.s.GetBuf(len(data)-used), data[used:]...)
		}
		if len(out) == 0 {
			continue
		}
		n, werr := bc.Write(out)
		if werr != nil && werr != evloop.ErrAgain {
			ex.uploadFailed(werr)
			return
		}
		if bc.gen != gen {
			return
		}
		if n < len(out) {
			ex.up = append(sh.s.GetBuf(len(out)-n), out[n:]...)
		}
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

// uploadFailed: the backend stopped taking the body.
func (ex *exchange) uploadFailed(err error) {
	if ex.resp.started {
		ex.c.abort() // the response is on its way: the client cannot be told
		return
	}
	ex.a.failed(errClosed, err)
}

// failed ends the attempt on its backend and applies the core's decision: a fresh
// connection, another backend, or the answer. With other attempts of a hedged request still
// running, it only ends this one (and may send a retry beside them).
func (a *attempt) failed(class errClass, err error) {
	ex := a.ex
	b := a.b
	eof := errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
	failed := ex.ps.failed(class, a.reused, eof, 0)
	reused := a.reused
	a.drop(class)
	ex.ps.release(b, 0, time.Duration(ex.sh.now-a.start), failed)
	if class == errConnect {
		ex.ps.pool.Unreachable(b)
	}
	o := outcome{class: class, reused: reused, idempotent: ex.idem, untouched: !ex.stream || ex.bodyIn == 0}
	if ex.running > 0 { // a hedged request: the others run on; a retry may join them
		if ex.ps.decide(o, ex.try, 2, ex.sh.now) == decideRetry {
			ex.markTried(b)
			if nb := ex.ps.tryAcquire(ex.key, ex.tried); nb != nil {
				ex.try++
				ex.markTried(nb)
				ex.launch(nb)
			}
		}
		return
	}
	switch ex.ps.decide(o, ex.try, ex.stale, ex.sh.now) {
	case decideFresh:
		ex.stale++
		ex.sh.closeIdle(stateOf(b)) // those idle beside the dead one are suspect too
		ex.pick()
	case decideRetry:
		ex.markTried(b)
		ex.try++
		ex.pick()
	default:
		ex.failAttempts(class)
	}
}

// armHedge starts the hedge timer once the request went out whole.
func (ex *exchange) armHedge() {
	if !ex.hedged || ex.resp.started || ex.hedges >= ex.ps.maxHedges || ex.c.tphase == tHedge {
		return
	}
	if ex.a != nil {
		ex.markTried(ex.a.b) // a copy goes elsewhere
	}
	ex.c.arm(tHedge, ex.sh.now+int64(ex.ps.hedgeDelay))
}

// hedgeTimer: hedge.delay passed without a response head: another copy, to another backend
// that can take it now, within hedge.max_hedges and the retry budget.
func (ex *exchange) hedgeTimer() {
	if ex.resp.started || ex.running == 0 {
		return
	}
	if ex.ps.hedge(ex.hedges, ex.sh.now) {
		if b := ex.ps.tryAcquire(ex.key, ex.tried); b != nil {
			ex.hedges++
			ex.markTried(b)
			ex.launch(b)
		}
	}
	if ex.hedges < ex.ps.maxHedges && !ex.resp.started && ex.c.tphase != tHedge {
		ex.c.arm(tHedge, ex.sh.now+int64(ex.ps.hedgeDelay))
	}
}

// markTried adds b to the backends the request has used, so that a retry or hedge avoids it.
func (ex *exchange) markTried(b *upstream.Backend) {
	if i := b.Index(); i >= 0 {
		ex.tried.Add(i)
	}
}

// drop closes the attempt's connection (unusable after a failure, or a loser's) and frees
// its place.
func (a *attempt) drop(class errClass) {
	ex := a.ex
	ex.lastClass = class
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

// failAttempts answers a request whose last attempt failed.
func (ex *exchange) failAttempts(class errClass) {
	if class == errClient || class == errClientTimeout {
		ex.c.closeAfter = true
	}
	ex.sh.e.logger.Warn("request failed", "pool", ex.ps.name, "reason", class.String())
	ex.resp.status = class.status()
	ex.answer(answer{status: class.status(), msg: "ballast: " + class.String() + "\n"})
}

// answer ends the exchange with a response of Ballast's own.
func (ex *exchange) answer(a answer) {
	c := ex.c
	if !ex.keepAlive || !ex.bodyRead() {
		c.closeAfter = true // the body's rest cannot be told from the next request
	}
	ex.resp.status = a.status
	c.answer(a, ex.method == mHead)
	if !c.Registered() {
		return
	}
	ex.logAccess()
	ex.finish(c.closeAfter)
}

// abandon ends the exchange because its client went away (or the engine shuts down).
func (ex *exchange) abandon() {
	if ex.queued && ex.ps.pool.Cancel(ex.ticket, false) {
		ex.queued = false
		ex.pending--
	}
	if ex.resp.tunnel {
		ex.resp.tunnel = false
		ex.sh.st.tunnels.Add(-1)
	}
	ex.dropAll(errCancelled, true)
	ex.gone = true
	ex.freeIfDone()
}

// dropAll ends every attempt still running, releasing their slots as not the backends'
// failures (released: already counted when the response came).
func (ex *exchange) dropAll(class errClass, released bool) {
	for i := range ex.places() {
		a := ex.attemptAt(i)
		if !a.live {
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
		a.drop(class)
		ex.ps.release(b, status, time.Duration(lat), false)
	}
	_ = released
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

// logAccess writes the access-log line of a finished exchange.
func (ex *exchange) logAccess() {
	t := ex.t
	if t == nil || !t.access {
		return
	}
	l := ex.sh.e.access.Load()
	if l == nil {
		return
	}
	f := func(r [2]int32) []byte { return ex.logb[r[0]:r[1]] }
	e := accesslog.Entry{
		Listener:  ex.c.l.name,
		Client:    ex.c.peer.Addr().Unmap(),
		Method:    f(ex.logf.method),
		URI:       f(ex.logf.uri),
		Proto:     f(ex.logf.proto),
		Host:      f(ex.logf.host),
		Referer:   f(ex.logf.referer),
		UserAgent: f(ex.logf.ua),
		Status:    ex.resp.status,
		BytesIn:   ex.bodyIn,
		BytesOut:  ex.resp.bytesOut,
		Duration:  time.Duration(ex.sh.now - ex.began),
		Upstream:  time.Duration(ex.resp.ttfb),
		Retries:   ex.try - 1,
	}
	if ex.ps != nil {
		e.Pool = ex.ps.name
	}
	if ex.resp.backend != nil {
		e.Backend = ex.resp.backend.ID
	}
	t.logAccess(ex.sh.log, l, &e)
}
