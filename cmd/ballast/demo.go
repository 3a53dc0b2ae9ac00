package main

import (
	"fmt"
	"io"
	"os/signal"
	"time"

	"ballast/config"
	"ballast/lab/backend"
	"ballast/server"
)

func init() {
	register(command{name: "demo", summary: "start three emulated backends of different speeds behind Ballast, to try it", run: runDemo})
}

// demoBackend is one of the demo's emulated servers.
type demoBackend struct {
	name    string
	workers int
	service time.Duration
}

// demoBackends differ in speed by a factor of 40 so that the split under load is obvious.
var demoBackends = []demoBackend{
	{"fast", 8, 2 * time.Millisecond},
	{"medium", 4, 5 * time.Millisecond},
	{"slow", 1, 10 * time.Millisecond},
}

func runDemo(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("demo", stderr)
	listen := fs.String("listen", "127.0.0.1:8080", "`address` Ballast listens on")
	balancer := fs.String("balancer", "sqf", "balancing `algorithm`; try roundrobin to see the slow backend hold everyone up")
	adminAddr := fs.String("admin", "127.0.0.1:9090", "`address` of the status page, runtime API and /metrics (empty: none)")
	grace := fs.Duration("grace", 5*time.Second, "on Ctrl-C, how long in-flight requests may take to finish")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: ballast demo [--listen ADDR] [--balancer NAME] [--admin ADDR]\n\nStarts three emulated backends (fast, medium, slow) in this process and Ballast in front of them.")
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}

	sigs := server.NotifySignals()
	defer signal.Stop(sigs)
	var servers []*backend.Server
	defer func() {
		for _, s := range servers {
			_ = s.Close()
		}
	}()
	pool := config.Pool{Name: "demo", Balancer: *balancer}
	for _, d := range demoBackends {
		s, err := backend.Listen("127.0.0.1:0", backend.Config{Name: d.name, Workers: d.workers, Service: d.service})
		if err != nil {
			fmt.Fprintf(stderr, "ballast demo: backend %s: %v\n", d.name, err)
			return 1
		}
		servers = append(servers, s)
		pool.Backends = append(pool.Backends, config.Backend{Address: s.Addr(), Name: d.name, Weight: 1})
	}
	cfg := &config.Config{
		Listeners: []config.Listener{{Address: *listen, ExposeBackend: true}},
		Pools:     []config.Pool{pool},
		Admin:     config.Admin{Address: *adminAddr},
	}
	if err := config.Check("demo", cfg); err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	logger, level := server.NewLogger(stderr, cfg.Logging)
	srv, err := server.Start(cfg, server.Options{Logger: logger, Level: level})
	if err != nil {
		fmt.Fprintf(stderr, "ballast demo: %v\n", err)
		return 1
	}
	url := "http://" + srv.Addr(cfg.Listeners[0].Name).String() + "/"

	fmt.Fprintf(stdout, "Ballast demo: three emulated backends, one load balancer (%s).\n\n", *balancer)
	for i, d := range demoBackends {
		capacity := float64(d.workers) / d.service.Seconds()
		fmt.Fprintf(stdout, "  %-7s %-22s %d worker(s) x %-5v = %4.0f req/s\n", d.name, servers[i].Addr(), d.workers, d.service, capacity)
	}
	fmt.Fprintf(stdout, "  ballast %-22s %s; X-Ballast-Backend names the backend that answered\n", url, *balancer)
	if a := srv.AdminAddr(); a != "" {
		fmt.Fprintf(stdout, "  status  http://%-15s live per-backend load, weights, drain (and /metrics)\n", a+"/")
	}
	fmt.Fprintln(stdout)
	fmt.Fprintf(stdout, "Send load and watch the split follow the backends' speeds:\n")
	fmt.Fprintf(stdout, "  go run ./cmd/ballast bench -k -n 2000 -c 16 %s\n", url)
	fmt.Fprintf(stdout, "or with curl 7.84+ (2000 requests, 16 at a time):\n")
	fmt.Fprintf(stdout, "  curl -s -Z --parallel-max 16 -o /dev/null -w '%%header{x-ballast-backend}\\n' '%s?[1-2000]' 2>/dev/null | sort | uniq -c\n", url)
	fmt.Fprintf(stdout, "Ctrl-C stops everything.\n")
	return srv.Run(sigs, *grace)
}
