package balance

import (
	"math"
	"math/bits"
	"math/rand/v2"
)

// random is lighttpd's "round-robin", which is really a uniform random choice ("state-less and
// has the same distribution"). With unequal weights the draw is weighted, in O(1), through a
// Vose alias table built at Build time: column k is drawn uniformly and kept with probability
// thr/2^64, else its alias is taken.
type random struct {
	tier []int
	load Load
	rnd  Rand
	fast bool       // rnd is the global generator: call it directly, not through the interface
	cols []aliasCol // nil when all weights are equal
}

// aliasCol is one column of the alias table with both outcomes as backend indexes, so that a
// weighted draw touches one 16-byte entry.
type aliasCol struct {
	thr         uint64
	self, alias int32
}

// randomDraws is how many random draws a pick makes before it falls back to a linear scan
// from a random offset, when draws keep landing on tried or full backends.
const randomDraws = 3

func buildRandom(bs []Backend, tier []int, o Options) (Picker, error) {
	if len(tier) == 0 {
		return empty{}, nil
	}
	r := &random{tier: tier, load: o.load(), rnd: o.rand(), fast: o.Rand == nil}
	w0 := bs[tier[0]].Weight
	for _, i := range tier {
		if bs[i].Weight != w0 {
			thr, alias := aliasTable(bs, tier)
			r.cols = make([]aliasCol, len(tier))
			for k := range r.cols {
				r.cols[k] = aliasCol{thr[k], int32(tier[k]), int32(tier[alias[k]])}
			}
			break
		}
	}
	return r, nil
}

// aliasTable builds Vose's alias table in exact integer arithmetic: with n members and total
// weight W, column k starts with mass w_k·n against a column height of W.
func aliasTable(bs []Backend, tier []int) ([]uint64, []int32) {
	n := len(tier)
	mass := make([]uint64, n)
	var g int64
	fsum := 0.0
	for _, i := range tier {
		g = gcd64(g, int64(bs[i].Weight))
		fsum += float64(bs[i].Weight)
	}
	// Keep W·n below 2^62 so that masses cannot overflow; scaling changes shares by less
	// than 2^-30 of the total in the worst case.
	scale := 1.0
	if lim := float64(uint64(1)<<62) / float64(n); fsum/float64(g) > lim {
		scale = lim / (fsum / float64(g))
	}
	var total uint64
	for k, i := range tier {
		u := uint64(int64(bs[i].Weight) / g)
		if scale < 1 {
			u = max(1, uint64(math.Floor(float64(u)*scale)))
		}
		mass[k] = u * uint64(n)
		total += u
	}
	thr := make([]uint64, n)
	alias := make([]int32, n)
	var small, large []int32
	for k := range mass {
		if mass[k] < total {
			small = append(small, int32(k))
		} else {
			large = append(large, int32(k))
		}
	}
	for len(small) > 0 && len(large) > 0 {
		s := small[len(small)-1]
		small = small[:len(small)-1]
		l := large[len(large)-1]
		thr[s], _ = bits.Div64(mass[s], 0, total) // mass[s]/total as a 0.64 fraction
		alias[s] = l
		mass[l] -= total - mass[s]
		if mass[l] < total {
			large = large[:len(large)-1]
			small = append(small, l)
		}
	}
	// Whatever remains is a full column (exactly, in integer arithmetic): keep it always.
	for _, k := range append(small, large...) {
		thr[k], alias[k] = math.MaxUint64, k
	}
	return thr, alias
}

func (r *random) Pick(_ uint64, tried Tried) (int, error) {
	n := uint64(len(r.tier))
	for range randomDraws {
		var u uint64
		if r.fast {
			u = rand.Uint64()
		} else {
			u = r.rnd.Uint64()
		}
		hi, lo := bits.Mul64(u, n)
		var i int
		if r.cols == nil {
			i = r.tier[hi]
		} else if c := &r.cols[hi]; lo < c.thr {
			i = int(c.self)
		} else {
			i = int(c.alias)
		}
		if !tried.Has(i) && !r.load.Full(i) {
			return i, nil
		}
		if n == 1 {
			break
		}
	}
	return scanTier(r.tier, intn(r.rnd, int(n)), &tried, r.load)
}
