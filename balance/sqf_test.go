package balance

import (
	"fmt"
	"testing"
)

// TestSQFLighttpdWalkThrough is the seed's example: A1 is busy with a 10 s job, A2 and A3 are
// free; the following requests go to A2 and A3 and spread over them, none to A1 until its job
// finishes, after which A1 takes its turn again.
func TestSQFLighttpdWalkThrough(t *testing.T) {
	for _, window := range []int{1, 2} { // requests outstanding at once on the fast members
		t.Run(fmt.Sprintf("window=%d", window), func(t *testing.T) {
			bs := []Backend{{ID: "A1", Weight: 1}, {ID: "A2", Weight: 1}, {ID: "A3", Weight: 1}}
			l := newLALoad(3)
			l.set(0, 1) // A1's 10 s job, in flight before the picker was built
			p := laNew(t, "sqf", bs, l, 1)
			count := make([]int, 3)
			var outstanding []int
			for n := 0; n < 100; n++ {
				i, err := p.Pick(0, Tried{})
				if err != nil {
					t.Fatal(err)
				}
				count[i]++
				l.start(i)
				outstanding = append(outstanding, i)
				if len(outstanding) >= window {
					l.finish(outstanding[0])
					outstanding = outstanding[1:]
				}
			}
			if count[0] != 0 || count[1] != 50 || count[2] != 50 {
				t.Fatalf("A1 A2 A3 got %v, want [0 50 50]", count)
			}
			for _, i := range outstanding {
				l.finish(i)
			}
			l.finish(0) // the 10 s job ends
			seen := make([]int, 3)
			for n := 0; n < 3; n++ {
				i, _ := p.Pick(0, Tried{})
				seen[i]++
				l.start(i)
			}
			if fmt.Sprint(seen) != "[1 1 1]" {
				t.Fatalf("after A1 finished, three picks went %v, want one each", seen)
			}
		})
	}
}

// TestSQFTies: equal weights and equal loads give exact round robin; equal keys go first in,
// first out, so the member that finished longest ago goes first.
func TestSQFTies(t *testing.T) {
	bs := laBackends(1, 1, 1, 1)
	l := newLALoad(4)
	p := laNew(t, "sqf", bs, l, 1)
	var got []int
	for n := 0; n < 8; n++ { // nothing finishes: keys rise together
		i, _ := p.Pick(0, Tried{})
		l.start(i)
		got = append(got, i)
	}
	if want := "[0 1 2 3 0 1 2 3]"; fmt.Sprint(got) != want {
		t.Fatalf("picks %v, want %v", got, want)
	}
	// Now 3, then 1, then 2 finish one request each: they go first in that order.
	for _, i := range []int{3, 1, 2} {
		l.finish(i)
	}
	got = got[:0]
	for n := 0; n < 3; n++ {
		i, _ := p.Pick(0, Tried{})
		l.start(i)
		got = append(got, i)
	}
	if want := "[3 1 2]"; fmt.Sprint(got) != want {
		t.Fatalf("picks %v, want %v", got, want)
	}
}

// TestSQFWeighted: with nothing finishing, in-flight counts follow the weights exactly at
// every full round, and a weight-0 member gets nothing.
func TestSQFWeighted(t *testing.T) {
	for _, tc := range []struct {
		weights []int
		rounds  int
	}{{[]int{3, 1}, 50}, {[]int{1, 2, 3, 4}, 30}, {[]int{5, 0, 5}, 10}} {
		t.Run(fmt.Sprint(tc.weights), func(t *testing.T) {
			bs := laBackends(tc.weights...)
			l := newLALoad(len(bs))
			p := laNew(t, "sqf", bs, l, 1)
			total := 0
			for _, w := range tc.weights {
				total += w
			}
			for n := 0; n < total*tc.rounds; n++ {
				i, err := p.Pick(0, Tried{})
				if err != nil {
					t.Fatal(err)
				}
				l.start(i)
			}
			for i, w := range tc.weights {
				if got := l.InFlight(i); got != int64(w*tc.rounds) {
					t.Fatalf("member %d (weight %d): %d in flight, want %d", i, w, got, w*tc.rounds)
				}
			}
		})
	}
}

// TestSQFClaim: picks made before any Update still spread, because Pick counts its own pick.
func TestSQFClaim(t *testing.T) {
	bs := laBackends(1, 1, 1)
	l := newLALoad(3)
	p := laNew(t, "sqf", bs, l, 1)
	l.attach(nil) // detach: no Update is ever delivered
	seen := map[int]bool{}
	for n := 0; n < 3; n++ {
		i, _ := p.Pick(0, Tried{})
		seen[i] = true
	}
	if len(seen) != 3 {
		t.Fatalf("three picks without updates hit %d members, want 3", len(seen))
	}
}
