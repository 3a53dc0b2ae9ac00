package balance

import (
	"math"
	"sync"
	"testing"
	"time"
)

// TestPeakEWMA walks one estimate through scripted samples; want is computed by hand from
// the rule: a higher sample replaces the estimate, a lower one is blended with the weight
// exp(-elapsed/tau) kept on the old estimate; Value decays toward 0 after the last sample.
func TestPeakEWMA(t *testing.T) {
	const tau = 10 * time.Second
	d := func(elapsed time.Duration) float64 { return math.Exp(-float64(elapsed) / float64(tau)) }
	type step struct {
		observe bool
		rtt     time.Duration
		now     time.Duration
		want    float64 // Value(now) after the step, seconds
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{"zero value is unknown", []step{{now: time.Second, want: 0}}},
		{"first sample is taken whole", []step{{true, 20 * time.Millisecond, time.Second, 0.020}}},
		{"peak jumps up at once", []step{
			{true, 20 * time.Millisecond, time.Second, 0.020},
			{true, 300 * time.Millisecond, time.Second + time.Millisecond, 0.300},
		}},
		{"lower sample blends by elapsed", []step{
			{true, 100 * time.Millisecond, time.Second, 0.100},
			{true, 50 * time.Millisecond, 6 * time.Second, 0.100*d(5*time.Second) + 0.050*(1-d(5*time.Second))},
		}},
		{"same-instant lower sample is ignored", []step{
			{true, 100 * time.Millisecond, time.Second, 0.100},
			{true, 10 * time.Millisecond, time.Second, 0.100},
		}},
		{"older now counts only as a peak", []step{
			{true, 100 * time.Millisecond, 5 * time.Second, 0.100},
			{true, 10 * time.Millisecond, 4 * time.Second, 0.100},
			{true, 200 * time.Millisecond, 4 * time.Second, 0.200},
		}},
		{"value decays toward 0 while idle", []step{
			{true, 800 * time.Millisecond, time.Second, 0.800},
			{now: 11 * time.Second, want: 0.800 * d(10*time.Second)},
			{now: 61 * time.Second, want: 0.800 * d(60*time.Second)},
		}},
		{"idle decay does not change the stored estimate", []step{
			{true, 800 * time.Millisecond, time.Second, 0.800},
			{now: 61 * time.Second, want: 0.800 * d(60*time.Second)},
			// A fast sample after a long silence replaces the old figure almost entirely.
			{true, 10 * time.Millisecond, 61 * time.Second, 0.800*d(60*time.Second) + 0.010*(1-d(60*time.Second))},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var p PeakEWMA
			for n, s := range tc.steps {
				if s.observe {
					p.Observe(s.rtt, s.now)
				}
				if got := p.Value(s.now); math.Abs(got-s.want) > 1e-12 {
					t.Fatalf("step %d: Value = %.15g, want %.15g", n, got, s.want)
				}
			}
		})
	}
}

// TestPeakEWMATau: a shorter tau forgets faster; Reset forgets everything.
func TestPeakEWMATau(t *testing.T) {
	fast, slow := PeakEWMA{Tau: time.Second}, PeakEWMA{}
	for _, p := range []*PeakEWMA{&fast, &slow} {
		p.Observe(time.Second, time.Second)
		p.Observe(10*time.Millisecond, 2*time.Second)
	}
	if f, s := fast.Value(2*time.Second), slow.Value(2*time.Second); !(f < s) {
		t.Fatalf("tau 1 s gave %g, tau 10 s gave %g; want the first lower", f, s)
	}
	fast.Reset()
	if v := fast.Value(3 * time.Second); v != 0 {
		t.Fatalf("after Reset: %g, want 0", v)
	}
}

// TestPeakEWMAConcurrent observes from several goroutines (meaningful under -race): the peak
// of all samples must survive, since no elapsed time passes after the last timestamp.
func TestPeakEWMAConcurrent(t *testing.T) {
	var p PeakEWMA
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for k := 0; k < 1000; k++ {
				p.Observe(time.Duration(1+k%50)*time.Millisecond, time.Duration(k)*time.Millisecond)
				p.Value(time.Duration(k) * time.Millisecond)
			}
		}(g)
	}
	wg.Wait()
	// Whatever the interleaving, the estimate stays within the samples' range.
	if v := p.Value(999 * time.Millisecond); v < 0.001 || v > 0.050 {
		t.Fatalf("estimate %g outside the samples' range [0.001, 0.050]", v)
	}
	p.Observe(time.Second, 999*time.Millisecond)
	if v := p.Value(999 * time.Millisecond); v != 1 {
		t.Fatalf("a 1 s peak gave %g", v)
	}
}

func BenchmarkPeakEWMALocal(b *testing.B) {
	b.ReportAllocs()
	var p PeakEWMA
	now := time.Duration(0)
	for n := 0; n < b.N; n++ {
		now += time.Microsecond
		p.Observe(time.Duration(1+n&15)*time.Millisecond, now)
	}
}
