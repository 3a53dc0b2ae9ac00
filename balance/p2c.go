package balance

import (
	"math"
	"math/bits"
)

// p2c is the power of two choices on in-flight/weight: draw two distinct members, keep the one
// with the lower inflight/weight (cross-multiplied; a tie keeps the first draw, itself random).
// Draws are uniform when all weights are equal and follow the weights otherwise, through an
// alias table, so that idle members still share the load by weight. Tried and Full members are
// redrawn a few times; after that a scan from a random start collects the candidates, so the
// O(n) path runs only when most members are unusable. No lock, no allocation.
type p2c struct {
	twoChoices
}

func buildP2C(bs []Backend, tier []int, o Options) (Picker, error) {
	return &p2c{newTwoChoices(bs, tier, o)}, nil
}

func (p *p2c) Pick(_ uint64, tried Tried) (int, error) {
	a, b, err := p.pair(&tried)
	if err != nil {
		return -1, err
	}
	ma := &p.m[a]
	if b < 0 {
		return int(ma.i), nil
	}
	mb := &p.m[b]
	if p.load.InFlight(int(mb.i))*ma.w < p.load.InFlight(int(ma.i))*mb.w {
		return int(mb.i), nil
	}
	return int(ma.i), nil
}

// p2cRedraws bounds the draws spent on tried or Full members before falling back to a scan.
const p2cRedraws = 8

// twoChoices draws the two candidates of a power-of-two-choices pick; p2c and ewma differ only
// in how they compare them. Immutable after build.
type twoChoices struct {
	m        []tcMember // per tier position
	load     Load
	rnd      Rand
	weighted bool // draws go through the alias table
}

// tcMember keeps together what one draw touches, so that a draw costs one cache line.
type tcMember struct {
	w int64 // weight
	i int32 // backend index
	// alias and accept form Vose's alias table (unused when the weights are equal): column k
	// is kept with probability accept/2^64, otherwise the alias column is taken.
	alias  int32
	accept uint64
}

func newTwoChoices(bs []Backend, tier []int, o Options) twoChoices {
	t := twoChoices{m: make([]tcMember, len(tier)), load: o.load(), rnd: o.rand()}
	w := make([]int64, len(tier))
	for k, i := range tier {
		w[k] = int64(bs[i].Weight)
		t.m[k] = tcMember{w: w[k], i: int32(i)}
		if w[k] != w[0] {
			t.weighted = true
		}
	}
	if t.weighted {
		alias, accept := twoChoicesAlias(w)
		for k := range t.m {
			t.m[k].alias, t.m[k].accept = alias[k], accept[k]
		}
	}
	return t
}

// twoChoicesAlias builds Vose's alias table in integers: every column holds a total of W (the sum
// of weights) in units of weight×n, so the shares are exact up to the 2^-64 rounding of accept.
func twoChoicesAlias(w []int64) ([]int32, []uint64) {
	n := len(w)
	alias := make([]int32, n)
	accept := make([]uint64, n)
	// Halve absurdly large weights until W×n fits comfortably in 63 bits; shares move by
	// at most one part in 2^31 of the total.
	shift := uint(0)
	for {
		sum := 0.0
		for _, x := range w {
			sum += float64(max(1, uint64(x)>>shift))
		}
		if sum < float64((1<<62)/uint64(n)) {
			break
		}
		shift++
	}
	var total uint64
	p := make([]uint64, n)
	for k, x := range w {
		u := max(1, uint64(x)>>shift)
		total += u
		p[k] = u * uint64(n)
	}
	var small, large []int
	for k := range p {
		if p[k] < total {
			small = append(small, k)
		} else {
			large = append(large, k)
		}
	}
	for len(small) > 0 && len(large) > 0 {
		s, l := small[len(small)-1], large[len(large)-1]
		small = small[:len(small)-1]
		accept[s], _ = bits.Div64(p[s], 0, total)
		alias[s] = int32(l)
		p[l] -= total - p[s]
		if p[l] < total {
			large = large[:len(large)-1]
			small = append(small, l)
		}
	}
	// Whatever is left is full up to rounding: it always keeps its own column.
	for _, k := range append(small, large...) {
		accept[k] = math.MaxUint64
		alias[k] = int32(k)
	}
	return alias, accept
}

// draw returns a tier position, weighted when the weights differ. One random number serves
// both the column (high half of the product) and the coin (low half).
func (t *twoChoices) draw() int {
	hi, lo := bits.Mul64(t.rnd.Uint64(), uint64(len(t.m)))
	if m := &t.m[hi]; t.weighted && lo >= m.accept {
		return int(m.alias)
	}
	return int(hi)
}

// draw32 is draw from 32 random bits, for the first pair: the coin compares with the top half
// of accept, which moves a member's share by at most 2^-32.
func (t *twoChoices) draw32(x uint32) int {
	hi, lo := bits.Mul32(x, uint32(len(t.m)))
	if m := &t.m[hi]; lo >= uint32(m.accept>>32) {
		return int(m.alias)
	}
	return int(hi)
}

// drawOther returns a tier position other than a. Weighted draws are retried a few times; a
// heavy member could otherwise be drawn twice in a row for ever, so the last resort is a
// uniform draw among the others.
func (t *twoChoices) drawOther(a int) int {
	if t.weighted {
		for r := 0; r < 3; r++ {
			if k := t.draw(); k != a {
				return k
			}
		}
	}
	k := intn(t.rnd, len(t.m)-1)
	if k >= a {
		k++
	}
	return k
}

// usable reports whether tier position k may take this request.
func (t *twoChoices) usable(k int, tried *Tried) bool {
	i := int(t.m[k].i)
	return !tried.Has(i) && !t.load.Full(i)
}

// pair returns two distinct usable tier positions, or one (b = -1) when only one could be
// found, or an error when none is usable.
func (t *twoChoices) pair(tried *Tried) (a, b int, err error) {
	n := len(t.m)
	if n == 1 {
		i := int(t.m[0].i)
		switch {
		case tried.Has(i):
			return -1, -1, ErrNoBackend
		case t.load.Full(i):
			return -1, -1, ErrBusy
		}
		return 0, -1, nil
	}
	a, b = -1, -1
	// The first two draws come from one random number: for equal weights the low half of the
	// first product is uniform again; for weighted draws each 32-bit half makes one draw.
	u := t.rnd.Uint64()
	var ka, kb int
	if t.weighted {
		ka, kb = t.draw32(uint32(u>>32)), t.draw32(uint32(u))
		if kb == ka {
			kb = t.drawOther(ka)
		}
	} else {
		hi, lo := bits.Mul64(u, uint64(n))
		k2, _ := bits.Mul64(lo, uint64(n-1))
		ka, kb = int(hi), int(k2)
		if kb >= ka {
			kb++
		}
	}
	ua, ub := t.usable(ka, tried), t.usable(kb, tried)
	switch {
	case ua && ub:
		return ka, kb, nil
	case ua:
		a = ka
	case ub:
		a = kb
	}
	for d := 0; d < p2cRedraws; d++ {
		var k int
		if a < 0 {
			k = t.draw()
		} else {
			k = t.drawOther(a)
		}
		if !t.usable(k, tried) {
			continue
		}
		if a >= 0 {
			return a, k, nil
		}
		a = k
	}
	if a >= 0 {
		return a, -1, nil
	}
	// Most members are unusable: scan from a random start and take the first two usable.
	sawFull := false
	k := intn(t.rnd, n)
	for c := 0; c < n; c, k = c+1, k+1 {
		if k == n {
			k = 0
		}
		i := int(t.m[k].i)
		if tried.Has(i) {
			continue
		}
		if t.load.Full(i) {
			sawFull = true
			continue
		}
		if a >= 0 {
			return a, k, nil
		}
		a = k
	}
	if a >= 0 {
		return a, -1, nil
	}
	return -1, -1, exhausted(sawFull)
}
