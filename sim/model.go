package sim

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// ServiceKind selects how a backend's service time is drawn.
type ServiceKind uint8

const (
	// ServiceFixed: every request takes Service.Time.
	ServiceFixed ServiceKind = iota
	// ServicePerRequest: request i takes Service.List[i mod len], like seed 001's ?wait= list.
	ServicePerRequest
	// ServiceExponential: exponential with mean Service.Time.
	ServiceExponential
	// ServiceLogNormal: log-normal with median Service.Time and shape Service.Sigma.
	ServiceLogNormal
	// ServiceEmpirical: drawn from Service.Dist, a distribution observed on a real backend.
	ServiceEmpirical
)

// Service is a backend's service-time model; draws come from the run's seeded generator so
// that a run is reproducible.
type Service struct {
	Kind  ServiceKind
	Time  time.Duration   // fixed time, mean (exponential) or median (log-normal)
	Sigma float64         // log-normal shape
	List  []time.Duration // per-request times, indexed by request index mod len
	Dist  Dist            // empirical
}

// Fixed is a constant service time.
func Fixed(d time.Duration) Service { return Service{Kind: ServiceFixed, Time: d} }

// PerRequest takes request i's service time from list[i mod len(list)].
func PerRequest(list ...time.Duration) Service {
	return Service{Kind: ServicePerRequest, List: list}
}

// Exponential draws service times with the given mean.
func Exponential(mean time.Duration) Service { return Service{Kind: ServiceExponential, Time: mean} }

// LogNormal draws service times with the given median and shape sigma.
func LogNormal(median time.Duration, sigma float64) Service {
	return Service{Kind: ServiceLogNormal, Time: median, Sigma: sigma}
}

// Empirical draws service times from d.
func Empirical(d Dist) Service { return Service{Kind: ServiceEmpirical, Dist: d} }

// Validate reports what makes s unusable.
func (s Service) Validate() error { return s.validate() }

func (s Service) validate() error {
	switch s.Kind {
	case ServiceFixed, ServiceExponential:
		if s.Time < 0 {
			return fmt.Errorf("negative service time %v", s.Time)
		}
	case ServiceLogNormal:
		if s.Time <= 0 || s.Sigma < 0 || math.IsNaN(s.Sigma) || math.IsInf(s.Sigma, 0) {
			return fmt.Errorf("log-normal service needs a positive median and a finite sigma >= 0")
		}
	case ServiceEmpirical:
		if len(s.Dist.Q) == 0 {
			return errors.New("empirical service needs a distribution")
		}
		return s.Dist.validate()
	case ServicePerRequest:
		if len(s.List) == 0 {
			return errors.New("per-request service needs a non-empty list")
		}
		for _, d := range s.List {
			if d < 0 {
				return fmt.Errorf("negative service time %v in list", d)
			}
		}
	default:
		return fmt.Errorf("unknown service kind %d", s.Kind)
	}
	return nil
}

// maxService caps drawn times so that a heavy tail cannot overflow virtual time.
const maxService = 24 * time.Hour

// draw returns the service time of request idx.
func (s Service) draw(idx int, r *rand.Rand) time.Duration {
	var d float64
	switch s.Kind {
	case ServicePerRequest:
		return s.List[idx%len(s.List)]
	case ServiceExponential:
		d = r.ExpFloat64() * float64(s.Time)
	case ServiceLogNormal:
		d = float64(s.Time) * math.Exp(s.Sigma*r.NormFloat64())
	case ServiceEmpirical:
		return s.Dist.draw(r)
	default:
		return s.Time
	}
	if d > float64(maxService) {
		return maxService
	}
	return time.Duration(d)
}

// String describes the model briefly, for tables.
func (s Service) String() string {
	switch s.Kind {
	case ServicePerRequest:
		return fmt.Sprintf("per-request %v", s.List)
	case ServiceExponential:
		return fmt.Sprintf("exp(mean %v)", s.Time)
	case ServiceLogNormal:
		return fmt.Sprintf("lognormal(median %v, sigma %g)", s.Time, s.Sigma)
	case ServiceEmpirical:
		return "observed(" + s.Dist.String() + ")"
	default:
		return s.Time.String()
	}
}

// Backend is one modelled server.
type Backend struct {
	ID      string
	Weight  int // 0 means 1
	Workers int // requests served at once; 0 means unlimited
	Service Service
	// ErrorRate is the fraction of its responses that are errors (5xx, resets): they count
	// in Result.Errors; the model does not retry them.
	ErrorRate float64
}

// Hedge configures request hedging; the zero value disables it.
type Hedge struct {
	// Delay after the client sent a request before a copy goes to another backend.
	Delay time.Duration
	// Max is the number of extra copies per request; 0 with a Delay means 1.
	Max int
}

// Scenario is one experiment: backends, Ballast's limits and the client's load.
type Scenario struct {
	Name    string
	Summary string
	// Source names the seed experiment this scenario models, for readers of the table.
	Source   string
	Backends []Backend
	// MaxConns is Ballast's per-backend connection limit; 0 means unlimited.
	MaxConns int
	// Concurrency and Requests are ab's -c and -n.
	Concurrency int
	Requests    int
	// Arrivals, when its Rate is set, replaces the closed-loop client by an open one:
	// Requests arrive at Rate per second whatever the responses do, and Concurrency is unused.
	Arrivals Arrivals
	// MaxQueue bounds the central backlog (requests beyond it fail at once); 0 means
	// unbounded. NoBacklog turns the backlog off: a request that finds every backend full
	// fails at once, as in Ballast without max_queue. QueueTimeout fails a request that
	// waited that long in the backlog; 0 means never.
	MaxQueue     int
	NoBacklog    bool
	QueueTimeout time.Duration
	Hedge        Hedge
	// Jitter, when set, draws the real machine's delays between client, balancer and
	// backends for every request (see Jitter); nil is the ideal machine.
	Jitter *Jitter
	// RandSeed seeds the pickers' and the service times' generators.
	RandSeed uint64
	// EWMADecay is the peak-EWMA time constant; 0 means balance.DefaultPeakEWMATau (10 s).
	EWMADecay time.Duration
	// Algorithms is the default list to run; nil means every algorithm that needs no hash key.
	Algorithms []string
	// Baseline is the seed's own method, what `ballast advise --scenario` takes as the
	// current choice; Metric is the figure the lab judges the scenario by ("throughput" or
	// "makespan"); Profile names the jitter the lab's runs of it have (Profile).
	Baseline, Metric, Profile string
}

// Arrivals is an open client: requests arrive at Rate per second, their gaps drawn from a
// gamma distribution with that mean and coefficient of variation CV (1 is a Poisson process;
// above 1 burstier, below 1 smoother; 0 means 1).
type Arrivals struct {
	Rate float64
	CV   float64
}

// Open reports whether the client is open.
func (a Arrivals) Open() bool { return a.Rate > 0 }

// maxBackends and maxRequests bound scenario size so that a hostile or mistyped scenario
// cannot exhaust memory.
const (
	maxBackends = 1 << 20
	maxRequests = 1 << 24
)

// Validate reports what makes sc unrunnable.
func (sc Scenario) Validate() error {
	if len(sc.Backends) == 0 {
		return errors.New("scenario has no backends")
	}
	if len(sc.Backends) > maxBackends {
		return fmt.Errorf("scenario has %d backends, more than %d", len(sc.Backends), maxBackends)
	}
	if sc.Concurrency < 1 && !sc.Arrivals.Open() {
		return fmt.Errorf("concurrency %d < 1", sc.Concurrency)
	}
	if a := sc.Arrivals; a.Rate < 0 || a.CV < 0 || math.IsNaN(a.Rate) || math.IsNaN(a.CV) || math.IsInf(a.Rate, 0) || a.CV > 100 {
		return fmt.Errorf("arrivals: rate %g and cv %g must be finite, >= 0, cv <= 100", a.Rate, a.CV)
	}
	if sc.MaxQueue < 0 || sc.QueueTimeout < 0 {
		return errors.New("negative max_queue or queue timeout")
	}
	if sc.Jitter != nil {
		if err := sc.Jitter.validate(); err != nil {
			return err
		}
	}
	if sc.Requests < 0 || sc.Requests > maxRequests {
		return fmt.Errorf("request count %d outside [0, %d]", sc.Requests, maxRequests)
	}
	if sc.MaxConns < 0 {
		return fmt.Errorf("negative max_conns %d", sc.MaxConns)
	}
	if sc.Hedge.Delay < 0 || sc.Hedge.Max < 0 {
		return errors.New("negative hedge delay or count")
	}
	if sc.Hedge.Max > maxHedges {
		return fmt.Errorf("hedge count %d > %d", sc.Hedge.Max, maxHedges)
	}
	if sc.EWMADecay < 0 {
		return errors.New("negative EWMA decay")
	}
	for _, b := range sc.Backends {
		if b.Workers < 0 || b.Weight < 0 {
			return fmt.Errorf("backend %q: negative workers or weight", b.ID)
		}
		if b.ErrorRate < 0 || b.ErrorRate > 1 || math.IsNaN(b.ErrorRate) {
			return fmt.Errorf("backend %q: error rate %g outside [0, 1]", b.ID, b.ErrorRate)
		}
		if err := b.Service.validate(); err != nil {
			return fmt.Errorf("backend %q: %w", b.ID, err)
		}
	}
	return nil
}

// maxHedges keeps every copy of a request inside balance.Tried's capacity (7).
const maxHedges = 6
