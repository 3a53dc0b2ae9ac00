package backend

import (
	"sync"
	"sync/atomic"
)

// fifo hands K worker slots to requests in strict arrival order. A released slot goes straight
// to the oldest waiter, so no later request can overtake it.
type fifo struct {
	mu    sync.Mutex
	free  []int     // free slot indexes
	queue []*waiter // ring buffer of waiting requests
	head  int       // index of the oldest waiter in queue
	n     int       // number of waiters
	pool  sync.Pool // *waiter, so that waiting allocates nothing in steady state
}

type waiter struct{ slot chan int }

func newFIFO(k int) *fifo {
	f := &fifo{free: make([]int, k), queue: make([]*waiter, 64)}
	for i := range f.free {
		f.free[i] = k - 1 - i // pop order 0, 1, 2, ...
	}
	f.pool.New = func() any { return &waiter{slot: make(chan int, 1)} }
	return f
}

// acquire returns a slot, waiting behind every earlier caller, and whether it had to wait.
// While it waits (from just after it is queued until it holds a slot) it counts itself in
// waiting.
func (f *fifo) acquire(waiting *atomic.Int64) (slot int, queued bool) {
	f.mu.Lock()
	if f.n == 0 && len(f.free) > 0 {
		s := f.free[len(f.free)-1]
		f.free = f.free[:len(f.free)-1]
		f.mu.Unlock()
		return s, false
	}
	w := f.pool.Get().(*waiter)
	if f.n == len(f.queue) {
		grown := make([]*waiter, 2*len(f.queue))
		for i := 0; i < f.n; i++ {
			grown[i] = f.queue[(f.head+i)%len(f.queue)]
		}
		f.queue, f.head = grown, 0
	}
	f.queue[(f.head+f.n)%len(f.queue)] = w
	f.n++
	f.mu.Unlock()
	waiting.Add(1)
	s := <-w.slot
	waiting.Add(-1)
	f.pool.Put(w)
	return s, true
}

// release gives slot s to the oldest waiter, or frees it.
func (f *fifo) release(s int) {
	f.mu.Lock()
	if f.n == 0 {
		f.free = append(f.free, s)
		f.mu.Unlock()
		return
	}
	w := f.queue[f.head]
	f.queue[f.head] = nil
	f.head = (f.head + 1) % len(f.queue)
	f.n--
	f.mu.Unlock()
	w.slot <- s
}
