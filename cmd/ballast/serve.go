package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"time"

	"ballast/admin"
	"ballast/config"
	"ballast/httpproxy"
	"ballast/upstream"
)

func init() {
	register(command{name: "serve", summary: "run the load balancer (-c FILE, or --listen/--backend without a file)", run: runServe})
}

// listFlag collects a repeated flag such as --backend.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// durationFlag is a flag.Value over config.Duration, so the quick form reads durations exactly
// like a file does.
type durationFlag struct{ d *time.Duration }

func (f durationFlag) String() string {
	if f.d == nil {
		return ""
	}
	return f.d.String()
}

func (f durationFlag) Set(v string) error {
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return fmt.Errorf("%q is not a duration such as 5s or 250ms", v)
	}
	*f.d = d
	return nil
}

// quickForm is the serve flags that describe a one-pool configuration without a file.
type quickForm struct {
	listen        string
	balancer      string
	backends      listFlag
	maxConns      int
	maxQueue      int
	queueTimeout  time.Duration
	exposeBackend bool
	// admin, healthPath and healthInterval are the operations flags (--admin, --health-*).
	admin          string
	healthPath     string
	healthInterval time.Duration
}

// config builds the configuration the flags describe; config.Check then fills the defaults and
// validates it exactly as it would a file.
func (q *quickForm) config() (*config.Config, error) {
	c := &config.Config{
		Listeners: []config.Listener{{Address: q.listen, ExposeBackend: q.exposeBackend}},
		Pools: []config.Pool{{
			Name:         "default",
			Balancer:     q.balancer,
			MaxConns:     q.maxConns,
			MaxQueue:     q.maxQueue,
			QueueTimeout: config.Duration{Duration: q.queueTimeout},
		}},
	}
	c.Admin.Address = q.admin
	if q.healthPath != "" || q.healthInterval > 0 {
		c.Pools[0].Health = config.HealthCheck{Type: "http", Path: q.healthPath, Interval: config.Duration{Duration: q.healthInterval}}
	}
	for _, b := range q.backends {
		c.Pools[0].Backends = append(c.Pools[0].Backends, config.Backend{Address: b, Weight: 1})
	}
	if err := config.Check("flags", c); err != nil {
		return nil, err
	}
	return c, nil
}

func runServe(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	file := fs.String("c", "", "configuration `file` (re-read on SIGHUP)")
	grace := fs.Duration("grace", 30*time.Second, "on SIGTERM/SIGINT, how long in-flight requests may take to finish")
	var q quickForm
	fs.StringVar(&q.listen, "listen", "127.0.0.1:8080", "quick form: `address` to listen on")
	fs.StringVar(&q.balancer, "balancer", config.DefaultBalancer, "quick form: balancing `algorithm` (see docs/config.md)")
	fs.Var(&q.backends, "backend", "quick form: backend `host:port` (repeat the flag for each backend)")
	fs.IntVar(&q.maxConns, "max-conns", 0, "quick form: connection limit per backend (0 = none)")
	fs.IntVar(&q.maxQueue, "max-queue", 0, "quick form: backlog queue length when every backend is at max-conns")
	fs.Var(durationFlag{&q.queueTimeout}, "queue-timeout", "quick form: longest wait in the backlog (default 30s with a queue)")
	fs.BoolVar(&q.exposeBackend, "expose-backend", false, "quick form: add X-Ballast-Backend to responses")
	fs.StringVar(&q.admin, "admin", "", "quick form: admin API, status page and /metrics `address` (e.g. 127.0.0.1:9090)")
	fs.StringVar(&q.healthPath, "health-path", "", "quick form: HTTP health check `path` (turns active checks on)")
	fs.Var(durationFlag{&q.healthInterval}, "health-interval", "quick form: health check interval (default 2s when checks are on)")
	fs.Usage = func() {
		fmt.Fprint(stderr, `usage: ballast serve -c FILE
       ballast serve --listen ADDR --backend HOST:PORT [--backend HOST:PORT ...] [--balancer NAME]

Runs the load balancer. SIGHUP re-reads FILE (a broken file is logged and the running
configuration kept); SIGTERM or SIGINT stops accepting and lets in-flight requests finish.

`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "ballast serve: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	quick := false
	fs.Visit(func(f *flag.Flag) {
		if f.Name != "c" && f.Name != "grace" {
			quick = true
		}
	})

	var cfg *config.Config
	var err error
	switch {
	case *file != "" && quick:
		fmt.Fprintln(stderr, "ballast serve: use either -c FILE or the quick-form flags (--listen, --backend, ...), not both")
		return 2
	case quick && len(q.backends) == 0:
		fmt.Fprintln(stderr, "ballast serve: the quick form needs at least one --backend HOST:PORT")
		return 2
	case quick:
		cfg, err = q.config()
	default:
		if *file == "" {
			*file = "ballast.yaml"
			if _, statErr := os.Stat(*file); statErr != nil {
				fmt.Fprintln(stderr, "ballast serve: no ballast.yaml here; give -c FILE, or --backend HOST:PORT for the quick form (ballast serve -h)")
				return 2
			}
		}
		cfg, err = config.Load(*file)
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}

	sigs := notifySignals()
	defer signal.Stop(sigs)
	logger, level := newLogger(stderr, cfg.Logging)
	inst, err := startInstance(cfg, *file, logger, level)
	if err != nil {
		fmt.Fprintf(stderr, "ballast serve: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "ballast: serving on %s\n", inst.describe())
	return inst.run(*grace, sigs)
}

// notifySignals starts catching the signals run handles. It is called before anything
// listens, so that a signal sent as soon as the first request is answered is never lost to
// the default action (which would kill the process without draining).
func notifySignals() chan os.Signal {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT, syscall.SIGUSR1)
	return sigs
}

// newLogger builds the error log; the level can change on reload, the format cannot.
func newLogger(w io.Writer, lc config.Logging) (*slog.Logger, *slog.LevelVar) {
	level := new(slog.LevelVar)
	level.Set(slogLevel(lc.Level))
	opts := &slog.HandlerOptions{Level: level}
	if lc.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts)), level
	}
	return slog.New(slog.NewTextHandler(w, opts)), level
}

func slogLevel(s string) slog.Level {
	switch s {
	case "debug":
		return slog.LevelDebug
	case "warn":
		return slog.LevelWarn
	case "error":
		return slog.LevelError
	}
	return slog.LevelInfo
}

// openListener is a bound socket and the configured listener it serves.
type openListener struct {
	conf    config.Listener // as configured (the address may have port 0)
	ln      net.Listener
	removed bool // closed by a reload: its Serve ending is expected
}

// onceCloseListener lets both a reload (removing the listener) and the proxy's Shutdown close
// the socket; only the first Close does anything, so the second reports no error.
type onceCloseListener struct {
	net.Listener
	once sync.Once
	err  error
}

func (l *onceCloseListener) Close() error {
	l.once.Do(func() { l.err = l.Listener.Close() })
	return l.err
}

// key identifies a listener across reloads: same name and same configured address.
func listenerKey(l config.Listener) string { return l.Name + "\x00" + l.Address }

// instance is one running load balancer: its configuration, pools, proxy and sockets. Only
// the goroutine running run (signals) changes it after start; Serve goroutines report through
// serveErr.
type instance struct {
	file   string // empty for the quick form: SIGHUP has nothing to re-read
	logger *slog.Logger
	level  *slog.LevelVar

	mu        sync.Mutex // guards listeners against Serve goroutines reading removed
	cfg       *config.Config
	pools     map[string]*upstream.Pool
	proxy     *httpproxy.Proxy
	ops       *admin.Plane // health checks, outlier ejection, admin API, status page, metrics
	listeners map[string]*openListener

	serveErr chan error
	wg       sync.WaitGroup
}

// startInstance builds pools and proxy for cfg, binds every listener and starts serving.
func startInstance(cfg *config.Config, file string, logger *slog.Logger, level *slog.LevelVar) (*instance, error) {
	s := &instance{file: file, logger: logger, level: level, listeners: map[string]*openListener{}, serveErr: make(chan error, 16)}
	pools, err := buildPools(cfg, nil)
	if err != nil {
		return nil, err
	}
	opened, err := s.openListeners(cfg)
	if err != nil {
		closePools(pools)
		return nil, err
	}
	running := withBoundAddresses(cfg, s.boundAddresses(opened))
	proxy, err := httpproxy.New(running, pools, logger)
	if err != nil {
		closeListeners(opened)
		closePools(pools)
		return nil, err
	}
	s.cfg, s.pools, s.proxy = cfg, pools, proxy
	s.ops = admin.New(logger)
	if err := s.ops.Install(cfg, pools); err != nil {
		s.ops.Close()
		closeListeners(opened)
		closePools(pools)
		return nil, err
	}
	for _, ol := range opened {
		s.serve(ol)
	}
	return s, nil
}

// buildPools builds one upstream.Pool per configured pool, reusing the backends of prev's pool
// of the same name so that counters and connections survive a reload. On error it closes
// what it built, which hands reused backends back to prev.
func buildPools(cfg *config.Config, prev map[string]*upstream.Pool) (map[string]*upstream.Pool, error) {
	pools := make(map[string]*upstream.Pool, len(cfg.Pools))
	for _, pc := range cfg.Pools {
		p, err := upstream.NewPool(pc, prev[pc.Name])
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

func closeListeners(ls []*openListener) {
	for _, ol := range ls {
		_ = ol.ln.Close()
	}
}

// openListeners binds the listeners of cfg that are not open yet. On error it closes the
// ones it opened.
func (s *instance) openListeners(cfg *config.Config) ([]*openListener, error) {
	var opened []*openListener
	for _, l := range cfg.Listeners {
		if _, ok := s.listeners[listenerKey(l)]; ok {
			continue
		}
		// No TCP keep-alive probes on client connections (HAProxy's default, option tcpka off):
		// idle_timeout closes idle clients, and the probes' setsockopt calls cost every accept.
		ln, err := (&net.ListenConfig{KeepAlive: -1}).Listen(context.Background(), "tcp", l.Address)
		if err != nil {
			closeListeners(opened)
			for _, ol := range s.listeners {
				if ol.conf.Address == l.Address {
					return nil, fmt.Errorf("listener %s: %s is already served by listener %s; a listener cannot be renamed by a reload, restart instead", l.Name, l.Address, ol.conf.Name)
				}
			}
			return nil, fmt.Errorf("listener %s: %w", l.Name, err)
		}
		opened = append(opened, &openListener{conf: l, ln: &onceCloseListener{Listener: ln}})
	}
	return opened, nil
}

// boundAddresses maps each listener key, open or just opened, to the address it is bound to.
func (s *instance) boundAddresses(opened []*openListener) map[string]string {
	m := map[string]string{}
	for k, ol := range s.listeners {
		m[k] = ol.ln.Addr().String()
	}
	for _, ol := range opened {
		m[listenerKey(ol.conf)] = ol.ln.Addr().String()
	}
	return m
}

// withBoundAddresses returns a copy of cfg whose listener addresses are the bound ones (a
// configured port 0 becomes the real port), so that the proxy can match sockets to listeners.
func withBoundAddresses(cfg *config.Config, bound map[string]string) *config.Config {
	c := *cfg
	c.Listeners = append([]config.Listener(nil), cfg.Listeners...)
	for i, l := range c.Listeners {
		if a, ok := bound[listenerKey(l)]; ok {
			c.Listeners[i].Address = a
		}
	}
	return &c
}

// serve starts the proxy on one listener in its own goroutine.
func (s *instance) serve(ol *openListener) {
	s.mu.Lock()
	s.listeners[listenerKey(ol.conf)] = ol
	s.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		err := s.proxy.Serve(ol.ln)
		s.mu.Lock()
		expected := ol.removed
		s.mu.Unlock()
		if err != nil && !expected {
			s.serveErr <- fmt.Errorf("listener %s (%s): %w", ol.conf.Name, ol.ln.Addr(), err)
		}
	}()
}

// describe says where the instance listens and what it balances, for the start-up line.
func (s *instance) describe() string {
	var parts []string
	for _, l := range s.cfg.Listeners {
		if ol := s.listeners[listenerKey(l)]; ol != nil {
			parts = append(parts, "http://"+ol.ln.Addr().String())
		}
	}
	var pools []string
	for _, pc := range s.cfg.Pools {
		pools = append(pools, fmt.Sprintf("%s: %s over %d backends", pc.Name, pc.Balancer, len(pc.Backends)))
	}
	return strings.Join(parts, ", ") + " (pool " + strings.Join(pools, "; pool ") + ")"
}

// run handles signals (from notifySignals) until a shutdown and returns the exit code.
func (s *instance) run(grace time.Duration, sigs <-chan os.Signal) int {
	for {
		select {
		case sig := <-sigs:
			if sig == syscall.SIGHUP {
				s.reload()
				continue
			}
			if sig == syscall.SIGUSR1 { // log rotation: reopen the access log file
				if err := s.proxy.ReopenAccessLog(); err != nil {
					s.logger.Error("access log not reopened", "error", err)
				}
				continue
			}
			return s.shutdown(sig, grace, sigs)
		case err := <-s.serveErr:
			s.logger.Error("listener failed; shutting down", "error", err)
			s.shutdown(nil, grace, sigs)
			return 1
		}
	}
}

// reload re-reads the file and installs it, or logs why not and keeps the running config.
func (s *instance) reload() {
	if s.file == "" {
		s.logger.Warn("SIGHUP ignored: the quick form has no configuration file to re-read")
		return
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
		return
	}
	if err := s.install(cfg); err != nil {
		s.logger.Error("configuration NOT reloaded; still serving the previous one", "file", s.file, "error", err)
		return
	}
	s.logger.Info("configuration reloaded", "file", s.file, "listeners", len(cfg.Listeners), "pools", len(cfg.Pools), "routes", len(cfg.Routes))
}

// install swaps a validated configuration in: new pools (reusing backends by ID), new
// listeners bound, the proxy's table swapped atomically, then old pools and removed listeners
// closed. If anything fails before the swap, everything built for it is undone.
func (s *instance) install(cfg *config.Config) error {
	pools, err := buildPools(cfg, s.pools)
	if err != nil {
		return err
	}
	opened, err := s.openListeners(cfg)
	if err != nil {
		closePools(pools)
		return err
	}
	running := withBoundAddresses(cfg, s.boundAddresses(opened))
	if err := s.proxy.Swap(running, pools); err != nil {
		closeListeners(opened)
		closePools(pools)
		return err
	}
	old := s.pools
	if cfg.Logging.Format != s.cfg.Logging.Format {
		s.logger.Warn("logging.format applies at start only; restart to change it", "running", s.cfg.Logging.Format, "file", cfg.Logging.Format)
	}
	s.cfg, s.pools = cfg, pools
	s.level.Set(slogLevel(cfg.Logging.Level))
	if err := s.ops.Install(cfg, pools); err != nil { // before the old pools close: checks move to the new ones
		s.logger.Error("admin listener not started", "error", err)
	}
	closePools(old)

	keep := map[string]config.Listener{}
	for _, l := range cfg.Listeners {
		keep[listenerKey(l)] = l
	}
	s.mu.Lock()
	for k, ol := range s.listeners {
		l, ok := keep[k]
		if !ok {
			ol.removed = true
			_ = ol.ln.Close()
			delete(s.listeners, k)
			s.logger.Info("listener closed", "listener", ol.conf.Name, "address", ol.ln.Addr().String())
			continue
		}
		if fixedOptionsChanged(ol.conf, l) {
			s.logger.Warn("listener timeouts, header limit and TLS apply to new sockets only; restart (or rename the listener) to change them", "listener", l.Name)
		}
	}
	s.mu.Unlock()
	for _, ol := range opened {
		s.serve(ol)
		s.logger.Info("listener opened", "listener", ol.conf.Name, "address", ol.ln.Addr().String())
	}
	return nil
}

// fixedOptionsChanged reports a change in the options a served listener cannot take on.
func fixedOptionsChanged(a, b config.Listener) bool {
	a.ExposeBackend, b.ExposeBackend = false, false
	a.ListenerPolicy, b.ListenerPolicy = config.ListenerPolicy{}, config.ListenerPolicy{} // applied by Swap
	if (a.TLS == nil) != (b.TLS == nil) || (a.TLS != nil && *a.TLS != *b.TLS) {
		return true
	}
	a.TLS, b.TLS = nil, nil
	return !reflect.DeepEqual(a, b)
}

// shutdown stops accepting, waits up to grace for in-flight requests, and returns the exit
// code: 0 when everything finished in time. A second signal gives up waiting.
func (s *instance) shutdown(sig os.Signal, grace time.Duration, sigs <-chan os.Signal) int {
	if sig != nil {
		s.logger.Info("shutting down: no new connections, waiting for in-flight requests", "signal", sig.String(), "grace", grace.String())
	}
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	go func() {
		select {
		case sig := <-sigs:
			if sig != syscall.SIGHUP && sig != syscall.SIGUSR1 {
				s.logger.Warn("second signal: not waiting any longer", "signal", sig.String())
				cancel()
			}
		case <-ctx.Done():
		}
	}()
	err := s.proxy.Shutdown(ctx)
	s.mu.Lock()
	for _, ol := range s.listeners {
		ol.removed = true
		_ = ol.ln.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	s.ops.Close()
	closePools(s.pools)
	if err != nil {
		s.logger.Error("in-flight requests did not finish in time", "error", err)
		return 1
	}
	s.logger.Info("stopped")
	return 0
}
