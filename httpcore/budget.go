package httpcore

import (
	"sync/atomic"
)

// budgetMinPerSecond is the number of retries and hedges a pool may always spend per second,
// so a pool with little traffic can still retry.
const budgetMinPerSecond = 5

// retryBudget caps retries and hedges at ratio × requests over a sliding window of the current
// and the previous second, plus budgetMinPerSecond, so a dead pool does not multiply its load
// (Envoy's retry budget). It is a handful of atomics: approximate under races, never locked.
type retryBudget struct {
	ratio float64

	sec       atomic.Int64 // the second cur* counts
	curReqs   atomic.Int64
	curSpent  atomic.Int64
	prevReqs  atomic.Int64
	prevSpent atomic.Int64
}

func newRetryBudget(ratio float64) *retryBudget {
	if ratio < 0 {
		ratio = 0
	}
	return &retryBudget{ratio: ratio}
}

// roll moves the window to second now. The goroutine that wins the CAS shifts the counters;
// increments that race with the shift may land in either second, which the budget tolerates.
func (b *retryBudget) roll(now int64) {
	s := b.sec.Load()
	if s == now || now < s || !b.sec.CompareAndSwap(s, now) {
		return
	}
	if now == s+1 {
		b.prevReqs.Store(b.curReqs.Swap(0))
		b.prevSpent.Store(b.curSpent.Swap(0))
	} else {
		b.curReqs.Store(0)
		b.curSpent.Store(0)
		b.prevReqs.Store(0)
		b.prevSpent.Store(0)
	}
}

// request counts one client request at unix second now.
func (b *retryBudget) request(now int64) {
	b.roll(now)
	b.curReqs.Add(1)
}

// spend reports whether one more retry or hedge fits in the budget and, if so, counts it. A
// budget of 0 spends nothing, not even the floor: retries.budget: 0 turns retries off.
func (b *retryBudget) spend(now int64) bool {
	if b.ratio == 0 {
		return false
	}
	b.roll(now)
	reqs := b.curReqs.Load() + b.prevReqs.Load()
	allowed := int64(b.ratio*float64(reqs)) + 2*budgetMinPerSecond
	if b.curSpent.Load()+b.prevSpent.Load() >= allowed {
		return false
	}
	b.curSpent.Add(1)
	return true
}
