package sim

import (
	"math"
	"slices"
	"time"
)

// percentiles returns nearest-rank percentiles of sample (which it sorts in place).
func percentiles(sample []time.Duration) Percentiles {
	if len(sample) == 0 {
		return Percentiles{}
	}
	slices.Sort(sample)
	rank := func(p float64) time.Duration {
		k := int(math.Ceil(p*float64(len(sample)))) - 1
		return sample[min(max(k, 0), len(sample)-1)]
	}
	return Percentiles{P50: rank(0.50), P90: rank(0.90), P99: rank(0.99), Max: sample[len(sample)-1]}
}
