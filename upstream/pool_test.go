package upstream

import (
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	"ballast/balance"
)

func TestNewPoolErrors(t *testing.T) {
	tests := []struct {
		name string
		cfg  Spec
	}{
		{"unknown balancer", poolCfg("nope", be("a", 1))},
		{"duplicate ID", poolCfg("swrr", be("a", 1), be("a", 2))},
		{"no ID", poolCfg("swrr", BackendSpec{Address: "x:1", Weight: 1})},
		{"negative weight", poolCfg("swrr", be("a", -1))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if p, err := NewPool(tt.cfg, nil); err == nil {
				p.Close()
				t.Fatal("NewPool succeeded, want an error")
			}
		})
	}
}

func TestBackupOnlyWhenPrimariesUnusable(t *testing.T) {
	cfg := poolCfg("swrr", be("a", 1), be("b", 1), be("c", 1))
	cfg.Backends[2].Backup = true
	p := mustPool(t, cfg, nil, nil)
	steps := []struct {
		name   string
		change func() error
		want   map[string]int
	}{
		{"primaries up", nil, map[string]int{"a": 5, "b": 5}},
		{"a disabled", func() error { return p.Disable("a") }, map[string]int{"b": 10}},
		{"b draining too", func() error { return p.Drain("b") }, map[string]int{"c": 10}},
		{"a back", func() error { return p.Enable("a") }, map[string]int{"a": 10}},
		{"a fails its check", func() error { return p.SetHealthy("a", false) }, map[string]int{"c": 10}},
		{"a ejected, healthy", func() error {
			if err := p.SetHealthy("a", true); err != nil {
				return err
			}
			return p.Eject("a", time.Now().Add(time.Hour))
		}, map[string]int{"c": 10}},
		{"ejection lifted", func() error { return p.Eject("a", time.Time{}) }, map[string]int{"a": 10}},
	}
	for _, st := range steps {
		if st.change != nil {
			if err := st.change(); err != nil {
				t.Fatalf("%s: %v", st.name, err)
			}
		}
		if got := picks(t, p, 10); !maps.Equal(got, st.want) {
			t.Errorf("%s: picks %v, want %v", st.name, got, st.want)
		}
	}
	assertIdle(t, p)
}

func TestRuntimeChangesSteerPicks(t *testing.T) {
	tests := []struct {
		name   string
		change func(p *Pool) error
		n      int
		want   map[string]int
	}{
		{"none", func(*Pool) error { return nil }, 4, map[string]int{"a": 2, "b": 2}},
		{"weight 3", func(p *Pool) error { return p.SetWeight("a", 3) }, 8, map[string]int{"a": 6, "b": 2}},
		{"weight 0", func(p *Pool) error { return p.SetWeight("a", 0) }, 4, map[string]int{"b": 4}},
		{"weight reset", func(p *Pool) error {
			if err := p.SetWeight("a", 3); err != nil {
				return err
			}
			return p.ResetWeight("a")
		}, 4, map[string]int{"a": 2, "b": 2}},
		{"drain", func(p *Pool) error { return p.Drain("a") }, 4, map[string]int{"b": 4}},
		{"disable", func(p *Pool) error { return p.Disable("b") }, 4, map[string]int{"a": 4}},
		{"disable+enable", func(p *Pool) error {
			if err := p.Disable("b"); err != nil {
				return err
			}
			return p.Enable("b")
		}, 4, map[string]int{"a": 2, "b": 2}},
		{"add", func(p *Pool) error { _, err := p.Add(be("c", 2)); return err }, 8, map[string]int{"a": 2, "b": 2, "c": 4}},
		{"remove", func(p *Pool) error { return p.Remove("a") }, 4, map[string]int{"b": 4}},
		{"health down", func(p *Pool) error { return p.SetHealthy("b", false) }, 4, map[string]int{"a": 4}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustPool(t, poolCfg("swrr", be("a", 1), be("b", 1)), nil, nil)
			if err := tt.change(p); err != nil {
				t.Fatal(err)
			}
			if got := picks(t, p, tt.n); !maps.Equal(got, tt.want) {
				t.Errorf("picks %v, want %v", got, tt.want)
			}
			assertIdle(t, p)
		})
	}
}

func TestRuntimeChangeErrors(t *testing.T) {
	p := mustPool(t, poolCfg("swrr", be("a", 1)), nil, nil)
	calls := map[string]func() error{
		"SetWeight":   func() error { return p.SetWeight("x", 1) },
		"ResetWeight": func() error { return p.ResetWeight("x") },
		"Drain":       func() error { return p.Drain("x") },
		"Disable":     func() error { return p.Disable("x") },
		"Enable":      func() error { return p.Enable("x") },
		"SetHealthy":  func() error { return p.SetHealthy("x", true) },
		"Eject":       func() error { return p.Eject("x", time.Now()) },
		"Remove":      func() error { return p.Remove("x") },
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, ErrUnknownBackend) {
			t.Errorf("%s on an unknown ID: err %v, want ErrUnknownBackend", name, err)
		}
	}
	if _, err := p.Add(be("a", 1)); !errors.Is(err, ErrDuplicateBackend) {
		t.Errorf("Add of an existing ID: err %v, want ErrDuplicateBackend", err)
	}
	if err := p.SetWeight("a", -1); err == nil {
		t.Error("SetWeight -1 succeeded")
	}
	if _, err := p.Add(be("n", -1)); err == nil {
		t.Error("Add with weight -1 succeeded")
	}
}

func TestStateAndOverrides(t *testing.T) {
	cfg := poolCfg("swrr", be("a", 1), be("b", 1), be("c", 1), be("d", 1), be("e", 1), be("f", 1))
	cfg.Backends[5].Down = true
	p := mustPool(t, cfg, nil, nil)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(p.SetWeight("a", 7))
	must(p.Drain("b"))
	must(p.Disable("c"))
	must(p.SetHealthy("d", false))
	must(p.Eject("e", time.Now().Add(time.Hour)))
	want := map[string]State{"a": StateUp, "b": StateDraining, "c": StateDisabled, "d": StateDown, "e": StateEjected, "f": StateDown}
	for _, b := range p.Backends() {
		if got := b.State(); got != want[b.ID] {
			t.Errorf("%s: state %v, want %v", b.ID, got, want[b.ID])
		}
	}
	ov := p.Overrides()
	if len(ov) != 3 || ov[0].ID != "a" || ov[0].Weight == nil || *ov[0].Weight != 7 ||
		ov[1].ID != "b" || !ov[1].Draining || ov[2].ID != "c" || !ov[2].Disabled {
		t.Errorf("overrides %+v, want a weight 7, b draining, c disabled", ov)
	}
	if a := p.Backend("a"); a.Weight() != 7 || a.ConfigWeight() != 1 || !a.WeightOverridden() {
		t.Errorf("a: weight %d config %d overridden %v", a.Weight(), a.ConfigWeight(), a.WeightOverridden())
	}
	if s, _ := StateEjected.MarshalText(); string(s) != "ejected" {
		t.Errorf("StateEjected marshals as %q", s)
	}
}

func TestReloadKeepsBackends(t *testing.T) {
	p1 := mustPool(t, poolCfg("swrr", be("a", 1), be("b", 1)), nil, nil)
	slot := NewSlot()
	p1.Attach(slot, func(b *Backend) any { return "transport-" + b.ID })
	a := p1.Backend("a")
	held := mustAcquire(t, p1)
	if held != a {
		t.Fatalf("first pick %s, want a", held.ID)
	}
	if err := p1.Disable("b"); err != nil {
		t.Fatal(err)
	}

	cfg2 := poolCfg("swrr", be("a", 3), be("c", 1), be("b", 1))
	cfg2.Backends[2].Address = "127.0.0.1:2" // same name, new address: a new backend
	p2 := mustPool(t, cfg2, p1, nil)
	if got := p2.Backend("a"); got != a {
		t.Fatal("a is a new object after the reload, want the same")
	}
	if a.Attachment(slot) != "transport-a" || a.InFlight() != 1 || a.Requests() != 1 || a.Weight() != 3 {
		t.Errorf("a after reload: attachment %v in flight %d requests %d weight %d", a.Attachment(slot), a.InFlight(), a.Requests(), a.Weight())
	}
	if c := p2.Backend("c"); c == nil || c.Attachment(slot) != nil {
		t.Errorf("c after reload: %+v, want a new backend without attachment", c)
	}
	if b := p2.Backend("b"); b == p1.Backend("b") || b.Address != "127.0.0.1:2" || b.State() != StateUp {
		t.Errorf("b with a new address must be a new backend, up")
	}
	if ids := [3]string{p2.Backends()[0].ID, p2.Backends()[1].ID, p2.Backends()[2].ID}; ids != [3]string{"a", "c", "b"} {
		t.Errorf("order %v, want configuration order a c b", ids)
	}
	// The request acquired from the old pool is released there; the backend's count is shared.
	p1.Release(held, time.Millisecond, false)
	if a.InFlight() != 0 {
		t.Errorf("a in flight %d after release on the old pool", a.InFlight())
	}
	// Runtime state survives a reload.
	if err := p2.Drain("a"); err != nil {
		t.Fatal(err)
	}
	p3, err := NewPool(poolCfg("swrr", be("a", 5), be("c", 1)), p2)
	if err != nil {
		t.Fatal(err)
	}
	if a.State() != StateDraining || a.Weight() != 5 {
		t.Errorf("a in the new pool: state %v weight %d, want draining 5", a.State(), a.Weight())
	}
	// p3 is never installed: closing it gives a back to p2 with its old configuration.
	p3.Close()
	if a.owner.Load() != p2 || a.Weight() != 3 || a.Index() != 0 {
		t.Errorf("after closing the uninstalled pool: owner p2 %v weight %d index %d", a.owner.Load() == p2, a.Weight(), a.Index())
	}
	p1.Close()
	assertIdle(t, p2)
}

// TestReloadTracksInFlight: a request acquired from the old pool and released there must
// reach the new pool's sqf index, or the new pool would think the backend still busy.
func TestReloadTracksInFlight(t *testing.T) {
	cfg := poolCfg("sqf", be("a", 1), be("b", 1))
	p1 := mustPool(t, cfg, nil, nil)
	held := []*Backend{mustAcquire(t, p1), mustAcquire(t, p1), mustAcquire(t, p1)}
	p2 := mustPool(t, cfg, p1, nil)
	for _, b := range held {
		p1.Release(b, 0, false)
	}
	// Both idle now: sqf in the new pool must alternate, not avoid the one that was busier.
	if got := picks(t, p2, 4); got["a"] != 2 || got["b"] != 2 {
		t.Errorf("picks after reload %v, want 2 and 2", got)
	}
	b := mustAcquire(t, p2)
	if next := mustAcquire(t, p2); next == b {
		t.Errorf("sqf picked %s twice while the other was idle", b.ID)
	} else {
		p2.Release(next, 0, false)
	}
	p2.Release(b, 0, false)
	assertIdle(t, p2)
}

// TestSQFWalkthrough is the seed's lighttpd example through Acquire: A1 is busy, so the next
// requests go to A2 and A3; when every backend is at its limit the request waits in the
// backlog, and a freed slot takes it.
func TestSQFWalkthrough(t *testing.T) {
	cfg := poolCfg("sqf", be("A1", 1), be("A2", 1), be("A3", 1))
	cfg.MaxConns, cfg.MaxQueue = 1, 4
	p := mustPool(t, cfg, nil, nil)
	p.newTimer = (&fakeTimers{}).newTimer
	queued := make(chan struct{})
	p.onQueue = func() { queued <- struct{}{} }

	a1 := mustAcquire(t, p) // the long request
	if a1.ID != "A1" {
		t.Fatalf("first pick %s, want A1", a1.ID)
	}
	// Short requests while A1 is busy never go to A1.
	got := picks(t, p, 6)
	if got["A1"] != 0 || got["A2"] != 3 || got["A3"] != 3 {
		t.Fatalf("picks while A1 busy %v, want A2 and A3 only, evenly", got)
	}
	a2, a3 := mustAcquire(t, p), mustAcquire(t, p)
	if a2 == a1 || a3 == a1 || a2 == a3 {
		t.Fatalf("with A1 busy sqf picked %s and %s", a2.ID, a3.ID)
	}
	w := acquireAsync(t, p, queued)
	p.Release(a3, 0, false)
	r := <-w
	if r.err != nil || r.b != a3 {
		t.Fatalf("waiter got (%s, %v), want %s", id(r.b), r.err, a3.ID)
	}
	for _, b := range []*Backend{a1, a2, r.b} {
		p.Release(b, 0, false)
	}
	assertIdle(t, p)
}

func TestSlowStartRamp(t *testing.T) {
	const window = 1000 * time.Hour // ramp steps are this/10 apart in real time: never during the test
	clk := newFakeClock()
	cfg := poolCfg("swrr", be("a", 1), be("b", 1))
	cfg.SlowStart = window
	p := mustPool(t, cfg, nil, clk)
	a := p.Backend("a")
	if a.State() != StateUp || a.EffectiveWeight() != 1 {
		t.Fatalf("at start: %v %v, want up at full weight (no ramp for the initial set)", a.State(), a.EffectiveWeight())
	}
	if err := p.Disable("a"); err != nil {
		t.Fatal(err)
	}
	if err := p.Enable("a"); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		at     time.Duration
		weight float64
		state  State
		n      int
		want   map[string]int
	}{
		{0, 0.1, StateSlowStart, 11, map[string]int{"a": 1, "b": 10}},
		{window / 4, 0.2, StateSlowStart, 12, map[string]int{"a": 2, "b": 10}},
		{window / 2, 0.5, StateSlowStart, 15, map[string]int{"a": 5, "b": 10}},
		{window * 9 / 10, 0.9, StateSlowStart, 19, map[string]int{"a": 9, "b": 10}},
		{window, 1, StateUp, 2, map[string]int{"a": 1, "b": 1}},
	}
	start := clk.now()
	for _, st := range steps {
		clk.advance(start.Add(st.at).Sub(clk.now()))
		p.tick()
		if got := a.EffectiveWeight(); got != st.weight {
			t.Errorf("at %v: effective weight %v, want %v", st.at, got, st.weight)
		}
		if got := a.State(); got != st.state {
			t.Errorf("at %v: state %v, want %v", st.at, got, st.state)
		}
		if got := picks(t, p, st.n); !maps.Equal(got, st.want) {
			t.Errorf("at %v: picks %v, want %v", st.at, got, st.want)
		}
		p.mu.Lock()
		armed := p.armed
		p.mu.Unlock()
		if wantArmed := st.state == StateSlowStart; armed != wantArmed {
			t.Errorf("at %v: timer armed %v, want %v", st.at, armed, wantArmed)
		}
	}
	if a.rampFrom.Load() != 0 {
		t.Error("ramp not cleared after the window")
	}
}

func TestEjectionEndsThroughSlowStart(t *testing.T) {
	clk := newFakeClock()
	cfg := poolCfg("swrr", be("a", 1), be("b", 1))
	cfg.SlowStart = 1000 * time.Hour
	p := mustPool(t, cfg, nil, clk)
	if err := p.Eject("a", clk.now().Add(100*time.Hour)); err != nil {
		t.Fatal(err)
	}
	a := p.Backend("a")
	if a.State() != StateEjected || a.EjectedUntil().IsZero() {
		t.Fatalf("state %v until %v, want ejected", a.State(), a.EjectedUntil())
	}
	if got := picks(t, p, 4); got["a"] != 0 {
		t.Fatalf("ejected a picked %d times", got["a"])
	}
	clk.advance(100 * time.Hour)
	p.tick() // what the pool timer does when the ejection ends
	if a.State() != StateSlowStart || !a.EjectedUntil().IsZero() || a.EffectiveWeight() != 0.1 {
		t.Fatalf("after the ejection: state %v weight %v", a.State(), a.EffectiveWeight())
	}
	if got := picks(t, p, 11); got["a"] != 1 {
		t.Errorf("picks %v, want a once in 11", got)
	}
}

func TestTrackerSeesEveryChange(t *testing.T) {
	// leastconn and sqf keep their own index; after any sequence the index must agree with the
	// counters, which shows as picks going to the least loaded backend.
	for _, alg := range []string{"sqf", "leastconn"} {
		t.Run(alg, func(t *testing.T) {
			p := mustPool(t, poolCfg(alg, be("a", 1), be("b", 1), be("c", 1)), nil, nil)
			var held []*Backend
			for range 6 {
				held = append(held, mustAcquire(t, p))
			}
			// release everything on b and c, keep a's
			var keep []*Backend
			for _, b := range held {
				if b.ID == "a" {
					keep = append(keep, b)
				} else {
					p.Release(b, 0, false)
				}
			}
			if got := picks(t, p, 6); got["a"] != 0 {
				t.Errorf("picks %v while a has %d in flight and b, c none", got, len(keep))
			}
			for _, b := range keep {
				p.Release(b, 0, false)
			}
			assertIdle(t, p)
		})
	}
}

func TestLatencyEWMA(t *testing.T) {
	clk := newFakeClock()
	p := mustPool(t, poolCfg("ewma", be("a", 1)), nil, clk)
	a := mustAcquire(t, p)
	if a.LatencyEWMA() != 0 {
		t.Fatalf("estimate %v before any response, want 0", a.LatencyEWMA())
	}
	p.Release(a, 100*time.Millisecond, false)
	if got := a.LatencyEWMA(); got != 100*time.Millisecond {
		t.Errorf("estimate %v after one 100ms response, want 100ms", got)
	}
	// A fast failure does not make the backend look faster.
	mustAcquire(t, p)
	p.Release(a, time.Millisecond, true)
	if got := a.LatencyEWMA(); got < 99*time.Millisecond {
		t.Errorf("estimate %v after a fast failure, want about 100ms", got)
	}
	if a.Failures() != 1 || a.Requests() != 2 {
		t.Errorf("failures %d requests %d, want 1 and 2", a.Failures(), a.Requests())
	}
	// Idle, the estimate decays toward 0 so the backend is probed again.
	clk.advance(time.Minute)
	if got := a.LatencyEWMA(); got >= 10*time.Millisecond {
		t.Errorf("estimate %v after a minute idle, want it decayed", got)
	}
}

func TestNoBackend(t *testing.T) {
	cfg := poolCfg("swrr", be("a", 1))
	cfg.Backends[0].Down = true
	cfg.MaxQueue = 4
	p := mustPool(t, cfg, nil, nil)
	if _, err := p.Acquire(0, balance.Tried{}); !errors.Is(err, ErrNoBackend) {
		t.Fatalf("err %v, want ErrNoBackend", err)
	}
	if q := p.QueueStats().Queued; q != 0 {
		t.Errorf("a request with no backend was queued (%d)", q)
	}
}

func TestTriedExcludes(t *testing.T) {
	p := mustPool(t, poolCfg("swrr", be("a", 1), be("b", 1)), nil, nil)
	for range 4 {
		var tried balance.Tried
		first := mustAcquire(t, p)
		tried.Add(first.Index())
		second, err := p.Acquire(0, tried)
		if err != nil || second == first {
			t.Fatalf("retry got (%s, %v) after %s", id(second), err, first.ID)
		}
		tried.Add(second.Index())
		if _, err := p.Acquire(0, tried); !errors.Is(err, ErrNoBackend) {
			t.Fatalf("all tried: err %v, want ErrNoBackend", err)
		}
		p.Release(first, 0, false)
		p.Release(second, 0, false)
	}
	assertIdle(t, p)
}

func TestTryAcquireNeverWaits(t *testing.T) {
	cfg := poolCfg("swrr", be("a", 1))
	cfg.MaxConns, cfg.MaxQueue = 1, 4
	p := mustPool(t, cfg, nil, nil)
	held := mustAcquire(t, p)
	if b, err := p.TryAcquire(0, balance.Tried{}); !errors.Is(err, ErrBusy) || b != nil {
		t.Fatalf("TryAcquire on a full pool: (%s, %v), want ErrBusy", id(b), err)
	}
	if st := p.QueueStats(); st.Queued != 0 || p.Queue() != 0 {
		t.Fatalf("TryAcquire queued: %+v", st)
	}
	p.Release(held, 0, false)
	b, err := p.TryAcquire(0, balance.Tried{})
	if err != nil || b != held {
		t.Fatalf("TryAcquire on a free pool: (%s, %v)", id(b), err)
	}
	p.Release(b, 0, false)
	assertIdle(t, p)
}

func TestAccessorsAndBackendInit(t *testing.T) {
	cfg := poolCfg("sqf", be("a", 1), be("b", 1))
	cfg.Backends[1].Backup = true
	cfg.Backends[1].MaxConns = 3
	cfg.MaxConns, cfg.MaxQueue = 5, 2
	cfg.QueueTimeout = time.Second
	cfg.SlowStart = time.Hour
	p := mustPool(t, cfg, nil, nil)
	if p.Balancer() != "sqf" || p.MaxQueue() != 2 || p.QueueTimeout() != time.Second || p.SlowStart() != time.Hour {
		t.Errorf("pool accessors: %s %d %v %v", p.Balancer(), p.MaxQueue(), p.QueueTimeout(), p.SlowStart())
	}
	a, b := p.Backend("a"), p.Backend("b")
	if a.Backup() || !b.Backup() || a.MaxConns() != 5 || b.MaxConns() != 3 || !a.Healthy() {
		t.Errorf("backend accessors: backup %v %v, max_conns %d %d, healthy %v", a.Backup(), b.Backup(), a.MaxConns(), b.MaxConns(), a.Healthy())
	}
	if err := p.SetHealthy("a", false); err != nil || a.Healthy() {
		t.Errorf("SetHealthy false: %v, healthy %v", err, a.Healthy())
	}
	var inits []string
	s1, s2 := NewSlot(), NewSlot()
	p.Attach(s1, func(b *Backend) any { inits = append(inits, b.ID); return "t-" + b.ID })
	p.Attach(s2, func(b *Backend) any { return "u-" + b.ID })
	c, err := p.Add(be("c", 1))
	if err != nil {
		t.Fatal(err)
	}
	if len(inits) != 3 || c.Attachment(s1) != "t-c" || a.Attachment(s1) != "t-a" || c.Attachment(s2) != "u-c" {
		t.Errorf("init ran on %v; c attachments %v %v", inits, c.Attachment(s1), c.Attachment(s2))
	}
	p.Attach(s1, func(b *Backend) any { return "again" })
	if a.Attachment(s1) != "t-a" {
		t.Errorf("Attach replaced an existing attachment: %v", a.Attachment(s1))
	}
	if ap, ok := a.AddrPort(); !ok || ap.String() != "127.0.0.1:1" {
		t.Errorf("AddrPort of 127.0.0.1:1 = %v %v", ap, ok)
	}
	if d, err := p.Add(BackendSpec{ID: "d", Address: "backend.internal:80", Weight: 1}); err != nil {
		t.Fatal(err)
	} else if _, ok := d.AddrPort(); ok {
		t.Error("AddrPort of a host name reports ok")
	}
	if c.State() != StateSlowStart || c.MaxConns() != 5 {
		t.Errorf("added backend: state %v max_conns %d, want slow-start and the pool's 5", c.State(), c.MaxConns())
	}
	if p.Backend("nope") != nil {
		t.Error("Backend of an unknown ID is not nil")
	}
	if State(99).String() != "unknown" {
		t.Error("out-of-range State has a name")
	}
}

func TestReleaseObserver(t *testing.T) {
	var got []time.Duration
	var p *Pool
	cfg := poolCfg("swrr", be("a", 1))
	cfg.OnRelease = func(op *Pool, b *Backend, latency time.Duration, failed bool) {
		if op == p && b.ID == "a" && failed {
			got = append(got, latency)
		}
	}
	p = mustPool(t, cfg, nil, nil)
	other := mustPool(t, poolCfg("swrr", be("a", 1)), nil, nil) // no observer: hears nothing
	other.Release(mustAcquire(t, other), time.Millisecond, true)
	b := mustAcquire(t, p)
	p.Release(b, 7*time.Millisecond, true)
	if len(got) != 1 || got[0] != 7*time.Millisecond {
		t.Errorf("observer saw %v, want one failed 7ms release", got)
	}
}

// Subscribers hear every new snapshot (what a kernel director follows) until they cancel.
func TestSubscribe(t *testing.T) {
	p := mustPool(t, poolCfg("swrr", be("a", 1), be("b", 1)), nil, nil)
	var states []string
	cancel := p.Subscribe(func(sp *Pool) {
		if sp != p {
			t.Errorf("subscriber got pool %p, want %p", sp, p)
		}
		states = append(states, sp.Backend("b").State().String())
	})
	if err := p.Disable("b"); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Add(be("c", 1)); err != nil {
		t.Fatal(err)
	}
	if err := p.Enable("b"); err != nil {
		t.Fatal(err)
	}
	if want := []string{"disabled", "disabled", "up"}; !slices.Equal(states, want) {
		t.Fatalf("snapshots seen: %v, want %v", states, want)
	}
	cancel()
	if err := p.Disable("b"); err != nil {
		t.Fatal(err)
	}
	if len(states) != 3 {
		t.Fatalf("heard %d snapshots after cancel", len(states)-3)
	}
}
