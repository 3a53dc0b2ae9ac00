package httpproxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/valyala/fasthttp"

	"ballast/balance"
	"ballast/sockio"
)

// isUpgrade reports whether a request asks to switch protocols (WebSocket and the like).
func isUpgrade(h *fasthttp.RequestHeader) bool {
	return len(h.Peek("Upgrade")) > 0 && hasToken(h.Peek("Connection"), "upgrade")
}

// tunnel forwards a protocol-switch request over a fresh backend connection, relays the
// backend's answer and, on 101, copies bytes both ways until each side has finished sending.
// The backend counts one request in flight for the tunnel's whole life.
func (ls *listenerState) tunnel(ctx *fasthttp.RequestCtx, t *table, ps *poolState) {
	h := &ctx.Request.Header
	b, err := ps.pool.Acquire(ps.key(ctx), balance.Tried{})
	if err != nil {
		ls.acquireError(ctx, err)
		return
	}
	sc := scanHeaders(h.All())
	stripHopByHop(h, sc.hop, true)
	h.Del("Content-Length")
	addForwardingHeaders(h, sc, clientAddr(ctx.RemoteAddr()), ls.tls, nil)
	reqHead := append([]byte(nil), h.Header()...)
	expose := ""
	if ls.expose(t) {
		expose = b.ID
	}
	connect := ps.connectTimeout
	rt := ps.respTimeout
	start := time.Now()
	p := ls.proxy
	p.tunnels.Add(1)
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(func(c net.Conn) {
		defer p.tunnels.Done()
		ok := false
		defer func() { ps.pool.Release(b, time.Since(start), !ok) }()
		_ = c.SetDeadline(time.Time{})
		bc, err := net.DialTimeout("tcp", b.Address, connect)
		if err != nil {
			writeRawError(c, fasthttp.StatusBadGateway, "ballast: backend connect failed")
			return
		}
		defer func() { _ = bc.Close() }()
		_ = bc.SetDeadline(time.Now().Add(rt))
		if _, err := bc.Write(reqHead); err != nil {
			writeRawError(c, fasthttp.StatusBadGateway, "ballast: backend closed the connection before responding")
			return
		}
		br := bufio.NewReader(bc)
		var rh fasthttp.ResponseHeader
		if err := rh.Read(br); err != nil {
			writeRawError(c, fasthttp.StatusBadGateway, "ballast: bad response from backend")
			return
		}
		ok = true
		switched := rh.StatusCode() == fasthttp.StatusSwitchingProtocols
		stripHopByHop(&rh, scanHeaders(rh.All()).hop, switched)
		if expose != "" {
			rh.Set("X-Ballast-Backend", expose)
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
		sockio.Pipe(c, bc, 0, nil, nil)
	})
}

// writeRawError writes a minimal response on a hijacked connection.
func writeRawError(c net.Conn, status int, msg string) {
	_, _ = fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s\n",
		status, fasthttp.StatusMessage(status), len(msg)+1, msg)
}
