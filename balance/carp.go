package balance

import (
	"cmp"
	"math"
	"math/bits"
	"slices"
)

// carp is the Cache Array Routing Protocol of draft-vinod-carp-v1-03 (§3): highest random
// weight hashing where each member's score is its combined hash (URL hash mixed with the
// member's hash) times a load-factor multiplier derived from its share of the weights. Unlike
// lighttpd 1.5's "carp" (a one-point ring, see research A1), removing a member moves only the
// URLs that member owned, spread over all the others.
//
// The URL hash is the low 32 bits of the request key: pass CARPURLHash(url) to be compatible
// with other CARP clients, or any well-mixed key (KeyHash) otherwise. A pick is O(n): one
// multiply-rotate and one float multiply per member, the key itself is hashed once by the caller.
// The picker holds no mutable state, so Pick never locks.
//
// Known flaw of the protocol, kept for interoperability: the combined hash is not independent
// across members. Its top k bits depend only on the low k bits of url_hash XOR member_hash (the
// multiply carries upwards, ROTL 21 brings the low bits to the top), so shares deviate from the
// weights by a few points (see TestCARPWeights), and two members whose hashes agree in many low
// bits split their keys by multiplier rather than by weight. Equal weights keep every multiplier
// at 1, which is where CARP is at its best.
type carp struct {
	// Members in the draft's order (by load factor, then by ID), as parallel slices so that the
	// scoring loop streams through two dense arrays.
	idx  []int     // index into the backend slice
	hash []uint32  // member_hash of the ID
	mult []float64 // load factor multiplier X_k
	load Load
}

// carpMemberHash is the draft's member-proxy hash of a member name (here the Backend ID).
func carpMemberHash(id string) uint32 {
	var h uint32
	for i := 0; i < len(id); i++ {
		h += bits.RotateLeft32(h, 19) + uint32(id[i])
	}
	h += h * 0x62531965
	return bits.RotateLeft32(h, 21)
}

// carpCombine is the draft's combined hash of a URL hash and a member hash.
func carpCombine(url, member uint32) uint32 {
	c := url ^ member
	c += c * 0x62531965
	return bits.RotateLeft32(c, 21)
}

// carpMultipliers returns the load factor multipliers X_k for shares p (Σp = 1) sorted in
// ascending order, by the draft's recurrence (written, as Squid does, with X_0 = 0, P_0 = 0 and
// an empty product of 1 so that X_1 falls out of the loop):
//
//	X_k = ( (K−k+1)(P_k − P_{k−1}) / (X_1⋯X_{k−1}) + X_{k−1}^(K−k+1) )^(1/(K−k+1))
func carpMultipliers(p []float64) []float64 {
	K := len(p)
	x := make([]float64, K)
	pLast, xLast, prod := 0.0, 0.0, 1.0
	for k := 1; k <= K; k++ {
		kk := float64(K - k + 1)
		v := kk * (p[k-1] - pLast) / prod
		v += math.Pow(xLast, kk)
		v = math.Pow(v, 1/kk)
		x[k-1] = v
		prod *= v
		xLast, pLast = v, p[k-1]
	}
	return x
}

func buildCARP(bs []Backend, tier []int, o Options) (Picker, error) {
	if len(tier) == 0 {
		return empty{}, nil
	}
	order := slices.Clone(tier)
	// The draft sorts by load factor; equal factors are ordered by ID so that every node
	// computes the same multipliers from the same membership whatever its input order.
	slices.SortFunc(order, func(a, b int) int {
		if c := cmp.Compare(bs[a].Weight, bs[b].Weight); c != 0 {
			return c
		}
		return cmp.Compare(bs[a].ID, bs[b].ID)
	})
	var total float64
	for _, i := range order {
		total += float64(bs[i].Weight)
	}
	p := make([]float64, len(order))
	for k, i := range order {
		p[k] = float64(bs[i].Weight) / total
	}
	x := carpMultipliers(p)
	c := &carp{idx: order, hash: make([]uint32, len(order)), mult: x, load: o.load()}
	for k, i := range order {
		c.hash[k] = carpMemberHash(bs[i].ID)
	}
	return c, nil
}

// Pick returns the usable member with the highest score; members that were tried or are full
// are skipped, so a retry goes to the next highest score, the same one on every node. Usability
// is checked only for a member that would beat the current best, which keeps the Load calls
// off the common path; when nothing wins, every member was checked, so the ErrBusy/ErrNoBackend
// distinction is exact.
func (c *carp) Pick(key uint64, tried Tried) (int, error) {
	url := uint32(key)
	best, bestScore, sawFull := -1, -1.0, false
	mult := c.mult[:len(c.hash)]
	for k, h := range c.hash {
		score := float64(carpCombine(url, h)) * mult[k]
		if score <= bestScore {
			continue
		}
		i := c.idx[k]
		if tried.Has(i) {
			continue
		}
		if c.load.Full(i) {
			sawFull = true
			continue
		}
		best, bestScore = i, score
	}
	if best < 0 {
		return -1, exhausted(sawFull)
	}
	return best, nil
}
