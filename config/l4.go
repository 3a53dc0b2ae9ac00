package config

import (
	"fmt"
	"strings"

	"ballast/balance"
)

// Protocols of a listener. A pool serves listeners of one kind: http, or l4 (tcp and udp), since
// its in-flight count means requests for the one and connections or flows for the other.
const (
	ProtocolHTTP = "http"
	ProtocolTCP  = "tcp"
	ProtocolUDP  = "udp"
)

var (
	protocols    = []string{ProtocolHTTP, ProtocolTCP, ProtocolUDP}
	l4Sources    = []string{"source_ip", "flow"}
	proxyVersion = []string{"v1", "v2"}
)

// IsL4 reports whether the listener balances connections or flows rather than HTTP requests.
func (l Listener) IsL4() bool { return l.Protocol == ProtocolTCP || l.Protocol == ProtocolUDP }

// L4Pool reports whether the named pool serves tcp or udp listeners. Validation guarantees a pool
// serves one kind only.
func (c *Config) L4Pool(name string) bool {
	for _, r := range c.Routes {
		if r.Pool != name {
			continue
		}
		for _, l := range c.Listeners {
			if (r.Listener == "" || r.Listener == l.Name) && l.IsL4() {
				return true
			}
		}
	}
	return false
}

// listenerDefaults fills what depends on the listener's protocol.
func (d *decoder) listenerDefaults(l *Listener, p string) {
	if l.Protocol == "" {
		l.Protocol = ProtocolHTTP
	}
	switch l.Protocol {
	case ProtocolTCP:
		setDur(d, p+".idle_timeout", &l.IdleTimeout, DefaultTCPIdleTimeout)
	case ProtocolUDP:
		setDur(d, p+".idle_timeout", &l.IdleTimeout, DefaultUDPIdleTimeout)
		setInt(d, p+".max_flows", &l.MaxFlows, DefaultMaxFlows)
		d.udpDefaults(l, p)
	default:
		setDur(d, p+".idle_timeout", &l.IdleTimeout, DefaultIdleTimeout)
		setInt(d, p+".max_header_bytes", &l.MaxHeaderBytes, DefaultMaxHeaderBytes)
	}
	setDur(d, p+".read_header_timeout", &l.ReadHeaderTimeout, DefaultReadHeaderTimeout)
}

// l4PoolDefaults fills what differs for a pool behind tcp or udp listeners: connections are
// long-lived, so the default balancer counts them (leastconn), and hash balancers hash the
// client's address unless told to hash the whole flow.
func (d *decoder) l4PoolDefaults(pl *Pool, p string) {
	if !d.has(p+".balancer", pl.Balancer != "") {
		pl.Balancer = DefaultL4Balancer
	}
	if a, err := balance.Lookup(pl.Balancer); err == nil && a.Caps.NeedsKey && pl.HashKey == (HashKey{}) {
		pl.HashKey.Source = "source_ip"
	}
	if pl.Health.Type == "" {
		pl.Health.Type = "tcp" // the backends need not speak HTTP
	}
}

// validateListenerProtocol checks the keys that only one kind of listener reads.
func (d *decoder) validateListenerProtocol(l Listener, p string, fail func(path, format string, args ...any)) {
	// Zero would mean "no limit" to a reader of the file but a default to the planes: refuse it.
	if l.ReadHeaderTimeout.Duration == 0 {
		fail(p+".read_header_timeout", "must be more than 0s (e.g. 10s): it bounds a client that sends nothing")
	}
	if l.IdleTimeout.Duration == 0 {
		fail(p+".idle_timeout", "must be more than 0s (e.g. 60s, or 1h for long-lived connections)")
	}
	if !oneOf(l.Protocol, protocols) {
		fail(p+".protocol", "unknown protocol %q (valid: %s)", l.Protocol, strings.Join(protocols, ", "))
		return
	}
	if l.Protocol == ProtocolHTTP {
		if l.MaxFlows != 0 {
			fail(p+".max_flows", "max_flows caps udp flows; this listener is http")
		}
		validateUDPOnly(l, p, fail)
		return
	}
	httpOnly := []struct {
		key string
		set bool
	}{
		{"tls", l.TLS != nil},
		{"h2c", l.H2C},
		{"max_header_bytes", l.MaxHeaderBytes != 0},
		{"max_keepalive_requests", l.MaxKeepAliveRequests != 0},
		{"expose_backend", l.ExposeBackend},
	}
	for _, k := range httpOnly {
		if k.set {
			fail(p+"."+k.key, "%s applies to http listeners; this listener is %s", k.key, l.Protocol)
		}
	}
	if l.Protocol == ProtocolTCP && l.MaxFlows != 0 {
		fail(p+".max_flows", "max_flows caps udp flows; this listener is tcp")
	}
	validateUDPOnly(l, p, fail)
	if l.Protocol == ProtocolUDP {
		if l.AcceptProxy {
			fail(p+".accept_proxy", "the PROXY protocol is read from tcp connections; this listener is udp")
		}
		if l.MaxFlows < 1 {
			fail(p+".max_flows", "must be at least 1, got %d", l.MaxFlows)
		}
	}
}

// validateL4 checks what ties listeners, routes and pools of different protocols together.
func (d *decoder) validateL4(c *Config, fail func(path, format string, args ...any)) {
	proto := map[string]string{}
	for _, l := range c.Listeners {
		proto[l.Name] = l.Protocol
	}
	kind := map[string]string{} // pool → "http" or "l4"
	kindRoute := map[string]int{}
	for i, r := range c.Routes {
		p := fmt.Sprintf("routes[%d]", i)
		var ls []Listener
		for _, l := range c.Listeners {
			if r.Listener == "" || r.Listener == l.Name {
				ls = append(ls, l)
			}
		}
		for _, l := range ls {
			k := ProtocolHTTP
			if l.IsL4() {
				k = "l4"
				if r.Host != "" {
					fail(p+".host", "host routing reads HTTP requests; listener %q is %s (use sni for TLS passthrough)", l.Name, l.Protocol)
				}
				if r.PathPrefix != "" {
					fail(p+".path_prefix", "path routing reads HTTP requests; listener %q is %s", l.Name, l.Protocol)
				}
			}
			if r.SNI != "" && l.Protocol != ProtocolTCP {
				fail(p+".sni", "sni matches the TLS ClientHello of tcp connections; listener %q is %s", l.Name, l.Protocol)
			}
			if prev, ok := kind[r.Pool]; ok && prev != k && r.Pool != "" {
				fail(p+".pool", "pool %q already serves %s listeners (routes[%d]); a pool serves http listeners or tcp/udp listeners, not both", r.Pool, poolKindName(prev), kindRoute[r.Pool])
				break
			}
			kind[r.Pool], kindRoute[r.Pool] = k, i
		}
		if strings.ContainsAny(r.SNI, "/ :") {
			fail(p+".sni", "must be a server name such as example.com, got %q", r.SNI)
		}
	}
	for i, pl := range c.Pools {
		p := fmt.Sprintf("pools[%d]", i)
		l4 := kind[pl.Name] == "l4"
		if pl.SendProxy != "" && !oneOf(pl.SendProxy, proxyVersion) {
			fail(p+".send_proxy", "unknown PROXY protocol version %q (valid: %s)", pl.SendProxy, strings.Join(proxyVersion, ", "))
		}
		if !l4 {
			if pl.SendProxy != "" {
				fail(p+".send_proxy", "send_proxy applies to pools behind tcp listeners; pool %q serves http", pl.Name)
			}
			if pl.Persistence.Duration != 0 {
				fail(p+".persistence", "persistence applies to tcp and udp pools; http pools use a hash balancer with hash_key.source: source_ip")
			}
			if pl.HashKey.Source == "flow" {
				fail(p+".hash_key.source", "flow (the 5-tuple) is for tcp and udp pools (valid for http: source_ip, uri, header, cookie)")
			}
			continue
		}
		if pl.Persistence.Duration < 0 {
			fail(p+".persistence", "must be 0 (off) or more")
		}
		if s := pl.HashKey.Source; s != "" && !oneOf(s, l4Sources) {
			fail(p+".hash_key.source", "a tcp or udp pool hashes the client, not a request: %q is not valid (valid: %s)", s, strings.Join(l4Sources, ", "))
		}
	}
}

func poolKindName(k string) string {
	if k == "l4" {
		return "tcp/udp"
	}
	return k
}
