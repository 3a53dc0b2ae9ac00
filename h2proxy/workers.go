package h2proxy

import (
	"sync"
	"sync/atomic"
)

// Stream handlers run on workers: a goroutine that served a stream parks and takes the next
// one, so a stream starts on a stack that has grown already (the handler's call chain through
// the core and a backend attempt is deep: a new goroutine copies its stack two or three times
// on the way, about 5 % of the plane's CPU). Parked workers are kept in shards, each taken by
// the connections assigned to it, so no lock is shared by all connections; each shard keeps at
// most maxIdleWorkers, and the collector shrinks the stacks of those that stay parked.

const (
	workerShards   = 16
	maxIdleWorkers = 32 // per shard
)

type worker struct{ next chan *h2stream }

type workerShard struct {
	mu   sync.Mutex
	idle []*worker
	_    [40]byte // a cache line each
}

var (
	shards    [workerShards]workerShard
	nextShard atomic.Uint32
)

// pickShard assigns a new connection its shard.
func pickShard() *workerShard { return &shards[nextShard.Add(1)%workerShards] }

// run serves st on a parked worker of the shard, or on a new one.
func (sh *workerShard) run(st *h2stream) {
	sh.mu.Lock()
	if n := len(sh.idle); n > 0 {
		w := sh.idle[n-1]
		sh.idle[n-1] = nil
		sh.idle = sh.idle[:n-1]
		sh.mu.Unlock()
		w.next <- st
		return
	}
	sh.mu.Unlock()
	w := &worker{next: make(chan *h2stream, 1)}
	go w.loop(sh, st)
}

func (w *worker) loop(sh *workerShard, st *h2stream) {
	for {
		st.serve()
		sh.mu.Lock()
		if len(sh.idle) >= maxIdleWorkers {
			sh.mu.Unlock()
			return
		}
		sh.idle = append(sh.idle, w)
		sh.mu.Unlock()
		st = <-w.next
	}
}
