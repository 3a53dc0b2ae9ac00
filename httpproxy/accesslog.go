package httpproxy

import (
	"github.com/valyala/fasthttp"

	"ballast/accesslog"
)

// The access log itself (formats, files, reopening) is package accesslog's; this file says
// what an HTTP/1 request contributes to its line.

// requestBytes is the size of the request body as received: its Content-Length, or what was
// streamed of a chunked one.
func requestBytes(ctx *fasthttp.RequestCtx, x *exchange) int64 {
	if x.up.n > 0 {
		return x.up.n
	}
	if cl := ctx.Request.Header.ContentLength(); cl > 0 {
		return int64(cl)
	}
	return 0
}

// ReopenAccessLog reopens the access log file (SIGUSR1, after logrotate moved it).
func (p *Proxy) ReopenAccessLog() error { return p.access.Reopen() }

// accessLog is the current access log, nil when logging.access is off.
func (p *Proxy) accessLog() *accesslog.Log { return p.access.Load() }
