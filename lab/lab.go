package lab

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"ballast/lab/backend"
	"ballast/lab/loadgen"
	"ballast/sim"
)

// QuickScale multiplies the sleep times of seed 001's scenarios under Options.Quick (5 s
// becomes 0.5 s), so that their makespans, and the model's predictions, shrink alike.
const QuickScale = 0.1

// Options configure a run.
type Options struct {
	// Ballast is the path of the ballast binary, run as `serve` (and `backend` for pools of
	// hundreds of backends).
	Ballast string
	// Quick shrinks counts, durations and sleeps so that a scenario ends within about 30 s.
	Quick bool
	// Reps is how many times the interleaved comparisons (backend-count, peers) repeat; the
	// rows report medians; lvs-modes repeats its goal modes' throughput runs that many times. 0 means 3, or 1 with Quick.
	Reps int
	// Runs is how many seeds each predicted range is drawn from (0 = 100 for seed 001's
	// scenarios, 20 for heterogeneous' throughput rows and under Quick).
	Runs int
	// Log, when set, gets one line per load as the scenario proceeds.
	Log io.Writer

	failures *[]string // set by Run: what went wrong in loads, for the report's notes
}

// fail records a load's failures for the report's notes.
func (o Options) fail(s string) {
	if o.failures != nil {
		*o.failures = append(*o.failures, s)
	}
}

// quickRuns is how many model runs a range has under Quick, unless Runs says otherwise.
const quickRuns = 20

// runs is Runs, or under Quick quickRuns; 0 lets sim choose (RunsFor).
func (o Options) runs() int {
	if o.Runs == 0 && o.Quick {
		return quickRuns
	}
	return o.Runs
}

// throughputRuns is how many model runs a throughput row's range has by default: a steady
// state varies little from seed to seed, and 20000 requests each take their time.
const throughputRuns = 20

// makespanRuns is how many model runs a makespan row's range has by default: seed 001's
// batches are 50 requests, a thousand runs of one take a tenth of a second, and their extremes
// hold a fresh run with probability 999/1001 (100 runs: 99/101, one miss in fifty rows).
const makespanRuns = 1000

// runsFor is the runs sc's ranges get: runs, or throughputRuns for a throughput scenario, or
// makespanRuns for a makespan scenario.
func (o Options) runsFor(sc sim.Scenario) int {
	if n := o.runs(); n > 0 {
		return n
	}
	switch sc.Metric {
	case string(Throughput):
		return throughputRuns
	case string(Makespan):
		return makespanRuns
	}
	return 0
}

// modelRequests caps a throughput row's modelled requests: its rate is the steady state's,
// which 20000 requests reach as well as 100000.
const modelRequests = 20000

func (o Options) reps() int {
	switch {
	case o.Reps > 0:
		return o.Reps
	case o.Quick:
		return 1
	}
	return 3
}

func (o Options) logf(format string, args ...any) {
	if o.Log != nil {
		fmt.Fprintf(o.Log, format+"\n", args...)
	}
}

// pick returns full or, under Quick, quick.
func pick[T any](o Options, full, quick T) T {
	if o.Quick {
		return quick
	}
	return full
}

type scenario struct {
	name string
	run  func(ctx context.Context, o Options, r *Report) error
}

var scenarios = []scenario{
	{"heterogeneous", runHeterogeneous},
	{"slow-backend", runSlowBackend},
	{"variable-cost", runVariableCost},
	{"many-backends", runManyBackends},
	{"backend-count", runBackendCount},
	{"peers", runPeers},
	{"lvs-modes", runLVSModes}, // lvsmodes.go; root only
	{"failover", runFailover},  // failover.go; root only
	{"jitter", runJitter},      // jitter.go: what the model's ranges draw
	{"scale-out", runScaleOut}, // scaleout.go; root only
}

// Names lists the scenarios in the order `all` runs them.
func Names() []string {
	out := make([]string, len(scenarios))
	for i, s := range scenarios {
		out[i] = s.name
	}
	return out
}

// Run runs the named scenario and returns its report.
func Run(ctx context.Context, name string, o Options) (*Report, error) {
	i := slices.IndexFunc(scenarios, func(s scenario) bool { return s.name == name })
	if i < 0 {
		return nil, fmt.Errorf("lab: unknown scenario %q (valid: %s, all)", name, strings.Join(Names(), ", "))
	}
	if o.Ballast == "" {
		return nil, fmt.Errorf("lab: no ballast binary to run")
	}
	r := &Report{Scenario: name, Results: []Result{}}
	r.Notes = append(r.Notes, "machine: "+machine())
	if v, err := exec.Command(o.Ballast, "version").Output(); err == nil {
		r.Notes = append(r.Notes, "ballast: "+strings.TrimSpace(string(v)))
	}
	var failures []string
	o.failures = &failures
	if err := scenarios[i].run(ctx, o, r); err != nil {
		return nil, fmt.Errorf("lab %s: %w", name, err)
	}
	for _, f := range failures {
		r.Notes = append(r.Notes, "failures: "+f)
	}
	r.Notes = append(r.Notes, "load average after the run: "+loadAvg())
	return r, nil
}

// machine describes where the figures were measured.
func machine() string {
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	return fmt.Sprintf("%d CPUs (%s), %s/%s, %s; load average before: %s", runtime.NumCPU(), model, runtime.GOOS, runtime.GOARCH, runtime.Version(), loadAvg())
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// measure runs one load against p and returns the load generator's figures and the proxy's
// CPU time during it.
func measure(ctx context.Context, o Options, p Proxy, lo loadgen.Options) (*loadgen.Result, time.Duration, error) {
	res, cpus, err := measureCPU(ctx, o, p, lo, p.CPU)
	if err != nil {
		return nil, 0, err
	}
	return res, cpus[0], nil
}

// cpuMeter reads the CPU time (user + system) a process or a group of them has used so far.
type cpuMeter func() (time.Duration, error)

// measureCPU runs one load against p and returns the load generator's figures and the CPU
// time each meter counted during it (0 when a reading failed).
func measureCPU(ctx context.Context, o Options, p Proxy, lo loadgen.Options, meters ...cpuMeter) (*loadgen.Result, []time.Duration, error) {
	lo.URL = "http://" + p.Addr() + "/"
	// A hang detector, not a timing assumption: a load that has not ended well after its
	// expected time is cut off, and its row says so, rather than stalling the whole lab.
	lctx, cancel := context.WithTimeout(ctx, loadBound(lo))
	defer cancel()
	before, errs := readMeters(meters)
	res, err := loadgen.Run(lctx, lo)
	if err != nil {
		return nil, nil, err
	}
	after, errs1 := readMeters(meters)
	if err := p.Check(); err != nil {
		return nil, nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	if lctx.Err() != nil && lo.N > 0 && res.Requests < lo.N {
		res.Failed += lo.N - res.Requests // never answered: counted as failed
		res.Requests = lo.N
	}
	if res.Failed > 0 || res.Non2xx > 0 {
		o.fail(fmt.Sprintf("%s at -c %d: %d failed, statuses %v; %s said: %s",
			p.Name(), lo.C, res.Failed, res.Status, p.Name(), p.Output()))
	}
	cpus := make([]time.Duration, len(meters))
	for i := range meters {
		if errs[i] == nil && errs1[i] == nil {
			cpus[i] = after[i] - before[i]
		}
	}
	return res, cpus, nil
}

// readMeters reads every meter once.
func readMeters(meters []cpuMeter) ([]time.Duration, []error) {
	vals := make([]time.Duration, len(meters))
	errs := make([]error, len(meters))
	for i, m := range meters {
		vals[i], errs[i] = m()
	}
	return vals, errs
}

// labCPU is the lab process's own CPU time: the load generator's, and that of the emulated
// backends it serves in-process.
func labCPU() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, err
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

// perReq is cpu per request of res in microseconds, 0 when too little CPU was counted to
// tell (see minCPU).
func perReq(cpu time.Duration, res *loadgen.Result) float64 {
	if res.Requests <= 0 || cpu < minCPU {
		return 0
	}
	return float64(cpu.Microseconds()) / float64(res.Requests)
}

// loadBound is how long a load may run before it is cut off as hung.
func loadBound(lo loadgen.Options) time.Duration {
	if lo.Duration > 0 {
		return lo.Duration + time.Minute
	}
	return 3 * time.Minute
}

// minCPU is the least CPU time a load must use for its CPU per request to be reported: /proc
// counts in 10 ms ticks, so less than 5 ticks would be more rounding than measurement.
const minCPU = 5 * clockTick

// row turns one load's figures into a report row.
func row(label string, res *loadgen.Result, cpu time.Duration) Result {
	r := Result{
		Algorithm:     label,
		ThroughputRPS: res.ThroughputRPS,
		MakespanS:     res.Seconds,
		Split:         res.Split,
		P50Ms:         res.P50Ms,
		P99Ms:         res.P99Ms,
		Detail: Detail{
			Requests: res.Requests,
			Failed:   res.Failed,
			Non2xx:   res.Non2xx,
			Seconds:  res.Seconds,
			P90Ms:    res.P90Ms,
			MaxMs:    res.MaxMs,
		},
	}
	r.Detail.CPUUsPerReq = perReq(cpu, res)
	if r.Split == nil {
		r.Split = map[string]int64{}
	}
	return r
}

// runBallast starts Ballast for spec, applies each load in turn, and stops it.
func runBallast(ctx context.Context, o Options, spec PoolSpec, loads []loadgen.Options) ([]*loadgen.Result, []time.Duration, error) {
	p, err := StartBallast(ctx, o.Ballast, spec, 60*time.Second)
	if err != nil {
		return nil, nil, err
	}
	defer p.Close()
	var res []*loadgen.Result
	var cpus []time.Duration
	for _, lo := range loads {
		r, cpu, err := measure(ctx, o, p, lo)
		if err != nil {
			return nil, nil, err
		}
		res = append(res, r)
		cpus = append(cpus, cpu)
	}
	return res, cpus, nil
}

// runMeasured starts Ballast for spec, applies warm (unless it has no requests) and then
// load, and stops it; it returns the CPU time of Ballast and of each meter during load.
func runMeasured(ctx context.Context, o Options, spec PoolSpec, warm, load loadgen.Options, meters ...cpuMeter) (*loadgen.Result, []time.Duration, error) {
	p, err := StartBallast(ctx, o.Ballast, spec, 60*time.Second)
	if err != nil {
		return nil, nil, err
	}
	defer p.Close()
	if warm.N > 0 {
		if _, _, err := measure(ctx, o, p, warm); err != nil {
			return nil, nil, err
		}
	}
	return measureCPU(ctx, o, p, load, append([]cpuMeter{p.CPU}, meters...)...)
}

// localBackends starts one in-process emulated backend per config on a free loopback port.
func localBackends(cfgs ...backend.Config) ([]*backend.Server, []Target, func(), error) {
	var srvs []*backend.Server
	var ts []Target
	closeAll := func() {
		for _, s := range srvs {
			_ = s.Close()
		}
	}
	for _, c := range cfgs {
		s, err := backend.Listen("127.0.0.1:0", c)
		if err != nil {
			closeAll()
			return nil, nil, nil, err
		}
		srvs = append(srvs, s)
		ts = append(ts, Target{Name: c.Name, Addr: s.Addr()})
	}
	return srvs, ts, closeAll, nil
}

// simFigures runs the model and returns its figures as a prediction.
func simFigures(sc sim.Scenario, algorithm string) (Figures, error) {
	r, err := sim.Run(sc, algorithm)
	if err != nil {
		return Figures{}, err
	}
	f := Figures{
		ThroughputRPS: r.Throughput,
		MakespanS:     r.Makespan.Seconds(),
		SplitPct:      map[string]float64{},
		P50Ms:         float64(r.Latency.P50) / 1e6,
		P99Ms:         float64(r.Latency.P99) / 1e6,
	}
	total := 0
	for _, n := range r.Split {
		total += n
	}
	for id, n := range r.Split {
		if total > 0 {
			f.SplitPct[id] = 100 * float64(n) / float64(total)
		}
	}
	return f, nil
}

// predict runs the model for one row as a range: o's runs of sc, each with its own seed and
// run k with the jitter js[k mod len(js)] (measured by calibrate and on other rows). The
// figures are the runs' medians.
func predict(o Options, sc sim.Scenario, algorithm string, js []*sim.Jitter) (Figures, error) {
	rg, err := sim.RunRangeOf(sc, algorithm, o.runsFor(sc), func(k int, s *sim.Scenario) { s.Jitter = js[k%len(js)] })
	if err != nil {
		return Figures{}, err
	}
	makespans := make([]float64, len(rg.Results))
	rates := make([]float64, len(rg.Results))
	for i, res := range rg.Results {
		makespans[i], rates[i] = res.Makespan.Seconds(), res.Throughput
	}
	makespanIv, rateIv := rg.Predicted(sc)
	f := Figures{
		ThroughputRPS: rg.ThroughputRPS.Median,
		MakespanS:     rg.MakespanS.Median,
		SplitPct:      map[string]float64{},
		P50Ms:         rg.P50Ms.Median,
		P99Ms:         rg.P99Ms.Median,
		Range: &FigureRange{
			MakespanS:     makespanIv,
			ThroughputRPS: rateIv,
			SplitPct:      map[string][2]float64{},
			Runs:          rg.Runs,
			extremes:      [2][2]float64{{rg.MakespanS.Min, rg.MakespanS.Max}, {rg.ThroughputRPS.Min, rg.ThroughputRPS.Max}},
			values:        [2][]float64{makespans, rates},
		},
	}
	for id, sp := range rg.SplitPct {
		f.SplitPct[id] = sp.Median
		f.Range.SplitPct[id] = [2]float64{sp.Min, sp.Max}
	}
	return f, nil
}

func mustScenario(name string) sim.Scenario {
	sc, err := sim.Lookup(name)
	if err != nil {
		panic(err) // the catalogue is part of the program
	}
	return sc
}

// median returns the median of xs (the mean of the middle two for an even count).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// medianRow merges repetitions of one row: each figure is the median of its runs, the split is
// that of the run with the median throughput.
func medianRow(label string, runs []Result) Result {
	var thr, mk, p50, p99, cpu, lab []float64
	for _, r := range runs {
		lab = append(lab, r.Detail.LabCPUUsPerReq)
		thr = append(thr, r.ThroughputRPS)
		mk = append(mk, r.MakespanS)
		p50 = append(p50, r.P50Ms)
		p99 = append(p99, r.P99Ms)
		cpu = append(cpu, r.Detail.CPUUsPerReq)
	}
	m := median(thr)
	best := 0
	for i, r := range runs {
		if abs(r.ThroughputRPS-m) < abs(runs[best].ThroughputRPS-m) {
			best = i
		}
	}
	out := runs[best]
	out.Algorithm = label
	out.ThroughputRPS, out.MakespanS = m, median(mk)
	out.P50Ms, out.P99Ms = median(p50), median(p99)
	out.Detail.CPUUsPerReq, out.Detail.LabCPUUsPerReq = median(cpu), median(lab)
	var failed, non2xx int64
	for _, r := range runs {
		failed += r.Detail.Failed
		non2xx += r.Detail.Non2xx
	}
	out.Detail.Failed, out.Detail.Non2xx = failed, non2xx
	out.Detail.Runs = thr
	return out
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// scaled multiplies a duration by the quick scale when o.Quick.
func scaled(o Options, d time.Duration) time.Duration {
	if o.Quick {
		return time.Duration(float64(d) * QuickScale)
	}
	return d
}
