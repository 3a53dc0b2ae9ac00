package upstream

import (
	"sync/atomic"
	"time"

	"ballast/balance"
)

// maxSkip bounds how many waiters a dispatch looks past when the head waiter is busy only
// because its tried set excludes the backend that has a free slot.
const maxSkip = 8

// waiter is one request in the backlog. It is allocated only when a request has to wait.
type waiter struct {
	key        uint64
	tried      balance.Tried
	ch         chan grant // 1-buffered; receives exactly one grant, sent under qmu
	async      *Ticket    // instead of ch: a request waiting without a goroutine (asyncqueue.go)
	prev, next *waiter
	queued     bool // under qmu
}

// grant is the outcome handed to a waiter: a reserved backend, or ErrNoBackend.
type grant struct {
	b   *Backend
	err error
}

type queueCounters struct {
	queued, dispatched, timedOut, rejected, waitNanos atomic.Uint64
	noBackend                                         atomic.Uint64
	waitBuckets                                       [len(QueueWaitBounds) + 1]atomic.Uint64
}

// QueueWaitBounds are the upper bounds of the backlog-wait histogram's buckets; a wait longer
// than the last one counts in a final overflow bucket.
var QueueWaitBounds = [...]time.Duration{
	time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond, 50 * time.Millisecond,
	100 * time.Millisecond, 500 * time.Millisecond, time.Second, 5 * time.Second, 10 * time.Second,
	30 * time.Second,
}

// recordWait adds one request's time in the backlog to the counters.
func (c *queueCounters) recordWait(d time.Duration) {
	c.waitNanos.Add(uint64(d))
	k := 0
	for k < len(QueueWaitBounds) && d > QueueWaitBounds[k] {
		k++
	}
	c.waitBuckets[k].Add(1)
}

// QueueStats are cumulative backlog counters, for the metrics.
type QueueStats struct {
	// Queued counts requests that entered the backlog.
	Queued uint64
	// Dispatched counts requests that left it with a backend.
	Dispatched uint64
	// TimedOut counts requests that waited queue_timeout and got ErrQueueTimeout.
	TimedOut uint64
	// Rejected counts requests turned away with ErrQueueFull.
	Rejected uint64
	// Wait is the total time spent in the backlog by requests that left it.
	Wait time.Duration
	// WaitBuckets counts the requests that left the backlog by their wait: index k counts waits
	// of at most QueueWaitBounds[k] (and more than the bound before); the last, longer waits.
	WaitBuckets [len(QueueWaitBounds) + 1]uint64
	// NoBackend counts Acquire calls that found no usable backend (503).
	NoBackend uint64
}

// Queue is the number of requests waiting in the backlog now.
func (p *Pool) Queue() int { return int(p.qlen.Load()) }

// QueueStats returns the backlog counters.
func (p *Pool) QueueStats() QueueStats {
	st := QueueStats{
		Queued:     p.stats.queued.Load(),
		Dispatched: p.stats.dispatched.Load(),
		TimedOut:   p.stats.timedOut.Load(),
		Rejected:   p.stats.rejected.Load(),
		Wait:       time.Duration(p.stats.waitNanos.Load()),
		NoBackend:  p.stats.noBackend.Load(),
	}
	for k := range st.WaitBuckets {
		st.WaitBuckets[k] = p.stats.waitBuckets[k].Load()
	}
	return st
}

// wait queues the request at the tail of the backlog and blocks until a dispatch hands it a
// slot, the pool runs out of usable backends, or queue_timeout passes.
func (p *Pool) wait(key uint64, tried balance.Tried) (*Backend, error) {
	p.qmu.Lock()
	if p.qn >= p.maxQueue {
		p.dispatchLocked() // a slot may have freed since the pick: serve the head, make room
	}
	if p.qn >= p.maxQueue {
		p.qmu.Unlock()
		p.stats.rejected.Add(1)
		return nil, ErrQueueFull
	}
	w := &waiter{key: key, tried: tried, ch: make(chan grant, 1)}
	p.pushLocked(w)
	p.stats.queued.Add(1)
	// Picking again after the push closes the race with a Release that freed a slot between
	// our pick and the push: either that Release sees the queue non-empty and dispatches, or
	// this dispatch sees its decrement.
	p.dispatchLocked()
	p.qmu.Unlock()
	start := time.Now()
	var timeout <-chan time.Time
	if p.queueTimeout > 0 {
		c, stop := p.newTimer(p.queueTimeout)
		defer stop()
		timeout = c
	}
	if p.onQueue != nil {
		p.onQueue()
	}
	select {
	case g := <-w.ch:
		return p.granted(g, start)
	case <-timeout:
	}
	p.qmu.Lock()
	if w.queued {
		p.unlinkLocked(w)
		p.qmu.Unlock()
		p.stats.timedOut.Add(1)
		p.stats.recordWait(time.Since(start))
		return nil, ErrQueueTimeout
	}
	p.qmu.Unlock()
	// A dispatch handed us a slot while the timer fired; the grant is already in the channel
	// (sent under qmu). Serve it rather than lose the slot.
	return p.granted(<-w.ch, start)
}

func (p *Pool) granted(g grant, start time.Time) (*Backend, error) {
	p.stats.recordWait(time.Since(start))
	if g.err == nil {
		p.stats.dispatched.Add(1)
	}
	return g.b, g.err
}

// realTimer is the production newTimer.
func realTimer(d time.Duration) (<-chan time.Time, func() bool) {
	t := time.NewTimer(d)
	return t.C, t.Stop
}

// kick dispatches waiters if there are any; callers hold no lock but may hold mu.
func (p *Pool) kick() {
	if p.qlen.Load() == 0 {
		return
	}
	p.qmu.Lock()
	p.dispatchLocked()
	p.qmu.Unlock()
}

// dispatchLocked runs the balancer for waiters in FIFO order and hands out slots until the pool
// is busy again. A waiter whose tried set excludes the free backend is passed over (up to
// maxSkip of them) so that the slot does not sit idle behind it.
func (p *Pool) dispatchLocked() {
	skipped := 0
	for w := p.qhead; w != nil; {
		next := w.next
		b, err := p.try(w.key, &w.tried)
		if err == balance.ErrBusy {
			if w.tried.Len() == 0 || skipped >= maxSkip {
				return
			}
			skipped++
			w = next
			continue
		}
		p.unlinkLocked(w)
		if w.async != nil {
			w.async.deliver(b, err)
		} else {
			w.ch <- grant{b, err}
		}
		w = next
	}
}

func (p *Pool) pushLocked(w *waiter) {
	w.queued = true
	w.prev = p.qtail
	if p.qtail != nil {
		p.qtail.next = w
	} else {
		p.qhead = w
	}
	p.qtail = w
	p.qn++
	p.qlen.Store(int64(p.qn))
}

func (p *Pool) unlinkLocked(w *waiter) {
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		p.qhead = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		p.qtail = w.prev
	}
	w.prev, w.next, w.queued = nil, nil, false
	p.qn--
	p.qlen.Store(int64(p.qn))
}
