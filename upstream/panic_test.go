package upstream

import (
	"testing"
	"time"

	"ballast/balance"
)

// Below outlier.panic_threshold_percent of fit primaries the pool balances over every primary
// in rotation, health notwithstanding; at or above it, unfit backends get nothing. Backends
// the operator took out (disabled) stay out either way.
func TestPanicThreshold(t *testing.T) {
	tests := []struct {
		name      string
		unhealthy []string
		disabled  []string
		wantPanic bool
		want      []string // backends that must receive picks
		never     []string // backends that must not
	}{
		{"all fit", nil, nil, false, []string{"a", "b", "c", "d"}, nil},
		{"half fit: at the threshold", []string{"a", "b"}, nil, false, []string{"c", "d"}, []string{"a", "b"}},
		{"one fit: panic", []string{"a", "b", "c"}, nil, true, []string{"a", "b", "c", "d"}, nil},
		{"none fit: panic", []string{"a", "b", "c", "d"}, nil, true, []string{"a", "b", "c", "d"}, nil},
		{"disabled stays out in panic", []string{"a", "b"}, []string{"c"}, true, []string{"a", "b", "d"}, []string{"c"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := poolCfg("roundrobin", be("a", 1), be("b", 1), be("c", 1), be("d", 1))
			cfg.PanicPercent = 50
			p := mustPool(t, cfg, nil, nil)
			for _, id := range tc.unhealthy {
				if id == "a" {
					if err := p.Eject(id, time.Now().Add(time.Hour)); err != nil { // ejected counts as unfit too
						t.Fatal(err)
					}
					continue
				}
				if err := p.SetHealthy(id, false); err != nil {
					t.Fatal(err)
				}
			}
			for _, id := range tc.disabled {
				if err := p.Disable(id); err != nil {
					t.Fatal(err)
				}
			}
			if got := p.Panicking(); got != tc.wantPanic {
				t.Fatalf("Panicking() = %v, want %v", got, tc.wantPanic)
			}
			got := picks(t, p, 40)
			for _, id := range tc.want {
				if got[id] == 0 {
					t.Errorf("%s got no picks: %v", id, got)
				}
			}
			for _, id := range tc.never {
				if got[id] != 0 {
					t.Errorf("%s got %d picks, want none: %v", id, got[id], got)
				}
			}
		})
	}
}

// Without a threshold a pool never panics: with every backend unfit it has nothing to pick.
func TestNoPanicWithoutThreshold(t *testing.T) {
	p := mustPool(t, poolCfg("roundrobin", be("a", 1), be("b", 1)), nil, nil)
	for _, id := range []string{"a", "b"} {
		if err := p.SetHealthy(id, false); err != nil {
			t.Fatal(err)
		}
	}
	if p.Panicking() {
		t.Fatal("panicking without a threshold")
	}
	if _, err := p.Acquire(0, balance.Tried{}); err == nil {
		t.Fatal("picked a backend although every one is down")
	}
}
