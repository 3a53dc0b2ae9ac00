package balance

import "sync"

// swrr is nginx's smooth weighted round robin, which is exactly Apache's byrequests: every
// usable backend is credited its weight, the one with the highest credit (lbstatus) wins and
// is debited the total. It is the honest O(n) scan under a mutex, kept as the reference that
// vnswrr and roundrobin are measured against.
type swrr struct {
	bs   []Backend
	tier []int
	load Load

	mu       sync.Mutex
	lbstatus []int64 // parallel to tier
}

func buildSWRR(bs []Backend, tier []int, o Options) (Picker, error) {
	return &swrr{bs: bs, tier: tier, load: o.load(), lbstatus: make([]int64, len(tier))}, nil
}

func (s *swrr) Pick(_ uint64, tried Tried) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	best, total, sawFull := -1, int64(0), false
	for k, i := range s.tier {
		if tried.Has(i) {
			continue
		}
		if s.load.Full(i) {
			sawFull = true
			continue
		}
		w := int64(s.bs[i].Weight)
		s.lbstatus[k] += w
		total += w
		if best < 0 || s.lbstatus[k] > s.lbstatus[best] {
			best = k
		}
	}
	if best < 0 {
		return -1, exhausted(sawFull)
	}
	s.lbstatus[best] -= total
	return s.tier[best], nil
}

// LBStatus reports backend i's current credit, as Apache's balancer-manager shows it.
func (s *swrr) LBStatus(i int) (int64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, j := range s.tier {
		if j == i {
			return s.lbstatus[k], true
		}
	}
	return 0, false
}

// LBStatusReporter is implemented by pickers that keep Apache's lbstatus, for the status page.
type LBStatusReporter interface {
	LBStatus(i int) (int64, bool)
}
