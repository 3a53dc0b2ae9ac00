package health

import (
	"ballast/internal/refused"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"ballast/config"
	"ballast/upstream"
)

func TestHTTPProber(t *testing.T) {
	block := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ok":
			fmt.Fprint(w, "status: green")
		case "/host":
			fmt.Fprint(w, "host="+r.Host+" method="+r.Method)
		case "/fail":
			w.WriteHeader(http.StatusServiceUnavailable)
		case "/redirect":
			http.Redirect(w, r, "/fail", http.StatusFound)
		case "/slow":
			<-block
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(block) }) // runs before srv.Close, which waits for handlers
	addr := strings.TrimPrefix(srv.URL, "http://")
	cases := []struct {
		name string
		hc   config.HealthCheck
		ok   bool
		why  string
	}{
		{"200 in range", config.HealthCheck{Path: "/ok", ExpectStatus: "200-399"}, true, ""},
		{"503 out of range", config.HealthCheck{Path: "/fail", ExpectStatus: "200-399"}, false, "status 503"},
		{"503 expected", config.HealthCheck{Path: "/fail", ExpectStatus: "503"}, true, ""},
		{"redirect not followed", config.HealthCheck{Path: "/redirect", ExpectStatus: "200-399"}, true, ""},
		{"body matches", config.HealthCheck{Path: "/ok", ExpectStatus: "200", ExpectBody: "green"}, true, ""},
		{"body does not match", config.HealthCheck{Path: "/ok", ExpectStatus: "200", ExpectBody: "red"}, false, "body lacks"},
		{"host and method sent", config.HealthCheck{Method: "HEAD", Path: "/host", Host: "svc.example", ExpectStatus: "200"}, true, ""},
		{"host in body", config.HealthCheck{Path: "/host", Host: "svc.example", ExpectStatus: "200", ExpectBody: "host=svc.example method=GET"}, true, ""},
		{"timeout", config.HealthCheck{Path: "/slow", ExpectStatus: "200"}, false, "deadline"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pr, err := NewProber(tc.hc)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			err = pr.Probe(ctx, addr)
			if (err == nil) != tc.ok {
				t.Fatalf("Probe = %v, want ok=%v", err, tc.ok)
			}
			if err != nil && !strings.Contains(err.Error(), tc.why) {
				t.Fatalf("Probe = %v, want it to mention %q", err, tc.why)
			}
		})
	}
}

func TestTCPProber(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	pr, _ := NewProber(config.HealthCheck{Type: "tcp"})
	if err := pr.Probe(context.Background(), addr); err != nil {
		t.Fatalf("open port: %v", err)
	}
	ln.Close()
	if err := pr.Probe(context.Background(), addr); err == nil {
		t.Fatal("closed port probed ok")
	}
}

func TestNewProberRejectsBadStatus(t *testing.T) {
	if _, err := NewProber(config.HealthCheck{ExpectStatus: "abc"}); err == nil {
		t.Fatal("bad expect_status accepted")
	}
}

// waitEvent waits (bounded) for the next event of the given kind for backend id.
func waitEvent(t *testing.T, ch <-chan Event, id string, kind EventKind) Event {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case e := <-ch:
			if e.Backend == id && e.Kind == kind {
				return e
			}
		case <-deadline:
			t.Fatalf("no %s event for %s", kind, id)
		}
	}
}

func TestMonitorRiseFall(t *testing.T) {
	var failing atomic.Bool
	var probes atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		probes.Add(1)
		if failing.Load() {
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	t.Cleanup(srv.Close)
	addr := strings.TrimPrefix(srv.URL, "http://")
	pc := config.Pool{Name: "web", Balancer: "roundrobin", Backends: []config.Backend{{Name: "a", Address: addr, Weight: 1}},
		Health: config.HealthCheck{Type: "http", Method: "GET", Path: "/", ExpectStatus: "200-399",
			Interval: config.Duration{Duration: 10 * time.Millisecond}, Timeout: config.Duration{Duration: time.Second}, Rise: 2, Fall: 3}}
	p, err := upstream.NewPool(pc.Spec(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	events := make(chan Event, 16)
	type verdict struct {
		ok      bool
		healthy bool
	}
	var trace []verdict
	tracec := make(chan verdict, 1024)
	m := New(context.Background(), Options{
		OnEvent: func(e Event) { events <- e },
		OnProbe: func(_, _ string, r Result) {
			select {
			case tracec <- verdict{r.OK, p.Backend("a").Healthy()}:
			default: // the trace is long enough
			}
		},
	})
	t.Cleanup(m.Close)
	m.Update(map[string]*upstream.Pool{"web": p}, []config.Pool{pc})

	failing.Store(true)
	waitEvent(t, events, "a", Down)
	if p.Backend("a").Healthy() || p.Backend("a").State() != upstream.StateDown {
		t.Fatalf("after the down event the backend is %v", p.Backend("a").State())
	}
	failing.Store(false)
	waitEvent(t, events, "a", Up)
	if !p.Backend("a").Healthy() {
		t.Fatal("after the up event the backend is not healthy")
	}
	m.Close()
	close(tracec)
	for v := range tracec {
		trace = append(trace, v)
	}
	// The verdicts follow rise/fall exactly: down on the 3rd failure in a row, up on the 2nd
	// success in a row (OnProbe runs before the verdict is applied).
	fails, passes, downAt, upAt := 0, 0, -1, -1
	for i, v := range trace {
		if v.ok {
			fails = 0
			passes++
			if downAt >= 0 && upAt < 0 && passes == 2 {
				upAt = i
			}
		} else {
			passes = 0
			fails++
			if downAt < 0 && fails == 3 {
				downAt = i
			}
		}
	}
	if downAt < 0 || upAt < 0 {
		t.Fatalf("trace %v has no fall/rise point", trace)
	}
	// OnProbe sees the verdict before the probe's result is applied: healthy up to and
	// including the 3rd failure in a row, unhealthy from the next probe to the 2nd success.
	for i, v := range trace {
		want := i <= downAt || i > upAt
		if v.healthy != want {
			t.Fatalf("probe %d: healthy=%v, want %v (down at %d, up at %d, trace %v)", i, v.healthy, want, downAt, upAt, trace)
		}
	}
	if last, ok := m.Last("web", "a"); !ok || !last.OK {
		t.Fatalf("Last = %+v, %v", last, ok)
	}
	if m.ProbeFailures("web", "a") < 3 {
		t.Fatalf("ProbeFailures = %d, want at least fall=3", m.ProbeFailures("web", "a"))
	}
}

func TestMonitorPicksUpAddedBackendsAndStops(t *testing.T) {
	dead := refused.TCP(t)
	pc := config.Pool{Name: "web", Balancer: "roundrobin", Backends: []config.Backend{{Name: "a", Address: dead, Weight: 1}},
		Health: config.HealthCheck{Type: "tcp", Interval: config.Duration{Duration: 10 * time.Millisecond},
			Timeout: config.Duration{Duration: time.Second}, Rise: 1, Fall: 1}}
	p, err := upstream.NewPool(pc.Spec(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	events := make(chan Event, 16)
	base := runtime.NumGoroutine()
	ctx, cancel := context.WithCancel(context.Background())
	m := New(ctx, Options{OnEvent: func(e Event) {
		select {
		case events <- e:
		default:
		}
	}})
	m.Update(map[string]*upstream.Pool{"web": p}, []config.Pool{pc})
	waitEvent(t, events, "a", Down)
	if _, err := p.Add(upstream.BackendSpec{ID: "b", Address: dead, Weight: 1}); err != nil {
		t.Fatal(err)
	}
	m.Kick()
	waitEvent(t, events, "b", Down)
	cancel()
	m.Close() // returns only once every goroutine has stopped
	for i := 0; runtime.NumGoroutine() > base; i++ {
		if i == 500 {
			t.Fatalf("%d goroutines after Close, %d before New", runtime.NumGoroutine(), base)
		}
		time.Sleep(10 * time.Millisecond) // dialer goroutines unwind after their context ends
	}
}
