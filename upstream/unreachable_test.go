package upstream

import (
	"testing"
	"time"

	"ballast/balance"
)

// TestUnreachable: a backend a data plane could not reach is out of rotation for
// UnreachableHoldoff and back after it; a longer ejection (outlier detection) is not shortened.
func TestUnreachable(t *testing.T) {
	clk := newFakeClock()
	p := mustPool(t, poolCfg("roundrobin", be("a", 1), be("b", 1)), nil, clk)
	a := p.Backend("a")
	p.Unreachable(a)
	if got, want := a.EjectedUntil(), clk.now().Add(UnreachableHoldoff); !got.Equal(want) {
		t.Fatalf("ejected until %v, want %v", got, want)
	}
	for range 10 {
		b, err := p.Acquire(0, balance.Tried{})
		if err != nil || b.ID != "b" {
			t.Fatalf("picked %v, %v while a is held off", b, err)
		}
		p.Release(b, time.Millisecond, false)
	}
	clk.advance(UnreachableHoldoff + time.Millisecond)
	p.Unreachable(p.Backend("b")) // an unrelated change republishes the snapshot at the new time
	seen := false
	for range 4 {
		b, err := p.Acquire(0, balance.Tried{})
		if err != nil {
			t.Fatal(err)
		}
		seen = seen || b.ID == "a"
		p.Release(b, time.Millisecond, false)
	}
	if !seen {
		t.Fatal("a is still out of rotation after the hold-off")
	}

	long := clk.now().Add(time.Minute)
	if err := p.Eject("a", long); err != nil {
		t.Fatal(err)
	}
	p.Unreachable(a)
	if got := a.EjectedUntil(); !got.Equal(long) {
		t.Fatalf("a hold-off shortened an ejection to %v, want %v", got, long)
	}
}
