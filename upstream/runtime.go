package upstream

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// ErrUnknownBackend is returned by runtime changes naming an ID the pool does not have.
var ErrUnknownBackend = errors.New("unknown backend")

// ErrDuplicateBackend is returned by Add for an ID the pool already has.
var ErrDuplicateBackend = errors.New("backend already in the pool")

// SetWeight overrides the backend's configured weight until ResetWeight or a removal; 0 stops
// new traffic. The override survives reloads.
func (p *Pool) SetWeight(id string, w int) error {
	if w < 0 {
		return fmt.Errorf("pool %q: backend %q: negative weight %d", p.Name, id, w)
	}
	return p.change(id, func(b *Backend) { b.weightOverride.Store(int64(w)) })
}

// ResetWeight drops a SetWeight override: the configured weight applies again.
func (p *Pool) ResetWeight(id string) error {
	return p.change(id, func(b *Backend) { b.weightOverride.Store(-1) })
}

// Drain stops new requests to the backend; the ones in flight finish, and requests pinned to
// it (sticky cookies, L4 persistence: AcquireBackend) keep coming as long as their clients
// come back. Enable undoes it; DrainFor bounds it.
func (p *Pool) Drain(id string) error { return p.DrainFor(id, 0) }

// Disable takes the backend out of rotation (maintenance). Enable undoes it.
func (p *Pool) Disable(id string) error {
	return p.change(id, func(b *Backend) { b.disabled.Store(true) })
}

// Enable undoes Disable and Drain; the backend comes back through slow start.
func (p *Pool) Enable(id string) error {
	return p.change(id, func(b *Backend) {
		b.disabled.Store(false)
		b.draining.Store(false)
		b.drainUntil.Store(0)
	})
}

// SetHealthy records the active health check's verdict. A backend that comes back up ramps
// through slow start.
func (p *Pool) SetHealthy(id string, healthy bool) error {
	return p.change(id, func(b *Backend) { b.healthDown.Store(!healthy) })
}

// Eject takes the backend out until the given time (outlier detection); the zero time ends an
// ejection at once. The pool rebuilds itself when the ejection ends, and the backend ramps
// through slow start from then.
func (p *Pool) Eject(id string, until time.Time) error {
	var u int64
	if !until.IsZero() {
		u = until.UnixNano()
	}
	return p.change(id, func(b *Backend) { b.ejectedUntil.Store(u) })
}

// change applies f to one backend under the writer lock, starts its slow-start ramp if that
// made it usable, and publishes a new snapshot.
func (p *Pool) change(id string, f func(*Backend)) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	b := p.findLocked(id)
	if b == nil {
		return fmt.Errorf("pool %q: %w %q", p.Name, ErrUnknownBackend, id)
	}
	now := p.now().UnixNano()
	c := b.conf.Load()
	before := b.usable(c, now)
	f(b)
	if p.slowStart > 0 && !before && b.usable(c, now) {
		b.rampFrom.Store(now)
	}
	return p.rebuildLocked()
}

// Add puts a new backend at the end of the pool; it ramps through slow start. The planes'
// attachments (Attach) are made before it can be picked.
func (p *Pool) Add(bc BackendSpec) (*Backend, error) {
	id := bc.ID
	if id == "" {
		return nil, fmt.Errorf("pool %q: backend %q has no ID", p.Name, bc.Address)
	}
	if bc.Weight < 0 {
		return nil, fmt.Errorf("pool %q: backend %q has negative weight %d", p.Name, id, bc.Weight)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.findLocked(id) != nil {
		return nil, fmt.Errorf("pool %q: %w: %q", p.Name, ErrDuplicateBackend, id)
	}
	var poolMax int
	if p.maxConnsDefault > 0 {
		poolMax = int(p.maxConnsDefault)
	}
	b := newBackend(id, bc.Address, confFor(bc, poolMax))
	for s, f := range p.attach {
		b.setAttachment(s, f(b))
	}
	if p.slowStart > 0 {
		b.rampFrom.Store(p.now().UnixNano())
	}
	b.owner.Store(p)
	old := p.backends
	p.backends = append(slices.Clip(old), b)
	if err := p.rebuildLocked(); err != nil {
		p.backends = old
		b.owner.Store(nil)
		return nil, err
	}
	return b, nil
}

// Remove takes the backend out of the pool. Requests in flight on it finish and are released
// normally.
func (p *Pool) Remove(id string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	i := slices.IndexFunc(p.backends, func(b *Backend) bool { return b.ID == id })
	if i < 0 {
		return fmt.Errorf("pool %q: %w %q", p.Name, ErrUnknownBackend, id)
	}
	old := p.backends
	b := old[i]
	p.backends = slices.Delete(slices.Clone(old), i, i+1)
	if err := p.rebuildLocked(); err != nil {
		p.backends = old
		return err
	}
	b.index.Store(-1)
	return nil
}

// Override lists what the runtime API changed on one backend, for the API to report.
type Override struct {
	ID       string `json:"id"`
	Weight   *int   `json:"weight,omitempty"`
	Disabled bool   `json:"disabled,omitempty"`
	Draining bool   `json:"draining,omitempty"`
}

// Overrides returns the backends with runtime overrides, in configuration order.
func (p *Pool) Overrides() []Override {
	var out []Override
	for _, b := range p.Backends() {
		o := Override{ID: b.ID, Disabled: b.disabled.Load(), Draining: b.draining.Load()}
		if w := b.weightOverride.Load(); w >= 0 {
			wi := int(w)
			o.Weight = &wi
		}
		if o.Weight != nil || o.Disabled || o.Draining {
			out = append(out, o)
		}
	}
	return out
}

func (p *Pool) findLocked(id string) *Backend {
	for _, b := range p.backends {
		if b.ID == id {
			return b
		}
	}
	return nil
}

// rebuildLocked ends expired ejections and finished ramps, builds and publishes a new
// snapshot, re-arms the timer and dispatches waiters (capacity may have grown, or vanished).
func (p *Pool) rebuildLocked() error {
	now := p.now().UnixNano()
	cs := make([]*bconf, len(p.backends))
	for i, b := range p.backends {
		c := b.conf.Load()
		cs[i] = c
		if u := b.ejectedUntil.Load(); u != 0 && now >= u {
			b.ejectedUntil.Store(0)
			if p.slowStart > 0 && b.usable(c, now) {
				b.rampFrom.Store(u)
			}
		}
		if f := b.rampFrom.Load(); f != 0 && now-f >= int64(p.slowStart) {
			b.rampFrom.Store(0)
		}
	}
	s, next, err := p.build(p.backends, cs, now)
	if err != nil {
		return fmt.Errorf("pool %q: %w", p.Name, err)
	}
	p.snap.Store(s)
	for i, b := range p.backends {
		if b.owner.Load() == p {
			b.index.Store(int32(i))
		}
	}
	p.scheduleLocked(next, now)
	p.kick()
	for _, f := range p.subs {
		f(p)
	}
	return nil
}

// scheduleLocked arms the pool's single timer for the next slow-start step or ejection end, or
// stops it when nothing is pending: an idle pool runs no timer.
func (p *Pool) scheduleLocked(next, now int64) {
	if p.closed || next == 0 {
		if p.timer != nil {
			p.timer.Stop()
		}
		p.armed = false
		return
	}
	p.armed = true
	d := max(time.Duration(next-now), time.Millisecond)
	if p.timer == nil {
		p.timer = time.AfterFunc(d, p.tick)
	} else {
		p.timer.Reset(d)
	}
}

func (p *Pool) tick() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.closed {
		_ = p.rebuildLocked() // the same backends built before; only weights and states moved
	}
}

// UnreachableHoldoff is how long a backend that a data plane could not reach (connection
// refused or timed out) stays out of rotation: lighttpd's disable-time (1 s), the same idea as
// nginx's max_fails=1 fail_timeout. The requests or connections behind the failed one then go
// elsewhere at once instead of failing or spending the retry budget.
const UnreachableHoldoff = time.Second

// Unreachable takes b out of rotation for UnreachableHoldoff; it never shortens a longer
// ejection (outlier detection's). Every data plane calls it on a failed connect.
func (p *Pool) Unreachable(b *Backend) {
	now := p.now()
	if b.EjectedUntil().After(now) {
		return
	}
	_ = p.Eject(b.ID, now.Add(UnreachableHoldoff)) // fails only if b was removed meanwhile
}
