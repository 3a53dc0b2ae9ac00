package balance

import (
	"cmp"
	"fmt"
	"math/bits"
	"slices"
)

// Maglev table sizes. The default is the paper's (and Envoy's) 65537; the maximum is Envoy's.
// Balance is within one slot per backend, so M should be well above n (M > 100·n gives ~1%).
const (
	MaglevDefaultSize = 65537
	MaglevMaxSize     = 5000011
)

const (
	// maglevProbes bounds how many rehashed slots a pick tries when the key's own backend is
	// tried or full, before it falls back to an O(n) scan.
	maglevProbes = 8
	// maglevStride is the odd constant (2^64/φ) that moves a rehash probe to an unrelated slot.
	maglevStride = 0x9e3779b97f4a7c15
	// Seeds of the two independent hashes of an ID: the preference list's offset and skip.
	maglevOffsetSeed = 0x6d61676c65762d6f // "maglev-o"
	maglevSkipSeed   = 0x6d61676c65762d73 // "maglev-s"
)

// maglev is Maglev consistent hashing (Eisenbud et al., NSDI 2016, §3.4): a lookup table of M
// slots (M prime) filled from each backend's preference permutation, looked up in O(1) as
// table[key mod M]. The table depends only on the set of (ID, weight) pairs, never on input order.
// The picker holds no mutable state, so Pick never locks.
type maglev struct {
	table   []int32 // slot -> backend index into the backend slice
	size    uint64
	members []int // backend indexes sorted by ID, for the fallback scan
	load    Load
}

func buildMaglev(bs []Backend, tier []int, o Options) (Picker, error) {
	if len(tier) == 0 {
		return empty{}, nil
	}
	ids := make([]string, len(tier))
	weights := make([]int, len(tier))
	for k, i := range tier {
		ids[k], weights[k] = bs[i].ID, bs[i].Weight
	}
	table, err := MaglevTable(ids, weights, o.TableSize)
	if err != nil {
		return nil, err
	}
	for s, k := range table {
		table[s] = int32(tier[k])
	}
	members := slices.Clone(tier)
	slices.SortFunc(members, func(a, b int) int { return cmp.Compare(bs[a].ID, bs[b].ID) })
	return &maglev{table: table, size: uint64(len(table)), members: members, load: o.load()}, nil
}

// Pick looks the key up in the table. If that backend was tried or is full, it rehashes the key
// (key + attempt·stride) up to maglevProbes times, which keeps retries deterministic and spreads
// them over the other backends in proportion to their slots; if every probe misses (most
// backends unusable) it scans the members in ID order from a key-dependent start.
func (m *maglev) Pick(key uint64, tried Tried) (int, error) {
	b := int(m.table[key%m.size])
	if !tried.Has(b) && !m.load.Full(b) {
		return b, nil
	}
	for a := uint64(1); a <= maglevProbes; a++ {
		b = int(m.table[(key+a*maglevStride)%m.size])
		if !tried.Has(b) && !m.load.Full(b) {
			return b, nil
		}
	}
	return scanTier(m.members, int(key%uint64(len(m.members))), &tried, m.load)
}

// MaglevTable builds a Maglev lookup table of size slots (a prime, at least len(ids); 0 means
// MaglevDefaultSize) for backends ids with positive weights. Each entry is a position into ids.
// The result depends only on the (ID, weight) pairs, not on their order, so every node builds the
// same table, and a lookup of table[key % size] outside Go finds the same backend.
//
// Slot counts follow the weights exactly, to the slot: every backend gets one slot, and the
// other size−n slots are shared in proportion to weight by largest remainder (ties by ID). With
// equal weights that is ⌊size/n⌋ or ⌈size/n⌉ slots each, the first in ID order taking the extra
// ones, as in the paper. Slots are claimed in turns: backend i's k-th turn comes at time k/w_i,
// ties in ID order, so that a backend of weight 3 takes three preferred slots for each one of a
// backend of weight 1. This is IPVS mh's "turns = weight/gcd" made smooth (k/w is invariant under
// dividing weights by their gcd); with equal weights it is exactly the paper's round robin.
// Build cost is O(size·log size) expected, like the paper's.
func MaglevTable(ids []string, weights []int, size int) ([]int32, error) {
	n := len(ids)
	if size == 0 {
		size = MaglevDefaultSize
	}
	switch {
	case n == 0:
		return nil, &ConfigError{"maglev", "no backends to build a table from"}
	case len(weights) != n:
		return nil, &ConfigError{"maglev", fmt.Sprintf("%d weights for %d backends", len(weights), n)}
	case size < 0 || size > MaglevMaxSize:
		return nil, &ConfigError{"maglev", fmt.Sprintf("table size %d out of range (at most %d)", size, MaglevMaxSize)}
	case !isPrime(size):
		return nil, &ConfigError{"maglev", fmt.Sprintf("table size %d is not a prime", size)}
	case size < n:
		return nil, &ConfigError{"maglev", fmt.Sprintf("table size %d is smaller than the %d backends", size, n)}
	}
	order := make([]int, n) // order[k] = position in ids of the k-th backend by ID
	for k := range order {
		order[k] = k
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(ids[a], ids[b]) })
	w := make([]uint64, n)
	var total uint64
	for k, i := range order {
		if k > 0 && ids[i] == ids[order[k-1]] {
			return nil, &ConfigError{"maglev", fmt.Sprintf("backend ID %q appears twice", ids[i])}
		}
		if weights[i] <= 0 {
			return nil, &ConfigError{"maglev", fmt.Sprintf("backend %q has weight %d; need > 0", ids[i], weights[i])}
		}
		w[k] = uint64(weights[i])
		var carry uint64
		if total, carry = bits.Add64(total, w[k], 0); carry != 0 || total > 1<<62 {
			return nil, &ConfigError{"maglev", "sum of weights too large"}
		}
	}

	quota := maglevQuotas(w, total, uint64(size))
	table := maglevFill(ids, order, w, quota, uint64(size))
	for s, k := range table {
		table[s] = int32(order[k])
	}
	return table, nil
}

// maglevQuotas gives every backend 1 slot and shares the remaining size−n slots in proportion
// to w by largest remainder, ties to the lower position (the lower ID).
func maglevQuotas(w []uint64, total, size uint64) []uint64 {
	n := uint64(len(w))
	rest := size - n
	quota := make([]uint64, n)
	rem := make([]uint64, n)
	given := n
	for k := range w {
		hi, lo := bits.Mul64(rest, w[k])
		q, r := bits.Div64(hi, lo, total) // hi < total because the quotient is ≤ rest
		quota[k], rem[k] = 1+q, r
		given += q
	}
	if given < size {
		byRem := make([]int, n)
		for k := range byRem {
			byRem[k] = k
		}
		slices.SortFunc(byRem, func(a, b int) int {
			if c := cmp.Compare(rem[b], rem[a]); c != 0 {
				return c
			}
			return cmp.Compare(a, b)
		})
		for _, k := range byRem[:size-given] {
			quota[k]++
		}
	}
	return quota
}

// maglevFill runs the population loop: the backend whose next turn (k/w) comes first claims the
// next empty slot of its preference permutation (offset + j·skip mod size), until each backend
// holds its quota. The result holds positions in the sorted order.
func maglevFill(ids []string, order []int, w, quota []uint64, size uint64) []int32 {
	n := len(order)
	table := make([]int32, size)
	for s := range table {
		table[s] = -1
	}
	pos := make([]uint64, n)  // next slot to look at in each permutation
	skip := make([]uint64, n) // permutation step, in [1, size-1]
	turn := make([]uint64, n) // turns taken so far + 1: the next turn's k
	for k, i := range order {
		pos[k] = idHash(ids[i], maglevOffsetSeed) % size
		skip[k] = 1
		if size > 1 {
			skip[k] = idHash(ids[i], maglevSkipSeed)%(size-1) + 1
		}
		turn[k] = 1
	}
	// before orders two backends by the time of their next turn, turn/w, compared exactly by
	// cross-multiplication in 128 bits; ties go to the lower position.
	before := func(a, b int32) bool {
		ha, la := bits.Mul64(turn[a], w[b])
		hb, lb := bits.Mul64(turn[b], w[a])
		if ha != hb {
			return ha < hb
		}
		if la != lb {
			return la < lb
		}
		return a < b
	}
	h := turnHeap{before: before, items: make([]int32, 0, n)}
	for k := 0; k < n; k++ {
		h.push(int32(k))
	}
	for len(h.items) > 0 {
		k := h.items[0]
		p := pos[k]
		for table[p] >= 0 {
			if p += skip[k]; p >= size {
				p -= size
			}
		}
		table[p] = k
		if p += skip[k]; p >= size {
			p -= size
		}
		pos[k] = p
		if turn[k] == quota[k] {
			h.pop()
			continue
		}
		turn[k]++
		h.fix0()
	}
	return table
}

// turnHeap is a binary min-heap of backend positions ordered by before.
type turnHeap struct {
	before func(a, b int32) bool
	items  []int32
}

func (h *turnHeap) push(x int32) {
	h.items = append(h.items, x)
	for c := len(h.items) - 1; c > 0; {
		p := (c - 1) / 2
		if !h.before(h.items[c], h.items[p]) {
			break
		}
		h.items[c], h.items[p] = h.items[p], h.items[c]
		c = p
	}
}

func (h *turnHeap) pop() {
	last := len(h.items) - 1
	h.items[0] = h.items[last]
	h.items = h.items[:last]
	h.fix0()
}

// fix0 restores the heap after the root's key grew.
func (h *turnHeap) fix0() {
	n := len(h.items)
	for p := 0; ; {
		c := 2*p + 1
		if c >= n {
			return
		}
		if c+1 < n && h.before(h.items[c+1], h.items[c]) {
			c++
		}
		if !h.before(h.items[c], h.items[p]) {
			return
		}
		h.items[c], h.items[p] = h.items[p], h.items[c]
		p = c
	}
}

// isPrime is trial division; table sizes are at most a few million, so it costs microseconds.
func isPrime(n int) bool {
	if n < 2 {
		return false
	}
	if n%2 == 0 {
		return n == 2
	}
	for d := 3; d*d <= n; d += 2 {
		if n%d == 0 {
			return false
		}
	}
	return true
}
