package config

import (
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"ballast/balance"
)

// Limits that keep a typo from allocating gigabytes or meaning nothing.
const (
	maxWeight    = 10000
	maxTableSize = 1<<24 + 1
)

var (
	hashSources = []string{"source_ip", "uri", "header", "cookie"}
	logLevels   = []string{"debug", "info", "warn", "error"}
	logFormats  = []string{"text", "json"}
	checkTypes  = []string{"http", "tcp", "grpc"}
)

// validate checks every field and every combination, recording all problems.
func (d *decoder) validate(c *Config) {
	fail := func(path, format string, args ...any) {
		if !d.quiet(path) {
			d.errorf(d.at(path), path, format, args...)
		}
	}

	if len(c.Listeners) == 0 {
		fail("listeners", "at least one listener is required, e.g.\n  listeners:\n    - address: 127.0.0.1:8080")
	}
	if len(c.Pools) == 0 {
		fail("pools", "at least one pool is required, e.g.\n  pools:\n    - name: web\n      backends:\n        - address: 127.0.0.1:8081")
	}

	listeners := map[string]bool{}
	addrs := map[string]string{}
	for i, l := range c.Listeners {
		p := fmt.Sprintf("listeners[%d]", i)
		if err := checkHostPort(l.Address, true); err != nil {
			fail(p+".address", "%v", err)
		} else if prev, dup := addrs[l.Address]; dup && !strings.HasSuffix(l.Address, ":0") {
			fail(p+".address", "address %s is already used by listener %q", l.Address, prev)
		}
		addrs[l.Address] = l.Name
		if listeners[l.Name] {
			fail(p+".name", "listener name %q is used twice", l.Name)
		}
		listeners[l.Name] = true
		d.validateListenerProtocol(l, p, fail)
		if l.Protocol == ProtocolHTTP && l.MaxHeaderBytes < 1024 {
			fail(p+".max_header_bytes", "must be at least 1024, got %d", l.MaxHeaderBytes)
		}
		if l.MaxKeepAliveRequests < 0 {
			fail(p+".max_keepalive_requests", "must be 0 (unlimited) or more, got %d", l.MaxKeepAliveRequests)
		}
		d.validateListenerTLS(l, p, fail)
	}

	pools := map[string]bool{}
	var poolNames []string
	for i := range c.Pools {
		pl := &c.Pools[i]
		p := fmt.Sprintf("pools[%d]", i)
		switch {
		case pl.Name == "":
			fail(p+".name", "every pool needs a name")
		case strings.ContainsAny(pl.Name, " \t\n/"):
			fail(p+".name", "pool name %q may not contain spaces or slashes", pl.Name)
		case pools[pl.Name]:
			fail(p+".name", "pool name %q is used twice", pl.Name)
		}
		if !pools[pl.Name] && pl.Name != "" {
			poolNames = append(poolNames, pl.Name)
		}
		pools[pl.Name] = true
		d.validatePool(pl, p, c.L4Pool(pl.Name), fail)
	}

	if len(c.Routes) == 0 && len(c.Pools) > 1 {
		fail("routes", "with more than one pool, routes must say which requests go where, e.g.\n  routes:\n    - path_prefix: /api/\n      pool: %s", c.Pools[0].Name)
	} else if len(c.Routes) == 0 && len(c.Pools) == 1 {
		fail("routes", "routes is empty: leave it out to send everything to pool %q", c.Pools[0].Name)
	}
	for i, r := range c.Routes {
		p := fmt.Sprintf("routes[%d]", i)
		switch {
		case r.Pool == "" && r.Redirect == nil: // a redirect is answered by Ballast (policy.go)
			fail(p+".pool", "every route needs a pool (valid: %s)", strings.Join(poolNames, ", "))
		case r.Pool != "" && !pools[r.Pool]:
			fail(p+".pool", "no pool named %q (valid: %s)", r.Pool, strings.Join(poolNames, ", "))
		}
		if r.Listener != "" && !listeners[r.Listener] {
			var names []string
			for _, l := range c.Listeners {
				if !oneOf(l.Name, names) {
					names = append(names, l.Name)
				}
			}
			fail(p+".listener", "no listener named %q (valid: %s)", r.Listener, strings.Join(names, ", "))
		}
		if r.PathPrefix != "" && !strings.HasPrefix(r.PathPrefix, "/") {
			fail(p+".path_prefix", "must start with /, got %q", r.PathPrefix)
		}
		if strings.ContainsAny(r.Host, "/ ") {
			fail(p+".host", "must be a host name such as example.com, got %q", r.Host)
		}
	}

	d.validateL4(c, fail)
	d.validatePolicy(c, fail)
	d.validateDirector(c, fail)
	d.validateDiscovery(c, fail)
	d.validateHA(c, fail)
	d.validateBGP(c, fail)

	d.validateAdmin(c, fail) // config/admin.go
	if !oneOf(c.Logging.Level, logLevels) {
		fail("logging.level", "unknown level %q (valid: %s)", c.Logging.Level, strings.Join(logLevels, ", "))
	}
	if !oneOf(c.Logging.Format, logFormats) {
		fail("logging.format", "unknown format %q (valid: %s)", c.Logging.Format, strings.Join(logFormats, ", "))
	}
}

func (d *decoder) validatePool(pl *Pool, p string, l4 bool, fail func(path, format string, args ...any)) {
	alg, err := balance.Lookup(pl.Balancer)
	if err != nil {
		fail(p+".balancer", "%v", err)
	}
	canon := alg.Name

	// Algorithm parameters only one balancer reads.
	if pl.MaxInit < 0 {
		fail(p+".max_init", "must be 0 (the number of backends) or more, got %d", pl.MaxInit)
	} else if pl.MaxInit > 0 && canon != "vnswrr" && err == nil {
		fail(p+".max_init", "max_init is vnswrr's build batch; balancer %s does not use it", pl.Balancer)
	}
	if pl.TableSize != 0 || (canon == "maglev" && d.has(p+".table_size", false)) {
		switch {
		case canon != "maglev" && err == nil:
			fail(p+".table_size", "table_size is maglev's lookup-table size; balancer %s does not use it", pl.Balancer)
		case pl.TableSize < 0 || pl.TableSize > maxTableSize || !big.NewInt(int64(pl.TableSize)).ProbablyPrime(0):
			fail(p+".table_size", "must be a prime up to %d, e.g. 65537 or 655373; got %d", maxTableSize, pl.TableSize)
		case pl.TableSize < len(pl.Backends):
			fail(p+".table_size", "must be at least the number of backends (%d), ideally 100 times it", len(pl.Backends))
		}
	}
	if f := pl.HashBalanceFactor; f != 0 {
		switch {
		case f < 1:
			fail(p+".hash_balance_factor", "must be 0 (unbounded) or at least 1 (e.g. 1.25), got %g", f)
		case canon != "ringhash" && err == nil:
			fail(p+".hash_balance_factor", "hash_balance_factor bounds ringhash loads; balancer %s does not use it", pl.Balancer)
		}
	}
	hk := pl.HashKey
	switch {
	case err != nil:
	case alg.Caps.NeedsKey && hk.Source == "":
		fail(p+".hash_key", "balancer %s hashes a request key: set hash_key.source (valid: %s)", pl.Balancer, strings.Join(hashSources, ", "))
	case !alg.Caps.NeedsKey && hk != HashKey{}:
		fail(p+".hash_key", "balancer %s does not hash requests; hash_key is for %s", pl.Balancer, strings.Join(hashBalancers(), ", "))
	}
	if hk.Source != "" && !l4 { // validateL4 judges the sources of tcp and udp pools
		switch {
		case !oneOf(hk.Source, hashSources):
			fail(p+".hash_key.source", "unknown source %q (valid: %s)", hk.Source, strings.Join(hashSources, ", "))
		case (hk.Source == "header" || hk.Source == "cookie") && hk.Name == "":
			fail(p+".hash_key.name", "source %s needs the %s name", hk.Source, hk.Source)
		case (hk.Source == "source_ip" || hk.Source == "uri") && hk.Name != "":
			fail(p+".hash_key.name", "source %s takes no name", hk.Source)
		}
	} else if hk.Name != "" {
		fail(p+".hash_key.source", "hash_key.name needs a source (header or cookie)")
	}

	if len(pl.Backends) == 0 && pl.Discovery == nil {
		fail(p+".backends", "a pool needs at least one backend (or a discovery source), e.g.\n  backends:\n    - address: 127.0.0.1:8081")
	}
	ids := map[string]int{}
	limited := pl.MaxConns > 0
	for j, b := range pl.Backends {
		bp := fmt.Sprintf("%s.backends[%d]", p, j)
		if err := CheckBackendAddress(b.Address); err != nil {
			fail(bp+".address", "%v", err)
		}
		if err := CheckBackendName(b.Name); err != nil {
			fail(bp+".name", "%v", err)
		}
		if prev, dup := ids[b.Name]; dup {
			fail(bp+".name", "backend %q is already backends[%d] of this pool; give one of them another name", b.Name, prev)
		} else {
			ids[b.Name] = j
		}
		if err := CheckWeight(b.Weight); err != nil {
			fail(bp+".weight", "%v", err)
		}
		if err := checkBackendMaxConns(b.MaxConns); err != nil {
			fail(bp+".max_conns", "%v", err)
		}
		limited = limited || b.MaxConns > 0
	}

	if pl.MaxConns < 0 {
		fail(p+".max_conns", "must be 0 (no limit) or more, got %d", pl.MaxConns)
	}
	switch {
	case pl.MaxQueue < 0:
		fail(p+".max_queue", "must be 0 (no queue: 503 at once) or more, got %d", pl.MaxQueue)
	case pl.MaxQueue > 0 && !limited:
		fail(p+".max_queue", "a backlog queue needs a connection limit: set max_conns on the pool or its backends")
	case pl.MaxQueue > 0 && pl.QueueTimeout.Duration == 0:
		fail(p+".queue_timeout", "must be more than 0s when max_queue is set (a request must not wait forever)")
	case pl.MaxQueue == 0 && pl.QueueTimeout.Duration != 0:
		fail(p+".queue_timeout", "queue_timeout needs max_queue > 0 (there is no queue to time out of)")
	}

	r := pl.Retries
	if r.Attempts < 1 || r.Attempts > MaxAttempts {
		fail(p+".retries.attempts", "must be between 1 (no retry) and %d, got %d", MaxAttempts, r.Attempts)
	}
	if r.Budget < 0 || r.Budget > 1 {
		fail(p+".retries.budget", "must be a fraction between 0 and 1, e.g. 0.2; got %g", r.Budget)
	}
	h := pl.Hedge
	switch {
	case h.Delay.Duration == 0 && h.MaxHedges != 0:
		fail(p+".hedge.max_hedges", "max_hedges needs hedge.delay (hedging is off without it)")
	case h.Delay.Duration > 0 && (h.MaxHedges < 1 || h.MaxHedges > MaxHedges):
		fail(p+".hedge.max_hedges", "must be between 1 and %d, got %d", MaxHedges, h.MaxHedges)
	}
	if pl.Timeouts.Connect.Duration == 0 {
		fail(p+".timeouts.connect", "must be more than 0s")
	}
	if pl.KeepAlive.MaxIdle < 0 {
		fail(p+".keepalive.max_idle", "must be 0 (no idle connections kept) or more, got %d", pl.KeepAlive.MaxIdle)
	}
	if pl.KeepAlive.MaxRequests < 0 {
		fail(p+".keepalive.max_requests", "must be 0 (unlimited) or more, got %d", pl.KeepAlive.MaxRequests)
	}
	d.validateHealth(pl.Health, p+".health_check", fail)
	d.validateBackendTLS(pl, p, l4, fail)

	o := pl.Outlier
	op := p + ".outlier"
	if o.ConsecutiveFailures < 0 {
		fail(op+".consecutive_failures", "must be 0 (off) or more, got %d", o.ConsecutiveFailures)
	}
	if o.MaxEjectionPercent < 0 || o.MaxEjectionPercent > 100 {
		fail(op+".max_ejection_percent", "must be between 0 and 100, got %d", o.MaxEjectionPercent)
	}
	if o.PanicThreshold < 0 || o.PanicThreshold > 100 {
		fail(op+".panic_threshold_percent", "must be between 0 (off) and 100, got %d", o.PanicThreshold)
	}
	fp, fpp := o.FailurePercentage, op+".failure_percentage"
	if fp.Threshold < 0 || fp.Threshold > 100 {
		fail(fpp+".threshold", "must be between 0 (off) and 100 (percent of an interval's requests), got %d", fp.Threshold)
	}
	if fp.Threshold > 0 {
		if fp.RequestVolume < 1 {
			fail(fpp+".request_volume", "must be at least 1 (requests in an interval before a backend is judged), got %d", fp.RequestVolume)
		}
		if fp.MinimumHosts < 1 {
			fail(fpp+".minimum_hosts", "must be at least 1 (backends with request_volume before any is judged), got %d", fp.MinimumHosts)
		}
		if o.Interval.Duration <= 0 {
			fail(op+".interval", "must be more than 0s when failure_percentage is set, e.g. 10s")
		}
	}
	if (o.ConsecutiveFailures > 0 || fp.Threshold > 0) && o.BaseEjection.Duration == 0 {
		fail(op+".base_ejection", "must be more than 0s when consecutive_failures or failure_percentage is set")
	}
}

func (d *decoder) validateHealth(h HealthCheck, hp string, fail func(path, format string, args ...any)) {
	if !oneOf(h.Type, checkTypes) {
		fail(hp+".type", "unknown type %q (valid: %s)", h.Type, strings.Join(checkTypes, ", "))
		return
	}
	if h.Type != "grpc" && h.Service != "" {
		fail(hp+".service", "service names a grpc.health.v1 service; it needs type: grpc")
	}
	if h.Type == "tcp" || h.Type == "grpc" {
		what := map[string]string{"tcp": "a tcp check only connects", "grpc": "a grpc check calls grpc.health.v1.Health/Check"}[h.Type]
		for _, kv := range [][2]string{{"method", h.Method}, {"path", h.Path}, {"host", h.Host}, {"expect_status", h.ExpectStatus}, {"expect_body", h.ExpectBody}} {
			if kv[1] != "" {
				fail(hp+"."+kv[0], "%s; %s needs type: http", what, kv[0])
			}
		}
	} else {
		if !validMethod(h.Method) {
			fail(hp+".method", "not an HTTP method: %q (e.g. GET, HEAD)", h.Method)
		}
		if !strings.HasPrefix(h.Path, "/") {
			fail(hp+".path", "must start with /, got %q", h.Path)
		}
		if err := checkStatusRanges(h.ExpectStatus); err != nil {
			fail(hp+".expect_status", "%v", err)
		}
	}
	if h.Timeout.Duration == 0 {
		fail(hp+".timeout", "must be more than 0s")
	}
	if h.Rise < 1 {
		fail(hp+".rise", "must be at least 1, got %d", h.Rise)
	}
	if h.Fall < 1 {
		fail(hp+".fall", "must be at least 1, got %d", h.Fall)
	}
	if h.Interval.Duration == 0 && h.DownInterval.Duration != 0 {
		fail(hp+".down_interval", "down_interval needs interval > 0 (checks are off)")
	}
}

// StatusRanges parses an expect_status value such as "200-399" or "200,204,300-308" into
// inclusive [low, high] pairs. The health checker uses it; validation calls it first.
func StatusRanges(s string) ([][2]int, error) {
	var out [][2]int
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		lo, hi, isRange := strings.Cut(part, "-")
		a, err1 := strconv.Atoi(strings.TrimSpace(lo))
		b := a
		var err2 error
		if isRange {
			b, err2 = strconv.Atoi(strings.TrimSpace(hi))
		}
		if err1 != nil || err2 != nil || a < 100 || b > 599 || a > b {
			return nil, fmt.Errorf("%q is not a status or range such as 200, 204 or 200-399", part)
		}
		out = append(out, [2]int{a, b})
	}
	return out, nil
}

func checkStatusRanges(s string) error {
	_, err := StatusRanges(s)
	return err
}

// checkHostPort accepts host:port with a numeric port. Listeners may leave the host empty
// (every interface) and use port 0 (a free port, printed at start-up); backends may not.
func checkHostPort(addr string, listen bool) error {
	example := "127.0.0.1:8081"
	if listen {
		example = "127.0.0.1:8080 or :8080"
	}
	if addr == "" {
		return fmt.Errorf("an address is required (host:port, e.g. %s)", example)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not host:port (e.g. %s)", addr, example)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 0 || n > 65535 || (!listen && n == 0) {
		return fmt.Errorf("%q: port must be a number from 1 to 65535", addr)
	}
	if host == "" && !listen {
		return fmt.Errorf("%q has no host (e.g. %s)", addr, example)
	}
	if strings.ContainsAny(host, " /") {
		return fmt.Errorf("%q: %q is not a host name or IP address", addr, host)
	}
	return nil
}

// CheckBackend applies the file's rules for one backend (address, weight, max_conns) to a
// backend that arrives another way, such as the admin API's add.
func CheckBackend(b Backend) error {
	if err := CheckBackendAddress(b.Address); err != nil {
		return err
	}
	if err := CheckBackendName(b.ID()); err != nil {
		return err
	}
	if err := CheckWeight(b.Weight); err != nil {
		return fmt.Errorf("weight %v", err)
	}
	if err := checkBackendMaxConns(b.MaxConns); err != nil {
		return fmt.Errorf("max_conns %v", err)
	}
	return nil
}

// CheckBackendAddress accepts a backend's host:port: a host name or IP address and a port
// from 1 to 65535.
func CheckBackendAddress(addr string) error { return checkHostPort(addr, false) }

// CheckWeight bounds a weight: weights feed schedules sized by their sum, so no way in (file or
// API) may accept more than maxWeight.
func CheckWeight(w int) error {
	if w < 0 || w > maxWeight {
		return fmt.Errorf("must be between 0 (no new traffic) and %d, got %d", maxWeight, w)
	}
	return nil
}

func checkBackendMaxConns(n int) error {
	if n < 0 {
		return fmt.Errorf("must be 0 (the pool's max_conns) or more, got %d", n)
	}
	return nil
}

// LoopbackOnly reports whether a host:port only accepts connections from this machine. An
// admin listener that is not loopback-only needs a token.
func LoopbackOnly(addr string) bool {
	host, _, _ := net.SplitHostPort(addr)
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

func validMethod(m string) bool {
	if m == "" {
		return false
	}
	for _, r := range m {
		if r < 'A' || r > 'Z' {
			return false
		}
	}
	return true
}

func oneOf(s string, valid []string) bool {
	for _, v := range valid {
		if s == v {
			return true
		}
	}
	return false
}

// hashBalancers lists the algorithms that need a hash_key.
func hashBalancers() []string {
	var out []string
	for _, a := range balance.Algorithms() {
		if a.Caps.NeedsKey {
			out = append(out, a.Name)
		}
	}
	return out
}
