package l4

import (
	"math"
	"sync"
	"sync/atomic"

	"ballast/sockio"
)

// The UDP proxy's limits that a flood of new flows meets, cheapest first: the listener's flow
// cap (MaxFlows), its new-flow rate (NewFlowRate, a token bucket) and the process-wide budget
// of flow descriptors (fdBudget), which keeps a reserve of descriptors for everything else the
// process serves (the admin API, every other listener, health checks, logs).

// fdBudget is the number of flow sockets all UDP proxies of the process may hold at once.
type fdBudget struct {
	limit int64
	used  atomic.Int64
}

// descriptorReserve is what the flows leave of the descriptor limit n: a quarter of it, at
// least 64 and at most 4096 descriptors.
func descriptorReserve(n int) int { return min(max(n/4, 64), 4096) }

// processBudget is the budget of the process: its descriptor limit (RLIMIT_NOFILE, read once)
// less descriptorReserve; unlimited when the limit cannot be read.
var processBudget = sync.OnceValue(func() *fdBudget {
	n := sockio.DescriptorLimit()
	if n == 0 {
		return &fdBudget{limit: math.MaxInt64}
	}
	return &fdBudget{limit: int64(max(n-descriptorReserve(n), 1))}
})

// take reserves one descriptor; false when the budget is spent.
func (b *fdBudget) take() bool {
	if b.used.Add(1) > b.limit {
		b.used.Add(-1)
		return false
	}
	return true
}

func (b *fdBudget) give() { b.used.Add(-1) }

// Used is the number of flow descriptors held, for tests.
func (b *fdBudget) Used() int64 { return b.used.Load() }

// flowRate is a token bucket of new flows: rate per second, up to burst at once. A zero rate
// lets everything through. It is taken only by datagrams that would start a flow.
type flowRate struct {
	mu     sync.Mutex
	rate   float64 // tokens per nanosecond
	burst  float64
	tokens float64
	last   int64 // unix nanoseconds of the last refill
}

func (r *flowRate) init(perSecond, burst int) {
	if perSecond <= 0 {
		return
	}
	r.rate = float64(perSecond) / 1e9
	r.burst = float64(max(burst, 1))
	r.tokens = r.burst
}

// allow takes a token at now (unix nanoseconds); false when none is left.
func (r *flowRate) allow(now int64) bool {
	if r.rate == 0 {
		return true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.last == 0 {
		r.last = now
	}
	if d := now - r.last; d > 0 {
		r.tokens = min(r.burst, r.tokens+float64(d)*r.rate)
		r.last = now
	}
	if r.tokens < 1 {
		return false
	}
	r.tokens--
	return true
}
