package lab

import (
	"bytes"
	"encoding/json"
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
	c, err := measureJitter(res, arr, rels, true)
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
	c, err = measureJitter(res, arr, rels, true)
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
