package httpproxy

import (
	"errors"
	"io"

	"github.com/valyala/fasthttp"

	"ballast/config"
)

// errBodyTooLarge ends a chunked request body that goes past the route's max_body_bytes.
var errBodyTooLarge = errors.New("request body larger than max_body_bytes")

// bodyLimit passes at most max bytes of a request body of unknown length, then fails with
// errBodyTooLarge, which turns the answer into 413.
type bodyLimit struct {
	r    io.Reader
	left int64
}

func (l *bodyLimit) Read(p []byte) (int, error) {
	if l.left <= 0 {
		// At the limit: one more byte means too large, EOF means exactly the limit.
		var one [1]byte
		n, err := l.r.Read(one[:])
		if n > 0 {
			return 0, errBodyTooLarge
		}
		return 0, err
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	return n, err
}

// limitBody enforces max on the request body: a declared length over it is refused at once
// (413, and false); a chunked body is wrapped so that it fails once it goes past.
func (ls *listenerState) limitBody(ctx *fasthttp.RequestCtx, t *table, x *exchange, max int64) bool {
	req := &ctx.Request
	cl := req.Header.ContentLength()
	switch {
	case int64(cl) > max:
		ls.refuse(ctx, t, x, fasthttp.StatusRequestEntityTooLarge, "ballast: request body too large\n")
		return false
	case cl == -1 && req.IsBodyStream():
		x.pol.limit = bodyLimit{r: req.BodyStream(), left: max}
		req.SetBodyStream(&x.pol.limit, -1)
	}
	return true
}

// overridePool returns ps with the route's timeouts and retries in place of the pool's; the
// copy shares the pool, its backends and its retry budget.
func overridePool(ps *poolState, r *config.Route) *poolState {
	if ps == nil || r.Timeouts == nil && r.Retries == nil {
		return ps
	}
	c := *ps
	if rt := r.Timeouts; rt != nil {
		c.respTimeout = config.Or(rt.Response.Duration, config.DefaultResponseTimeout)
	}
	if rr := r.Retries; rr != nil {
		c.attempts = min(max(rr.Attempts, 1), 7) // balance.Tried holds 7 backends
		c.nonIdempotent = rr.NonIdempotent
	}
	return &c
}

// failPolicy adjusts the answer to a failed request: a body cut at max_body_bytes is 413,
// and the error page replaces the body.
func (ls *listenerState) failPolicy(ctx *fasthttp.RequestCtx, t *table, a *attempt) {
	if a.class == errClient && errors.Is(a.err, errBodyTooLarge) {
		ctx.Error("ballast: request body too large\n", fasthttp.StatusRequestEntityTooLarge)
		ctx.SetConnectionClose()
	}
	ls.errorPage(ctx, t)
}
