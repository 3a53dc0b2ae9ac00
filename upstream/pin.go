package upstream

import "time"

// AcquireBackend reserves a slot on the backend with the given ID if it can take the request
// now: in rotation or draining (see below), fit (or the pool in panic), not a backup, and
// below its max_conns. Sticky sessions (cookies) and L4 persistence use it to keep a client on
// its backend; on nil the caller balances as usual. Like Acquire, a non-nil result must be
// Released exactly once. It does not queue: a pinned request whose backend is full is
// balanced instead.
//
// A draining backend takes no new clients but keeps its pinned ones (HAProxy's DRAIN) until
// they stop coming or the drain's grace ends (DrainFor); a disabled backend moves them at once.
func (p *Pool) AcquireBackend(id string) *Backend {
	s := p.snap.Load()
	for i, b := range s.backends {
		if b.ID != id {
			continue
		}
		c := b.conf.Load()
		now := p.now().UnixNano()
		if c.backup || !b.takesPinned(c, now) || !(s.panic || b.fit(now)) {
			return nil
		}
		if !b.reserve(s.limit[i]) {
			return nil
		}
		b.requests.Add(1)
		if s.tracker != nil {
			s.tracker.Update(i, b.inflight.Load())
		}
		if cur := p.snap.Load(); cur != s {
			cur.track(b)
		}
		return b
	}
	return nil
}

// takesPinned reports whether b may take a pinned request at now: in rotation, or draining
// within its grace (and neither disabled nor configured down).
func (b *Backend) takesPinned(c *bconf, now int64) bool {
	if b.draining.Load() && !b.disabled.Load() && !c.down {
		u := b.drainUntil.Load()
		return u == 0 || now < u
	}
	return b.inRotation(c)
}

// DrainFor is Drain with a grace: after grace (> 0) the backend's pinned requests move too,
// as if it were disabled; Drain keeps them as long as they come. Enable undoes it.
func (p *Pool) DrainFor(id string, grace time.Duration) error {
	var until int64
	if grace > 0 {
		until = p.now().Add(grace).UnixNano()
	}
	return p.change(id, func(b *Backend) {
		b.drainUntil.Store(until)
		b.draining.Store(true)
	})
}

// DrainUntil is when the backend's drain grace ends (zero: none, or not draining).
func (b *Backend) DrainUntil() time.Time {
	if u := b.drainUntil.Load(); u != 0 && b.draining.Load() {
		return time.Unix(0, u)
	}
	return time.Time{}
}
