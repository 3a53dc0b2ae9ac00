//go:build linux

package h1

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"ballast/config"
	"ballast/httpcore"
	"ballast/internal/h1conformance"
	"ballast/upstream"
)

func dur(d time.Duration) config.Duration { return config.Duration{Duration: d} }

// testPool is a pool configuration with the defaults the config loader would fill in.
func testPool(name, balancer string, addrs ...string) config.Pool {
	pc := config.Pool{
		Name:      name,
		Balancer:  balancer,
		Retries:   config.Retries{Attempts: 3, Budget: 0.2},
		Timeouts:  config.Timeouts{Connect: dur(2 * time.Second), Response: dur(20 * time.Second), Idle: dur(60 * time.Second)},
		KeepAlive: config.KeepAlive{MaxIdle: 64},
		HashKey:   config.HashKey{Source: "uri"},
	}
	for _, a := range addrs {
		pc.Backends = append(pc.Backends, config.Backend{Address: a, Name: a, Weight: 1})
	}
	return pc
}

// testConfig routes everything on one listener to the first pool; further pools get path
// prefixes /<name>/.
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

type testEngine struct {
	*Engine
	core  *httpcore.Core
	addr  string
	pools map[string]*upstream.Pool
	done  chan error
	tls   bool // the listener is a TLS one
}

// exchangeRaw is h1conformance.Exchange (or exchangeRawTLS) on te's listener.
func (te *testEngine) exchangeRaw(t testing.TB, raw []byte) []byte {
	if te.tls {
		return exchangeRawTLS(t, te.addr, raw)
	}
	return h1conformance.Exchange(t, te.addr, raw)
}

// startEngine builds the pools and serves cfg's only listener on a fresh 127.0.0.1 port.
func startEngine(t testing.TB, cfg *config.Config) *testEngine { return startEngineWith(t, cfg, nil) }

// startEngineWith is startEngine with setup run on the engine before it serves.
func startEngineWith(t testing.TB, cfg *config.Config, setup func(*Engine)) *testEngine {
	t.Helper()
	return serveEngine(t, cfg, setup, nil)
}

// serveEngine builds the pools and an engine (setup, when set, runs on it first) and serves
// cfg's only listener on a fresh 127.0.0.1 port: with serveTLS when set (a TLS listener),
// else Engine.Serve.
func serveEngine(t testing.TB, cfg *config.Config, setup func(*Engine), serveTLS func(e *Engine, name string, ln net.Listener) error) *testEngine {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Listeners[0].Address = ln.Addr().String()
	pools := map[string]*upstream.Pool{}
	for _, pc := range cfg.Pools {
		p, err := upstream.NewPool(pc.Spec(nil), nil)
		if err != nil {
			t.Fatalf("NewPool(%s): %v", pc.Name, err)
		}
		pools[pc.Name] = p
	}
	core := httpcore.New(nil)
	e, err := New(core, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := core.Swap(cfg, pools); err != nil {
		t.Fatal(err)
	}
	if setup != nil {
		setup(e)
	}
	te := &testEngine{Engine: e, core: core, addr: ln.Addr().String(), pools: pools, done: make(chan error, 1), tls: serveTLS != nil}
	go func() {
		if serveTLS != nil {
			te.done <- serveTLS(e, cfg.Listeners[0].Name, ln)
			return
		}
		te.done <- e.Serve(cfg.Listeners[0].Name, ln)
	}()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = e.Shutdown(ctx)
		select {
		case <-te.done:
		case <-ctx.Done():
		}
		_ = ln.Close()
		core.Close()
		for _, p := range pools {
			p.Close()
		}
	})
	return te
}

// Swap installs a reloaded configuration, as package server does: through the core.
func (te *testEngine) Swap(cfg *config.Config, pools map[string]*upstream.Pool) error {
	return te.core.Swap(cfg, pools)
}

func (te *testEngine) PoolCounters(pool string) (retries, hedges uint64) {
	return te.core.PoolCounters(pool)
}

func (te *testEngine) Responses(b *upstream.Backend) [6]uint64 { return te.core.Responses(b) }

func (te *testEngine) url(path string) string {
	if te.tls {
		return "https://" + te.addr + path
	}
	return "http://" + te.addr + path
}

// client is testClient, for a TLS listener one that trusts any certificate and speaks
// HTTP/1.1.
func (te *testEngine) client() *http.Client {
	c := testClient()
	if te.tls {
		c.Transport.(*http.Transport).TLSClientConfig = &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}}
	}
	return c
}

func testClient() *http.Client {
	return &http.Client{
		Transport:     &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 64},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Timeout:       30 * time.Second,
	}
}

// get fetches url and returns the response and its body.
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

func inflight(p *upstream.Pool) int64 {
	var n int64
	for _, b := range p.Backends() {
		n += b.InFlight()
	}
	return n
}

// waitFor polls cond every few milliseconds for up to 10 s.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for range 2000 {
		if cond() {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

// httpBackend runs h on a fresh loopback port.
func httpBackend(t testing.TB, h http.HandlerFunc) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}
