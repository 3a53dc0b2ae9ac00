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
	// sweepAt ends the current failure_percentage interval; zero until the first step.
	sweepAt time.Time
}

// outState is one backend's ejection history and its counters at the start of the current
// failure_percentage interval.
type outState struct {
	b                  *upstream.Backend
	lastFail, lastDone uint64
	ejections          int       // the multiplier of the next ejection, decaying
	decayFrom          time.Time // when the multiplier last moved
	refused            bool      // an EjectionRefused was reported for this streak
}

// sample is what one step saw of one backend.
type sample struct {
	st     *outState
	state  upstream.State
	streak uint64 // the longest failure streak since the previous step
	dF, dD uint64 // failed and finished requests of the interval that just ended (sweeps only)
	fresh  bool   // first seen now: no interval to judge yet
}

// newOutlier takes the first look at once, before any request can have been served by the
// pool's data planes, so that a streak reached in the first tick is evidence, not a peak "from
// before this detector ran".
func newOutlier(m *Monitor, r *poolRun) *outlier {
	o := &outlier{m: m, r: r, cfg: r.out, bs: map[string]*outState{}}
	o.step(m.opts.Now())
	return o
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

// since is the growth of a counter from last to now; 0 if it went backwards.
func since(now, last uint64) uint64 {
	if now < last {
		return 0
	}
	return now - last
}

func usableState(s upstream.State) bool {
	return s == upstream.StateUp || s == upstream.StateSlowStart
}

// step looks at every backend once: it ejects those whose failure streak reached
// consecutive_failures since the previous step and, when a failure_percentage interval ends,
// those whose share of failed requests in it reached the threshold.
func (o *outlier) step(now time.Time) {
	p := o.r.pool.Load()
	bs := p.Backends()
	fp := o.cfg.FailurePercentage
	interval := o.cfg.Interval.Duration
	sweep := false
	if fp.Threshold > 0 && interval > 0 {
		if !o.sweepAt.IsZero() && !now.Before(o.sweepAt) {
			sweep = true
		}
		if o.sweepAt.IsZero() || sweep {
			o.sweepAt = now.Add(interval)
		}
	}
	total, ejected, usable, judged := len(bs), 0, 0, 0
	samples := make([]sample, len(bs))
	seen := make(map[string]bool, len(bs))
	for i, b := range bs {
		seen[b.ID] = true
		s := &samples[i]
		s.state = b.State()
		switch {
		case s.state == upstream.StateEjected:
			ejected++
		case usableState(s.state):
			usable++
		}
		s.st = o.bs[b.ID]
		if s.fresh = s.st == nil || s.st.b != b; s.fresh {
			fails, done := counters(b)
			s.st = &outState{b: b, lastFail: fails, lastDone: done}
			o.bs[b.ID] = s.st
		}
		switch {
		case s.state == upstream.StateEjected:
			// Left alone while out: the peak stays for the look after a short hold-off (a
			// refused connection) ends.
		case s.fresh:
			b.TakeFailureStreakPeak() // a peak from before this detector ran is not evidence
			s.streak = b.FailureStreak()
		default:
			s.streak = b.TakeFailureStreakPeak()
		}
		if sweep && !s.fresh {
			fails, done := counters(b)
			s.dF, s.dD = since(fails, s.st.lastFail), since(done, s.st.lastDone)
			s.st.lastFail, s.st.lastDone = fails, done
			if usableState(s.state) && s.dD >= uint64(fp.RequestVolume) {
				judged++
			}
		}
	}
	judge := sweep && judged >= fp.MinimumHosts
	base := o.cfg.BaseEjection.Duration
	cf := uint64(max(o.cfg.ConsecutiveFailures, 0))
	for i, b := range bs {
		s := &samples[i]
		st := s.st
		if s.state == upstream.StateEjected {
			st.refused = false
			continue
		}
		if st.ejections > 0 && base > 0 && now.Sub(st.decayFrom) >= base {
			st.ejections--
			st.decayFrom = now
		}
		var why string
		switch {
		case cf > 0 && s.streak >= cf:
			why = fmt.Sprintf("%d consecutive failures", s.streak)
		case judge && s.dD >= uint64(fp.RequestVolume) && s.dF*100 >= uint64(fp.Threshold)*s.dD:
			why = fmt.Sprintf("%d of %d requests failed in %s (failure_percentage threshold %d%%)", s.dF, s.dD, interval, fp.Threshold)
		}
		if why == "" {
			if cf == 0 || b.FailureStreak() < cf {
				st.refused = false // the streak ended with a success
			}
			continue
		}
		if !usableState(s.state) {
			continue // already out of rotation for another reason
		}
		if r := o.refuse(total, ejected, usable); r != "" {
			if !st.refused {
				st.refused = true
				o.m.emit(Event{Pool: o.r.name, Backend: b.ID, Kind: EjectionRefused, Detail: why + "; " + r})
			}
			continue
		}
		n := min(st.ejections+1, maxEjectionMultiplier)
		until := now.Add(base * time.Duration(n))
		if err := p.Eject(b.ID, until); err != nil {
			continue // removed meanwhile
		}
		// Back from the ejection, the backend starts afresh: a new streak, a new interval.
		b.ResetFailureStreak()
		st.lastFail, st.lastDone = counters(b)
		st.ejections, st.decayFrom, st.refused = n, until, false
		ejected++
		usable--
		o.m.record(o.r.name, b.ID, true).ejections.Add(1)
		o.m.emit(Event{Pool: o.r.name, Backend: b.ID, Kind: Ejected, Until: until,
			Detail: fmt.Sprintf("%s; ejection #%d for %s", why, n, base*time.Duration(n))})
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
