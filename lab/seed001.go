package lab

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"ballast/lab/backend"
	"ballast/lab/loadgen"
	"ballast/sim"
)

// Seed 000 and seed 001: unequal backends, a slow backend, requests of variable cost.

// heteroSeed holds seed 000's figures by algorithm and keep-alive.
func heteroSeed(alg string, keepAlive bool) Figures {
	switch {
	case alg == "random" && keepAlive:
		return Figures{ThroughputRPS: 2122, SplitPct: map[string]float64{"A": 50, "B": 50}, Source: "lighttpd round-robin (random), seed 000"}
	case alg == "sqf" && keepAlive:
		return Figures{ThroughputRPS: 3213, SplitPct: map[string]float64{"A": 69, "B": 31}, Source: "lighttpd SQF, seed 000"}
	case alg == "random":
		return Figures{ThroughputRPS: 1835, Source: "lighttpd round-robin (random) without keep-alive, seed 000"}
	case alg == "sqf":
		return Figures{ThroughputRPS: 2678, Source: "lighttpd SQF without keep-alive, seed 000"}
	}
	return Figures{}
}

func runHeterogeneous(ctx context.Context, o Options, r *Report) error {
	r.Metric = Throughput
	cfgA := backend.Config{Name: "A", Workers: 2, Service: 706 * time.Microsecond}
	cfgB := backend.Config{Name: "B", Workers: 1, Service: 800 * time.Microsecond}
	_, ts, closeAll, err := localBackends(cfgA, cfgB)
	if err != nil {
		return err
	}
	defer closeAll()

	// Each backend alone, before and after the proxied runs: the ideal is the sum of what they
	// measure. A backend's capacity is exact by construction, so a shortfall is this machine
	// starving the lab; the better of the two measurements is the closer one.
	capN := pick[int64](o, 20000, 2000)
	caps := map[string]float64{}
	measureCaps := func() error {
		for _, t := range ts {
			res, err := loadgen.Run(ctx, loadgen.Options{URL: "http://" + t.Addr + "/", N: capN, C: 16, KeepAlive: true})
			if err != nil {
				return err
			}
			if res.Failed > 0 {
				return fmt.Errorf("backend %s alone: %d of %d requests failed", t.Name, res.Failed, res.Requests)
			}
			caps[t.Name] = max(caps[t.Name], res.ThroughputRPS)
			o.logf("heterogeneous: backend %s alone: %.0f req/s", t.Name, res.ThroughputRPS)
		}
		return nil
	}
	if err := measureCaps(); err != nil {
		return err
	}

	nKA := pick[int64](o, 100000, 3000)
	nClose := pick[int64](o, 20000, 1000)
	algs := []string{"random", "roundrobin", "sqf", "bybusyness", "p2c", "ewma"}
	var ka, cl []Result
	for _, alg := range algs {
		spec := PoolSpec{Balancer: alg, Backends: ts, MaxConns: 32}
		loads := []loadgen.Options{
			{N: nKA, C: 16, KeepAlive: true},
			{N: nClose, C: 16, KeepAlive: false},
		}
		res, cpus, err := runBallast(ctx, o, spec, loads)
		if err != nil {
			return fmt.Errorf("%s: %w", alg, err)
		}
		for i, keep := range []bool{true, false} {
			label := alg
			if !keep {
				label += " (no keep-alive)"
			}
			row := row(label, res[i], cpus[i])
			row.Seed = heteroSeed(alg, keep)
			sc := mustScenario("heterogeneous")
			sc.Requests = int(loads[i].N)
			if row.Predicted, err = simFigures(sc, alg); err != nil {
				return err
			}
			o.logf("heterogeneous: %s: %.0f req/s, split %s", label, row.ThroughputRPS, formatSplit(row.Split))
			if keep {
				ka = append(ka, row)
			} else {
				cl = append(cl, row)
			}
		}
	}
	if err := measureCaps(); err != nil {
		return err
	}
	ideal := caps["A"] + caps["B"]
	r.IdealValue = ideal
	r.Ideal = fmt.Sprintf("sum of the backends' measured capacities (best of before and after), %.0f + %.0f = %.0f req/s (configured 2833 + 1250 = 4083), split A %.1f%% / B %.1f%%",
		caps["A"], caps["B"], ideal, 100*caps["A"]/ideal, 100*caps["B"]/ideal)
	r.Results = append(ka, cl...)
	for i := range r.Results {
		r.Results[i].IdealRatio = r.Results[i].ThroughputRPS / ideal
	}
	r.Notes = append(r.Notes, "load: keep-alive -c 16 -n "+strconv.FormatInt(nKA, 10)+", then -c 16 -n "+strconv.FormatInt(nClose, 10)+" without keep-alive (client side; Ballast keeps its backend connections); max_conns 32 per backend",
		"the model has no keep-alive: both variants get the same prediction")
	return nil
}

// slowSeed holds seed 001 scenario 1's figures.
func slowSeed(alg string) Figures {
	switch alg {
	case "byrequests":
		return Figures{MakespanS: 27.430, SplitPct: map[string]float64{"A": 50, "B": 50}, Source: "Apache byrequests, seed 001"}
	case "bybusyness":
		return Figures{MakespanS: 5.018, Source: "Apache bybusyness, seed 001"}
	}
	return Figures{}
}

func runSlowBackend(ctx context.Context, o Options, r *Report) error {
	r.Metric = Makespan
	slow := scaled(o, 5*time.Second)
	model := func(name string) sim.Scenario {
		sc := mustScenario(name)
		for i := range sc.Backends {
			if sc.Backends[i].ID == "B" {
				sc.Backends[i].Service = sim.Fixed(slow)
			}
		}
		return sc
	}
	type run struct {
		label, alg string
		hedge      time.Duration
	}
	runs := []run{
		{"byrequests", "byrequests", 0}, {"roundrobin", "roundrobin", 0}, {"random", "random", 0},
		{"bybusyness", "bybusyness", 0}, {"sqf", "sqf", 0}, {"p2c", "p2c", 0},
		{"leastconn", "leastconn", 0}, {"ewma", "ewma", 0},
		{"sqf (hedge " + sim.HedgeDelay.String() + ")", "sqf", sim.HedgeDelay},
	}
	best, err := simFigures(model("slow-backend-hedged"), "sqf")
	if err != nil {
		return err
	}
	r.Ideal = fmt.Sprintf("the model's best makespan, hedged sqf: %.3f s", best.MakespanS)
	r.IdealValue = best.MakespanS
	for _, rn := range runs {
		// Fresh backends for every run: a cancelled hedge leaves B's worker asleep.
		_, ts, closeAll, err := localBackends(
			backend.Config{Name: "A", Workers: 1000},
			backend.Config{Name: "B", Workers: 5, Service: slow},
		)
		if err != nil {
			return err
		}
		spec := PoolSpec{Balancer: rn.alg, Backends: ts, Hedge: rn.hedge, HedgeBudget: 1}
		res, cpus, err := runBallast(ctx, o, spec, []loadgen.Options{{N: 50, C: 10}})
		closeAll()
		if err != nil {
			return fmt.Errorf("%s: %w", rn.label, err)
		}
		row := row(rn.label, res[0], cpus[0])
		row.Seed = scaleSeed(o, slowSeed(rn.alg))
		name := "slow-backend"
		if rn.hedge > 0 {
			name = "slow-backend-hedged"
			row.Seed = Figures{}
		}
		if row.Predicted, err = simFigures(model(name), rn.alg); err != nil {
			return err
		}
		if row.MakespanS > 0 {
			row.IdealRatio = best.MakespanS / row.MakespanS
		}
		o.logf("slow-backend: %s: %.3f s, split %s", rn.label, row.MakespanS, formatSplit(row.Split))
		r.Results = append(r.Results, row)
	}
	r.Notes = append(r.Notes, fmt.Sprintf("A answers at once (1000 workers); B has 5 workers sleeping %v; load -c 10 -n 50 without keep-alive, as ab", slow))
	if o.Quick {
		r.Notes = append(r.Notes, fmt.Sprintf("--quick: sleeps, seed figures and predictions are all scaled by %g", QuickScale))
	}
	return nil
}

// variableSeed holds seed 001 scenario 2's figures (medians of its three runs).
func variableSeed(alg string) Figures {
	switch alg {
	case "byrequests":
		return Figures{MakespanS: 15.455, Source: "Apache byrequests, seed 001 (15.456 / 15.455 / 15.413 s)"}
	case "bybusyness":
		return Figures{MakespanS: 9.402, Source: "Apache bybusyness, seed 001 (9.501 / 9.402 / 8.419 s)"}
	}
	return Figures{}
}

func runVariableCost(ctx context.Context, o Options, r *Report) error {
	r.Metric = Makespan
	waits := make([]time.Duration, len(sim.WaitList))
	suffixes := make([]string, len(sim.WaitList))
	for i, w := range sim.WaitList {
		waits[i] = scaled(o, w)
		suffixes[i] = "wait=" + strconv.FormatFloat(waits[i].Seconds(), 'f', -1, 64)
	}
	model := func(name string) sim.Scenario {
		sc := mustScenario(name)
		for i := range sc.Backends {
			sc.Backends[i].Service = sim.PerRequest(waits...)
		}
		return sc
	}
	bound, err := simFigures(model("variable-cost-unlimited"), "byrequests")
	if err != nil {
		return err
	}
	r.Ideal = fmt.Sprintf("the client's own bound (unlimited workers): %.3f s", bound.MakespanS)
	r.IdealValue = bound.MakespanS
	type run struct {
		label, alg string
		backlog    bool
	}
	runs := []run{
		{"byrequests", "byrequests", false}, {"roundrobin", "roundrobin", false},
		{"bybusyness", "bybusyness", false}, {"sqf", "sqf", false}, {"p2c", "p2c", false},
		{"leastconn", "leastconn", false}, {"ewma", "ewma", false},
		{"byrequests (backlog)", "byrequests", true}, {"sqf (backlog)", "sqf", true},
	}
	within := 0
	for _, rn := range runs {
		_, ts, closeAll, err := localBackends(
			backend.Config{Name: "A", Workers: 4},
			backend.Config{Name: "B", Workers: 4},
		)
		if err != nil {
			return err
		}
		spec := PoolSpec{Balancer: rn.alg, Backends: ts}
		name := "variable-cost"
		if rn.backlog {
			spec.MaxConns, spec.MaxQueue = 4, 100
			name = "variable-cost-backlog"
		}
		res, cpus, err := runBallast(ctx, o, spec, []loadgen.Options{{N: 50, C: 10, URLSuffixes: suffixes}})
		closeAll()
		if err != nil {
			return fmt.Errorf("%s: %w", rn.label, err)
		}
		row := row(rn.label, res[0], cpus[0])
		if !rn.backlog {
			row.Seed = scaleSeed(o, variableSeed(rn.alg))
		}
		if row.Predicted, err = simFigures(model(name), rn.alg); err != nil {
			return err
		}
		if row.MakespanS > 0 {
			row.IdealRatio = bound.MakespanS / row.MakespanS
		}
		if p := row.Predicted.MakespanS; p > 0 && abs(row.MakespanS-p)/p <= 0.05 {
			within++
		}
		o.logf("variable-cost: %s: %.3f s (model %.3f s)", rn.label, row.MakespanS, row.Predicted.MakespanS)
		r.Results = append(r.Results, row)
	}
	r.Notes = append(r.Notes,
		fmt.Sprintf("two backends x 4 workers; request i carries ?%s, i mod 10; -c 10 -n 50 without keep-alive; (backlog) = max_conns 4 with Ballast's central queue", strings.Join(suffixes, ",")),
		fmt.Sprintf("%d of %d rows within 5%% of the model's prediction (the goal)", within, len(runs)))
	if o.Quick {
		r.Notes = append(r.Notes, fmt.Sprintf("--quick: sleeps, seed figures and predictions are all scaled by %g", QuickScale))
	}
	return nil
}

// scaleSeed shrinks a seed's makespan like the sleeps under Quick, so that the columns stay
// comparable; the source says so.
func scaleSeed(o Options, f Figures) Figures {
	if o.Quick && f.MakespanS > 0 {
		f.MakespanS *= QuickScale
		f.Source += fmt.Sprintf(" (x %g for --quick)", QuickScale)
	}
	return f
}
