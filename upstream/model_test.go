package upstream

import (
	"errors"
	"testing"
	"time"

	"ballast/balance"
)

// FuzzQueueModel drives one backend with max_conns k and a backlog of m through a sequence of
// arrivals, releases and timeouts decoded from the input, and checks every outcome against a
// plain FIFO model: arrivals are served at once while there is a free slot and nobody waits,
// queue while there is room, are refused otherwise; a release serves the head; a timeout
// removes exactly the waiter whose timer fired.
func FuzzQueueModel(f *testing.F) {
	f.Add([]byte{0, 1, 0, 0, 0, 1, 1, 1})
	f.Add([]byte{1, 3, 0, 0, 0, 0, 0, 0, 2, 5, 1, 1, 1, 1})
	f.Add([]byte{2, 2, 0, 0, 0, 0, 0, 0, 8, 2, 1, 0, 0, 1, 1, 1, 1})
	f.Add([]byte{0, 0, 0, 0, 1, 0, 2, 1})
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) < 2 {
			return
		}
		if len(in) > 64 {
			in = in[:64]
		}
		k, m := 1+int(in[0]%3), int(in[1]%4)
		cfg := poolCfg("swrr", be("a", 1))
		cfg.MaxConns, cfg.MaxQueue = k, m
		cfg.QueueTimeout = time.Minute
		p, err := newPool(cfg, nil, time.Now)
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		ft := &fakeTimers{}
		p.newTimer = ft.newTimer
		queued := make(chan struct{})
		p.onQueue = func() { queued <- struct{}{} }
		a := p.Backend("a")

		type qw struct {
			out   chan result
			timer int
		}
		var (
			inflight int
			held     int
			queue    []qw
			timers   int
		)
		for step, op := range in[2:] {
			switch op % 3 {
			case 0: // arrival
				out := make(chan result, 1)
				go func() {
					b, err := p.Acquire(0, balance.Tried{})
					out <- result{b, err}
				}()
				switch {
				case len(queue) == 0 && inflight < k:
					if r := <-out; r.err != nil {
						t.Fatalf("step %d: arrival with a free slot: %v", step, r.err)
					}
					inflight++
					held++
				case len(queue) < m:
					select {
					case <-queued:
					case r := <-out:
						t.Fatalf("step %d: arrival should queue, got (%s, %v)", step, id(r.b), r.err)
					}
					queue = append(queue, qw{out, timers})
					timers++
				default:
					if r := <-out; !errors.Is(r.err, ErrQueueFull) {
						t.Fatalf("step %d: arrival with a full backlog: (%s, %v), want ErrQueueFull", step, id(r.b), r.err)
					}
				}
			case 1: // a release
				if held == 0 {
					continue
				}
				p.Release(a, 0, false)
				held--
				inflight--
				if len(queue) > 0 {
					head := queue[0]
					queue = queue[1:]
					if r := <-head.out; r.err != nil || r.b != a {
						t.Fatalf("step %d: head waiter got (%s, %v), want a", step, id(r.b), r.err)
					}
					inflight++
					held++
				}
			case 2: // the timer of one waiter fires
				if len(queue) == 0 {
					continue
				}
				j := int(op/3) % len(queue)
				w := queue[j]
				queue = append(queue[:j:j], queue[j+1:]...)
				ft.fire(t, w.timer)
				if r := <-w.out; !errors.Is(r.err, ErrQueueTimeout) {
					t.Fatalf("step %d: waiter %d: (%s, %v), want ErrQueueTimeout", step, j, id(r.b), r.err)
				}
			}
			if got := p.Queue(); got != len(queue) {
				t.Fatalf("step %d: queue length %d, model %d", step, got, len(queue))
			}
			if got := a.InFlight(); got != int64(inflight) {
				t.Fatalf("step %d: in flight %d, model %d", step, got, inflight)
			}
			if inflight > k {
				t.Fatalf("step %d: model bug: %d in flight over %d", step, inflight, k)
			}
		}
		for len(queue) > 0 || held > 0 {
			p.Release(a, 0, false)
			held--
			if len(queue) > 0 {
				if r := <-queue[0].out; r.err != nil {
					t.Fatal(r.err)
				}
				queue = queue[1:]
				held++
			}
		}
		assertIdle(t, p)
	})
}
