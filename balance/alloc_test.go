package balance_test

import (
	"fmt"
	"strings"
	"testing"

	"ballast/balance"
	"ballast/balance/balancetest"
)

// TestPickAllocs pins every algorithm's Pick at zero allocations: with and without backups
// (the tier wrapper), with a tried set, equal and unequal weights, and for load-aware
// algorithms with the request start and finish that feed their Tracker.
func TestPickAllocs(t *testing.T) {
	shapes := []struct {
		name    string
		n       int
		backups int
		weight  func(i int) int
	}{
		{"equal", 50, 0, func(int) int { return 1 }},
		{"weighted", 50, 0, func(i int) int { return 1 + i%7 }},
		{"with backups", 20, 5, func(i int) int { return 1 + i%3 }},
		{"two", 2, 0, func(i int) int { return 1 + i }},
	}
	for _, a := range balance.Algorithms() {
		for _, s := range shapes {
			t.Run(a.Name+"/"+s.name, func(t *testing.T) {
				bs := make([]balance.Backend, s.n+s.backups)
				for i := range bs {
					bs[i] = balance.Backend{ID: fmt.Sprintf("b%d", i), Weight: s.weight(i), Backup: i >= s.n}
				}
				load := balancetest.NewLoad(len(bs))
				p, err := a.New(bs, balance.Options{Load: load})
				if err != nil {
					if strings.Contains(err.Error(), "not implemented") {
						t.Skip(err)
					}
					t.Fatal(err)
				}
				load.Track(p)
				var tried balance.Tried
				tried.Add(0)
				key := uint64(0)
				allocs := testing.AllocsPerRun(500, func() {
					key += 0x9e3779b97f4a7c15
					i, err := p.Pick(key, tried)
					if err != nil {
						t.Fatal(err)
					}
					if a.Caps.NeedsLoad {
						load.Start(i)
						load.Finish(i)
					}
				})
				if allocs != 0 {
					t.Errorf("%s: %.1f allocations per pick, want 0", a.Name, allocs)
				}
			})
		}
	}
}
