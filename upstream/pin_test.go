package upstream

import (
	"testing"
	"time"

	"ballast/balance"
)

// TestAcquireBackendDrain: a draining backend takes pinned requests (within max_conns and its
// grace) but no balanced one; disabled, or past the grace, it takes none; Enable clears it.
func TestAcquireBackendDrain(t *testing.T) {
	clk := newFakeClock()
	spec := poolCfg("roundrobin", be("a", 1), be("b", 1))
	spec.Backends[0].MaxConns = 2
	p, err := newPool(spec, nil, clk.now)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.Drain("a"); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		b, err := p.Acquire(0, balance.Tried{})
		if err != nil || b.ID != "b" {
			t.Fatalf("a balanced pick while a drains: %v %v", b, err)
		}
		p.Release(b, time.Millisecond, false)
	}
	x, y := p.AcquireBackend("a"), p.AcquireBackend("a")
	if x == nil || y == nil {
		t.Fatal("a draining backend refused its pinned requests")
	}
	if p.AcquireBackend("a") != nil {
		t.Fatal("a pinned request passed max_conns 2")
	}
	p.Release(x, time.Millisecond, false)
	p.Release(y, time.Millisecond, false)

	if err := p.DrainFor("a", time.Minute); err != nil {
		t.Fatal(err)
	}
	if b := p.AcquireBackend("a"); b == nil {
		t.Fatal("refused within the grace")
	} else {
		p.Release(b, time.Millisecond, false)
	}
	if u := p.Backend("a").DrainUntil(); !u.Equal(clk.now().Add(time.Minute)) {
		t.Fatalf("DrainUntil %v", u)
	}
	clk.advance(time.Minute)
	if p.AcquireBackend("a") != nil {
		t.Fatal("taken after the grace ended")
	}
	if err := p.Enable("a"); err != nil {
		t.Fatal(err)
	}
	if err := p.Drain("a"); err != nil { // a later drain without a grace has none
		t.Fatal(err)
	}
	if b := p.AcquireBackend("a"); b == nil {
		t.Fatal("a new drain kept the old grace")
	} else {
		p.Release(b, time.Millisecond, false)
	}
	if err := p.Disable("a"); err != nil {
		t.Fatal(err)
	}
	if p.AcquireBackend("a") != nil {
		t.Fatal("a disabled and draining backend took a pinned request")
	}
}
