package balance

// ewma is Finagle's and tower's peak-EWMA balancer: cost = latency × (inflight+1) / weight,
// where latency is the decayed peak-EWMA estimate the counter owner keeps (see PeakEWMA), and
// the cheaper of two random choices wins (the draws are p2c's: weighted when weights differ).
//
// At low load the +1 makes the cost 1/weight, LVS's shortest expected delay: a heavy idle
// member beats a light one, so light members get less than their weight share until the heavy
// ones have requests queued. That is deliberate (weight models capacity), not proportional
// sharing; the draws, weighted as p2c's, only decide which pairs meet.
//
// Unknown latency (0) counts as the other candidate's latency, the lowest known one of the
// pair; when both are unknown the latencies cancel, leaving (inflight+1)/weight. A new backend is
// thus probed at once yet competes on its in-flight count; treating unknown as 0 instead would send
// it every request until its first response came back, and tower's fixed default of 1 s would
// starve it behind fast members.
type ewma struct {
	twoChoices
}

func buildEWMA(bs []Backend, tier []int, o Options) (Picker, error) {
	return &ewma{newTwoChoices(bs, tier, o)}, nil
}

func (p *ewma) Pick(_ uint64, tried Tried) (int, error) {
	a, b, err := p.pair(&tried)
	if err != nil {
		return -1, err
	}
	ma := &p.m[a]
	ia := int(ma.i)
	if b < 0 {
		return ia, nil
	}
	mb := &p.m[b]
	ib := int(mb.i)
	la, lb := p.load.Latency(ia), p.load.Latency(ib)
	switch {
	case la <= 0 && lb <= 0:
		la, lb = 1, 1
	case la <= 0:
		la = lb
	case lb <= 0:
		lb = la
	}
	ca := la * float64(p.load.InFlight(ia)+1) * float64(mb.w)
	cb := lb * float64(p.load.InFlight(ib)+1) * float64(ma.w)
	if cb < ca {
		return ib, nil
	}
	return ia, nil
}
