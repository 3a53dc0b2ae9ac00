package lab

import (
	"math"
	"strings"
	"testing"

	"ballast/lab/loadgen"
)

// TestSpreadBand: a row outside the model's range by no more than its measured spread is
// reported as within the lab's repeatability (never as inside), one beyond it as outside: the
// band is the range with each end moved out by the spread and not a hair more, and the
// model's range itself is left as it was.
func TestSpreadBand(t *testing.T) {
	for _, c := range []struct {
		measured, spread float64
		want             string
		inside, within   bool
	}{
		{102, 3, "yes, width 4 req/s (3.9%); repeatability 3 req/s", true, false},
		{97, 3, "no, but within the lab's repeatability: 3 req/s below the model's range, its spread 3 req/s", false, true},
		{107, 3, "no, but within the lab's repeatability: 3 req/s above the model's range", false, true},
		{96.9, 3, "no: 3 req/s below; width 4 req/s (3.9%); repeatability 3 req/s", false, false},
		{107.1, 3, "no: 3 req/s above", false, false},
		{99.9, 0, "no: 0 req/s below; width 4 req/s (3.9%)", false, false},
	} {
		row := Result{ThroughputRPS: c.measured, Predicted: Figures{ThroughputRPS: 102, Range: &FigureRange{ThroughputRPS: [2]float64{100, 104}, Runs: 20}}}
		row.Detail.Spread = c.spread
		inside, judged := judgeRange(Throughput, &row)
		g := row.Detail.RangeGoal
		if !judged || inside != c.inside || *row.Detail.InRange != c.inside || !strings.HasPrefix(g, c.want) {
			t.Errorf("%v with spread %v: inside %v %q, want %v %q", c.measured, c.spread, inside, g, c.inside, c.want)
		}
		if w := row.Detail.WithinSpread; (c.spread > 0) != (w != nil) || w != nil && *w != c.within {
			t.Errorf("%v with spread %v: within %v, want %v", c.measured, c.spread, w, c.within)
		}
		if c.within && (strings.Contains(g, "yes") || strings.Contains(g, "inside")) {
			t.Errorf("%v: %q: within the repeatability must not read as inside", c.measured, g)
		}
		if c.spread == 0 && strings.Contains(g, "repeatab") {
			t.Errorf("%v without a spread: %q", c.measured, g)
		}
		if row.Predicted.Range.ThroughputRPS != [2]float64{100, 104} {
			t.Errorf("the model's range moved: %v", row.Predicted.Range.ThroughputRPS)
		}
	}
	// A makespan's spread keeps a tenth of a millisecond.
	mk := Result{MakespanS: 5.012, Predicted: Figures{MakespanS: 5.005, Range: &FigureRange{MakespanS: [2]float64{5.002, 5.009}, Runs: 100}}}
	mk.Detail.Spread = 0.0003
	if in, _ := judgeRange(Makespan, &mk); in || !strings.HasPrefix(mk.Detail.RangeGoal, "no: 0.003 s above; width 0.007 s (0.1%); repeatability 0.0003 s") {
		t.Errorf("makespan: %v %q", in, mk.Detail.RangeGoal)
	}
	if b := spreadBand([2]float64{5.002, 5.009}, 0.002); math.Abs(b[0]-5.0) > 1e-12 || math.Abs(b[1]-5.011) > 1e-12 {
		t.Errorf("band %v, want [5.000, 5.011]", b)
	}
	// The count says which is which.
	rows := []Result{}
	for _, x := range []float64{102, 97, 90} {
		r := Result{Algorithm: "r", ThroughputRPS: x, Predicted: Figures{ThroughputRPS: 102, Range: &FigureRange{ThroughputRPS: [2]float64{100, 104}, Runs: 20}}}
		r.Detail.Spread = 3
		rows = append(rows, r)
	}
	if note := rangeNote(&Report{Metric: Throughput, Results: rows[:1]}); !strings.Contains(note, "1 of 1 rows measured inside the model's range (the goal: all) (1 of 1 rows have a measured spread") || strings.Contains(note, "outside") {
		t.Errorf("all inside: note %q", note)
	}
	note := rangeNote(&Report{Metric: Throughput, Results: rows})
	for _, want := range []string{"1 of 3 rows measured inside the model's range", "1 of the 2 outside within the lab's repeatability of it", "3 of 3 rows have one), 1 outside that too"} {
		if !strings.Contains(note, want) {
			t.Errorf("note %q lacks %q", note, want)
		}
	}
}

// trace builds a run's trace: done[i] is response i's completion (ns since the begin), on
// backend be[i], carrying index i.
func trace(done []int64, be []string) *loadgen.Result {
	r := &loadgen.Result{}
	for i, d := range done {
		r.Trace = append(r.Trace, loadgen.Event{Index: int64(i), Sent: d - 1, Done: d, OK: true, Backend: be[i%len(be)]})
		r.Seconds = max(r.Seconds, float64(d)/1e9)
	}
	return r
}

// TestHalvesSpread: 1000 responses in the first half second and 900 in the second are halves
// of 2000 and 1800 req/s, a spread of 200 / sqrt 2; failed requests do not count; the larger
// of that and the capacities' share of the row's figure is the row's spread.
func TestHalvesSpread(t *testing.T) {
	var done []int64
	for i := range 1000 {
		done = append(done, int64(i)*500_000_000/1000+1)
	}
	for i := range 900 {
		done = append(done, 500_000_000+int64(i+1)*500_000_000/900)
	}
	res := trace(done, []string{"A"})
	res.Trace = append(res.Trace, loadgen.Event{Index: 5000, Done: 100, OK: false})
	s, h1, h2, ok := halvesSpread(res)
	if !ok || math.Abs(h1-2000) > 1e-6 || math.Abs(h2-1800) > 1e-6 || math.Abs(s-200/math.Sqrt2) > 1e-6 {
		t.Errorf("halves %v %v spread %v ok %v, want 2000, 1800, %v", h1, h2, s, ok, 200/math.Sqrt2)
	}
	if _, _, _, ok := halvesSpread(&loadgen.Result{}); ok {
		t.Error("an untraced run gave a spread")
	}
	before, after := map[string]float64{"A": 2831, "B": 1250}, map[string]float64{"A": 2832, "B": 1250}
	share := capacitySpread(before, after)
	if math.Abs(share-1.0/4082) > 1e-12 {
		t.Errorf("capacity share %v, want 1/4082", share)
	}
	row := Result{ThroughputRPS: 1900}
	throughputSpread(&row, halvesOf(res), share, before, after)
	if math.Abs(row.Detail.Spread-200/math.Sqrt2) > 1e-6 || !strings.Contains(row.Detail.SpreadFrom, "A 2831.0 then 2832.0") {
		t.Errorf("spread %v from %q", row.Detail.Spread, row.Detail.SpreadFrom)
	}
	// Halves that agree: the capacities' share of the figure is the spread.
	even := trace([]int64{1e8, 2e8, 3e8, 4e8}, []string{"A"})
	row = Result{ThroughputRPS: 4082}
	throughputSpread(&row, halvesOf(even), share, before, after)
	if math.Abs(row.Detail.Spread-1) > 1e-9 {
		t.Errorf("spread %v, want the capacities' 1 req/s", row.Detail.Spread)
	}
}

// TestMakespanSpread: two runs of one row that sent every backend the same requests in the
// same order give every row their makespans' difference as its spread; runs that sent them
// differently give none, and the note says why.
func TestMakespanSpread(t *testing.T) {
	sfx := []string{"wait=0", "wait=1"}
	a := trace([]int64{1e9, 2e9, 3e9, 4e9}, []string{"A", "B"})
	b := trace([]int64{1e9, 2e9, 3e9, 4.003e9}, []string{"A", "B"})
	r := &Report{Results: []Result{{Algorithm: "x"}, {Algorithm: "y"}}}
	note := makespanSpread(r, a, b, "roundrobin", sfx)
	for _, row := range r.Results {
		if math.Abs(row.Detail.Spread-0.003) > 1e-9 || !strings.Contains(row.Detail.SpreadFrom, "roundrobin row 4.0030 s") {
			t.Errorf("%s: spread %v from %q (note %q)", row.Algorithm, row.Detail.Spread, row.Detail.SpreadFrom, note)
		}
	}
	// Request 2 (wait=0) went to B instead of A: different work.
	c := trace([]int64{1e9, 2e9, 3e9, 4e9}, []string{"A", "B"})
	c.Trace[2].Backend = "B"
	r = &Report{Results: []Result{{Algorithm: "x"}}}
	if note := makespanSpread(r, a, c, "roundrobin", sfx); r.Results[0].Detail.Spread != 0 || !strings.Contains(note, "not stated") {
		t.Errorf("different work: spread %v, note %q", r.Results[0].Detail.Spread, note)
	}
	// Without suffixes (every request alike) only the counts per backend matter.
	if sameWork(a, c, nil) {
		t.Error("3 requests on B against 2: the same work?")
	}
	d := trace([]int64{1e9, 2e9, 3e9, 4e9}, []string{"B", "A"})
	if !sameWork(a, d, nil) || sameWork(a, d, sfx) {
		t.Errorf("the same requests per backend in another order: same without costs %v, with %v; want true, false", sameWork(a, d, nil), sameWork(a, d, sfx))
	}
}
