package balance

import "sync"

// bybusyness is Apache mod_lbmethod_bybusyness, rule for rule: on every pick each usable
// member is credited its weight exactly as byrequests does (lbstatus += weight, total +=
// weight); the candidate is the member with the lowest busy count (requests in flight, compared
// raw, not per weight), ties to the higher lbstatus and then to the first in tier order; the
// winner is debited the total. Weights therefore only break ties between equally busy members,
// as Apache documents, and with equal busy counts the order is byrequests' (smooth WRR).
// Tried and Full members are unusable for this pick and earn no credit, as disabled workers in
// Apache. O(n) under the picker's mutex, as Apache's scan under the balancer mutex.
type byBusyness struct {
	load Load

	mu sync.Mutex
	m  []bbMember // per tier position; lbstatus is guarded by mu
}

type bbMember struct {
	i        int   // backend index
	w        int64 // weight (Apache's lbfactor)
	lbstatus int64
}

func buildByBusyness(bs []Backend, tier []int, o Options) (Picker, error) {
	m := make([]bbMember, len(tier))
	for k, i := range tier {
		m[k] = bbMember{i: i, w: int64(bs[i].Weight)}
	}
	return &byBusyness{load: o.load(), m: m}, nil
}

func (b *byBusyness) Pick(_ uint64, tried Tried) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	best, bestBusy, total, sawFull := -1, int64(0), int64(0), false
	for k := range b.m {
		m := &b.m[k]
		if tried.Has(m.i) {
			continue
		}
		if b.load.Full(m.i) {
			sawFull = true
			continue
		}
		m.lbstatus += m.w
		total += m.w
		busy := b.load.InFlight(m.i)
		if best < 0 || busy < bestBusy || (busy == bestBusy && m.lbstatus > b.m[best].lbstatus) {
			best, bestBusy = k, busy
		}
	}
	if best < 0 {
		return -1, exhausted(sawFull)
	}
	b.m[best].lbstatus -= total
	return b.m[best].i, nil
}

// LBStatus reports backend i's current credit, as Apache's balancer-manager shows it.
func (b *byBusyness) LBStatus(i int) (int64, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for k := range b.m {
		if b.m[k].i == i {
			return b.m[k].lbstatus, true
		}
	}
	return 0, false
}
