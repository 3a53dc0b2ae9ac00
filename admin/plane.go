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

// Plane runs the health monitor, the metrics and (when configured) the admin listener.
type Plane struct {
	log     *slog.Logger
	Health  *health.Monitor
	metrics *metrics
	key     [32]byte // HMAC key of the page nonces; random per process

	cur atomic.Pointer[state]

	mu     sync.Mutex
	srv    *http.Server
	ln     net.Listener
	addr   string // as configured
	token  string
	served chan struct{}
	closed bool
}

// New creates a Plane; nothing listens until Install sees an admin address.
func New(logger *slog.Logger) *Plane {
	if logger == nil {
		logger = slog.Default()
	}
	p := &Plane{log: logger}
	if _, err := rand.Read(p.key[:]); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	p.metrics = newMetrics(p)
	p.Health = health.New(context.Background(), health.Options{
		Logger:  logger,
		OnEvent: p.metrics.event,
		OnProbe: p.metrics.probe,
	})
	observerOnce.Do(func() {
		upstream.SetReleaseObserver(func(pl *upstream.Pool, b *upstream.Backend, d time.Duration, failed bool) {
			if cur := activePlane.Load(); cur != nil {
				cur.metrics.release(pl, b, d, failed)
			}
		})
	})
	activePlane.Store(p)
	return p
}

// The release observer is process-wide, as upstream's hook is; it feeds the newest Plane, so a
// test that runs several instances in turn, or closes one while another runs, stays correct.
var (
	observerOnce sync.Once
	activePlane  atomic.Pointer[Plane]
)

// Install publishes cfg and pools to the API, the page, the metrics and the health monitor.
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
	p.Health.Update(pools, cfg.Pools)

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
		if a.Token != p.token {
			p.token = a.Token
			p.log.Info("admin token changed")
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
	p.ln, p.addr, p.token = ln, a.Address, a.Token
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
	if a.Token != "" {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
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

// Close stops the health monitor and the admin listener, and waits for both.
func (p *Plane) Close() {
	p.mu.Lock()
	p.closed = true
	srv, done := p.srv, p.served
	p.mu.Unlock()
	p.Health.Close()
	if srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = srv.Shutdown(ctx)
		cancel()
		_ = srv.Close()
		<-done
	}
	activePlane.CompareAndSwap(p, nil)
}
