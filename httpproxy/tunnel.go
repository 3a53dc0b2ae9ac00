package httpproxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"ballast/accesslog"
	"ballast/balance"
	"ballast/httpcore"
	"ballast/sockio"
	"ballast/upstream"
)

// isUpgrade reports whether a request asks to switch protocols (WebSocket and the like).
func isUpgrade(h *fasthttp.RequestHeader) bool {
	return len(h.Peek("Upgrade")) > 0 && httpcore.HasToken(h.Peek("Connection"), "upgrade")
}

// tunnel forwards a protocol-switch request over a fresh backend connection, relays the
// backend's answer and, on 101, copies bytes both ways until each side has finished sending.
// The backend counts one request in flight for the tunnel's whole life; the access log gets
// the request's line when the tunnel ends.
func (ls *listenerState) tunnel(ctx *fasthttp.RequestCtx, x *exchange) {
	h := &ctx.Request.Header
	cx := &x.core
	ps := cx.Pool()
	b, err := ps.Acquire(&x.req, ps.Key(&x.req, cx.Client()), balance.Tried{})
	if err != nil {
		cx.AcquireFailed(err)
		ls.reply(ctx, x, &httpcore.Done{Pool: ps})
		return
	}
	scanRequest(&x.scan, h)
	cx.Prepare(&x.req, &x.scan, true)
	h.Del("Content-Length")
	reqHead := append([]byte(nil), h.Header()...)
	// The log line is written after the tunnel, when the request is gone: keep what it says.
	entry := ls.tunnelEntry(x, b)
	if entry == nil {
		entry = &accesslog.Entry{} // not written
	}
	logged := entry.Listener != ""
	ls.finish(ctx, x)
	expose := ls.view().l.Expose
	connect := ps.ConnectTimeout
	rt := ps.ResponseTimeout
	start := time.Now()
	p := ls.proxy
	p.tunnels.Add(1)
	if hc := headConnOf(ctx.Conn()); hc != nil {
		hc.stop() // what follows the head is the new protocol's
	}
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(func(c net.Conn) {
		defer p.tunnels.Done()
		ok := false
		defer func() {
			if logged {
				entry.Duration = time.Since(start)
				p.core.WriteEntry(entry)
			}
			ps.Release(b, time.Since(start), entry.Status, !ok)
		}()
		_ = c.SetDeadline(time.Time{})
		bc, err := net.DialTimeout("tcp", b.Address, connect)
		if err != nil {
			entry.Status, entry.Termination = fasthttp.StatusBadGateway, accesslog.TermServerConnect
			writeRawError(c, fasthttp.StatusBadGateway, "ballast: backend connect failed")
			return
		}
		defer func() { _ = bc.Close() }()
		_ = bc.SetDeadline(time.Now().Add(rt))
		if _, err := bc.Write(reqHead); err != nil {
			entry.Status, entry.Termination = fasthttp.StatusBadGateway, accesslog.TermServerHeaders
			writeRawError(c, fasthttp.StatusBadGateway, "ballast: backend closed the connection before responding")
			return
		}
		br := bufio.NewReader(bc)
		var rh fasthttp.ResponseHeader
		if err := rh.Read(br); err != nil {
			entry.Status, entry.Termination = fasthttp.StatusBadGateway, accesslog.TermServerInvalid
			writeRawError(c, fasthttp.StatusBadGateway, "ballast: bad response from backend")
			return
		}
		ok = true
		entry.Status, entry.Upstream = rh.StatusCode(), time.Since(start)
		switched := rh.StatusCode() == fasthttp.StatusSwitchingProtocols
		var sc httpcore.Scan
		scanResponse(&sc, &rh)
		var hx httpcore.Exchange
		hx.StripHopByHop(&respMsg{h: &rh}, &sc, switched, false)
		if expose {
			rh.Set("X-Ballast-Backend", b.ID)
		}
		if !switched {
			// A refusal: pass it on, body included, and end the connection.
			rh.SetConnectionClose()
			if _, err := c.Write(rh.Header()); err != nil {
				return
			}
			if cl := rh.ContentLength(); cl >= 0 {
				_, _ = io.CopyN(c, br, int64(cl))
			} else {
				_, _ = io.Copy(c, br)
			}
			return
		}
		if _, err := c.Write(rh.Header()); err != nil {
			return
		}
		_ = bc.SetDeadline(time.Time{})
		if n := br.Buffered(); n > 0 { // what the backend sent right behind its 101
			early, _ := br.Peek(n)
			if _, err := c.Write(early); err != nil {
				return
			}
			_, _ = br.Discard(n)
		}
		// c may hold client bytes read behind the request (fasthttp's hijack reader): Pipe reads
		// through it, so nothing is skipped.
		var up, down atomic.Uint64
		sockio.Pipe(c, bc, 0, &up, &down)
		entry.BytesIn, entry.BytesOut = int64(up.Load()), int64(down.Load())
	})
}

// tunnelEntry is the access-log line of an upgrade request to backend b, with its request's
// fields copied (the request is gone when the tunnel ends); nil when the log is off.
func (ls *listenerState) tunnelEntry(x *exchange, b *upstream.Backend) *accesslog.Entry {
	e := x.core.Entry(&x.req)
	if e == nil {
		return nil
	}
	e.Backend = b.ID
	for _, f := range []*[]byte{&e.Method, &e.URI, &e.Proto, &e.Host, &e.RequestID, &e.TraceID, &e.Referer, &e.UserAgent} {
		*f = bytes.Clone(*f)
	}
	return e
}

// writeRawError writes a minimal response on a hijacked connection.
func writeRawError(c net.Conn, status int, msg string) {
	_, _ = fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s\n",
		status, fasthttp.StatusMessage(status), len(msg)+1, msg)
}
