package httpproxy

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"ballast/config"
	"ballast/httpcore"
	"ballast/upstream"
)

func dur(d time.Duration) config.Duration { return config.Duration{Duration: d} }

// testPool is a pool configuration with every default the config loader would fill in.
func testPool(name, balancer string, addrs ...string) config.Pool {
	pc := config.Pool{
		Name:      name,
		Balancer:  balancer,
		Retries:   config.Retries{Attempts: 3, Budget: 0.2},
		Hedge:     config.Hedge{MaxHedges: 1},
		Timeouts:  config.Timeouts{Connect: dur(2 * time.Second), Response: dur(20 * time.Second), Idle: dur(60 * time.Second)},
		KeepAlive: config.KeepAlive{MaxIdle: 64},
		HashKey:   config.HashKey{Source: "uri"},
	}
	for _, a := range addrs {
		pc.Backends = append(pc.Backends, config.Backend{Address: a, Name: a, Weight: 1})
	}
	return pc
}

// testConfig routes everything on one listener to the given pools' first one; further pools
// get path prefixes /<name>/.
func testConfig(pools ...config.Pool) *config.Config {
	cfg := &config.Config{
		Listeners: []config.Listener{{
			Name: "web", Address: "127.0.0.1:0",
			ReadHeaderTimeout: dur(5 * time.Second), IdleTimeout: dur(30 * time.Second),
			MaxHeaderBytes: 8 << 10, ExposeBackend: true,
		}},
		Pools: pools,
	}
	for i := len(pools) - 1; i >= 1; i-- {
		cfg.Routes = append(cfg.Routes, config.Route{PathPrefix: "/" + pools[i].Name + "/", Pool: pools[i].Name})
	}
	cfg.Routes = append(cfg.Routes, config.Route{Pool: pools[0].Name})
	return cfg
}

// engine is the HTTP/1 engine over a core of its own, as the server runs them together.
type engine struct {
	*Proxy
	core *httpcore.Core
}

// newEngine builds a core for cfg and the engine over it.
func newEngine(cfg *config.Config, pools map[string]*upstream.Pool, logger *slog.Logger) (*engine, error) {
	c := httpcore.New(logger)
	px := New(c, logger)
	if err := c.Swap(cfg, pools); err != nil {
		c.Close()
		return nil, err
	}
	return &engine{Proxy: px, core: c}, nil
}

func (e *engine) Swap(cfg *config.Config, pools map[string]*upstream.Pool) error {
	return e.core.Swap(cfg, pools)
}

func (e *engine) ReopenAccessLog() error { return e.core.ReopenAccessLog() }

func (e *engine) Responses(b *upstream.Backend) [6]uint64 { return e.core.Responses(b) }

func (e *engine) PoolCounters(pool string) (retries, hedges uint64) {
	return e.core.PoolCounters(pool)
}

// Shutdown stops the engine, then its core.
func (e *engine) Shutdown(ctx context.Context) error {
	err := e.Proxy.Shutdown(ctx)
	e.core.Close()
	return err
}

type testProxy struct {
	*engine
	addr  string
	pools map[string]*upstream.Pool
	done  chan error
}

// startProxy builds the pools and serves cfg's only listener on a fresh 127.0.0.1 port.
func startProxy(t testing.TB, cfg *config.Config) *testProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Listeners[0].Address = ln.Addr().String()
	pools := make(map[string]*upstream.Pool)
	for _, pc := range cfg.Pools {
		p, err := upstream.NewPool(pc.Spec(nil), nil)
		if err != nil {
			t.Fatalf("NewPool(%s): %v", pc.Name, err)
		}
		pools[pc.Name] = p
	}
	px, err := newEngine(cfg, pools, nil)
	if err != nil {
		t.Fatal(err)
	}
	tp := &testProxy{engine: px, addr: ln.Addr().String(), pools: pools, done: make(chan error, 1)}
	go func() { tp.done <- px.Serve(cfg.Listeners[0].Name, ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = px.Shutdown(ctx)
		select {
		case <-tp.done:
		case <-ctx.Done():
		}
		for _, p := range pools {
			p.Close()
		}
	})
	return tp
}

func (tp *testProxy) url(path string) string { return "http://" + tp.addr + path }

// client is an HTTP client that does not follow redirects or decompress.
func testClient() *http.Client {
	return &http.Client{
		Transport: &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 64},
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
		Timeout: 30 * time.Second,
	}
}

// get fetches url and returns status, headers and body.
func get(t testing.TB, c *http.Client, method, url string, body io.Reader, hdr map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		if strings.EqualFold(k, "Host") {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading body: %v", method, url, err)
	}
	return resp, b
}

// inflight sums the in-flight counts of a pool's backends.
func inflight(p *upstream.Pool) int64 {
	var n int64
	for _, b := range p.Backends() {
		n += b.InFlight()
	}
	return n
}

// waitFor polls cond every few milliseconds for up to 10 s (bounded, not a timing assertion).
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for i := 0; i < 2000; i++ {
		if cond() {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}
