package sim

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The catalogue: one Go value per lab scenario of ../shared/SCENARIOS.md that the model can
// express.
// Keep-alive does not exist in the model, so the heterogeneous scenario has one variant.

func heterogeneous() Scenario {
	return Scenario{
		Name:    "heterogeneous",
		Summary: "A = 2 workers x 0.706 ms, B = 1 worker x 0.800 ms; max_conns 32; -c 16 -n 100000",
		Source:  "seed 000: lighttpd RR vs SQF (ideal 4083 req/s, split 30.6/69.4)",
		Backends: []Backend{
			{ID: "A", Workers: 2, Service: Fixed(706 * time.Microsecond)},
			{ID: "B", Workers: 1, Service: Fixed(800 * time.Microsecond)},
		},
		MaxConns:    32,
		NoBacklog:   true, // the lab's pool has no max_queue (and -c 16 never fills 32 slots)
		Concurrency: 16,
		Requests:    100000,
		RandSeed:    1,
		Baseline:    "random",
		Metric:      "throughput",
		Profile:     ProfileKeepAlive,
	}
}

func slowBackend() Scenario {
	return Scenario{
		Name:    "slow-backend",
		Summary: "A answers at once (unlimited workers), B = 5 workers x 5 s; -c 10 -n 50",
		Source:  "seed 001 scenario 1: byrequests 25/25 in 25 s, bybusyness 45/5 in 5 s",
		Backends: []Backend{
			{ID: "A", Workers: 0, Service: Fixed(0)},
			{ID: "B", Workers: 5, Service: Fixed(5 * time.Second)},
		},
		Concurrency: 10,
		Requests:    50,
		RandSeed:    1,
		Baseline:    "byrequests",
		Metric:      "makespan",
		Profile:     ProfileFresh,
	}
}

// HedgeDelay is the hedged slow-backend scenario's delay before a second copy.
const HedgeDelay = 50 * time.Millisecond

func slowBackendHedged() Scenario {
	sc := slowBackend()
	sc.Name = "slow-backend-hedged"
	sc.Summary += "; one hedge after 50 ms, loser cancelled"
	sc.Source = "seed 001 scenario 1 with hedging (goal <= 0.5 s)"
	sc.Hedge = Hedge{Delay: HedgeDelay, Max: 1}
	return sc
}

// WaitList is seed 001's ?wait= list in seconds, cycled by request index.
var WaitList = []time.Duration{0, 0, time.Second, 0, 2 * time.Second, 0, 5 * time.Second, 0, 2 * time.Second, time.Second}

func variableCost() Scenario {
	return Scenario{
		Name:    "variable-cost",
		Summary: "two backends x 4 workers, service ?wait=0,0,1,0,2,0,5,0,2,1 s by request index; -c 10 -n 50",
		Source:  "seed 001 scenario 2: byrequests 15.0 s, bybusyness 10.0 s",
		Backends: []Backend{
			{ID: "A", Workers: 4, Service: PerRequest(WaitList...)},
			{ID: "B", Workers: 4, Service: PerRequest(WaitList...)},
		},
		Concurrency: 10,
		Requests:    50,
		RandSeed:    1,
		Baseline:    "byrequests",
		Metric:      "makespan",
		Profile:     ProfileFreshOrdered,
	}
}

func variableCostBacklog() Scenario {
	sc := variableCost()
	sc.Name = "variable-cost-backlog"
	sc.Summary += "; max_conns 4 with Ballast's central backlog queue"
	sc.Source = "seed 001 scenario 2, central backlog: 10.0 s"
	sc.MaxConns, sc.MaxQueue = 4, 100 // as the lab's pool
	return sc
}

func variableCostUnlimited() Scenario {
	sc := variableCost()
	sc.Name = "variable-cost-unlimited"
	sc.Summary = "two backends with unlimited workers, service ?wait= list; -c 10 -n 50"
	sc.Source = "seed 001 scenario 2, client-bound: 8.0 s"
	for i := range sc.Backends {
		sc.Backends[i].Workers = 0
	}
	return sc
}

// ManyBackendCounts are the pool sizes of the many-backends scenario (seed 002).
var ManyBackendCounts = []int{2, 100, 500, 2000, 10000}

// manyBackendsRequests keeps the O(n) reference pickers quick at 10000 backends.
const manyBackendsRequests = 20000

func manyBackends(n int, weighted bool) Scenario {
	sc := Scenario{
		Name:        "many-backends-" + strconv.Itoa(n),
		Summary:     fmt.Sprintf("%d equal backends x 1 worker, exp(mean 1 ms) service; -c 64 -n %d", n, manyBackendsRequests),
		Source:      "seed 002: VNSWRR vs SWRR with many endpoints (model throughput is bounded by the backends)",
		Concurrency: 64,
		Requests:    manyBackendsRequests,
		RandSeed:    1,
		Backends:    make([]Backend, n),
		Baseline:    "swrr",
		Metric:      "throughput",
		Profile:     ProfileKeepAlive,
	}
	if weighted {
		sc.Name += "-weighted"
		sc.Summary = strings.Replace(sc.Summary, "equal backends", "backends weighted 101..105", 1)
	}
	for i := range sc.Backends {
		sc.Backends[i] = Backend{ID: fmt.Sprintf("b%05d", i), Workers: 1, Service: Exponential(time.Millisecond)}
		if weighted {
			sc.Backends[i].Weight = 101 + i%5
		}
	}
	return sc
}

// Scenarios returns the catalogue in presentation order. Each call builds fresh values, so a
// caller may modify what it gets.
func Scenarios() []Scenario {
	out := []Scenario{heterogeneous(), slowBackend(), slowBackendHedged(), variableCost(), variableCostBacklog(), variableCostUnlimited()}
	for _, n := range ManyBackendCounts {
		out = append(out, manyBackends(n, false))
	}
	out = append(out, manyBackends(2000, true))
	return out
}

// ScenarioNames lists the catalogue's names in presentation order.
func ScenarioNames() []string {
	var names []string
	for _, sc := range Scenarios() {
		names = append(names, sc.Name)
	}
	return names
}

// Lookup returns the named scenario, or an error listing the valid names.
func Lookup(name string) (Scenario, error) {
	all := Scenarios()
	if i := slices.IndexFunc(all, func(sc Scenario) bool { return sc.Name == name }); i >= 0 {
		return all[i], nil
	}
	return Scenario{}, fmt.Errorf("unknown scenario %q (valid: %s)", name, strings.Join(ScenarioNames(), ", "))
}
