package upstream

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"ballast/balance"
)

// Errors Acquire returns; the proxy maps them to responses.
var (
	// ErrNoBackend: nothing in the pool is usable (all down, disabled, draining, ejected). → 503
	ErrNoBackend = balance.ErrNoBackend
	// ErrQueueFull: every usable backend is at max_conns and the backlog queue is full (or
	// max_queue is 0). → 503 with Retry-After
	ErrQueueFull = errors.New("backlog queue full")
	// ErrQueueTimeout: the request waited queue_timeout in the backlog without a free slot. → 503
	ErrQueueTimeout = errors.New("timed out in the backlog queue")
	// ErrBusy: TryAcquire found every usable backend at max_conns, or requests already waiting.
	ErrBusy = balance.ErrBusy
)

// maxRaces bounds how often Acquire picks again after losing the last slot of a backend to a
// concurrent request before it treats the pool as busy.
const maxRaces = 8

// Pool is a named set of backends balanced by one algorithm. The request path reads one
// immutable snapshot through an atomic pointer and never takes a pool-wide lock, except the
// queue's mutex when a request must wait.
type Pool struct {
	Name string

	algo            balance.Algorithm
	opts            balance.Options
	maxConnsDefault int64 // the pool's max_conns, for backends added at run time
	maxQueue        int
	queueTimeout    time.Duration
	slowStart       time.Duration
	panicPercent    int              // outlier.panic_threshold_percent; 0 = never panic
	now             func() time.Time // injected by tests
	// newTimer starts the queue_timeout timer; tests inject one they fire themselves.
	newTimer func(time.Duration) (<-chan time.Time, func() bool)
	// onQueue, when set by a test, runs after a request has entered the backlog.
	onQueue func()
	// onRelease is Spec.OnRelease: it hears every Release.
	onRelease ReleaseObserver

	snap atomic.Pointer[snapshot]
	qlen atomic.Int64 // waiters in the backlog; read without the lock on the fast path
	// pred is the pool this one replaced in a reload, while its backlog may still hold requests
	// waiting for slots of backends the two pools share: Release here must wake them too.
	pred     atomic.Pointer[Pool]
	isClosed atomic.Bool

	// mu serialises writers (runtime changes, slow-start steps, Close); readers never take it.
	mu       sync.Mutex
	backends []*Backend
	timer    *time.Timer
	armed    bool // the timer is set for a ramp step or an ejection end
	closed   bool
	prev     *Pool
	restore  []restore
	attach   map[Slot]func(*Backend) any // per-plane attachments for backends Add creates
	subs     map[int]func(*Pool)
	nextSub  int

	// qmu guards the backlog list.
	qmu          sync.Mutex
	qhead, qtail *waiter
	qn           int
	// stats is shared with the pool of the same name this one replaced, so that a reload
	// carries the backlog counters over as it carries the backends' (and the old pool's
	// last waiters still count in them).
	stats *queueCounters
}

// restore remembers a reused backend's previous configuration so that closing a pool that was
// built but never installed hands the backend back to its predecessor unchanged.
type restore struct {
	b     *Backend
	conf  *bconf
	index int32
}

// Spec describes a pool: everything upstream needs, in its own terms (config builds it from a
// file, the admin API from a request). Durations of 0 turn their feature off.
type Spec struct {
	Name     string
	Balancer string // an algorithm name registered in balance
	// MaxConns is the default per-backend limit of requests in flight; 0 = none.
	MaxConns int
	// MaxQueue bounds the backlog; QueueTimeout bounds a wait in it (0 = no limit).
	MaxQueue     int
	QueueTimeout time.Duration
	SlowStart    time.Duration
	// PanicPercent is outlier.panic_threshold_percent; 0 = never panic.
	PanicPercent int
	// MaxInit, TableSize and BalanceFactor are passed to the algorithm (balance.Options).
	MaxInit       int
	TableSize     int
	BalanceFactor float64
	Backends      []BackendSpec
	// OnRelease, when set, hears every Release of the pool (the metrics' latency histograms).
	OnRelease ReleaseObserver
}

// BackendSpec describes one backend.
type BackendSpec struct {
	// ID is the stable identity across reloads (config: the name, else the address).
	ID string
	// Address is host:port; a host name is resolved by whoever dials it.
	Address  string
	Weight   int
	Backup   bool
	Down     bool // configured down
	MaxConns int  // 0 = the pool's
}

// NewPool builds a pool from its spec. Backends of prev (may be nil) whose ID appears again
// are reused with their counters and attachments, so a reload keeps them; when prev has the
// same name, its backlog counters (QueueStats) carry on in the new pool too.
//
// Runtime state of a reused backend (weight override, disabled, draining, health, ejection,
// slow start) survives the reload; a backend with the same ID but a new address is a new
// backend. Backends that are new in a reload, or that the configuration brings back up, ramp
// through slow start. A pool that is built but not installed must be Closed: that hands the
// reused backends back to prev. Installing the new pool and closing prev completes a reload.
func NewPool(spec Spec, prev *Pool) (*Pool, error) {
	return newPool(spec, prev, time.Now)
}

func newPool(cfg Spec, prev *Pool, now func() time.Time) (*Pool, error) {
	algo, err := balance.Lookup(cfg.Balancer)
	if err != nil {
		return nil, fmt.Errorf("pool %q: %w", cfg.Name, err)
	}
	p := &Pool{
		Name: cfg.Name,
		algo: algo,
		opts: balance.Options{
			MaxInit:       cfg.MaxInit,
			TableSize:     cfg.TableSize,
			BalanceFactor: cfg.BalanceFactor,
		},
		maxConnsDefault: int64(cfg.MaxConns),
		maxQueue:        cfg.MaxQueue,
		queueTimeout:    cfg.QueueTimeout,
		slowStart:       cfg.SlowStart,
		panicPercent:    cfg.PanicPercent,
		onRelease:       cfg.OnRelease,
		now:             now,
		newTimer:        realTimer,
		prev:            prev,
		stats:           new(queueCounters),
	}
	if prev != nil && prev.Name == cfg.Name {
		p.stats = prev.stats
	}
	old := map[string]*Backend{}
	if prev != nil {
		for _, b := range prev.Backends() {
			old[b.ID] = b
		}
	}
	t := now().UnixNano()
	bs := make([]*Backend, 0, len(cfg.Backends))
	cs := make([]*bconf, 0, len(cfg.Backends))
	seen := make(map[string]bool, len(cfg.Backends))
	var ramped []*Backend // reused backends whose ramp this build starts, undone on failure
	for _, bc := range cfg.Backends {
		id := bc.ID
		if id == "" {
			return nil, fmt.Errorf("pool %q: backend %q has no ID", cfg.Name, bc.Address)
		}
		if seen[id] {
			return nil, fmt.Errorf("pool %q: backend %q appears twice", cfg.Name, id)
		}
		seen[id] = true
		if bc.Weight < 0 {
			return nil, fmt.Errorf("pool %q: backend %q has negative weight %d", cfg.Name, id, bc.Weight)
		}
		c := confFor(bc, cfg.MaxConns)
		b := old[id]
		switch {
		case b == nil || b.Address != bc.Address:
			b = newBackend(id, bc.Address, c)
			if prev != nil && p.slowStart > 0 {
				b.rampFrom.Store(t)
			}
		default:
			oc := b.conf.Load()
			p.restore = append(p.restore, restore{b, oc, b.index.Load()})
			if p.slowStart > 0 && !b.usable(oc, t) && b.usable(c, t) && b.rampFrom.Load() == 0 {
				b.rampFrom.Store(t)
				ramped = append(ramped, b)
			}
		}
		bs = append(bs, b)
		cs = append(cs, c)
	}
	s, next, err := p.build(bs, cs, t)
	if err != nil {
		for _, b := range ramped {
			b.rampFrom.Store(0)
		}
		return nil, fmt.Errorf("pool %q: %w", cfg.Name, err)
	}
	if prev != nil {
		p.pred.Store(prev)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.backends = bs
	p.snap.Store(s) // before the owners change: Release reads the owner's snapshot
	for i, b := range bs {
		b.conf.Store(cs[i])
		b.owner.Store(p)
		b.index.Store(int32(i))
	}
	p.scheduleLocked(next, t)
	return p, nil
}

func confFor(bc BackendSpec, poolMaxConns int) *bconf {
	mc := bc.MaxConns
	if mc <= 0 {
		mc = poolMaxConns
	}
	return &bconf{weight: int64(bc.Weight), backup: bc.Backup, down: bc.Down, maxConns: int64(max(mc, 0))}
}

// Acquire picks a backend for one request and counts it in flight. key is the hash key;
// tried lists backends this request already used. When every usable backend is at its limit it
// waits in the pool's FIFO backlog (bounded by max_queue and queue_timeout) and is dispatched the
// moment a slot frees, running the balancer again. The caller must call Release exactly once.
func (p *Pool) Acquire(key uint64, tried balance.Tried) (*Backend, error) {
	b, err := p.acquire(key, tried)
	if err == ErrNoBackend {
		p.stats.noBackend.Add(1)
	}
	return b, err
}

func (p *Pool) acquire(key uint64, tried balance.Tried) (*Backend, error) {
	// Requests already waiting go first: a newcomer joins the queue rather than barge.
	if p.qlen.Load() == 0 {
		b, err := p.try(key, &tried)
		if err != balance.ErrBusy {
			return b, err
		}
	}
	return p.wait(key, tried)
}

// TryAcquire is Acquire without the backlog: when every usable backend is at its limit, or
// requests are already waiting, it returns ErrBusy at once. Hedged copies use it: a hedge that
// would have to wait is not worth sending.
func (p *Pool) TryAcquire(key uint64, tried balance.Tried) (*Backend, error) {
	if p.qlen.Load() != 0 {
		return nil, ErrBusy
	}
	return p.try(key, &tried)
}

// try picks and reserves a slot; it returns ErrBusy when every candidate is full.
func (p *Pool) try(key uint64, tried *balance.Tried) (*Backend, error) {
	s := p.snap.Load()
	for range maxRaces {
		i, err := s.picker.Pick(key, *tried)
		if err != nil {
			return nil, err
		}
		b := s.backends[i]
		if !b.reserve(s.limit[i]) {
			continue // another request took the last slot; the picker now sees it Full
		}
		b.requests.Add(1)
		if s.tracker != nil {
			s.tracker.Update(i, b.inflight.Load())
		}
		if cur := p.snap.Load(); cur != s {
			cur.track(b) // swapped while we picked: tell the picker in force too
		}
		return b, nil
	}
	return nil, balance.ErrBusy
}

// Release ends a request on b: it decrements in-flight, records the latency (feeding ewma) and
// the outcome (feeding outlier detection), and hands the freed slot to the head of the queue.
func (p *Pool) Release(b *Backend, latency time.Duration, failed bool) {
	b.inflight.Add(-1)
	b.observe(p.now(), latency, failed)
	if p.onRelease != nil {
		p.onRelease(p, b, latency, failed)
	}
	p.snap.Load().track(b)
	p.kick()
	// After a reload the request may have been acquired from the old pool: the pool that
	// lists the backend now must hear of the freed slot as well.
	if o := b.owner.Load(); o != nil && o != p {
		o.snap.Load().track(b)
		o.kick()
	}
	// And requests still waiting in the old pool's backlog compete for the slot.
	if pr := p.pred.Load(); pr != nil {
		if pr.qlen.Load() > 0 {
			pr.kick()
		} else if pr.isClosed.Load() {
			p.pred.CompareAndSwap(pr, nil)
		}
	}
}

// track tells the snapshot's picker, if it keeps a load index, b's in-flight count.
func (s *snapshot) track(b *Backend) {
	if s.tracker == nil {
		return
	}
	if i := s.indexOf(b); i >= 0 {
		s.tracker.Update(i, b.inflight.Load())
	}
}

// Backends returns the pool's backends (every state), in configuration order.
func (p *Pool) Backends() []*Backend {
	bs := p.snap.Load().backends
	return append([]*Backend(nil), bs...)
}

// Backend returns the backend with the given ID, or nil.
func (p *Pool) Backend(id string) *Backend {
	for _, b := range p.snap.Load().backends {
		if b.ID == id {
			return b
		}
	}
	return nil
}

// InFlight is the number of requests in flight on all the pool's backends.
func (p *Pool) InFlight() int64 {
	var n int64
	for _, b := range p.snap.Load().backends {
		n += b.inflight.Load()
	}
	return n
}

// Balancer is the name of the pool's algorithm.
func (p *Pool) Balancer() string { return p.algo.Name }

// MaxQueue is the backlog bound; 0 means requests that find every backend full get 503 at once.
func (p *Pool) MaxQueue() int { return p.maxQueue }

// QueueTimeout is the longest a request waits in the backlog; 0 means no limit.
func (p *Pool) QueueTimeout() time.Duration { return p.queueTimeout }

// SlowStart is the slow-start window; 0 means off.
func (p *Pool) SlowStart() time.Duration { return p.slowStart }

// Attach gives every backend of the pool an attachment in slot s: f runs now on each backend
// whose slot is empty (a backend reused by a reload keeps its attachment), and later on each
// backend Add creates, before it can be picked. A data plane calls it before the pool serves its
// requests; each plane uses its own slot, so planes never overwrite each other's state.
func (p *Pool) Attach(s Slot, f func(*Backend) any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.attach == nil {
		p.attach = map[Slot]func(*Backend) any{}
	}
	p.attach[s] = f
	for _, b := range p.backends {
		if b.Attachment(s) == nil {
			b.setAttachment(s, f(b))
		}
	}
}

// Subscribe calls f after every new snapshot of the pool (a runtime change, a health
// verdict, an ejection, a slow-start step), so that a data plane that keeps its own copy of the
// backend set, such as a kernel map, can follow it. f runs under the pool's writer mutex: it
// must be quick and must not change the pool. The returned function unsubscribes. A reload
// builds new pools: a plane subscribes to them again when it is given them (its Swap).
func (p *Pool) Subscribe(f func(*Pool)) (cancel func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.subs == nil {
		p.subs = map[int]func(*Pool){}
	}
	id := p.nextSub
	p.nextSub++
	p.subs[id] = f
	return func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		delete(p.subs, id)
	}
}

// Close stops the pool's timers (slow-start ramps). In-flight requests are unaffected.
// Closing a pool that NewPool built but that was never installed gives the backends it reused
// back to its predecessor, with their previous configuration.
func (p *Pool) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.closed = true
	p.isClosed.Store(true)
	if p.timer != nil {
		p.timer.Stop()
	}
	p.armed = false
	if prev := p.prev; prev != nil {
		for _, r := range p.restore {
			if r.b.owner.CompareAndSwap(p, prev) {
				r.b.conf.Store(r.conf)
				r.b.index.Store(r.index)
			}
		}
	}
	p.prev, p.restore = nil, nil
}
