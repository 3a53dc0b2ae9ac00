package httpcore

import (
	"sync"
	"sync/atomic"
	"time"
)

// coarse holds the current Unix second for the retry budget, which needs no more precision:
// one goroutine advances it so that requests do not read the clock for it. The goroutine runs
// while some Proxy is live (from New to Shutdown) and stops with the last one.
var coarse struct {
	now atomic.Int64 // 0 while no ticker runs

	mu    sync.Mutex // guards users, stop and done
	users int
	stop  chan struct{}
	done  chan struct{}
}

// coarseUnix is the current Unix second, from the ticker when one runs.
func coarseUnix() int64 {
	if t := coarse.now.Load(); t != 0 {
		return t
	}
	return time.Now().Unix()
}

// startCoarseClock counts one more live Proxy and starts the ticker for the first.
func startCoarseClock() {
	coarse.mu.Lock()
	defer coarse.mu.Unlock()
	coarse.users++
	if coarse.users > 1 {
		return
	}
	coarse.now.Store(time.Now().Unix())
	stop, done := make(chan struct{}), make(chan struct{})
	coarse.stop, coarse.done = stop, done
	go func() {
		defer close(done)
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case now := <-t.C:
				coarse.now.Store(now.Unix())
			}
		}
	}()
}

// stopCoarseClock counts one Proxy less and stops the ticker after the last.
func stopCoarseClock() {
	coarse.mu.Lock()
	defer coarse.mu.Unlock()
	coarse.users--
	if coarse.users > 0 {
		return
	}
	close(coarse.stop)
	<-coarse.done
	coarse.now.Store(0)
}
