package upstream

import (
	"sync"
	"testing"
	"time"

	"ballast/balance"
)

// fakeClock is a settable clock, safe for concurrent reads.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Unix(1_800_000_000, 0)} }

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// fakeTimers hands out queue_timeout timers that fire only when the test says so.
type fakeTimers struct {
	mu sync.Mutex
	cs []chan time.Time
}

func (f *fakeTimers) newTimer(time.Duration) (<-chan time.Time, func() bool) {
	c := make(chan time.Time, 1)
	f.mu.Lock()
	f.cs = append(f.cs, c)
	f.mu.Unlock()
	return c, func() bool { return true }
}

// fire fires the k-th timer handed out.
func (f *fakeTimers) fire(t *testing.T, k int) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if k >= len(f.cs) {
		t.Fatalf("timer %d was never started (%d started)", k, len(f.cs))
	}
	f.cs[k] <- time.Now()
}

func be(id string, w int) BackendSpec {
	return BackendSpec{ID: id, Address: "127.0.0.1:1", Weight: w}
}

func poolCfg(balancer string, bs ...BackendSpec) Spec {
	return Spec{Name: "p", Balancer: balancer, Backends: bs}
}

// mustPool builds a pool with a fake clock and fake queue timers, closed at cleanup.
func mustPool(t testing.TB, cfg Spec, prev *Pool, clk *fakeClock) *Pool {
	t.Helper()
	now := time.Now
	if clk != nil {
		now = clk.now
	}
	p, err := newPool(cfg, prev, now)
	if err != nil {
		t.Fatalf("newPool: %v", err)
	}
	t.Cleanup(p.Close)
	return p
}

func mustAcquire(t testing.TB, p *Pool) *Backend {
	t.Helper()
	b, err := p.Acquire(0, balance.Tried{})
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	return b
}

// picks acquires and releases n times in a row and counts the backends chosen.
func picks(t testing.TB, p *Pool, n int) map[string]int {
	t.Helper()
	got := map[string]int{}
	for range n {
		b := mustAcquire(t, p)
		got[b.ID]++
		p.Release(b, time.Millisecond, false)
	}
	return got
}

type result struct {
	b   *Backend
	err error
}

// acquireAsync starts an Acquire that is expected to wait in the backlog and returns once the
// request is queued; the outcome arrives on the returned channel.
func acquireAsync(t testing.TB, p *Pool, queued chan struct{}) chan result {
	t.Helper()
	out := make(chan result, 1)
	go func() {
		b, err := p.Acquire(0, balance.Tried{})
		out <- result{b, err}
	}()
	select {
	case <-queued:
	case r := <-out:
		t.Fatalf("Acquire returned (%v, %v) instead of queueing", id(r.b), r.err)
	}
	return out
}

func id(b *Backend) string {
	if b == nil {
		return "<nil>"
	}
	return b.ID
}

// assertIdle checks that nothing is in flight and nobody waits.
func assertIdle(t testing.TB, p *Pool) {
	t.Helper()
	for _, b := range p.Backends() {
		if n := b.InFlight(); n != 0 {
			t.Errorf("backend %s: %d in flight at the end, want 0", b.ID, n)
		}
	}
	if n := p.InFlight(); n != 0 {
		t.Errorf("pool: %d in flight at the end, want 0", n)
	}
	if q := p.Queue(); q != 0 {
		t.Errorf("queue length %d at the end, want 0", q)
	}
}
