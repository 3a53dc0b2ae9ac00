package sim

import (
	"math"
	"testing"
	"time"
)

// runScenario runs one algorithm on sc and fails the test if the run reports an error.
func runScenario(t *testing.T, sc Scenario, algorithm string) Result {
	t.Helper()
	r, err := Run(sc, algorithm)
	if err != nil {
		t.Fatalf("Run(%s, %s): %v", sc.Name, algorithm, err)
	}
	return r
}

func mustLookup(t *testing.T, name string) Scenario {
	t.Helper()
	sc, err := Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

// TestModelPredictions pins the figures ../shared/SCENARIOS.md says the model gives. Virtual
// time is exact, so makespans are compared to the nanosecond.
func TestModelPredictions(t *testing.T) {
	tests := []struct {
		scenario, algorithm string
		makespan            time.Duration
		split               map[string]int // nil: not pinned
	}{
		{"slow-backend", "byrequests", 25 * time.Second, map[string]int{"A": 25, "B": 25}},
		{"slow-backend", "bybusyness", 5 * time.Second, map[string]int{"A": 45, "B": 5}},
		{"variable-cost", "byrequests", 15 * time.Second, map[string]int{"A": 25, "B": 25}},
		{"variable-cost", "bybusyness", 10 * time.Second, nil},
		{"variable-cost-backlog", "byrequests", 10 * time.Second, nil},
		{"variable-cost-backlog", "bybusyness", 10 * time.Second, nil},
		{"variable-cost-unlimited", "byrequests", 8 * time.Second, nil},
		{"variable-cost-unlimited", "bybusyness", 8 * time.Second, nil},
	}
	for _, tt := range tests {
		t.Run(tt.scenario+"/"+tt.algorithm, func(t *testing.T) {
			r := runScenario(t, mustLookup(t, tt.scenario), tt.algorithm)
			if r.Makespan != tt.makespan {
				t.Errorf("makespan %v, model predicts %v", r.Makespan, tt.makespan)
			}
			for id, want := range tt.split {
				if r.Split[id] != want {
					t.Errorf("split %v, want %v", r.Split, tt.split)
					break
				}
			}
		})
	}
}

// TestBacklogAndUnlimitedBoundEveryAlgorithm: with a central backlog (max_conns = workers) or
// unlimited workers, no backend queue forms, so every algorithm meets the same bound.
func TestBacklogAndUnlimitedBoundEveryAlgorithm(t *testing.T) {
	for _, tt := range []struct {
		scenario string
		makespan time.Duration
	}{
		{"variable-cost-backlog", 10 * time.Second},
		{"variable-cost-unlimited", 8 * time.Second},
	} {
		sc := mustLookup(t, tt.scenario)
		for _, alg := range DefaultAlgorithms(sc) {
			t.Run(tt.scenario+"/"+alg, func(t *testing.T) {
				if r := runScenario(t, sc, alg); r.Makespan != tt.makespan {
					t.Errorf("makespan %v, want %v", r.Makespan, tt.makespan)
				}
			})
		}
	}
}

// TestHeterogeneous: RR-like methods cannot beat twice the slow backend's rate; SQF reaches
// the sum of capacities with the capacity split.
func TestHeterogeneous(t *testing.T) {
	sc := mustLookup(t, "heterogeneous")
	const ideal = 2.0/0.000706 + 1.0/0.000800 // 4082.9 req/s
	idealShareB := (1.0 / 0.000800) / ideal   // 30.6 %
	tests := []struct {
		algorithm string
		rrBound   bool // throughput <= 2500
		nearIdeal bool // within 2 % of ideal, split within 2 points
	}{
		{"random", true, false},
		{"roundrobin", true, false},
		{"swrr", true, false},
		{"sqf", false, true},
		{"bybusyness", false, true},
		{"p2c", false, true},
	}
	for _, tt := range tests {
		t.Run(tt.algorithm, func(t *testing.T) {
			r := runScenario(t, sc, tt.algorithm)
			if tt.rrBound && r.Throughput > 2500+1e-6 {
				t.Errorf("throughput %.1f req/s exceeds the RR bound 2500", r.Throughput)
			}
			if tt.nearIdeal {
				if math.Abs(r.Throughput-ideal)/ideal > 0.02 {
					t.Errorf("throughput %.1f req/s, want within 2%% of %.1f", r.Throughput, ideal)
				}
				share := float64(r.Split["B"]) / float64(sc.Requests)
				if math.Abs(share-idealShareB) > 0.02 {
					t.Errorf("B's share %.3f, want %.3f +- 0.02", share, idealShareB)
				}
			}
		})
	}
}

// TestHedgedSlowBackend: one hedge after 50 ms takes every method under 0.5 s, and every
// hedge has exactly one loser that is cancelled.
func TestHedgedSlowBackend(t *testing.T) {
	sc := mustLookup(t, "slow-backend-hedged")
	for _, alg := range DefaultAlgorithms(sc) {
		t.Run(alg, func(t *testing.T) {
			r := runScenario(t, sc, alg)
			if r.Makespan > 500*time.Millisecond {
				t.Errorf("makespan %v > 0.5 s", r.Makespan)
			}
			if r.Responses != sc.Requests || r.Failed != 0 {
				t.Errorf("responses %d (failed %d), want %d", r.Responses, r.Failed, sc.Requests)
			}
			if r.Cancelled != r.Hedges {
				t.Errorf("%d copies cancelled for %d hedges: each hedged request must leave exactly one loser", r.Cancelled, r.Hedges)
			}
			if got := r.Split["A"] + r.Split["B"]; got != sc.Requests {
				t.Errorf("split %v sums to %d, want %d", r.Split, got, sc.Requests)
			}
		})
	}
}

// TestHedgingOffHasNoHedges guards against hedges leaking into unhedged scenarios.
func TestHedgingOffHasNoHedges(t *testing.T) {
	r := runScenario(t, mustLookup(t, "slow-backend"), "swrr")
	if r.Hedges != 0 || r.Cancelled != 0 {
		t.Fatalf("hedges %d, cancelled %d without hedging", r.Hedges, r.Cancelled)
	}
}
