package balance

import (
	"errors"
	"fmt"
	"math/bits"
	"math/rand/v2"
)

// Backend is one member of a pool as a picker sees it. The slice a picker is built from is
// immutable afterwards; Pick returns indexes into it.
type Backend struct {
	// ID is the backend's stable identity (its address, or a configured name). Hash algorithms
	// place backends by ID so that every node builds the same table whatever the input order.
	ID string
	// Weight is the effective weight (already reduced by slow start, if any). 0 means no new
	// traffic; negative weights are rejected by Build.
	Weight int
	// Backup backends receive traffic only when no primary backend is usable.
	Backup bool
	// Down covers every state that forbids new picks: down, disabled, draining, ejected.
	Down bool
}

// usable reports whether b may receive new requests at all.
func (b Backend) usable() bool { return !b.Down && b.Weight > 0 }

// Load is the read-only view of live counters that a picker needs. Indexes are those of the
// backend slice the picker was built from. Implementations must be safe for concurrent use and
// cheap: pickers call them on every pick.
type Load interface {
	// InFlight is the number of requests dispatched to backend i and not yet finished.
	InFlight(i int) int64
	// Full reports whether backend i is at its connection limit (max_conns).
	Full(i int) bool
	// Latency is the backend's decayed peak-EWMA latency estimate in seconds, 0 when unknown.
	Latency(i int) float64
}

// Tracker is implemented by pickers that keep their own index by load. The owner of the
// counters calls Update with the authoritative in-flight count every time it changes (after
// dispatch and after completion), so the index heals itself if a notification was missed.
type Tracker interface {
	Update(i int, inflight int64)
}

// Picker chooses a backend for one request.
type Picker interface {
	// Pick returns the index of the chosen backend. key is the request's hash key (ignored by
	// non-hash algorithms); tried lists backends this request already used (retries, hedges),
	// which are treated as unusable. Errors are ErrNoBackend or ErrBusy.
	Pick(key uint64, tried Tried) (int, error)
}

// ErrNoBackend is returned when no backend is usable: all are down, disabled, of weight 0 or
// already tried.
var ErrNoBackend = errors.New("no usable backend")

// ErrBusy is returned when usable backends exist but every one of them is at its connection
// limit; the caller queues the request and picks again when a slot frees.
var ErrBusy = errors.New("every usable backend is at its connection limit")

// maxTried bounds how many backends a request can exclude; it bounds retries and hedges too.
const maxTried = 7

// Tried is the small, allocation-free set of backends a request has already used.
type Tried struct {
	n   uint8
	idx [maxTried]int32
}

// Has reports whether backend i is in the set.
func (t *Tried) Has(i int) bool {
	for k := 0; k < int(t.n); k++ {
		if int(t.idx[k]) == i {
			return true
		}
	}
	return false
}

// Add puts backend i in the set; it reports false when the set is full.
func (t *Tried) Add(i int) bool {
	if t.Has(i) {
		return true
	}
	if int(t.n) == maxTried {
		return false
	}
	t.idx[t.n] = int32(i)
	t.n++
	return true
}

// Len is the number of backends in the set.
func (t *Tried) Len() int { return int(t.n) }

// Rand is the source of randomness a picker uses. The default is math/rand/v2's global
// generator, which is safe for concurrent use; tests pass a seeded one.
type Rand interface {
	Uint64() uint64
}

type globalRand struct{}

func (globalRand) Uint64() uint64 { return rand.Uint64() }

// intn maps a random 64-bit number onto [0, n) without division (Lemire's multiply-shift).
func intn(r Rand, n int) int {
	hi, _ := bits.Mul64(r.Uint64(), uint64(n))
	return int(hi)
}

// Options configures a picker. The zero value is valid for every algorithm except that
// load-aware algorithms need Load.
type Options struct {
	// Load is the live-counter view; required by algorithms whose Caps say NeedsLoad.
	Load Load
	// Rand is the random source; nil means math/rand/v2's global generator.
	Rand Rand
	// MaxInit is vnswrr's build batch: 0 means the number of backends; larger than the sum
	// of weights means the sum of weights.
	MaxInit int
	// TableSize is maglev's lookup-table size, a prime; 0 means 65537.
	TableSize int
	// BalanceFactor is ringhash's bound on load: a backend may carry at most
	// ceil(factor × (total in-flight + 1) × weight / Σweight) requests, counting the one being
	// placed (HAProxy's hash-balance-factor / 100); 0 means unbounded (plain consistent hashing).
	BalanceFactor float64
}

func (o Options) rand() Rand {
	if o.Rand == nil {
		return globalRand{}
	}
	return o.Rand
}

// noLoad is the Load used when none is given: nothing in flight, nothing full.
type noLoad struct{}

func (noLoad) InFlight(int) int64  { return 0 }
func (noLoad) Full(int) bool       { return false }
func (noLoad) Latency(int) float64 { return 0 }

func (o Options) load() Load {
	if o.Load == nil {
		return noLoad{}
	}
	return o.Load
}

// ConfigError reports a backend list or option that no picker can be built from.
type ConfigError struct {
	Algorithm string
	Reason    string
}

func (e *ConfigError) Error() string { return fmt.Sprintf("balance %s: %s", e.Algorithm, e.Reason) }
