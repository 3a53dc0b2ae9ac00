package upstream

import (
	"net/netip"
	"sync/atomic"
	"time"

	"ballast/balance"
)

// State is what a backend is doing now, for the status page, the API and the metrics. When
// several conditions hold, the first in this order wins: disabled, draining, down, ejected,
// slow-start, up.
type State uint8

const (
	// StateUp: takes traffic at its full weight.
	StateUp State = iota
	// StateSlowStart: takes traffic at a weight that is still ramping up.
	StateSlowStart
	// StateDraining: no new requests; the ones in flight finish (runtime Drain).
	StateDraining
	// StateDisabled: no new requests (runtime Disable).
	StateDisabled
	// StateDown: configured down, or failing its active health check.
	StateDown
	// StateEjected: removed for a while by passive health (outlier detection).
	StateEjected
)

var stateNames = [...]string{"up", "slow-start", "draining", "disabled", "down", "ejected"}

// String is the lower-case name used in the API and the metrics.
func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "unknown"
}

// MarshalText makes State appear by name in JSON.
func (s State) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// bconf is what the configuration says about one backend. It is immutable and replaced as a
// whole on reload, so a pool that is built but not installed can put the old one back.
type bconf struct {
	weight   int64
	backup   bool
	down     bool
	maxConns int64 // effective: the backend's own, else the pool's; 0 = unlimited
}

// origin is the zero of the monotonic durations the latency estimates are kept in.
var origin = time.Now()

// Slot names one data plane's per-backend attachment (Pool.Attach, Backend.Attachment). Each
// plane takes one with NewSlot when its package initialises.
type Slot uint8

// maxSlots bounds the data planes that attach state to backends (HTTP, TCP, UDP, XDP...).
const maxSlots = 8

var nextSlot atomic.Uint32

// NewSlot reserves an attachment slot. It panics past maxSlots: slots are taken once per data
// plane package, at init, so running out is a programming error.
func NewSlot() Slot {
	n := nextSlot.Add(1) - 1
	if n >= maxSlots {
		panic("upstream: more than 8 attachment slots")
	}
	return Slot(n)
}

// Backend is one server of a pool with its live counters. A Backend keeps its identity (ID)
// across reloads and runtime changes, and with it its counters and its attachments.
type Backend struct {
	// ID is the stable identity: the configured name, or the address.
	ID string
	// Address is host:port.
	Address string
	// addrPort is Address parsed, when its host is an IP literal (zero for a host name).
	addrPort netip.AddrPort

	// attach holds each data plane's per-backend state (a connection pool, counters), set
	// once by Pool.Attach or Add before the backend can be picked; it survives reloads.
	attach [maxSlots]atomic.Value

	conf atomic.Pointer[bconf]

	// Runtime state, written under the owning pool's writer mutex, read anywhere.
	weightOverride atomic.Int64 // -1 = none
	disabled       atomic.Bool
	draining       atomic.Bool
	drainUntil     atomic.Int64 // unix nanoseconds when a drain's grace ends (DrainFor); 0 = none
	healthDown     atomic.Bool
	ejectedUntil   atomic.Int64 // unix nanoseconds; 0 = not ejected
	rampFrom       atomic.Int64 // unix nanoseconds when it became usable; 0 = not ramping

	// Live counters, written on the request path.
	inflight atomic.Int64
	requests atomic.Uint64
	failures atomic.Uint64
	// streak counts the failures since the last success, response by response, and peak the
	// longest streak since outlier detection last took it, so that a streak reached between
	// two of its samples is not lost to the success that ended it.
	streak  atomic.Uint64
	peak    atomic.Uint64
	latency balance.PeakEWMA

	// owner is the pool whose snapshot lists this backend at index; Release routes Tracker
	// updates there even when the request was acquired from a pool replaced by a reload.
	owner atomic.Pointer[Pool]
	index atomic.Int32
}

func newBackend(id, address string, c *bconf) *Backend {
	b := &Backend{ID: id, Address: address}
	b.addrPort, _ = netip.ParseAddrPort(address)
	b.conf.Store(c)
	b.weightOverride.Store(-1)
	b.index.Store(-1)
	return b
}

// clock is the owner's clock (tests inject one), or the wall clock for a detached backend.
func (b *Backend) clock() time.Time {
	if p := b.owner.Load(); p != nil {
		return p.now()
	}
	return time.Now()
}

// InFlight is the number of requests dispatched to the backend and not yet released.
func (b *Backend) InFlight() int64 { return b.inflight.Load() }

// Requests is the number of requests dispatched to the backend since it was created.
func (b *Backend) Requests() uint64 { return b.requests.Load() }

// Failures is the number of requests released as failed.
func (b *Backend) Failures() uint64 { return b.failures.Load() }

// FailureStreak is the number of requests released as failed since the last success.
func (b *Backend) FailureStreak() uint64 { return b.streak.Load() }

// TakeFailureStreakPeak returns the longest failure streak reached since the previous call
// (or since ResetFailureStreak) and starts the next period; outlier detection calls it once
// per sample. A streak still running is counted again by its next failure.
func (b *Backend) TakeFailureStreakPeak() uint64 { return b.peak.Swap(0) }

// ResetFailureStreak forgets the current streak, as an ejection does: a backend back from one
// starts counting afresh.
func (b *Backend) ResetFailureStreak() {
	b.streak.Store(0)
	b.peak.Store(0)
}

// AddrPort is the backend's address as an IP and port; ok is false when the address names a
// host rather than an IP (a plane that needs an IP, such as a kernel director, must resolve it).
func (b *Backend) AddrPort() (ap netip.AddrPort, ok bool) { return b.addrPort, b.addrPort.IsValid() }

// Attachment is the value a data plane attached in slot s, or nil.
func (b *Backend) Attachment(s Slot) any { return b.attach[s].Load() }

// SetAttachment sets the value of slot s, for state made when the backend is first seen
// (an observer's record) rather than by Pool.Attach; v must be non-nil and of the type every
// value of the slot has. Safe for concurrent use: the last store wins.
func (b *Backend) SetAttachment(s Slot, v any) { b.setAttachment(s, v) }

func (b *Backend) setAttachment(s Slot, v any) {
	if v != nil {
		b.attach[s].Store(v)
	}
}

// ConfigWeight is the weight the configuration gives.
func (b *Backend) ConfigWeight() int { return int(b.conf.Load().weight) }

// Weight is the weight in force: the runtime override if one is set, else the configured one.
func (b *Backend) Weight() int {
	if w := b.weightOverride.Load(); w >= 0 {
		return int(w)
	}
	return int(b.conf.Load().weight)
}

// WeightOverridden reports whether SetWeight replaced the configured weight.
func (b *Backend) WeightOverridden() bool { return b.weightOverride.Load() >= 0 }

// EffectiveWeight is Weight reduced by slow start, the share the balancer uses now (to a tenth).
func (b *Backend) EffectiveWeight() float64 {
	w := b.Weight()
	p := b.owner.Load()
	if p == nil {
		return float64(w)
	}
	return float64(p.rampedWeight(b, w*rampScale, p.now().UnixNano())) / rampScale
}

// Backup reports whether the backend only takes traffic when no primary is usable.
func (b *Backend) Backup() bool { return b.conf.Load().backup }

// MaxConns is the backend's connection limit (its own, else the pool's); 0 = unlimited.
func (b *Backend) MaxConns() int { return int(b.conf.Load().maxConns) }

// Healthy reports whether the active health check last found the backend up.
func (b *Backend) Healthy() bool { return !b.healthDown.Load() }

// EjectedUntil is when an outlier ejection ends; the zero time when the backend is not ejected.
func (b *Backend) EjectedUntil() time.Time {
	if u := b.ejectedUntil.Load(); u != 0 {
		return time.Unix(0, u)
	}
	return time.Time{}
}

// LatencyEWMA is the decayed peak-EWMA of response times, 0 before the first response.
func (b *Backend) LatencyEWMA() time.Duration {
	return time.Duration(b.latency.Value(b.clock().Sub(origin)) * float64(time.Second))
}

// Index is the backend's position in its pool's list, the number to add to a balance.Tried so
// that a retry avoids it; -1 once it has been removed.
func (b *Backend) Index() int { return int(b.index.Load()) }

// State is the backend's current state (see State for the precedence).
func (b *Backend) State() State {
	switch {
	case b.disabled.Load():
		return StateDisabled
	case b.draining.Load():
		return StateDraining
	case b.conf.Load().down || b.healthDown.Load():
		return StateDown
	}
	now := b.clock().UnixNano()
	if u := b.ejectedUntil.Load(); u != 0 && now < u {
		return StateEjected
	}
	if p := b.owner.Load(); p != nil && b.rampFrom.Load() != 0 {
		if w := b.Weight() * rampScale; w > 0 && p.rampedWeight(b, w, now) < w {
			return StateSlowStart
		}
	}
	return StateUp
}

// usable reports whether the backend may take new requests at now, given its configuration c.
func (b *Backend) usable(c *bconf, now int64) bool {
	return b.inRotation(c) && b.fit(now)
}

// inRotation reports whether the configuration and the operator let b take traffic: not
// configured down, disabled or draining, and a weight above 0.
func (b *Backend) inRotation(c *bconf) bool {
	if c.down || b.disabled.Load() || b.draining.Load() {
		return false
	}
	w := b.weightOverride.Load()
	if w < 0 {
		w = c.weight
	}
	return w > 0
}

// fit reports whether health lets b take traffic: not marked down by active checks and not
// ejected by outlier detection.
func (b *Backend) fit(now int64) bool {
	if b.healthDown.Load() {
		return false
	}
	u := b.ejectedUntil.Load()
	return u == 0 || now >= u
}

// reserve counts one more request in flight unless that would exceed limit (0 = none). It is
// a CAS loop, so two requests can never both take the last slot.
func (b *Backend) reserve(limit int64) bool {
	if limit <= 0 {
		b.inflight.Add(1)
		return true
	}
	for {
		n := b.inflight.Load()
		if n >= limit {
			return false
		}
		if b.inflight.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// observe records one finished request. A failure never makes the backend look faster than
// its estimate: a backend refusing connections at once must not attract the ewma balancer.
func (b *Backend) observe(now time.Time, latency time.Duration, failed bool) {
	at := now.Sub(origin)
	if failed {
		b.failures.Add(1)
		n := b.streak.Add(1)
		for p := b.peak.Load(); n > p && !b.peak.CompareAndSwap(p, n); p = b.peak.Load() {
		}
		if cur := time.Duration(b.latency.Value(at) * float64(time.Second)); latency < cur {
			latency = cur
		}
	}
	b.latency.Observe(latency, at)
	if !failed && b.streak.Load() != 0 { // a load first: no shared write per success
		b.streak.Store(0)
	}
}
