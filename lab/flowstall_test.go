package lab

import (
	"slices"
	"strings"
	"testing"
	"time"

	"ballast/lab/backend"
	"ballast/lab/loadgen"
)

// TestFlowStalls builds the two clocks of eight requests: one held in Ballast for 4 ms while
// another's response waited there too from a millisecond later (a flow stall from when both
// were held), one served 10 ms by its backend (no stall: the backend's own time), one whose
// response left 0.9 ms late (the timer grain, no stall), two whose responses left 5 ms late
// with nothing else happening (the lab stalled from a millisecond after they were due), one
// forwarded in 0.5 ms, and one forwarded in 3 ms alone (its own slow hop, which its forward
// sample holds: no stall), as is the first one's first millisecond.
func TestFlowStalls(t *testing.T) {
	begin := time.Now()
	ms := func(x float64) time.Duration { return time.Duration(x * float64(time.Millisecond)) }
	res := &loadgen.Result{Begin: begin, Seconds: 0.07}
	var arr []backend.Arrival
	add := func(i int64, sent, arrived, service, done, got float64) {
		res.Trace = append(res.Trace, loadgen.Event{Index: i, Start: int64(ms(sent)), Sent: int64(ms(sent)), Done: int64(ms(got)), OK: true})
		arr = append(arr, backend.Arrival{Seq: i, Arrived: begin.Add(ms(arrived)), Started: begin.Add(ms(arrived)),
			Service: ms(service), Done: begin.Add(ms(done))})
	}
	add(1, 8.9, 9.0, 2, 11.0, 14.1)    // its response waits in Ballast from 11 ms
	add(0, 10.0, 14.0, 0, 14.0, 14.2)  // held 4 ms on its way to the backend
	add(2, 20.0, 20.1, 10, 30.1, 30.3) // served 10 ms
	add(3, 39.0, 39.1, 0.9, 40.9, 41.0)
	add(4, 49.0, 49.1, 0.9, 55.0, 55.1) // due at 50 ms, written at 55
	add(7, 49.0, 49.1, 0.9, 55.0, 55.1) // the same
	add(5, 57.0, 57.5, 0, 57.5, 57.6)
	add(6, 60.0, 63.0, 0, 63.0, 63.1) // forwarded in 3 ms, alone
	got, drain := flowStallsDrained(res, arr, flowStallMin)
	want := []stallAt{{ms(11), ms(3)}, {ms(51), ms(4)}}
	// What Ballast held at the first stall's end came out at once (request 0 reached its
	// backend: the end) and 0.1 ms later (request 1's response); the second held nothing.
	if len(drain) != 2 || drain[0] > time.Microsecond || drain[1] < ms(0.099) || drain[1] > ms(0.101) {
		t.Errorf("drain %v, want [0 100µs]", drain)
	}
	if len(got) != len(want) {
		t.Fatalf("stalls %v, want %v", got, want)
	}
	for i := range want {
		if d := got[i].at - want[i].at; d < -time.Microsecond || d > time.Microsecond || got[i].d-want[i].d > time.Microsecond || want[i].d-got[i].d > time.Microsecond {
			t.Errorf("stall %d: %v for %v, want %v for %v", i, got[i].at, got[i].d, want[i].at, want[i].d)
		}
	}
}

// TestRunStallsDrawn checks what a model run draws: the flow stalls of the measured run it
// takes, over that run's span, and the probe's stalls over its window, but not a probe stall
// that a flow stall of some measured run covers (it would count twice).
func TestRunStallsDrawn(t *testing.T) {
	p := newPredictions(Options{})
	defer p.stopOnce()
	t0 := p.probe.begin
	ms := time.Millisecond
	// The calibration ran from t0+1s for 2 s with one flow stall at 1.5 s; the row from t0+4s
	// for 4 s with none.
	p.calibrated("", Calibration{hops: hopSamples{begin: t0.Add(time.Second), span: 2 * time.Second, stalls: []stallAt{{1500 * ms, 20 * ms}},
		drain: []time.Duration{70 * time.Microsecond}}})
	p.measured("", "row", Calibration{hops: hopSamples{begin: t0.Add(4 * time.Second), span: 4 * time.Second}})
	probe := []stallAt{{2505 * ms, 10 * ms}, {9 * time.Second, 5 * ms}} // inside the calibration's flow stall, and outside
	js := p.jitters(predJob{label: "other"}, probe, 10*time.Second)
	if len(js) != 2 {
		t.Fatalf("%d jitters, want 2", len(js))
	}
	if r := js[0].StallRate; r < 0.6-1e-9 || r > 0.6+1e-9 {
		t.Errorf("calibration's run: stall rate %v, want 0.1/s (the probe's outside) + 0.5/s (its own)", r)
	}
	if r := js[1].StallRate; r < 0.1-1e-9 || r > 0.1+1e-9 {
		t.Errorf("row's run: stall rate %v, want the probe's 0.1/s", r)
	}
	if q := js[0].Drain.Quantile(.5); q != 70*time.Microsecond {
		t.Errorf("calibration's run: drain %v, want its own 70µs", js[0].Drain)
	}
	if !js[1].Drain.IsZero() {
		t.Errorf("row's run: drain %v, want none (it measured none)", js[1].Drain)
	}
	if q := js[0].Stall.Quantile(1); q != 20*ms {
		t.Errorf("calibration's run: longest stall %v, want its own 20ms", q)
	}
	if q := js[1].Stall.Quantile(0); q != 5*ms || js[1].Stall.Quantile(1) != 5*ms {
		t.Errorf("row's run: stalls %v, want the probe's 5ms only", js[1].Stall)
	}
}

// TestDisturbedRow checks the stated criterion for a disturbed row: its own flow stalls took a
// larger share of its run than in every run its range drew from; a miss of it says so.
func TestDisturbedRow(t *testing.T) {
	p := newPredictions(Options{})
	defer p.stopOnce()
	ms := time.Millisecond
	p.calibrated("", Calibration{hops: hopSamples{span: time.Second, stalls: []stallAt{{0, 10 * ms}}}})
	p.measured("", "calm", Calibration{hops: hopSamples{span: time.Second, stalls: []stallAt{{0, 5 * ms}}}})
	p.measured("", "busy", Calibration{hops: hopSamples{span: time.Second, stalls: []stallAt{{0, 30 * ms}, {100 * ms, 20 * ms}}}})
	if d := p.disturbed(predJob{label: "calm"}); d != "" {
		t.Errorf("calm row (0.5%% against the others' 1 and 5%%) called disturbed: %s", d)
	}
	d := p.disturbed(predJob{label: "busy"})
	if !strings.Contains(d, "5.00%") || !strings.Contains(d, "1.00%") {
		t.Errorf("busy row: %q, want its 5.00%% against at most 1.00%%", d)
	}
	row := Result{ThroughputRPS: 90, Predicted: Figures{ThroughputRPS: 100, Range: &FigureRange{ThroughputRPS: [2]float64{95, 105}}}}
	row.Detail.Disturbed = d
	if in, judged := judgeRange(Throughput, &row); in || !judged || !strings.Contains(row.Detail.RangeGoal, "disturbed: flow stalls 5.00%") {
		t.Errorf("judged %v inside %v: %q", judged, in, row.Detail.RangeGoal)
	}
}

// TestRecoveryHops checks which hops a traced run gives the recovery from a flow stall
// (sim.Jitter.Recovery): those that began within recoveryFor after a stall's end, not inside
// one nor later; and that a run with stalls hands the model its recovery hops.
func TestRecoveryHops(t *testing.T) {
	ms := time.Millisecond
	stalls := []stallAt{{10 * ms, 4 * ms}, {30 * ms, 2 * ms}}
	for _, c := range []struct {
		at   time.Duration
		want bool
	}{{5 * ms, false}, {12 * ms, false}, {14 * ms, true}, {14*ms + recoveryFor - 1, true}, {14*ms + recoveryFor, false},
		{31 * ms, false}, {33 * ms, true}, {50 * ms, false}} {
		if got := recovering(stalls, int64(c.at)); got != c.want {
			t.Errorf("recovering at %v: %v, want %v", c.at, got, c.want)
		}
	}
	h := hopSamples{stalls: stalls, span: 50 * ms, send: []time.Duration{ms}, toPick: []time.Duration{ms}, forward: []time.Duration{ms},
		ret: []time.Duration{ms}, deliver: []time.Duration{ms}, overshoot: []time.Duration{ms},
		recovery: &hopSamples{deliver: []time.Duration{3 * ms}, overshoot: []time.Duration{2 * ms}}}
	j := h.jitter()
	if j.Recovery == nil || j.RecoveryFor != recoveryFor {
		t.Fatalf("a run with stalls and recovery hops: recovery %v for %v", j.Recovery, j.RecoveryFor)
	}
	if got := j.Recovery.Deliver.Quantile(.5); got != 3*ms {
		t.Errorf("recovery deliver %v, want the recovery's 3ms", got)
	}
	if got := j.Recovery.Send.Quantile(.5); got != ms {
		t.Errorf("recovery send without samples %v, want the steady state's 1ms", got)
	}
	if got := j.RecoveryOvershoot.Quantile(.5); got != 2*ms {
		t.Errorf("recovery overshoot %v, want 2ms", got)
	}
	h.stalls = nil
	if j := h.jitter(); j.Recovery != nil {
		t.Errorf("a run without stalls has recovery hops %v", j.Recovery)
	}
}

// TestNearestRuns checks which measured runs a range drawn by flow-stall share takes: the
// nearest at or below the row's own share and the nearest at or above it always (a range
// that left out either would not span the row's own condition), then the nearest others.
func TestNearestRuns(t *testing.T) {
	shares := []float64{0.01, 0.02, 0.05, 0.20, 0.03}
	for _, c := range []struct {
		own  float64
		k    int
		want []int
	}{
		{0.04, 2, []int{2, 4}},          // 0.03 below, 0.05 above
		{0.04, 3, []int{1, 2, 4}},       // then 0.02
		{0.19, 2, []int{2, 3}},          // 0.05 below though 0.20 is nearer: both sides
		{0.30, 2, []int{2, 3}},          // above every run: the most disturbed, then the next
		{0.00, 3, []int{0, 1, 4}},       // below every run
		{0.04, 9, []int{0, 1, 2, 3, 4}}, // more than there are: all
	} {
		if got := nearestRuns(shares, c.own, c.k); !slices.Equal(got, c.want) {
			t.Errorf("nearestRuns(own %.2f, k %d) = %v, want %v", c.own, c.k, got, c.want)
		}
	}
	if n := nearestCount(8); n != 4 {
		t.Errorf("nearestCount(8) = %d, want 4", n)
	}
	if n := nearestCount(2); n != 2 {
		t.Errorf("nearestCount(2) = %d, want 2", n)
	}
}

// TestRangeDrawsNearest checks that a traced row's range draws, with nearest, the runs of
// its group nearest its own flow-stall share, the calibrations among them, never its own, and
// every run without nearest; the disturbed criterion holds against the runs drawn.
func TestRangeDrawsNearest(t *testing.T) {
	ms := time.Millisecond
	run := func(stall time.Duration) Calibration {
		return Calibration{hops: hopSamples{span: time.Second, stalls: []stallAt{{0, stall}}}}
	}
	p := newPredictions(Options{})
	defer p.stopOnce()
	p.calibrated("g", run(1*ms))  // 0.1 %
	p.calibrated("g", run(40*ms)) // 4 %: the busy calibration
	p.measured("g", "a", run(2*ms))
	p.measured("g", "b", run(3*ms))
	p.measured("g", "c", run(5*ms))
	p.measured("g", "d", run(20*ms))
	p.measured("g", "e", run(25*ms)) // the row: 2.5 %
	p.measured("other", "x", run(25*ms))
	rates := func(job predJob) []time.Duration {
		var out []time.Duration
		for _, h := range p.drawnRuns(job) {
			out = append(out, h.stalls[0].d)
		}
		slices.Sort(out)
		return out
	}
	job := predJob{label: "e", group: "g"}
	if got := rates(job); len(got) != 6 {
		t.Errorf("without nearest the range draws every other run of its group (6): %v", got)
	}
	p.nearest = true
	// 6 runs: 3 drawn, 2 % below and 4 % above, then 0.5 %.
	if got, want := rates(job), []time.Duration{5 * ms, 20 * ms, 40 * ms}; !slices.Equal(got, want) {
		t.Errorf("nearest to 2.5%%: drew %v, want %v", got, want)
	}
	if js := p.jitters(job, nil, 0); len(js) != 3 {
		t.Errorf("%d jitters, want the 3 runs drawn", len(js))
	}
	if got := p.drewFrom(job); !strings.Contains(got, "3 measured runs, flow stalls 0.50-4.00%") || !strings.Contains(got, "2.50%") {
		t.Errorf("drewFrom: %q", got)
	}
	if d := p.disturbed(job); d != "" {
		t.Errorf("a row below its busiest drawn run called disturbed: %s", d)
	}
	p.measured("g", "f", run(90*ms))
	if d := p.disturbed(predJob{label: "f", group: "g"}); !strings.Contains(d, "at most 4.00%") {
		t.Errorf("a row above every run: %q, want at most 4.00%%", d)
	}
	// A job with no run of its own (the advise check) draws every run of its group.
	if got := rates(predJob{group: "g"}); len(got) != 8 {
		t.Errorf("no run of its own: drew %d runs, want 8", len(got))
	}
}

// TestOwnRangeJudged checks how a miss is told apart: the model drawing the row's own run
// alone either holds the measured figure (the row ran unlike the runs its range drew from) or
// misses it too (the model misses something of that run); a row inside says neither.
func TestOwnRangeJudged(t *testing.T) {
	mk := func(measured float64, own [2]float64) Result {
		r := Result{ThroughputRPS: measured, Predicted: Figures{ThroughputRPS: 100, Range: &FigureRange{ThroughputRPS: [2]float64{95, 105}}}}
		r.Detail.OwnRange = &FigureRange{ThroughputRPS: own}
		return r
	}
	for _, c := range []struct {
		measured float64
		own      [2]float64
		want     string
	}{
		{90, [2]float64{85, 92}, "its own run in the model [85, 92] holds it"},
		{90, [2]float64{93, 99}, "its own run in the model [93, 99] misses it too"},
		{100, [2]float64{93, 99}, ""},
	} {
		row := mk(c.measured, c.own)
		in, judged := judgeRange(Throughput, &row)
		if !judged || in != (c.want == "") {
			t.Errorf("%v: judged %v inside %v", c.measured, judged, in)
		}
		if got := row.Detail.RangeGoal; c.want != "" && !strings.Contains(got, c.want) || c.want == "" && strings.Contains(got, "own run") {
			t.Errorf("%v against own %v: %q, want %q", c.measured, c.own, got, c.want)
		}
	}
	r := &Report{Metric: Throughput, Results: []Result{mk(90, [2]float64{85, 92}), mk(90, [2]float64{93, 99}), mk(100, [2]float64{93, 99})}}
	if note := rangeNote(r); !strings.Contains(note, "1 of 3 rows") || !strings.Contains(note, "of the 2 outside with a run of their own, the model drawing that run alone holds 1") {
		t.Errorf("note: %s", note)
	}
}
