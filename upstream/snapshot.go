package upstream

import (
	"time"

	"ballast/balance"
)

// rampScale multiplies every weight while some backend of the pool ramps up, so that slow start
// has a tenth of a weight unit of resolution even when weights are 1.
const rampScale = 10

// rampMinPercent is the share a backend starts its slow-start ramp at (Envoy's default).
const rampMinPercent = 10

// rampSteps is how many snapshot rebuilds a slow-start window is divided into.
const rampSteps = 10

// snapshot is an immutable view of a pool: every backend in configuration order (so indexes
// stay valid across state changes) and the picker built over them. It is the picker's Load.
type snapshot struct {
	pool     *Pool
	backends []*Backend
	limit    []int64 // max_conns per index, 0 = none
	picker   balance.Picker
	tracker  balance.Tracker // picker as a Tracker, nil when it keeps no index
	panic    bool            // health is ignored: too few primaries are fit (panic threshold)
}

// InFlight implements balance.Load.
func (s *snapshot) InFlight(i int) int64 { return s.backends[i].inflight.Load() }

// Full implements balance.Load.
func (s *snapshot) Full(i int) bool {
	l := s.limit[i]
	return l > 0 && s.backends[i].inflight.Load() >= l
}

// Latency implements balance.Load.
func (s *snapshot) Latency(i int) float64 {
	return s.backends[i].latency.Value(s.pool.now().Sub(origin))
}

// indexOf finds b in the snapshot, trusting the backend's recorded index when it matches.
func (s *snapshot) indexOf(b *Backend) int {
	if i := int(b.index.Load()); i >= 0 && i < len(s.backends) && s.backends[i] == b {
		return i
	}
	for i, x := range s.backends {
		if x == b {
			return i
		}
	}
	return -1
}

// rampedWeight is w (already scaled) reduced by b's slow-start ramp at now.
func (p *Pool) rampedWeight(b *Backend, w int, now int64) int {
	from := b.rampFrom.Load()
	if from == 0 || p.slowStart <= 0 {
		return w
	}
	return balance.SlowStartWeight(w, time.Duration(now-from), p.slowStart, 1, rampMinPercent)
}

// build makes a snapshot over bs with their configurations cs at now. It changes nothing but
// returns, besides the snapshot, when the pool next needs a rebuild (a ramp step, the end of an
// ejection; 0 = never).
func (p *Pool) build(bs []*Backend, cs []*bconf, now int64) (*snapshot, int64, error) {
	s := &snapshot{pool: p, backends: bs, limit: make([]int64, len(bs))}
	desc := make([]balance.Backend, len(bs))
	ramping := false
	var next int64
	for _, b := range bs {
		if from := b.rampFrom.Load(); from != 0 && p.slowStart > 0 && now-from < int64(p.slowStart) {
			ramping = true
		}
		if u := b.ejectedUntil.Load(); u > now && (next == 0 || u < next) {
			next = u
		}
	}
	scale := 1
	if ramping {
		scale = rampScale
		step := int64(p.slowStart) / rampSteps
		if step < int64(time.Millisecond) {
			step = int64(time.Millisecond)
		}
		if next == 0 || now+step < next {
			next = now + step
		}
	}
	s.panic = p.panics(bs, cs, now)
	for i, b := range bs {
		c := cs[i]
		w := int(c.weight)
		if o := b.weightOverride.Load(); o >= 0 {
			w = int(o)
		}
		w *= scale
		if ramping {
			w = p.rampedWeight(b, w, now)
		}
		usable := b.inRotation(c) && (b.fit(now) || s.panic && !c.backup)
		desc[i] = balance.Backend{ID: b.ID, Weight: w, Backup: c.backup, Down: !usable}
		s.limit[i] = c.maxConns
	}
	o := p.opts
	o.Load = s
	pk, err := p.algo.New(desc, o)
	if err != nil {
		return nil, 0, err
	}
	s.picker = pk
	s.tracker, _ = pk.(balance.Tracker)
	return s, next, nil
}

// panics reports whether the pool is in panic (Envoy's panic threshold): health checks and
// outlier detection have left fewer than panic_threshold_percent of the primaries that the
// configuration and the operator keep in rotation fit for traffic. Then the pool balances over
// all of them as if they were healthy, since sending everything to the few survivors would
// only overload them too.
func (p *Pool) panics(bs []*Backend, cs []*bconf, now int64) bool {
	if p.panicPercent <= 0 {
		return false
	}
	inRotation, fit := 0, 0
	for i, b := range bs {
		if cs[i].backup || !b.inRotation(cs[i]) {
			continue
		}
		inRotation++
		if b.fit(now) {
			fit++
		}
	}
	return inRotation > 0 && fit*100 < p.panicPercent*inRotation
}

// Panicking reports whether the pool ignores health because too few backends are fit
// (outlier.panic_threshold_percent).
func (p *Pool) Panicking() bool { return p.snap.Load().panic }
