package sim

import (
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"
)

func TestDist(t *testing.T) {
	ms := time.Millisecond
	sample := []time.Duration{5 * ms, ms, 4 * ms, 2 * ms, 3 * ms}
	d := DistOf(sample, 4)
	if want := []time.Duration{ms, 2 * ms, 3 * ms, 4 * ms, 5 * ms}; !reflect.DeepEqual(d.Q, want) {
		t.Fatalf("quantiles %v, want %v", d.Q, want)
	}
	if sample[0] != 5*ms {
		t.Error("DistOf sorted its argument")
	}
	if got := d.Quantile(0.5); got != 3*ms {
		t.Errorf("median %v, want 3ms", got)
	}
	if got := d.Quantile(0.125); got != 1500*time.Microsecond { // halfway between 1 and 2 ms
		t.Errorf("p12.5 %v, want 1.5ms", got)
	}
	if got := d.Mean(); got != 3*ms {
		t.Errorf("mean %v, want 3ms", got)
	}
	r := rand.New(rand.NewPCG(1, 2))
	var sum float64
	const n = 20000
	for range n {
		x := d.draw(r)
		if x < ms || x > 5*ms {
			t.Fatalf("draw %v outside [1, 5] ms", x)
		}
		sum += float64(x) / float64(ms)
	}
	if m := sum / n; math.Abs(m-3) > 0.05 {
		t.Errorf("draws average %.3f, want 3", m)
	}
	if !(Dist{}).IsZero() || (Dist{}).draw(r) != 0 || DistOf(nil, 5).Q != nil {
		t.Error("the zero Dist must draw 0")
	}
	if (Dist{Q: []time.Duration{3, 2}}).validate() == nil {
		t.Error("decreasing quantiles accepted")
	}
	if (Dist{Q: []time.Duration{-1}}).validate() == nil {
		t.Error("negative quantile accepted")
	}
	if (Dist{Q: make([]time.Duration, maxDistPoints+1)}).validate() == nil {
		t.Error("too many quantiles accepted")
	}
}

// fixedJitter is a jitter of constant delays.
func fixedJitter(d time.Duration) *Jitter {
	c := Dist{Q: []time.Duration{d}}
	return &Jitter{Send: c, ToPick: c, Forward: c, Return: c, Deliver: c}
}

// TestZeroJitterIsTheIdealMachine: a jitter of zeros changes nothing, to the event.
func TestZeroJitterIsTheIdealMachine(t *testing.T) {
	for _, sc := range smallScenarios() {
		for _, alg := range []string{"byrequests", "bybusyness", "sqf", "random", "ewma"} {
			a := runScenario(t, sc, alg)
			sc.Jitter = fixedJitter(0)
			b := runScenario(t, sc, alg)
			sc.Jitter = nil
			if !reflect.DeepEqual(a, b) {
				t.Fatalf("%s/%s: zero jitter changed the run:\n%+v\n%+v", sc.Name, alg, a, b)
			}
		}
	}
}

// TestFixedDelaysAddUp: one request through constant delays takes their sum plus its
// service; the first on a backend pays the connect, the next reuses the connection.
func TestFixedDelaysAddUp(t *testing.T) {
	ms := time.Millisecond
	j := fixedJitter(ms) // send, to pick, forward, return, deliver: 5 ms
	j.Connect = Dist{Q: []time.Duration{3 * ms}}
	j.Overshoot = Dist{Q: []time.Duration{2 * ms}}
	sc := Scenario{Name: "t", Concurrency: 1, Requests: 2, Jitter: j,
		Backends: []Backend{{ID: "A", Service: Fixed(10 * ms)}}}
	r := runScenario(t, sc, "roundrobin")
	// first: 5 + 3 (connect) + 2 (overshoot) + 10; second: 5 + 2 + 10.
	if want := 37 * ms; r.Makespan != want {
		t.Errorf("makespan %v, want %v", r.Makespan, want)
	}
	if r.Latency.Max != 20*ms || r.Latency.P50 != 17*ms {
		t.Errorf("latencies %+v, want 20 ms and 17 ms", r.Latency)
	}
	// Start-up hops for the first request only: its send takes 50 ms and its other four
	// hops none, so it takes 50 + 3 + 2 + 10 = 65 ms, and the second 17 as before.
	sc.Jitter.First = &Hops{Send: Dist{Q: []time.Duration{50 * ms}}}
	if r := runScenario(t, sc, "roundrobin"); r.Makespan != 82*ms {
		t.Errorf("makespan with a slow first send %v, want 82ms", r.Makespan)
	}
}

// TestOneSender: with one sender the client's sends queue behind each other.
func TestOneSender(t *testing.T) {
	ms := time.Millisecond
	j := &Jitter{Send: Dist{Q: []time.Duration{ms}}}
	sc := Scenario{Name: "t", Concurrency: 10, Requests: 10, Jitter: j, Backends: []Backend{{ID: "A", Service: Fixed(0)}}}
	if r := runScenario(t, sc, "roundrobin"); r.Makespan != ms {
		t.Errorf("parallel senders: makespan %v, want 1 ms", r.Makespan)
	}
	j.OneSender = true
	if r := runScenario(t, sc, "roundrobin"); r.Makespan != 10*ms {
		t.Errorf("one sender: makespan %v, want 10 ms", r.Makespan)
	}
}

// TestJitterShufflesArrivalOrder is seed 001's variable-cost case: on the ideal machine
// byrequests lines every expensive request up on one backend (15 s); with the arrival order
// shuffled by real delays it often does not, and no run beats the client's own bound (8 s).
func TestJitterShufflesArrivalOrder(t *testing.T) {
	sc := mustLookup(t, "variable-cost")
	us := time.Microsecond
	sc.Jitter = &Jitter{Send: Dist{Q: []time.Duration{10 * us, 200 * us}}, ToPick: Dist{Q: []time.Duration{20 * us, 900 * us}},
		Forward: Dist{Q: []time.Duration{20 * us, 300 * us}}, Return: Dist{Q: []time.Duration{20 * us, 300 * us}},
		Deliver: Dist{Q: []time.Duration{20 * us, 300 * us}}, OneSender: true}
	rg, err := RunRange(sc, "byrequests", 50)
	if err != nil {
		t.Fatal(err)
	}
	if rg.MakespanS.Min >= 15 || rg.MakespanS.Min < 8 || rg.MakespanS.Max > 16 {
		t.Errorf("byrequests range %+v: want some runs under 15 s and none under 8 s or far over 15 s", rg.MakespanS)
	}
	again, err := RunRange(sc, "byrequests", 50)
	if err != nil || !reflect.DeepEqual(rg.MakespanS, again.MakespanS) {
		t.Errorf("the same range twice: %+v then %+v (%v)", rg.MakespanS, again.MakespanS, err)
	}
}

func TestStallTimeline(t *testing.T) {
	s := &stalls{rate: 1, length: Dist{Q: []time.Duration{10}}, r: rand.New(rand.NewPCG(3, 4)), next: 100}
	if got := s.after(50); got != 50 {
		t.Errorf("before the first stall: %v", got)
	}
	if got := s.after(105); got != 110 {
		t.Errorf("inside [100, 110): %v, want 110", got)
	}
	if got := s.after(110); got != 110 {
		t.Errorf("at the stall's end: %v, want 110", got)
	}
	// Overlapping stalls merge: an event waits for the end of the last.
	s = &stalls{rate: 1e9, length: Dist{Q: []time.Duration{5}}, r: rand.New(rand.NewPCG(3, 4)), next: 0} // a stall every ns
	if got := s.after(0); got < 1000 && got <= 5 {
		t.Errorf("back-to-back stalls: %v", got)
	}
}

// TestStallsDelayResponses: a stall that covers the run's middle pushes its end out by about
// its length; service times run on (virtual time).
func TestStallsDelayResponses(t *testing.T) {
	ms := time.Millisecond
	sc := Scenario{Name: "t", Concurrency: 1, Requests: 100, Backends: []Backend{{ID: "A", Service: Fixed(ms)}}}
	base := runScenario(t, sc, "roundrobin").Makespan
	sc.Jitter = &Jitter{StallRate: 20, Stall: Dist{Q: []time.Duration{20 * ms}}}
	var longer int
	for seed := range uint64(20) {
		sc.RandSeed = seed
		if r := runScenario(t, sc, "roundrobin"); r.Makespan > base {
			longer++
		} else if r.Makespan < base {
			t.Fatalf("a stall shortened the run: %v < %v", r.Makespan, base)
		}
	}
	if longer < 15 { // 20 stalls a second over a 100 ms run: nearly every run meets one
		t.Errorf("%d of 20 runs met a stall", longer)
	}
}

// TestOpenArrivals: an open client sends at its rate whatever the backend does, with gaps as
// bursty as asked.
func TestOpenArrivals(t *testing.T) {
	for _, cv := range []float64{0.5, 1, 2} {
		sc := Scenario{Name: "open", Requests: 20000, Arrivals: Arrivals{Rate: 1000, CV: cv},
			Backends: []Backend{{ID: "A", Service: Fixed(100 * time.Microsecond)}}}
		r := runScenario(t, sc, "roundrobin")
		if math.Abs(r.Throughput-1000)/1000 > 0.05 {
			t.Errorf("cv %g: throughput %.0f, want about 1000", cv, r.Throughput)
		}
		e := newEngine(sc)
		var gaps []float64
		for range 20000 {
			gaps = append(gaps, float64(e.gap()))
		}
		var sum, sq float64
		for _, g := range gaps {
			sum += g
		}
		mean := sum / float64(len(gaps))
		for _, g := range gaps {
			sq += (g - mean) * (g - mean)
		}
		got := math.Sqrt(sq/float64(len(gaps))) / mean
		if math.Abs(got-cv)/cv > 0.1 || math.Abs(mean-1e6)/1e6 > 0.05 {
			t.Errorf("gaps: mean %.0f ns (want 1e6), cv %.2f (want %g)", mean, got, cv)
		}
	}
	// A burst beyond the backend's capacity queues inside it: latency grows.
	sc := Scenario{Name: "open", Requests: 2000, Arrivals: Arrivals{Rate: 2000},
		Backends: []Backend{{ID: "A", Workers: 1, Service: Fixed(time.Millisecond)}}}
	if r := runScenario(t, sc, "roundrobin"); r.Throughput > 1001 || r.Queue.P99 < 100*time.Millisecond {
		t.Errorf("overloaded: throughput %.0f (capacity 1000), queue p99 %v", r.Throughput, r.Queue.P99)
	}
}

// TestBacklogBounds: without a backlog a request finding every backend full fails; a bounded
// backlog turns away what exceeds it; a queue timeout fails who waited too long.
func TestBacklogBounds(t *testing.T) {
	ms := time.Millisecond
	base := Scenario{Name: "t", Concurrency: 10, Requests: 100, MaxConns: 1,
		Backends: []Backend{{ID: "A", Service: Fixed(10 * ms)}}}
	tests := []struct {
		name   string
		mutate func(*Scenario)
		check  func(Result) bool
	}{
		{"unbounded backlog", func(*Scenario) {}, func(r Result) bool { return r.Failed == 0 && r.MaxBacklog == 9 }},
		{"no backlog", func(s *Scenario) { s.NoBacklog = true }, func(r Result) bool { return r.Failed > 0 && r.Failed == r.Rejected && r.MaxBacklog == 0 }},
		{"max_queue 3", func(s *Scenario) { s.MaxQueue = 3 }, func(r Result) bool { return r.Rejected > 0 && r.MaxBacklog == 3 }},
		{"queue timeout", func(s *Scenario) { s.QueueTimeout = 25 * ms }, func(r Result) bool { return r.Rejected > 0 && r.Queue.Max <= 25*ms }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sc := base
			tt.mutate(&sc)
			r := runScenario(t, sc, "roundrobin")
			checkAccounting(t, sc, r)
			if !tt.check(r) {
				t.Errorf("result %+v", r)
			}
		})
	}
}

func TestRunRange(t *testing.T) {
	sc := mustLookup(t, "slow-backend")
	rg, err := RunRange(sc, "random", 30)
	if err != nil {
		t.Fatal(err)
	}
	if rg.Runs != 30 || len(rg.Results) != 30 {
		t.Fatalf("%d runs, %d results", rg.Runs, len(rg.Results))
	}
	for _, s := range []Spread{rg.MakespanS, rg.ThroughputRPS, rg.SplitPct["A"], rg.P99Ms} {
		if !(s.Min <= s.Median && s.Median <= s.Max) {
			t.Errorf("spread out of order: %+v", s)
		}
	}
	if rg.MakespanS.Width() == 0 {
		t.Error("random picks over 30 seeds gave one makespan")
	}
	// Nothing random, no jitter: a point.
	point, err := RunRange(sc, "byrequests", 5)
	if err != nil || point.MakespanS.Width() != 0 || point.MakespanS.Min != 25 {
		t.Errorf("byrequests on the ideal machine: %+v (%v), want the point 25 s", point.MakespanS, err)
	}
	if RunsFor(50) != DefaultRuns || RunsFor(100000) != 20 || RunsFor(1<<24) != MinRuns {
		t.Errorf("RunsFor: %d %d %d", RunsFor(50), RunsFor(100000), RunsFor(1<<24))
	}
	if _, err := RunRange(sc, "random", maxRuns+1); err == nil {
		t.Error("more than maxRuns accepted")
	}
}

// TestDistAtTail: quantiles dense in the tail keep one outlier in its place: it moves the
// 99.9th percentile, not the 95th.
func TestDistAtTail(t *testing.T) {
	ms := time.Millisecond
	sample := make([]time.Duration, 1000)
	for i := range sample {
		sample[i] = 2 * ms
	}
	sample[999] = 160 * ms
	ps := []float64{0, .5, .9, .95, .99, .999, 1}
	d := DistAt(sample, ps)
	if err := d.validate(); err != nil {
		t.Fatal(err)
	}
	if d.Quantile(.95) != 2*ms || d.Quantile(.99) != 2*ms || d.Quantile(1) != 160*ms {
		t.Errorf("quantiles %v", d.Q)
	}
	r := rand.New(rand.NewPCG(5, 6))
	big := 0
	for range 100000 {
		if d.draw(r) > 3*ms {
			big++
		}
	}
	if big > 200 { // the outlier is 0.1 % of the sample; interpolation spreads it over (0.999, 1]
		t.Errorf("%d of 100000 draws above 3 ms", big)
	}
	even := DistOf(sample, 20)
	if even.Quantile(.97) <= 3*ms {
		t.Errorf("evenly spaced quantiles should spread the outlier over the last 5 %%: %v", even.Q)
	}
	for _, bad := range []Dist{{Q: []time.Duration{1, 2}, P: []float64{0}}, {Q: []time.Duration{1, 2}, P: []float64{0, .5}}, {Q: []time.Duration{1, 2, 3}, P: []float64{0, .6, .5}}} {
		if bad.validate() == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}

// TestBacklogHandoff: a request the backlog hands a slot to starts Handoff after the release
// that freed it; a request that found a free slot, or queued inside its backend rather than in
// Ballast's backlog, never draws it.
func TestBacklogHandoff(t *testing.T) {
	ms := time.Millisecond
	sc := Scenario{Name: "t", Concurrency: 2, Requests: 4, MaxConns: 1,
		Jitter:   &Jitter{Handoff: Dist{Q: []time.Duration{ms}}},
		Backends: []Backend{{ID: "A", Workers: 1, Service: Fixed(10 * ms)}}}
	// Request 0 is served at once (0-10 ms); 1 waits in the backlog from the start and 2 and
	// 3 join it as 0 and 1 are answered; each of them starts 1 ms after the release before it.
	r := runScenario(t, sc, "roundrobin")
	if want := 43 * ms; r.Makespan != want {
		t.Errorf("makespan %v, want %v (4 x 10 ms + 3 hand-offs of 1 ms)", r.Makespan, want)
	}
	if r.MaxBacklog != 1 {
		t.Errorf("backlog grew to %d, want 1", r.MaxBacklog)
	}
	// The hand-off is a wait in Ballast: it counts in the queue time (request 1 waits 10 ms
	// for its slot, 2 and 3 from their sends at 10 and 21 ms to the releases at 21 and 32 ms,
	// each 1 ms more for the hand-off).
	if want := (0 + 11*ms + 12*ms + 12*ms) / 4; r.QueueMean != want {
		t.Errorf("queue mean %v, want %v", r.QueueMean, want)
	}
	// Without Ballast's limit the requests queue inside the backend: no hand-off.
	sc.MaxConns = 0
	if r := runScenario(t, sc, "roundrobin"); r.Makespan != 40*ms || r.MaxBacklog != 0 {
		t.Errorf("without max_conns: makespan %v, backlog %d; want 40ms, 0", r.Makespan, r.MaxBacklog)
	}
	// A hand-off drawn from a range lands inside it, request by request.
	sc.MaxConns = 1
	sc.Jitter = &Jitter{Handoff: Dist{Q: []time.Duration{ms, 3 * ms}}}
	rg, err := RunRange(sc, "roundrobin", 50)
	if err != nil {
		t.Fatal(err)
	}
	if rg.MakespanS.Min < 0.043 || rg.MakespanS.Max > 0.049 || rg.MakespanS.Width() == 0 {
		t.Errorf("makespan range %+v s, want inside [0.043, 0.049] and not a point", rg.MakespanS)
	}
}

// TestProfilesDrawTheHandoff checks that the profile of every catalogue scenario with a
// backlog draws the hand-off the lab measured (`ballast lab jitter`'s backlog calibrations),
// and that it lengthens that scenario's backlog chain: the same seeds without it finish sooner.
func TestProfilesDrawTheHandoff(t *testing.T) {
	n := 0
	for _, sc := range Scenarios() {
		if sc.MaxQueue == 0 {
			continue
		}
		n++
		j := Profile(sc.Profile)
		if j == nil || j.Handoff.IsZero() {
			t.Fatalf("%s: profile %q draws no hand-off", sc.Name, sc.Profile)
		}
		bare := *j
		bare.Handoff = Dist{}
		with, err := RunRangeOf(sc, "sqf", 20, func(_ int, s *Scenario) { s.Jitter = j })
		if err != nil {
			t.Fatal(err)
		}
		without, err := RunRangeOf(sc, "sqf", 20, func(_ int, s *Scenario) { s.Jitter = &bare })
		if err != nil {
			t.Fatal(err)
		}
		if with.MakespanS.Median <= without.MakespanS.Median {
			t.Errorf("%s: median makespan %.4f s with the hand-off, %.4f s without", sc.Name, with.MakespanS.Median, without.MakespanS.Median)
		}
	}
	if n == 0 {
		t.Fatal("no catalogue scenario has a backlog")
	}
}

// TestStallDrain: the events a stall postpones come out one after another, each a drain draw
// after the one before, not all at its end; without a drain all at its end.
func TestStallDrain(t *testing.T) {
	mk := func(drain time.Duration) *stalls {
		s := &stalls{rate: 1e-9, length: Dist{Q: []time.Duration{10}}, r: rand.New(rand.NewPCG(3, 4)), next: 100}
		if drain > 0 {
			s.drain = Dist{Q: []time.Duration{drain}}
		}
		return s
	}
	s := mk(0)
	for i, at := range []time.Duration{101, 102, 109} {
		if got := s.after(at); got != 110 {
			t.Errorf("no drain: event %d at %v comes out at %v, want 110", i, at, got)
		}
	}
	s = mk(3)
	for i, at := range []time.Duration{101, 109, 102} {
		if got, want := s.after(at), 110+3*time.Duration(i+1); got != want {
			t.Errorf("drain 3: event %d at %v comes out at %v, want %v", i, at, got, want)
		}
	}
	if got := s.after(130); got != 130 {
		t.Errorf("after the stall: %v, want 130", got)
	}
	// In a run: a stall over a burst of requests ends later with a drain than without.
	ms := time.Millisecond
	sc := Scenario{Name: "t", Concurrency: 16, Requests: 2000, Backends: []Backend{{ID: "A", Workers: 4, Service: Fixed(ms)}}}
	sc.Jitter = &Jitter{Send: Dist{Q: []time.Duration{100 * time.Microsecond}}, StallRate: 50, Stall: Dist{Q: []time.Duration{3 * ms}}}
	plain := runScenario(t, sc, "roundrobin").Makespan
	sc.Jitter.Drain = Dist{Q: []time.Duration{200 * time.Microsecond}}
	if drained := runScenario(t, sc, "roundrobin").Makespan; drained <= plain {
		t.Errorf("makespan with a 200 µs drain per event %v, not longer than without %v", drained, plain)
	}
}

// TestStallRecovery: a hop that begins within RecoveryFor after a stall's end draws the
// recovery's delays; one later, the steady state's; none without stalls.
func TestStallRecovery(t *testing.T) {
	s := &stalls{rate: 1e-9, length: Dist{Q: []time.Duration{10}}, r: rand.New(rand.NewPCG(3, 4)), next: 100}
	for _, c := range []struct {
		at   time.Duration
		want bool
	}{{50, false}, {105, false}, {110, true}, {114, true}, {115, false}, {200, false}} {
		if got := s.recovering(c.at, 5); got != c.want {
			t.Errorf("recovering(%v) within 5 after [100, 110): %v, want %v", c.at, got, c.want)
		}
	}
	ms := time.Millisecond
	sc := Scenario{Name: "t", Concurrency: 8, Requests: 4000, Backends: []Backend{{ID: "A", Workers: 2, Service: Fixed(ms)}}}
	sc.Jitter = &Jitter{Send: Dist{Q: []time.Duration{50 * time.Microsecond}}, StallRate: 20, Stall: Dist{Q: []time.Duration{5 * ms}}}
	plain := runScenario(t, sc, "roundrobin").Makespan
	sc.Jitter.Recovery = &Hops{Send: Dist{Q: []time.Duration{2 * ms}}}
	if r := runScenario(t, sc, "roundrobin").Makespan; r != plain {
		t.Errorf("recovery hops without RecoveryFor: makespan %v, want %v", r, plain)
	}
	sc.Jitter.RecoveryFor = 3 * ms
	slow := runScenario(t, sc, "roundrobin").Makespan
	if slow <= plain+10*ms { // some 40 stalls, each followed by sends of 2 ms
		t.Errorf("makespan with slow sends after each stall %v, want well over %v", slow, plain)
	}
	sc.Jitter.StallRate = 0
	sc.Jitter.Stall = Dist{}
	base := runScenario(t, sc, "roundrobin").Makespan
	sc.Jitter.Recovery = nil
	if again := runScenario(t, sc, "roundrobin").Makespan; again != base {
		t.Errorf("without stalls the recovery is never drawn: %v vs %v", base, again)
	}
	if err := (&Jitter{RecoveryFor: 2 * time.Second}).validate(); err == nil {
		t.Error("a recovery of 2 s validated")
	}
}

// TestHedgeTimerTick: with Jitter.TimerTick a hedge fires at the first tick boundary at or
// after its deadline (never early, up to a tick late, as Ballast's shard wheel fires it),
// late by an Overshoot draw, at a phase drawn per run; without it, at the deadline exactly.
func TestHedgeTimerTick(t *testing.T) {
	ms := time.Millisecond
	sc := Scenario{Name: "t", Concurrency: 1, Requests: 1, Hedge: Hedge{Delay: 50 * ms, Max: 1},
		Backends: []Backend{{ID: "X", Workers: 1, Service: Fixed(10 * time.Second)}, {ID: "Y", Workers: 1}}}
	if _, r, err := runScripted(sc, firstFree); err != nil || r.Makespan != 50*ms {
		t.Fatalf("without a tick: makespan %v (%v), want 50ms", r.Makespan, err)
	}
	for _, over := range []time.Duration{0, ms} {
		lo, hi := time.Hour, time.Duration(0)
		for seed := uint64(1); seed <= 200; seed++ {
			sc.RandSeed = seed
			sc.Jitter = &Jitter{TimerTick: 4 * ms, Overshoot: Dist{Q: []time.Duration{over}}}
			_, r, err := runScripted(sc, firstFree)
			if err != nil {
				t.Fatal(err)
			}
			if r.Hedges != 1 || r.Split["Y"] != 1 {
				t.Fatalf("seed %d: hedges %d split %v, want the hedge to win", seed, r.Hedges, r.Split)
			}
			lo, hi = min(lo, r.Makespan), max(hi, r.Makespan)
		}
		// The first boundary at or after 50 ms is in [50, 54) ms; the phases of 200 runs
		// spread over it.
		if lo < 50*ms+over || hi >= 54*ms+over || hi-lo < 3*ms {
			t.Errorf("overshoot %v: makespans %v to %v, want within [%v, %v) and spread over most of a tick", over, lo, hi, 50*ms+over, 54*ms+over)
		}
	}
}

// TestTimerAtBoundaries: with Jitter.TimerTick (no overshoot) a deadline on one of the
// balancer's tick boundaries fires at it, one a nanosecond past it at the next, and none
// fires in the tick the clock is in when it is due already.
func TestTimerAtBoundaries(t *testing.T) {
	const tk = 4 * time.Millisecond
	e := &engine{jit: &Jitter{TimerTick: tk}, tickPhase: time.Millisecond}
	for _, c := range []struct{ now, at, want time.Duration }{
		{0, 0, time.Millisecond}, // before the first boundary
		{0, time.Millisecond, time.Millisecond},
		{0, time.Millisecond + 1, 5 * time.Millisecond},
		{0, 5*time.Millisecond - 1, 5 * time.Millisecond},
		{0, 50 * time.Millisecond, 53 * time.Millisecond},
		{0, 53 * time.Millisecond, 53 * time.Millisecond},
		{10 * time.Millisecond, 2 * time.Millisecond, 13 * time.Millisecond}, // past: the next boundary
		{13 * time.Millisecond, 13 * time.Millisecond, 17 * time.Millisecond},
	} {
		e.now = c.now
		if got := e.timerAt(c.at); got != c.want {
			t.Errorf("now %v, deadline %v: fires at %v, want %v", c.now, c.at, got, c.want)
		}
	}
}

// TestSharedPause: a machine stall is one delay shared by every request in flight when it
// falls, not a delay each request draws for itself. Eight requests in flight together, alike
// in every hop, are answered at the same moment however the stalls fall; the same mean
// delay drawn per request's forward hop spreads them apart.
func TestSharedPause(t *testing.T) {
	ms := time.Millisecond
	base := Scenario{Name: "t", Concurrency: 8, Requests: 8, Backends: []Backend{{ID: "A", Workers: 8, Service: Fixed(10 * ms)}}}
	for _, c := range []struct {
		name   string
		jitter Jitter
		shared bool
	}{
		{"stalls", Jitter{StallRate: 400, Stall: Dist{Q: []time.Duration{2 * ms}}}, true},
		{"per-request forward", Jitter{Forward: Dist{Q: []time.Duration{0, 4 * ms}}}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			ideal := runScenario(t, base, "roundrobin").Latency.Max
			sc := base
			sc.Jitter = &c.jitter
			delayed, apart := 0, 0
			for seed := range uint64(50) {
				sc.RandSeed = seed
				l := runScenario(t, sc, "roundrobin").Latency
				if l.Max > ideal {
					delayed++
				}
				if l.P50 != l.Max {
					apart++
				}
			}
			if delayed < 15 {
				t.Errorf("%d of 50 runs delayed at all", delayed)
			}
			if c.shared && apart > 0 {
				t.Errorf("%d of 50 runs answered the requests at different moments: a shared stall delays them together", apart)
			}
			if !c.shared && apart < 25 {
				t.Errorf("%d of 50 runs spread the requests apart: per-request draws should", apart)
			}
		})
	}
}
