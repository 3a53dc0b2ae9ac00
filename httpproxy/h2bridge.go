package httpproxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"ballast/httpcore"
	"ballast/upstream"
)

// This file lends another engine (the HTTP/2 one, through httpcore.Bridge) this engine's
// HTTP/1.1 backend machinery: a backend's pooled fasthttp connections, the request written and
// the response read by the same attempt code as an HTTP/1 request, with the same deadlines,
// keep-alive limits and classification of failures. A request costs no goroutine; its state
// is a pooled upstream1.

// upstream1 is one HTTP/1.1 request to one backend on behalf of another engine.
type upstream1 struct {
	a      attempt
	req    fasthttp.Request
	fields fieldsMsg
	rf     []httpcore.Field // the response's fields, for ResponseFields
	body   upstreamBody
	buf    bytes.Reader
	stop   func() bool // undoes Watch
	cancel func()      // a.cancel as a func value, made once
}

var upstream1Pool = sync.Pool{New: func() any {
	u := &upstream1{}
	u.a.done = make(chan *attempt, 1) // never sent on: it turns on the attempt's cancel lock
	u.cancel = u.a.cancel
	u.fields.h = &u.req.Header
	return u
}}

// Upstream1 returns an HTTP/1.1 request to b of pool p, nil when b has no HTTP/1.1 client (a
// backend of a pool this engine does not serve). It makes Proxy an httpcore.Bridge.
func (p *Proxy) Upstream1(ps *httpcore.Pool, b *upstream.Backend) httpcore.Upstream1 {
	s := stateOf(b)
	if s == nil || s.hc == nil {
		return nil
	}
	u := upstream1Pool.Get().(*upstream1)
	u.a.ps, u.a.b, u.a.cancelled = ps, b, false
	u.req.Header.SetNoDefaultContentType(true)
	return u
}

func (u *upstream1) SetLine(method, target, host []byte) {
	h := &u.req.Header
	h.SetMethodBytes(method)
	h.SetRequestURIBytes(target)
	h.SetHostBytes(host)
}

func (u *upstream1) Header() httpcore.Header { return &u.fields }

// RoundTrip sends the request and reads the response headers. A pooled connection found
// closed by the backend before any byte of the request reached it, or closed by it as an
// idempotent request went out (the keep-alive race), is replaced by a new connection, at most
// twice, as the HTTP/1 engine does; any other failure is returned.
func (u *upstream1) RoundTrip() httpcore.Outcome {
	a := &u.a
	idem := httpcore.Idempotent(u.req.Header.Method())
	for stale := 0; ; stale++ {
		a.mu.Lock() // a cancel (Watch) that came before a fresh try still holds
		cancelled := a.cancelled
		a.reset(a.ps, a.b, &u.req)
		a.cancelled = cancelled
		a.mu.Unlock()
		if a.roundTrip(true) {
			return a.o
		}
		if stale < 2 && a.o.Fresh(idem) && !a.isCancelled() {
			a.hc.CloseIdleConnections()
			continue
		}
		return a.o
	}
}

func (u *upstream1) Watch(ctx context.Context) { u.stop = context.AfterFunc(ctx, u.cancel) }

func (u *upstream1) Status() int { return u.a.resp.Header.StatusCode() }

func (u *upstream1) ResponseFields() []httpcore.Field {
	u.rf = u.rf[:0]
	for k, v := range u.a.resp.Header.All() {
		u.rf = append(u.rf, httpcore.Field{Name: k, Value: v})
	}
	return u.rf
}

func (u *upstream1) ContentLength() int64 { return int64(u.a.resp.Header.ContentLength()) }

func (u *upstream1) TTFB() time.Duration { return u.a.ttfb }

// Body is the response body: bytes already read, or the stream of the rest, read from the
// backend connection as the caller reads.
func (u *upstream1) Body() io.ReadCloser {
	if u.a.br == nil {
		u.buf.Reset(u.a.resp.Body())
		u.body = upstreamBody{r: &u.buf}
		return &u.body
	}
	u.body = upstreamBody{a: &u.a, r: u.a.resp.BodyStream()}
	return &u.body
}

// Release ends the request (closing a body not read to its end) and returns u to its pool,
// unless Watch's cancel ran or may still run: then u is left to the garbage collector.
func (u *upstream1) Release() {
	reuse := true
	if u.stop != nil {
		reuse = u.stop()
		u.stop = nil
	}
	_ = u.body.Close()
	if u.a.br != nil || u.a.cc != nil {
		u.a.finishBody(false)
	}
	u.a.ps, u.a.b, u.a.hc, u.a.req, u.a.out, u.a.upload = nil, nil, nil, nil, nil, nil
	u.a.resp.Reset()
	u.req.Reset()
	u.buf.Reset(nil)
	u.body = upstreamBody{}
	clear(u.rf)
	u.rf = u.rf[:0]
	if reuse {
		upstream1Pool.Put(u)
	}
}

// upstreamBody is a response body of an upstream1.
type upstreamBody struct {
	a     *attempt // nil for a body already read whole
	r     io.Reader
	eof   bool
	reads int
}

func (b *upstreamBody) Read(p []byte) (int, error) {
	if b.r == nil {
		return 0, io.EOF
	}
	n, err := b.r.Read(p)
	if err == io.EOF {
		b.eof = true
	}
	if a := b.a; a != nil {
		// A long stream keeps its connection's inactivity deadline moving, as relay does.
		if b.reads++; b.reads%refreshReads == 0 && a.conn != nil {
			_ = a.conn.SetReadDeadline(time.Now().Add(a.ps.ResponseTimeout))
		}
		if err != nil && err != io.EOF && a.isCancelled() {
			err = errUpstreamCancelled
		}
	}
	return n, err
}

func (b *upstreamBody) Close() error {
	if a := b.a; a != nil {
		b.a = nil
		a.finishBody(b.eof)
	}
	b.r = nil
	return nil
}

// errUpstreamCancelled is a body read cut short by the Watch's cancel.
var errUpstreamCancelled = errors.New("backend request cancelled")

// fieldsMsg is httpcore.Header over a fasthttp request header.
type fieldsMsg struct{ h *fasthttp.RequestHeader }

func (m *fieldsMsg) Peek(name []byte) []byte { return m.h.PeekBytes(name) }
func (m *fieldsMsg) AppendValues(dst, name []byte) []byte {
	return appendJoined(dst, m.h.PeekAll(b2s(name)))
}
func (m *fieldsMsg) Set(name, value []byte) { m.h.SetCanonical(name, value) }
func (m *fieldsMsg) Add(name, value []byte) { m.h.AddBytesKV(name, value) }
func (m *fieldsMsg) Del(name []byte)        { m.h.DelBytes(name) }

var _ httpcore.Bridge = (*Proxy)(nil)
