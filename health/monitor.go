package health

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"ballast/config"
	"ballast/upstream"
)

// EventKind names a health transition.
type EventKind string

// The transitions a Monitor reports.
const (
	// Down: the active check failed fall times in a row.
	Down EventKind = "down"
	// Up: the active check passed rise times in a row.
	Up EventKind = "up"
	// Ejected: outlier detection took the backend out for a while.
	Ejected EventKind = "ejected"
	// EjectionRefused: an ejection was due but max_ejection_percent or the panic threshold
	// kept the backend in.
	EjectionRefused EventKind = "ejection_refused"
)

// Event is one transition, for logs and metrics.
type Event struct {
	Pool    string
	Backend string
	Kind    EventKind
	Detail  string
	Until   time.Time // end of an ejection
}

// Result is the outcome of one active probe.
type Result struct {
	At     time.Time     `json:"at"`
	OK     bool          `json:"ok"`
	Detail string        `json:"detail"`
	Took   time.Duration `json:"took_ns"`
}

// Options tune a Monitor; the zero value is usable.
type Options struct {
	// Logger receives transitions; nil means slog.Default().
	Logger *slog.Logger
	// OnEvent, when set, is called for every transition (from the monitor's goroutines).
	OnEvent func(Event)
	// OnProbe, when set, is called after every active probe.
	OnProbe func(pool, backend string, r Result)
	// OutlierTick is how often outlier detection acts on the failure streaks the requests
	// recorded, and checks whether a failure_percentage interval ended (default 100ms).
	OutlierTick time.Duration
	// Now is the clock (tests inject one); nil means time.Now.
	Now func() time.Time
}

// Monitor runs the active and passive checks of every pool it was given.
type Monitor struct {
	opts Options
	log  *slog.Logger
	ctx  context.Context
	stop context.CancelFunc

	mu    sync.Mutex
	runs  map[string]*poolRun
	wg    sync.WaitGroup
	state sync.Map // key{pool, backend} -> *backendRecord
}

type key struct{ pool, backend string }

// backendRecord is what the status page reads about one backend.
type backendRecord struct {
	last      atomic.Pointer[Result]
	ejections atomic.Uint64
	probeFail atomic.Uint64
}

// poolRun is the goroutines watching one pool, and the configuration they were started with.
type poolRun struct {
	name   string
	pool   atomic.Pointer[upstream.Pool]
	hc     config.HealthCheck
	via    grpcVia // how a grpc check reaches the backends
	out    config.Outlier
	cancel context.CancelFunc
	kick   chan struct{}
}

// New returns a Monitor bound to ctx; nothing runs until Update.
func New(ctx context.Context, opts Options) *Monitor {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.OutlierTick <= 0 {
		opts.OutlierTick = 100 * time.Millisecond
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	c, cancel := context.WithCancel(ctx)
	return &Monitor{opts: opts, log: opts.Logger, ctx: c, stop: cancel, runs: map[string]*poolRun{}}
}

// Update makes the monitor watch exactly these pools with these settings (matched by pool
// name). A pool whose health_check and outlier settings did not change keeps its goroutines
// and their counters; only the pool they act on is swapped (a reload builds new Pools).
func (m *Monitor) Update(pools map[string]*upstream.Pool, cfgs []config.Pool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ctx.Err() != nil {
		return
	}
	seen := map[string]bool{}
	for _, pc := range cfgs {
		p := pools[pc.Name]
		if p == nil {
			continue
		}
		seen[pc.Name] = true
		if r := m.runs[pc.Name]; r != nil {
			if r.hc == pc.Health && r.out == pc.Outlier && r.via == viaOf(pc) {
				r.pool.Store(p)
				r.wake()
				continue
			}
			r.cancel()
			delete(m.runs, pc.Name)
		}
		if pc.Health.Interval.Duration <= 0 && !outlierOn(pc.Outlier) {
			continue
		}
		ctx, cancel := context.WithCancel(m.ctx)
		r := &poolRun{name: pc.Name, hc: pc.Health, via: viaOf(pc), out: pc.Outlier, cancel: cancel, kick: make(chan struct{}, 1)}
		r.pool.Store(p)
		m.runs[pc.Name] = r
		if pc.Health.Interval.Duration > 0 {
			a, err := newActive(m, r)
			if err != nil {
				m.log.Error("health check not started", "pool", pc.Name, "error", err)
			} else {
				m.wg.Add(1)
				go func() { defer m.wg.Done(); a.run(ctx) }()
			}
		}
		if outlierOn(pc.Outlier) {
			o := newOutlier(m, r)
			m.wg.Add(1)
			go func() { defer m.wg.Done(); o.run(ctx) }()
		}
	}
	for name, r := range m.runs {
		if !seen[name] {
			r.cancel()
			delete(m.runs, name)
		}
	}
}

// outlierOn reports whether the pool has any outlier detection to run.
func outlierOn(o config.Outlier) bool {
	return o.ConsecutiveFailures > 0 || o.FailurePercentage.Threshold > 0
}

// Kick wakes every scheduler now, so that backends added at run time are probed at once.
func (m *Monitor) Kick() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range m.runs {
		r.wake()
	}
}

func (r *poolRun) wake() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// Close stops every goroutine and waits for them.
func (m *Monitor) Close() {
	m.stop()
	m.mu.Lock()
	m.runs = map[string]*poolRun{}
	m.mu.Unlock()
	m.wg.Wait()
}

// Last returns the last active probe result of a backend (ok false before the first).
func (m *Monitor) Last(pool, backend string) (Result, bool) {
	if r := m.record(pool, backend, false); r != nil {
		if l := r.last.Load(); l != nil {
			return *l, true
		}
	}
	return Result{}, false
}

// Ejections is how many times outlier detection ejected the backend since the monitor started.
func (m *Monitor) Ejections(pool, backend string) uint64 {
	if r := m.record(pool, backend, false); r != nil {
		return r.ejections.Load()
	}
	return 0
}

// ProbeFailures is how many active probes of the backend failed since the monitor started.
func (m *Monitor) ProbeFailures(pool, backend string) uint64 {
	if r := m.record(pool, backend, false); r != nil {
		return r.probeFail.Load()
	}
	return 0
}

func (m *Monitor) record(pool, backend string, create bool) *backendRecord {
	k := key{pool, backend}
	if v, ok := m.state.Load(k); ok {
		return v.(*backendRecord)
	}
	if !create {
		return nil
	}
	v, _ := m.state.LoadOrStore(k, &backendRecord{})
	return v.(*backendRecord)
}

// emit logs and reports one transition.
func (m *Monitor) emit(e Event) {
	attrs := []any{"pool", e.Pool, "backend", e.Backend}
	if e.Detail != "" {
		attrs = append(attrs, "detail", e.Detail)
	}
	switch e.Kind {
	case Down:
		m.log.Warn("backend down (health check)", attrs...)
	case Up:
		m.log.Info("backend up (health check)", attrs...)
	case Ejected:
		m.log.Warn("backend ejected (outlier detection)", append(attrs, "until", e.Until.Format(time.RFC3339Nano))...)
	case EjectionRefused:
		m.log.Warn("ejection refused", attrs...)
	}
	if m.opts.OnEvent != nil {
		m.opts.OnEvent(e)
	}
}
