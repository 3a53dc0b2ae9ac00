package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"syscall"

	"ballast/lab/backend"
)

func init() {
	register(command{name: "backend", summary: "run an emulated backend (K workers, FIFO, service time)", run: runBackend})
}

func runBackend(args []string, stdout, stderr io.Writer) int {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	stop := ctx.Done()
	return serveBackend(args, stdout, stderr, stop, nil)
}

// serveBackend runs the backends until stop is closed; ready, if set, sees the running Server.
func serveBackend(args []string, stdout, stderr io.Writer, stop <-chan struct{}, ready func(*backend.Server)) int {
	fs := newFlagSet("ballast backend", stderr)
	var c backend.Config
	listen := fs.String("listen", "127.0.0.1:8081", "`address` to listen on (host:port; port 0 picks one)")
	ports := fs.String("ports", "", "serve one backend per port in the `range` A-B on the --listen host, named NAME-PORT")
	fs.StringVar(&c.Name, "name", "backend", "backend `name`, sent in X-Ballast-Backend and X-Backend-Name")
	fs.IntVar(&c.Workers, "workers", 1, "requests served at once (`K`); the rest wait in FIFO order")
	fs.DurationVar(&c.Service, "service", 0, "service time, or its mean with --dist (`duration`); ?wait=S or ?ms=MS override it")
	fs.StringVar(&c.Dist, "dist", "fixed", "service time `distribution`: fixed, exp or lognormal")
	fs.Float64Var(&c.Sigma, "sigma", 1, "lognormal shape (the mean stays --service)")
	fs.IntVar(&c.Body, "body", backend.DefaultBody, "response body size in `bytes`")
	fs.Float64Var(&c.ErrorRate, "error-rate", 0, "`fraction` of requests answered 500; which ones is fixed by --seed and the request's number")
	fs.Float64Var(&c.ResetRate, "reset-rate", 0, "`fraction` of requests answered by resetting the connection")
	fs.Uint64Var(&c.Seed, "seed", 1, "random `seed` for distributions, errors and resets")
	fs.BoolVar(&c.Spin, "spin", false, "spin through the last millisecond of service for sub-millisecond latency fidelity (costs CPU)")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "ballast backend: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if c.Body == 0 {
		c.Body = -1 // an explicit --body 0 means an empty body
	}
	var (
		srv *backend.Server
		err error
	)
	if *ports != "" {
		var from, to int
		from, to, err = backend.ParsePorts(*ports)
		if err == nil {
			host, _, splitErr := net.SplitHostPort(*listen)
			if splitErr != nil {
				host = *listen
			}
			srv, err = backend.ListenPorts(host, from, to, c)
		}
	} else {
		srv, err = backend.Listen(*listen, c)
	}
	if err != nil {
		fmt.Fprintf(stderr, "ballast backend: %v\n", err)
		return 1
	}
	addrs := srv.Addrs()
	if len(addrs) == 1 {
		fmt.Fprintf(stdout, "ballast backend %s listening on %s (%d workers, service %v %s)\n", srv.Names()[0], addrs[0], max(c.Workers, 1), c.Service, c.Dist)
	} else {
		fmt.Fprintf(stdout, "ballast backend: %d backends on %s .. %s (%d workers each, service %v %s)\n", len(addrs), addrs[0], addrs[len(addrs)-1], max(c.Workers, 1), c.Service, c.Dist)
	}
	if ready != nil {
		ready(srv)
	}
	<-stop
	st := srv.Stats()
	if err := srv.Close(); err != nil {
		fmt.Fprintf(stderr, "ballast backend: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "ballast backend: %d connections, %d requests, %d completed, %d errors, %d resets\n", st.Conns, st.Requests, st.Completed, st.Errors, st.Resets)
	return 0
}
