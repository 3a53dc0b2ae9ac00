package balance

import (
	"math"
	"sync/atomic"
	"time"
)

// DefaultPeakEWMATau is the decay time constant used when PeakEWMA.Tau is zero: Finagle's and
// Linkerd's default of 10 s.
const DefaultPeakEWMATau = 10 * time.Second

// PeakEWMA is one backend's peak-EWMA latency estimate (Finagle, tower), the figure the ewma
// algorithm reads through Load.Latency. Package balance reads no clock: callers pass now as
// the time since an origin of their choice (time.Since(start) is monotonic), the same origin
// for every call on one PeakEWMA.
//
// Observe jumps to a sample above the estimate at once (peak), otherwise moves toward the
// sample by 1-exp(-elapsed/tau), elapsed being the time since the previous sample. Value decays
// the estimate toward 0 with the time since the last sample, without changing it, so a backend
// that was slow once and then got no traffic is eventually cheap enough to be probed again
// (tower decays on every read; decaying on the fly gives the same figure without writes and
// does not depend on how often the estimate is read).
//
// The zero value is an unknown estimate (Value returns 0) with the default tau. A PeakEWMA is
// safe for concurrent use without locks: Observe first claims the interval since the previous
// sample with a CAS on the timestamp, so each stretch of time decays the estimate once, then
// folds its sample into the estimate with a CAS loop. Value reads two words that may come from
// different samples; the error is one sample's worth. Set Tau before sharing; do not copy.
type PeakEWMA struct {
	// Tau is the decay time constant; 0 means DefaultPeakEWMATau.
	Tau time.Duration

	bits atomic.Uint64 // math.Float64bits of the estimate, in seconds
	at   atomic.Int64  // now of the latest sample, in nanoseconds since the caller's origin
}

func (p *PeakEWMA) tau() float64 {
	if p.Tau > 0 {
		return float64(p.Tau)
	}
	return float64(DefaultPeakEWMATau)
}

// Observe folds one response time into the estimate. Samples that arrive with a now no later
// than the latest one are folded in with no elapsed time: they count only if they are peaks, so
// with a coarse clock a burst of samples in one tick keeps its peak and drops the rest.
func (p *PeakEWMA) Observe(rtt, now time.Duration) {
	if rtt < 0 {
		rtt = 0
	}
	var elapsed int64
	for {
		t := p.at.Load()
		if int64(now) <= t {
			break
		}
		if p.at.CompareAndSwap(t, int64(now)) {
			elapsed = int64(now) - t
			break
		}
	}
	sample := rtt.Seconds()
	decay := math.Exp(-float64(elapsed) / p.tau())
	for {
		old := p.bits.Load()
		v := math.Float64frombits(old)
		next := sample
		if sample <= v {
			next = v*decay + sample*(1-decay)
		}
		if p.bits.CompareAndSwap(old, math.Float64bits(next)) {
			return
		}
	}
}

// Value returns the estimate in seconds at now, decayed toward 0 by the time since the latest
// sample; 0 means unknown (no sample yet), which is what Load.Latency expects.
func (p *PeakEWMA) Value(now time.Duration) float64 {
	v := math.Float64frombits(p.bits.Load())
	if elapsed := int64(now) - p.at.Load(); elapsed > 0 && v > 0 {
		v *= math.Exp(-float64(elapsed) / p.tau())
	}
	return v
}

// Reset forgets the estimate, for a backend whose identity or path changed.
func (p *PeakEWMA) Reset() {
	p.bits.Store(0)
	p.at.Store(0)
}
