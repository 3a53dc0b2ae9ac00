package backend

import (
	"sync"
	"sync/atomic"
)

// fifo hands K worker slots to requests in strict arrival order, and keeps the workers'
// schedule in virtual time: when each becomes free (vfree) and so when each request's service
// starts. A released slot goes straight to the oldest waiter, so no later request can overtake
// it, and the waiter's start is set there, under the lock, by the releasing goroutine: the
// earliest virtual free time of any worker, not of the one released. Workers that are free in
// virtual time hand their slots on when their timers fire in real time, and deadlines that
// fall in one wake-up of the process (Go's timers of an idle process fire on its next wake-up,
// about a millisecond apart) fire in any order; a waiter handed the later one, and a waiter
// whose goroutine ran only after the earlier slot had gone to a newcomer, would start late,
// and the earlier worker's idle time would be lost (a two-worker backend fed by a balancer
// lost 1 % of its capacity so).
type fifo struct {
	mu    sync.Mutex
	free  []int     // free slot indexes
	vfree []int64   // per slot: when its worker is free in virtual time (ns since the backend's base)
	queue []*waiter // ring buffer of waiting requests
	head  int       // index of the oldest waiter in queue
	n     int       // number of waiters
	pool  sync.Pool // *waiter, so that waiting allocates nothing in steady state
}

// hand is a slot handed to a waiter and the virtual start of its service.
type hand struct {
	slot  int
	start int64
}

type waiter struct {
	slot       chan hand
	arrival, d int64 // virtual arrival and service time
}

func newFIFO(k int) *fifo {
	f := &fifo{free: make([]int, k), vfree: make([]int64, k), queue: make([]*waiter, 64)}
	for i := range f.free {
		f.free[i] = k - 1 - i // pop order 0, 1, 2, ...
	}
	f.pool.New = func() any { return &waiter{slot: make(chan hand, 1)} }
	return f
}

// acquire returns a slot, waiting behind every earlier caller, the request's virtual arrival
// (now, read as it joins the queue), the virtual start of its service and whether it had to
// wait. A request that finds a worker free starts on
// arrival; one that waits starts when the earliest worker was free in virtual time, but not
// before its arrival nor more than maxCredit before it was handed the slot (so that a long
// stall is not repaid by a burst of instant answers); d is its service time, which sets its
// worker's next free time. While it waits (from just after it is queued until it holds a
// slot) it counts itself in waiting.
func (f *fifo) acquire(waiting *atomic.Int64, now func() int64, d int64) (slot int, arrival, start int64, queued bool) {
	f.mu.Lock()
	arrival = now() // under the lock: the queue's order is the arrivals'
	if f.n == 0 && len(f.free) > 0 {
		s := f.free[len(f.free)-1]
		f.free = f.free[:len(f.free)-1]
		start = max(arrival, f.vfree[s])
		f.vfree[s] = start + d
		f.mu.Unlock()
		return s, arrival, start, false
	}
	w := f.pool.Get().(*waiter)
	w.arrival, w.d = arrival, d
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
	h := <-w.slot
	waiting.Add(-1)
	f.pool.Put(w)
	return h.slot, arrival, h.start, true
}

// release gives slot s to the oldest waiter, or frees it; now is the virtual time of the
// release. The waiter takes the earliest virtual free time of any worker: when another slot's
// is earlier, that slot is still held by a goroutine past its deadline (a free slot would have
// gone to the waiter), which reads its free time no more, so the two free times are swapped.
func (f *fifo) release(s int, now int64) {
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
	j := s
	for i, v := range f.vfree {
		if v < f.vfree[j] {
			j = i
		}
	}
	f.vfree[s], f.vfree[j] = f.vfree[j], f.vfree[s]
	start := max(w.arrival, f.vfree[s], now-int64(maxCredit))
	f.vfree[s] = start + w.d
	f.mu.Unlock()
	w.slot <- hand{s, start}
}

// lastFree is the latest virtual free time of any worker.
func (f *fifo) lastFree() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	var m int64
	for _, v := range f.vfree {
		m = max(m, v)
	}
	return m
}
