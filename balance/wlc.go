package balance

import "sync/atomic"

// wlc is LVS's weighted least-connection (ip_vs_wlc.c): the lowest overhead/weight with
// overhead = active×256 + inactive, compared by cross-multiplying as the kernel does. At L7
// there are no inactive (TIME_WAIT-like) connections, so overhead = inflight×256. LVS breaks
// ties toward the first dest in its list; here the scan starts at a rotating position (one
// atomic add per pick), so idle or equally loaded members share the load instead of the first
// one taking it all. O(n), no lock: it only reads Load.
type wlc struct {
	m     []wlcMember // per tier position, compact for the scan
	load  Load
	start atomic.Uint64
}

type wlcMember struct {
	i int   // backend index
	w int64 // weight
}

func buildWLC(bs []Backend, tier []int, o Options) (Picker, error) {
	m := make([]wlcMember, len(tier))
	for k, i := range tier {
		m[k] = wlcMember{i, int64(bs[i].Weight)}
	}
	return &wlc{m: m, load: o.load()}, nil
}

func (p *wlc) Pick(_ uint64, tried Tried) (int, error) {
	n := len(p.m)
	if n == 0 {
		return -1, ErrNoBackend
	}
	k := int(p.start.Add(1) % uint64(n))
	best, bestOH, bestW, sawFull := -1, int64(0), int64(1), false
	for c := 0; c < n; c, k = c+1, k+1 {
		if k == n {
			k = 0
		}
		i, w := p.m[k].i, p.m[k].w
		oh := p.load.InFlight(i) << 8
		// Only a member that would become the best needs the eligibility checks; when no
		// best is found, every member went through them, so sawFull is exact.
		if best >= 0 && oh*bestW >= bestOH*w {
			continue
		}
		if tried.Has(i) {
			continue
		}
		if p.load.Full(i) {
			sawFull = true
			continue
		}
		best, bestOH, bestW = i, oh, w
	}
	if best < 0 {
		return -1, exhausted(sawFull)
	}
	return best, nil
}
