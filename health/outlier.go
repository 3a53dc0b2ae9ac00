package health

import (
	"context"
	"fmt"
	"time"

	"ballast/config"
	"ballast/upstream"
)

// maxEjectionMultiplier caps base_ejection × n (Envoy caps the ejection time the same way).
const maxEjectionMultiplier = 10

// outlier is one pool's passive checker; its state is owned by its run goroutine.
type outlier struct {
	m   *Monitor
	r   *poolRun
	cfg config.Outlier
	bs  map[string]*outState
}

// outState is one backend's failure streak and ejection history.
type outState struct {
	b                  *upstream.Backend
	lastFail, lastDone uint64
	streak             uint64
	ejections          int       // the multiplier of the next ejection, decaying
	decayFrom          time.Time // when the multiplier last moved
	refused            bool      // an EjectionRefused was reported for this streak
}

func newOutlier(m *Monitor, r *poolRun) *outlier {
	return &outlier{m: m, r: r, cfg: r.out, bs: map[string]*outState{}}
}

func (o *outlier) run(ctx context.Context) {
	t := time.NewTicker(o.m.opts.OutlierTick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			o.step(o.m.opts.Now())
		}
	}
}

// counters reads a backend's failed and finished request counts. Requests counts at
// dispatch, so finished is dispatched minus in flight (sampled, so approximate by the requests
// released between the two loads).
func counters(b *upstream.Backend) (failed, done uint64) {
	failed = b.Failures()
	req := b.Requests()
	inf := b.InFlight()
	if inf < 0 || uint64(inf) > req {
		return failed, 0
	}
	return failed, req - uint64(inf)
}

func usableState(s upstream.State) bool {
	return s == upstream.StateUp || s == upstream.StateSlowStart
}

// step samples every backend once and ejects those whose streak reached the threshold.
func (o *outlier) step(now time.Time) {
	p := o.r.pool.Load()
	bs := p.Backends()
	total, ejected, usable := len(bs), 0, 0
	states := make([]upstream.State, len(bs))
	seen := make(map[string]bool, len(bs))
	for i, b := range bs {
		states[i] = b.State()
		switch {
		case states[i] == upstream.StateEjected:
			ejected++
		case usableState(states[i]):
			usable++
		}
	}
	base := o.cfg.BaseEjection.Duration
	for i, b := range bs {
		seen[b.ID] = true
		fails, done := counters(b)
		st := o.bs[b.ID]
		if st == nil || st.b != b {
			o.bs[b.ID] = &outState{b: b, lastFail: fails, lastDone: done}
			continue
		}
		dF, dD := fails-st.lastFail, uint64(0)
		if fails < st.lastFail {
			dF = 0
		}
		if done > st.lastDone {
			dD = done - st.lastDone
		}
		st.lastFail, st.lastDone = fails, done
		if states[i] == upstream.StateEjected {
			st.streak, st.refused = 0, false
			continue
		}
		if st.ejections > 0 && base > 0 && now.Sub(st.decayFrom) >= base {
			st.ejections--
			st.decayFrom = now
		}
		if dD > dF { // at least one success in this sample ends the streak
			st.streak, st.refused = 0, false
			continue
		}
		st.streak += dF
		if st.streak < uint64(o.cfg.ConsecutiveFailures) {
			continue
		}
		if !usableState(states[i]) {
			st.streak = 0 // already out of rotation for another reason
			continue
		}
		if why := o.refuse(total, ejected, usable); why != "" {
			if !st.refused {
				st.refused = true
				o.m.emit(Event{Pool: o.r.name, Backend: b.ID, Kind: EjectionRefused, Detail: why})
			}
			continue
		}
		n := min(st.ejections+1, maxEjectionMultiplier)
		until := now.Add(base * time.Duration(n))
		if err := p.Eject(b.ID, until); err != nil {
			continue // removed meanwhile
		}
		st.ejections, st.decayFrom, st.streak, st.refused = n, until, 0, false
		ejected++
		usable--
		o.m.record(o.r.name, b.ID, true).ejections.Add(1)
		o.m.emit(Event{Pool: o.r.name, Backend: b.ID, Kind: Ejected, Until: until,
			Detail: fmt.Sprintf("%d consecutive failures; ejection #%d for %s", o.cfg.ConsecutiveFailures, n, base*time.Duration(n))})
	}
	for id := range o.bs {
		if !seen[id] {
			delete(o.bs, id)
		}
	}
}

// refuse says why one more ejection is not allowed, or "" when it is.
func (o *outlier) refuse(total, ejected, usable int) string {
	allowed := total * o.cfg.MaxEjectionPercent / 100
	if o.cfg.MaxEjectionPercent > 0 && allowed < 1 {
		allowed = 1
	}
	if ejected+1 > allowed {
		return fmt.Sprintf("max_ejection_percent %d%%: %d of %d already ejected", o.cfg.MaxEjectionPercent, ejected, total)
	}
	if pt := o.cfg.PanicThreshold; pt > 0 && (usable-1)*100 < pt*total {
		return fmt.Sprintf("panic threshold %d%%: only %d of %d backends would stay usable", pt, usable-1, total)
	}
	return ""
}
