package advise

import (
	"container/heap"
	"context"
	"encoding/json"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"ballast/balance"
	"ballast/sim"
)

// synthBackend is a FIFO queue in front of k workers with a fixed service time.
type synthBackend struct {
	id   string
	k    int
	svc  time.Duration
	free []int64 // each worker's next free time
}

// releases simulates arrivals (sorted, ns) at a backend and returns its releases.
func (b *synthBackend) serve(arrival int64) Release {
	if b.free == nil {
		b.free = make([]int64, b.k)
	}
	w := 0
	for i := range b.free {
		if b.free[i] < b.free[w] {
			w = i
		}
	}
	start := max(arrival, b.free[w])
	end := start + int64(b.svc)
	b.free[w] = end
	return Release{Backend: b.id, AtNs: end, LatencyNs: end - arrival}
}

// openTrace sends n Poisson arrivals at rate per second round robin over bs.
func openTrace(bs []*synthBackend, rate float64, n int, seed uint64) []Release {
	r := rand.New(rand.NewPCG(seed, 1))
	var t int64 = 1e12
	var out []Release
	for i := range n {
		t += int64(r.ExpFloat64() / rate * 1e9)
		out = append(out, bs[i%len(bs)].serve(t))
	}
	return out
}

// evq is a min-heap of client wake-ups for closedTrace.
type evq []int64

func (q evq) Len() int           { return len(q) }
func (q evq) Less(i, j int) bool { return q[i] < q[j] }
func (q evq) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *evq) Push(x any)        { *q = append(*q, x.(int64)) }
func (q *evq) Pop() any          { o := *q; x := o[len(o)-1]; *q = o[:len(o)-1]; return x }

// closedTrace runs c clients that each send, wait for the answer, think, and send again,
// round robin over bs, until n requests.
func closedTrace(bs []*synthBackend, c int, think time.Duration, n int) []Release {
	q := &evq{}
	for i := range c {
		heap.Push(q, int64(1e12+i*1000))
	}
	var out []Release
	for i := range n {
		t := heap.Pop(q).(int64)
		rel := bs[i%len(bs)].serve(t)
		out = append(out, rel)
		heap.Push(q, rel.AtNs+int64(think))
	}
	return out
}

func obsFor(bs []*synthBackend, balancer string) Observation {
	o := Observation{Pool: "web", Balancer: balancer}
	for _, b := range bs {
		o.Backends = append(o.Backends, BackendObs{ID: b.id, Weight: 1, State: "up"})
	}
	return o
}

func TestObserveOpenLoad(t *testing.T) {
	bs := []*synthBackend{{id: "A", k: 2, svc: 10 * time.Millisecond}, {id: "B", k: 8, svc: 10 * time.Millisecond}}
	o := obsFor(bs, "roundrobin")
	if err := Observe(&o, openTrace(bs, 350, 4000, 1)); err != nil {
		t.Fatal(err)
	}
	if o.Load.Kind != "open" || math.Abs(o.Load.RateRPS-350)/350 > 0.1 || math.Abs(o.Load.CV-1) > 0.2 {
		t.Errorf("load %+v, want open at about 350 req/s with cv about 1", o.Load)
	}
	// A (2 workers at 175 req/s and 10 ms: 88 % busy) queues; B (8 workers) does not.
	a, b := o.Backends[0], o.Backends[1]
	if a.Workers != 2 {
		t.Errorf("A: workers %d, want 2 (peak in flight %d)", a.Workers, a.PeakInFlight)
	}
	if b.Workers != 0 || b.PeakInFlight < 2 {
		t.Errorf("B: workers %d (want 0: never queued), peak %d", b.Workers, b.PeakInFlight)
	}
	for _, x := range []BackendObs{a, b} {
		if len(x.ServiceMs) != len(QuantileP) || math.Abs(x.ServiceMs[10]-10) > 0.01 {
			t.Errorf("%s: service %v, want a median of 10 ms", x.ID, x.ServiceMs)
		}
	}
	if a.LatencyMs[len(QuantileP)-1] <= 10 {
		t.Errorf("A's latencies %v include no queueing", a.LatencyMs)
	}
}

func TestObserveClosedLoad(t *testing.T) {
	bs := []*synthBackend{{id: "A", k: 4, svc: 2 * time.Millisecond}, {id: "B", k: 4, svc: 2 * time.Millisecond}}
	o := obsFor(bs, "roundrobin")
	if err := Observe(&o, closedTrace(bs, 6, 300*time.Microsecond, 3000)); err != nil {
		t.Fatal(err)
	}
	if o.Load.Kind != "closed" || o.Load.Concurrency != 6 {
		t.Errorf("load %+v, want closed with 6 clients", o.Load)
	}
	if math.Abs(o.Load.ThinkMs-0.3) > 0.1 {
		t.Errorf("think time %.3f ms, want 0.3", o.Load.ThinkMs)
	}
}

func TestObserveTooFew(t *testing.T) {
	o := obsFor([]*synthBackend{{id: "A"}}, "roundrobin")
	if err := Observe(&o, []Release{{Backend: "A", AtNs: 10, LatencyNs: 5}}); err == nil || !strings.Contains(err.Error(), "too few") {
		t.Fatalf("err %v", err)
	}
	if _, err := Advise(context.Background(), o, Options{}); err == nil {
		t.Fatal("advice on one request")
	}
}

func loadAware(name string) bool {
	a, err := balance.Lookup(name)
	return err == nil && a.Caps.NeedsLoad
}

// TestAdviseSlowBackend: a closed load over a fast and a slow backend under roundrobin: the
// slow one's queue holds most clients, and a load-aware balancer is predicted better in every
// run. Over two equal backends nothing beats roundrobin in every run: advise keeps it.
func TestAdviseSlowBackend(t *testing.T) {
	for _, tt := range []struct {
		name  string
		bs    []*synthBackend
		aware bool
	}{
		{"one slow", []*synthBackend{{id: "A", k: 4, svc: 2 * time.Millisecond}, {id: "B", k: 1, svc: 20 * time.Millisecond}}, true},
		{"equal", []*synthBackend{{id: "A", k: 4, svc: 5 * time.Millisecond}, {id: "B", k: 4, svc: 5 * time.Millisecond}}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o := obsFor(tt.bs, "roundrobin")
			if err := Observe(&o, closedTrace(tt.bs, 8, 200*time.Microsecond, 3000)); err != nil {
				t.Fatal(err)
			}
			for _, obj := range []Objective{P99, Throughput} {
				adv, err := Advise(context.Background(), o, Options{Objective: obj})
				if err != nil {
					t.Fatal(err)
				}
				if got := loadAware(adv.Best.Balancer); got != tt.aware {
					t.Errorf("%s: best %s (load-aware %v), want load-aware %v; %s", obj, adv.Best.Balancer, got, tt.aware, adv.Verdict)
				}
				if !tt.aware && (adv.Best.Balancer != "roundrobin" || !adv.Choices[0].Current) {
					t.Errorf("%s: equal backends: best %+v, want the current roundrobin first", obj, adv.Best)
				}
				if tt.aware && adv.Choices[0].Current {
					t.Errorf("%s: the current choice comes first: %s", obj, adv.Verdict)
				}
				if n := len(slices.DeleteFunc(slices.Clone(adv.Choices), func(c Choice) bool { return !c.Current })); n != 1 {
					t.Errorf("%d choices marked current", n)
				}
			}
		})
	}
}

// TestHashBalancersOnlyWithAKey: the hash-based balancers are tried only when the pool
// hashes a key.
func TestHashBalancersOnlyWithAKey(t *testing.T) {
	bs := []*synthBackend{{id: "A", k: 4, svc: time.Millisecond}, {id: "B", k: 4, svc: time.Millisecond}}
	o := obsFor(bs, "roundrobin")
	if err := Observe(&o, openTrace(bs, 500, 1000, 2)); err != nil {
		t.Fatal(err)
	}
	hashed := func(adv Advice) bool {
		return slices.ContainsFunc(adv.Choices, func(c Choice) bool {
			a, _ := balance.Lookup(c.Balancer)
			return a.Caps.NeedsKey
		})
	}
	adv, err := Advise(context.Background(), o, Options{Runs: 3})
	if err != nil || hashed(adv) {
		t.Fatalf("without a hash key: hash balancers tried %v (%v)", hashed(adv), err)
	}
	o.HashKey = "uri"
	adv, err = Advise(context.Background(), o, Options{Runs: 3})
	if err != nil || !hashed(adv) {
		t.Fatalf("with a hash key: hash balancers tried %v (%v)", hashed(adv), err)
	}
}

// TestAdviseScenarios: on each seed scenario advise leaves the seed's method for a load-aware
// balancer, predicted better in every run, and the JSON has the contract's shape.
func TestAdviseScenarios(t *testing.T) {
	for _, name := range []string{"heterogeneous", "slow-backend", "variable-cost"} {
		t.Run(name, func(t *testing.T) {
			sc, err := sim.Lookup(name)
			if err != nil {
				t.Fatal(err)
			}
			adv, err := AdviseScenario(context.Background(), sc, Options{Runs: 5})
			if err != nil {
				t.Fatal(err)
			}
			if !loadAware(adv.Best.Balancer) || adv.Choices[0].Current {
				t.Errorf("best %+v: %s", adv.Best, adv.Verdict)
			}
			var doc map[string]any
			if err := json.Unmarshal(adv.JSON(), &doc); err != nil {
				t.Fatal(err)
			}
			best := doc["best"].(map[string]any)
			if len(best) != 3 || best["balancer"] == nil || best["settings"] == nil || best["predicted"] == nil {
				t.Errorf("best is %v, want exactly balancer, settings, predicted", best)
			}
			choices := doc["choices"].([]any)
			first := choices[0].(map[string]any)
			rg := first["range"].(map[string]any)
			for _, k := range []string{"throughput_rps", "makespan_s", "p50_ms", "p99_ms", "queue_ms", "share_pct"} {
				if rg[k] == nil {
					t.Errorf("range lacks %s: %v", k, rg)
				}
			}
			var sb strings.Builder
			if err := adv.WriteTable(&sb); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(sb.String(), "best") || !strings.Contains(sb.String(), "current") || !strings.Contains(sb.String(), "verdict: switch to") {
				t.Errorf("table:\n%s", sb.String())
			}
		})
	}
}

func TestParseObjective(t *testing.T) {
	for _, s := range []string{"", "p99", "throughput", "makespan"} {
		if _, err := ParseObjective(s); err != nil {
			t.Errorf("%q: %v", s, err)
		}
	}
	if _, err := ParseObjective("p50"); err == nil || !strings.Contains(err.Error(), "valid: p99, throughput, makespan") {
		t.Errorf("p50: %v", err)
	}
}

func TestBadObservations(t *testing.T) {
	bs := []*synthBackend{{id: "A", k: 1, svc: time.Millisecond}}
	good := obsFor(bs, "roundrobin")
	if err := Observe(&good, openTrace(bs, 100, 200, 3)); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name   string
		mutate func(*Observation)
	}{
		{"unknown balancer", func(o *Observation) { o.Balancer = "nope" }},
		{"no backends", func(o *Observation) { o.Backends = nil }},
		{"decreasing service", func(o *Observation) { o.Backends[0].ServiceMs = []float64{3, 2, 1} }},
		{"negative service", func(o *Observation) { o.Backends[0].ServiceMs = []float64{-1, 2} }},
		{"open without a rate", func(o *Observation) { o.Load = Load{Kind: "open"} }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o := good
			o.Backends = slices.Clone(good.Backends)
			tt.mutate(&o)
			if _, err := Advise(context.Background(), o, Options{Runs: 2}); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}

func TestNiceMs(t *testing.T) {
	for _, tt := range []struct{ in, want float64 }{{0.7, 1}, {1, 1}, {1.2, 2}, {3, 5}, {7, 10}, {23, 50}, {0, 0}} {
		if got := niceMs(tt.in); got != tt.want {
			t.Errorf("niceMs(%g) = %g, want %g", tt.in, got, tt.want)
		}
	}
}
