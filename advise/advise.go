package advise

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"ballast/balance"
	"ballast/sim"
)

// Objective is what the operator wants the best choice for.
type Objective string

// The objectives: the 99th percentile latency (lower is better), the throughput (higher), or
// the time to finish the scenario's requests (lower).
const (
	P99        Objective = "p99"
	Throughput Objective = "throughput"
	Makespan   Objective = "makespan"
)

// ParseObjective accepts p99, throughput, makespan, or "" (the input's default).
func ParseObjective(s string) (Objective, error) {
	switch o := Objective(s); o {
	case "", P99, Throughput, Makespan:
		return o, nil
	}
	return "", fmt.Errorf("unknown objective %q (valid: p99, throughput, makespan)", s)
}

// lowerIsBetter says which way an objective points.
func (o Objective) lowerIsBetter() bool { return o != Throughput }

// Options tune a replay.
type Options struct {
	// Objective picks the best choice; "" is p99 for an observation and the scenario's own
	// metric for a lab scenario.
	Objective Objective
	// Runs is how many seeds each choice is replayed with (0 = DefaultRuns).
	Runs int
	// Requests is each replay's request count (0 = the input's: a scenario's own, capped at
	// MaxRequests; 2000 for an observation).
	Requests int
	// Jitters, when set, are the jitters of measured runs (the lab's): replay k of each
	// choice draws Jitters[k mod len]. They replace a scenario's own.
	Jitters []*sim.Jitter
}

// DefaultRuns is how many seeds each choice is replayed with.
const DefaultRuns = 10

// MaxRequests caps a replay's requests (a throughput scenario of 100000 requests reaches the
// same steady state with fewer).
const MaxRequests = 10000

// observedRequests is an observation's replay length.
const observedRequests = 2000

// DefaultMaxQueue is the backlog advise tries with a connection limit when the pool has none.
const DefaultMaxQueue = 1024

// Settings are the pool settings a choice changes. MaxConns 0 is no limit; MaxQueue 0 is no
// backlog (with a limit, a request that finds every backend full fails at once); HedgeDelayMs
// 0 is no hedging.
type Settings struct {
	MaxConns     int     `json:"max_conns"`
	MaxQueue     int     `json:"max_queue"`
	HedgeDelayMs float64 `json:"hedge_delay_ms"`
}

func (s Settings) String() string {
	hedge := "off"
	if s.HedgeDelayMs > 0 {
		hedge = fmtMs(s.HedgeDelayMs)
	}
	return fmt.Sprintf("max_conns %d, max_queue %d, hedge %s", s.MaxConns, s.MaxQueue, hedge)
}

// Predicted is a choice's predicted figures: the medians over its runs.
type Predicted struct {
	ThroughputRPS float64            `json:"throughput_rps"`
	MakespanS     float64            `json:"makespan_s"`
	P50Ms         float64            `json:"p50_ms"`
	P99Ms         float64            `json:"p99_ms"`
	QueueMs       float64            `json:"queue_ms"`
	SharePct      map[string]float64 `json:"share_pct"`
	FailedPct     float64            `json:"failed_pct"`
	ErrorsPct     float64            `json:"errors_pct"`
}

// Range is the interval each figure of a fresh run is predicted in: for throughput and
// makespan sim's prediction interval over the choice's runs (sim.Range.Predicted, as the lab
// states its rows' ranges), for the others their smallest and largest value over the runs.
type Range struct {
	ThroughputRPS [2]float64            `json:"throughput_rps"`
	MakespanS     [2]float64            `json:"makespan_s"`
	P50Ms         [2]float64            `json:"p50_ms"`
	P99Ms         [2]float64            `json:"p99_ms"`
	QueueMs       [2]float64            `json:"queue_ms"`
	SharePct      map[string][2]float64 `json:"share_pct"`
}

// Choice is one balancer with one set of settings, replayed.
type Choice struct {
	Balancer  string    `json:"balancer"`
	Settings  Settings  `json:"settings"`
	Predicted Predicted `json:"predicted"`
	Range     Range     `json:"range"`
	// Current marks the pool's own balancer and settings.
	Current bool `json:"current,omitempty"`

	rg sim.Range
}

// Best is the recommended choice, as the JSON's "best" gives it.
type Best struct {
	Balancer  string    `json:"balancer"`
	Settings  Settings  `json:"settings"`
	Predicted Predicted `json:"predicted"`
}

// Advice is the outcome of a replay: the best choice for the objective first, then every
// choice tried, best to worst.
type Advice struct {
	Pool      string    `json:"pool"`
	Source    string    `json:"source"`
	Objective Objective `json:"objective"`
	Runs      int       `json:"runs"`
	Requests  int       `json:"requests"`
	// Verdict says in a sentence what to do and why.
	Verdict string `json:"verdict"`
	// Model says what the replay modelled (the load, the backends).
	Model   []string `json:"model"`
	Best    Best     `json:"best"`
	Choices []Choice `json:"choices"`

	backends []string
}

// input is what both kinds of input become: a scenario with the current choice applied.
type input struct {
	name, source string
	sc           sim.Scenario // the current settings applied
	current      Settings
	balancer     string // the current balancer, by the name the pool gives it
	canon        string // and its registered name
	hashKey      bool
	objective    Objective
	model        []string
	queueTimeout time.Duration
	hedgeMax     int
	workers      int     // the most workers any backend has (0 = unknown)
	hedgeMs      float64 // the hedge delay worth trying (0 = none)
}

// Advise replays an observed pool for every balancer that fits it and a small grid of
// settings, and ranks the choices.
func Advise(ctx context.Context, o Observation, opt Options) (Advice, error) {
	in, err := fromObservation(o, opt)
	if err != nil {
		return Advice{}, err
	}
	return replay(ctx, in, opt)
}

// AdviseScenario does the same for a lab scenario, whose current choice is its Baseline (the
// seed's own method) with its own settings.
func AdviseScenario(ctx context.Context, sc sim.Scenario, opt Options) (Advice, error) {
	in, err := fromScenario(sc, opt)
	if err != nil {
		return Advice{}, err
	}
	return replay(ctx, in, opt)
}

func canonical(name string) (string, balance.Algorithm, error) {
	a, err := balance.Lookup(name)
	if err != nil {
		return "", a, err
	}
	return a.Name, a, nil
}

// candidates are the balancers that fit the input: every registered one, the hash-based ones
// only when the pool hashes a key.
func (in *input) candidates() []string {
	var out []string
	for _, a := range balance.Algorithms() {
		if a.Caps.NeedsKey && !in.hashKey || a.Name == in.canon {
			continue // the current one is tried under the pool's own name
		}
		out = append(out, a.Name)
	}
	return out
}

// apply returns the input's scenario with s in force.
func (in *input) apply(s Settings) sim.Scenario {
	sc := s.Apply(in.sc)
	if sc.MaxQueue > 0 {
		sc.QueueTimeout = in.queueTimeout
	}
	if sc.Hedge.Delay > 0 {
		sc.Hedge.Max = max(in.hedgeMax, 1)
	}
	return sc
}

// Apply returns sc with s in force, as Ballast applies these settings: a connection limit with
// a backlog of MaxQueue (none: a request finding every backend full fails), one hedge after
// HedgeDelayMs. The backlog has no timeout.
func (s Settings) Apply(sc sim.Scenario) sim.Scenario {
	sc.MaxConns, sc.MaxQueue, sc.NoBacklog, sc.QueueTimeout = s.MaxConns, 0, false, 0
	if s.MaxConns > 0 {
		if s.MaxQueue > 0 {
			sc.MaxQueue = s.MaxQueue
		} else {
			sc.NoBacklog = true
		}
	}
	sc.Hedge = sim.Hedge{}
	if s.HedgeDelayMs > 0 {
		sc.Hedge = sim.Hedge{Delay: time.Duration(s.HedgeDelayMs * 1e6), Max: 1}
	}
	return sc
}

// SettingsOf are the settings sc has in force, as advise names them (a connection limit with
// the model's unbounded backlog counts as a backlog of DefaultMaxQueue).
func SettingsOf(sc sim.Scenario) Settings {
	s := Settings{MaxConns: sc.MaxConns, MaxQueue: sc.MaxQueue, HedgeDelayMs: float64(sc.Hedge.Delay) / 1e6}
	if sc.MaxConns > 0 && !sc.NoBacklog && sc.MaxQueue == 0 {
		s.MaxQueue = DefaultMaxQueue
	}
	if sc.MaxConns == 0 {
		s.MaxQueue = 0
	}
	return s
}

// grid is the settings worth trying beside the current ones: without a connection limit and
// with one at the backends' workers (a backlog in front), and, in a pool that hedges, with
// hedging off and at another delay. Hedging is never turned on: advise cannot tell whether a
// pool's requests are idempotent.
func (in *input) grid() []Settings {
	conns := []int{in.current.MaxConns, 0}
	if in.workers > 0 {
		conns = append(conns, in.workers)
	}
	hedges := []float64{in.current.HedgeDelayMs}
	if in.current.HedgeDelayMs > 0 {
		hedges = append(hedges, 0)
		if in.hedgeMs > 0 {
			hedges = append(hedges, in.hedgeMs)
		}
	}
	var out []Settings
	for _, c := range conns {
		q := 0
		if c > 0 {
			q = in.current.MaxQueue
			if q == 0 {
				q = DefaultMaxQueue
			}
			if c == in.current.MaxConns {
				q = in.current.MaxQueue // as configured, even without a backlog
			}
		}
		for _, h := range hedges {
			s := Settings{MaxConns: c, MaxQueue: q, HedgeDelayMs: h}
			if !slices.Contains(out, s) {
				out = append(out, s)
			}
		}
	}
	return out
}

func replay(ctx context.Context, in *input, opt Options) (Advice, error) {
	obj := opt.Objective
	if obj == "" {
		obj = in.objective
	}
	runs := opt.Runs
	if runs <= 0 {
		runs = DefaultRuns
	}
	adv := Advice{Pool: in.name, Source: in.source, Objective: obj, Runs: runs, Requests: in.sc.Requests, Model: in.model}
	for _, b := range in.sc.Backends {
		adv.backends = append(adv.backends, b.ID)
	}
	tried := map[string]bool{}
	var choices []Choice
	try := func(alg string, s Settings) error {
		key := alg + "|" + s.String()
		if tried[key] {
			return nil
		}
		tried[key] = true
		if err := ctx.Err(); err != nil {
			return err
		}
		var vary func(int, *sim.Scenario)
		if js := opt.Jitters; len(js) > 0 {
			vary = func(k int, sc *sim.Scenario) { sc.Jitter = js[k%len(js)] }
		}
		sc := in.apply(s)
		rg, err := sim.RunRangeOf(sc, alg, runs, vary)
		if err != nil {
			return fmt.Errorf("advise: %s with %s: %w", alg, s, err)
		}
		choices = append(choices, choiceOf(sc, alg, s, rg, alg == in.balancer && s == in.current))
		return nil
	}
	// Every balancer with the current settings, then the grid for the best few and the current.
	if err := try(in.balancer, in.current); err != nil {
		return Advice{}, err
	}
	for _, alg := range in.candidates() {
		if err := try(alg, in.current); err != nil {
			return Advice{}, err
		}
	}
	rank(choices, obj, in.balancer, in.current)
	var top []string
	for _, c := range choices {
		if !slices.Contains(top, c.Balancer) {
			top = append(top, c.Balancer)
		}
		if len(top) == 3 {
			break
		}
	}
	if !slices.Contains(top, in.balancer) {
		top = append(top, in.balancer)
	}
	for _, alg := range top {
		for _, s := range in.grid() {
			if err := try(alg, s); err != nil {
				return Advice{}, err
			}
		}
	}
	rank(choices, obj, in.balancer, in.current)
	cur := slices.IndexFunc(choices, func(c Choice) bool { return c.Current })
	best := choices[0]
	if !beats(best, choices[cur], obj) {
		best = choices[cur]
		// The current choice goes first: nothing beats it in every run.
		c := choices[cur]
		choices = append(choices[:cur], choices[cur+1:]...)
		choices = append([]Choice{c}, choices...)
	}
	adv.Best = Best{Balancer: best.Balancer, Settings: best.Settings, Predicted: best.Predicted}
	adv.Choices = choices
	adv.Verdict = verdict(best, choices[slices.IndexFunc(choices, func(c Choice) bool { return c.Current })], obj)
	return adv, nil
}

func choiceOf(sc sim.Scenario, alg string, s Settings, rg sim.Range, current bool) Choice {
	makespan, rate := rg.Predicted(sc)
	c := Choice{Balancer: alg, Settings: s, Current: current, rg: rg,
		Predicted: Predicted{
			ThroughputRPS: round(rg.ThroughputRPS.Median, 1), MakespanS: round(rg.MakespanS.Median, 4),
			P50Ms: round(rg.P50Ms.Median, 3), P99Ms: round(rg.P99Ms.Median, 3), QueueMs: round(rg.QueueMs.Median, 3),
			FailedPct: round(rg.FailedPct.Median, 2), ErrorsPct: round(rg.ErrorsPct.Median, 2), SharePct: map[string]float64{},
		},
		Range: Range{
			ThroughputRPS: roundPair(rate, 1), MakespanS: roundPair(makespan, 4), P50Ms: pair(rg.P50Ms, 3),
			P99Ms: pair(rg.P99Ms, 3), QueueMs: pair(rg.QueueMs, 3), SharePct: map[string][2]float64{},
		},
	}
	for id, sp := range rg.SplitPct {
		c.Predicted.SharePct[id] = round(sp.Median, 1)
		c.Range.SharePct[id] = pair(sp, 1)
	}
	return c
}

func round(x float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(x*p) / p
}

func pair(s sim.Spread, digits int) [2]float64 {
	return roundPair([2]float64{s.Min, s.Max}, digits)
}

func roundPair(p [2]float64, digits int) [2]float64 {
	return [2]float64{round(p[0], digits), round(p[1], digits)}
}

// figure is a choice's objective figure over its runs.
func figure(c Choice, obj Objective) sim.Spread {
	switch obj {
	case Throughput:
		return c.rg.ThroughputRPS
	case Makespan:
		return c.rg.MakespanS
	}
	return c.rg.P99Ms
}

// failedWorse reports whether a fails noticeably more requests than b (half a percent).
func failedWorse(a, b Choice) bool { return a.rg.FailedPct.Median > b.rg.FailedPct.Median+0.5 }

// rank sorts choices best first: fewer failed requests, then the objective's median (to three
// significant digits: closer is a tie), then fewer changes from the current choice, then the
// objective's worst run, then the name.
func rank(cs []Choice, obj Objective, balancer string, cur Settings) {
	slices.SortStableFunc(cs, func(a, b Choice) int {
		fa, fb := math.Round(a.rg.FailedPct.Median*2), math.Round(b.rg.FailedPct.Median*2)
		if fa != fb {
			return cmp.Compare(fa, fb)
		}
		sa, sb := figure(a, obj), figure(b, obj)
		if !obj.lowerIsBetter() {
			sa, sb = sim.Spread{Min: -sa.Max, Median: -sa.Median, Max: -sa.Min}, sim.Spread{Min: -sb.Max, Median: -sb.Median, Max: -sb.Min}
		}
		if c := cmp.Compare(sig3(sa.Median), sig3(sb.Median)); c != 0 {
			return c
		}
		if c := cmp.Compare(changes(a, balancer, cur), changes(b, balancer, cur)); c != 0 {
			return c
		}
		if c := cmp.Compare(sa.Max, sb.Max); c != 0 {
			return c
		}
		return cmp.Compare(a.Balancer, b.Balancer)
	})
}

// sig3 rounds x to three significant digits.
func sig3(x float64) float64 {
	if x == 0 || math.IsInf(x, 0) || math.IsNaN(x) {
		return x
	}
	p := math.Pow(10, 2-math.Floor(math.Log10(math.Abs(x))))
	return math.Round(x*p) / p
}

// changes counts what c changes from the current choice: its balancer and each setting.
func changes(c Choice, balancer string, cur Settings) int {
	n := 0
	if c.Balancer != balancer {
		n++
	}
	if c.Settings.MaxConns != cur.MaxConns {
		n++
	}
	if c.Settings.MaxQueue != cur.MaxQueue {
		n++
	}
	if c.Settings.HedgeDelayMs != cur.HedgeDelayMs {
		n++
	}
	return n
}

// beats reports whether c is better than cur: in the median by more than tieMargin, and worse
// by more than that in at most one replay in twenty (replays paired by seed), failing no more
// requests.
func beats(c, cur Choice, obj Objective) bool {
	if c.Current || failedWorse(c, cur) || len(c.rg.Results) != len(cur.rg.Results) {
		return false
	}
	// Replay k of every choice has the same seed and jitter: compare them in pairs.
	eps := tieMargin * math.Abs(figure(cur, obj).Median)
	better := func(x, y float64) bool { // x better than y by more than eps
		if obj.lowerIsBetter() {
			return x < y-eps
		}
		return x > y+eps
	}
	worse := 0
	for k := range c.rg.Results {
		if better(runFigure(cur.rg.Results[k], obj), runFigure(c.rg.Results[k], obj)) {
			worse++
		}
	}
	return worse*20 <= len(c.rg.Results) && better(figure(c, obj).Median, figure(cur, obj).Median)
}

// tieMargin is how close two figures are to count as a tie: 1 % of the current's median.
const tieMargin = 0.01

// runFigure is one replay's objective figure (in the units of figure).
func runFigure(r sim.Result, obj Objective) float64 {
	switch obj {
	case Throughput:
		return r.Throughput
	case Makespan:
		return r.Makespan.Seconds()
	}
	return float64(r.Latency.P99) / 1e6
}

func verdict(best, cur Choice, obj Objective) string {
	name := func(c Choice) string {
		if c.Settings == cur.Settings {
			return c.Balancer
		}
		return fmt.Sprintf("%s (%s)", c.Balancer, c.Settings)
	}
	fig := func(c Choice) string {
		s := figure(c, obj)
		switch obj {
		case Throughput:
			return fmt.Sprintf("%.0f req/s [%.0f, %.0f]", s.Median, c.Range.ThroughputRPS[0], c.Range.ThroughputRPS[1])
		case Makespan:
			return fmt.Sprintf("%.3f s [%.3f, %.3f]", s.Median, c.Range.MakespanS[0], c.Range.MakespanS[1])
		}
		return fmt.Sprintf("p99 %s [%s, %s]", fmtMs(s.Median), fmtMs(s.Min), fmtMs(s.Max))
	}
	if best.Current {
		return fmt.Sprintf("keep %s: no other choice is predicted better than its %s in 19 replays of 20", cur.Balancer, fig(cur))
	}
	v := fmt.Sprintf("switch to %s: %s, against %s for the current %s", name(best), fig(best), fig(cur), cur.Balancer)
	if best.Settings.HedgeDelayMs > 0 && cur.Settings.HedgeDelayMs == 0 {
		v += " (hedging sends copies: only for idempotent requests)"
	}
	return v
}

func fmtMs(ms float64) string {
	switch {
	case ms >= 1000:
		return fmt.Sprintf("%.2fs", ms/1000)
	case ms >= 10:
		return fmt.Sprintf("%.0fms", ms)
	case ms >= 1:
		return fmt.Sprintf("%.1fms", ms)
	}
	return fmt.Sprintf("%.2fms", ms)
}

// fromObservation turns an observed pool into the input replays start from.
func fromObservation(o Observation, opt Options) (*input, error) {
	if len(o.Backends) == 0 {
		return nil, errors.New("advise: the observation has no backends")
	}
	if o.Samples < minSamples {
		return nil, fmt.Errorf("%w: %d, at least %d needed (send traffic through the pool first)", ErrTooFew, o.Samples, minSamples)
	}
	canon, _, err := canonical(o.Balancer)
	if err != nil {
		return nil, fmt.Errorf("advise: pool %s: %w", o.Pool, err)
	}
	in := &input{name: o.Pool, source: "observed", balancer: o.Balancer, canon: canon, hashKey: o.HashKey != "", objective: P99,
		current:      Settings{MaxConns: o.MaxConns, MaxQueue: o.MaxQueue, HedgeDelayMs: o.Hedge.DelayMs},
		queueTimeout: time.Duration(o.QueueTimeoutMs * 1e6), hedgeMax: o.Hedge.Max}
	sc := sim.Scenario{Name: o.Pool, Requests: observedRequests, RandSeed: 1}
	if opt.Requests > 0 {
		sc.Requests = opt.Requests
	}
	var fastest float64 = -1
	for _, b := range o.Backends {
		if b.State == "disabled" || b.State == "draining" || b.State == "down" {
			in.model = append(in.model, fmt.Sprintf("backend %s left out (%s)", b.ID, b.State))
			continue
		}
		if len(b.ServiceMs) == 0 {
			in.model = append(in.model, fmt.Sprintf("backend %s left out: no request observed", b.ID))
			continue
		}
		d := distFromMs(b.ServiceMs)
		if err := sim.Empirical(d).Validate(); err != nil {
			return nil, fmt.Errorf("advise: backend %s: service_ms: %w", b.ID, err)
		}
		workers := b.Workers
		how := "estimated"
		if workers == 0 {
			workers, how = max(b.PeakInFlight, 1), "never seen to queue: at least the peak seen,"
		}
		in.workers = max(in.workers, workers)
		sc.Backends = append(sc.Backends, sim.Backend{ID: b.ID, Weight: max(b.Weight, 0), Workers: workers,
			Service: sim.Empirical(d), ErrorRate: min(max(b.ErrorRate, 0), 1)})
		in.model = append(in.model, fmt.Sprintf("backend %s: %s workers %d, service %s, errors %.1f%% (%d requests)",
			b.ID, how, workers, d, 100*b.ErrorRate, b.Samples))
		if p90 := d.Quantile(.9); fastest < 0 || float64(p90) < fastest {
			fastest = float64(p90)
		}
	}
	if len(sc.Backends) == 0 {
		return nil, errors.New("advise: no backend to replay")
	}
	if fastest > 0 {
		in.hedgeMs = niceMs(2 * fastest / 1e6)
	}
	switch o.Load.Kind {
	case "closed":
		sc.Concurrency = max(o.Load.Concurrency, 1)
		if o.Load.ThinkMs > 0 {
			think := time.Duration(o.Load.ThinkMs * 1e6)
			sc.Jitter = &sim.Jitter{Deliver: sim.Dist{Q: []time.Duration{think}}, Source: "think time from the observation"}
		}
		in.model = append(in.model, fmt.Sprintf("closed load: %d clients, each sending its next request %.2f ms after its answer (observed %.0f req/s)",
			sc.Concurrency, o.Load.ThinkMs, o.Load.RateRPS))
	default:
		if o.Load.RateRPS <= 0 {
			return nil, errors.New("advise: the observation has no arrival rate")
		}
		sc.Arrivals = sim.Arrivals{Rate: o.Load.RateRPS, CV: o.Load.CV}
		in.model = append(in.model, fmt.Sprintf("open load: %.0f req/s, gaps with cv %.2f", o.Load.RateRPS, o.Load.CV))
	}
	if in.current.HedgeDelayMs == 0 {
		in.model = append(in.model, "hedging is off in this pool: advise does not turn it on (it cannot tell whether the requests are idempotent)")
	}
	in.model = append(in.model, "the latencies observed include the network to the backends; retries, outlier ejection, health checks and slow start are not modelled")
	in.sc = sc
	in.sc = in.apply(in.current)
	if err := in.sc.Validate(); err != nil {
		return nil, fmt.Errorf("advise: %w", err)
	}
	return in, nil
}

// niceMs rounds a delay up to 1, 2 or 5 times a power of ten milliseconds.
func niceMs(ms float64) float64 {
	if ms <= 0 {
		return 0
	}
	p := math.Pow(10, math.Floor(math.Log10(ms)))
	for _, m := range []float64{1, 2, 5, 10} {
		if ms <= m*p {
			return m * p
		}
	}
	return 10 * p
}

// fromScenario turns a lab scenario into the input replays start from.
func fromScenario(sc sim.Scenario, opt Options) (*input, error) {
	if sc.Baseline == "" {
		return nil, fmt.Errorf("advise: scenario %s has no current choice (Baseline)", sc.Name)
	}
	canon, _, err := canonical(sc.Baseline)
	if err != nil {
		return nil, err
	}
	in := &input{name: sc.Name, source: "scenario " + sc.Name, balancer: sc.Baseline, canon: canon, objective: Objective(sc.Metric),
		queueTimeout: sc.QueueTimeout, hedgeMax: sc.Hedge.Max}
	if in.objective == "" {
		in.objective = P99
	}
	in.current = SettingsOf(sc)
	if len(opt.Jitters) > 0 {
		sc.Jitter = opt.Jitters[0]
		in.model = append(in.model, fmt.Sprintf("each replay draws the jitter of one of %d measured runs", len(opt.Jitters)))
	} else if sc.Jitter == nil {
		sc.Jitter = sim.Profile(sc.Profile)
	}
	if opt.Requests > 0 {
		sc.Requests = opt.Requests
	} else if sc.Requests > MaxRequests {
		in.model = append(in.model, fmt.Sprintf("replayed with %d of the scenario's %d requests", MaxRequests, sc.Requests))
		sc.Requests = MaxRequests
	}
	for _, b := range sc.Backends {
		in.workers = max(in.workers, b.Workers)
		if b.Workers == 0 {
			in.workers = 0
			break
		}
	}
	in.hedgeMs = 2 * float64(sim.HedgeDelay) / 1e6 // beside the lab's own 50 ms
	in.model = append(in.model, sc.Summary)
	if sc.Jitter != nil {
		in.model = append(in.model, "jitter: "+sc.Jitter.String())
		if sc.Jitter.Source != "" {
			in.model = append(in.model, "jitter measured: "+sc.Jitter.Source)
		}
	}
	in.sc = sc
	in.sc = in.apply(in.current)
	return in, nil
}

// names lists the backends for tables.
func (a *Advice) names() []string {
	if len(a.backends) > 0 {
		return a.backends
	}
	seen := map[string]bool{}
	var out []string
	for _, c := range a.Choices {
		for id := range c.Predicted.SharePct {
			if !seen[id] {
				seen[id] = true
				out = append(out, id)
			}
		}
	}
	slices.Sort(out)
	return out
}

// shareString prints a choice's shares per backend.
func shareString(c Choice, names []string) string {
	if len(names) > 4 {
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, n := range names {
			lo, hi = min(lo, c.Predicted.SharePct[n]), max(hi, c.Predicted.SharePct[n])
		}
		return fmt.Sprintf("%.1f..%.1f%% each", lo, hi)
	}
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%.0f", c.Predicted.SharePct[n])
	}
	return strings.Join(parts, "/")
}
