package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"

	"ballast/admin"
	"ballast/config"
	"ballast/health"
	"ballast/upstream"
)

// Options are what a Server needs besides its first configuration.
type Options struct {
	// File is re-read by Reload; empty (the quick form, the demo) makes Reload a no-op.
	File string
	// Logger receives the error log (and the access log when configured); nil discards it.
	Logger *slog.Logger
	// Level, when set, follows logging.level across reloads.
	Level *slog.LevelVar
}

// Server is one running load balancer.
type Server struct {
	file   string
	logger *slog.Logger
	level  *slog.LevelVar

	ctx    context.Context // the health monitor's; cancelled by Shutdown
	cancel context.CancelFunc
	health *health.Monitor
	ops    *admin.Plane
	planes []Plane
	disc   *discoveryPlane // the pools' discovery sources (discovery.go)
	fleet  fleetState      // the fleet on etcd (fleet.go)
	ha     *haPlane        // the VRRP virtual router (server/ha.go), last of the planes
	bgp    *bgpPlane       // the BGP speaker of a scale-out director (server/bgp.go)

	mu        sync.Mutex // guards cfg and listeners against readers outside the signal loop
	cfg       *config.Config
	pools     map[string]*upstream.Pool
	listeners map[string]*socket

	serveErr chan error
	wg       sync.WaitGroup
}

// Start builds pools, planes, the health monitor and the admin plane for cfg, binds every
// listener and starts serving. On error nothing is left running.
func Start(cfg *config.Config, o Options) (*Server, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{
		file: o.File, logger: o.Logger, level: o.Level, ctx: ctx, cancel: cancel,
		listeners: map[string]*socket{}, serveErr: make(chan error, 16),
	}
	s.ops = admin.New(o.Logger)
	s.health = health.New(ctx, s.ops.HealthOptions())
	s.ops.Watch(s.health)
	http := newHTTPPlane(o.Logger)
	l4 := newL4Plane(o.Logger)
	s.planes = []Plane{http, l4}
	s.ops.Count(http)
	if http.engine != nil {
		s.ops.CountHTTP1(http.engine.Stats)
		s.ops.CountHTTP2(http.engine.HTTP2Counters())
		s.ops.CountHTTP2Backends(http.engine.H2BackendStats)
	}
	xdp := newXDPPlane(o.Logger) // the XDP directors (server/xdpplane.go)
	s.planes = append(s.planes, xdp)
	s.ops.ShowDirectors(xdp)
	s.ha = newHAPlane(o.Logger, xdp) // after the directors: flow sync needs them swapped in
	s.planes = append(s.planes, s.ha)
	s.ops.ShowHA(s.ha)
	s.bgp = newBGPPlane(o.Logger, xdp) // after the directors: it reads their tables
	s.planes = append(s.planes, s.bgp)
	s.ops.ShowBGP(s.bgp)
	s.ops.CountListeners(http, l4)
	s.ops.CountConns(l4)
	s.disc = newDiscoveryPlane(ctx, o.Logger)
	s.ops.ShowDiscovery(s.disc)
	s.ops.SetSelf(s.selfAddrs) // server/self.go

	s.disc.prepare(cfg)
	if err := s.fleetPrepare(cfg); err != nil {
		s.stop()
		return nil, err
	}
	pools, err := s.buildPools(cfg, nil)
	if err != nil {
		s.stop()
		return nil, err
	}
	opened, err := s.openListeners(cfg)
	if err != nil {
		closePools(pools)
		s.stop()
		return nil, err
	}
	undo := func() {
		_ = s.ha.Shutdown(context.Background())
		_ = s.bgp.Shutdown(context.Background())
		_ = xdp.Shutdown(context.Background()) // detaches directors the swap attached
		closeSockets(opened)
		closePools(pools)
		s.stop()
	}
	if err := s.swapPlanes(cfg, pools); err != nil {
		undo()
		return nil, err
	}
	if err := s.ops.Install(cfg, pools); err != nil {
		undo()
		return nil, err
	}
	s.health.Update(pools, cfg.Pools)
	s.disc.install(cfg, pools)
	s.fleetInstall(pools)
	s.cfg, s.pools = cfg, pools
	for _, so := range opened {
		s.serve(so)
	}
	return s, nil
}

// stop ends what Start made before any socket is served: the admin plane and the monitor.
func (s *Server) stop() {
	s.fleetClose()
	s.ops.Close()
	s.cancel()
	s.health.Close()
}

// buildPools builds one upstream.Pool per configured pool, reusing the backends of prev's pool
// of the same name so that counters and connections survive a reload. On error it closes
// what it built, which hands reused backends back to prev.
func (s *Server) buildPools(cfg *config.Config, prev map[string]*upstream.Pool) (map[string]*upstream.Pool, error) {
	pools := make(map[string]*upstream.Pool, len(cfg.Pools))
	for _, pc := range cfg.Pools {
		p, err := upstream.NewPool(s.disc.extend(pc.Name, pc.Spec(s.ops.ObserveRelease)), prev[pc.Name])
		if err != nil {
			closePools(pools)
			return nil, err
		}
		pools[pc.Name] = p
	}
	return pools, nil
}

func closePools(pools map[string]*upstream.Pool) {
	for _, p := range pools {
		p.Close()
	}
}

// swapPlanes gives every plane cfg and pools. If one refuses, the planes already swapped go
// back to the running configuration, so that all planes always serve the same one.
func (s *Server) swapPlanes(cfg *config.Config, pools map[string]*upstream.Pool) error {
	for i, pl := range s.planes {
		if err := pl.Swap(cfg, pools); err != nil {
			for _, done := range s.planes[:i] {
				if s.cfg == nil {
					break // at start there is nothing to go back to; Start undoes it all
				}
				if rerr := done.Swap(s.cfg, s.pools); rerr != nil {
					s.logger.Error("plane could not go back to the running configuration", "plane", done.Name(), "error", rerr)
				}
			}
			return fmt.Errorf("%s plane: %w", pl.Name(), err)
		}
	}
	return nil
}

// Addr is the bound address of the named listener, or nil.
func (s *Server) Addr(listener string) net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, so := range s.listeners {
		if so.conf.Name == listener {
			return so.sock.Addr()
		}
	}
	return nil
}

// AdminAddr is the admin listener's bound address, or "" when there is none.
func (s *Server) AdminAddr() string { return s.ops.Addr() }

// Describe says where the server listens and what it balances, for the start-up line: each
// listener as a URL (http, https for a TLS listener, tcp or udp), then each pool.
func (s *Server) Describe() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var parts []string
	for _, l := range s.cfg.Listeners {
		if so := s.listeners[listenerKey(l)]; so != nil {
			scheme := "http://"
			switch {
			case l.IsL4():
				scheme = l.Protocol + "://"
			case l.TLS != nil:
				scheme = "https://"
			}
			parts = append(parts, scheme+so.sock.Addr().String())
		} else if l.IsDirector() {
			parts = append(parts, fmt.Sprintf("VIP %s/%s (XDP %s on %s)", l.Address, l.Protocol, l.Forwarding, l.Interface))
		}
	}
	var pools []string
	for _, pc := range s.cfg.Pools {
		desc := fmt.Sprintf("%s: %s over %d backends", pc.Name, pc.Balancer, len(pc.Backends))
		if pc.Discovery != nil {
			desc += " and discovered ones" // server/discovery.go
		}
		pools = append(pools, desc)
	}
	return strings.Join(parts, ", ") + " (pool " + strings.Join(pools, "; pool ") + ")"
}

// Reload re-reads the file and installs it, or logs why not and keeps the running
// configuration; it returns the reason it refused.
func (s *Server) Reload() error {
	if s.file == "" {
		s.logger.Warn("SIGHUP ignored: the quick form has no configuration file to re-read")
		return nil
	}
	s.logger.Info("reloading", "file", s.file)
	cfg, err := config.Load(s.file)
	if err != nil {
		var es config.Errors
		if errors.As(err, &es) {
			for _, e := range es {
				s.logger.Error("reload rejected", "error", e.Error())
			}
		} else {
			s.logger.Error("reload rejected", "error", err)
		}
		s.logger.Error("configuration NOT reloaded; still serving the previous one", "file", s.file)
		return err
	}
	if err := s.install(cfg); err != nil {
		s.logger.Error("configuration NOT reloaded; still serving the previous one", "file", s.file, "error", err)
		return err
	}
	s.logger.Info("configuration reloaded", "file", s.file, "listeners", len(cfg.Listeners), "pools", len(cfg.Pools), "routes", len(cfg.Routes))
	return nil
}

// install swaps a validated configuration in (see the package documentation). If anything
// fails before the planes are swapped, everything built for it is undone.
func (s *Server) install(cfg *config.Config) error {
	if err := s.ops.Check(cfg); err != nil {
		return err
	}
	s.disc.prepare(cfg)
	if err := s.fleetPrepare(cfg); err != nil {
		s.disc.abort()
		return err
	}
	pools, err := s.buildPools(cfg, s.pools)
	if err != nil {
		s.undoPrepare()
		return err
	}
	opened, err := s.openListeners(cfg)
	if err != nil {
		closePools(pools)
		s.undoPrepare()
		return err
	}
	if err := s.swapPlanes(cfg, pools); err != nil {
		closeSockets(opened)
		closePools(pools)
		s.undoPrepare()
		return err
	}
	old := s.pools
	if cfg.Logging.Format != s.cfg.Logging.Format {
		s.logger.Warn("logging.format applies at start only; restart to change it", "running", s.cfg.Logging.Format, "file", cfg.Logging.Format)
	}
	s.mu.Lock()
	s.cfg, s.pools = cfg, pools
	s.mu.Unlock()
	if s.level != nil {
		s.level.Set(SlogLevel(cfg.Logging.Level))
	}
	if err := s.ops.Install(cfg, pools); err != nil { // before the old pools close: the API moves to the new ones
		s.logger.Error("admin listener not started", "error", err)
	}
	s.health.Update(pools, cfg.Pools) // checks move to the new pools
	s.disc.install(cfg, pools)        // discovery applies to the new pools
	s.fleetInstall(pools)
	closePools(old)
	s.closeRemoved(cfg)
	for _, so := range opened {
		s.serve(so)
		s.logger.Info("listener opened", "listener", so.conf.Name, "address", so.sock.Addr().String())
	}
	return nil
}

// Shutdown stops accepting on every plane, waits until in-flight work finishes or ctx ends,
// then stops the admin plane and the health monitor and closes the pools.
func (s *Server) Shutdown(ctx context.Context) error {
	// An HA master steps down first and keeps forwarding until another director takes over.
	s.ha.resign(ctx)
	// A scale-out director withdraws its routes and forwards while the routers move the flows.
	s.bgp.withdraw(ctx)
	// The planes stop together, so that none keeps accepting while another drains.
	errs := make([]error, len(s.planes))
	var wg sync.WaitGroup
	for i, pl := range s.planes {
		wg.Go(func() {
			if err := pl.Shutdown(ctx); err != nil {
				errs[i] = fmt.Errorf("%s plane: %w", pl.Name(), err)
			}
		})
	}
	wg.Wait()
	s.mu.Lock()
	for _, so := range s.listeners {
		so.removed = true
		_ = so.sock.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	s.stop()
	closePools(s.pools)
	return errors.Join(errs...)
}
