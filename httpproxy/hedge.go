package httpproxy

import (
	"time"

	"github.com/valyala/fasthttp"

	"ballast/balance"
	"ballast/httpcore"
)

// hedged runs an idempotent request with a replayable body on up to 1+max_hedges backends:
// a copy goes to another backend each time hedge_delay passes without response headers, and
// a failed try is retried as in forward. The first response wins; every other attempt is
// cancelled (its connection closed) and its slot released. Hedges and retries are paid from
// the retry budget. Each attempt runs in its own goroutine on its own copy of the request, so
// losers can outlive the handler without touching the client's request.
func (ls *listenerState) hedged(ctx *fasthttp.RequestCtx, ps *httpcore.Pool, x *exchange, key uint64) {
	var tried balance.Tried
	done := make(chan *attempt, 1+ps.MaxHedges+ps.Attempts)
	var running []*attempt
	launch := func() (*attempt, error) {
		b, err := ps.Acquire(&x.req, key, tried)
		if err != nil {
			return nil, err
		}
		httpcore.MarkTried(&tried, b)
		req := fasthttp.AcquireRequest()
		ctx.Request.CopyTo(req)
		a := &attempt{done: done}
		a.reset(ps, b, req)
		running = append(running, a)
		go a.runHedged()
		return a, nil
	}

	if _, err := launch(); err != nil {
		x.core.AcquireFailed(err)
		ls.reply(ctx, x, &httpcore.Done{Pool: ps})
		return
	}
	outstanding, tries, hedges := 1, 1, 0
	timer := time.NewTimer(ps.HedgeDelay)
	defer timer.Stop()
	var winner, last *attempt
	handled := make(map[*attempt]bool, 2)
	for winner == nil && outstanding > 0 {
		select {
		case a := <-done:
			outstanding--
			handled[a] = true
			if a.o.Failure == httpcore.OK {
				winner = a
				break
			}
			a.release(time.Since(a.start), ps.BackendFailure(&a.o))
			if a.o.Failure == httpcore.Connect {
				ps.Upstream.Unreachable(a.b)
			}
			fasthttp.ReleaseRequest(a.req)
			a.req = nil
			last = a
			if tries < ps.Attempts && ps.Retryable(&a.o, true, true) && ps.SpendRetry() {
				if _, err := launch(); err == nil {
					x.core.Retried(ps)
					tries++
					outstanding++
				}
			}
		case <-timer.C:
			if hedges < ps.MaxHedges && ps.SpendHedge() {
				if _, err := launch(); err == nil {
					hedges++
					outstanding++
				}
			}
			if hedges < ps.MaxHedges {
				timer.Reset(ps.HedgeDelay)
			}
		}
	}
	for _, o := range running {
		if o == winner || handled[o] {
			continue
		}
		if o.state.CompareAndSwap(stateRunning, stateAbandoned) {
			o.cancel() // its goroutine cleans up
		} else {
			o.abandon() // finished, its result unread in done
		}
	}
	if winner == nil {
		ls.fail(ctx, x, last)
		return
	}
	ls.deliver(ctx, x, winner)
}

// runHedged is the goroutine of one hedged attempt.
func (a *attempt) runHedged() {
	a.roundTrip(true)
	if a.state.CompareAndSwap(stateRunning, stateDone) {
		a.done <- a
		return
	}
	a.abandon()
}

// abandon ends an attempt whose result nobody wants: a response that arrived too late is
// discarded with its connection, and the backend slot is freed.
func (a *attempt) abandon() {
	if a.o.Failure == httpcore.OK && a.br != nil {
		a.finishBody(false)
	}
	a.release(time.Since(a.start), a.o.Failure != httpcore.OK && a.o.Failure != httpcore.Cancelled && a.ps.BackendFailure(&a.o))
	fasthttp.ReleaseRequest(a.req)
}
