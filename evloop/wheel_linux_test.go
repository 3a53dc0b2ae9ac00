//go:build linux

package evloop

import (
	"testing"
	"time"
)

// firing records when a timer of a running shard fired, on the shard's clock.
type firing struct {
	s        *Shard
	at       int64
	now, clk int64 // Expire's now, and the shard's Now then
	done     chan<- *firing
}

func (f *firing) Expire(now int64) {
	f.now, f.clk = now, f.s.Now()
	f.done <- f
}

// armTask arms, on the shard's goroutine, one timer per offset from the tick boundary two
// ticks after the shard's clock.
type armTask struct {
	offsets []int64
	ts      []Timer
	fs      []firing
	done    chan *firing
}

func (a *armTask) Run(s *Shard) {
	b := (s.Now()>>TickShift + 2) << TickShift
	for i, off := range a.offsets {
		a.fs[i] = firing{s: s, at: b + off, done: a.done}
		a.ts[i].Init(&a.fs[i])
		s.Arm(&a.ts[i], b+off)
	}
}

// TestShardTimersNeverEarly: timers armed on a running shard for deadlines at and around tick
// boundaries of its clock fire when the shard's clock has reached their deadline, never
// before (the wheel once fired a timer when the clock entered its deadline's tick: a deadline
// late in a tick fired most of a tick early).
func TestShardTimersNeverEarly(t *testing.T) {
	g, err := NewGroup(1)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	tk := int64(1) << TickShift
	offsets := []int64{-1, 0, 1, tk / 4, tk / 2, 3 * tk / 4, tk - 1, tk, tk + 1, 3*tk - 1}
	a := &armTask{offsets: offsets, ts: make([]Timer, len(offsets)), fs: make([]firing, len(offsets)),
		done: make(chan *firing, len(offsets))}
	g.Shards()[0].Post(a)
	bound := time.After(10 * time.Second)
	for range offsets {
		select {
		case f := <-a.done:
			if f.now < f.at || f.clk < f.at {
				t.Errorf("deadline %d (%d ns into its tick): fired at %d (shard clock %d), %d ns early",
					f.at, f.at&(tk-1), f.now, f.clk, f.at-min(f.now, f.clk))
			}
		case <-bound:
			t.Fatal("the timers had not all fired after 10 s")
		}
	}
}
