package backend

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// DefaultBody is the default body size: seed 000's backends served a 44-byte index.html.
const DefaultBody = 44

// Distributions accepted in Config.Dist.
const (
	DistFixed     = "fixed"
	DistExp       = "exp"
	DistLognormal = "lognormal"
)

// Config describes one emulated backend.
type Config struct {
	// Name is sent in X-Ballast-Backend and X-Backend-Name; ListenPorts appends "-PORT".
	Name string
	// Workers is K, the number of requests in service at once (default 1).
	Workers int
	// Service is the fixed service time, or the mean of the distribution.
	Service time.Duration
	// Dist is "fixed" (default), "exp" or "lognormal".
	Dist string
	// Sigma is the lognormal shape parameter (default 1); the mean stays Service.
	Sigma float64
	// Body is the response body size in bytes; 0 means DefaultBody, negative means empty.
	Body int
	// ErrorRate is the fraction of requests answered 500 after their service; which ones is
	// fixed by Seed and the request's number (see Fails).
	ErrorRate float64
	// ResetRate is the fraction of requests answered by resetting the connection at once.
	ResetRate float64
	// Seed seeds the random source of distributions, errors and resets (0 picks 1).
	Seed uint64
	// Spin makes a request spin (yielding) through the last millisecond before its deadline
	// instead of sleeping, for faithful sub-millisecond latencies at the cost of CPU. Capacity
	// is exact without it.
	Spin bool
}

// withDefaults validates c and fills its defaults.
func (c Config) withDefaults() (Config, error) {
	if c.Name == "" {
		c.Name = "backend"
	}
	if c.Workers <= 0 {
		c.Workers = 1
	}
	if c.Service < 0 {
		return c, errors.New("backend: negative service time")
	}
	switch c.Dist {
	case "":
		c.Dist = DistFixed
	case DistFixed, DistExp, DistLognormal:
	default:
		return c, fmt.Errorf("backend: unknown distribution %q (want fixed, exp or lognormal)", c.Dist)
	}
	if c.Sigma <= 0 {
		c.Sigma = 1
	}
	if c.Body == 0 {
		c.Body = DefaultBody
	}
	if c.Body < 0 {
		c.Body = 0
	}
	if c.ErrorRate < 0 || c.ErrorRate > 1 || c.ResetRate < 0 || c.ResetRate > 1 {
		return c, errors.New("backend: error and reset rates must be within [0, 1]")
	}
	if c.Seed == 0 {
		c.Seed = 1
	}
	return c, nil
}

// sampler draws service times; it is not safe for concurrent use.
type sampler struct {
	rng   *rand.Rand
	dist  string
	mean  float64 // nanoseconds
	mu    float64 // lognormal location
	sigma float64
}

func newSampler(c Config) *sampler {
	s := &sampler{
		rng:   rand.New(rand.NewPCG(c.Seed, c.Seed^0x9e3779b97f4a7c15)),
		dist:  c.Dist,
		mean:  float64(c.Service),
		sigma: c.Sigma,
	}
	if s.mean > 0 {
		// E[lognormal] = exp(mu + sigma²/2) = mean.
		s.mu = math.Log(s.mean) - s.sigma*s.sigma/2
	}
	return s
}

// draw returns one service time.
func (s *sampler) draw() time.Duration {
	if s.mean <= 0 {
		return 0
	}
	switch s.dist {
	case DistExp:
		return time.Duration(s.rng.ExpFloat64() * s.mean)
	case DistLognormal:
		return time.Duration(math.Exp(s.mu + s.sigma*s.rng.NormFloat64()))
	}
	return time.Duration(s.mean)
}

// ParsePorts parses a port range "A-B" (or a single port "A") into its bounds.
func ParsePorts(s string) (from, to int, err error) {
	a, b, found := strings.Cut(s, "-")
	if !found {
		b = a
	}
	from, err1 := strconv.Atoi(strings.TrimSpace(a))
	to, err2 := strconv.Atoi(strings.TrimSpace(b))
	if err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("backend: bad port range %q (want A-B)", s)
	}
	if from < 1 || to > 65535 || from > to {
		return 0, 0, fmt.Errorf("backend: port range %q out of order or outside 1-65535", s)
	}
	return from, to, nil
}
