package discovery

import (
	"errors"
	"strings"
	"testing"
	"time"

	"ballast/balance"
	"ballast/upstream"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time       { return c.t }
func (c *clock) step(d time.Duration) { c.t = c.t.Add(d) }
func spec(id string, w int) upstream.BackendSpec {
	return upstream.BackendSpec{ID: id, Address: id, Weight: w}
}

func newTestPool(t *testing.T, slowStart time.Duration, static ...upstream.BackendSpec) *upstream.Pool {
	t.Helper()
	p, err := upstream.NewPool(upstream.Spec{Name: "api", Balancer: "roundrobin", SlowStart: slowStart, Backends: static}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func newTestSyncer(p *upstream.Pool, static ...string) (*Syncer, *clock) {
	s := NewSyncer("api", "test", 10, nil)
	c := &clock{t: time.Unix(1000, 0)}
	s.now = c.now
	s.SetStatic(static)
	s.SetPool(p)
	return s, c
}

func ids(p *upstream.Pool) string {
	var out []string
	for _, b := range p.Backends() {
		out = append(out, b.ID+"="+b.State().String())
	}
	return strings.Join(out, " ")
}

// TestSyncerAddDrainRemove: a backend that leaves is drained, stays while a request is in
// flight on it, and is removed once it has none and has drained MinDrain; the request finishes.
func TestSyncerAddDrainRemove(t *testing.T) {
	p := newTestPool(t, 0, spec("10.0.0.9:80", 1))
	s, c := newTestSyncer(p, "10.0.0.9:80")
	s.Update(Answer{Backends: []upstream.BackendSpec{spec("10.0.0.1:80", 1), spec("10.0.0.2:80", 1)}})
	if got := ids(p); got != "10.0.0.9:80=up 10.0.0.1:80=up 10.0.0.2:80=up" {
		t.Fatalf("after the first answer: %s", got)
	}
	// A request in flight on .2.
	var b2 *upstream.Backend
	for range 3 {
		b, err := p.Acquire(0, balance.Tried{})
		if err != nil {
			t.Fatal(err)
		}
		if b.ID == "10.0.0.2:80" && b2 == nil {
			b2 = b
			continue
		}
		p.Release(b, time.Millisecond, false)
	}
	if b2 == nil {
		t.Fatal("round robin never picked 10.0.0.2:80")
	}
	s.Update(Answer{Backends: []upstream.BackendSpec{spec("10.0.0.1:80", 1)}})
	if got := ids(p); got != "10.0.0.9:80=up 10.0.0.1:80=up 10.0.0.2:80=draining" {
		t.Fatalf("after .2 left: %s", got)
	}
	for range 4 { // no new request reaches the draining backend
		b, err := p.Acquire(0, balance.Tried{})
		if err != nil || b.ID == "10.0.0.2:80" {
			t.Fatalf("acquire while .2 drains: %v %v", b, err)
		}
		p.Release(b, time.Millisecond, false)
	}
	c.step(2 * MinDrain)
	s.mu.Lock()
	s.sweepLocked(c.now())
	s.mu.Unlock()
	if p.Backend("10.0.0.2:80") == nil {
		t.Fatal("removed while a request was in flight on it")
	}
	p.Release(b2, time.Millisecond, false)
	s.mu.Lock()
	s.sweepLocked(c.now())
	s.mu.Unlock()
	if got := ids(p); got != "10.0.0.9:80=up 10.0.0.1:80=up" {
		t.Fatalf("after the drain: %s", got)
	}
	st := s.Status()
	if st.Added != 2 || st.Drained != 1 || st.Removed != 1 || st.Changes != 2 || st.Draining != 0 || st.Backends != 1 {
		t.Errorf("status %+v", st)
	}
}

// TestSyncerDrainNotBeforeMinDrain: an idle backend that left still drains MinDrain.
func TestSyncerDrainNotBeforeMinDrain(t *testing.T) {
	p := newTestPool(t, 0)
	s, c := newTestSyncer(p)
	s.Update(Answer{Backends: []upstream.BackendSpec{spec("a:1", 1), spec("b:1", 1)}})
	s.Update(Answer{Backends: []upstream.BackendSpec{spec("a:1", 1)}})
	c.step(MinDrain / 2)
	s.mu.Lock()
	s.sweepLocked(c.now())
	s.mu.Unlock()
	if p.Backend("b:1") == nil {
		t.Fatal("removed before MinDrain")
	}
	c.step(MinDrain)
	s.mu.Lock()
	s.sweepLocked(c.now())
	s.mu.Unlock()
	if p.Backend("b:1") != nil {
		t.Fatal("not removed after MinDrain")
	}
}

// TestSyncerReturnDuringDrain: a backend back in the answer while it drains is enabled again
// and ramps through slow start.
func TestSyncerReturnDuringDrain(t *testing.T) {
	p := newTestPool(t, 10*time.Second)
	s, _ := newTestSyncer(p)
	s.Update(Answer{Backends: []upstream.BackendSpec{spec("a:1", 1), spec("b:1", 1)}})
	if st := p.Backend("b:1").State(); st != upstream.StateSlowStart {
		t.Errorf("a backend that appears is %s, want slow-start", st)
	}
	s.Update(Answer{Backends: []upstream.BackendSpec{spec("a:1", 1)}})
	old := p.Backend("b:1")
	s.Update(Answer{Backends: []upstream.BackendSpec{spec("a:1", 1), spec("b:1", 1)}})
	b := p.Backend("b:1")
	if b != old || b.State() != upstream.StateSlowStart {
		t.Errorf("returned backend: same object %v, state %s (want the same, slow-start)", b == old, b.State())
	}
	if st := s.Status(); st.Returned != 1 || st.Draining != 0 || st.Added != 2 {
		t.Errorf("status %+v", st)
	}
}

// TestSyncerKeepsLastGoodSet: a failed or empty answer changes nothing and marks the set
// stale since the first failure; a good answer clears it.
func TestSyncerKeepsLastGoodSet(t *testing.T) {
	p := newTestPool(t, 0)
	s, c := newTestSyncer(p)
	s.Update(Answer{Backends: []upstream.BackendSpec{spec("a:1", 1)}})
	c.step(time.Second)
	failedAt := c.now()
	s.Fail(errors.New("resolver 127.0.0.1:53: i/o timeout"))
	c.step(time.Second)
	s.Update(Answer{})
	if got := ids(p); got != "a:1=up" {
		t.Errorf("after failures: %s", got)
	}
	st := s.Status()
	if !st.Stale || !st.StaleSince.Equal(failedAt) || st.LastError != ErrEmpty.Error() || st.Failures != 2 || st.Backends != 1 {
		t.Errorf("status %+v, want stale since %v", st, failedAt)
	}
	s.Update(Answer{Backends: []upstream.BackendSpec{spec("a:1", 1)}})
	if st := s.Status(); st.Stale || !st.StaleSince.IsZero() || st.LastError != "" {
		t.Errorf("after a good answer: %+v", st)
	}
}

// TestSyncerBounds: a set over max_backends is refused whole; truncation is counted.
func TestSyncerBounds(t *testing.T) {
	p := newTestPool(t, 0)
	s, _ := newTestSyncer(p)
	s.Update(Answer{Backends: []upstream.BackendSpec{spec("a:1", 1)}, Truncated: 3})
	var big []upstream.BackendSpec
	for i := range 11 {
		big = append(big, spec("b:"+string(rune('a'+i)), 1))
	}
	s.Update(Answer{Backends: big})
	if got := ids(p); got != "a:1=up" {
		t.Errorf("after an oversized set: %s", got)
	}
	if st := s.Status(); st.Refused != 1 || st.Truncated != 3 || !st.Stale || !strings.Contains(st.LastError, "at most 10") {
		t.Errorf("status %+v", st)
	}
}

// TestSyncerLeavesOthersAlone: configured backends and runtime additions are never drained or
// changed; a discovered ID that a configured one shadows counts as a conflict.
func TestSyncerLeavesOthersAlone(t *testing.T) {
	p := newTestPool(t, 0, spec("s:1", 1))
	s, _ := newTestSyncer(p, "s:1")
	if _, err := p.Add(spec("api:1", 1)); err != nil {
		t.Fatal(err)
	}
	s.Update(Answer{Backends: []upstream.BackendSpec{spec("s:1", 5), spec("api:1", 7), spec("d:1", 1)}})
	s.Update(Answer{Backends: []upstream.BackendSpec{spec("d:1", 1)}})
	if got := ids(p); got != "s:1=up api:1=up d:1=up" {
		t.Errorf("pool %s", got)
	}
	if w := p.Backend("s:1").Weight(); w != 1 {
		t.Errorf("configured backend's weight changed to %d", w)
	}
	if st := s.Status(); st.Conflicts < 2 {
		t.Errorf("conflicts %d, want at least 2", st.Conflicts)
	}
}

// TestSyncerChanges: a new weight is an override; a new backup flag replaces the backend.
func TestSyncerChanges(t *testing.T) {
	p := newTestPool(t, 0)
	s, _ := newTestSyncer(p)
	s.Update(Answer{Backends: []upstream.BackendSpec{spec("a:1", 1), spec("b:1", 1)}})
	s.Update(Answer{Backends: []upstream.BackendSpec{spec("a:1", 5), {ID: "b:1", Address: "b:1", Weight: 1, Backup: true}}})
	a, b := p.Backend("a:1"), p.Backend("b:1")
	if a.Weight() != 5 || !b.Backup() {
		t.Errorf("a weight %d, b backup %v", a.Weight(), b.Backup())
	}
	s.Update(Answer{Backends: []upstream.BackendSpec{spec("a:1", 1), {ID: "b:1", Address: "b:1", Weight: 1, Backup: true}}})
	if a.Weight() != 1 || a.WeightOverridden() {
		t.Errorf("back to the first weight: %d, overridden %v", a.Weight(), a.WeightOverridden())
	}
}

// TestSyncerExtendKeepsBackends: a reload built with Extend keeps the discovered backends'
// objects and their drain; SetPool moves the Syncer to the new pool.
func TestSyncerExtendKeepsBackends(t *testing.T) {
	old := newTestPool(t, 0, spec("s:1", 1))
	s, _ := newTestSyncer(old, "s:1")
	s.Update(Answer{Backends: []upstream.BackendSpec{spec("a:1", 1), spec("b:1", 1)}})
	s.Update(Answer{Backends: []upstream.BackendSpec{spec("a:1", 1)}})
	a, b := old.Backend("a:1"), old.Backend("b:1")
	np, err := upstream.NewPool(upstream.Spec{Name: "api", Balancer: "roundrobin", Backends: s.Extend([]upstream.BackendSpec{spec("s:1", 1)})}, old)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(np.Close)
	s.SetPool(np)
	old.Close()
	if np.Backend("a:1") != a || np.Backend("b:1") != b || b.State() != upstream.StateDraining {
		t.Errorf("reload: %s (same objects: %v %v)", ids(np), np.Backend("a:1") == a, np.Backend("b:1") == b)
	}
	s.Update(Answer{Backends: []upstream.BackendSpec{spec("a:1", 1), spec("b:1", 1)}})
	if b.State() != upstream.StateUp {
		t.Errorf("after the reload, the returned backend is %s", b.State())
	}
}

// TestSyncerFirstAnswerBeforePool: the first answer arrives before the pool exists (a start);
// the pool built with Extend lists those backends, and they are the Syncer's to drain later.
func TestSyncerFirstAnswerBeforePool(t *testing.T) {
	s := NewSyncer("api", "test", 10, nil)
	s.Update(Answer{Backends: []upstream.BackendSpec{spec("a:1", 1), spec("b:1", 1)}})
	p, err := upstream.NewPool(upstream.Spec{Name: "api", Balancer: "roundrobin", Backends: s.Extend(nil)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	s.SetPool(p)
	s.Update(Answer{Backends: []upstream.BackendSpec{spec("a:1", 1)}})
	if got := ids(p); got != "a:1=up b:1=draining" {
		t.Errorf("pool %s", got)
	}
	if st := s.Status(); st.Conflicts != 0 {
		t.Errorf("%d conflicts", st.Conflicts)
	}
}
