package h2proxy

import (
	"context"
	cryptotls "crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http2/hpack"

	"ballast/accesslog"
	"ballast/h2mux"
)

// The owner of one client connection's h2mux.Conn (Ballast's own HTTP/2 state machine, which
// has no I/O): the goroutine ServeConn runs on reads from the socket into a buffer and feeds
// the Conn; a writer goroutine writes what the Conn framed; a timer calls Tick at the Conn's
// Deadline. Each stream runs the engine's handler (handler.go) on a goroutine of its own,
// through an http.Request and an http.ResponseWriter built over the stream, as the HTTP/2
// plane did over x/net/http2. The Conn is guarded by one mutex per connection (never shared
// between connections): the reader holds it while feeding, the writer while taking the output,
// a stream's goroutine while it hands the Conn a response head, body bytes or trailers, or
// takes request body bytes. Handler events run inside those calls and only note what happened
// and wake the goroutines that wait for it.

// origin is the clock of every connection's Conn (Config.Now): monotonic nanoseconds.
var origin = time.Now()

func monoNow() int64 { return int64(time.Since(origin)) }

// readBuffer is the size of a connection's read buffer (from readPool while it reads).
const readBuffer = 16 << 10

// maxStreamBuffer is how many response body bytes a stream gathers before it hands them to
// the Conn: a small answer goes out as HEADERS and DATA in one write.
const maxStreamBuffer = 16 << 10

// maxLinger is how many bytes a connection that is done (its GOAWAY written) still reads
// before it closes: what a client had in flight, not a flood.
const maxLinger = 64 << 10

var readPool = sync.Pool{New: func() any { b := make([]byte, readBuffer); return &b }}

// errStreamGone is what a stream's writes return once the stream ended (the client reset it,
// the connection ended, or the response is complete).
var errStreamGone = errors.New("h2proxy: stream closed")

// h2conn is one client connection served by an h2mux.Conn.
type h2conn struct {
	cs  *connState
	nc  net.Conn
	tls *cryptotls.ConnectionState

	mu       sync.Mutex // guards mux and everything the streams share with it
	mux      *h2mux.Conn
	armed    int64 // the Deadline the timer is set for (0: none)
	timer    *time.Timer
	writing  bool // a flusher goroutine runs
	gone     bool // the reader ended: no more flushers
	closing  bool // the last output of a Done connection is written
	flushers sync.WaitGroup
	streams  sync.WaitGroup
	workers  *workerShard         // where its streams' handlers run
	small    [idleReadBuffer]byte // what an idle connection reads into
}

// idleReadBuffer is the read buffer of a connection with no stream open: a new request's
// frames fill it, and the next reads take a pooled readBuffer until the streams are done.
const idleReadBuffer = 512

// serveMux serves c with an h2mux.Conn until it closes and every stream's goroutine is done.
func (cs *connState) serveMux(c net.Conn, cfg h2mux.Config) {
	h := &h2conn{cs: cs, nc: c, workers: pickShard()}
	if tc, ok := c.(*cryptotls.Conn); ok {
		st := tc.ConnectionState()
		h.tls = &st
	}
	cfg.Now = monoNow
	h.mux = h2mux.NewConn(h, cfg)
	h.timer = time.AfterFunc(time.Hour, h.tick)
	h.timer.Stop()
	p := cs.proxy
	p.mu.Lock()
	p.live[h] = struct{}{}
	closed := p.closed
	p.mu.Unlock()
	h.mu.Lock()
	if closed {
		h.mux.Shutdown()
	}
	h.unlock() // the server preface
	h.readLoop()
	h.mu.Lock()
	h.gone = true
	h.mu.Unlock()
	h.flushers.Wait()
	h.timer.Stop()
	_ = c.Close()
	h.streams.Wait()
	p.mu.Lock()
	delete(p.live, h)
	p.mu.Unlock()
}

// readLoop feeds the Conn what the client sends until the socket fails or closes. A
// connection without open streams reads into its small buffer; one that is busy into a
// pooled buffer of readBuffer bytes, given back when its streams are done.
func (h *h2conn) readLoop() {
	var bp *[]byte
	defer func() {
		if bp != nil {
			readPool.Put(bp)
		}
	}()
	lingered := 0
	for {
		buf := h.small[:]
		if bp != nil {
			buf = *bp
		}
		n, err := h.nc.Read(buf)
		if n > 0 {
			h.mu.Lock()
			_ = h.mux.Feed(buf[:n]) // an error leaves GOAWAY in the output and Done true
			// Done and written, or failed (its GOAWAY maybe still waiting on a full socket):
			// what the client sends now is only counted, and a flood closes at once.
			closing, idle := h.closing || h.mux.Err() != nil, h.mux.NumStreams() == 0
			h.unlock()
			if closing {
				if lingered += n; lingered > maxLinger {
					return
				}
			}
			switch {
			case bp == nil && n == len(buf):
				bp = readPool.Get().(*[]byte)
			case bp != nil && idle && n < len(buf):
				readPool.Put(bp)
				bp = nil
			}
		}
		if err != nil {
			h.mu.Lock()
			h.mux.Abort()
			h.unlock()
			return
		}
	}
}

// flush writes what the Conn framed, every batch that became ready meanwhile in one system
// call, until nothing is left; when the Conn is done it half-closes and lets the reader
// finish. It runs on a goroutine of its own, started by kick when output waits and no
// flusher runs, so an idle connection has none.
func (h *h2conn) flush() {
	defer h.flushers.Done()
	var wbuf *[]byte // from framePool while there is something to write
	h.mu.Lock()
	for out := h.mux.Output(); len(out) > 0; out = h.mux.Output() {
		if wbuf == nil {
			wbuf = framePool.Get().(*[]byte)
		}
		*wbuf = append((*wbuf)[:0], out...)
		h.mux.Advance(len(out)) // streams that waited for output room may go on
		h.kick()
		h.mu.Unlock()
		_ = h.nc.SetWriteDeadline(time.Now().Add(h2mux.DefaultStallTimeout))
		_, err := h.nc.Write(*wbuf)
		h.mu.Lock()
		if err != nil {
			h.mux.Abort()
			h.writing, h.gone = false, true
			h.kick() // the timer only: no flusher after this one
			h.mu.Unlock()
			putFrames(wbuf)
			_ = h.nc.Close() // the reader stops too
			return
		}
	}
	done := h.mux.Done() && !h.closing
	if done {
		h.closing = true
	}
	h.writing = false
	h.mu.Unlock()
	putFrames(wbuf)
	if done {
		h.linger()
	}
}

// linger ends a connection the Conn is done with (its GOAWAY is written): a half-close, and
// a moment for the reader to take what the client still sends, so that closing does not
// reset the connection before the client read the GOAWAY.
func (h *h2conn) linger() {
	if cw, ok := h.nc.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	_ = h.nc.SetReadDeadline(time.Now().Add(time.Second))
}

// tick runs the Conn's timers when the Deadline the timer was set for has come.
func (h *h2conn) tick() {
	h.mu.Lock()
	h.armed = 0 // re-arm for whatever Deadline says now
	_ = h.mux.Tick()
	h.unlock()
}

// kick, with h.mu held, re-arms the timer for the Conn's Deadline and starts a flusher when
// there is output (or the Conn is done) and none runs.
func (h *h2conn) kick() {
	// The timer is moved only when the Conn needs it sooner: a later Deadline (each read
	// moves the PING on silence) waits for the timer, whose Tick does nothing early and
	// re-arms it.
	if d := h.mux.Deadline(); d != 0 && (h.armed <= 0 || d < h.armed) {
		h.armed = d
		h.timer.Reset(time.Duration(d - monoNow()))
	}
	if !h.writing && !h.gone && (len(h.mux.Output()) > 0 || h.mux.Done() && !h.closing) {
		h.writing = true
		h.flushers.Add(1)
		go h.flush()
	}
}

// unlock is kick, then h.mu.Unlock.
func (h *h2conn) unlock() {
	h.kick()
	h.mu.Unlock()
}

// shutdown sends GOAWAY: the streams open go on, new ones are refused, and the connection
// closes when the last one ends.
func (h *h2conn) shutdown() {
	h.mu.Lock()
	h.mux.Shutdown()
	h.unlock()
}

// The h2mux.Handler events, with h.mu held (inside the Conn's calls).

func (h *h2conn) Request(s *h2mux.Stream, req *h2mux.Request, end bool) {
	st := &h2stream{h: h, s: s, hdr: make(http.Header, 8)}
	st.cond.L = &h.mu
	r, ok := st.request(req, end)
	if !ok {
		h.mux.Cancel(s, h2mux.ErrCodeProtocol)
		return
	}
	s.User = st
	st.req = r
	h.streams.Add(1)
	h.workers.run(st)
}

func (h *h2conn) Data(s *h2mux.Stream, p []byte, end bool) {
	st := s.User.(*h2stream)
	if st.bodyClosed {
		h.mux.Consumed(s, len(p)) // nobody reads it any more
	} else {
		st.body = append(st.body, p...)
	}
	if end {
		st.bodyEnd = true
	}
	st.cond.Broadcast()
}

func (h *h2conn) Trailers(s *h2mux.Stream, fields []hpack.HeaderField) {
	st := s.User.(*h2stream)
	if st.req.Trailer != nil { // the declared ones reach r.Trailer when the body's EOF is read
		st.trailers = make(http.Header, len(fields))
		for _, f := range fields {
			k := canonicalKey(f.Name)
			st.trailers[k] = append(st.trailers[k], f.Value)
		}
	}
	st.bodyEnd = true
	st.cond.Broadcast()
}

func (h *h2conn) Reset(s *h2mux.Stream, _ h2mux.ErrCode) {
	st := s.User.(*h2stream)
	st.s = nil
	if !st.bodyEnd {
		st.bodyErr = errStreamGone
	}
	st.cancel()
	st.cond.Broadcast()
}

func (h *h2conn) Writable(s *h2mux.Stream) {
	st := s.User.(*h2stream)
	st.blocked = false
	st.cond.Broadcast()
}

func (h *h2conn) GoAway(h2mux.ErrCode, []byte) {}

// Refused logs a request head the Conn refused itself (431, or a malformed head reset with
// PROTOCOL_ERROR as 400): every request gets its access-log line, as over HTTP/1.
func (h *h2conn) Refused(method, path string, status int, reason string) {
	cs := h.cs
	cs.proxy.core.LogRefused(cs.listener, cs.client, s2b(method), s2b(path), proto2, status, accesslog.TermRefused)
	cs.proxy.logger.Debug("refused HTTP/2 request", "client", cs.clientStr, "status", status, "reason", reason)
}

// h2stream is one stream: the http.Request's body and the http.ResponseWriter the handler
// writes to. Fields marked (mu) are guarded by the connection's mutex; the others belong to
// the stream's goroutine.
type h2stream struct {
	h      *h2conn
	s      *h2mux.Stream // (mu) nil once the stream ended
	req    *http.Request
	cancel context.CancelFunc
	cond   sync.Cond // (mu) on h.mu: body bytes came, the window opened, the stream ended

	// the request body (mu)
	body       []byte // received, not read yet: body[bodyOff:]
	bodyOff    int
	bodyEnd    bool
	bodyErr    error
	bodyClosed bool
	trailers   http.Header // received, handed to req.Trailer with the body's EOF
	expect     bool        // Expect: 100-continue, not answered yet
	blocked    bool        // (mu) WriteData took less than it was given: wait for Writable

	// the response
	hdr         http.Header
	status      int
	wroteHeader bool
	headSent    bool
	head        bool   // a HEAD request: the body is dropped
	out         []byte // body bytes gathered, not handed to the Conn yet
	outp        *[]byte
}

// request builds the http.Request of a new stream (the head x/net/http2 would give a handler).
func (st *h2stream) request(req *h2mux.Request, end bool) (*http.Request, bool) {
	var u *url.URL
	uri := req.Path
	if req.Method == http.MethodConnect {
		u, uri = &url.URL{Host: req.Authority}, req.Authority
	} else {
		var err error
		if u, err = url.ParseRequestURI(req.Path); err != nil {
			return nil, false
		}
	}
	hdr := make(http.Header, len(req.Fields))
	vals := make([]string, len(req.Fields)) // one allocation for every field's value slice
	var cookie []string
	for i, f := range req.Fields {
		if f.Name == "cookie" { // split crumbs (RFC 9113 §8.2.3) join into one field
			cookie = append(cookie, f.Value)
			continue
		}
		k := canonicalKey(f.Name)
		vals[i] = f.Value
		if prev := hdr[k]; len(prev) > 0 {
			hdr[k] = append(prev, f.Value)
		} else {
			hdr[k] = vals[i : i+1 : i+1]
		}
	}
	if len(cookie) > 0 {
		hdr["Cookie"] = []string{strings.Join(cookie, "; ")}
	}
	host := req.Authority
	if host == "" {
		host = hdr.Get("Host")
	}
	ctx, cancel := context.WithCancel(context.Background())
	st.cancel = cancel
	r := &http.Request{
		Method:     req.Method,
		URL:        u,
		Proto:      "HTTP/2.0",
		ProtoMajor: 2,
		Header:     hdr,
		Host:       host,
		RequestURI: uri,
		RemoteAddr: st.h.cs.clientStr,
		TLS:        st.h.tls,
	}
	switch {
	case end:
		r.Body, st.bodyEnd = http.NoBody, true
	default:
		r.Body, r.ContentLength = st, req.ContentLength // -1: unknown
		for _, v := range hdr["Trailer"] {
			for _, k := range strings.Split(v, ",") {
				if k = http.CanonicalHeaderKey(strings.TrimSpace(k)); k != "" {
					if r.Trailer == nil {
						r.Trailer = http.Header{}
					}
					r.Trailer[k] = nil
				}
			}
		}
		st.expect = strings.EqualFold(hdr.Get("Expect"), "100-continue")
	}
	st.head = req.Method == http.MethodHead
	return r.WithContext(ctx), true
}

// serve runs the handler on the stream and ends the stream with what it wrote.
func (st *h2stream) serve() {
	h := st.h
	defer h.streams.Done()
	defer st.cancel()
	defer func() {
		if v := recover(); v != nil {
			if v != http.ErrAbortHandler {
				h.cs.proxy.logger.Error("HTTP/2 stream handler panicked", "panic", v)
			}
			h.mu.Lock()
			if st.s != nil {
				h.mux.Cancel(st.s, h2mux.ErrCodeInternal)
				st.s = nil
			}
			st.closeBody()
			h.unlock()
		}
	}()
	h.cs.ServeHTTP(st, st.req)
	h.mu.Lock()
	_ = st.flush(true)
	st.closeBody()
	h.unlock()
}

// closeBody, with h.mu held, drops the request body nobody will read: its window goes back
// to the client, and a reader still waiting (a transport's writer) is told the stream ended.
func (st *h2stream) closeBody() {
	if st.bodyClosed {
		return
	}
	st.bodyClosed = true
	if n := len(st.body) - st.bodyOff; n > 0 && st.s != nil {
		st.h.mux.Consumed(st.s, n)
	}
	st.body, st.bodyOff = nil, 0
	if st.bodyErr == nil && !st.bodyEnd {
		st.bodyErr = errStreamGone
	}
	st.cond.Broadcast()
}

// Read is the request body's: the bytes the client sent, their window given back as they are
// read.
func (st *h2stream) Read(p []byte) (int, error) {
	h := st.h
	h.mu.Lock()
	defer h.unlock()
	if st.expect {
		st.expect = false
		if st.s != nil && !st.headSent {
			_ = h.mux.Headers(st.s, http.StatusContinue).Send(false)
		}
	}
	for st.bodyOff == len(st.body) && !st.bodyEnd && st.bodyErr == nil && !st.bodyClosed {
		st.cond.Wait()
	}
	if st.bodyOff < len(st.body) {
		n := copy(p, st.body[st.bodyOff:])
		st.bodyOff += n
		if st.s != nil {
			h.mux.Consumed(st.s, n)
		}
		if st.bodyOff == len(st.body) { // drained: a large buffer is not kept (many streams)
			if cap(st.body) > maxStreamBuffer {
				st.body = nil
			}
			st.body, st.bodyOff = st.body[:0], 0
		}
		return n, nil
	}
	if st.bodyErr != nil {
		return 0, st.bodyErr
	}
	if st.bodyClosed && !st.bodyEnd {
		return 0, errStreamGone
	}
	for k, vv := range st.trailers { // on the reader's goroutine, as net/http's bodies do
		st.req.Trailer[k] = vv
	}
	st.trailers = nil
	return 0, io.EOF
}

// Close is the request body's: what is left is dropped.
func (st *h2stream) Close() error {
	h := st.h
	h.mu.Lock()
	st.closeBody()
	h.unlock()
	return nil
}

func (st *h2stream) Header() http.Header { return st.hdr }

func (st *h2stream) WriteHeader(code int) {
	if st.wroteHeader || code < 200 {
		return // interim answers are not relayed (the transports handle 100-continue)
	}
	st.wroteHeader, st.status = true, code
}

func (st *h2stream) Write(p []byte) (int, error) {
	if !st.wroteHeader {
		st.WriteHeader(http.StatusOK)
	}
	if st.head || !bodyAllowed(st.status) {
		return len(p), nil
	}
	if len(st.out)+len(p) <= maxStreamBuffer {
		if st.outp == nil {
			st.outp = framePool.Get().(*[]byte)
			st.out = (*st.outp)[:0]
		}
		st.out = append(st.out, p...)
		return len(p), nil
	}
	h := st.h
	h.mu.Lock()
	defer h.unlock()
	if err := st.flush(false); err != nil {
		return 0, err
	}
	if err := st.send(p, false); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush sends the head, and what the stream gathered, now.
func (st *h2stream) Flush() {
	if !st.wroteHeader {
		st.WriteHeader(http.StatusOK)
	}
	h := st.h
	h.mu.Lock()
	_ = st.flush(false)
	h.unlock()
}

// flush, with h.mu held, sends the head if it is not sent yet and the gathered body bytes;
// end ends the stream (with the trailers the handler set, if any).
func (st *h2stream) flush(end bool) error {
	h := st.h
	if st.s == nil {
		st.putOut()
		return errStreamGone
	}
	if !st.wroteHeader {
		st.WriteHeader(http.StatusOK)
	}
	trailers := end && st.hasTrailers()
	if !st.headSent {
		hb := h.mux.Headers(st.s, st.status)
		for k, vv := range st.hdr {
			if strings.HasPrefix(k, http.TrailerPrefix) || k == "Trailer" {
				continue
			}
			for _, v := range vv {
				hb.Add(k, v)
			}
		}
		if end && !st.head && bodyAllowed(st.status) {
			if _, ok := st.hdr["Content-Length"]; !ok {
				hb.Add("content-length", itoa(len(st.out)))
			}
		}
		st.headSent = true
		if err := hb.Send(end && len(st.out) == 0 && !trailers); err != nil {
			h.mux.Cancel(st.s, h2mux.ErrCodeInternal)
			st.s = nil
			st.putOut()
			return err
		}
		if end && len(st.out) == 0 && !trailers {
			st.s = nil
			st.putOut()
			return nil
		}
	}
	if len(st.out) > 0 || end && !trailers {
		if err := st.send(st.out, end && !trailers); err != nil {
			st.putOut()
			return err
		}
	}
	st.putOut()
	if trailers {
		tb := h.mux.Trailers(st.s)
		for k, vv := range st.hdr {
			if name, ok := strings.CutPrefix(k, http.TrailerPrefix); ok {
				for _, v := range vv {
					tb.Add(name, v)
				}
			}
		}
		err := tb.Send(true)
		if err != nil {
			h.mux.Cancel(st.s, h2mux.ErrCodeInternal)
		}
		st.s = nil
		return err
	}
	if end {
		st.s = nil
	}
	return nil
}

// send, with h.mu held, hands p to the Conn as DATA, waiting for the client's windows and the
// output's room as long as it must; end ends the stream with the last byte.
func (st *h2stream) send(p []byte, end bool) error {
	h := st.h
	for {
		if st.s == nil {
			return errStreamGone
		}
		st.blocked = true
		n, err := h.mux.WriteData(st.s, p, end)
		if err != nil {
			return err
		}
		p = p[n:]
		if len(p) == 0 {
			st.blocked = false
			return nil
		}
		h.kick() // what was framed goes out meanwhile
		for st.blocked && st.s != nil {
			st.cond.Wait()
		}
	}
}

func (st *h2stream) putOut() {
	if st.outp != nil {
		*st.outp = st.out
		putFrames(st.outp)
	}
	st.out, st.outp = nil, nil
}

// framePool holds the buffers of bytes on their way to the socket: a connection's batch of
// frames, a stream's gathered body bytes.
var framePool = sync.Pool{New: func() any { b := make([]byte, 0, maxStreamBuffer); return &b }}

func putFrames(b *[]byte) {
	if b != nil && cap(*b) <= 4*maxStreamBuffer {
		*b = (*b)[:0]
		framePool.Put(b)
	}
}

func (st *h2stream) hasTrailers() bool {
	for k := range st.hdr {
		if strings.HasPrefix(k, http.TrailerPrefix) {
			return true
		}
	}
	return false
}

// bodyAllowed reports whether a response with status may have a body (RFC 9110 §6.4.1).
func bodyAllowed(status int) bool {
	return status >= 200 && status != http.StatusNoContent && status != http.StatusNotModified
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	for n > 0 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	return string(b[i:])
}

// canonicalKey is a request field's name (lowercase, as HTTP/2 carries it) as an http.Header
// key; the common names come from a table, not a new string each.
func canonicalKey(name string) string {
	if k, ok := commonKeys[name]; ok {
		return k
	}
	return http.CanonicalHeaderKey(name)
}

var commonKeys = func() map[string]string {
	m := map[string]string{}
	for _, k := range []string{
		"Accept", "Accept-Charset", "Accept-Encoding", "Accept-Language", "Accept-Ranges",
		"Authorization", "Cache-Control", "Content-Encoding", "Content-Language", "Content-Length",
		"Content-Type", "Cookie", "Date", "Etag", "Expect", "Forwarded", "From", "Host",
		"If-Match", "If-Modified-Since", "If-None-Match", "If-Range", "If-Unmodified-Since",
		"Origin", "Pragma", "Range", "Referer", "Te", "Trailer", "Traceparent", "Tracestate",
		"User-Agent", "Via", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto",
		"X-Request-Id", "Grpc-Timeout", "Grpc-Encoding", "Grpc-Accept-Encoding",
		"Grpc-Message", "Grpc-Status", "Content-Disposition", "Upgrade-Insecure-Requests",
		"Sec-Fetch-Dest", "Sec-Fetch-Mode", "Sec-Fetch-Site", "Sec-Fetch-User", "Priority",
	} {
		m[strings.ToLower(k)] = k
	}
	return m
}()
