package h2proxy

import (
	"context"
	"net/http"
	"time"

	"ballast/balance"
	"ballast/httpproxy"
	"ballast/upstream"
)

// hedgeResult is what one hedged attempt got.
type hedgeResult struct {
	b      *upstream.Backend
	resp   *http.Response
	err    error
	cancel context.CancelCauseFunc
	ttfb   time.Duration
}

// hedged runs an idempotent request without a body like the HTTP/1 plane's hedging: each time
// hedge.delay passes without response headers, a copy goes to another backend (up to
// hedge.max_hedges, within the retry budget, never waiting in the backlog); the first response
// wins, the other attempts are cancelled and released.
func (e *exchange) hedged(key uint64) {
	pool := e.route.Upstream()
	results := make(chan hedgeResult, 1+e.route.MaxHedges())
	var tried balance.Tried
	launch := func(b *upstream.Backend) {
		httpproxy.MarkTried(&tried, b)
		var t *transport
		if s := stateOf(b); s != nil {
			t = s.t.Load()
		}
		actx, cancel := context.WithCancelCause(e.ctx)
		if t == nil {
			results <- hedgeResult{b: b, err: errNoTransport, cancel: cancel}
			return
		}
		out := e.outgoing(actx, b, t, &replayBody{})
		go func() {
			var timer *time.Timer
			if !e.deadline {
				timer = time.AfterFunc(e.route.ResponseTimeout(), func() { cancel(errResponseTimeout) })
			}
			start := time.Now()
			resp, err := t.rt.RoundTrip(out)
			if timer != nil {
				timer.Stop()
			}
			if err != nil && context.Cause(actx) == errResponseTimeout {
				err = errResponseTimeout
			}
			results <- hedgeResult{b: b, resp: resp, err: err, cancel: cancel, ttfb: time.Since(start)}
		}()
	}
	b, err := pool.Acquire(key, tried)
	if err != nil {
		e.acquireError(err)
		return
	}
	launch(b)
	pending, hedges := 1, 0
	timer := time.NewTimer(e.route.HedgeDelay())
	defer timer.Stop()
	var last hedgeResult
	for pending > 0 {
		select {
		case r := <-results:
			pending--
			if r.err != nil {
				r.cancel(nil)
				clientGone := e.r.Context().Err() != nil
				httpproxy.CountStatus(r.b, 0)
				pool.Release(r.b, r.ttfb, !clientGone && r.err != context.Canceled)
				if isConnectError(r.err) {
					e.route.Upstream().Unreachable(r.b)
				}
				last = r
				if pending == 0 && isConnectError(r.err) {
					// Nothing was sent: like a retry, another backend may take it.
					if b, err := pool.TryAcquire(key, tried); err == nil {
						if e.route.SpendRetry() {
							pending++
							launch(b)
						} else {
							httpproxy.CountStatus(b, 0)
							pool.Release(b, 0, false)
						}
					}
				}
				continue
			}
			// The winner: cancel and release the others as they come back.
			go drainLosers(pool, results, pending)
			e.ttfb, e.backend = r.ttfb, r.b.ID
			e.deliver(r.b, r.resp)
			r.cancel(nil)
			return
		case <-timer.C:
			if hedges >= e.route.MaxHedges() {
				continue
			}
			b, err := pool.TryAcquire(key, tried)
			if err != nil || !e.route.SpendHedge() {
				if err == nil {
					httpproxy.CountStatus(b, 0)
					pool.Release(b, 0, false)
				}
				continue
			}
			hedges++
			pending++
			launch(b)
			timer.Reset(e.route.HedgeDelay())
		}
	}
	switch {
	case e.r.Context().Err() != nil:
		e.cs.clientReset()
	case last.err == errResponseTimeout || (e.deadline && e.ctx.Err() != nil):
		e.answer(http.StatusGatewayTimeout, grpcDeadlineExceeded, "backend timed out")
	default:
		e.answer(http.StatusBadGateway, grpcUnavailable, "backend failed: "+last.err.Error())
		e.log(last.err)
	}
}

// drainLosers cancels the attempts still running after another one won, and releases their
// backends (not as failures: they were cut short by Ballast).
func drainLosers(pool *upstream.Pool, results chan hedgeResult, pending int) {
	for range pending {
		r := <-results
		r.cancel(nil)
		if r.resp != nil {
			_ = r.resp.Body.Close()
		}
		httpproxy.CountStatus(r.b, 0)
		pool.Release(r.b, r.ttfb, false)
	}
}
