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
)

// Service is a backend's service-time model; draws come from the run's seeded generator so
// that a run is reproducible.
type Service struct {
	Kind  ServiceKind
	Time  time.Duration   // fixed time, mean (exponential) or median (log-normal)
	Sigma float64         // log-normal shape
	List  []time.Duration // per-request times, indexed by request index mod len
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
	Hedge       Hedge
	// RandSeed seeds the pickers' and the service times' generators.
	RandSeed uint64
	// EWMADecay is the peak-EWMA time constant; 0 means balance.DefaultPeakEWMATau (10 s).
	EWMADecay time.Duration
	// Algorithms is the default list to run; nil means every algorithm that needs no hash key.
	Algorithms []string
}

// maxBackends bounds scenario size so that a hostile or mistyped scenario cannot exhaust memory.
const maxBackends = 1 << 20

// Validate reports what makes sc unrunnable.
func (sc Scenario) Validate() error {
	if len(sc.Backends) == 0 {
		return errors.New("scenario has no backends")
	}
	if len(sc.Backends) > maxBackends {
		return fmt.Errorf("scenario has %d backends, more than %d", len(sc.Backends), maxBackends)
	}
	if sc.Concurrency < 1 {
		return fmt.Errorf("concurrency %d < 1", sc.Concurrency)
	}
	if sc.Requests < 0 {
		return fmt.Errorf("negative request count %d", sc.Requests)
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
		if err := b.Service.validate(); err != nil {
			return fmt.Errorf("backend %q: %w", b.ID, err)
		}
	}
	return nil
}

// maxHedges keeps every copy of a request inside balance.Tried's capacity (7).
const maxHedges = 6
