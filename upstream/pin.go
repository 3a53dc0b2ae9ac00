package upstream

// AcquireBackend reserves a slot on the backend with the given ID if it can take the request
// now: in rotation, fit (or the pool in panic), not a backup, and below its max_conns. Sticky
// sessions use it to keep a client on its backend; on nil the caller balances as usual. Like
// Acquire, a non-nil result must be Released exactly once. It does not queue: a pinned
// request whose backend is full is balanced instead.
func (p *Pool) AcquireBackend(id string) *Backend {
	s := p.snap.Load()
	for i, b := range s.backends {
		if b.ID != id {
			continue
		}
		c := b.conf.Load()
		if c.backup || !b.inRotation(c) || !(s.panic || b.fit(p.now().UnixNano())) {
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
