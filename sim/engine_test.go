package sim

import (
	"strings"
	"testing"
	"time"

	"ballast/balance"
)

// scriptedPicker is a fake picker: fn decides, with the engine's Load at hand.
type scriptedPicker struct {
	load balance.Load
	n    int
	fn   func(p *scriptedPicker, tried balance.Tried) (int, error)
}

func (p *scriptedPicker) Pick(_ uint64, tried balance.Tried) (int, error) { return p.fn(p, tried) }

// firstFree picks the first untried backend that is not full, like a priority list.
func firstFree(p *scriptedPicker, tried balance.Tried) (int, error) {
	sawFull := false
	for i := range p.n {
		if tried.Has(i) {
			continue
		}
		if p.load.Full(i) {
			sawFull = true
			continue
		}
		return i, nil
	}
	if sawFull {
		return -1, balance.ErrBusy
	}
	return -1, balance.ErrNoBackend
}

// runScripted runs sc with a fake picker instead of a registered algorithm.
func runScripted(sc Scenario, fn func(*scriptedPicker, balance.Tried) (int, error)) (*engine, Result, error) {
	e := newEngine(sc)
	p := &scriptedPicker{load: modelLoad{e}, n: len(sc.Backends), fn: fn}
	e.picker = p
	if err := sc.Validate(); err != nil {
		return e, Result{}, err
	}
	r, err := e.run("scripted")
	return e, r, err
}

func TestBrokenPickersAreCaught(t *testing.T) {
	sc := Scenario{Name: "t", Concurrency: 2, Requests: 5, Hedge: Hedge{Delay: time.Millisecond},
		Backends: []Backend{{ID: "A", Workers: 1, Service: Fixed(10 * time.Millisecond)}, {ID: "B", Service: Fixed(0)}}}
	tests := []struct {
		name string
		fn   func(*scriptedPicker, balance.Tried) (int, error)
		want string
	}{
		{"busy forever loses requests", func(*scriptedPicker, balance.Tried) (int, error) { return -1, balance.ErrBusy }, "lost"},
		{"index out of range", func(*scriptedPicker, balance.Tried) (int, error) { return 7, nil }, "backend 7 of 2"},
		{"tried backend returned again", func(*scriptedPicker, balance.Tried) (int, error) { return 0, nil }, "already tried"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := runScripted(sc, tt.fn)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err %v, want it to mention %q", err, tt.want)
			}
		})
	}
}

func TestNoBackendFailsEachRequestOnce(t *testing.T) {
	sc := Scenario{Name: "t", Concurrency: 3, Requests: 10, Backends: []Backend{{ID: "A", Service: Fixed(0)}}}
	_, r, err := runScripted(sc, func(*scriptedPicker, balance.Tried) (int, error) { return -1, balance.ErrNoBackend })
	if err != nil {
		t.Fatal(err)
	}
	if r.Failed != 10 || r.Responses != 10 || r.Split["A"] != 0 {
		t.Fatalf("failed %d, responses %d, split %v; want 10 failures answered once each", r.Failed, r.Responses, r.Split)
	}
}

func TestDuplicateResponseIsAnError(t *testing.T) {
	e := newEngine(Scenario{Name: "t", Backends: []Backend{{ID: "A"}}})
	a := &attempt{r: &request{}, state: finished}
	e.respond(a)
	if e.err != nil {
		t.Fatalf("first response: %v", e.err)
	}
	e.respond(a)
	if e.err == nil || !strings.Contains(e.err.Error(), "twice") {
		t.Fatalf("second response not caught: %v", e.err)
	}
}

// TestHedgeCancelsQueuedAndServingLosers follows one exact timeline. X is slow (1 worker,
// 10 s), Y has 3 workers and serves request 2 faster than 0 and 1. All three requests go to X
// (one serving, two queued); at 50 ms each is hedged to Y. Request 2 wins first, at 51 ms, while
// its X copy is still queued; requests 0 and 1 win at 55 ms, cancelling X's serving copy and
// then the copy that had just started on the freed worker.
func TestHedgeCancelsQueuedAndServingLosers(t *testing.T) {
	sc := Scenario{Name: "t", Concurrency: 3, Requests: 3, Hedge: Hedge{Delay: 50 * time.Millisecond, Max: 1},
		Backends: []Backend{
			{ID: "X", Workers: 1, Service: Fixed(10 * time.Second)},
			{ID: "Y", Workers: 3, Service: PerRequest(5*time.Millisecond, 5*time.Millisecond, time.Millisecond)},
		}}
	e, r, err := runScripted(sc, firstFree)
	if err != nil {
		t.Fatal(err)
	}
	if r.Makespan != 55*time.Millisecond {
		t.Errorf("makespan %v, want 55ms", r.Makespan)
	}
	if r.Split["X"] != 0 || r.Split["Y"] != 3 || r.Hedges != 3 || r.HedgeWins != 3 || r.Cancelled != 3 {
		t.Errorf("split %v hedges %d wins %d cancelled %d; want Y 3, 3/3/3", r.Split, r.Hedges, r.HedgeWins, r.Cancelled)
	}
	if x := &e.bes[0]; x.busy != 0 || x.inflight != 0 {
		t.Errorf("X ends with busy %d, in flight %d", x.busy, x.inflight)
	}
	// The stale completion of X's cancelled copies must not have advanced the makespan.
	if r.Latency.Max != 55*time.Millisecond {
		t.Errorf("max latency %v, want 55ms", r.Latency.Max)
	}
}

// trackingPicker is firstFree plus a Tracker that checks the counts it is told against Load.
type trackingPicker struct {
	scriptedPicker
	told       []int64
	mismatches int
	updates    int
}

func (p *trackingPicker) Update(i int, inflight int64) { p.told[i] = inflight; p.updates++ }

func (p *trackingPicker) Pick(key uint64, tried balance.Tried) (int, error) {
	for i := range p.n {
		if p.told[i] != p.load.InFlight(i) {
			p.mismatches++
		}
	}
	return firstFree(&p.scriptedPicker, tried)
}

func TestTrackerSeesEveryChange(t *testing.T) {
	sc := Scenario{Name: "t", Concurrency: 8, Requests: 200, MaxConns: 3, Hedge: Hedge{Delay: 2 * time.Millisecond, Max: 2},
		Backends: []Backend{
			{ID: "A", Workers: 1, Service: Exponential(3 * time.Millisecond)},
			{ID: "B", Workers: 2, Service: Fixed(time.Millisecond)},
			{ID: "C", Workers: 0, Service: LogNormal(time.Millisecond, 1)},
		}}
	e := newEngine(sc)
	p := &trackingPicker{scriptedPicker: scriptedPicker{load: modelLoad{e}, n: 3}, told: make([]int64, 3)}
	e.picker, e.tracker = p, p
	r, err := e.run("tracking")
	if err != nil {
		t.Fatal(err)
	}
	if p.mismatches != 0 {
		t.Fatalf("tracker out of step with Load %d times", p.mismatches)
	}
	// Each copy changes a count twice (dispatch, then finish or cancel).
	if want := 2 * (sc.Requests - r.Failed + r.Hedges); p.updates != want {
		t.Fatalf("%d updates, want %d", p.updates, want)
	}
}

// TestLatencyFeedback: the Load a picker sees reports the peak EWMA of the backend's observed
// dispatch-to-response time, in virtual seconds.
func TestLatencyFeedback(t *testing.T) {
	sc := Scenario{Name: "t", Concurrency: 1, Requests: 1,
		Backends: []Backend{{ID: "A", Workers: 1, Service: Fixed(250 * time.Millisecond)}}}
	e, _, err := runScripted(sc, firstFree)
	if err != nil {
		t.Fatal(err)
	}
	if got := (modelLoad{e}).Latency(0); got < 0.2499 || got > 0.25 {
		t.Fatalf("latency estimate %g s right after a 0.25 s response", got)
	}
}

func TestFIFO(t *testing.T) {
	var q fifo[int]
	next := 0
	for i := range 1000 {
		q.push(i)
		if i%3 == 0 {
			if got := q.pop(); got != next {
				t.Fatalf("pop %d, want %d", got, next)
			}
			next++
		}
	}
	for q.len() > 0 {
		if got := q.pop(); got != next {
			t.Fatalf("pop %d, want %d", got, next)
		}
		next++
	}
	if next != 1000 {
		t.Fatalf("popped %d items, want 1000", next)
	}
}
