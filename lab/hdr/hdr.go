package hdr

import (
	"math"
	"math/bits"
)

const (
	subBits  = 7
	sub      = 1 << subBits // buckets per power of two
	exact    = 2 * sub      // values below this are counted exactly
	maxBits  = 44           // values up to 2^44 - 1 are bucketed
	nBuckets = exact + (maxBits-subBits-1)*sub
)

// Histogram counts values into log-linear buckets. The zero value is ready to use.
type Histogram struct {
	counts [nBuckets]uint64
	n      uint64
	min    int64
	max    int64
	sum    float64
}

// index maps v ≥ 0 to its bucket.
func index(v int64) int {
	if v < exact {
		return int(v)
	}
	u := uint64(v)
	if bits.Len64(u) > maxBits {
		return nBuckets - 1
	}
	shift := bits.Len64(u) - subBits - 1 // ≥ 1; leaves 8 significant bits
	mant := int(u >> uint(shift))        // in [128, 256)
	return exact + (shift-1)*sub + mant - sub
}

// bounds returns bucket i's lowest value and width.
func bounds(i int) (lo, width int64) {
	if i < exact {
		return int64(i), 1
	}
	shift := (i-exact)/sub + 1
	mant := int64((i-exact)%sub + sub)
	return mant << uint(shift), 1 << uint(shift)
}

// Record counts one value; negative values count as 0.
func (h *Histogram) Record(v int64) {
	if v < 0 {
		v = 0
	}
	if h.n == 0 || v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
	h.n++
	h.sum += float64(v)
	h.counts[index(v)]++
}

// Merge adds o's counts to h.
func (h *Histogram) Merge(o *Histogram) {
	if o.n == 0 {
		return
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	if o.max > h.max {
		h.max = o.max
	}
	h.n += o.n
	h.sum += o.sum
	for i, c := range o.counts {
		h.counts[i] += c
	}
}

// Reset empties h.
func (h *Histogram) Reset() { *h = Histogram{} }

// Count is the number of recorded values.
func (h *Histogram) Count() uint64 { return h.n }

// Min is the smallest recorded value (0 when empty).
func (h *Histogram) Min() int64 { return h.min }

// Max is the largest recorded value, exact (0 when empty).
func (h *Histogram) Max() int64 { return h.max }

// Mean is the exact mean of the recorded values (0 when empty).
func (h *Histogram) Mean() float64 {
	if h.n == 0 {
		return 0
	}
	return h.sum / float64(h.n)
}

// Quantile returns the value at quantile q in [0, 1]: the order statistic of rank ⌈q·n⌉
// (at least 1), approximated by the highest value of its bucket (as HdrHistogram does, so a
// latency is never under-reported), clamped to [Min, Max]. It returns 0 when h is empty.
func (h *Histogram) Quantile(q float64) int64 {
	if h.n == 0 {
		return 0
	}
	if q >= 1 {
		return h.max
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	rank = max(rank, 1)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			lo, w := bounds(i)
			return min(max(lo+w-1, h.min), h.max)
		}
	}
	return h.max
}
