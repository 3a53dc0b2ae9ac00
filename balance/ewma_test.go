package balance

import (
	"testing"
	"time"
)

// TestEWMACost: cost = latency × (inflight+1) / weight, and unknown latency counts as the
// other candidate's. Two members are both drawn on every pick, so the outcome is fixed.
func TestEWMACost(t *testing.T) {
	for _, tc := range []struct {
		name     string
		weights  []int
		inflight []int
		latency  []float64
		want     int // -1: both must be chosen (a tie goes to the random first draw)
	}{
		{"faster wins", []int{1, 1}, []int{0, 0}, []float64{0.100, 0.010}, 1},
		{"pending counts: 0.01×4 > 0.03×1", []int{1, 1}, []int{0, 3}, []float64{0.030, 0.010}, 0},
		{"weight divides: 0.02×1/4 < 0.01×1/1", []int{1, 4}, []int{0, 0}, []float64{0.010, 0.020}, 1},
		{"unknown is probed when less busy", []int{1, 1}, []int{0, 1}, []float64{0, 0.050}, 0},
		{"unknown does not win when busier", []int{1, 1}, []int{3, 0}, []float64{0, 0.050}, 1},
		{"unknown ties with an equally busy known", []int{1, 1}, []int{1, 1}, []float64{0.2, 0}, -1},
		{"both unknown: p2c on in-flight", []int{1, 1}, []int{2, 1}, []float64{0, 0}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bs := laBackends(tc.weights...)
			l := newLALoad(len(bs))
			for i := range bs {
				l.set(i, int64(tc.inflight[i]))
				l.setLatency(i, tc.latency[i])
			}
			p := laNew(t, "ewma", bs, l, 3)
			seen := make([]int, len(bs))
			for n := 0; n < 200; n++ {
				i, err := p.Pick(0, Tried{})
				if err != nil {
					t.Fatal(err)
				}
				seen[i]++
			}
			switch {
			case tc.want < 0 && (seen[0] == 0 || seen[1] == 0):
				t.Fatalf("tie should spread, got %v", seen)
			case tc.want >= 0 && seen[tc.want] != 200:
				t.Fatalf("picks %v, want all on %d", seen, tc.want)
			}
		})
	}
}

// TestEWMAIdleIsSED: with equal latencies and nothing in flight the cost is 1/weight, LVS's
// shortest expected delay, so a heavy idle member beats a light one every time they meet and
// takes more than its weight share at low load (here: all of it, since with two members both
// are always drawn). Under load the in-flight term takes over (see the conformance suite's
// closed loop).
func TestEWMAIdleIsSED(t *testing.T) {
	bs := laBackends(10, 1)
	l := newLALoad(2)
	l.setLatency(0, 0.01)
	l.setLatency(1, 0.01)
	p := laNew(t, "ewma", bs, l, 3)
	for n := 0; n < 100; n++ {
		if i, err := p.Pick(0, Tried{}); err != nil || i != 0 {
			t.Fatalf("pick %d: %d, %v; want 0", n, i, err)
		}
	}
	// With 9 in flight on the heavy one (cost 10/10 = 1/1) they tie; with 10 the light wins.
	l.set(0, 10)
	if i, _ := p.Pick(0, Tried{}); i != 1 {
		t.Fatalf("heavy member with 10 in flight still chosen")
	}
}

// TestEWMAProbesOnceSlowBackend ties PeakEWMA to the picker: a backend that answered slowly
// once loses every pick while its peak is fresh, and wins again once the idle decay has brought
// its estimate under the busy fast backend's, so it gets probed instead of starving.
func TestEWMAProbesOnceSlowBackend(t *testing.T) {
	bs := laBackends(1, 1)
	l := newLALoad(2)
	p := laNew(t, "ewma", bs, l, 3)
	var slow, fast PeakEWMA
	slow.Observe(time.Second, time.Second) // one 1 s answer at t = 1 s
	now := time.Second
	picksOfSlow := 0
	for step := 0; step < 120; step++ { // one pick per second, the fast one answers in 10 ms
		now += time.Second
		fast.Observe(10*time.Millisecond, now)
		l.setLatency(0, slow.Value(now))
		l.setLatency(1, fast.Value(now))
		i, err := p.Pick(0, Tried{})
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			if picksOfSlow == 0 && slow.Value(now) > 0.010 {
				t.Fatalf("slow backend picked at %v while its estimate %.4f s exceeds 0.010 s", now, slow.Value(now))
			}
			picksOfSlow++
		}
	}
	// 1 s × exp(-t/10 s) < 10 ms after about 46 s, so it must have been probed by then.
	if picksOfSlow == 0 {
		t.Fatal("the once-slow backend was never probed again")
	}
}
