package discovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"ballast/upstream"
)

// MinDrain is the shortest time a backend that left its source drains before it is removed,
// even with nothing in flight: time for the planes that keep no in-flight count (the XDP
// director's flows) to see it at weight 0.
const MinDrain = time.Second

// sweepEvery is how often draining backends are checked for removal.
const sweepEvery = 100 * time.Millisecond

// ErrEmpty is a source's answer with no backends: the last good set stays.
var ErrEmpty = errors.New("no backends in the answer")

// Answer is one set of backends from a source.
type Answer struct {
	Backends []upstream.BackendSpec
	// Next is when to ask again (pull sources); 0 lets the source's poller decide.
	Next time.Duration
	// Unchanged says the source has nothing new since its last answer (a file not modified).
	Unchanged bool
	// Truncated counts the records cut to keep the set within max_backends.
	Truncated int
}

// Status is what a Syncer shows the status page, the API and the metrics.
type Status struct {
	Pool   string `json:"pool"`
	Source string `json:"source"`
	// Backends is the size of the last good set.
	Backends int `json:"backends"`
	// Updated is when the last good set arrived; zero before the first.
	Updated time.Time `json:"updated,omitzero"`
	// Stale: the last answers failed or were empty, and the last good set is kept since StaleSince.
	Stale      bool      `json:"stale"`
	StaleSince time.Time `json:"stale_since,omitzero"`
	LastError  string    `json:"last_error,omitempty"`
	Draining   int       `json:"draining"`
	// Counters since start.
	Answers   uint64 `json:"answers"`   // good answers
	Failures  uint64 `json:"failures"`  // failed, empty or refused answers
	Changes   uint64 `json:"changes"`   // answers that changed the pool
	Added     uint64 `json:"added"`     // backends added
	Drained   uint64 `json:"drained"`   // backends drained because they left
	Removed   uint64 `json:"removed"`   // drained backends removed
	Returned  uint64 `json:"returned"`  // backends back during their drain
	Truncated uint64 `json:"truncated"` // records cut by max_backends
	Refused   uint64 `json:"refused"`   // sets refused as larger than max_backends
	Conflicts uint64 `json:"conflicts"` // discovered backends that a configured one shadows
}

// Syncer applies one pool's discovered sets to the pool in force.
type Syncer struct {
	pool   string
	source string
	max    int
	log    *slog.Logger
	now    func() time.Time

	mu     sync.Mutex
	cur    *upstream.Pool
	static map[string]bool                 // configured IDs: never touched
	want   []upstream.BackendSpec          // the last good set, in answer order
	owned  map[string]upstream.BackendSpec // what this Syncer put in the pool, as applied
	leave  map[string]time.Time            // owned backends draining since
	st     Status
	kick   chan struct{}
}

// NewSyncer makes the Syncer of one pool; source describes where its sets come from and max
// bounds a set (max_backends).
func NewSyncer(pool, source string, max int, logger *slog.Logger) *Syncer {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Syncer{
		pool: pool, source: source, max: max, log: logger, now: time.Now,
		owned: map[string]upstream.BackendSpec{}, leave: map[string]time.Time{},
		st: Status{Pool: pool, Source: source}, kick: make(chan struct{}, 1),
	}
}

// Source describes the Syncer's source.
func (s *Syncer) Source() string { return s.source }

// SetStatic names the IDs the configuration lists; they are never added, drained or removed.
func (s *Syncer) SetStatic(ids []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.static = map[string]bool{}
	for _, id := range ids {
		s.static[id] = true
	}
}

// Extend appends the discovered backends, and the ones still draining, to a pool's configured
// backends, for a start or a reload to build the new pool with (configured IDs win); the
// appended ones are the Syncer's to drain and remove later.
func (s *Syncer) Extend(static []upstream.BackendSpec) []upstream.BackendSpec {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := slices.Clone(static)
	seen := map[string]bool{}
	for _, b := range static {
		seen[b.ID] = true
	}
	for _, b := range s.want {
		if !seen[b.ID] {
			seen[b.ID] = true
			out = append(out, b)
			s.owned[b.ID] = b // the new pool lists it because this Syncer wants it
		}
	}
	for id := range s.leave {
		if b, ok := s.owned[id]; ok && !seen[id] {
			seen[id] = true
			out = append(out, b)
		}
	}
	return out
}

// SetPool makes p the pool the sets apply to (at start and after every reload) and applies
// the last good set to it at once.
func (s *Syncer) SetPool(p *upstream.Pool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cur = p
	// Backends a reload dropped (built without Extend) are no longer ours to remove.
	for id := range s.owned {
		if p.Backend(id) == nil && !slices.ContainsFunc(s.want, func(b upstream.BackendSpec) bool { return b.ID == id }) {
			delete(s.owned, id)
			delete(s.leave, id)
		}
	}
	s.applyLocked()
}

// Update applies a source's answer: a good one becomes the set, an empty one keeps the last.
func (s *Syncer) Update(a Answer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a.Unchanged {
		return
	}
	s.st.Truncated += uint64(a.Truncated)
	switch {
	case len(a.Backends) == 0:
		s.failLocked(ErrEmpty)
		return
	case len(a.Backends) > s.max:
		s.st.Refused++
		s.failLocked(fmt.Errorf("%d backends; at most %d (max_backends)", len(a.Backends), s.max))
		return
	}
	seen := make(map[string]bool, len(a.Backends))
	want := make([]upstream.BackendSpec, 0, len(a.Backends))
	for _, b := range a.Backends {
		if b.ID == "" {
			b.ID = b.Address
		}
		if !seen[b.ID] {
			seen[b.ID] = true
			want = append(want, b)
		}
	}
	if s.st.Stale {
		s.log.Info("discovery: a good answer again", "pool", s.pool, "source", s.source, "stale_since", s.st.StaleSince, "backends", len(want))
	}
	s.want = want
	s.st.Answers++
	s.st.Backends = len(want)
	s.st.Updated = s.now()
	s.st.Stale, s.st.StaleSince, s.st.LastError = false, time.Time{}, ""
	s.applyLocked()
}

// Fail records a failed answer: the last good set stays, and the status says since when.
func (s *Syncer) Fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failLocked(err)
}

func (s *Syncer) failLocked(err error) {
	s.st.Failures++
	if !s.st.Stale {
		s.st.Stale, s.st.StaleSince = true, s.now()
		s.log.Warn("discovery: answer failed; keeping the last good set", "pool", s.pool, "source", s.source, "error", err, "backends", len(s.want))
	}
	s.st.LastError = err.Error()
}

// Status returns the Syncer's state and counters.
func (s *Syncer) Status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.st
	st.Draining = len(s.leave)
	return st
}

// applyLocked makes the pool in force hold the wanted set (see the package documentation).
func (s *Syncer) applyLocked() {
	p := s.cur
	if p == nil {
		return
	}
	changed := false
	wanted := make(map[string]bool, len(s.want))
	for _, b := range s.want {
		wanted[b.ID] = true
		if s.static[b.ID] {
			if _, ours := s.owned[b.ID]; !ours {
				s.st.Conflicts++
				continue
			}
		}
		if s.applyOne(p, b) {
			changed = true
		}
	}
	now := s.now()
	for id := range s.owned {
		if wanted[id] {
			continue
		}
		if _, draining := s.leave[id]; draining {
			continue
		}
		if err := p.Drain(id); err != nil {
			delete(s.owned, id) // gone already (removed through the API)
			continue
		}
		s.leave[id] = now
		s.st.Drained++
		changed = true
	}
	if changed {
		s.st.Changes++
		s.poke()
	}
	s.sweepLocked(now)
}

// applyOne brings one wanted backend into the pool; it reports whether the pool changed.
func (s *Syncer) applyOne(p *upstream.Pool, b upstream.BackendSpec) bool {
	cur := p.Backend(b.ID)
	prev, ours := s.owned[b.ID]
	if cur != nil && !ours {
		s.st.Conflicts++ // added by the runtime API, or configured: not ours to change
		return false
	}
	if cur != nil && (cur.Address != b.Address || cur.Backup() != b.Backup || prev.MaxConns != b.MaxConns) {
		// What the runtime changes cannot alter: replace it (in-flight requests finish on the old one).
		if err := p.Remove(b.ID); err != nil {
			s.log.Error("discovery: replacing a backend", "pool", s.pool, "backend", b.ID, "error", err)
			return false
		}
		delete(s.leave, b.ID)
		cur = nil
	}
	if cur == nil {
		if _, err := p.Add(b); err != nil {
			s.log.Error("discovery: adding a backend", "pool", s.pool, "backend", b.ID, "error", err)
			return false
		}
		s.owned[b.ID] = b
		delete(s.leave, b.ID)
		s.st.Added++
		return true
	}
	changed := false
	if _, draining := s.leave[b.ID]; draining {
		if err := p.Enable(b.ID); err == nil {
			delete(s.leave, b.ID)
			s.st.Returned++
			changed = true
		}
	}
	if b.Weight != prev.Weight {
		var err error
		if b.Weight == cur.ConfigWeight() {
			err = p.ResetWeight(b.ID)
		} else {
			err = p.SetWeight(b.ID, b.Weight)
		}
		if err == nil {
			changed = true
		}
	}
	s.owned[b.ID] = b
	return changed
}

// sweepLocked removes drained backends with nothing in flight that have drained MinDrain.
func (s *Syncer) sweepLocked(now time.Time) {
	p := s.cur
	if p == nil {
		return
	}
	for id, since := range s.leave {
		b := p.Backend(id)
		if b == nil {
			delete(s.leave, id)
			delete(s.owned, id)
			continue
		}
		if b.InFlight() > 0 || now.Sub(since) < MinDrain {
			continue
		}
		if err := p.Remove(id); err == nil {
			s.st.Removed++
		}
		delete(s.leave, id)
		delete(s.owned, id)
	}
}

func (s *Syncer) poke() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// Run sweeps draining backends until ctx ends: one goroutine per Syncer, idle (no timer)
// while nothing drains.
func (s *Syncer) Run(ctx context.Context) {
	t := time.NewTicker(sweepEvery)
	t.Stop()
	defer t.Stop()
	for {
		s.mu.Lock()
		draining := len(s.leave) > 0
		s.mu.Unlock()
		if draining {
			t.Reset(sweepEvery)
		} else {
			t.Stop()
		}
		select {
		case <-ctx.Done():
			return
		case <-s.kick:
		case <-t.C:
			s.mu.Lock()
			s.sweepLocked(s.now())
			s.mu.Unlock()
		}
	}
}

// Puller is a source that is asked for its set (DNS, a file); push sources (the fleet) call
// Update themselves.
type Puller interface {
	// Fetch returns the source's current set. Answer.Next says when to ask again.
	Fetch(ctx context.Context) (Answer, error)
	// Retry is the wait after a failed Fetch.
	Retry() time.Duration
}

// Poll asks src for its set now and again at each Answer.Next (Retry after a failure), and
// applies the answers, until ctx ends.
func (s *Syncer) Poll(ctx context.Context, src Puller) {
	for {
		next := s.PollOnce(ctx, src)
		select {
		case <-ctx.Done():
			return
		case <-time.After(next):
		}
	}
}

// PollOnce asks src once and applies the answer; it returns the wait until the next ask.
func (s *Syncer) PollOnce(ctx context.Context, src Puller) time.Duration {
	a, err := src.Fetch(ctx)
	if ctx.Err() != nil {
		return 0
	}
	if err != nil {
		s.Fail(err)
		return src.Retry()
	}
	s.Update(a)
	if a.Next <= 0 {
		return src.Retry()
	}
	return a.Next
}
