package balancetest

import (
	"math"
	"sync/atomic"

	"ballast/balance"
)

// Load is a fake balance.Load for tests and benchmarks: per-backend atomic in-flight counts,
// a settable Full flag and latency. Start and Finish change a count and, like the real counter
// owner, tell the attached picker through balance.Tracker, so indexed pickers stay in step.
type Load struct {
	inflight []atomic.Int64
	full     []atomic.Bool
	latency  []atomic.Uint64 // math.Float64bits of seconds
	tracker  atomic.Pointer[trackerBox]
}

// trackerBox lets an interface value live behind an atomic pointer.
type trackerBox struct{ t balance.Tracker }

// NewLoad returns a Load for n backends: nothing in flight, nothing full, latency unknown.
func NewLoad(n int) *Load {
	return &Load{
		inflight: make([]atomic.Int64, n),
		full:     make([]atomic.Bool, n),
		latency:  make([]atomic.Uint64, n),
	}
}

// Len is the number of backends the Load covers.
func (l *Load) Len() int { return len(l.inflight) }

// InFlight implements balance.Load.
func (l *Load) InFlight(i int) int64 { return l.inflight[i].Load() }

// Full implements balance.Load.
func (l *Load) Full(i int) bool { return l.full[i].Load() }

// Latency implements balance.Load.
func (l *Load) Latency(i int) float64 { return math.Float64frombits(l.latency[i].Load()) }

// SetFull sets backend i's at-connection-limit flag.
func (l *Load) SetFull(i int, full bool) { l.full[i].Store(full) }

// SetLatency sets backend i's latency estimate in seconds.
func (l *Load) SetLatency(i int, seconds float64) { l.latency[i].Store(math.Float64bits(seconds)) }

// Track attaches p: if it implements balance.Tracker, every later count change is reported to
// it with Update. Passing a picker that is not a Tracker (or nil) detaches the previous one.
func (l *Load) Track(p balance.Picker) {
	if t, ok := p.(balance.Tracker); ok {
		l.tracker.Store(&trackerBox{t})
		return
	}
	l.tracker.Store(nil)
}

// Start records one more request in flight on backend i, tells the tracker, and returns the new
// count.
func (l *Load) Start(i int) int64 {
	n := l.inflight[i].Add(1)
	l.update(i, n)
	return n
}

// Finish records the end of a request on backend i, tells the tracker, and returns the new
// count. It panics if nothing was in flight, which is always a bug in the test.
func (l *Load) Finish(i int) int64 {
	n := l.inflight[i].Add(-1)
	if n < 0 {
		panic("balancetest: Finish without Start")
	}
	l.update(i, n)
	return n
}

// SetInFlight sets backend i's count directly (to prepare a scenario) and tells the tracker.
func (l *Load) SetInFlight(i int, n int64) {
	l.inflight[i].Store(n)
	l.update(i, n)
}

// Reset zeroes every count and flag and tells the tracker about every backend.
func (l *Load) Reset() {
	for i := range l.inflight {
		l.full[i].Store(false)
		l.latency[i].Store(0)
		l.SetInFlight(i, 0)
	}
}

func (l *Load) update(i int, n int64) {
	if b := l.tracker.Load(); b != nil {
		b.t.Update(i, n)
	}
}

var _ balance.Load = (*Load)(nil)
