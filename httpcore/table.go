package httpcore

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"ballast/config"
	"ballast/upstream"
)

// Table is one installed configuration of the HTTP side: listeners, routes resolved to pools,
// and their compiled policy. It is immutable; a request loads it once (Core.Table) and uses
// it to the end, so a reload never changes a request that already started.
type Table struct {
	core      *Core
	cfg       *config.Config
	routes    []Route
	listeners map[string]*Listener
	access    bool // logging.access
	needPath  bool // some route has a path prefix or a rewrite: requests normalise their path
	pol       *tablePolicy
}

// tablePolicy is the part of the policy that is the table's; nil when no listener, route,
// pool or log asks for any policy, and the request path then checks that one pointer.
type tablePolicy struct {
	trusted []netip.Prefix // trusted_proxies
	pages   map[int]*Page  // error_pages by status
}

// Listener is a configured HTTP listener as the table sees it.
type Listener struct {
	// Conf is the listener's configuration (read-only).
	Conf *config.Listener
	// Expose is expose_backend: responses name their backend in X-Ballast-Backend.
	Expose bool

	requestID         bool
	acl               *acl
	maxConnsPerClient int
}

// Route is a configured route resolved to its pool.
type Route struct {
	listener string
	host     []byte // lower case, no port; empty = any
	prefix   []byte
	pool     *Pool
	pol      *routePolicy // nil when the route has no policy
}

// Pool is the route's pool, nil for a redirect route (which has none).
func (r *Route) Pool() *Pool { return r.pool }

// routePolicy is the compiled policy of one route.
type routePolicy struct {
	reqHeaders  *headerOps
	respHeaders *headerOps
	rewrite     *rewrite
	redirect    *redirect
	acl         *acl
	maxBody     int64
	limiter     *limiter
	compress    *compression
}

// Config is the configuration the table was built from (read-only).
func (t *Table) Config() *config.Config { return t.cfg }

// Listener returns the named listener, nil when the table has none of that name.
func (t *Table) Listener(name string) *Listener { return t.listeners[name] }

// AccessLog reports whether the table logs requests.
func (t *Table) AccessLog() bool { return t.access }

// Pool returns the table's state of the named pool, nil when no route uses it.
func (t *Table) Pool(name string) *Pool {
	for i := range t.routes {
		if p := t.routes[i].pool; p != nil && p.Name == name {
			return p
		}
	}
	return nil
}

// match returns the first route for listener, host and (normalised) path, or nil.
func (t *Table) match(listener string, host, path []byte) *Route {
	for i := range t.routes {
		r := &t.routes[i]
		if r.listener != "" && r.listener != listener {
			continue
		}
		if len(r.host) > 0 && !hostEqual(host, r.host) {
			continue
		}
		if !bytes.HasPrefix(path, r.prefix) {
			continue
		}
		return r
	}
	return nil
}

// hostEqual compares a Host value (any case, optional port) with a lower-case route host.
func hostEqual(hdr, want []byte) bool {
	hdr = stripPort(hdr)
	if len(hdr) != len(want) {
		return false
	}
	for i := range hdr {
		c := hdr[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != want[i] {
			return false
		}
	}
	return true
}

// build compiles cfg over pools into a table; prev (nil at first) lends the state that
// survives a reload: retry budgets, counters and rate-limit buckets.
func build(c *Core, cfg *config.Config, pools map[string]*upstream.Pool, prev *Table) (*Table, error) {
	if cfg == nil {
		return nil, errors.New("httpcore: nil config")
	}
	t := &Table{core: c, cfg: cfg, listeners: make(map[string]*Listener), access: cfg.Logging.Access}
	used := t.access
	for i := range cfg.Listeners {
		lc := &cfg.Listeners[i]
		l := &Listener{Conf: lc, Expose: lc.ExposeBackend, requestID: lc.RequestID, maxConnsPerClient: lc.MaxConnsPerClient}
		var err error
		if l.acl, err = compileACL(lc.Allow, lc.Deny); err != nil {
			return nil, fmt.Errorf("httpcore: listener %s: %w", lc.Name, err)
		}
		used = used || !lc.ListenerPolicy.Empty()
		t.listeners[lc.Name] = l
	}
	states := make(map[string]*Pool)
	for i := range cfg.Pools {
		pc := &cfg.Pools[i]
		if pool := pools[pc.Name]; pool != nil {
			states[pc.Name] = newPool(pc, pool, prev)
			used = used || pc.Sticky != nil
		}
	}
	for i := range cfg.Routes {
		rc := &cfg.Routes[i]
		p := states[rc.Pool]
		if p == nil && rc.Redirect == nil { // a redirect route has no pool
			return nil, fmt.Errorf("httpcore: route %s%s uses pool %q, which is not configured or has no pool", rc.Host, rc.PathPrefix, rc.Pool)
		}
		if rc.Listener != "" && t.listeners[rc.Listener] == nil {
			return nil, fmt.Errorf("httpcore: route %s%s names unknown listener %q", rc.Host, rc.PathPrefix, rc.Listener)
		}
		host, _, err := net.SplitHostPort(strings.ToLower(rc.Host))
		if err != nil {
			host = strings.ToLower(rc.Host)
		}
		r := Route{listener: rc.Listener, host: []byte(host), prefix: []byte(rc.PathPrefix), pool: p}
		if !rc.RoutePolicy.Empty() {
			if r.pol, err = compileRoute(rc, prev, &r); err != nil {
				return nil, fmt.Errorf("httpcore: route %d: %w", i, err)
			}
			r.pool = overridePool(p, rc)
			used = true
		}
		t.needPath = t.needPath || rc.PathPrefix != "" || rc.Rewrite != nil
		t.routes = append(t.routes, r)
	}
	trusted, err := config.ParsePrefixes(cfg.TrustedProxies)
	if err != nil {
		return nil, err
	}
	pages, err := loadErrorPages(cfg.ErrorPages)
	if err != nil {
		return nil, err
	}
	if used || len(trusted) > 0 || pages != nil {
		t.pol = &tablePolicy{trusted: trusted, pages: pages}
	}
	return t, nil
}

// compileRoute compiles the policy of one route.
func compileRoute(rc *config.Route, prev *Table, r *Route) (*routePolicy, error) {
	rp := &routePolicy{}
	var err error
	if rp.reqHeaders, err = compileHeaders(rc.RequestHeaders); err != nil {
		return nil, err
	}
	if rp.respHeaders, err = compileHeaders(rc.ResponseHeaders); err != nil {
		return nil, err
	}
	if rp.rewrite, err = compileRewrite(rc.Rewrite); err != nil {
		return nil, err
	}
	rp.redirect = compileRedirect(rc.Redirect)
	if rp.acl, err = compileACL(rc.Allow, rc.Deny); err != nil {
		return nil, err
	}
	rp.maxBody = int64(rc.MaxBodyBytes)
	if rl := rc.RateLimit; rl != nil {
		rp.limiter = reuseLimiter(prev, r, rl)
	}
	rp.compress = compileCompress(rc.Compress)
	return rp, nil
}

// reuseLimiter keeps the buckets of the same rate limit on the same route across a reload,
// so that a reload does not hand every client a fresh burst.
func reuseLimiter(prev *Table, r *Route, rl *config.RateLimit) *limiter {
	if prev != nil {
		for _, pr := range prev.routes {
			if pr.pol != nil && pr.pol.limiter != nil && pr.pol.limiter.conf == *rl &&
				pr.listener == r.listener && string(pr.host) == string(r.host) && string(pr.prefix) == string(r.prefix) {
				return pr.pol.limiter
			}
		}
	}
	return newLimiter(rl)
}
