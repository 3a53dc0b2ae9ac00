package lab

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Target is one backend as a proxy's configuration names it.
type Target struct {
	Name   string // the backend's name (what it sends in X-Ballast-Backend)
	Addr   string // host:port
	Weight int    // 0 means 1
}

// PoolSpec is the one pool a scenario runs Ballast with.
type PoolSpec struct {
	Balancer string
	Backends []Target
	// MaxConns is the per-backend connection limit (lighttpd's max-pool-size); 0 = none.
	MaxConns int
	// MaxQueue turns on the central backlog queue of this length.
	MaxQueue int
	// Hedge, when positive, sends a second copy of a request unanswered after this delay.
	Hedge time.Duration
	// HedgeBudget is the retry budget for hedged runs (0 keeps Ballast's default).
	HedgeBudget float64
	// HashURI hashes the request URI, for the algorithms that need a key.
	HashURI bool
	// GOMAXPROCS, when positive, limits the Ballast process to that many threads running Go.
	GOMAXPROCS int
	// Admin, when set, is the admin listener's address (the lab reads what Ballast observed
	// there: the jitter calibration, advise).
	Admin string
}

// Proxy is a running proxy the lab measures.
type Proxy interface {
	// Name is the proxy's name in the report (ballast, haproxy, nginx, caddy).
	Name() string
	// Addr is host:port where it accepts requests.
	Addr() string
	// CPU is the CPU time its processes have used so far.
	CPU() (time.Duration, error)
	// Check reports an error if the proxy has died.
	Check() error
	// Output is the tail of what it printed, for diagnosing failed requests.
	Output() string
	// Close stops it.
	Close()
}

// procProxy is a proxy running as a child process tree.
type procProxy struct {
	name string
	addr string
	c    *child
	dir  string // removed on Close when not empty
}

func (p *procProxy) Name() string                { return p.name }
func (p *procProxy) Addr() string                { return p.addr }
func (p *procProxy) CPU() (time.Duration, error) { return p.c.cpu() }

func (p *procProxy) Output() string { return lastLines(p.c.out.String(), 5) }

func (p *procProxy) Check() error {
	if ok, err := p.c.exited(); ok {
		return fmt.Errorf("lab: %s exited (%v): %s", p.name, err, lastLines(p.c.out.String(), 8))
	}
	return nil
}

func (p *procProxy) Close() {
	p.c.stop()
	if p.dir != "" {
		_ = os.RemoveAll(p.dir)
	}
}

// ballastConfig renders spec as a Ballast configuration file listening on addr.
func ballastConfig(spec PoolSpec, addr string) ([]byte, error) {
	pool := map[string]any{
		"name":     "lab",
		"balancer": spec.Balancer,
	}
	if spec.MaxConns > 0 {
		pool["max_conns"] = spec.MaxConns
	}
	if spec.MaxQueue > 0 {
		pool["max_queue"] = spec.MaxQueue
		pool["queue_timeout"] = "120s"
	}
	if spec.Hedge > 0 {
		pool["hedge"] = map[string]any{"delay": spec.Hedge.String(), "max_hedges": 1}
		if spec.HedgeBudget > 0 {
			pool["retries"] = map[string]any{"budget": spec.HedgeBudget}
		}
	}
	if spec.HashURI {
		pool["hash_key"] = map[string]any{"source": "uri"}
	}
	var bs []map[string]any
	for _, b := range spec.Backends {
		e := map[string]any{"address": b.Addr, "name": b.Name}
		if b.Weight > 0 {
			e["weight"] = b.Weight
		}
		bs = append(bs, e)
	}
	pool["backends"] = bs
	cfg := map[string]any{
		"listeners": []map[string]any{{"name": "lab", "address": addr}},
		"pools":     []map[string]any{pool},
		"logging":   map[string]any{"level": "warn"},
	}
	if spec.Admin != "" {
		cfg["admin"] = map[string]any{"address": spec.Admin}
	}
	return yaml.Marshal(cfg)
}

// StartBallast runs `bin serve -c FILE` for spec on a free loopback port and waits until it
// serves. wait bounds the start (large pools take a moment to build).
func StartBallast(ctx context.Context, bin string, spec PoolSpec, wait time.Duration) (Proxy, error) {
	dir, err := os.MkdirTemp("", "ballast-lab-")
	if err != nil {
		return nil, err
	}
	data, err := ballastConfig(spec, "127.0.0.1:0")
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, "ballast.yaml"), data, 0o644)
	}
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	var env []string
	if spec.GOMAXPROCS > 0 {
		env = append(env, "GOMAXPROCS="+strconv.Itoa(spec.GOMAXPROCS))
	}
	c, addr, err := startChild(ctx, bin, []string{"serve", "-c", filepath.Join(dir, "ballast.yaml"), "--grace", "2s"}, env, dir, wait, servingAddr)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return &procProxy{name: "ballast", addr: addr, c: c, dir: dir}, nil
}

// servingAddr finds the address in Ballast's start-up line
// "ballast: serving on http://127.0.0.1:PORT (pool ...)".
func servingAddr(line string) (string, bool) {
	_, rest, ok := strings.Cut(line, "serving on http://")
	if !ok {
		return "", false
	}
	addr, _, _ := strings.Cut(rest, " ")
	addr = strings.TrimSuffix(addr, ",")
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return "", false
	}
	return addr, true
}

// freePort returns a loopback port that was free a moment ago, for proxies that cannot be told
// to pick their own and report it.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// waitListening polls addr until it accepts a connection, for proxies that print no ready
// line. The loop is bounded by wait.
func waitListening(ctx context.Context, p Proxy, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		c, err := net.DialTimeout("tcp", p.Addr(), time.Second)
		if err == nil {
			_ = c.Close()
			return nil
		}
		if err := p.Check(); err != nil {
			return err
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("lab: %s not listening on %s within %v", p.Name(), p.Addr(), wait)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
