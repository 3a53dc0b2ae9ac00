package upstream

import (
	"errors"
	"testing"
	"time"

	"ballast/balance"
)

// TestQueueStatsSurviveReload: a reload builds a new pool of the same name from the old one;
// the backlog counters carry on in it (as the backends' counters do), including what the old
// pool's last waiter does after the reload. A pool of another name starts from zero.
func TestQueueStatsSurviveReload(t *testing.T) {
	p, ft, queued := queuePool(t, "swrr", 1)
	holder := mustAcquire(t, p)
	timedOut := acquireAsync(t, p, queued)
	ft.fire(t, 0)
	if r := <-timedOut; !errors.Is(r.err, ErrQueueTimeout) {
		t.Fatalf("first waiter: %v, want ErrQueueTimeout", r.err)
	}
	waiter := acquireAsync(t, p, queued) // still waiting in the old pool across the reload
	if _, err := p.Acquire(0, balance.Tried{}); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("Acquire with a full backlog: %v, want ErrQueueFull", err)
	}
	before := p.QueueStats()
	if before.Queued != 2 || before.TimedOut != 1 || before.Rejected != 1 || before.Dispatched != 0 {
		t.Fatalf("before the reload: %+v, want 2 queued, 1 timed out, 1 rejected", before)
	}

	cfg := poolCfg("swrr", be("a", 1))
	cfg.MaxConns = 1 // and no backlog in the new configuration: a busy backend means 503 at once
	next := mustPool(t, cfg, p, nil)
	if got := next.QueueStats(); got != before {
		t.Fatalf("after the reload: %+v, want the old pool's %+v", got, before)
	}

	next.Release(holder, time.Millisecond, false) // the old pool's waiter gets the slot
	r := <-waiter
	if r.err != nil {
		t.Fatalf("old pool's waiter: %v", r.err)
	}
	if _, err := next.Acquire(0, balance.Tried{}); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("Acquire on the new pool while the slot is taken: %v, want ErrQueueFull", err)
	}
	next.Release(r.b, time.Millisecond, false)
	got := next.QueueStats()
	if got.Queued != 2 || got.Dispatched != 1 || got.TimedOut != 1 || got.Rejected != 2 {
		t.Fatalf("after the reload and more traffic: %+v, want 2 queued, 1 dispatched, 1 timed out, 2 rejected", got)
	}
	if got.WaitBuckets == (before.WaitBuckets) {
		t.Errorf("wait histogram %v did not count the old pool's dispatched waiter", got.WaitBuckets)
	}

	other := cfg
	other.Name = "other"
	if st := mustPool(t, other, next, nil).QueueStats(); st != (QueueStats{}) {
		t.Errorf("a pool of another name built from it: %+v, want zero counters", st)
	}
}
