package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"

	"ballast/config"
	"ballast/server"
)

func init() {
	register(command{name: "serve", summary: "run the load balancer (-c FILE, or --listen/--backend without a file)", run: runServe})
}

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
	// mode is what the listener balances: http, tcp or udp (every other flag means the same in
	// each), or dr|tun|nat for the XDP director (serve_xdp.go).
	mode          string
	director      directorFlags // --iface, --udp
	ha            haFlags       // --ha-* (serve_ha.go)
	sendProxy     string
	acceptProxy   bool
	listen        string
	balancer      string
	backends      stringList
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
	if isDirectorMode(q.mode) {
		return q.directorConfig()
	}
	c := &config.Config{
		Listeners: []config.Listener{{Address: q.listen, Protocol: q.mode, AcceptProxy: q.acceptProxy, ExposeBackend: q.exposeBackend}},
		Pools: []config.Pool{{
			Name:         "default",
			Balancer:     q.balancer,
			MaxConns:     q.maxConns,
			MaxQueue:     q.maxQueue,
			QueueTimeout: config.Duration{Duration: q.queueTimeout},
			SendProxy:    q.sendProxy,
		}},
	}
	c.Admin.Address = q.admin
	if q.healthPath != "" || q.healthInterval > 0 {
		// An empty type is the pool's default: http, or tcp for a tcp or udp listener.
		c.Pools[0].Health = config.HealthCheck{Path: q.healthPath, Interval: config.Duration{Duration: q.healthInterval}}
		if q.healthPath != "" {
			c.Pools[0].Health.Type = "http"
		}
	}
	for _, b := range q.backends {
		c.Pools[0].Backends = append(c.Pools[0].Backends, config.Backend{Address: b, Weight: 1})
	}
	q.ha.apply(c)
	if err := config.Check("flags", c); err != nil {
		return nil, err
	}
	return c, nil
}

func runServe(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("serve", stderr)
	file := fs.String("c", "", "configuration `file` (re-read on SIGHUP)")
	grace := fs.Duration("grace", 30*time.Second, "on SIGTERM/SIGINT, how long in-flight requests may take to finish")
	var q quickForm
	fs.StringVar(&q.mode, "mode", config.ProtocolHTTP, "quick form: what to balance: http, tcp or udp, or dr, tun, nat for the XDP director (docs/xdp.md)")
	q.director.register(fs)
	q.ha.register(fs)
	fs.StringVar(&q.listen, "listen", "127.0.0.1:8080", "quick form: `address` to listen on (with --mode dr|tun|nat: the VIP)")
	fs.StringVar(&q.balancer, "balancer", "", "quick form: balancing `algorithm` (default "+config.DefaultBalancer+", "+config.DefaultL4Balancer+" for tcp and udp, maglev with --mode dr|tun|nat; see docs/config.md)")
	fs.StringVar(&q.sendProxy, "send-proxy", "", "quick form, tcp: send a PROXY protocol `version` (v1 or v2) header to backends")
	fs.BoolVar(&q.acceptProxy, "accept-proxy", false, "quick form, http or tcp: require a PROXY protocol header from clients")
	fs.Var(&q.backends, "backend", "quick form: backend `host:port` (repeat the flag for each backend)")
	fs.IntVar(&q.maxConns, "max-conns", 0, "quick form: connection limit per backend (0 = none)")
	fs.IntVar(&q.maxQueue, "max-queue", 0, "quick form: backlog queue length when every backend is at max-conns")
	fs.Var(durationFlag{&q.queueTimeout}, "queue-timeout", "quick form: longest wait in the backlog (default 30s with a queue)")
	fs.BoolVar(&q.exposeBackend, "expose-backend", false, "quick form: add X-Ballast-Backend to responses")
	fs.StringVar(&q.admin, "admin", "", "quick form: admin API, status page and /metrics `address` (e.g. 127.0.0.1:9090)")
	fs.StringVar(&q.healthPath, "health-path", "", "quick form: HTTP health check `path` (turns active checks on)")
	fs.Var(durationFlag{&q.healthInterval}, "health-interval", "quick form: health check interval (default 2s when checks are on; a TCP connect check in tcp and udp mode without --health-path)")
	fs.Usage = func() {
		fmt.Fprint(stderr, `usage: ballast serve -c FILE
       ballast serve [--mode http|tcp|udp] --listen ADDR --backend HOST:PORT [--backend HOST:PORT ...] [--balancer NAME]
       ballast serve --mode dr|tun|nat --iface IFACE --listen VIP:PORT --backend RIP:PORT [...]
       ... [--ha-iface IFACE --ha-vrid N --ha-priority P [--ha-advert D] [--ha-peer IP ...] [--ha-address CIDR ...]]

Runs the load balancer. SIGHUP re-reads FILE (a broken file is logged and the running
configuration kept); SIGTERM or SIGINT stops accepting and lets in-flight requests finish.

`)
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args); !ok {
		return code
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
		switch {
		case q.mode == config.ProtocolHTTP, q.mode == config.ProtocolTCP, q.mode == config.ProtocolUDP, isDirectorMode(q.mode):
			cfg, err = q.config()
		default:
			fmt.Fprintf(stderr, "ballast serve: unknown --mode %q (valid: http, tcp, udp, dr, tun, nat)\n", q.mode)
			return 2
		}
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

	sigs := server.NotifySignals()
	defer signal.Stop(sigs)
	logger, level := server.NewLogger(stderr, cfg.Logging)
	srv, err := server.Start(cfg, server.Options{File: *file, Logger: logger, Level: level})
	if err != nil {
		fmt.Fprintf(stderr, "ballast serve: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "ballast: serving on %s\n", srv.Describe())
	return srv.Run(sigs, *grace)
}
