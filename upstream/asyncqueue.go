package upstream

import (
	"time"

	"ballast/balance"
)

// Ticket is a request's place in the backlog held without a goroutine, for event loops that
// cannot block in Acquire (package h1). The caller owns it (it is embedded in the request's
// state, so queueing allocates nothing) and may reuse it once its wait has ended.
type Ticket struct {
	w     waiter
	start time.Time
	p     *Pool
	g     Granted
}

// Granted hears the end of a Ticket's wait: a backend with a reserved slot (Release it as
// usual) or an error (ErrNoBackend). It runs on whichever goroutine freed the slot, under the
// pool's queue lock: it must only hand the outcome to the ticket's owner (post it to the
// owner's event loop) and must not call into the pool.
type Granted interface {
	Granted(t *Ticket, b *Backend, err error)
}

// AcquireAsync is Acquire for a caller that must not block. It returns a backend with a
// reserved slot, or an error (ErrNoBackend, ErrQueueFull), or queued = true: every usable
// backend is full and the request waits in the backlog in t, in FIFO order with the waiters of
// Acquire; g.Granted is then called exactly once unless Cancel takes the ticket back first.
// queue_timeout is the caller's to enforce (Cancel).
func (p *Pool) AcquireAsync(key uint64, tried balance.Tried, t *Ticket, g Granted) (b *Backend, queued bool, err error) {
	if p.qlen.Load() == 0 {
		b, err := p.try(key, &tried)
		if err != balance.ErrBusy {
			if err == ErrNoBackend {
				p.stats.noBackend.Add(1)
			}
			return b, false, err
		}
	}
	p.qmu.Lock()
	if p.qn >= p.maxQueue {
		p.dispatchLocked()
	}
	if p.qn >= p.maxQueue {
		p.qmu.Unlock()
		p.stats.rejected.Add(1)
		return nil, false, ErrQueueFull
	}
	*t = Ticket{w: waiter{key: key, tried: tried}, start: time.Now(), p: p, g: g}
	t.w.async = t
	p.pushLocked(&t.w)
	p.stats.queued.Add(1)
	// As in wait: picking again after the push closes the race with a Release in between.
	// A grant delivered here runs g.Granted before AcquireAsync returns.
	p.dispatchLocked()
	p.qmu.Unlock()
	if p.onQueue != nil {
		p.onQueue()
	}
	return nil, true, nil
}

// deliver ends the wait with a grant; under qmu.
func (t *Ticket) deliver(b *Backend, err error) {
	t.p.stats.recordWait(time.Since(t.start))
	if err == nil {
		t.p.stats.dispatched.Add(1)
	}
	t.g.Granted(t, b, err)
}

// Cancel takes a queued ticket out of its pool's backlog and reports true: its queue_timeout
// passed (timedOut, counted as such) or its client went away. False means it was granted
// already (Granted has run or is running) and the grant must be used or released.
func (t *Ticket) Cancel(timedOut bool) bool {
	p := t.p
	p.qmu.Lock()
	if !t.w.queued {
		p.qmu.Unlock()
		return false
	}
	p.unlinkLocked(&t.w)
	p.qmu.Unlock()
	if timedOut {
		p.stats.timedOut.Add(1)
	}
	p.stats.recordWait(time.Since(t.start))
	return true
}
