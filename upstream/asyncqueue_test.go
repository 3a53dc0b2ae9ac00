package upstream

import (
	"errors"
	"sync"
	"testing"
	"time"

	"ballast/balance"
)

// grants records what Granted hears, from whichever goroutine calls it.
type grants struct {
	mu  sync.Mutex
	got []*Backend
	err []error
}

func (g *grants) Granted(_ *Ticket, b *Backend, err error) {
	g.mu.Lock()
	g.got, g.err = append(g.got, b), append(g.err, err)
	g.mu.Unlock()
}

func (g *grants) n() int { g.mu.Lock(); defer g.mu.Unlock(); return len(g.got) }

// A ticket waits in FIFO order with Acquire's waiters, is granted by Release without any
// goroutine of its own, and Cancel takes back only a ticket not granted yet.
func TestTicketFIFOAndCancel(t *testing.T) {
	p, _, _ := queuePool(t, "roundrobin", 3)
	queued := make(chan struct{}, 8) // AcquireAsync signals on the caller's goroutine
	p.onQueue = func() { queued <- struct{}{} }
	first := mustAcquire(t, p)

	var g grants
	var t1, t2 Ticket
	b, q, err := p.AcquireAsync(0, balance.Tried{}, &t1, &g)
	if b != nil || !q || err != nil {
		t.Fatalf("AcquireAsync on a full pool = (%s, %v, %v), want queued", id(b), q, err)
	}
	<-queued
	blocking := acquireAsync(t, p, queued) // Acquire's waiter, behind t1
	if _, q, _ = p.AcquireAsync(0, balance.Tried{}, &t2, &g); !q {
		t.Fatal("the third request was not queued")
	}
	<-queued
	if p.Queue() != 3 {
		t.Fatalf("queue %d, want 3", p.Queue())
	}
	if _, _, err := p.AcquireAsync(0, balance.Tried{}, new(Ticket), &g); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("a fourth request: %v, want ErrQueueFull", err)
	}

	p.Release(first, time.Millisecond, false) // the head, t1, gets the slot
	if g.n() != 1 || g.got[0] != first {
		t.Fatalf("after the release the ticket holds %d grants, want the freed backend", g.n())
	}
	if t1.Cancel(true) {
		t.Fatal("Cancel took back a ticket that was granted")
	}
	p.Release(first, time.Millisecond, false) // next: Acquire's waiter
	r := <-blocking
	if r.err != nil || r.b != first {
		t.Fatalf("the blocking waiter got (%s, %v)", id(r.b), r.err)
	}
	if !t2.Cancel(true) {
		t.Fatal("Cancel did not take back a queued ticket")
	}
	p.Release(r.b, time.Millisecond, false)
	if g.n() != 1 {
		t.Fatalf("the cancelled ticket was granted (%d grants)", g.n())
	}
	assertIdle(t, p)
	st := p.QueueStats()
	if st.Queued != 3 || st.Dispatched != 2 || st.TimedOut != 1 || st.Rejected != 1 {
		t.Fatalf("stats %+v, want 3 queued, 2 dispatched, 1 timed out, 1 rejected", st)
	}
}

// A ticket whose pool loses every usable backend is granted ErrNoBackend.
func TestTicketNoBackend(t *testing.T) {
	p, _, _ := queuePool(t, "roundrobin", 2)
	queued := make(chan struct{}, 8)
	p.onQueue = func() { queued <- struct{}{} }
	first := mustAcquire(t, p)
	var g grants
	var tk Ticket
	if _, q, _ := p.AcquireAsync(0, balance.Tried{}, &tk, &g); !q {
		t.Fatal("not queued")
	}
	<-queued
	if err := p.Disable("a"); err != nil {
		t.Fatal(err)
	}
	p.Release(first, time.Millisecond, false)
	if g.n() != 1 || !errors.Is(g.err[0], ErrNoBackend) {
		t.Fatalf("grants %v %v, want one ErrNoBackend", g.got, g.err)
	}
}
