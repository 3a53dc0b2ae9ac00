package httpcore

import (
	"testing"
	"time"
)

// The coarse clock's goroutine runs while a Core is live and stops with the last one; with
// none, coarseUnix still tells the time. (No test here runs in parallel, so the count is ours.)
func TestCoarseClockStopsWithTheLastCore(t *testing.T) {
	coarse.mu.Lock()
	before := coarse.users
	coarse.mu.Unlock()
	cores := []*Core{New(nil), New(nil)}
	if coarse.now.Load() == 0 {
		t.Fatal("no ticker while cores are live")
	}
	for _, c := range cores {
		for range 2 { // a second Close must not count twice
			c.Close()
		}
	}
	coarse.mu.Lock()
	after := coarse.users
	coarse.mu.Unlock()
	if after != before {
		t.Fatalf("live cores counted %d after closing both, want %d", after, before)
	}
	if before == 0 && coarse.now.Load() != 0 {
		t.Fatal("the ticker still runs with no core live")
	}
	if d := coarseUnix() - time.Now().Unix(); d < -1 || d > 1 {
		t.Fatalf("coarseUnix is %ds off", d)
	}
}
