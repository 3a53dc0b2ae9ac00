package balance

import (
	"fmt"
	"testing"
)

// TestByBusynessApacheTable: with equal busy counts bybusyness is byrequests; the seed's
// table for four workers of lbfactor 25 gives the lbstatus before every pick and the winner.
func TestByBusynessApacheTable(t *testing.T) {
	bs := laBackends(25, 25, 25, 25)
	l := newLALoad(4)
	p := laNew(t, "bybusyness", bs, l, 1)
	sr := p.(LBStatusReporter)
	table := []struct {
		before [4]int64
		chosen int
	}{
		{[4]int64{0, 0, 0, 0}, 0},
		{[4]int64{-75, 25, 25, 25}, 1},
		{[4]int64{-50, -50, 50, 50}, 2},
		{[4]int64{-25, -25, -25, 75}, 3},
		{[4]int64{0, 0, 0, 0}, 0},
		{[4]int64{-75, 25, 25, 25}, 1},
		{[4]int64{-50, -50, 50, 50}, 2},
	}
	for n, row := range table {
		for i, want := range row.before {
			if got, ok := sr.LBStatus(i); !ok || got != want {
				t.Fatalf("loop %d: lbstatus[%d] = %d, %v; want %d", n, i, got, ok, want)
			}
		}
		i, err := p.Pick(0, Tried{})
		if err != nil || i != row.chosen {
			t.Fatalf("loop %d: chose %d, %v; want %d", n, i, err, row.chosen)
		}
		// Every request finishes before the next: busy stays equal.
		l.start(i)
		l.finish(i)
	}
	if _, ok := sr.LBStatus(9); ok {
		t.Fatal("LBStatus reported a backend outside the tier")
	}
}

// TestByBusynessMatchesSWRR: with equal busy counts and unequal weights the order is
// byrequests' (the swrr reference), pick for pick.
func TestByBusynessMatchesSWRR(t *testing.T) {
	bs := laBackends(5, 1, 1, 3, 2)
	l := newLALoad(len(bs))
	p := laNew(t, "bybusyness", bs, l, 1)
	ref, _ := New("swrr", bs, Options{})
	for n := 0; n < 100; n++ {
		got, _ := p.Pick(0, Tried{})
		want, _ := ref.Pick(0, Tried{})
		if got != want {
			t.Fatalf("pick %d: %d, swrr says %d", n, got, want)
		}
	}
}

// TestByBusynessWeightsOnlyBreakTies: busy counts are compared raw, not per weight (Apache),
// so a heavy member with one request in flight loses to a light idle one.
func TestByBusynessWeightsOnlyBreakTies(t *testing.T) {
	for _, tc := range []struct {
		name     string
		weights  []int
		inflight []int
		want     int
	}{
		{"busy heavy loses", []int{100, 1}, []int{1, 0}, 1},
		{"lowest busy wins", []int{1, 1, 1}, []int{3, 1, 2}, 1},
		{"tie: higher lbstatus (heavier on the first pick)", []int{1, 4, 2}, []int{2, 2, 2}, 1},
		{"busy light loses to heavy", []int{1, 100}, []int{5, 4}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bs := laBackends(tc.weights...)
			l := newLALoad(len(bs))
			for i, n := range tc.inflight {
				l.set(i, int64(n))
			}
			p := laNew(t, "bybusyness", bs, l, 1)
			if got, err := p.Pick(0, Tried{}); err != nil || got != tc.want {
				t.Fatalf("got %d, %v; want %d", got, err, tc.want)
			}
		})
	}
}

// TestByBusynessUnusableEarnNoCredit: a Full or tried member is not credited, like a disabled
// Apache worker, so it does not come back with a burst.
func TestByBusynessUnusableEarnNoCredit(t *testing.T) {
	bs := laBackends(1, 1, 1)
	l := newLALoad(3)
	p := laNew(t, "bybusyness", bs, l, 1)
	sr := p.(LBStatusReporter)
	l.setFull(2, true)
	var got []int
	for n := 0; n < 4; n++ {
		i, _ := p.Pick(0, laTried())
		got = append(got, i)
	}
	if s, _ := sr.LBStatus(2); s != 0 {
		t.Fatalf("full member's lbstatus %d, want 0", s)
	}
	if want := "[0 1 0 1]"; fmt.Sprint(got) != want {
		t.Fatalf("picks %v, want %v", got, want)
	}
}
