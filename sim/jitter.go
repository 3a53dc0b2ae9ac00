package sim

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// Dist is an empirical distribution of durations, kept as quantiles: Q[k] is the P[k]
// quantile, P rising from 0 to 1 (Q[0] the smallest value seen, Q[len-1] the largest); with P
// empty the probabilities are evenly spaced, k/(len-1). A draw takes a uniform probability
// and interpolates linearly between the two quantiles around it, so draws never leave
// [Q[0], Q[len-1]]. The zero Dist always draws 0.
type Dist struct {
	Q []time.Duration `json:"q"`
	P []float64       `json:"p,omitempty"`
}

// TailP are the probabilities measured distributions are kept at: every 5 %, then finer in the
// tail (99 %, 99.9 %), where one slow request in a thousand must not pass for one in twenty.
var TailP = []float64{0, .05, .1, .15, .2, .25, .3, .35, .4, .45, .5, .55, .6, .65, .7, .75, .8, .85, .9, .95, .99, .999, 1}

// maxDistPoints bounds a Dist read from a file or the network.
const maxDistPoints = 4096

// DistOf summarises sample (which it does not modify) by n+1 evenly spaced quantiles (n >= 1);
// an empty sample gives the zero Dist.
func DistOf(sample []time.Duration, n int) Dist {
	n = max(n, 1)
	ps := make([]float64, n+1)
	for k := range ps {
		ps[k] = float64(k) / float64(n)
	}
	d := DistAt(sample, ps)
	d.P = nil
	return d
}

// DistAt summarises sample by its quantiles at ps (rising from 0 to 1): finer steps where
// they matter, such as the tail of a latency.
func DistAt(sample []time.Duration, ps []float64) Dist {
	if len(sample) == 0 {
		return Dist{}
	}
	s := slices.Clone(sample)
	slices.Sort(s)
	q := make([]time.Duration, len(ps))
	for k, p := range ps {
		q[k] = quantileOf(s, p)
	}
	return Dist{Q: q, P: slices.Clone(ps)}
}

// quantileOf interpolates the p quantile of sorted s.
func quantileOf(s []time.Duration, p float64) time.Duration {
	if len(s) == 1 {
		return s[0]
	}
	x := p * float64(len(s)-1)
	i := int(x)
	if i >= len(s)-1 {
		return s[len(s)-1]
	}
	f := x - float64(i)
	return s[i] + time.Duration(f*float64(s[i+1]-s[i]))
}

// IsZero reports whether d draws nothing but 0.
func (d Dist) IsZero() bool {
	for _, q := range d.Q {
		if q != 0 {
			return false
		}
	}
	return true
}

// prob is the probability of quantile k.
func (d Dist) prob(k int) float64 {
	if len(d.P) == len(d.Q) {
		return d.P[k]
	}
	return float64(k) / float64(len(d.Q)-1)
}

// Quantile returns the p quantile (0 <= p <= 1).
func (d Dist) Quantile(p float64) time.Duration {
	switch len(d.Q) {
	case 0:
		return 0
	case 1:
		return d.Q[0]
	}
	p = min(max(p, 0), 1)
	if len(d.P) != len(d.Q) {
		return quantileOf(d.Q, p)
	}
	k, _ := slices.BinarySearch(d.P, p) // first P[k] >= p
	switch {
	case k == 0:
		return d.Q[0]
	case k >= len(d.Q):
		return d.Q[len(d.Q)-1]
	}
	lo, hi := d.P[k-1], d.P[k]
	if hi <= lo {
		return d.Q[k]
	}
	f := (p - lo) / (hi - lo)
	return d.Q[k-1] + time.Duration(f*float64(d.Q[k]-d.Q[k-1]))
}

// Mean is the distribution's mean (of the interpolated quantile function).
func (d Dist) Mean() time.Duration {
	switch len(d.Q) {
	case 0:
		return 0
	case 1:
		return d.Q[0]
	}
	var sum float64
	for k := 1; k < len(d.Q); k++ {
		sum += float64(d.Q[k-1]+d.Q[k]) / 2 * (d.prob(k) - d.prob(k-1))
	}
	return time.Duration(sum)
}

// Scale returns d with every quantile multiplied by f.
func (d Dist) Scale(f float64) Dist {
	out := Dist{Q: make([]time.Duration, len(d.Q)), P: slices.Clone(d.P)}
	for i, q := range d.Q {
		out.Q[i] = time.Duration(float64(q) * f)
	}
	return out
}

func (d Dist) draw(r *rand.Rand) time.Duration {
	switch len(d.Q) {
	case 0:
		return 0
	case 1:
		return d.Q[0]
	}
	return d.Quantile(r.Float64())
}

func (d Dist) validate() error {
	if len(d.Q) > maxDistPoints {
		return fmt.Errorf("%d quantiles, more than %d", len(d.Q), maxDistPoints)
	}
	for i, q := range d.Q {
		if q < 0 || q > maxService {
			return fmt.Errorf("quantile %d is %v, outside [0, %v]", i, q, maxService)
		}
		if i > 0 && q < d.Q[i-1] {
			return errors.New("quantiles are not in increasing order")
		}
	}
	if len(d.P) == 0 {
		return nil
	}
	if len(d.P) != len(d.Q) {
		return fmt.Errorf("%d probabilities for %d quantiles", len(d.P), len(d.Q))
	}
	if d.P[0] != 0 || d.P[len(d.P)-1] != 1 {
		return errors.New("probabilities must run from 0 to 1")
	}
	for i := 1; i < len(d.P); i++ {
		if !(d.P[i] >= d.P[i-1]) {
			return errors.New("probabilities are not in increasing order")
		}
	}
	return nil
}

// String prints the median and the 90th and 99th percentiles and the largest value.
func (d Dist) String() string {
	if len(d.Q) == 0 {
		return "0"
	}
	return fmt.Sprintf("p50 %s p90 %s p99 %s max %s", fmtDur(d.Quantile(.5)), fmtDur(d.Quantile(.9)),
		fmtDur(d.Quantile(.99)), fmtDur(d.Q[len(d.Q)-1]))
}

// Jitter is what happens between the client and the backends in real time, drawn afresh for
// every request: the model's way of putting a real machine's order of events into virtual
// time. Each delay is drawn independently from its distribution; the zero Jitter is the
// ideal machine, where everything Ballast and the network do takes no time.
//
// A request's path: the client takes it (closed loop: when a response made room) and spends
// Send writing it (connecting first for a fresh connection); it reaches the balancer ToPick
// later, which picks a backend at once (or queues it); it reaches the backend Forward after the
// pick, plus Connect when the balancer had no idle connection to that backend and opened one
// (connections go back to a per-backend idle pool when their response is in; a cancelled
// copy's is closed); the backend serves it (queueing behind its workers) and its response leaves Overshoot
// after the service time ends (timers fire late; only for a service time above 0); the
// response reaches the balancer Return later, which frees the backend's slot then; and the
// client has it Deliver after that. A request that waited in the central backlog is handed the
// freed slot when the balancer frees it, and is sent on Handoff later (the waiting request's
// wake-up in Ballast), then Forward and Connect as any other.
type Jitter struct {
	Send      Dist `json:"send"`
	ToPick    Dist `json:"to_pick"`
	Forward   Dist `json:"forward"`
	Connect   Dist `json:"connect"`
	Overshoot Dist `json:"overshoot"`
	Return    Dist `json:"return"`
	Deliver   Dist `json:"deliver"`
	// Handoff is the time from the release that frees a slot to the dispatch of the request
	// the backlog hands it to; only requests that waited in the backlog draw it.
	Handoff Dist `json:"handoff,omitzero"`
	// OneSender: the client writes one request at a time, in order, as ab does and as the
	// load generator does when requests differ (-R), so a request's Send starts when the
	// previous one's ended.
	OneSender bool `json:"one_sender,omitempty"`
	// First, when set, replaces Send, ToPick, Forward, Return and Deliver for the first
	// FirstN requests of a run (0 means Concurrency): the start-up of a freshly started
	// balancer on fresh connections, slower than its steady state.
	First  *Hops `json:"first,omitempty"`
	FirstN int   `json:"first_n,omitempty"`
	// Stalls are moments the whole machine stops (a shared machine's other work, a runtime
	// pause): they start at StallRate per second (a Poisson process) and last a length drawn
	// from Stall; whatever the client, the balancer or a response would do during one waits
	// for its end. A backend's service time runs on (the lab's emulated backends keep virtual
	// time: a late timer delays the response, not the next request's service).
	StallRate float64 `json:"stall_rate,omitempty"`
	Stall     Dist    `json:"stall,omitempty"`
	// Drain is how a stall ends: what it held comes out one event after another, not all
	// at its end (the balancer, back on a CPU, forwards and returns them one by one while
	// the clients it answered connect again). The k-th event postponed by a stall happens at
	// its end plus the sum of k draws of Drain (zero: all at its end).
	Drain Dist `json:"drain,omitzero"`
	// Recovery, when set, replaces Send, ToPick, Forward, Return and Deliver for a hop that
	// begins within RecoveryFor after a stall's end: the balancer and the clients catch up
	// on what the stall held at once, on the same CPUs, and their hops are slower than in
	// the steady state (a backend whose queue the stall drained idles until they are done).
	// RecoveryOvershoot, when set, replaces Overshoot for a service that ends then (the
	// emulated backends' late timers, in a process catching up too).
	Recovery          *Hops         `json:"recovery,omitempty"`
	RecoveryOvershoot Dist          `json:"recovery_overshoot,omitzero"`
	RecoveryFor       time.Duration `json:"recovery_for,omitempty"`
	// TimerTick, when set, is the resolution of the balancer's own timers (the hedge's): as
	// Ballast's shard wheel (package evloop, 2^TickShift ns) does, a timer fires at the first
	// tick boundary at or after its deadline, never before it and up to a tick after, then
	// late by an Overshoot draw (the wake-up of an idle process). The ticks' phase against
	// the run's start is the balancer's own clock's, drawn once per run. Zero: timers fire at
	// their deadline exactly.
	TimerTick time.Duration `json:"timer_tick,omitempty"`
	// Source says where the figures come from (a measurement, its date and load).
	Source string `json:"source,omitempty"`
}

// Hops are the per-hop delays a request's start-up draws (Jitter.First).
type Hops struct {
	Send    Dist `json:"send"`
	ToPick  Dist `json:"to_pick"`
	Forward Dist `json:"forward"`
	Return  Dist `json:"return"`
	Deliver Dist `json:"deliver"`
}

func (h *Hops) isZero() bool {
	return h == nil || h.Send.IsZero() && h.ToPick.IsZero() && h.Forward.IsZero() && h.Return.IsZero() && h.Deliver.IsZero()
}

// hops returns the delays request idx of a run with concurrency c draws for a hop that
// begins recovering (within RecoveryFor after a stall's end) or not.
func (j *Jitter) hops(idx, c int, recovering bool) Hops {
	n := j.FirstN
	if n == 0 {
		n = c
	}
	if j.First != nil && idx < n {
		return *j.First
	}
	if recovering && j.Recovery != nil {
		return *j.Recovery
	}
	return Hops{Send: j.Send, ToPick: j.ToPick, Forward: j.Forward, Return: j.Return, Deliver: j.Deliver}
}

// IsZero reports whether j adds no delay at all.
func (j *Jitter) IsZero() bool {
	return j == nil || j.Send.IsZero() && j.ToPick.IsZero() && j.Forward.IsZero() && j.Connect.IsZero() &&
		j.Overshoot.IsZero() && j.Return.IsZero() && j.Deliver.IsZero() && j.Handoff.IsZero() && (j.StallRate == 0 || j.Stall.IsZero()) && j.First.isZero() && j.TimerTick == 0
}

func (j *Jitter) validate() error {
	for _, f := range []struct {
		name string
		d    Dist
	}{{"send", j.Send}, {"to_pick", j.ToPick}, {"forward", j.Forward}, {"connect", j.Connect}, {"overshoot", j.Overshoot},
		{"return", j.Return}, {"deliver", j.Deliver}, {"handoff", j.Handoff}, {"drain", j.Drain}, {"recovery_overshoot", j.RecoveryOvershoot}} {
		if err := f.d.validate(); err != nil {
			return fmt.Errorf("jitter %s: %w", f.name, err)
		}
	}
	for name, h := range map[string]*Hops{"first": j.First, "recovery": j.Recovery} {
		if h == nil {
			continue
		}
		for _, d := range []Dist{h.Send, h.ToPick, h.Forward, h.Return, h.Deliver} {
			if err := d.validate(); err != nil {
				return fmt.Errorf("jitter %s: %w", name, err)
			}
		}
	}
	if j.TimerTick < 0 || j.TimerTick > maxTimerTick {
		return fmt.Errorf("jitter timer_tick %v outside [0, %v]", j.TimerTick, maxTimerTick)
	}
	if j.RecoveryFor < 0 || j.RecoveryFor > maxRecovery {
		return fmt.Errorf("jitter recovery_for %v outside [0, %v]", j.RecoveryFor, maxRecovery)
	}
	if j.FirstN < 0 || j.FirstN > maxRequests {
		return fmt.Errorf("jitter first_n %d outside [0, %d]", j.FirstN, maxRequests)
	}
	if j.StallRate < 0 || j.StallRate > maxStallRate || math.IsNaN(j.StallRate) {
		return fmt.Errorf("jitter stall rate %g outside [0, %d] per second", j.StallRate, maxStallRate)
	}
	return j.Stall.validate()
}

// maxStallRate bounds the stalls per second, so that a stall timeline stays small;
// maxRecovery bounds RecoveryFor, maxTimerTick TimerTick.
const (
	maxStallRate = 1000
	maxRecovery  = time.Second
	maxTimerTick = time.Second
)

// String describes j in one line per delay.
func (j *Jitter) String() string {
	if j.IsZero() {
		return "no jitter"
	}
	var b strings.Builder
	for _, f := range []struct {
		name string
		d    Dist
	}{{"send", j.Send}, {"to pick", j.ToPick}, {"forward", j.Forward}, {"connect", j.Connect}, {"overshoot", j.Overshoot},
		{"return", j.Return}, {"deliver", j.Deliver}} {
		fmt.Fprintf(&b, "%s %s; ", f.name, f.d)
	}
	if !j.Handoff.IsZero() {
		fmt.Fprintf(&b, "backlog hand-off %s; ", j.Handoff)
	}
	if h := j.First; h != nil {
		fmt.Fprintf(&b, "first requests: send %s, to pick %s, forward %s, return %s, deliver %s; ", h.Send, h.ToPick, h.Forward, h.Return, h.Deliver)
	}
	if j.StallRate > 0 {
		fmt.Fprintf(&b, "stalls %.2f/s of %s; ", j.StallRate, j.Stall)
		if !j.Drain.IsZero() {
			fmt.Fprintf(&b, "drained at %s per event; ", j.Drain)
		}
		if h := j.Recovery; h != nil && j.RecoveryFor > 0 {
			fmt.Fprintf(&b, "hops within %v after a stall: send %s, to pick %s, forward %s, overshoot %s, return %s, deliver %s; ", j.RecoveryFor, h.Send, h.ToPick, h.Forward, j.RecoveryOvershoot, h.Return, h.Deliver)
		}
	}
	if j.OneSender {
		b.WriteString("one sender")
	}
	return strings.TrimSuffix(b.String(), "; ")
}

// gamma draws from a gamma distribution with the given shape and scale (Marsaglia and
// Tsang's method; shape < 1 by boosting).
func gamma(r *rand.Rand, shape, scale float64) float64 {
	if shape < 1 {
		u := r.Float64()
		return gamma(r, shape+1, scale) * math.Pow(u, 1/shape)
	}
	d := shape - 1.0/3
	c := 1 / math.Sqrt(9*d)
	for {
		x := r.NormFloat64()
		v := 1 + c*x
		if v <= 0 {
			continue
		}
		v = v * v * v
		u := r.Float64()
		if u < 1-0.0331*x*x*x*x || math.Log(u) < 0.5*x*x+d*(1-v+math.Log(v)) {
			return d * v * scale
		}
	}
}

// stalls is a run's timeline of machine stalls, drawn as far as the run has got.
type stalls struct {
	rate    float64
	length  Dist
	drain   Dist // Jitter.Drain
	r       *rand.Rand
	next    time.Duration   // start of the next stall not yet drawn
	windows []time.Duration // merged [start, end) pairs, in order
	// drained is, per window (by the index of its start in windows), how far past its end
	// the next event it postpones comes out.
	drained map[int]time.Duration
}

// after returns t, or the end of the stall t falls in (and of any stall that began before
// that end).
func (s *stalls) after(t time.Duration) time.Duration {
	for {
		u := s.once(t)
		if u == t {
			return t
		}
		t = u
	}
}

// recovering reports whether t lies within w after the end of a stall (and in none).
func (s *stalls) recovering(t, w time.Duration) bool {
	if w <= 0 {
		return false
	}
	s.upTo(t)
	k, _ := slices.BinarySearch(s.windows, t+1) // the window bounds at or before t
	return k > 0 && k%2 == 0 && t-s.windows[k-1] < w
}

// upTo draws the stalls that start at or before t.
func (s *stalls) upTo(t time.Duration) {
	for s.next <= t {
		start := s.next
		end := start + s.length.draw(s.r)
		if n := len(s.windows); n > 0 && start <= s.windows[n-1] {
			s.windows[n-1] = max(s.windows[n-1], end)
		} else {
			s.windows = append(s.windows, start, end)
		}
		s.next = start + time.Duration(s.r.ExpFloat64()/s.rate*float64(time.Second))
	}
}

func (s *stalls) once(t time.Duration) time.Duration {
	s.upTo(t)
	// The last window starting at or before t.
	k, _ := slices.BinarySearch(s.windows, t+1)
	if k%2 == 1 { // inside [windows[k-1], windows[k])
		if s.drain.IsZero() {
			return s.windows[k]
		}
		if s.drained == nil {
			s.drained = map[int]time.Duration{}
		}
		d := s.drained[k] + s.drain.draw(s.r)
		s.drained[k] = d
		return s.windows[k] + d
	}
	return t
}
