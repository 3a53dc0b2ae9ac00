package admin

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"ballast/config"
	"ballast/upstream"
)

func cd(d time.Duration) config.Duration { return config.Duration{Duration: d} }

// load sends requests through the proxy from two goroutines until stopped; it counts answers.
type load struct {
	ok, bad atomic.Int64
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

func startLoad(t *testing.T, url string) *load {
	ctx, cancel := context.WithCancel(context.Background())
	l := &load{cancel: cancel}
	for range 2 {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
				resp, err := testHTTP.Do(req)
				if err != nil {
					if ctx.Err() == nil {
						l.bad.Add(1)
					}
					continue
				}
				resp.Body.Close()
				if resp.StatusCode == 200 {
					l.ok.Add(1)
				} else {
					l.bad.Add(1)
				}
			}
		}()
	}
	t.Cleanup(l.stop)
	return l
}

func (l *load) stop() { l.cancel(); l.wg.Wait() }

func TestKilledBackendIsMarkedDownAndReturns(t *testing.T) {
	a, b, c := newTestBackend(t, "a"), newTestBackend(t, "b"), newTestBackend(t, "c")
	pc := pool("web", a, b, c)
	interval := 50 * time.Millisecond
	pc.Health = config.HealthCheck{Path: "/health", Interval: cd(interval), Timeout: cd(time.Second), Rise: 2, Fall: 2}
	s := startStack(t, "", pc)
	p := s.pools["web"]
	bk := p.Backend("b")

	l := startLoad(t, s.proxy+"/")
	waitFor(t, "traffic on b", func() bool { return b.hits.Load() > 20 })

	killed := time.Now()
	b.stop()
	waitFor(t, "b marked down", func() bool { return bk.State() == upstream.StateDown })
	t.Logf("b marked down %v after the kill (fall × interval = %v, plus up to one interval of phase)", time.Since(killed), 2*interval)
	if f := s.plane.Health.ProbeFailures("web", "b"); f < 2 {
		t.Fatalf("down after %d failed probes, want fall = 2", f)
	}
	// Down means no traffic: the dispatch counter of b stands still under load.
	before := bk.Requests()
	okBefore := l.ok.Load()
	waitFor(t, "more traffic", func() bool { return l.ok.Load() > okBefore+100 })
	if got := bk.Requests(); got != before {
		t.Fatalf("b got %d requests while down", got-before)
	}

	b.start(t)
	waitFor(t, "b up again", func() bool { return bk.State() != upstream.StateDown })
	hits := b.hits.Load()
	waitFor(t, "traffic on b after its return", func() bool { return b.hits.Load() > hits+20 })
	l.stop()
	t.Logf("under load: %d ok, %d failed (requests caught by the kill)", l.ok.Load(), l.bad.Load())
	if got := s.plane.metrics.transitions.WithLabelValues("web", "b", "down"); got == nil {
		t.Fatal("no transitions counter")
	}
}

func TestFailingBackendIsEjectedAndReturns(t *testing.T) {
	a, b, c := newTestBackend(t, "a"), newTestBackend(t, "b"), newTestBackend(t, "c")
	pc := pool("web", a, b, c)
	pc.Outlier = config.Outlier{ConsecutiveFailures: 3, Include5xx: true, BaseEjection: cd(time.Second), MaxEjectionPercent: 50}
	s := startStack(t, "", pc)
	bk := s.pools["web"].Backend("b")
	b.status.Store(http.StatusInternalServerError)

	waitFor(t, "b ejected", func() bool {
		s.send(t, 3)
		return bk.State() == upstream.StateEjected
	})
	if n := s.plane.Health.Ejections("web", "b"); n != 1 {
		t.Fatalf("Ejections = %d, want 1", n)
	}
	b.status.Store(http.StatusOK)
	before := bk.Requests()
	got := s.send(t, 20)
	if bk.State() == upstream.StateEjected { // still out, so out for the whole batch
		if n := bk.Requests() - before; n != 0 {
			t.Fatalf("b got %d requests while ejected", n)
		}
		if got["200 a"]+got["200 c"] != 20 {
			t.Fatalf("answers while b is ejected: %v", got)
		}
	} else {
		t.Log("the ejection ended during the batch; the no-traffic check needs a quieter machine")
	}
	waitFor(t, "b back from ejection", func() bool { return bk.State() == upstream.StateUp })
	waitFor(t, "traffic on b after the ejection", func() bool {
		return s.send(t, 6)["200 b"] > 0
	})
}

func TestAPIChangesShowInTraffic(t *testing.T) {
	a, b := newTestBackend(t, "a"), newTestBackend(t, "b")
	s := startStack(t, "", pool("web", a, b))
	api := "/api/pools/web/backends/"
	steps := []struct {
		name   string
		method string
		path   string
		body   any
		n      int
		want   map[string]int
	}{
		{"weights 3:1", "POST", api + "a/weight", map[string]int{"weight": 3}, 40, map[string]int{"200 a": 30, "200 b": 10}},
		{"disable b", "POST", api + "b/disable", nil, 20, map[string]int{"200 a": 20}},
		{"enable b, drain a", "POST", api + "b/enable", nil, 0, nil},
		{"", "POST", api + "a/drain", nil, 10, map[string]int{"200 b": 10}},
		{"enable a, weight reset", "POST", api + "a/enable", nil, 0, nil},
		{"", "POST", api + "a/weight", map[string]any{"weight": nil}, 10, map[string]int{"200 a": 5, "200 b": 5}},
		{"weight 0 stops a", "POST", api + "a/weight", map[string]int{"weight": 0}, 10, map[string]int{"200 b": 10}},
	}
	for _, st := range steps {
		code, out := s.call(t, st.method, st.path, "", st.body)
		if code != 200 {
			t.Fatalf("%s %s: %d %v", st.method, st.path, code, out)
		}
		if st.n == 0 {
			continue
		}
		got := s.send(t, st.n)
		if fmt.Sprint(got) != fmt.Sprint(st.want) {
			t.Fatalf("%s: traffic %v, want %v", st.name, got, st.want)
		}
	}
	// The weight override is reported as a runtime override.
	code, out := s.call(t, "GET", "/api/pools/web", "", nil)
	if code != 200 || fmt.Sprint(out["overrides"]) != "map[backends:[map[id:a weight:0]]]" {
		t.Fatalf("overrides: %d %v", code, out["overrides"])
	}

	// Add a backend at run time: it takes traffic at once; remove it: it stops.
	c := newTestBackend(t, "c")
	if code, out := s.call(t, "POST", "/api/pools/web/backends", "", map[string]any{"address": c.addr, "name": "c", "weight": 1}); code != 200 {
		t.Fatalf("add: %d %v", code, out)
	}
	if got := s.send(t, 10); got["200 c"] != 5 || got["200 b"] != 5 {
		t.Fatalf("after add: %v", got)
	}
	if code, out := s.call(t, "POST", "/api/pools/web/backends", "", map[string]any{"address": c.addr, "name": "c"}); code != http.StatusConflict {
		t.Fatalf("adding c twice: %d %v", code, out)
	}
	if code, out := s.call(t, "DELETE", "/api/pools/web/backends/c", "", nil); code != 200 {
		t.Fatalf("remove: %d %v", code, out)
	}
	if got := s.send(t, 6); got["200 b"] != 6 {
		t.Fatalf("after remove: %v", got)
	}
	errs := []struct {
		method, path string
		body         any
		want         int
	}{
		{"POST", api + "zz/disable", nil, 404},
		{"POST", "/api/pools/nope/backends/a/disable", nil, 404},
		{"POST", api + "a/explode", nil, 400},
		{"POST", api + "a/weight", map[string]int{"weight": -1}, 400},
		{"POST", api + "a/weight", map[string]int{"weight": 10001}, 400},
		{"POST", "/api/pools/web/backends", map[string]any{"address": "127.0.0.1:9", "weight": 1 << 40}, 400},
		{"POST", api + "a/weight", map[string]string{"weight": "x"}, 400},
		{"POST", "/api/pools/web/backends", map[string]any{"address": "nohost"}, 400},
	}
	for _, e := range errs {
		if code, out := s.call(t, e.method, e.path, "", e.body); code != e.want {
			t.Errorf("%s %s %v: %d %v, want %d", e.method, e.path, e.body, code, out, e.want)
		}
	}
}

func TestChangesNeedTheToken(t *testing.T) {
	a := newTestBackend(t, "a")
	s := startStack(t, "s3cret-s3cret-s3cret", pool("web", a))
	cases := []struct {
		token string
		want  int
	}{
		{"", http.StatusUnauthorized},
		{"wrong", http.StatusUnauthorized},
		{"s3cret", http.StatusUnauthorized},
		{"s3cret-s3cret-s3cret", http.StatusOK},
	}
	for _, tc := range cases {
		if code, out := s.call(t, "POST", "/api/pools/web/backends/a/drain", tc.token, nil); code != tc.want {
			t.Errorf("token %q: %d %v, want %d", tc.token, code, out, tc.want)
		}
	}
	if st := s.pools["web"].Backend("a").State(); st != upstream.StateDraining {
		t.Fatalf("after the one authorised drain a is %v", st)
	}
	if code, _ := s.call(t, "GET", "/api/pools", "", nil); code != 200 {
		t.Fatalf("reads need no token, got %d", code)
	}
}

// A backend that comes back from a health-check failure ramps up instead of taking its full
// share at once: its effective weight starts at slow start's floor and its share of the traffic
// grows as the window passes.
func TestRestartedBackendRampsUpWithSlowStart(t *testing.T) {
	a, b := newTestBackend(t, "a"), newTestBackend(t, "b")
	pc := pool("web", a, b)
	interval := 50 * time.Millisecond
	pc.Health = config.HealthCheck{Path: "/health", Interval: cd(interval), Timeout: cd(time.Second), Rise: 1, Fall: 1}
	window := 10 * time.Second
	pc.SlowStart = cd(window)
	s := startStack(t, "", pc)
	bk := s.pools["web"].Backend("b")

	b.stop()
	waitFor(t, "b marked down", func() bool { return bk.State() == upstream.StateDown })
	b.start(t)
	waitFor(t, "b up again", func() bool { return bk.State() != upstream.StateDown })
	back := time.Now()

	first := s.send(t, 60)["200 b"]
	w0 := bk.EffectiveWeight()
	// Wait until at least 40 % of the window has passed, however slow the machine is.
	waitFor(t, "40% of the slow-start window", func() bool { return time.Since(back) >= window*4/10 })
	later := s.send(t, 60)["200 b"]
	w1 := bk.EffectiveWeight()
	t.Logf("b's share: %d/60 right after its return (effective weight %.2f), %d/60 after %v (%.2f)", first, w0, later, time.Since(back).Round(time.Millisecond), w1)
	if w0 >= 0.5 {
		t.Fatalf("effective weight right after the return = %.2f, want the slow-start floor (< 0.5 of 1)", w0)
	}
	if w1 <= w0 {
		t.Fatalf("effective weight did not ramp: %.2f then %.2f", w0, w1)
	}
	// Round robin follows the effective weights exactly, so the split shows the ramp.
	if first >= 20 {
		t.Fatalf("b took %d of 60 requests right after its return, want the ramp's small share (< 20)", first)
	}
	if later <= first {
		t.Fatalf("b's share did not grow: %d then %d of 60", first, later)
	}
}

// Issue 8 item 5: the API adds a backend only if the configuration file would accept its
// address, weight and max_conns (the same config rule), and a refused add changes nothing.
func TestAddRefusesWhatTheFileRefuses(t *testing.T) {
	a := newTestBackend(t, "a")
	s := startStack(t, "", pool("web", a))
	for _, body := range []map[string]any{
		{"address": "a b/c:80"},
		{"address": "/tmp/x:80"},
		{"address": "host:0"},
		{"address": ":80"},
		{"address": "nohost"},
		{"address": "127.0.0.1:9", "weight": 10001},
		{"address": "127.0.0.1:9", "max_conns": -1},
	} {
		code, out := s.call(t, "POST", "/api/pools/web/backends", "", body)
		if code != http.StatusBadRequest {
			t.Errorf("add %v: %d %v, want 400", body, code, out)
		}
		if _, isFile := config.Check("x", &config.Config{Pools: []config.Pool{{Name: "p", Backends: []config.Backend{{Address: fmt.Sprint(body["address"]), Weight: 1}}}}}).(config.Errors); !isFile && body["weight"] == nil && body["max_conns"] == nil {
			t.Errorf("the file accepts %v, which the API refused", body)
		}
	}
	if n := len(s.pools["web"].Backends()); n != 1 {
		t.Fatalf("refused adds left %d backends, want 1", n)
	}
	if code, out := s.call(t, "POST", "/api/pools/web/backends", "", map[string]any{"address": "backend.internal:8081", "name": "c"}); code != 200 {
		t.Fatalf("a host name is a valid backend address: %d %v", code, out)
	}
}

// Issue 8 item 4: a reload must not drop the token of an admin listener that other hosts can
// reach. The listener is bound to every interface with a token; a reload that moves the
// address to loopback (which cannot move the socket) and drops the token is refused, and the
// token stays in force for a client on 127.0.0.1 that sends Host: 127.0.0.1.
func TestReloadCannotDropTheTokenOfAnOpenListener(t *testing.T) {
	ln, err := net.Listen("tcp", "0.0.0.0:0") // skip cleanly where wildcard binds are not allowed
	if err != nil {
		t.Skipf("cannot bind 0.0.0.0: %v", err)
	}
	ln.Close()
	a := newTestBackend(t, "a")
	pc := pool("web", a)
	lc := []config.Listener{{Address: "127.0.0.1:0"}}
	cfg := &config.Config{Listeners: lc, Pools: []config.Pool{pc}, Admin: config.Admin{Address: "0.0.0.0:0", Token: "T-0123456789abcdef"}}
	if err := config.Check("start", cfg); err != nil {
		t.Fatal(err)
	}
	p, err := upstream.NewPool(cfg.Pools[0].Spec(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	pl := newTestPlane(t)
	pools := map[string]*upstream.Pool{"web": p}
	if err := pl.Install(cfg, pools); err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(pl.Addr())
	reload := &config.Config{Listeners: lc, Pools: []config.Pool{pc}, Admin: config.Admin{Address: "127.0.0.1:" + port}}
	if err := config.Check("reload", reload); err != nil {
		t.Fatalf("the reloaded file is valid on its own: %v", err)
	}
	if err := pl.Check(reload); err == nil {
		t.Fatal("Check accepted dropping the token of a listener on 0.0.0.0")
	}
	if err := pl.Install(reload, pools); err == nil {
		t.Fatal("Install accepted dropping the token of a listener on 0.0.0.0")
	}
	req, _ := http.NewRequest("POST", "http://127.0.0.1:"+port+"/api/pools/web/backends/a/disable", strings.NewReader("{}"))
	req.Host = "127.0.0.1"
	req.Header.Set("Content-Type", "application/json")
	resp, err := testHTTP.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("change without the token after the refused reload: %d, want 401", resp.StatusCode)
	}
	if st := p.Backend("a").State(); st != upstream.StateUp {
		t.Fatalf("backend a is %v, want up", st)
	}
	// Keeping the token, or reloading a loopback-only listener without one, is allowed.
	if err := pl.Check(&config.Config{Admin: config.Admin{Address: cfg.Admin.Address, Token: "T2-0123456789abcdef", Reads: config.ReadsToken}}); err != nil {
		t.Fatalf("changing the token: %v", err)
	}
}
