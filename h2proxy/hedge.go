package h2proxy

import (
	"context"
	"net/http"
	"time"

	"ballast/balance"
	"ballast/httpcore"
	"ballast/upstream"
)

// hedgeResult is what one hedged attempt got.
type hedgeResult struct {
	b      *upstream.Backend
	resp   *http.Response
	o      *httpcore.Outcome // nil with a response
	cancel context.CancelCauseFunc
	ttfb   time.Duration
}

// hedged runs an idempotent request without a body like the HTTP/1 engine's hedging: each
// time hedge.delay passes without response headers, a copy goes to another backend (up to
// hedge.max_hedges, within the retry budget, never waiting in the backlog); the first
// response wins, the other attempts are cancelled and released.
func (e *exchange) hedged(key uint64) {
	p := e.pool
	cx := &e.core
	results := make(chan hedgeResult, 1+p.MaxHedges+p.Attempts)
	var tried balance.Tried
	launch := func(b *upstream.Backend) {
		httpcore.MarkTried(&tried, b)
		var t *transport
		if s := stateOf(b); s != nil {
			t = s.t.Load()
		}
		actx, cancel := context.WithCancelCause(e.ctx)
		if t == nil {
			results <- hedgeResult{b: b, o: &httpcore.Outcome{Failure: httpcore.NoTransport}, cancel: cancel}
			return
		}
		out := e.outgoing(actx, b, t)
		go func() {
			var timer *time.Timer
			if !e.deadline {
				timer = time.AfterFunc(p.ResponseTimeout, func() { cancel(errResponseTimeout) })
			}
			start := time.Now()
			resp, err := t.rt.RoundTrip(out)
			if timer != nil {
				timer.Stop()
			}
			r := hedgeResult{b: b, resp: resp, cancel: cancel, ttfb: time.Since(start)}
			if err != nil {
				r.o = e.classify(err, actx)
			}
			results <- r
		}()
	}
	b, err := p.Acquire(&e.req, key, tried)
	if err != nil {
		cx.AcquireFailed(err)
		e.reply(&httpcore.Done{Pool: p})
		return
	}
	launch(b)
	pending, hedges := 1, 0
	timer := time.NewTimer(p.HedgeDelay)
	defer timer.Stop()
	var last hedgeResult
	for pending > 0 {
		select {
		case r := <-results:
			pending--
			if r.o != nil {
				r.cancel(nil)
				p.Release(r.b, r.ttfb, 0, r.o.Failure != httpcore.ClientGone && p.BackendFailure(r.o))
				if r.o.Failure == httpcore.Connect {
					p.Upstream.Unreachable(r.b)
				}
				last = r
				if pending == 0 && r.o.Failure == httpcore.Connect {
					// Nothing was sent: like a retry, another backend may take it.
					if b, err := p.Upstream.TryAcquire(key, tried); err == nil {
						if p.SpendRetry() {
							cx.Retried(p)
							pending++
							launch(b)
						} else {
							p.Release(b, 0, 0, false)
						}
					}
				}
				continue
			}
			// The winner: cancel and release the others as they come back.
			go drainLosers(p, results, pending)
			e.ttfb = r.ttfb
			h := e.w.Header()
			for k, vv := range r.resp.Header {
				h[k] = vv
			}
			e.deliver(r.b, r.resp.StatusCode, r.resp.ContentLength, r.resp.Body, &r.resp.Trailer)
			r.cancel(nil)
			return
		case <-timer.C:
			if hedges >= p.MaxHedges {
				continue
			}
			b, err := p.Upstream.TryAcquire(key, tried)
			if err != nil || !p.SpendHedge() {
				if err == nil {
					p.Release(b, 0, 0, false)
				}
				continue
			}
			hedges++
			pending++
			launch(b)
			timer.Reset(p.HedgeDelay)
		}
	}
	if e.r.Context().Err() != nil {
		last.o.Failure = httpcore.ClientGone
	} else if e.deadlinePassed() {
		last.o.Failure = httpcore.Timeout
	}
	e.fail(last.o, last.b)
}

// drainLosers cancels the attempts still running after another one won, and releases their
// backends (not as failures: they were cut short by Ballast).
func drainLosers(p *httpcore.Pool, results chan hedgeResult, pending int) {
	for range pending {
		r := <-results
		r.cancel(nil)
		if r.resp != nil {
			_ = r.resp.Body.Close()
		}
		p.Release(r.b, r.ttfb, 0, false)
	}
}
