package sim

import (
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"ballast/balance"
)

// smallScenarios are the catalogue entries with at most 100 backends, cut to 2000 requests so
// that every algorithm can run on each of them in a test.
func smallScenarios() []Scenario {
	var out []Scenario
	for _, sc := range Scenarios() {
		if len(sc.Backends) <= 100 {
			sc.Requests = min(sc.Requests, 2000)
			out = append(out, sc)
		}
	}
	return out
}

func allAlgorithms() []string {
	var names []string
	for _, a := range balance.Algorithms() {
		names = append(names, a.Name)
	}
	return names
}

func TestDeterminism(t *testing.T) {
	for _, sc := range smallScenarios() {
		for _, alg := range allAlgorithms() {
			t.Run(sc.Name+"/"+alg, func(t *testing.T) {
				a, err := Run(sc, alg)
				if err != nil {
					t.Fatal(err)
				}
				b, err := Run(sc, alg)
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(a, b) {
					t.Fatalf("two runs with seed %d differ:\n%+v\n%+v", sc.RandSeed, a, b)
				}
			})
		}
	}
}

// TestSeedMatters shows that the seed reaches the random parts (so determinism is not vacuous).
func TestSeedMatters(t *testing.T) {
	sc := mustLookup(t, "many-backends-100")
	a := runScenario(t, sc, "random")
	sc.RandSeed++
	b := runScenario(t, sc, "random")
	if reflect.DeepEqual(a.Split, b.Split) && a.Makespan == b.Makespan {
		t.Fatal("different seeds gave identical random runs")
	}
}

// randomScenario draws a small scenario with every feature the model has.
func randomScenario(r *rand.Rand) Scenario {
	nb := 1 + r.IntN(6)
	sc := Scenario{
		Name:        "random",
		MaxConns:    r.IntN(4),
		Concurrency: 1 + r.IntN(20),
		Requests:    r.IntN(300),
		RandSeed:    r.Uint64(),
	}
	if r.IntN(2) == 0 {
		sc.Hedge = Hedge{Delay: time.Duration(1+r.IntN(20)) * time.Millisecond, Max: r.IntN(3)}
	}
	if r.IntN(2) == 0 { // the real machine's delays, start-up and stalls included
		us := func() Dist {
			return Dist{Q: []time.Duration{time.Duration(r.IntN(50)) * time.Microsecond, time.Duration(50+r.IntN(2000)) * time.Microsecond}}
		}
		sc.Jitter = &Jitter{Send: us(), ToPick: us(), Forward: us(), Connect: us(), Overshoot: us(), Return: us(), Deliver: us(),
			OneSender: r.IntN(2) == 0}
		if r.IntN(2) == 0 {
			sc.Jitter.First = &Hops{Send: us(), ToPick: us(), Forward: us(), Return: us(), Deliver: us()}
		}
		if r.IntN(2) == 0 {
			sc.Jitter.StallRate, sc.Jitter.Stall = float64(1+r.IntN(50)), us()
		}
	}
	switch r.IntN(4) {
	case 0:
		sc.NoBacklog = true
	case 1:
		sc.MaxQueue = 1 + r.IntN(5)
		sc.QueueTimeout = time.Duration(r.IntN(5)) * time.Millisecond
	}
	if r.IntN(4) == 0 {
		sc.Arrivals = Arrivals{Rate: float64(100 + r.IntN(5000)), CV: r.Float64() * 3}
	}
	for i := range nb {
		var svc Service
		switch r.IntN(5) {
		case 4:
			svc = Empirical(Dist{Q: []time.Duration{0, time.Millisecond, 5 * time.Millisecond}})
		case 0:
			svc = Fixed(time.Duration(r.IntN(3)) * time.Millisecond)
		case 1:
			svc = PerRequest(0, 3*time.Millisecond, 0, 10*time.Millisecond)
		case 2:
			svc = Exponential(2 * time.Millisecond)
		default:
			svc = LogNormal(time.Millisecond, 1)
		}
		sc.Backends = append(sc.Backends, Backend{
			ID: string(rune('A' + i)), Weight: r.IntN(4), Workers: r.IntN(4), Service: svc, ErrorRate: float64(r.IntN(3)) / 4,
		})
	}
	return sc
}

// TestEveryRequestAnsweredOnce is the property test: for random scenarios and every algorithm
// (hash algorithms with per-request keys), each request gets exactly one response, the split
// accounts for every response, and every hedge leaves exactly one cancelled loser.
func TestEveryRequestAnsweredOnce(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	for k := range 40 {
		sc := randomScenario(r)
		for _, alg := range allAlgorithms() {
			res, err := Run(sc, alg)
			if err != nil {
				t.Fatalf("case %d %s %+v: %v", k, alg, sc, err)
			}
			checkAccounting(t, sc, res)
		}
	}
}

func checkAccounting(t *testing.T, sc Scenario, res Result) {
	t.Helper()
	if res.Responses != sc.Requests {
		t.Fatalf("%s: %d responses for %d requests", res.Algorithm, res.Responses, sc.Requests)
	}
	sum := res.Failed
	for _, n := range res.Split {
		sum += n
	}
	if sum != sc.Requests {
		t.Fatalf("%s: split %v + %d failed = %d, want %d", res.Algorithm, res.Split, res.Failed, sum, sc.Requests)
	}
	if res.Cancelled != res.Hedges {
		t.Fatalf("%s: %d cancelled for %d hedges", res.Algorithm, res.Cancelled, res.Hedges)
	}
	if res.HedgeWins > res.Hedges {
		t.Fatalf("%s: %d hedge wins > %d hedges", res.Algorithm, res.HedgeWins, res.Hedges)
	}
}

func TestHashAlgorithmsUseKeys(t *testing.T) {
	sc := mustLookup(t, "variable-cost-unlimited")
	for _, a := range balance.Algorithms() {
		if !a.Caps.NeedsKey {
			continue
		}
		t.Run(a.Name, func(t *testing.T) {
			r := runScenario(t, sc, a.Name)
			if r.Split["A"] == 0 || r.Split["B"] == 0 {
				t.Fatalf("split %v: per-request keys should reach both backends", r.Split)
			}
		})
	}
}

func TestDefaultAlgorithmsNeedNoKey(t *testing.T) {
	names := DefaultAlgorithms(mustLookup(t, "heterogeneous"))
	for _, want := range []string{"random", "roundrobin", "sqf", "bybusyness", "p2c", "ewma"} {
		found := false
		for _, n := range names {
			found = found || n == want
		}
		if !found {
			t.Errorf("default algorithms %v lack %s", names, want)
		}
	}
	for _, n := range names {
		a, err := balance.Lookup(n)
		if err != nil || a.Caps.NeedsKey {
			t.Errorf("default algorithm %s: err %v, needs key %v", n, err, a.Caps.NeedsKey)
		}
	}
	sc := mustLookup(t, "heterogeneous")
	sc.Algorithms = []string{"sqf"}
	if got := DefaultAlgorithms(sc); !reflect.DeepEqual(got, []string{"sqf"}) {
		t.Errorf("scenario's own list ignored: %v", got)
	}
}

func TestRunScenarioErrors(t *testing.T) {
	sc := mustLookup(t, "slow-backend")
	tests := []struct {
		name       string
		algorithms []string
		want       string
	}{
		{"unknown algorithm lists valid names", []string{"swrr", "nope"}, "valid:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := RunScenario(sc, tt.algorithms)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err %v, want it to contain %q", err, tt.want)
			}
		})
	}
	rep, err := RunScenario(sc, []string{"byrequests", "bybusyness"})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != 2 || rep.Results[0].Algorithm != "byrequests" || rep.Results[1].Algorithm != "bybusyness" {
		t.Fatalf("results %+v, want byrequests then bybusyness", rep.Results)
	}
}

func TestLookup(t *testing.T) {
	names := ScenarioNames()
	for _, want := range []string{"heterogeneous", "slow-backend", "slow-backend-hedged", "variable-cost",
		"variable-cost-backlog", "variable-cost-unlimited", "many-backends-2", "many-backends-10000"} {
		sc, err := Lookup(want)
		if err != nil || sc.Name != want {
			t.Errorf("Lookup(%q) = %q, %v", want, sc.Name, err)
		}
		if err := sc.Validate(); err != nil {
			t.Errorf("%s does not validate: %v", want, err)
		}
	}
	_, err := Lookup("nope")
	if err == nil || !strings.Contains(err.Error(), strings.Join(names, ", ")) {
		t.Fatalf("Lookup(nope) error %v does not list the valid names", err)
	}
}

func TestValidate(t *testing.T) {
	good := func() Scenario {
		return Scenario{Name: "v", Concurrency: 1, Requests: 1, Backends: []Backend{{ID: "A", Service: Fixed(time.Millisecond)}}}
	}
	tests := []struct {
		name   string
		mutate func(*Scenario)
		ok     bool
	}{
		{"valid", func(*Scenario) {}, true},
		{"no backends", func(s *Scenario) { s.Backends = nil }, false},
		{"zero concurrency", func(s *Scenario) { s.Concurrency = 0 }, false},
		{"negative requests", func(s *Scenario) { s.Requests = -1 }, false},
		{"negative max_conns", func(s *Scenario) { s.MaxConns = -1 }, false},
		{"negative hedge delay", func(s *Scenario) { s.Hedge.Delay = -1 }, false},
		{"too many hedges", func(s *Scenario) { s.Hedge = Hedge{Delay: 1, Max: maxHedges + 1} }, false},
		{"negative workers", func(s *Scenario) { s.Backends[0].Workers = -1 }, false},
		{"negative weight", func(s *Scenario) { s.Backends[0].Weight = -1 }, false},
		{"negative service", func(s *Scenario) { s.Backends[0].Service = Fixed(-1) }, false},
		{"empty list", func(s *Scenario) { s.Backends[0].Service = PerRequest() }, false},
		{"negative in list", func(s *Scenario) { s.Backends[0].Service = PerRequest(1, -1) }, false},
		{"lognormal zero median", func(s *Scenario) { s.Backends[0].Service = LogNormal(0, 1) }, false},
		{"unknown kind", func(s *Scenario) { s.Backends[0].Service.Kind = 99 }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sc := good()
			tt.mutate(&sc)
			err := sc.Validate()
			if (err == nil) != tt.ok {
				t.Fatalf("Validate() = %v, want ok=%v", err, tt.ok)
			}
			if !tt.ok {
				if _, err := Run(sc, "swrr"); err == nil {
					t.Fatal("Run accepted an invalid scenario")
				}
			}
		})
	}
}

func TestServiceDraw(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	list := PerRequest(1, 2, 3)
	for i, want := range []time.Duration{1, 2, 3, 1, 2} {
		if got := list.draw(i, r); got != want {
			t.Errorf("list draw %d = %v, want %v", i, got, want)
		}
	}
	if got := Fixed(5).draw(9, r); got != 5 {
		t.Errorf("fixed draw = %v", got)
	}
	const n = 20000
	for _, tt := range []struct {
		svc      Service
		mean     float64 // expected sample mean in ms
		tolerant float64
	}{
		{Exponential(time.Millisecond), 1, 0.05},
		{LogNormal(time.Millisecond, 0.5), 1.1331, 0.05}, // exp(sigma^2/2)
	} {
		var sum float64
		for i := range n {
			d := tt.svc.draw(i, r)
			if d < 0 {
				t.Fatalf("%v drew negative %v", tt.svc, d)
			}
			sum += float64(d) / float64(time.Millisecond)
		}
		if m := sum / n; m < tt.mean*(1-tt.tolerant) || m > tt.mean*(1+tt.tolerant) {
			t.Errorf("%v: sample mean %.4f ms, want %.4f", tt.svc, m, tt.mean)
		}
	}
}

func TestPercentiles(t *testing.T) {
	tests := []struct {
		in   []time.Duration
		want Percentiles
	}{
		{nil, Percentiles{}},
		{[]time.Duration{7}, Percentiles{7, 7, 7, 7}},
		{[]time.Duration{4, 1, 3, 2}, Percentiles{2, 4, 4, 4}},
	}
	seq := make([]time.Duration, 100)
	for i := range seq {
		seq[99-i] = time.Duration(i + 1)
	}
	tests = append(tests, struct {
		in   []time.Duration
		want Percentiles
	}{seq, Percentiles{50, 90, 99, 100}})
	for _, tt := range tests {
		if got := percentiles(tt.in); got != tt.want {
			t.Errorf("percentiles(%v) = %+v, want %+v", tt.in, got, tt.want)
		}
	}
}

func BenchmarkRunHeterogeneous(b *testing.B) {
	sc, err := Lookup("heterogeneous")
	if err != nil {
		b.Fatal(err)
	}
	sc.Requests = 10000
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Run(sc, "sqf"); err != nil {
			b.Fatal(err)
		}
	}
}

func TestWriteTable(t *testing.T) {
	sc := Scenario{Name: "t", Summary: "five backends", Source: "test"}
	split := map[string]int{}
	for i := range 5 {
		id := string(rune('A' + i))
		sc.Backends = append(sc.Backends, Backend{ID: id})
		split[id] = 2 * i
	}
	rep := Report{Scenario: sc,
		Results: []Result{{Algorithm: "sqf", Makespan: 1500 * time.Millisecond, Throughput: 13.3, Split: split,
			Latency: Percentiles{P50: 2 * time.Millisecond, P99: 30 * time.Microsecond}, Hedges: 3, HedgeWins: 2, Cancelled: 3}},
	}
	var b strings.Builder
	if err := WriteTable(&b, rep); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"scenario t: five backends", "(test)", "algorithm", "sqf", "1.500s", "13.3",
		"0..8 per backend, 4/5 used", "2.000ms", "30.0µs", "3 hedges sent, 2 won, 3 copies cancelled"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}
