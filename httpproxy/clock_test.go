package httpproxy

import (
	"context"
	"testing"
	"time"

	"ballast/upstream"
)

// The coarse clock's goroutine runs while a Proxy is live and stops with the last one; with
// none, coarseUnix still tells the time. (No test here runs in parallel, so the count is ours.)
func TestCoarseClockStopsWithTheLastProxy(t *testing.T) {
	coarse.mu.Lock()
	before := coarse.users
	coarse.mu.Unlock()
	cfg := testConfig(testPool("p", "roundrobin", "127.0.0.1:1"))
	pool, err := upstream.NewPool(cfg.Pools[0].Spec(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	var pxs []*Proxy
	for range 2 {
		px, err := New(cfg, map[string]*upstream.Pool{"p": pool}, nil)
		if err != nil {
			t.Fatal(err)
		}
		pxs = append(pxs, px)
	}
	if coarse.now.Load() == 0 {
		t.Fatal("no ticker while proxies are live")
	}
	for _, px := range pxs {
		for range 2 { // a second Shutdown must not count twice
			if err := px.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
	}
	coarse.mu.Lock()
	after := coarse.users
	coarse.mu.Unlock()
	if after != before {
		t.Fatalf("live proxies counted %d after shutting down both, want %d", after, before)
	}
	if before == 0 && coarse.now.Load() != 0 {
		t.Fatal("the ticker still runs with no proxy live")
	}
	if d := coarseUnix() - time.Now().Unix(); d < -1 || d > 1 {
		t.Fatalf("coarseUnix is %ds off", d)
	}
}
