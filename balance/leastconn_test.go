package balance

import (
	"fmt"
	"testing"
)

// TestLeastConnRule checks the key (inflight+1)/weight with small scripted loads.
func TestLeastConnRule(t *testing.T) {
	for _, tc := range []struct {
		name     string
		weights  []int
		inflight []int
		want     int
	}{
		{"idle: heavier first (unlike HAProxy's key 0)", []int{1, 3, 2}, []int{0, 0, 0}, 1},
		{"fewest in flight", []int{1, 1, 1}, []int{2, 0, 1}, 1},
		{"per weight: 1 of 4 beats 0 of 1", []int{4, 1}, []int{1, 0}, 0},    // 2/4 < 1/1
		{"per weight: 2 of 2 loses to 0 of 1", []int{2, 1}, []int{2, 0}, 1}, // 3/2 > 1/1
		{"equal keys: SWRR first appearance", []int{1, 2}, []int{1, 3}, 1},  // 2/1 = 4/2, heavier first
	} {
		t.Run(tc.name, func(t *testing.T) {
			bs := laBackends(tc.weights...)
			l := newLALoad(len(bs))
			for i, n := range tc.inflight {
				l.set(i, int64(n))
			}
			p := laNew(t, "leastconn", bs, l, 1)
			if got, err := p.Pick(0, Tried{}); err != nil || got != tc.want {
				t.Fatalf("got %d, %v; want %d", got, err, tc.want)
			}
		})
	}
}

// TestLeastConnUpdateHeals: a pick claims a slot at once; the authoritative Update then
// overrides the claim, e.g. when the request was never dispatched.
func TestLeastConnUpdateHeals(t *testing.T) {
	bs := laBackends(1, 1)
	l := newLALoad(2)
	p := laNew(t, "leastconn", bs, l, 1)
	var got []int
	for n := 0; n < 4; n++ {
		i, _ := p.Pick(0, Tried{})
		got = append(got, i)
		l.set(i, 0) // the owner reports that nothing was dispatched after all
	}
	// Each report restamps the member, so the other one goes first next time: alternation.
	if want := "[0 1 0 1]"; fmt.Sprint(got) != want {
		t.Fatalf("picks %v, want %v", got, want)
	}
	if h := laHeapOf(p); h.heap[0].num != 1 || h.heap[1].num != 1 {
		t.Fatalf("keys %d %d after healing, want 1 1", h.heap[0].num, h.heap[1].num)
	}
}
