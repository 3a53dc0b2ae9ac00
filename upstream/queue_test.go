package upstream

import (
	"errors"
	"testing"
	"time"

	"ballast/balance"
)

// queuePool is one backend with max_conns 1 and a backlog of maxQueue, with fake timers and a
// hook that signals each request entering the backlog.
func queuePool(t *testing.T, balancer string, maxQueue int) (*Pool, *fakeTimers, chan struct{}) {
	t.Helper()
	cfg := poolCfg(balancer, be("a", 1))
	cfg.MaxConns = 1
	cfg.MaxQueue = maxQueue
	cfg.QueueTimeout = time.Minute
	p := mustPool(t, cfg, nil, nil)
	ft := &fakeTimers{}
	p.newTimer = ft.newTimer
	queued := make(chan struct{})
	p.onQueue = func() { queued <- struct{}{} }
	return p, ft, queued
}

func TestQueueDispatchOnRelease(t *testing.T) {
	for _, alg := range []string{"swrr", "sqf", "roundrobin", "random", "leastconn", "p2c"} {
		t.Run(alg, func(t *testing.T) {
			p, _, queued := queuePool(t, alg, 4)
			first := mustAcquire(t, p)
			second := acquireAsync(t, p, queued)
			if q := p.Queue(); q != 1 {
				t.Fatalf("queue length %d after the second Acquire, want 1 (it must wait)", q)
			}
			if n := first.InFlight(); n != 1 {
				t.Fatalf("in flight %d while the second waits, want 1", n)
			}
			p.Release(first, time.Millisecond, false)
			r := <-second
			if r.err != nil || r.b != first {
				t.Fatalf("waiter got (%s, %v), want (a, nil)", id(r.b), r.err)
			}
			if n := first.InFlight(); n != 1 {
				t.Fatalf("in flight %d after the hand-off, want 1", n)
			}
			p.Release(r.b, time.Millisecond, false)
			assertIdle(t, p)
			st := p.QueueStats()
			if st.Queued != 1 || st.Dispatched != 1 || st.TimedOut != 0 || st.Rejected != 0 {
				t.Errorf("stats %+v, want 1 queued and 1 dispatched", st)
			}
			assertWaitHistogram(t, st)
		})
	}
}

func TestQueueFull(t *testing.T) {
	tests := []struct {
		name     string
		maxQueue int
		waiting  int // requests that fit in the backlog
	}{
		{"no queue", 0, 0},
		{"queue of one", 1, 1},
		{"queue of three", 3, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, _, queued := queuePool(t, "swrr", tt.maxQueue)
			holder := mustAcquire(t, p)
			var waiters []chan result
			for range tt.waiting {
				waiters = append(waiters, acquireAsync(t, p, queued))
			}
			if _, err := p.Acquire(0, balance.Tried{}); !errors.Is(err, ErrQueueFull) {
				t.Fatalf("Acquire with a full backlog: err %v, want ErrQueueFull", err)
			}
			if got := p.QueueStats().Rejected; got != 1 {
				t.Errorf("rejected %d, want 1", got)
			}
			p.Release(holder, 0, false)
			for _, w := range waiters {
				r := <-w
				if r.err != nil {
					t.Fatalf("waiter: %v", r.err)
				}
				p.Release(r.b, 0, false)
			}
			assertIdle(t, p)
		})
	}
}

func TestQueueTimeout(t *testing.T) {
	p, ft, queued := queuePool(t, "swrr", 2)
	holder := mustAcquire(t, p)
	w := acquireAsync(t, p, queued)
	ft.fire(t, 0)
	r := <-w
	if !errors.Is(r.err, ErrQueueTimeout) || r.b != nil {
		t.Fatalf("waiter got (%s, %v), want ErrQueueTimeout", id(r.b), r.err)
	}
	if q := p.Queue(); q != 0 {
		t.Fatalf("queue length %d after the timeout, want 0", q)
	}
	if n := holder.InFlight(); n != 1 {
		t.Fatalf("in flight %d after the timeout, want 1 (the holder only)", n)
	}
	p.Release(holder, 0, false)
	// The slot the timed-out request never got is free: the next request gets it at once.
	b := mustAcquire(t, p)
	p.Release(b, 0, false)
	assertIdle(t, p)
	st := p.QueueStats()
	if st.TimedOut != 1 || st.Dispatched != 0 {
		t.Errorf("stats %+v, want 1 timed out, 0 dispatched", st)
	}
	assertWaitHistogram(t, st)
}

// assertWaitHistogram checks the backlog-wait buckets against the other counters: one count per
// request that left the backlog, and the total wait within the bounds of its buckets.
func assertWaitHistogram(t *testing.T, st QueueStats) {
	t.Helper()
	var n uint64
	var lo, hi time.Duration
	for k, c := range st.WaitBuckets {
		n += c
		if k > 0 {
			lo += time.Duration(c) * QueueWaitBounds[k-1]
		}
		if k < len(QueueWaitBounds) {
			hi += time.Duration(c) * QueueWaitBounds[k]
		} else if c > 0 {
			hi = time.Duration(1<<63 - 1)
		}
	}
	if n != st.Dispatched+st.TimedOut {
		t.Errorf("wait histogram counts %d requests, want %d dispatched + %d timed out", n, st.Dispatched, st.TimedOut)
	}
	if st.Wait < lo || st.Wait > hi {
		t.Errorf("total wait %v outside what the buckets allow [%v, %v]", st.Wait, lo, hi)
	}
}

// TestQueueTimeoutRacesGrant makes the timer fire and a dispatch hand over the slot at the same
// moment: whichever the waiter sees first, it must end up with the slot, never lose it.
func TestQueueTimeoutRacesGrant(t *testing.T) {
	for k := range 20 {
		p, ft, queued := queuePool(t, "swrr", 2)
		holder := mustAcquire(t, p)
		w := acquireAsync(t, p, queued)
		p.qmu.Lock() // the waiter cannot look at the queue until both events are in place
		holder.inflight.Add(-1)
		p.dispatchLocked()
		ft.fire(t, 0)
		p.qmu.Unlock()
		r := <-w
		if r.err != nil || r.b != holder {
			t.Fatalf("round %d: waiter got (%s, %v), want the slot", k, id(r.b), r.err)
		}
		if n := holder.InFlight(); n != 1 {
			t.Fatalf("round %d: in flight %d, want 1", k, n)
		}
		p.Release(r.b, 0, false)
		assertIdle(t, p)
	}
}

func TestQueueFIFO(t *testing.T) {
	const n = 5
	p, _, queued := queuePool(t, "swrr", n)
	holder := mustAcquire(t, p)
	waiters := make([]chan result, n)
	for k := range n {
		waiters[k] = acquireAsync(t, p, queued) // each is queued before the next starts
	}
	cur := holder
	for k := range n {
		p.Release(cur, 0, false)
		r := <-waiters[k] // the k-th waiter, and no other, must be dispatched
		if r.err != nil {
			t.Fatalf("waiter %d: %v", k, r.err)
		}
		for j := k + 1; j < n; j++ {
			select {
			case r := <-waiters[j]:
				t.Fatalf("waiter %d served before waiter %d (%v)", j, k+1, r.err)
			default:
			}
		}
		if q := p.Queue(); q != n-k-1 {
			t.Fatalf("queue length %d after %d dispatches, want %d", q, k+1, n-k-1)
		}
		cur = r.b
	}
	p.Release(cur, 0, false)
	assertIdle(t, p)
}

// TestQueueNoBarging: while requests wait, a newcomer joins the tail even if it arrives at the
// moment a slot frees.
func TestQueueNoBarging(t *testing.T) {
	p, _, queued := queuePool(t, "swrr", 4)
	holder := mustAcquire(t, p)
	w1 := acquireAsync(t, p, queued)
	w2 := acquireAsync(t, p, queued)
	if q := p.Queue(); q != 2 {
		t.Fatalf("queue length %d, want 2", q)
	}
	p.Release(holder, 0, false)
	r := <-w1
	if r.err != nil {
		t.Fatal(r.err)
	}
	if q := p.Queue(); q != 1 {
		t.Fatalf("queue length %d after one dispatch, want 1 (w2 still waits)", q)
	}
	p.Release(r.b, 0, false)
	if r := <-w2; r.err != nil {
		t.Fatal(r.err)
	} else {
		p.Release(r.b, 0, false)
	}
	assertIdle(t, p)
}

// TestQueueWakesOnCapacity: capacity that appears without a Release (a backend enabled, added,
// given weight) dispatches waiters; losing every backend answers them ErrNoBackend.
func TestQueueWakesOnCapacity(t *testing.T) {
	tests := []struct {
		name    string
		change  func(p *Pool) error
		wantID  string
		wantErr error
	}{
		{"enable", func(p *Pool) error { return p.Enable("b") }, "b", nil},
		{"add", func(p *Pool) error { _, err := p.Add(be("c", 1)); return err }, "c", nil},
		{"weight", func(p *Pool) error { return p.SetWeight("b", 2) }, "b", nil},
		{"all gone", func(p *Pool) error { return p.Disable("a") }, "", ErrNoBackend},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := poolCfg("swrr", be("a", 1), be("b", 1))
			cfg.MaxConns, cfg.MaxQueue = 1, 4
			p := mustPool(t, cfg, nil, nil)
			p.newTimer = (&fakeTimers{}).newTimer
			queued := make(chan struct{})
			p.onQueue = func() { queued <- struct{}{} }
			switch tt.name {
			case "enable":
				if err := p.Disable("b"); err != nil {
					t.Fatal(err)
				}
			case "add", "all gone":
				if err := p.Remove("b"); err != nil {
					t.Fatal(err)
				}
			case "weight":
				if err := p.SetWeight("b", 0); err != nil {
					t.Fatal(err)
				}
			}
			holder := mustAcquire(t, p)
			w := acquireAsync(t, p, queued)
			if err := tt.change(p); err != nil {
				t.Fatal(err)
			}
			r := <-w
			if tt.wantErr != nil {
				if !errors.Is(r.err, tt.wantErr) {
					t.Fatalf("waiter err %v, want %v", r.err, tt.wantErr)
				}
			} else if r.err != nil || r.b.ID != tt.wantID {
				t.Fatalf("waiter got (%s, %v), want %s", id(r.b), r.err, tt.wantID)
			} else {
				p.Release(r.b, 0, false)
			}
			p.Release(holder, 0, false)
			assertIdle(t, p)
		})
	}
}

// TestReloadWakesOldBacklog: a request waiting in the replaced pool's backlog is served when a
// request of the new pool frees the shared backend.
func TestReloadWakesOldBacklog(t *testing.T) {
	p1, _, queued := queuePool(t, "swrr", 4)
	cfg := poolCfg("swrr", be("a", 1))
	cfg.MaxConns, cfg.MaxQueue = 1, 4
	cfg.QueueTimeout = time.Minute
	p2 := mustPool(t, cfg, p1, nil)
	held := mustAcquire(t, p2)
	w := acquireAsync(t, p1, queued) // an old-pool request arriving during the swap
	p1.Close()
	p2.Release(held, 0, false)
	r := <-w
	if r.err != nil || r.b != held {
		t.Fatalf("old waiter got (%s, %v), want a", id(r.b), r.err)
	}
	p1.Release(r.b, 0, false)
	assertIdle(t, p1)
	assertIdle(t, p2)
	// Once the old backlog is empty and the old pool closed, the new pool forgets it.
	b := mustAcquire(t, p2)
	p2.Release(b, 0, false)
	if p2.pred.Load() != nil {
		t.Error("the new pool still refers to the closed, empty old pool")
	}
}

// TestQueueSkipsWaiterThatTriedTheFreeBackend: a retry that excludes the backend with the free
// slot does not keep the slot from the requests behind it.
func TestQueueSkipsWaiterThatTriedTheFreeBackend(t *testing.T) {
	cfg := poolCfg("swrr", be("a", 1), be("b", 1))
	cfg.MaxConns, cfg.MaxQueue = 1, 4
	cfg.QueueTimeout = time.Minute
	p := mustPool(t, cfg, nil, nil)
	p.newTimer = (&fakeTimers{}).newTimer
	queued := make(chan struct{})
	p.onQueue = func() { queued <- struct{}{} }
	ha, hb := mustAcquire(t, p), mustAcquire(t, p)
	if ha.ID != "a" || hb.ID != "b" {
		t.Fatalf("holders %s %s", ha.ID, hb.ID)
	}
	retry := make(chan result, 1)
	go func() {
		var tried balance.Tried
		tried.Add(hb.Index())
		b, err := p.Acquire(0, tried)
		retry <- result{b, err}
	}()
	<-queued
	fresh := acquireAsync(t, p, queued)
	if b, err := p.TryAcquire(0, balance.Tried{}); !errors.Is(err, ErrBusy) {
		t.Fatalf("TryAcquire with waiters: (%s, %v), want ErrBusy", id(b), err)
	}
	p.Release(hb, 0, false)
	if r := <-fresh; r.err != nil || r.b != hb {
		t.Fatalf("the request behind the retry got (%s, %v), want b", id(r.b), r.err)
	}
	if q := p.Queue(); q != 1 {
		t.Fatalf("queue %d, want the retry still waiting", q)
	}
	p.Release(ha, 0, false)
	r := <-retry
	if r.err != nil || r.b != ha {
		t.Fatalf("the retry got (%s, %v), want a", id(r.b), r.err)
	}
	p.Release(ha, 0, false)
	p.Release(hb, 0, false)
	assertIdle(t, p)
}
