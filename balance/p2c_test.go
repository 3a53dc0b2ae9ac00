package balance

import (
	"fmt"
	"math"
	"math/big"
	"testing"
)

// TestP2CAliasTableExact: the alias table's shares equal the weights' shares, computed in
// exact rational arithmetic from the integer thresholds.
func TestP2CAliasTableExact(t *testing.T) {
	for _, w := range [][]int64{
		{1, 2}, {1, 2, 3, 4}, {7, 1, 1, 1, 1, 1, 1, 1}, {100, 1, 3}, {1, 1, 1, 1000000},
		{3, 5, 7, 11, 13, 17, 19, 23, 29, 31},
	} {
		t.Run(fmt.Sprint(w), func(t *testing.T) {
			alias, accept := twoChoicesAlias(w)
			n := len(w)
			two64 := new(big.Rat).SetInt(new(big.Int).Lsh(big.NewInt(1), 64))
			share := make([]*big.Rat, n)
			for k := range share {
				share[k] = new(big.Rat)
			}
			for k := 0; k < n; k++ {
				keep := new(big.Rat).SetInt(new(big.Int).SetUint64(accept[k]))
				keep.Quo(keep, two64)
				if accept[k] == math.MaxUint64 {
					keep.SetInt64(1)
				}
				other := new(big.Rat).Sub(big.NewRat(1, 1), keep)
				share[k].Add(share[k], keep)
				share[int(alias[k])].Add(share[int(alias[k])], other)
			}
			var total int64
			for _, x := range w {
				total += x
			}
			for k := range w {
				got, _ := new(big.Rat).Quo(share[k], big.NewRat(int64(n), 1)).Float64()
				want := float64(w[k]) / float64(total)
				if math.Abs(got-want) > 1e-15 {
					t.Fatalf("member %d: share %.17g, want %.17g", k, got, want)
				}
			}
		})
	}
}

// TestP2CWeightedShares: idle members (every request finishes at once) share the picks in
// proportion to their weights, through the weighted draws; equal weights share evenly.
func TestP2CWeightedShares(t *testing.T) {
	for _, alg := range []string{"p2c", "ewma"} {
		for _, weights := range [][]int{{1, 2, 3, 4}, {1, 1, 1}, {10, 1}} {
			if alg == "ewma" && weights[0] != weights[1] {
				continue // ewma's +1 favours heavy idle members: see TestEWMAIdleIsSED
			}
			t.Run(fmt.Sprint(alg, weights), func(t *testing.T) {
				bs := laBackends(weights...)
				l := newLALoad(len(bs))
				p := laNew(t, alg, bs, l, 42)
				const picks = 100000
				count := make([]int, len(bs))
				for n := 0; n < picks; n++ {
					i, err := p.Pick(0, Tried{})
					if err != nil {
						t.Fatal(err)
					}
					count[i]++
				}
				total := 0
				for _, w := range weights {
					total += w
				}
				// With idle members, the winner of two draws is the first draw, so the
				// share is the weight's; 2% absolute is > 6 sigma at 100k picks.
				for i, w := range weights {
					got, want := float64(count[i])/picks, float64(w)/float64(total)
					if math.Abs(got-want) > 0.02 {
						t.Fatalf("member %d: share %.3f, want %.3f (%v)", i, got, want, count)
					}
				}
			})
		}
	}
}

// TestP2CLoadPerWeight: of two members the lower inflight/weight wins whenever both are drawn,
// which with two members is every pick.
func TestP2CLoadPerWeight(t *testing.T) {
	for _, tc := range []struct {
		name     string
		weights  []int
		inflight []int
		want     int
	}{
		{"fewer in flight", []int{1, 1}, []int{3, 1}, 1},
		{"2 of weight 4 beats 1 of weight 1", []int{1, 4}, []int{1, 2}, 1},
		{"1 of weight 1 loses to 1 of weight 3", []int{3, 1}, []int{1, 1}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bs := laBackends(tc.weights...)
			l := newLALoad(len(bs))
			for i, n := range tc.inflight {
				l.set(i, int64(n))
			}
			p := laNew(t, "p2c", bs, l, 9)
			for n := 0; n < 200; n++ {
				if got, err := p.Pick(0, Tried{}); err != nil || got != tc.want {
					t.Fatalf("pick %d: got %d, %v; want %d", n, got, err, tc.want)
				}
			}
		})
	}
}

// TestP2CScanFallback: when nearly every member is Full the redraws give up and the scan
// still finds the one usable member, every time.
func TestP2CScanFallback(t *testing.T) {
	for _, alg := range []string{"p2c", "ewma"} {
		t.Run(alg, func(t *testing.T) {
			ws := make([]int, 200)
			for i := range ws {
				ws[i] = 1 + i%3
			}
			bs := laBackends(ws...)
			l := newLALoad(len(bs))
			for i := range bs {
				l.setFull(i, i != 137)
			}
			p := laNew(t, alg, bs, l, 5)
			for n := 0; n < 100; n++ {
				if i, err := p.Pick(0, Tried{}); err != nil || i != 137 {
					t.Fatalf("got %d, %v; want 137", i, err)
				}
			}
			l.setFull(137, false)
			if _, err := p.Pick(0, laTried(137)); err != ErrBusy {
				t.Fatalf("got %v, want ErrBusy", err)
			}
		})
	}
}
