package balance

import (
	"math"
	"sync/atomic"
)

// roundRobin is smooth weighted round robin served from a precomputed schedule: the whole SWRR
// period (Σw/gcd entries) is built once, every picker starts at entry 0 and an atomic cursor
// hands out consecutive entries, so a pick is one atomic add and one array read.
type roundRobin struct {
	tier   []int
	load   Load
	sched  []int32  // backend indexes (into bs), one SWRR period
	_      [64]byte // keeps the contended cursor off the read-only fields' cache line
	cursor atomic.Uint64
	_      [56]byte
}

func buildRoundRobin(bs []Backend, tier []int, o Options) (Picker, error) {
	if len(tier) == 0 {
		return empty{}, nil
	}
	units, period := schedUnits(bs, tier)
	seq := newSWRRSeq(units)
	sched := make([]int32, period)
	for j := range sched {
		sched[j] = int32(tier[seq.step()])
	}
	return &roundRobin{tier: tier, load: o.load(), sched: sched}, nil
}

func (r *roundRobin) Pick(_ uint64, tried Tried) (int, error) {
	n := uint64(len(r.sched))
	pos := (r.cursor.Add(1) - 1) % n
	if i := int(r.sched[pos]); !tried.Has(i) && !r.load.Full(i) {
		return i, nil
	}
	return schedSkip(r.sched, pos, &r.cursor, r.tier, &tried, r.load)
}

// schedMaxPeriod caps a schedule's length (4 MiB of int32). Weights whose period Σw/gcd is
// longer are scaled down proportionally first; shares then match the weights to within
// 1/schedMaxPeriod of the total, and no backend drops below one entry.
const schedMaxPeriod = 1 << 20

// schedWalk bounds how many schedule entries a pick steps over when entries are ineligible
// (tried or full) before it falls back to a scan of the distinct members.
const schedWalk = 32

// schedUnits returns each tier member's weight divided by the gcd of the tier's weights
// (scaled down when the period would exceed schedMaxPeriod) and the period, their sum.
func schedUnits(bs []Backend, tier []int) ([]int64, int) {
	units := make([]int64, len(tier))
	var g int64
	fsum := 0.0
	for k, i := range tier {
		units[k] = int64(bs[i].Weight)
		g = gcd64(g, units[k])
		fsum += float64(units[k])
	}
	fsum /= float64(g)
	scale := 1.0
	if fsum > schedMaxPeriod {
		scale = schedMaxPeriod / fsum
	}
	var g2 int64
	for k := range units {
		u := units[k] / g
		if scale < 1 {
			u = max(1, int64(math.Floor(float64(u)*scale)))
		}
		units[k] = u
		g2 = gcd64(g2, u)
	}
	period := 0
	for k := range units {
		units[k] /= g2
		period += int(units[k])
	}
	return units, period
}

func gcd64(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// swrrSeq produces the nginx SWRR (Apache byrequests) sequence of a tier one step at a time,
// exactly as the O(n) scan would: after t steps member i's credit is t·w_i − W·k_i (k_i = its
// picks so far), the highest credit wins and ties go to the earliest member. Members of equal
// weight are picked cyclically in tier order, so the members are grouped by weight and a step
// compares one candidate per distinct weight: O(d) for d distinct weights instead of O(n).
type swrrSeq struct {
	total   int64 // W, the sum of the unit weights
	t       int64 // steps taken
	classes []swrrClass
}

// swrrClass is the members of one weight, in tier order. Members before p have been picked
// k+1 times, the others k times; the candidate is members[p].
type swrrClass struct {
	w       int64
	k       int64
	p       int
	members []int32 // tier positions
}

func newSWRRSeq(units []int64) *swrrSeq {
	s := &swrrSeq{}
	byWeight := make(map[int64]int)
	for k, u := range units {
		s.total += u
		c, ok := byWeight[u]
		if !ok {
			c = len(s.classes)
			byWeight[u] = c
			s.classes = append(s.classes, swrrClass{w: u})
		}
		s.classes[c].members = append(s.classes[c].members, int32(k))
	}
	return s
}

// step returns the tier position of the next member in the sequence.
func (s *swrrSeq) step() int {
	t1 := s.t + 1
	best, bv, bpos := -1, int64(0), int32(0)
	for ci := range s.classes {
		c := &s.classes[ci]
		v, pos := t1*c.w-s.total*c.k, c.members[c.p]
		if best < 0 || v > bv || (v == bv && pos < bpos) {
			best, bv, bpos = ci, v, pos
		}
	}
	c := &s.classes[best]
	if c.p++; c.p == len(c.members) {
		c.p, c.k = 0, c.k+1
	}
	s.t = t1
	return int(bpos)
}

// schedSkip finishes a pick whose entry at pos was ineligible: it walks forward at most
// schedWalk entries, consuming the ones it steps over (so a full backend's turns are not
// handed to one neighbour), and then scans the distinct members once, which also decides
// between ErrBusy and ErrNoBackend. The entries it may read, schedWalk from pos on, must be
// built.
func schedSkip(sched []int32, pos uint64, cursor *atomic.Uint64, tier []int, tried *Tried, load Load) (int, error) {
	n := uint64(len(sched))
	limit := min(n, schedWalk)
	for k := uint64(1); k < limit; k++ {
		i := int(sched[(pos+k)%n])
		if tried.Has(i) || load.Full(i) {
			continue
		}
		cursor.Add(k)
		return i, nil
	}
	cursor.Add(limit - 1)
	return scanTier(tier, int(pos%uint64(len(tier))), tried, load)
}
