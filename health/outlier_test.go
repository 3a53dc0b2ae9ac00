package health

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"ballast/balance"
	"ballast/config"
	"ballast/upstream"
)

func testPool(t *testing.T, n int) *upstream.Pool {
	t.Helper()
	pc := config.Pool{Name: "web", Balancer: "roundrobin"}
	for i := range n {
		pc.Backends = append(pc.Backends, config.Backend{Name: fmt.Sprintf("b%d", i), Address: fmt.Sprintf("127.0.0.1:%d", 1+i), Weight: 1})
	}
	p, err := upstream.NewPool(pc.Spec(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// hit sends one request to backend id (every other backend excluded) and releases it.
func hit(t *testing.T, p *upstream.Pool, id string, failed bool) {
	t.Helper()
	var tried balance.Tried
	for _, b := range p.Backends() {
		if b.ID != id {
			tried.Add(b.Index())
		}
	}
	b, err := p.Acquire(0, tried)
	if err != nil || b.ID != id {
		t.Fatalf("acquire %s: got %v, %v", id, b, err)
	}
	p.Release(b, time.Millisecond, failed)
}

type eventLog struct {
	mu sync.Mutex
	ev []Event
}

func (l *eventLog) add(e Event) { l.mu.Lock(); l.ev = append(l.ev, e); l.mu.Unlock() }
func (l *eventLog) kinds() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, e := range l.ev {
		out = append(out, e.Backend+":"+string(e.Kind))
	}
	return out
}

func newTestOutlier(t *testing.T, p *upstream.Pool, cfg config.Outlier) (*outlier, *eventLog, *Monitor) {
	log := &eventLog{}
	m := New(context.Background(), Options{OnEvent: log.add})
	t.Cleanup(m.Close)
	r := &poolRun{name: p.Name, out: cfg}
	r.pool.Store(p)
	return newOutlier(m, r), log, m
}

func TestOutlierEjection(t *testing.T) {
	base := config.Duration{Duration: time.Minute}
	type sample struct {
		hits   map[string][]bool // per backend, in order: true = failed
		expect map[string]upstream.State
	}
	cases := []struct {
		name    string
		n       int
		cfg     config.Outlier
		samples []sample
		events  []string
	}{
		{
			name: "three failures in a row eject",
			n:    3, cfg: config.Outlier{ConsecutiveFailures: 3, BaseEjection: base, MaxEjectionPercent: 100},
			samples: []sample{
				{hits: map[string][]bool{"b0": {true, true}}, expect: map[string]upstream.State{"b0": upstream.StateUp}},
				{hits: map[string][]bool{"b0": {true}, "b1": {false}}, expect: map[string]upstream.State{"b0": upstream.StateEjected, "b1": upstream.StateUp}},
			},
			events: []string{"b0:ejected"},
		},
		{
			name: "a success between failures resets the streak",
			n:    3, cfg: config.Outlier{ConsecutiveFailures: 3, BaseEjection: base, MaxEjectionPercent: 100},
			samples: []sample{
				{hits: map[string][]bool{"b0": {true, true}}},
				{hits: map[string][]bool{"b0": {false}}},
				{hits: map[string][]bool{"b0": {true, true}}, expect: map[string]upstream.State{"b0": upstream.StateUp}},
			},
		},
		{
			name: "max_ejection_percent keeps the third failing backend in",
			n:    4, cfg: config.Outlier{ConsecutiveFailures: 2, BaseEjection: base, MaxEjectionPercent: 50},
			samples: []sample{
				{hits: map[string][]bool{"b0": {true, true}, "b1": {true, true}, "b2": {true, true}},
					expect: map[string]upstream.State{"b0": upstream.StateEjected, "b1": upstream.StateEjected, "b2": upstream.StateUp}},
			},
			events: []string{"b0:ejected", "b1:ejected", "b2:ejection_refused"},
		},
		{
			name: "at least one ejection even when the percentage rounds to 0",
			n:    3, cfg: config.Outlier{ConsecutiveFailures: 1, BaseEjection: base, MaxEjectionPercent: 10},
			samples: []sample{
				{hits: map[string][]bool{"b0": {true}, "b1": {true}},
					expect: map[string]upstream.State{"b0": upstream.StateEjected, "b1": upstream.StateUp}},
			},
			events: []string{"b0:ejected", "b1:ejection_refused"},
		},
		{
			name: "panic threshold refuses ejections that leave too few usable",
			n:    4, cfg: config.Outlier{ConsecutiveFailures: 1, BaseEjection: base, MaxEjectionPercent: 100, PanicThreshold: 75},
			samples: []sample{
				{hits: map[string][]bool{"b0": {true}, "b1": {true}},
					expect: map[string]upstream.State{"b0": upstream.StateEjected, "b1": upstream.StateUp}},
			},
			events: []string{"b0:ejected", "b1:ejection_refused"},
		},
		{
			name: "max_ejection_percent 0 ejects nothing",
			n:    2, cfg: config.Outlier{ConsecutiveFailures: 1, BaseEjection: base, MaxEjectionPercent: 0},
			samples: []sample{
				{hits: map[string][]bool{"b0": {true}}, expect: map[string]upstream.State{"b0": upstream.StateUp}},
			},
			events: []string{"b0:ejection_refused"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := testPool(t, tc.n)
			o, log, _ := newTestOutlier(t, p, tc.cfg)
			o.step(time.Now()) // baseline
			for si, s := range tc.samples {
				for _, b := range p.Backends() {
					for _, f := range s.hits[b.ID] {
						hit(t, p, b.ID, f)
					}
				}
				o.step(time.Now())
				for id, want := range s.expect {
					if got := p.Backend(id).State(); got != want {
						t.Errorf("sample %d: %s is %v, want %v", si, id, got, want)
					}
				}
			}
			if got := log.kinds(); fmt.Sprint(got) != fmt.Sprint(tc.events) {
				t.Errorf("events %v, want %v", got, tc.events)
			}
		})
	}
}

func TestOutlierEjectionTimeGrows(t *testing.T) {
	p := testPool(t, 2)
	base := time.Hour
	o, _, m := newTestOutlier(t, p, config.Outlier{ConsecutiveFailures: 1, BaseEjection: config.Duration{Duration: base}, MaxEjectionPercent: 100})
	o.step(time.Now())
	for round := 1; round <= 3; round++ {
		hit(t, p, "b0", true)
		now := time.Now()
		o.step(now)
		until := p.Backend("b0").EjectedUntil()
		if want := now.Add(time.Duration(round) * base); !until.Equal(want) {
			t.Fatalf("ejection %d ends %v, want %v (base × %d)", round, until, want, round)
		}
		if got := m.Ejections("web", "b0"); got != uint64(round) {
			t.Fatalf("Ejections = %d, want %d", got, round)
		}
		if err := p.Eject("b0", time.Time{}); err != nil { // end it early, as if time passed
			t.Fatal(err)
		}
		o.step(now) // sees it back; no decay (no base_ejection has passed since)
	}
}

// Failures are counted response by response: a streak of consecutive_failures is an ejection
// even when a success follows it before outlier detection looks (the old 100 ms sampling let
// any success in a sample wipe the streak, so partly failing backends were never ejected).
func TestOutlierCountsEveryResponse(t *testing.T) {
	F, S := true, false
	cfg := config.Outlier{ConsecutiveFailures: 3, BaseEjection: config.Duration{Duration: time.Minute}, MaxEjectionPercent: 100}
	for _, tc := range []struct {
		name  string
		hits  [][]bool // per sample, b0's responses in order
		eject bool
	}{
		{"a streak then a success in one sample", [][]bool{{F, F, F, S}}, true},
		{"a streak across samples, successes around it", [][]bool{{S, F}, {F}, {F, S, S}}, true},
		{"half failing: runs of two and three", [][]bool{{F, S, F, F, S, S, F, F, F, S}}, true},
		{"half failing, alternating: no run of three", [][]bool{{F, S, F, S, F, S}, {F, S, F, S}}, false},
		{"two, a success, two", [][]bool{{F, F, S, F, F}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := testPool(t, 2)
			o, log, _ := newTestOutlier(t, p, cfg)
			o.step(time.Now())
			for _, hits := range tc.hits {
				for _, f := range hits {
					hit(t, p, "b0", f)
				}
				hit(t, p, "b1", false)
				o.step(time.Now())
			}
			if got := p.Backend("b0").State() == upstream.StateEjected; got != tc.eject {
				t.Errorf("b0 ejected = %v, want %v (events %v)", got, tc.eject, log.kinds())
			}
			if p.Backend("b1").State() != upstream.StateUp {
				t.Errorf("the healthy b1 is %v", p.Backend("b1").State())
			}
		})
	}
}

// An ejection starts the streak afresh: the backend back from it is not ejected again by the
// failures that led to the first ejection.
func TestOutlierStreakResetByEjection(t *testing.T) {
	p := testPool(t, 2)
	o, _, m := newTestOutlier(t, p, config.Outlier{ConsecutiveFailures: 2, BaseEjection: config.Duration{Duration: time.Hour}, MaxEjectionPercent: 100})
	o.step(time.Now())
	hit(t, p, "b0", true)
	hit(t, p, "b0", true)
	o.step(time.Now())
	if p.Backend("b0").State() != upstream.StateEjected {
		t.Fatal("not ejected after two failures")
	}
	if err := p.Eject("b0", time.Time{}); err != nil { // back early, as if time passed
		t.Fatal(err)
	}
	o.step(time.Now())
	hit(t, p, "b0", true)
	o.step(time.Now())
	if p.Backend("b0").State() == upstream.StateEjected || m.Ejections("web", "b0") != 1 {
		t.Fatalf("ejected again after one failure following the return (ejections %d)", m.Ejections("web", "b0"))
	}
	hit(t, p, "b0", true)
	o.step(time.Now())
	if m.Ejections("web", "b0") != 2 {
		t.Fatalf("a new streak of two did not eject (ejections %d)", m.Ejections("web", "b0"))
	}
}

// failure_percentage (Envoy's): at the end of each interval, a backend with at least
// request_volume requests in it, of which at least threshold percent failed, is ejected, when
// at least minimum_hosts backends had request_volume.
func TestOutlierFailurePercentage(t *testing.T) {
	base := config.Duration{Duration: time.Hour}
	interval := 10 * time.Second
	fp := func(threshold, volume, hosts int) config.Outlier {
		return config.Outlier{BaseEjection: base, MaxEjectionPercent: 100, Interval: config.Duration{Duration: interval},
			FailurePercentage: config.FailurePercentage{Threshold: threshold, RequestVolume: volume, MinimumHosts: hosts}}
	}
	// pattern returns n responses of which every k-th (k > 0) fails, never two in a row for k > 1.
	pattern := func(n, k int) []bool {
		out := make([]bool, n)
		for i := range out {
			out[i] = k > 0 && i%k == 0
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		cfg   config.Outlier
		hits  map[string][]bool
		eject []string
	}{
		{"50% and 100% over threshold 50, healthy kept", fp(50, 10, 1),
			map[string][]bool{"b0": pattern(20, 2), "b1": pattern(20, 1), "b2": pattern(20, 0)}, []string{"b0", "b1"}},
		{"33% under threshold 50", fp(50, 10, 1),
			map[string][]bool{"b0": pattern(30, 3), "b2": pattern(30, 0)}, nil},
		{"below request_volume: not judged", fp(50, 25, 1),
			map[string][]bool{"b0": pattern(20, 1), "b2": pattern(30, 0)}, nil},
		{"minimum_hosts not reached: nobody judged", fp(50, 10, 3),
			map[string][]bool{"b0": pattern(20, 1), "b1": pattern(20, 0), "b2": pattern(5, 0)}, nil},
		{"minimum_hosts reached", fp(50, 10, 3),
			map[string][]bool{"b0": pattern(20, 1), "b1": pattern(20, 0), "b2": pattern(10, 0)}, []string{"b0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := testPool(t, 3)
			o, log, _ := newTestOutlier(t, p, tc.cfg)
			t0 := time.Now()
			o.step(t0) // the first interval starts
			for _, b := range p.Backends() {
				for _, f := range tc.hits[b.ID] {
					hit(t, p, b.ID, f)
				}
			}
			o.step(t0.Add(interval / 2))
			for _, b := range p.Backends() {
				if b.State() == upstream.StateEjected {
					t.Fatalf("%s ejected before the interval ended", b.ID)
				}
			}
			o.step(t0.Add(interval))
			var got []string
			for _, b := range p.Backends() {
				if b.State() == upstream.StateEjected {
					got = append(got, b.ID)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.eject) {
				t.Errorf("ejected %v, want %v (events %v)", got, tc.eject, log.kinds())
			}
			// The next interval holds no requests: nothing more happens.
			o.step(t0.Add(2 * interval))
			if n := len(log.kinds()); n != len(tc.eject) {
				t.Errorf("events %v after a quiet interval, want only the %d ejections", log.kinds(), len(tc.eject))
			}
		})
	}
}
