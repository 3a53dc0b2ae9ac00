package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"ballast/config"
	"ballast/h1"
	"ballast/health"
	"ballast/httpcore"
	"ballast/upstream"
)

// testBackend is an HTTP backend that can be killed and restarted on the same address.
type testBackend struct {
	name   string
	addr   string
	status atomic.Int32 // answer status for "/", 200 by default
	hits   atomic.Int64 // requests to "/" (health probes excluded)

	mu  sync.Mutex
	srv *http.Server
}

func newTestBackend(t *testing.T, name string) *testBackend {
	b := &testBackend{name: name}
	b.status.Store(200)
	b.start(t)
	t.Cleanup(b.stop)
	return b
}

func (b *testBackend) start(t *testing.T) {
	t.Helper()
	addr := b.addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	var ln net.Listener
	var err error
	for range 100 { // the old socket may linger briefly after a kill
		if ln, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("backend %s: %v", b.name, err)
	}
	b.addr = ln.Addr().String()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			fmt.Fprint(w, "ok")
			return
		}
		b.hits.Add(1)
		code := int(b.status.Load())
		w.WriteHeader(code)
		if code >= 500 {
			// Errors go out chunked (streamed), as a failing application's often do.
			w.(http.Flusher).Flush()
		}
		fmt.Fprint(w, b.name)
	})}
	b.mu.Lock()
	b.srv = srv
	b.mu.Unlock()
	go func() { _ = srv.Serve(ln) }()
}

// stop kills the backend: the listener and every connection close at once.
func (b *testBackend) stop() {
	b.mu.Lock()
	srv := b.srv
	b.srv = nil
	b.mu.Unlock()
	if srv != nil {
		_ = srv.Close()
	}
}

// stack is a proxy (the event-loop engine), its pools and a Plane with its admin listener, all on 127.0.0.1.
type stack struct {
	plane *Plane
	proxy string // http://host:port of the proxy listener
	admin string // http://host:port of the admin listener
	pools map[string]*upstream.Pool
	cfg   *config.Config
}

func pool(name string, bs ...*testBackend) config.Pool {
	pc := config.Pool{Name: name, Balancer: "roundrobin"}
	for _, b := range bs {
		pc.Backends = append(pc.Backends, config.Backend{Name: b.name, Address: b.addr, Weight: 1})
	}
	return pc
}

// startStack checks cfg as a file would be (defaults filled), binds everything and serves.
func startStack(t *testing.T, token string, pcs ...config.Pool) *stack {
	t.Helper()
	return startStackAdmin(t, config.Admin{Address: "127.0.0.1:0", Token: token}, pcs...)
}

// startStackAdmin is startStack with the admin section given whole.
func startStackAdmin(t *testing.T, admin config.Admin, pcs ...config.Pool) *stack {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := &config.Config{
		Listeners: []config.Listener{{Name: "web", Address: ln.Addr().String()}},
		Pools:     pcs,
		Admin:     admin,
	}
	if err := config.Check("test", cfg); err != nil {
		t.Fatal(err)
	}
	pl := newTestPlane(t)
	pools := map[string]*upstream.Pool{}
	for _, pc := range cfg.Pools {
		p, err := upstream.NewPool(pc.Spec(pl.ObserveRelease), nil)
		if err != nil {
			t.Fatal(err)
		}
		pools[pc.Name] = p
	}
	core := httpcore.New(nil)
	px, err := h1.New(core, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := core.Swap(cfg, pools); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- px.Serve(cfg.Listeners[0].Name, ln) }()
	pl.Count(core)
	if err := pl.Install(cfg, pools); err != nil {
		t.Fatal(err)
	}
	pl.Health.Update(pools, cfg.Pools)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = px.Shutdown(ctx)
		core.Close()
		<-done
		for _, p := range pools {
			p.Close()
		}
	})
	return &stack{plane: pl, proxy: "http://" + ln.Addr().String(), admin: "http://" + pl.Addr(), pools: pools, cfg: cfg}
}

var testHTTP = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 16}}

// send makes n requests through the proxy and returns how many each backend answered (by body).
func (s *stack) send(t *testing.T, n int) map[string]int {
	t.Helper()
	got := map[string]int{}
	for range n {
		resp, err := testHTTP.Get(s.proxy + "/")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		got[fmt.Sprintf("%d %s", resp.StatusCode, body)]++
	}
	return got
}

// call sends a JSON request to the admin API and decodes the answer.
func (s *stack) call(t *testing.T, method, path, token string, body any) (int, map[string]any) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = strings.NewReader(string(b))
	}
	req, _ := http.NewRequest(method, s.admin+path, rd)
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := testHTTP.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil && !errors.Is(err, io.EOF) {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp.StatusCode, out
}

// waitFor polls cond every 10 ms, for at most 20 s (a bound against hangs, not a timing test).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for range 2000 {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

// newTestPlane is a Plane watching a health monitor of its own; both close when the test ends.
func newTestPlane(t testing.TB) *Plane {
	pl := New(slog.New(slog.DiscardHandler))
	m := health.New(context.Background(), pl.HealthOptions())
	pl.Watch(m)
	t.Cleanup(func() { pl.Close(); m.Close() })
	return pl
}
