package admin

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"ballast/config"
	"ballast/h1"
	"ballast/h2mux"
	"ballast/health"
	"ballast/upstream"
)

// DefaultAddress is where `ballast ctl` looks for the admin listener.
const DefaultAddress = "127.0.0.1:9090"

// state is one installed configuration: the pools in configuration order.
type state struct {
	cfg   *config.Config
	order []string
	pools map[string]*upstream.Pool
	conf  map[string]config.Pool
}

func (s *state) pool(name string) *upstream.Pool {
	if s == nil {
		return nil
	}
	return s.pools[name]
}

// Plane serves the runtime API, the status page and the metrics (when configured, on the
// admin listener). It reads the health monitor and the data planes' own counters; it owns
// neither.
type Plane struct {
	log *slog.Logger
	// Health is the monitor the API reads and kicks after a change; Watch sets it.
	Health    *health.Monitor
	metrics   *metrics
	counters  atomic.Pointer[[]Counters]
	directors atomic.Pointer[Directors]       // ShowDirectors; nil without a director plane
	ha        atomic.Pointer[HA]              // ShowHA (admin/ha.go)
	bgp       atomic.Pointer[BGP]             // ShowBGP (admin/bgp.go)
	h2        atomic.Pointer[h2mux.Counters]  // CountHTTP2 (admin/http2.go)
	h1        atomic.Pointer[func() h1.Stats] // CountHTTP1 (admin/http1.go)
	listeners atomic.Pointer[[]ListenerCounters]
	conns     atomic.Pointer[[]ConnCounters]
	ds        discoveryState // ShowDiscovery, ShowFleet (discovery.go, fleet.go)
	key       [32]byte       // HMAC key of the page nonces; random per process
	obs       observer       // observe.go: what advise reads

	cur atomic.Pointer[state]

	h2b atomic.Pointer[func() h1.H2BackendStats] // CountHTTP2Backends (admin/h2backend.go)

	mu    sync.Mutex
	srv   *http.Server
	ln    net.Listener
	addr  string // as configured
	token string
	// readToken grants reads only; reads says whether reads need a token (admin.reads).
	readToken string
	reads     bool
	// self lists the process's other listeners (SetSelf), which no backend may be.
	self   func() []config.SelfAddr
	served chan struct{}
	closed bool
}

// Counters is what a data plane counts itself, for the API and the metrics: responses by
// status class per backend, and retries and hedges per pool.
type Counters interface {
	// Responses returns b's responses by status class: 1..5, and 0 for no valid response.
	Responses(b *upstream.Backend) [6]uint64
	// PoolCounters returns the pool's retries and hedged copies.
	PoolCounters(pool string) (retries, hedges uint64)
}

// New creates a Plane; nothing listens until Install sees an admin address. Give it the
// health monitor with Watch and the data planes' counters with Count before Install.
func New(logger *slog.Logger) *Plane {
	if logger == nil {
		logger = slog.Default()
	}
	p := &Plane{log: logger}
	if _, err := rand.Read(p.key[:]); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	p.metrics = newMetrics(p)
	return p
}

// HealthOptions are the monitor options that feed the plane's metrics (transitions, probes);
// whoever creates the monitor (and owns its context) starts from them.
func (p *Plane) HealthOptions() health.Options {
	return health.Options{Logger: p.log, OnEvent: p.metrics.event, OnProbe: p.metrics.probe}
}

// Watch makes the API and the metrics read m; call it before Install.
func (p *Plane) Watch(m *health.Monitor) { p.Health = m }

// Count adds the counters of the data planes; call it before Install.
func (p *Plane) Count(cs ...Counters) { p.counters.Store(&cs) }

// ObserveRelease is the pools' release observer (upstream.Spec.OnRelease): it feeds the
// latency histograms.
func (p *Plane) ObserveRelease(pl *upstream.Pool, b *upstream.Backend, latency time.Duration, failed bool) {
	p.metrics.release(pl, b, latency, failed)
	p.obs.release(pl, b, latency, failed)
}

// responses sums the data planes' status classes of b.
func (p *Plane) responses(b *upstream.Backend) [6]uint64 {
	var out [6]uint64
	if cs := p.counters.Load(); cs != nil {
		for _, c := range *cs {
			r := c.Responses(b)
			for i := range out {
				out[i] += r[i]
			}
		}
	}
	return out
}

// poolCounters sums the data planes' retries and hedges of a pool.
func (p *Plane) poolCounters(pool string) (retries, hedges uint64) {
	if cs := p.counters.Load(); cs != nil {
		for _, c := range *cs {
			r, h := c.PoolCounters(pool)
			retries, hedges = retries+r, hedges+h
		}
	}
	return retries, hedges
}

// Install publishes cfg and pools to the API, the page and the metrics.
// On the first call with admin.address set it binds the admin listener; later calls cannot move
// it (a warning says so).
func (p *Plane) Install(cfg *config.Config, pools map[string]*upstream.Pool) error {
	if err := p.Check(cfg); err != nil {
		return err
	}
	st := &state{cfg: cfg, pools: pools, conf: map[string]config.Pool{}}
	for _, pc := range cfg.Pools {
		st.order = append(st.order, pc.Name)
		st.conf[pc.Name] = pc
	}
	p.cur.Store(st)

	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errors.New("admin: plane closed")
	}
	a := cfg.Admin
	if p.srv != nil {
		if a.Address != p.addr {
			p.log.Warn("admin.address cannot change on reload; restart to move the admin listener", "listening", p.ln.Addr().String(), "configured", a.Address)
		}
		if a.Token != p.token || a.ReadToken != p.readToken || a.ReadsProtected() != p.reads {
			p.token, p.readToken, p.reads = a.Token, a.ReadToken, a.ReadsProtected()
			p.log.Info("admin tokens changed", "reads_need_token", p.reads)
		}
		return nil
	}
	if a.Address == "" {
		return nil
	}
	ln, err := net.Listen("tcp", a.Address)
	if err != nil {
		return fmt.Errorf("admin listener: %w", err)
	}
	p.ln, p.addr, p.token, p.readToken, p.reads = ln, a.Address, a.Token, a.ReadToken, a.ReadsProtected()
	p.srv = &http.Server{Handler: p.Handler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	p.served = make(chan struct{})
	go func(srv *http.Server, done chan struct{}) {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			p.log.Error("admin listener failed", "error", err)
		}
	}(p.srv, p.served)
	p.log.Info("admin listening", "address", "http://"+ln.Addr().String())
	return nil
}

// Check reports whether cfg may be installed. The rule is the configuration's (config.
// LoopbackOnly): an admin listener that other hosts can reach needs a token. After start the
// bound socket decides, not the file: a reload cannot move the listener, so a file that moves
// admin.address to loopback and drops the token would otherwise leave the old socket open on
// every interface without one.
func (p *Plane) Check(cfg *config.Config) error {
	a := cfg.Admin
	for _, t := range []struct{ key, v string }{{"token", a.Token}, {"read_token", a.ReadToken}} {
		if err := config.CheckToken(t.v); t.v != "" && err != nil {
			return fmt.Errorf("admin.%s %v", t.key, err)
		}
	}
	if err := p.checkBackends(cfg); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil && !config.LoopbackOnly(p.ln.Addr().String()) && config.LoopbackOnly(a.Address) && !a.ReadsProtected() && a.Token != "" {
		// The file's loopback address made reads open by default; the socket is not loopback.
		return fmt.Errorf("admin listener %s is reachable from other hosts and a reload cannot move it: keep admin.reads: token (or restart to listen on loopback)", p.ln.Addr())
	}
	if a.Token != "" {
		return nil
	}
	switch {
	case p.ln != nil && !config.LoopbackOnly(p.ln.Addr().String()):
		return fmt.Errorf("admin listener %s is reachable from other hosts and a reload cannot move it: keep admin.token (or restart to listen on loopback)", p.ln.Addr())
	case p.ln == nil && a.Address != "" && !config.LoopbackOnly(a.Address):
		return fmt.Errorf("admin listener %s is reachable from other hosts: set admin.token", a.Address)
	}
	return nil
}

// Addr is the admin listener's bound address, or "" when there is none.
func (p *Plane) Addr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln == nil {
		return ""
	}
	return p.ln.Addr().String()
}

func (p *Plane) currentToken() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.token
}

// Close stops the admin listener and waits for it.
func (p *Plane) Close() {
	p.mu.Lock()
	p.closed = true
	srv, done := p.srv, p.served
	p.mu.Unlock()
	if srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = srv.Shutdown(ctx)
		cancel()
		_ = srv.Close()
		<-done
	}
}
