package balance

import (
	"fmt"
	"testing"
)

// TestWLCRule checks the lowest overhead/weight (overhead = inflight×256 at L7).
func TestWLCRule(t *testing.T) {
	for _, tc := range []struct {
		name     string
		weights  []int
		inflight []int
		want     int
	}{
		{"fewest", []int{1, 1, 1}, []int{2, 0, 1}, 1},
		{"1 of weight 2 beats 1 of weight 1", []int{1, 2}, []int{1, 1}, 1},
		{"0 of weight 1 beats 1 of weight 2", []int{2, 1}, []int{1, 0}, 1},
		{"3 of weight 4 beats 1 of weight 1", []int{1, 4}, []int{1, 3}, 1},
		{"large counts, no overflow", []int{1000, 999}, []int{1 << 40, 1 << 40}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bs := laBackends(tc.weights...)
			l := newLALoad(len(bs))
			for i, n := range tc.inflight {
				l.set(i, int64(n))
			}
			p := laNew(t, "wlc", bs, l, 1)
			for n := 0; n < 5; n++ { // whatever the rotating start
				if got, err := p.Pick(0, Tried{}); err != nil || got != tc.want {
					t.Fatalf("got %d, %v; want %d", got, err, tc.want)
				}
			}
		})
	}
}

// TestWLCRotatingTies: idle members share the load; every window of n picks hits each once.
func TestWLCRotatingTies(t *testing.T) {
	bs := laBackends(2, 2, 2, 2, 2)
	l := newLALoad(len(bs))
	p := laNew(t, "wlc", bs, l, 1)
	for round := 0; round < 4; round++ {
		seen := make([]int, len(bs))
		for n := 0; n < len(bs); n++ {
			i, err := p.Pick(0, Tried{})
			if err != nil {
				t.Fatal(err)
			}
			seen[i]++ // finishes at once: everybody stays idle
		}
		if fmt.Sprint(seen) != "[1 1 1 1 1]" {
			t.Fatalf("round %d: %v, want one pick each", round, seen)
		}
	}
}
