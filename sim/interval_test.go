package sim

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestStudentT(t *testing.T) {
	for _, c := range []struct{ p, nu, want float64 }{
		{0.995, 19, 2.8609}, {0.995, 10, 3.1693}, {0.975, 30, 2.0423}, {0.995, 99, 2.6264}, {0.9995, 999, 3.3003},
	} {
		if got := studentT(c.p, c.nu); math.Abs(got-c.want) > 1e-3*c.want {
			t.Errorf("t(%g, %g) = %.4f, want %.4f", c.p, c.nu, got, c.want)
		}
	}
}

func TestQuantum(t *testing.T) {
	for _, c := range []struct {
		name string
		want time.Duration
	}{{"slow-backend", 5 * time.Second}, {"variable-cost", time.Second}, {"heterogeneous", 2 * time.Microsecond}} {
		sc, err := Lookup(c.name)
		if err != nil {
			t.Fatal(err)
		}
		if got := Quantum(sc); got != c.want {
			t.Errorf("%s: quantum %v, want %v", c.name, got, c.want)
		}
	}
	sc := Scenario{Backends: []Backend{{ID: "A", Service: Fixed(time.Second)}, {ID: "B", Service: Exponential(time.Second)}}}
	if got := Quantum(sc); got != 0 {
		t.Errorf("a random service: quantum %v, want 0", got)
	}
}

func TestIntervalQuantized(t *testing.T) {
	// One run reaches 35 s with a small residual; others show the residuals 35 s may have.
	xs := []float64{5.002, 5.009, 10.003, 15.004, 20.001, 35.001}
	got := Interval(xs, 5)
	r := interval([]float64{0.002, 0.009, 0.003, 0.004, 0.001, 0.001}, 0)
	if want := [2]float64{5 + r[0], 35 + r[1]}; math.Abs(got[0]-want[0]) > 1e-9 || math.Abs(got[1]-want[1]) > 1e-9 {
		t.Errorf("Interval = %v, want %v", got, want)
	}
	if got[1] < 35.009 || got[0] > 5.001 {
		t.Errorf("Interval = %v: the top quantum's edge must take the largest residual of all runs (0.009)", got)
	}
	// Residuals as wide as the quantum: no quantization, at least the runs' extremes.
	xs = []float64{1.0, 2.4, 3.1, 4.6}
	got = Interval(xs, 1)
	if got[0] > 1.0 || got[1] < 4.6 || got[1]-got[0] <= 3.6 {
		t.Errorf("unquantized Interval = %v, want wider than [1, 4.6]", got)
	}
}

// TestIntervalCoverage checks that the interval of 20 runs of a normal figure holds a fresh
// run as often as Coverage says, where the extremes alone hold it 19 times in 21.
func TestIntervalCoverage(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	const sets, n = 4000, 20
	heldPI, heldMinMax := 0, 0
	xs := make([]float64, n)
	for range sets {
		for i := range xs {
			xs[i] = 2500 + 10*r.NormFloat64()
		}
		fresh := 2500 + 10*r.NormFloat64()
		if iv := Interval(xs, 0); fresh >= iv[0] && fresh <= iv[1] {
			heldPI++
		}
		lo, hi := xs[0], xs[0]
		for _, x := range xs {
			lo, hi = min(lo, x), max(hi, x)
		}
		if fresh >= lo && fresh <= hi {
			heldMinMax++
		}
	}
	pi, mm := float64(heldPI)/sets, float64(heldMinMax)/sets
	if pi < Coverage-0.01 {
		t.Errorf("interval held %.3f of fresh runs, want about %.2f", pi, Coverage)
	}
	if mm > 0.93 {
		t.Errorf("the extremes held %.3f, want about 19/21 (the test's premise)", mm)
	}
}

// TestIntervalManyRuns: the extremes of enough runs already hold a fresh run as often as
// Coverage asks; the interval is then theirs, even for a skewed figure.
func TestIntervalManyRuns(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	xs := make([]float64, 1000)
	for i := range xs {
		xs[i] = 5 + 0.001*r.ExpFloat64()
	}
	got := Interval(xs, 0)
	if want := [2]float64{slices.Min(xs), slices.Max(xs)}; got != want {
		t.Errorf("Interval of 1000 runs = %v, want their extremes %v", got, want)
	}
	if got := Interval(xs[:20], 0); got[0] >= slices.Min(xs[:20]) {
		t.Errorf("Interval of 20 runs = %v: want the normal interval's wider low end", got)
	}
}

// TestIntervalNeverNegative: a few runs spread widely about a small figure get a normal
// interval reaching below 0, which no makespan or rate can; the low end stops at 0, while a
// quantized figure's residuals keep their sign.
func TestIntervalNeverNegative(t *testing.T) {
	if got := Interval([]float64{0.001, 0.002, 0.030}, 0); got[0] != 0 || got[1] < 0.030 {
		t.Errorf("Interval = %v, want [0, >= 0.030]", got)
	}
	// Runs just below and above 5 s: residuals -0.001 to 0.004.
	if got := Interval([]float64{4.999, 5.004, 10.002}, 5); got[0] >= 4.999 || got[0] <= 0 {
		t.Errorf("Interval = %v, want a low end below 4.999 s (a residual's normal interval)", got)
	}
}
