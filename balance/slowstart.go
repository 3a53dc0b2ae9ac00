package balance

import (
	"math"
	"time"
)

// SlowStartWeight is Envoy's slow-start ramp for a backend that came up elapsed ago:
//
//	weight × max(minPercent/100, (max(elapsed, 1 s)/window)^(1/aggression))
//
// rounded down, but at least 1 when weight > 0 so that a ramping backend still gets probed,
// and the full weight once elapsed ≥ window (or when window ≤ 0: slow start off). aggression
// 1 is linear, larger values ramp faster at first; aggression ≤ 0 is taken as 1. minPercent is
// clamped to [0, 100]. The 1 s floor on elapsed is Envoy's, so that the ramp does not start at
// exactly minPercent. The caller reads the clock and rebuilds the picker as the weight grows.
func SlowStartWeight(weight int, elapsed, window time.Duration, aggression, minPercent float64) int {
	if weight <= 0 {
		return 0
	}
	if window <= 0 || elapsed >= window {
		return weight
	}
	if !(aggression > 0) {
		aggression = 1
	}
	minPercent = math.Min(math.Max(minPercent, 0), 100)
	f := math.Pow(float64(max(elapsed, time.Second))/float64(window), 1/aggression)
	f = math.Min(math.Max(f, minPercent/100), 1)
	return max(1, int(float64(weight)*f+1e-9)) // 1e-9: 0.29×100 must give 29, not 28
}
