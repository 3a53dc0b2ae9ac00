package lab

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"ballast/advise"
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
	preds := newPredictions(o)
	defer preds.stopOnce()
	// Eight measured runs per load, 8 to 25 s each, whose flow stalls differ with the
	// machine's load over minutes: a row's range draws those nearest its own run in
	// flow-stall share, not the busiest and the calmest alike.
	preds.nearest = true
	srvs, ts, closeAll, err := localBackends(heteroCfgs...)
	if err != nil {
		return err
	}
	defer closeAll()

	// Each backend alone, before and after the proxied runs: the ideal is the sum of what they
	// measure. A backend's capacity is exact by construction, so a shortfall is this machine
	// starving the lab; the better of the two measurements is the closer one.
	capN := pick[int64](o, 20000, 2000)
	caps := map[string]float64{}
	var capRuns []map[string]float64 // before and after: the lab's repeatability (spread.go)
	measureCaps := func() error {
		run := map[string]float64{}
		capRuns = append(capRuns, run)
		for _, t := range ts {
			res, err := loadgen.Run(ctx, loadgen.Options{URL: "http://" + t.Addr + "/", N: capN, C: 16, KeepAlive: true})
			if err != nil {
				return err
			}
			if res.Failed > 0 {
				return fmt.Errorf("backend %s alone: %d of %d requests failed", t.Name, res.Failed, res.Requests)
			}
			caps[t.Name] = max(caps[t.Name], res.ThroughputRPS)
			run[t.Name] = res.ThroughputRPS
			o.logf("heterogeneous: backend %s alone: %.0f req/s", t.Name, res.ThroughputRPS)
		}
		return nil
	}
	if err := measureCaps(); err != nil {
		return err
	}

	nKA := pick[int64](o, 100000, 3000)
	nClose := pick[int64](o, 20000, 1000)
	// The jitter of each load, measured through Ballast before the rows, between them and
	// after them, and on the rows themselves (each on its last 4096 requests, what Ballast's
	// ring of releases holds).
	cals := heteroCalibrations()
	groups := [2]string{"keep-alive", "close"}
	var calKA, calClose Calibration
	calibrateBoth := func() error {
		var err error
		if calKA, err = cals[0].run(ctx, o); err != nil {
			return err
		}
		if calClose, err = cals[1].run(ctx, o); err != nil {
			return err
		}
		preds.calibrated(groups[0], calKA)
		preds.calibrated(groups[1], calClose)
		return nil
	}
	if err := calibrateBoth(); err != nil {
		return err
	}
	algs := []string{"random", "roundrobin", "sqf", "bybusyness", "p2c", "ewma"}
	var ka, cl []Result
	rowHalves := map[string]halves{} // each traced row's run in two halves (spread.go)
	for i, alg := range algs {
		if i == len(algs)/2 {
			if err := calibrateBoth(); err != nil {
				return err
			}
		}
		spec := PoolSpec{Balancer: alg, Backends: ts, MaxConns: 32}
		loads := []loadgen.Options{
			{N: nKA, C: 16, KeepAlive: true},
			{N: nClose, C: 16, KeepAlive: false},
		}
		res, cpus, own, err := tracedLoads(ctx, o, spec, srvs, loads)
		if err != nil {
			return fmt.Errorf("%s: %w", alg, err)
		}
		for i, keep := range []bool{true, false} {
			label := alg
			if !keep {
				label += " (no keep-alive)"
			}
			row := row(label, res[i], cpus[i])
			row.Detail.Jitter = own[i].String()
			rowHalves[label] = halvesOf(res[i])
			preds.measured(groups[i], label, own[i])
			row.Seed = heteroSeed(alg, keep)
			sc := mustScenario("heterogeneous")
			sc.Requests = min(int(loads[i].N), modelRequests)
			preds.addScaled(label, groups[i], sc, alg, int(loads[i].N))
			o.logf("heterogeneous: %s: %.0f req/s, split %s", label, row.ThroughputRPS, formatSplit(row.Split))
			if keep {
				ka = append(ka, row)
			} else {
				cl = append(cl, row)
			}
		}
	}
	if err := calibrateBoth(); err != nil {
		return err
	}
	// The advise check on the keep-alive load (the seed's): random is the seed's own method.
	advSc := mustScenario("heterogeneous")
	advSc.Requests = min(int(nKA), modelRequests)
	finishCheck, err := preds.checkAdvice(ctx, advSc, "keep-alive", "random", func(label, alg string, set advise.Settings) error {
		spec := PoolSpec{Balancer: alg, Backends: ts, MaxConns: set.MaxConns, MaxQueue: set.MaxQueue, Hedge: msDuration(set.HedgeDelayMs), HedgeBudget: 1}
		res, cpus, err := runBallast(ctx, o, spec, []loadgen.Options{{N: nKA, C: 16, KeepAlive: true}})
		if err != nil {
			return err
		}
		ka = append(ka, row(label, res[0], cpus[0]))
		preds.addScaled(label, "keep-alive", set.Apply(advSc), alg, int(nKA))
		o.logf("heterogeneous: %s: %.0f req/s", label, res[0].ThroughputRPS)
		return nil
	})
	if err != nil {
		return err
	}
	if err := measureCaps(); err != nil {
		return err
	}
	ideal := caps["A"] + caps["B"]
	r.IdealValue = ideal
	r.Ideal = fmt.Sprintf("sum of the backends' measured capacities (best of before and after), %.0f + %.0f = %.0f req/s (configured 2833 + 1250 = 4083), split A %.1f%% / B %.1f%%",
		caps["A"], caps["B"], ideal, 100*caps["A"]/ideal, 100*caps["B"]/ideal)
	r.Results = append(ka, cl...)
	capShare := capacitySpread(capRuns[0], capRuns[len(capRuns)-1])
	for i := range r.Results {
		r.Results[i].IdealRatio = r.Results[i].ThroughputRPS / ideal
		throughputSpread(&r.Results[i], rowHalves[r.Results[i].Algorithm], capShare, capRuns[0], capRuns[len(capRuns)-1])
	}
	r.Notes = append(r.Notes, "load: keep-alive -c 16 -n "+strconv.FormatInt(nKA, 10)+", then -c 16 -n "+strconv.FormatInt(nClose, 10)+" without keep-alive (client side; Ballast keeps its backend connections); max_conns 32 per backend",
		"jitter, keep-alive rows (the last of three calibrations): "+calKA.String(),
		"jitter, rows without keep-alive (the last of three): "+calClose.String(),
		fmt.Sprintf("repeatability: the backends alone before and after the rows %s (%.3f%% of their sum); each row's spread is the larger of that share of its figure and its own run's halves' difference / sqrt 2 (details.json spread_from)", capacityPairs(capRuns[0], capRuns[len(capRuns)-1]), 100*capShare),
		"each row's prediction draws, run by run, the delays of one of the three calibrations of its load or of the other rows of that load (never its own: details.json has each row's), of those the half nearest the row's own run in flow-stall share, at least three: always the nearest as calm as it and the nearest as disturbed, then the nearest others (details.json: drew_from); the model runs at most 20000 requests (the steady state's rate), makespans scaled to the row's")
	if err := preds.finish(r); err != nil {
		return err
	}
	finishCheck(r, func(row Result, _ advise.Settings) (bool, string) {
		return row.IdealRatio >= 0.95, fmt.Sprintf("%.1f%% of the ideal, goal >= 95%%", 100*row.IdealRatio)
	})
	return nil
}

func msDuration(ms float64) time.Duration { return time.Duration(ms * float64(time.Millisecond)) }

// rangeNote counts the rows measured inside their predicted range.
func rangeNote(r *Report) string {
	in, n, disturbed, ownHeld, ownJudged, within, spread := 0, 0, 0, 0, 0, 0, 0
	for i := range r.Results {
		row := &r.Results[i]
		if ok, judged := judgeRange(r.Metric, row); judged {
			n++
			if row.Detail.Spread > 0 {
				spread++
			}
			if ok {
				in++
				continue
			}
			if w := row.Detail.WithinSpread; w != nil && *w {
				within++
			}
			if row.Detail.Disturbed != "" {
				disturbed++
			}
			if row.Detail.OwnRange != nil {
				ownJudged++
				if strings.Contains(row.Detail.RangeGoal, "own run in the model") && !strings.Contains(row.Detail.RangeGoal, "misses it too") {
					ownHeld++
				}
			}
		}
	}
	dist := ""
	if disturbed > 0 {
		dist = fmt.Sprintf(" (%d of the %d outside ran disturbed: flow stalls took a larger share of their time than in any measured run their range drew from)", disturbed, n-in)
	}
	if ownJudged > 0 {
		dist += fmt.Sprintf("; of the %d outside with a run of their own, the model drawing that run alone holds %d", ownJudged, ownHeld)
	}
	rep := ""
	switch {
	case spread > 0 && n > in:
		rep = fmt.Sprintf("; %d of the %d outside within the lab's repeatability of it (a range's ends moved out by the row's measured spread, no more: details.json spread_from; %d of %d rows have one), %d outside that too", within, n-in, spread, n, n-in-within)
	case spread > 0:
		rep = fmt.Sprintf(" (%d of %d rows have a measured spread: details.json spread_from)", spread, n)
	}
	return fmt.Sprintf("%d of %d rows measured inside the model's range (the goal: all)%s%s; each range is the prediction interval of %d model runs with different seeds (sim.Interval: their smallest and largest figure, a quantized makespan's ends at its fewest and most quanta moved by every run's hops around them, a continuous figure's widened to its normal %.0f%% prediction interval where that is wider; details.json has the runs' extremes and figures), each run drawing every request's delays from those measured in this scenario (the jitter notes) and the stalls",
		in, n, rep, dist, runsOf(r), 100*sim.Coverage)
}

func runsOf(r *Report) int {
	for _, x := range r.Results {
		if g := x.Predicted.Range; g != nil {
			return g.Runs
		}
	}
	return 0
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
	preds := newPredictions(o)
	defer preds.stopOnce()
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
	cal, err := slowCalibration(o).run(ctx, o)
	if err != nil {
		return err
	}
	preds.calibrated("", cal)
	r.Ideal = fmt.Sprintf("the model's best makespan, hedged sqf: %.3f s", best.MakespanS)
	r.IdealValue = best.MakespanS
	var twin *loadgen.Result // the roundrobin row: the calibration's load and balancer again
	measureRow := func(label, alg string, set advise.Settings, seed Figures) error {
		// Fresh backends for every run: a cancelled hedge leaves B's worker asleep.
		srvs, ts, closeAll, err := localBackends(
			backend.Config{Name: "A", Workers: 1000},
			backend.Config{Name: "B", Workers: 5, Service: slow},
		)
		if err != nil {
			return err
		}
		spec := PoolSpec{Balancer: alg, Backends: ts, MaxConns: set.MaxConns, MaxQueue: set.MaxQueue, Hedge: msDuration(set.HedgeDelayMs), HedgeBudget: 1}
		res, cpu, own, err := tracedRun(ctx, o, spec, srvs, loadgen.Options{N: 50, C: 10})
		closeAll()
		if err != nil {
			return fmt.Errorf("%s: %w", label, err)
		}
		row := row(label, res, cpu)
		row.Detail.Jitter = own.String()
		if set == (advise.Settings{}) {
			preds.measured("", label, own)
		}
		if label == "roundrobin" {
			twin = res
		}
		row.Seed = seed
		preds.add(label, "", set.Apply(model("slow-backend")), alg)
		if row.MakespanS > 0 {
			row.IdealRatio = best.MakespanS / row.MakespanS
		}
		o.logf("slow-backend: %s: %.3f s, split %s", label, row.MakespanS, formatSplit(row.Split))
		r.Results = append(r.Results, row)
		return nil
	}
	for _, rn := range runs {
		seed := scaleSeed(o, slowSeed(rn.alg))
		set := advise.Settings{}
		if rn.hedge > 0 {
			seed, set = Figures{}, advise.SettingsOf(model("slow-backend-hedged"))
		}
		if err := measureRow(rn.label, rn.alg, set, seed); err != nil {
			return err
		}
	}
	finishCheck, err := preds.checkAdvice(ctx, model("slow-backend"), "", "byrequests", func(label, alg string, set advise.Settings) error {
		return measureRow(label, alg, set, Figures{})
	})
	if err != nil {
		return err
	}
	r.Notes = append(r.Notes, fmt.Sprintf("A answers at once (1000 workers); B has 5 workers sleeping %v; load -c 10 -n 50 without keep-alive, as ab", slow),
		"jitter of the calibration run: "+cal.String(),
		"each row's prediction draws the delays of the calibration run and of the other rows without hedging or backlog (never its own: details.json has each row's)",
		makespanSpread(r, cal.res, twin, "roundrobin", nil))
	if o.Quick {
		r.Notes = append(r.Notes, fmt.Sprintf("--quick: sleeps, seed figures and predictions are all scaled by %g", QuickScale))
	}
	if err := preds.finish(r); err != nil {
		return err
	}
	finishCheck(r, func(row Result, set advise.Settings) (bool, string) {
		// The scenario's goals: 5.1 s (scaled with the sleeps) without hedging, 0.5 s with.
		limit := 5.1 * float64(slow) / float64(5*time.Second)
		if set.HedgeDelayMs > 0 {
			limit = min(limit, 0.5)
		}
		return row.MakespanS <= limit, fmt.Sprintf("%.3f s, goal <= %.3f s", row.MakespanS, limit)
	})
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
	preds := newPredictions(o)
	defer preds.stopOnce()
	waits := make([]time.Duration, len(sim.WaitList))
	for i, w := range sim.WaitList {
		waits[i] = scaled(o, w)
	}
	suffixes := waitSuffixes(o)
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
	cal, err := variableCalibration(o).run(ctx, o)
	if err != nil {
		return err
	}
	preds.calibrated("", cal)
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
	var twin *loadgen.Result // the roundrobin row: the calibration's load and balancer again
	measureRow := func(label, alg string, set advise.Settings, seed Figures, sc sim.Scenario) error {
		srvs, ts, closeAll, err := localBackends(
			backend.Config{Name: "A", Workers: 4},
			backend.Config{Name: "B", Workers: 4},
		)
		if err != nil {
			return err
		}
		spec := PoolSpec{Balancer: alg, Backends: ts, MaxConns: set.MaxConns, MaxQueue: set.MaxQueue, Hedge: msDuration(set.HedgeDelayMs), HedgeBudget: 1}
		res, cpu, own, err := tracedRun(ctx, o, spec, srvs, loadgen.Options{N: 50, C: 10, URLSuffixes: suffixes})
		closeAll()
		if err != nil {
			return fmt.Errorf("%s: %w", label, err)
		}
		row := row(label, res, cpu)
		row.Detail.Jitter = own.String()
		if set.MaxConns == 0 && set.HedgeDelayMs == 0 {
			preds.measured("", label, own)
		}
		if queues(spec) && set.HedgeDelayMs == 0 {
			preds.handedOff("", label, own)
		}
		if label == "roundrobin" {
			twin = res
		}
		row.Seed = seed
		preds.add(label, "", set.Apply(sc), alg)
		if row.MakespanS > 0 {
			row.IdealRatio = bound.MakespanS / row.MakespanS
		}
		o.logf("variable-cost: %s: %.3f s", label, row.MakespanS)
		r.Results = append(r.Results, row)
		return nil
	}
	for _, rn := range runs {
		name, seed := "variable-cost", scaleSeed(o, variableSeed(rn.alg))
		if rn.backlog {
			name, seed = "variable-cost-backlog", Figures{}
		}
		sc := model(name)
		if err := measureRow(rn.label, rn.alg, advise.SettingsOf(sc), seed, sc); err != nil {
			return err
		}
	}
	finishCheck, err := preds.checkAdvice(ctx, model("variable-cost"), "", "byrequests", func(label, alg string, set advise.Settings) error {
		return measureRow(label, alg, set, Figures{}, model("variable-cost"))
	})
	if err != nil {
		return err
	}
	r.Notes = append(r.Notes,
		fmt.Sprintf("two backends x 4 workers; request i carries ?%s, i mod 10; -c 10 -n 50 without keep-alive; (backlog) = max_conns 4 with Ballast's central queue", strings.Join(suffixes, ",")),
		"jitter of the calibration run: "+cal.String(),
		"each row's prediction draws the delays of the calibration run and of the other rows without hedging or backlog (never its own: details.json has each row's), and the backlog hand-offs (from the release that freed a slot to the dispatch of the request that waited for it) of the other (backlog) rows",
		makespanSpread(r, cal.res, twin, "roundrobin", suffixes))
	if o.Quick {
		r.Notes = append(r.Notes, fmt.Sprintf("--quick: sleeps, seed figures and predictions are all scaled by %g", QuickScale))
	}
	if err := preds.finish(r); err != nil {
		return err
	}
	finishCheck(r, func(row Result, _ advise.Settings) (bool, string) {
		return row.Detail.InRange != nil && *row.Detail.InRange, "measured inside its predicted range: " + row.Detail.RangeGoal
	})
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

// waitSuffixes is seed 001's ?wait= list as the load generator's URL suffixes, scaled under
// Quick.
func waitSuffixes(o Options) []string {
	out := make([]string, len(sim.WaitList))
	for i, w := range sim.WaitList {
		out[i] = "wait=" + strconv.FormatFloat(scaled(o, w).Seconds(), 'f', -1, 64)
	}
	return out
}
