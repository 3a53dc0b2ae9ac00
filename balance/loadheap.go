package balance

import (
	"sort"
	"sync"
)

// loadNode is one tier member inside a loadHeap. The heap stores nodes by value so that a sift
// compares neighbours in contiguous memory.
type loadNode struct {
	num int64  // in-flight count plus the heap's offset (0 for sqf, 1 for leastconn)
	w   int64  // the member's weight, > 0
	seq uint64 // stamped on every key change: the lower, the longer the key has been unchanged
	k   int32  // position in tier
}

// before orders nodes by num/w (cross-multiplied, no floats), then first in, first out among
// equal keys. FIFO among equals is what turns a least-load rule into round robin when loads are
// equal: the member whose key changed longest ago goes first.
func (a *loadNode) before(b *loadNode) bool {
	x, y := a.num*b.w, b.num*a.w
	return x < y || (x == y && a.seq < b.seq)
}

// loadHeap is the ordered index shared by sqf and leastconn: an indexed binary min-heap of a
// tier's members keyed by (in-flight + plus)/weight. Pick takes the minimum usable member and
// claims it (counts the pick at once, so that concurrent picks spread out before the counter
// owner's Update arrives); Update overwrites a member's count with the authoritative value, so
// a missed or doubled claim heals at the next change. Everything mutable is guarded by mu, one
// mutex per picker; where and tier are immutable after build.
type loadHeap struct {
	tier []int
	load Load
	plus int64
	// where maps a backend index to its tier position, -1 when the backend is not in this tier.
	where []int32

	mu    sync.Mutex
	heap  []loadNode // heap order
	slot  []int32    // tier position -> heap slot
	next  uint64     // next sequence number
	stack []int32    // scratch for the search past unusable members
}

// newLoadHeap builds the index over tier, reading the current in-flight counts. The initial
// FIFO order among equal keys is the order in which smooth weighted round robin would first
// pick each member: while no member has been picked, SWRR's credit of member i after t rounds
// is t×weight(i), so the unpicked member with the highest weight always wins, ties going to
// the first in tier order. Sorting by weight, descending and stable, reproduces that order in
// O(n log n) without simulating the schedule.
func newLoadHeap(bs []Backend, tier []int, o Options, plus int64) *loadHeap {
	h := &loadHeap{
		tier:  tier,
		load:  o.load(),
		plus:  plus,
		where: make([]int32, len(bs)),
		heap:  make([]loadNode, len(tier)),
		slot:  make([]int32, len(tier)),
		stack: make([]int32, 0, len(tier)),
	}
	for i := range h.where {
		h.where[i] = -1
	}
	order := make([]int, len(tier))
	for k, i := range tier {
		h.where[i] = int32(k)
		order[k] = k
	}
	sort.SliceStable(order, func(a, b int) bool { return bs[tier[order[a]]].Weight > bs[tier[order[b]]].Weight })
	for rank, k := range order {
		i := tier[k]
		n := h.load.InFlight(i)
		if n < 0 {
			n = 0
		}
		h.heap[k] = loadNode{num: n + plus, w: int64(bs[i].Weight), seq: uint64(rank), k: int32(k)}
	}
	h.next = uint64(len(tier))
	for s := len(h.heap)/2 - 1; s >= 0; s-- {
		h.down(s)
	}
	for s := range h.heap {
		h.slot[h.heap[s].k] = int32(s)
	}
	return h
}

// up moves the node at slot s toward the root while it orders before its parent, shifting
// parents down into the hole instead of swapping; it reports whether the node moved.
func (h *loadHeap) up(s int) bool {
	nd := h.heap[s]
	start := s
	for s > 0 {
		p := (s - 1) / 2
		if !nd.before(&h.heap[p]) {
			break
		}
		h.heap[s] = h.heap[p]
		h.slot[h.heap[s].k] = int32(s)
		s = p
	}
	h.heap[s] = nd
	h.slot[nd.k] = int32(s)
	return s != start
}

// down moves the node at slot s toward the leaves while a child orders before it, shifting
// children up into the hole.
func (h *loadHeap) down(s int) {
	n := len(h.heap)
	nd := h.heap[s]
	for {
		c := 2*s + 1
		if c >= n {
			break
		}
		if r := c + 1; r < n && h.heap[r].before(&h.heap[c]) {
			c = r
		}
		if !h.heap[c].before(&nd) {
			break
		}
		h.heap[s] = h.heap[c]
		h.slot[h.heap[s].k] = int32(s)
		s = c
	}
	h.heap[s] = nd
	h.slot[nd.k] = int32(s)
}

// search returns the heap slot of the first usable member in heap order, or -1 and whether
// some untried member was skipped only because it was Full. The root answers almost always;
// past an unusable node the search descends into both children and prunes every subtree whose
// root cannot beat the best usable node found so far, so the cost grows only with the number
// of tried or Full members.
func (h *loadHeap) search(tried *Tried) (int, bool) {
	if len(h.heap) == 0 {
		return -1, false
	}
	if i := h.tier[h.heap[0].k]; !tried.Has(i) && !h.load.Full(i) {
		return 0, false
	}
	best, sawFull := -1, false
	st := append(h.stack[:0], 0)
	for len(st) > 0 {
		s := int(st[len(st)-1])
		st = st[:len(st)-1]
		nd := &h.heap[s]
		if best >= 0 && !nd.before(&h.heap[best]) {
			continue
		}
		i := h.tier[nd.k]
		if !tried.Has(i) {
			if !h.load.Full(i) {
				best = s
				continue
			}
			sawFull = true
		}
		if c := 2*s + 1; c < len(h.heap) {
			st = append(st, int32(c))
			if c+1 < len(h.heap) {
				st = append(st, int32(c+1))
			}
		}
	}
	h.stack = st[:0]
	return best, sawFull
}

// Pick returns the member with the lowest key that is neither tried nor Full and claims it.
func (h *loadHeap) Pick(_ uint64, tried Tried) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock() // Load is foreign code: a panic in Full must not leave mu locked
	s, sawFull := h.search(&tried)
	if s < 0 {
		return -1, exhausted(sawFull)
	}
	nd := &h.heap[s]
	i := h.tier[nd.k]
	nd.num++
	nd.seq = h.next
	h.next++
	h.down(s)
	return i, nil
}

// Update implements Tracker: backend i now has inflight requests in flight. Indexes outside
// this tier are ignored; an unchanged count keeps the member's place among equals.
func (h *loadHeap) Update(i int, inflight int64) {
	if uint(i) >= uint(len(h.where)) {
		return
	}
	k := h.where[i]
	if k < 0 {
		return
	}
	if inflight < 0 {
		inflight = 0
	}
	v := inflight + h.plus
	h.mu.Lock()
	s := int(h.slot[k])
	if nd := &h.heap[s]; nd.num != v {
		nd.num = v
		nd.seq = h.next
		h.next++
		if !h.up(s) {
			h.down(s)
		}
	}
	h.mu.Unlock()
}
