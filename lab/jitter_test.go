package lab

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"ballast/advise"
	"ballast/lab/backend"
	"ballast/lab/loadgen"
	"ballast/sim"
)

// synthRun builds the three clocks' records of n requests through a proxy with known delays:
// request i is sent at 1 ms steps, picked toPick later (request 1 overtakes request 0), reaches
// its backend forward later (a fresh connection for the first two), is served 2 ms (every
// other one), and its response takes ret to the proxy and deliver to the client.
func synthRun(n int) (*loadgen.Result, []backend.Arrival, []advise.Release) {
	begin := time.Now()
	res := &loadgen.Result{Begin: begin, Options: loadgen.Options{C: 2}}
	const us = time.Microsecond
	var arr []backend.Arrival
	var rels []advise.Release
	for i := range n {
		start := time.Duration(i) * time.Millisecond
		send := 20 * us
		toPick := 100 * us
		if i == 0 {
			toPick = 1500 * us // picked after request 1
		}
		forward := 50 * us
		fresh := i < 2
		if fresh {
			forward += 400 * us
		}
		svc := time.Duration(i%2) * 2 * time.Millisecond
		over := time.Duration(0)
		if svc > 0 {
			over = 300 * us
		}
		ret, deliver := 80*us, 60*us
		name := []string{"A", "B"}[i%2]
		sent := start + send
		picked := sent + toPick
		arrived := picked + forward
		done := arrived + svc + over
		released := done + ret
		got := released + deliver
		res.Trace = append(res.Trace, loadgen.Event{Index: int64(i), Start: int64(start), Sent: int64(sent), Done: int64(got), OK: true, Backend: name})
		arr = append(arr, backend.Arrival{Seq: int64(i), Backend: name, Arrived: begin.Add(arrived), Started: begin.Add(arrived),
			Done: begin.Add(done), Service: svc, FreshConn: fresh})
		rels = append(rels, advise.Release{Backend: name, AtNs: begin.UnixNano() + int64(released), LatencyNs: int64(released - picked)})
	}
	return res, arr, rels
}

func TestMeasureJitter(t *testing.T) {
	res, arr, rels := synthRun(200)
	// The proxy's records come in release order, not by request.
	for i, j := 0, len(rels)-1; i < j; i, j = i+1, j-1 {
		rels[i], rels[j] = rels[j], rels[i]
	}
	c, err := measureJitter(res, arr, rels, true, false)
	if err != nil {
		t.Fatal(err)
	}
	if c.Samples != 200 || c.Inversions != 1 {
		t.Errorf("%d samples, %d inversions; want 200 and 1 (request 1 picked before 0)", c.Samples, c.Inversions)
	}
	j := c.Jitter
	us := time.Microsecond
	near := func(name string, d sim.Dist, want time.Duration) {
		t.Helper()
		if got := d.Quantile(.5); got < want-2*us || got > want+2*us {
			t.Errorf("%s: median %v, want %v (%v)", name, got, want, d)
		}
	}
	near("send", j.Send, 20*us)
	near("to pick", j.ToPick, 100*us)
	near("forward", j.Forward, 50*us)
	near("connect", j.Connect, 400*us) // the fresh connections' extra
	near("overshoot", j.Overshoot, 300*us)
	near("return", j.Return, 80*us)
	near("deliver", j.Deliver, 60*us)
	if !j.OneSender || j.First == nil {
		t.Errorf("one sender %v, start-up hops %v", j.OneSender, j.First)
	}
	if got := j.First.ToPick.Quantile(1); got != 1500*us { // the first two requests' own hops
		t.Errorf("start-up to-pick max %v, want 1.5ms", got)
	}
	// One slow delivery in 200 stays in the tail: the largest, not the 99th percentile's.
	res.Trace[50].Done += int64(20 * time.Millisecond)
	c, err = measureJitter(res, arr, rels, true, false)
	if err != nil || c.Jitter.Deliver.Quantile(1) < 20*time.Millisecond || c.Jitter.Deliver.Quantile(.99) > time.Millisecond {
		t.Errorf("deliver with a 20 ms outlier: %v (%v)", c.Jitter.Deliver, err)
	}
	if !strings.Contains(c.Slowest, "request 50,") {
		t.Errorf("slowest %q, want request 50", c.Slowest)
	}
}

func TestMatchReleases(t *testing.T) {
	// Two requests overlap on one backend and finish in the other order.
	type span struct{ a, d int64 }
	const us = int64(time.Microsecond)
	as := []span{{100 * us, 500 * us}, {120 * us, 300 * us}}
	rs := []advise.Release{{AtNs: 360 * us, LatencyNs: 260 * us}, {AtNs: 560 * us, LatencyNs: 470 * us}} // dispatched at 100 and 90 µs
	m := matchReleases(as, rs, func(s span) (int64, int64) { return s.a, s.d })
	if len(m) != 2 || m[0] != [2]int{0, 1} || m[1] != [2]int{1, 0} {
		t.Fatalf("pairs %v, want [[0 1] [1 0]]: each arrival with the release whose interval holds it", m)
	}
	// A release that holds no arrival is left alone.
	if m := matchReleases(as[:1], rs[:1], func(s span) (int64, int64) { return s.a, s.d }); len(m) != 0 {
		t.Fatalf("pairs %v for intervals that do not nest", m)
	}
}

func TestJudgeRange(t *testing.T) {
	for _, tt := range []struct {
		m        Metric
		measured float64
		want     string
		inside   bool
	}{
		{Makespan, 10.5, "yes, width 2.000 s (20.0%)", true},
		{Makespan, 11.25, "no: 0.250 s above; width 2.000 s (20.0%)", false},
		{Makespan, 8.9, "no: 0.100 s below", false},
		{Throughput, 4000, "yes, width 100 req/s (2.5%)", true},
	} {
		row := Result{MakespanS: tt.measured, ThroughputRPS: tt.measured, Predicted: Figures{MakespanS: 10, ThroughputRPS: 4000,
			Range: &FigureRange{MakespanS: [2]float64{9, 11}, ThroughputRPS: [2]float64{3950, 4050}}}}
		inside, judged := judgeRange(tt.m, &row)
		if !judged || inside != tt.inside || !strings.HasPrefix(row.Detail.RangeGoal, tt.want) || *row.Detail.InRange != inside {
			t.Errorf("%s %v: %v %v %q, want %v %q", tt.m, tt.measured, judged, inside, row.Detail.RangeGoal, tt.inside, tt.want)
		}
	}
	if _, judged := judgeRange(Makespan, &Result{}); judged {
		t.Error("a row without a range was judged")
	}
}

// TestRangeInJSONAndTable: the predicted figures carry their range in the JSON contract's
// shape, and the table shows it and the goal.
func TestRangeInJSONAndTable(t *testing.T) {
	r := &Report{Scenario: "variable-cost", Metric: Makespan, Ideal: "8 s", Results: []Result{{
		Algorithm: "byrequests", MakespanS: 12.004, Split: map[string]int64{"A": 25, "B": 25},
		Predicted: Figures{MakespanS: 11.0, Range: &FigureRange{MakespanS: [2]float64{10.0, 14.0}, ThroughputRPS: [2]float64{3.5, 5}, Runs: 100}},
	}}}
	judgeRange(r.Metric, &r.Results[0])
	var doc struct {
		Results []struct {
			Predicted struct {
				Range map[string]json.RawMessage `json:"range"`
			} `json:"predicted"`
		} `json:"results"`
	}
	if err := json.Unmarshal(r.JSON(), &doc); err != nil {
		t.Fatal(err)
	}
	rg := doc.Results[0].Predicted.Range
	var mk, thr [2]float64
	if json.Unmarshal(rg["makespan_s"], &mk) != nil || json.Unmarshal(rg["throughput_rps"], &thr) != nil || mk != [2]float64{10, 14} || thr != [2]float64{3.5, 5} {
		t.Errorf("range %v", rg)
	}
	var buf bytes.Buffer
	if err := r.WriteTable(&buf); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"in range", "11.000 [10.000, 14.000] s", "yes, width 4.000 s (36.4%)"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, buf.String())
		}
	}
}

// TestBacklogWaits: requests dispatched after a release that came well after their send waited
// in Ballast's backlog; their to-pick is left out of the hops and their hand-off, from the
// release that freed their slot to their dispatch, is measured; one whose slot freed too soon
// after its send to tell a wait from a pick keeps its to-pick.
func TestBacklogWaits(t *testing.T) {
	const us = time.Microsecond
	begin := time.Now()
	res := &loadgen.Result{Begin: begin, Options: loadgen.Options{C: 1}}
	var arr []backend.Arrival
	var rels []advise.Release
	var lastRel time.Duration
	add := func(i int, sent, disp time.Duration) {
		arrived := disp + 50*us
		done := arrived + 5*time.Millisecond
		rel := done + 80*us
		res.Trace = append(res.Trace, loadgen.Event{Index: int64(i), Start: int64(sent - 20*us), Sent: int64(sent), Done: int64(rel + 60*us), OK: true, Backend: "A"})
		arr = append(arr, backend.Arrival{Seq: int64(i), Backend: "A", Arrived: begin.Add(arrived), Started: begin.Add(arrived), Done: begin.Add(done)})
		rels = append(rels, advise.Release{Backend: "A", AtNs: begin.UnixNano() + int64(rel), LatencyNs: int64(rel - disp)})
		lastRel = rel
	}
	add(0, 0, 100*us) // found the slot free
	add(1, time.Millisecond, lastRel+300*us)
	add(2, 2*time.Millisecond, lastRel+200*us)
	add(3, 3*time.Millisecond, lastRel+250*us)
	add(4, lastRel-500*us, lastRel+100*us) // sent half a millisecond before its slot freed
	c, err := measureJitter(res, arr, rels, true, true)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.hops.handoff, []time.Duration{300 * us, 200 * us, 250 * us}; !slices.Equal(got, want) {
		t.Errorf("hand-offs %v, want %v", got, want)
	}
	if n := len(c.hops.toPick) + len(c.hops.first.toPick); n != 2 {
		t.Errorf("%d to-pick samples, want 2 (the three that waited left out)", n)
	}
	if got := c.Jitter.Handoff.Quantile(1); got != 300*us {
		t.Errorf("hand-off max %v, want 300µs", got)
	}
	if !strings.Contains(c.String(), "backlog hand-off") {
		t.Errorf("calibration note %q names no hand-off", c.String())
	}
	// Without a limit nothing waited: every to-pick counts and no hand-off is measured.
	c, err = measureJitter(res, arr, rels, true, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.hops.handoff) != 0 || !c.Jitter.Handoff.IsZero() || c.Jitter.ToPick.Quantile(1) < 5*time.Millisecond {
		t.Errorf("without a limit: hand-offs %v, to-pick %v", c.hops.handoff, c.Jitter.ToPick)
	}
	// Only max_conns with max_queue queues.
	if !queues(PoolSpec{MaxConns: 4, MaxQueue: 100}) || queues(PoolSpec{MaxConns: 4}) || queues(PoolSpec{MaxQueue: 100}) {
		t.Error("queues: a backlog is max_conns with max_queue")
	}
}

// TestPooledHandoff: every run a row's prediction draws gets the hand-offs of the other
// backlog rows, never the row's own.
func TestPooledHandoff(t *testing.T) {
	const us = time.Microsecond
	p := newPredictions(Options{})
	defer p.stopOnce()
	p.calibrated("", Calibration{hops: hopSamples{send: []time.Duration{us}}})
	p.measured("", "a", Calibration{hops: hopSamples{send: []time.Duration{2 * us}}})
	p.handedOff("", "a (backlog)", Calibration{hops: hopSamples{handoff: []time.Duration{100 * us}}})
	p.handedOff("", "b (backlog)", Calibration{hops: hopSamples{handoff: []time.Duration{900 * us}}})
	p.handedOff("", "c (backlog)", Calibration{}) // no request waited: nothing to draw
	js := p.jitters(predJob{label: "a (backlog)"}, nil, 0)
	if len(js) != 2 {
		t.Fatalf("%d jitters, want 2 (the calibration's and a's)", len(js))
	}
	for i, j := range js {
		if j.Handoff.Quantile(0) != 900*us || j.Handoff.Quantile(1) != 900*us {
			t.Errorf("jitter %d: hand-off %v, want b's 900µs only", i, j.Handoff)
		}
	}
	js = p.jitters(predJob{label: "a"}, nil, 0)
	if len(js) != 1 || js[0].Handoff.Quantile(0) != 100*us || js[0].Handoff.Quantile(1) != 900*us {
		t.Errorf("row a draws %d jitters, hand-off %v; want the calibration's with a's and b's", len(js), js[0].Handoff)
	}
}

// TestAheadOfReleases: a response its client read before Ballast released its slot is
// counted, whichever release of its backend was whose; releases of an earlier load and runs
// the ring does not cover are not.
func TestAheadOfReleases(t *testing.T) {
	res, _, rels := synthRun(6) // every release 60 µs before its client has the response
	if got := aheadOfReleases(res, rels); got != 0 {
		t.Fatalf("released first: %d ahead, want 0", got)
	}
	// Request 2 (backend A) released 100 µs after its client read it: one ahead.
	late := slices.Clone(rels)
	late[2].AtNs += int64(160 * time.Microsecond)
	if got := aheadOfReleases(res, late); got != 1 {
		t.Fatalf("one release after its read: %d ahead, want 1", got)
	}
	// The same late release with an earlier load's releases of A in the ring: still one.
	earlier := append([]advise.Release{{Backend: "A", AtNs: res.Begin.UnixNano() - int64(time.Second)}}, late...)
	if got := aheadOfReleases(res, earlier); got != 1 {
		t.Fatalf("with an earlier load's release: %d ahead, want 1", got)
	}
	// A ring that lost the load's first releases says nothing.
	if got := aheadOfReleases(res, late[2:]); got != -1 {
		t.Fatalf("releases not covering the load: %d, want -1", got)
	}
	if s := (Calibration{Jitter: &sim.Jitter{}, Ahead: 1}).String(); !strings.Contains(s, "1 responses read by their client before Ballast released their slot") {
		t.Fatalf("String: %q", s)
	}
}

// TestOutsideStalls: a hop sample keeps only the time no stall covered, which the model adds
// back as a stall shared by every request then in flight.
func TestOutsideStalls(t *testing.T) {
	st := []stallAt{{100, 10}, {200, 50}, {260, 5}}
	for _, c := range []struct {
		a, b int64
		want time.Duration
	}{
		{0, 50, 50},    // before every stall
		{0, 105, 100},  // into the first
		{102, 108, 0},  // inside it
		{90, 300, 145}, // across all three
		{240, 262, 10}, // out of the second, into the third
		{300, 290, 0},  // a negative hop (clocks apart)
	} {
		if got := outside(st, c.a, c.b); got != c.want {
			t.Errorf("outside(%d, %d) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
	if got := outside(nil, 10, 30); got != 20 {
		t.Errorf("no stalls: %v, want 20", got)
	}
}
