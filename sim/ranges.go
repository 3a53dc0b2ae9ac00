package sim

import (
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
	"time"
)

// DefaultRuns is how many seeds a range is drawn from when the caller gives none, for
// scenarios of up to runBudget/DefaultRuns requests; larger ones get fewer (RunsFor), down to
// MinRuns: the range [min, max] of n runs holds a new run with probability (n-1)/(n+1), 98 %
// for 100, and long runs vary little from seed to seed.
const (
	DefaultRuns = 100
	MinRuns     = 10
	runBudget   = 2_000_000 // requests simulated per range
)

// RunsFor is the default number of runs for a scenario of that many requests.
func RunsFor(requests int) int {
	if requests <= 0 {
		return DefaultRuns
	}
	return min(DefaultRuns, max(MinRuns, runBudget/requests))
}

// maxRuns bounds a range's runs.
const maxRuns = 1000

// Spread is one figure over a range's runs.
type Spread struct {
	Min, Median, Max float64
}

// Width is Max - Min.
func (s Spread) Width() float64 { return s.Max - s.Min }

// Contains reports whether x lies in [Min, Max].
func (s Spread) Contains(x float64) bool { return x >= s.Min && x <= s.Max }

// RelWidth is the width as a share of the median (0 when the median is 0).
func (s Spread) RelWidth() float64 {
	if s.Median == 0 {
		return 0
	}
	return s.Width() / s.Median
}

func spreadOf(xs []float64) Spread {
	if len(xs) == 0 {
		return Spread{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	m := s[n/2]
	if n%2 == 0 {
		m = (s[n/2-1] + s[n/2]) / 2
	}
	return Spread{Min: s[0], Median: m, Max: s[n-1]}
}

// Range is one algorithm's prediction on one scenario as a range: the scenario run with Runs
// different seeds (RandSeed, RandSeed+1, ...), each drawing its own jitter, picks and service
// times. Each figure is given by its smallest, median and largest value over the runs.
type Range struct {
	Algorithm string
	Runs      int
	// Makespan and the latency figures in seconds and milliseconds, Throughput in req/s.
	MakespanS, ThroughputRPS, P50Ms, P99Ms, QueueMs Spread
	// SplitPct is each backend's share of the responses in percent.
	SplitPct map[string]Spread
	// ErrorsPct and FailedPct are backend errors and failed requests as a share of requests.
	ErrorsPct, FailedPct Spread
	// Results holds every run's result, in seed order.
	Results []Result
}

// RunRange runs sc with algorithm n times (n <= 0 means RunsFor(sc.Requests)), seeds RandSeed..
// RandSeed+n-1, in parallel on up to GOMAXPROCS goroutines, and summarises the runs. Without
// jitter and random parts every run is the same, and the range is a point.
func RunRange(sc Scenario, algorithm string, n int) (Range, error) {
	return RunRangeOf(sc, algorithm, n, nil)
}

// RunRangeOf is RunRange with run k's scenario changed by vary (when not nil) after its seed
// is set: the lab gives each run the jitter of one of its measured runs, in turn.
func RunRangeOf(sc Scenario, algorithm string, n int, vary func(k int, sc *Scenario)) (Range, error) {
	if n <= 0 {
		n = RunsFor(sc.Requests)
	}
	if n > maxRuns {
		return Range{}, fmt.Errorf("%d runs, more than %d", n, maxRuns)
	}
	results := make([]Result, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	work := make(chan int)
	for range min(n, runtime.GOMAXPROCS(0)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range work {
				s := sc
				s.RandSeed = sc.RandSeed + uint64(k)
				if vary != nil {
					vary(k, &s)
				}
				results[k], errs[k] = Run(s, algorithm)
			}
		}()
	}
	for k := range n {
		work <- k
	}
	close(work)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return Range{}, err
		}
	}
	return Summarise(sc, algorithm, results), nil
}

// Summarise turns runs of one algorithm on sc into a Range.
func Summarise(sc Scenario, algorithm string, results []Result) Range {
	rg := Range{Algorithm: algorithm, Runs: len(results), Results: results, SplitPct: map[string]Spread{}}
	col := func(f func(Result) float64) Spread {
		xs := make([]float64, len(results))
		for i, r := range results {
			xs[i] = f(r)
		}
		return spreadOf(xs)
	}
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	rg.MakespanS = col(func(r Result) float64 { return r.Makespan.Seconds() })
	rg.ThroughputRPS = col(func(r Result) float64 { return r.Throughput })
	rg.P50Ms = col(func(r Result) float64 { return ms(r.Latency.P50) })
	rg.P99Ms = col(func(r Result) float64 { return ms(r.Latency.P99) })
	rg.QueueMs = col(func(r Result) float64 { return ms(r.QueueMean) })
	share := func(n, of int) float64 {
		if of == 0 {
			return 0
		}
		return 100 * float64(n) / float64(of)
	}
	rg.ErrorsPct = col(func(r Result) float64 { return share(r.Errors, r.Responses) })
	rg.FailedPct = col(func(r Result) float64 { return share(r.Failed, r.Responses) })
	for _, b := range sc.Backends {
		rg.SplitPct[b.ID] = col(func(r Result) float64 {
			total := 0
			for _, n := range r.Split {
				total += n
			}
			return share(r.Split[b.ID], total)
		})
	}
	return rg
}

// Predicted is the interval a fresh run of sc's makespan (seconds) and throughput (req/s) is
// predicted in from rg's runs of it (Interval: the makespan in sc's Quantum). The lab, advise
// and `ballast sim --runs` all state this interval as a row's or a choice's range.
func (rg Range) Predicted(sc Scenario) (makespanS, throughputRPS [2]float64) {
	makespans := make([]float64, len(rg.Results))
	rates := make([]float64, len(rg.Results))
	for i, res := range rg.Results {
		makespans[i], rates[i] = res.Makespan.Seconds(), res.Throughput
	}
	return Interval(makespans, Quantum(sc).Seconds()), Interval(rates, 0)
}

// Coverage is the share of fresh runs a prediction interval of a continuous figure is meant
// to hold (Interval without a quantum).
const Coverage = 0.99

// Quantum is the step a makespan of sc moves in: the greatest common divisor of its backends'
// service times when each is fixed or a per-request list, 0 when one is drawn at random or
// all are 0. A makespan is then a whole number of quanta (the services on its longest chain)
// plus the hops around them.
func Quantum(sc Scenario) time.Duration {
	var g time.Duration
	gcd := func(a, b time.Duration) time.Duration {
		for b != 0 {
			a, b = b, a%b
		}
		return a
	}
	for _, b := range sc.Backends {
		switch b.Service.Kind {
		case ServiceFixed:
			g = gcd(g, b.Service.Time)
		case ServicePerRequest:
			for _, d := range b.Service.List {
				g = gcd(g, d)
			}
		default:
			return 0
		}
	}
	return max(g, 0)
}

// Interval is the range xs, one figure of a scenario's runs, predicts for a fresh run.
//
// A continuous figure's interval is the runs' smallest and largest values: those of n runs
// hold a fresh run with probability (n-1)/(n+1), 99.8 % for 1000 runs but 90 % for 20. Where
// that is below Coverage, the interval is widened to the normal prediction interval at
// Coverage (mean ± t·s·√(1+1/n), Student's t with n-1 degrees of freedom) where that is wider.
//
// With a quantum q (Quantum, in the figure's unit) and the runs' distances to their nearest
// whole number of quanta (their residuals: the hops around the services) all within q/4 of
// each other, each run is k quanta plus its residual, and the interval runs from the fewest
// quanta any run took to the most, each end moved by the residuals' own interval: the few
// runs that reach the top quantum do not set its edge alone, every run's hops do.
//
// The figures (makespans, rates) are never negative, and neither is the interval's low end.
func Interval(xs []float64, quantum float64) [2]float64 {
	iv := interval(xs, quantum)
	iv[0] = max(iv[0], 0)
	return iv
}

// interval is Interval for figures of either sign (a quantized figure's residuals).
func interval(xs []float64, quantum float64) [2]float64 {
	if quantum > 0 && len(xs) > 0 {
		ks := make([]float64, len(xs))
		rs := make([]float64, len(xs))
		for i, x := range xs {
			ks[i] = math.Round(x / quantum)
			rs[i] = x - ks[i]*quantum
		}
		if slices.Max(rs)-slices.Min(rs) < quantum/4 {
			r := interval(rs, 0)
			return [2]float64{slices.Min(ks)*quantum + r[0], slices.Max(ks)*quantum + r[1]}
		}
	}
	if len(xs) == 0 {
		return [2]float64{}
	}
	lo, hi := slices.Min(xs), slices.Max(xs)
	n := float64(len(xs))
	if len(xs) < 3 || (n-1)/(n+1) >= Coverage {
		return [2]float64{lo, hi}
	}
	var mean, ss float64
	for _, x := range xs {
		mean += x
	}
	mean /= n
	for _, x := range xs {
		ss += (x - mean) * (x - mean)
	}
	half := studentT(1-(1-Coverage)/2, n-1) * math.Sqrt(ss/(n-1)) * math.Sqrt(1+1/n)
	return [2]float64{min(lo, mean-half), max(hi, mean+half)}
}

// studentT is the p quantile of Student's t with nu degrees of freedom (nu >= 2): the normal
// quantile corrected by the Cornish-Fisher expansion (Abramowitz and Stegun 26.7.5), within
// 0.1 % of the exact value from 10 degrees of freedom on.
func studentT(p, nu float64) float64 {
	z := normalQuantile(p)
	z3, z5, z7, z9 := z*z*z, math.Pow(z, 5), math.Pow(z, 7), math.Pow(z, 9)
	return z + (z3+z)/(4*nu) + (5*z5+16*z3+3*z)/(96*nu*nu) +
		(3*z7+19*z5+17*z3-15*z)/(384*nu*nu*nu) + (79*z9+776*z7+1482*z5-1920*z3-945*z)/(92160*nu*nu*nu*nu)
}

// normalQuantile is the standard normal's p quantile (0 < p < 1), by bisection on its CDF.
func normalQuantile(p float64) float64 {
	lo, hi := -10.0, 10.0
	for range 100 {
		mid := (lo + hi) / 2
		if 0.5*(1+math.Erf(mid/math.Sqrt2)) < p {
			lo = mid
		} else {
			hi = mid
		}
	}
	return (lo + hi) / 2
}
