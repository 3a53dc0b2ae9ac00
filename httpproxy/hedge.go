package httpproxy

import (
	"time"

	"github.com/valyala/fasthttp"

	"ballast/balance"
)

// hedged runs an idempotent request with a replayable body on up to 1+max_hedges backends:
// a copy goes to another backend each time hedge_delay passes without response headers, and
// a failed try is retried as in forward. The first response wins; every other attempt is
// cancelled (its connection closed) and its slot released. Hedges and retries are paid from
// the retry budget. Each attempt runs in its own goroutine on its own copy of the request, so
// losers can outlive the handler without touching the client's request.
func (ls *listenerState) hedged(ctx *fasthttp.RequestCtx, t *table, ps *poolState, x *exchange, key uint64) {
	var tried balance.Tried
	h := &ctx.Request.Header
	done := make(chan *attempt, 1+ps.maxHedges+ps.attempts)
	var running []*attempt
	launch := func() (*attempt, error) {
		b, err := ps.pool.Acquire(key, tried)
		if err != nil {
			return nil, err
		}
		markTried(&tried, b)
		req := fasthttp.AcquireRequest()
		ctx.Request.CopyTo(req)
		a := &attempt{done: done}
		a.reset(ps, b, req)
		running = append(running, a)
		go a.runHedged()
		return a, nil
	}

	if _, err := launch(); err != nil {
		ls.acquireError(ctx, err)
		ls.finish(ctx, x)
		return
	}
	outstanding, tries, hedges := 1, 1, 0
	timer := time.NewTimer(ps.hedgeDelay)
	defer timer.Stop()
	var winner, last *attempt
	handled := make(map[*attempt]bool, 2)
	for winner == nil && outstanding > 0 {
		select {
		case a := <-done:
			outstanding--
			handled[a] = true
			if a.class == errNone {
				winner = a
				break
			}
			a.release(time.Since(a.start), failed(a))
			if a.class == errConnect {
				ps.pool.Unreachable(a.b)
			}
			fasthttp.ReleaseRequest(a.req)
			last = a
			if tries < ps.attempts && ps.retryable(a, h, true) && ps.budget.spend(coarseUnix()) {
				if _, err := launch(); err == nil {
					ps.counters.retries.Add(1)
					tries++
					outstanding++
				}
			}
		case <-timer.C:
			if hedges < ps.maxHedges && ps.budget.spend(coarseUnix()) {
				if _, err := launch(); err == nil {
					ps.counters.hedges.Add(1)
					hedges++
					outstanding++
				}
			}
			if hedges < ps.maxHedges {
				timer.Reset(ps.hedgeDelay)
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
		ls.fail(ctx, t, x, last)
		ls.finish(ctx, x)
		return
	}
	ls.deliver(ctx, t, x, winner)
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
	if a.class == errNone && a.br != nil {
		a.finishBody(false)
	}
	a.release(time.Since(a.start), a.class != errNone && a.class != errCancelled && failed(a))
	fasthttp.ReleaseRequest(a.req)
}
