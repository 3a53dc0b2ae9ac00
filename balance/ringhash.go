package balance

import (
	"cmp"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"sync/atomic"
)

const (
	// ringPointsPerWeight is how many ring points one unit of weight gets while the ring stays
	// under ringMaxPoints; 160 points per backend keep shares within a few percent.
	ringPointsPerWeight = 160
	// ringMaxPoints caps the ring (about 14 bytes a point with the index: 3.5 MiB). When
	// 160·Σw would exceed it, the points per weight unit shrink to fit, so that changing Σw
	// also moves a few keys between the remaining backends (about |ΔΣw|/Σw of them), not only
	// the changed backend's.
	ringMaxPoints = 1 << 18
	// ringWalk bounds the clockwise walk of a pick before it falls back to an O(n) scan.
	ringWalk = 256
	// ringSeed seeds the hash of an ID from which its points are derived.
	ringSeed = 0x72696e6768617368 // "ringhash"
	// ringStride separates the points of one ID before mixing (2^64/φ, odd).
	ringStride = 0x9e3779b97f4a7c15
)

// TotalLoad may be implemented by a Load that knows the total number of requests in flight over
// the pool's backends in O(1). Bounded-load ringhash uses it when present; otherwise it keeps
// its own total from Tracker updates (see boundedRing).
type TotalLoad interface {
	TotalInFlight() int64
}

// ringhash is consistent hashing on a ring of 64-bit points (ketama style), each backend owning
// points in proportion to its weight; a key belongs to the first point clockwise from it. Pick is
// a binary search, O(log R), narrowed by an index of the top bits to a few points. Adding or
// removing a backend moves only that backend's keys (while the points per weight unit stay
// fixed, see ringMaxPoints). Pick never locks.
type ringhash struct {
	points  []uint64 // sorted
	owner   []int32  // backend index of each point
	index   []int32  // first point of each bucket of the top bits, see buildIndex
	shift   uint     // 64 − bucket bits
	members []int    // backend indexes sorted by ID, for the fallback scan
	load    Load
}

// boundedRing adds bounded loads (Mirrokni, Thorup, Zadimoghaddam; HAProxy's
// hash-balance-factor): backend i is eligible only while InFlight(i) < ceil(f·(T+1)·w_i/Σw),
// where T is the tier's total in flight and +1 counts the request being placed; the key walks
// clockwise to the first eligible backend. Some backend is always eligible (Σ capacities ≥ T+1
// > Σ in flight) unless tried or full ones are excluded, in which case the plain ring choice
// among usable ones wins.
//
// The total must not cost O(n) per pick, and Load has no total. Choice: if the Load implements
// TotalLoad, read it (O(1)); otherwise the picker is a Tracker and keeps the total itself: the
// counter owner calls Update(i, n) on every change, which swaps backend i's last known count and
// adds the difference to an atomic total (O(1), lock-free, and self-healing like the indexes of
// sqf/leastconn). The total starts from the Load's counts at build. Cost per pick: one atomic
// load for T plus, per backend visited, InFlight and Full; the walk is O(1/ε²) expected points.
// If the owner never calls Update and the Load has no TotalLoad, T stays at its build value and
// capacities are too small: picks then degrade to the plain ring choice, never to an error.
type boundedRing struct {
	ringhash
	share     []float64 // factor·w/Σw by backend index (0 outside the tier)
	totalLoad TotalLoad // nil unless the Load implements it
	slot      []int32   // backend index -> position in last, -1 outside the tier
	last      []atomic.Int64
	total     atomic.Int64
}

func buildRingHash(bs []Backend, tier []int, o Options) (Picker, error) {
	f := o.BalanceFactor
	if math.IsNaN(f) || math.IsInf(f, 0) || f < 0 || (f > 0 && f < 1) {
		return nil, &ConfigError{"ringhash", fmt.Sprintf("balance factor %v: need 0 (unbounded) or at least 1", f)}
	}
	if len(tier) == 0 {
		return empty{}, nil
	}
	r := ringhash{members: slices.Clone(tier), load: o.load()}
	slices.SortFunc(r.members, func(a, b int) int { return cmp.Compare(bs[a].ID, bs[b].ID) })
	for k := 1; k < len(r.members); k++ {
		if bs[r.members[k]].ID == bs[r.members[k-1]].ID {
			return nil, &ConfigError{"ringhash", fmt.Sprintf("backend ID %q appears twice", bs[r.members[k]].ID)}
		}
	}
	var total float64
	for _, i := range tier {
		total += float64(bs[i].Weight)
	}
	scale := math.Min(ringPointsPerWeight, ringMaxPoints/total)
	counts := make([]int, len(r.members))
	size := 0
	for k, i := range r.members {
		counts[k] = max(1, int(math.Round(float64(bs[i].Weight)*scale)))
		size += counts[k]
	}
	pts := make([]ringPoint, 0, size)
	for k, i := range r.members {
		base := idHash(bs[i].ID, ringSeed)
		for j := 0; j < counts[k]; j++ {
			pts = append(pts, ringPoint{mix64(base + uint64(j)*ringStride), int32(k)})
		}
	}
	pts = sortRingPoints(pts)
	r.points = make([]uint64, len(pts))
	r.owner = make([]int32, len(pts))
	for j, p := range pts {
		r.points[j], r.owner[j] = p.h, int32(r.members[p.k])
	}
	r.buildIndex()
	if f == 0 {
		return &r, nil
	}

	b := &boundedRing{ringhash: r, share: make([]float64, len(bs)), slot: make([]int32, len(bs)), last: make([]atomic.Int64, len(tier))}
	b.totalLoad, _ = o.Load.(TotalLoad)
	for i := range b.slot {
		b.slot[i] = -1
	}
	var inflight int64
	for k, i := range tier {
		b.share[i] = f * float64(bs[i].Weight) / total
		b.slot[i] = int32(k)
		n := r.load.InFlight(i)
		b.last[k].Store(n)
		inflight += n
	}
	b.total.Store(inflight)
	return b, nil
}

// ringPoint is a point on the ring during the build.
type ringPoint struct {
	h uint64
	k int32 // position in the members sorted by ID: ties between backends go to the lower ID
}

// sortRingPoints sorts points by hash, stably, so that equal hashes stay in member order (the
// input is generated in that order). Point hashes are uniform, so a stable bucket pass on the
// top 16 bits followed by insertion sort within buckets (a handful of points each) is O(R); it
// took a 10000-backend build from 38 ms to 11 ms. An unexpectedly large bucket is sorted with a
// stable comparison sort instead.
func sortRingPoints(pts []ringPoint) []ringPoint {
	const shift = 64 - 16
	var start [1<<16 + 1]int32
	for _, p := range pts {
		start[p.h>>shift+1]++
	}
	for b := 1; b < len(start); b++ {
		start[b] += start[b-1]
	}
	out := make([]ringPoint, len(pts))
	next := start
	for _, p := range pts {
		b := p.h >> shift
		out[next[b]] = p
		next[b]++
	}
	for b := 0; b < 1<<16; b++ {
		bucket := out[start[b]:start[b+1]]
		if len(bucket) > 32 {
			slices.SortStableFunc(bucket, func(x, y ringPoint) int { return cmp.Compare(x.h, y.h) })
			continue
		}
		for i := 1; i < len(bucket); i++ {
			for j := i; j > 0 && bucket[j].h < bucket[j-1].h; j-- {
				bucket[j], bucket[j-1] = bucket[j-1], bucket[j]
			}
		}
	}
	return out
}

// buildIndex fills r.index: for each of the 2^b buckets of the top b bits, the position of its
// first point, with b chosen so that a bucket holds 2 to 4 points on average. It costs R bytes
// and turns the search into one index read plus a search among a few neighbouring points, about
// two cache misses instead of log2(R) ≈ 18 on a 2^18-point ring.
func (r *ringhash) buildIndex() {
	b := max(1, bits.Len(uint(len(r.points)))-2)
	r.shift = uint(64 - b)
	r.index = make([]int32, 1<<b+1)
	p := 0
	for k := range 1 << b {
		for p < len(r.points) && r.points[p]>>r.shift < uint64(k) {
			p++
		}
		r.index[k] = int32(p)
	}
	r.index[1<<b] = int32(len(r.points))
}

// search returns the index of the first point at or after key, wrapping to 0. Every point of a
// later bucket is above key, so the answer lies in key's bucket or is the next bucket's first.
func (r *ringhash) search(key uint64) int {
	k := key >> r.shift
	lo, hi := int(r.index[k]), int(r.index[k+1])
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if r.points[m] < key {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo == len(r.points) {
		return 0
	}
	return lo
}

// Pick returns the owner of the first point clockwise from key; tried or full backends are
// passed over to the next point of a different backend, so retries are stable.
func (r *ringhash) Pick(key uint64, tried Tried) (int, error) {
	i, _ := r.walk(key, tried, nil, 0)
	if i >= 0 {
		return i, nil
	}
	return r.scan(key, tried, nil, 0)
}

// Pick is ringhash's Pick restricted to backends under their capacity.
func (b *boundedRing) Pick(key uint64, tried Tried) (int, error) {
	var t int64
	if b.totalLoad != nil {
		t = b.totalLoad.TotalInFlight()
	} else {
		t = b.total.Load()
	}
	t = max(t, 0) + 1 // count the request being placed
	i, first := b.walk(key, tried, b, t)
	if i >= 0 {
		return i, nil
	}
	i, err := b.scan(key, tried, b, t)
	if err == nil && first >= 0 && !b.under(i, t) {
		// Nobody usable is under capacity (tried or full ones were excluded): prefer the
		// ring's own usable choice to the scan's.
		return first, nil
	}
	return i, err
}

// under reports whether backend i may take one more request when t are in flight, counting it.
func (b *boundedRing) under(i int, t int64) bool {
	return float64(b.load.InFlight(i)) < math.Ceil(b.share[i]*float64(t))
}

// walk visits up to ringWalk points clockwise from key and returns the first usable backend (under
// capacity if b is not nil), or -1; first is the first usable backend seen regardless of
// capacity, or -1.
func (r *ringhash) walk(key uint64, tried Tried, b *boundedRing, t int64) (i, first int) {
	p, prev, first := r.search(key), int32(-1), -1
	for steps := min(len(r.points), ringWalk); steps > 0; steps-- {
		if o := r.owner[p]; o != prev {
			prev = o
			i := int(o)
			if !tried.Has(i) && !r.load.Full(i) {
				if b == nil || b.under(i, t) {
					return i, first
				}
				if first < 0 {
					first = i
				}
			}
		}
		if p++; p == len(r.points) {
			p = 0
		}
	}
	return -1, first
}

// scan is the O(n) fallback when the walk found nothing: members in ID order from the owner of the
// key's point, first under capacity, else first usable.
func (r *ringhash) scan(key uint64, tried Tried, b *boundedRing, t int64) (int, error) {
	owner := int(r.owner[r.search(key)])
	n := len(r.members)
	start := 0
	for k, i := range r.members {
		if i == owner {
			start = k
			break
		}
	}
	usable, sawFull := -1, false
	for j := 0; j < n; j++ {
		k := start + j
		if k >= n {
			k -= n
		}
		i := r.members[k]
		if tried.Has(i) {
			continue
		}
		if r.load.Full(i) {
			sawFull = true
			continue
		}
		if b == nil || b.under(i, t) {
			return i, nil
		}
		if usable < 0 {
			usable = i
		}
	}
	if usable >= 0 {
		return usable, nil
	}
	return -1, exhausted(sawFull)
}

// Update implements Tracker: it keeps the tier's total in flight for the capacity bound.
func (b *boundedRing) Update(i int, inflight int64) {
	if i < 0 || i >= len(b.slot) || b.slot[i] < 0 {
		return
	}
	old := b.last[b.slot[i]].Swap(inflight)
	b.total.Add(inflight - old)
}
