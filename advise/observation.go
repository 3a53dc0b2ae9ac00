package advise

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"ballast/sim"
)

// Observation is what advise knows of one pool: its settings and what its backends and its
// clients were seen to do. GET /api/pools/{pool}/observed returns one; a JSON file of the same
// shape can be written by hand.
type Observation struct {
	Pool     string `json:"pool"`
	Balancer string `json:"balancer"`
	// HashKey is the pool's hash_key source; empty when the pool hashes nothing, and then
	// advise leaves out the hash balancers.
	HashKey string `json:"hash_key,omitempty"`
	// MaxConns is the pool's per-backend limit (0 = none); MaxQueue its backlog (0 = none).
	MaxConns       int     `json:"max_conns"`
	MaxQueue       int     `json:"max_queue"`
	QueueTimeoutMs float64 `json:"queue_timeout_ms,omitempty"`
	Hedge          Hedge   `json:"hedge"`
	// WindowS is the span of time the figures below were observed over, Samples how many
	// requests they come from.
	WindowS float64 `json:"window_s"`
	Samples int     `json:"samples"`
	Load    Load    `json:"load"`

	Backends []BackendObs `json:"backends"`
	// Releases are the raw records the figures were computed from (only when asked for).
	Releases []Release `json:"releases,omitempty"`
}

// Hedge is a pool's hedging: a copy of a request unanswered after DelayMs goes to another
// backend, at most Max copies; DelayMs 0 is off.
type Hedge struct {
	DelayMs float64 `json:"delay_ms"`
	Max     int     `json:"max,omitempty"`
}

// Load is what the pool's clients did.
type Load struct {
	// Kind is "closed" when the pool never held many more requests than it held on average
	// (clients that send their next request when the previous one is answered: Concurrency
	// of them, the most it held at once), "open" otherwise (requests arrive at RateRPS
	// whatever the responses do).
	Kind        string  `json:"kind"`
	Concurrency int     `json:"concurrency,omitempty"`
	RateRPS     float64 `json:"rate_rps"`
	// CV is the coefficient of variation of the gaps between arrivals: 1 for a Poisson
	// process, above 1 for bursts.
	CV float64 `json:"cv"`
	// ThinkMs is, for a closed load, the mean time a client spends outside the pool between
	// a response and its next request (Little's law: Concurrency / rate - time in the pool).
	ThinkMs float64 `json:"think_ms,omitempty"`
	// InFlight is the pool's requests in flight seen by each arriving request (quantiles p10,
	// p50, p90, p99).
	InFlight []float64 `json:"in_flight,omitempty"`
}

// BackendObs is one backend as observed.
type BackendObs struct {
	ID       string `json:"id"`
	Weight   int    `json:"weight"`
	MaxConns int    `json:"max_conns"`
	State    string `json:"state,omitempty"`
	// InFlight is the count at the moment of the observation; Requests and Errors are
	// cumulative counters; Samples the requests in the window.
	InFlight int64  `json:"in_flight"`
	Requests uint64 `json:"requests"`
	Errors   uint64 `json:"errors"`
	Samples  int    `json:"samples"`
	// ErrorRate is the share of the window's requests that failed.
	ErrorRate float64 `json:"error_rate"`
	// ServiceMs is the service time's distribution in milliseconds, as quantiles at
	// QuantileP: each request's time from the start of its service (as Workers FIFO workers
	// give it) to its release. LatencyMs is the distribution of the whole latency, queueing
	// inside the backend included.
	ServiceMs []float64 `json:"service_ms"`
	LatencyMs []float64 `json:"latency_ms,omitempty"`
	// Workers is how many requests the backend serves at once: the fewest FIFO workers that
	// explain every request's dispatch and release; 0 when it never held more than it served
	// (the model then gives it as many workers as it was seen to hold, PeakInFlight).
	Workers      int `json:"workers"`
	PeakInFlight int `json:"peak_in_flight"`
}

// Release is one request as Ballast's admin plane recorded it: when its backend slot was
// released (Unix nanoseconds), how long the backend took (from dispatch to the response's
// headers) and whether it failed.
type Release struct {
	Backend   string `json:"backend"`
	AtNs      int64  `json:"at_unix_ns"`
	LatencyNs int64  `json:"latency_ns"`
	Failed    bool   `json:"failed,omitempty"`
}

// Dispatched is when the request was sent to its backend.
func (r Release) Dispatched() int64 { return r.AtNs - r.LatencyNs }

// QuantileP are the probabilities ServiceMs and LatencyMs give the quantiles at (sim.TailP):
// every 5 %, then finer in the tail, where one slow request in a thousand must not pass for
// one in twenty.
var QuantileP = sim.TailP

// Minimum samples for a figure to be estimated from them.
const (
	minSamples = 20 // releases in a pool's window for an observation at all
)

// ErrTooFew says the window holds too few requests to advise on.
var ErrTooFew = errors.New("advise: too few requests observed")

// Observe fills o's load and backends' figures from rs, the window's releases; o's settings
// and backends (IDs, weights, limits, counters) must be set already. Backends in rs that o
// does not list are ignored; a listed backend without releases keeps empty figures.
func Observe(o *Observation, rs []Release) error {
	rs = slices.Clone(rs)
	slices.SortFunc(rs, func(a, b Release) int { return cmp.Compare(a.Dispatched(), b.Dispatched()) })
	known := map[string]int{}
	for i, b := range o.Backends {
		known[b.ID] = i
	}
	rs = slices.DeleteFunc(rs, func(r Release) bool { _, ok := known[r.Backend]; return !ok || r.LatencyNs < 0 })
	o.Samples = len(rs)
	if len(rs) < minSamples {
		return fmt.Errorf("%w: %d in the window, at least %d needed", ErrTooFew, len(rs), minSamples)
	}
	first, last := rs[0].Dispatched(), rs[0].AtNs
	for _, r := range rs {
		last = max(last, r.AtNs)
	}
	o.WindowS = float64(last-first) / 1e9

	per := make([][]Release, len(o.Backends))
	for _, r := range rs {
		per[known[r.Backend]] = append(per[known[r.Backend]], r)
	}
	var poolLat float64
	for i := range o.Backends {
		observeBackend(&o.Backends[i], per[i])
	}
	for _, r := range rs {
		poolLat += float64(r.LatencyNs)
	}
	poolLat /= float64(len(rs))
	o.Load = observeLoad(rs, poolLat)
	return nil
}

// observeBackend estimates one backend's service time and workers from its releases (sorted
// by dispatch).
func observeBackend(b *BackendObs, rs []Release) {
	b.Samples = len(rs)
	if len(rs) == 0 {
		return
	}
	failed := 0
	for _, r := range rs {
		if r.Failed {
			failed++
		}
	}
	b.ErrorRate = float64(failed) / float64(len(rs))
	n := inFlightAtDispatch(rs)
	b.PeakInFlight = slices.Max(n) + 1
	lat := make([]time.Duration, len(rs))
	for i, r := range rs {
		lat[i] = time.Duration(r.LatencyNs)
	}
	b.LatencyMs = msQuantiles(sim.DistAt(lat, QuantileP))
	k, svc := estimateWorkers(rs, n, b.PeakInFlight)
	if k < b.PeakInFlight {
		b.Workers = k
	}
	b.ServiceMs = msQuantiles(sim.DistAt(svc, QuantileP))
}

// estimateWorkers tells how many requests the backend serves at once, from rs (sorted by
// dispatch) and n, the requests already in flight on it at each one's dispatch. When the
// latency does not grow with n, the backend never queued: it returns peak and the latencies
// as service times. Otherwise it takes the fewest workers k that explain rs as a queue in
// front of k workers served in the order they finish: the i-th request to finish started when
// it was dispatched or when the (i-k)-th finished, whichever is later, and its service is its
// release minus that start. When requests that found the backend idle show its service time,
// too few workers would squeeze the services of overlapping requests below half of it, more
// often (by 2 % of the requests) than the idle ones fall there by themselves. A backend
// never seen idle shows only its capacity (k workers of service s and one of s/k depart
// alike): one worker is taken.
func estimateWorkers(rs []Release, n []int, peak int) (int, []time.Duration) {
	lat := make([]time.Duration, len(rs))
	for i, r := range rs {
		lat[i] = time.Duration(r.LatencyNs)
	}
	groups := map[int][]time.Duration{}
	for i := range n {
		groups[n[i]] = append(groups[n[i]], lat[i])
	}
	var counts []int
	for c, g := range groups {
		if len(g) >= minGroupSamples {
			counts = append(counts, c)
		}
	}
	slices.Sort(counts)
	median := func(xs []time.Duration) time.Duration { return sim.DistAt(xs, []float64{0, .5, 1}).Q[1] }
	grows := false
	if len(counts) >= 2 {
		base := median(groups[counts[0]])
		for _, c := range counts[1:] {
			grows = grows || float64(median(groups[c])) > 1.25*float64(base)
		}
	}
	if !grows {
		return peak, lat
	}
	var idle time.Duration // the service time requests that found the backend idle show
	base := 0              // and how many of them fall under half of it by themselves
	if counts[0] == 0 {
		idle = median(groups[0])
		base = squeezed(groups[0], idle) * len(rs) / len(groups[0])
	}
	byRelease := slices.Clone(rs)
	slices.SortStableFunc(byRelease, func(a, b Release) int { return cmp.Compare(a.AtNs, b.AtNs) })
	svc := make([]time.Duration, len(rs))
	for k := 1; k < min(peak, maxWorkers); k++ {
		queuedServices(byRelease, k, svc)
		if idle == 0 || squeezed(svc, idle) <= base+len(rs)/50 {
			return k, svc
		}
	}
	return peak, lat
}

// queuedServices fills svc with the service times k workers give rs (sorted by release).
func queuedServices(rs []Release, k int, svc []time.Duration) {
	for i, r := range rs {
		start := r.Dispatched()
		if i >= k {
			start = max(start, rs[i-k].AtNs)
		}
		svc[i] = time.Duration(max(r.AtNs-start, 0))
	}
}

// minGroupSamples is the fewest latencies at one in-flight count for their median to count.
const minGroupSamples = 8

// squeezed counts services under half the idle service time.
func squeezed(svc []time.Duration, idle time.Duration) int {
	c := 0
	for _, d := range svc {
		if d < idle/2 {
			c++
		}
	}
	return c
}

// maxWorkers bounds the search: a backend holding more at once counts as unlimited.
const maxWorkers = 256

// inFlightAtDispatch counts, for each request (sorted by dispatch), the others on the same
// backend that were dispatched before it and released after its dispatch.
func inFlightAtDispatch(rs []Release) []int {
	ends := make([]int64, 0, len(rs)) // release times of the requests dispatched so far, sorted
	out := make([]int, len(rs))
	for i, r := range rs {
		d := r.Dispatched()
		// Drop the ones released by now.
		k, _ := slices.BinarySearch(ends, d+1)
		ends = ends[k:]
		out[i] = len(ends)
		j, _ := slices.BinarySearch(ends, r.AtNs)
		ends = slices.Insert(ends, j, r.AtNs)
	}
	return out
}

// observeLoad tells a closed load from an open one by the pool's requests in flight, and
// measures the rate and burstiness of the arrivals.
func observeLoad(rs []Release, meanLatency float64) Load {
	n := inFlightAtDispatch(rs)
	nf := make([]time.Duration, len(n))
	for i, x := range n {
		nf[i] = time.Duration(x)
	}
	d := sim.DistOf(nf, 100)
	l := Load{InFlight: []float64{float64(d.Quantile(.1)), float64(d.Quantile(.5)), float64(d.Quantile(.9)), float64(d.Quantile(.99))}}
	span := float64(rs[len(rs)-1].Dispatched()-rs[0].Dispatched()) / 1e9
	if span > 0 {
		l.RateRPS = float64(len(rs)-1) / span
	}
	var gaps []float64
	for i := 1; i < len(rs); i++ {
		gaps = append(gaps, float64(rs[i].Dispatched()-rs[i-1].Dispatched()))
	}
	l.CV = cv(gaps)
	// A closed loop never holds more requests than it has clients, and holds nearly that
	// many when the clients think little: the peak stays close to the mean (Little's law:
	// rate x time in the pool). An open load's peak runs well above its mean.
	peak := slices.Max(n) + 1
	mean := l.RateRPS * meanLatency / 1e9
	if float64(peak) <= math.Ceil(1.25*mean)+1 {
		l.Kind = "closed"
		l.Concurrency = peak
		if l.RateRPS > 0 {
			think := float64(l.Concurrency)/l.RateRPS*1e3 - meanLatency/1e6
			l.ThinkMs = max(think, 0)
		}
	} else {
		l.Kind = "open"
	}
	return l
}

func cv(xs []float64) float64 {
	if len(xs) < 2 {
		return 0
	}
	var sum, sq float64
	for _, x := range xs {
		sum += x
	}
	mean := sum / float64(len(xs))
	if mean == 0 {
		return 0
	}
	for _, x := range xs {
		sq += (x - mean) * (x - mean)
	}
	return math.Sqrt(sq/float64(len(xs)-1)) / mean
}

func msQuantiles(d sim.Dist) []float64 {
	if len(d.Q) == 0 {
		return nil
	}
	out := make([]float64, len(d.Q))
	for i, q := range d.Q {
		out[i] = math.Round(float64(q)/1e3) / 1e3 // ms with µs precision
	}
	return out
}

// distFromMs reads quantiles in milliseconds at QuantileP (or evenly spaced when there are
// not as many).
func distFromMs(ms []float64) sim.Dist {
	d := sim.Dist{Q: make([]time.Duration, len(ms))}
	if len(ms) == len(QuantileP) {
		d.P = QuantileP
	}
	for i, x := range ms {
		d.Q[i] = time.Duration(x * 1e6)
	}
	return d
}
