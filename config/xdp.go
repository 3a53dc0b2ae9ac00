package config

import (
	"fmt"
	"net/netip"
	"strings"
)

// Forwarding modes of a director listener: how the XDP director hands a flow to a real server.
const (
	ForwardingDR  = "dr"
	ForwardingTUN = "tun"
	ForwardingNAT = "nat"
)

var (
	forwardings       = []string{ForwardingDR, ForwardingTUN, ForwardingNAT}
	directorBalancers = []string{"maglev", "wlc"}
	directorSources   = []string{"flow", "source_ip"}
)

// IsDirector reports whether the XDP director serves the listener rather than a proxy: such a
// listener's address is a VIP that no socket is bound to, and no proxy plane may take it.
func (l Listener) IsDirector() bool { return l.Forwarding != "" }

// DirectorPool reports whether the named pool serves a director listener.
func (c *Config) DirectorPool(name string) bool {
	for _, r := range c.Routes {
		if r.Pool != name {
			continue
		}
		for _, l := range c.Listeners {
			if (r.Listener == "" || r.Listener == l.Name) && l.IsDirector() {
				return true
			}
		}
	}
	return false
}

// directorPoolDefaults: the director places new flows with a Maglev table over the whole
// 5-tuple unless told otherwise, as LVS's mh scheduler and Katran do, and its real servers
// need not speak HTTP (a tcp check, as for the tcp proxy's pools).
func (d *decoder) directorPoolDefaults(pl *Pool, p string) {
	if !d.has(p+".balancer", pl.Balancer != "") {
		pl.Balancer = "maglev"
	}
	if pl.Balancer == "maglev" && pl.HashKey == (HashKey{}) {
		pl.HashKey.Source = "flow"
	}
	if pl.Health.Type == "" {
		pl.Health.Type = "tcp"
	}
}

// validateDirector checks director listeners and the pools behind them: what the XDP program
// can do (IPv4, no port translation, one mode per interface, maglev or wlc placement).
func (d *decoder) validateDirector(c *Config, fail func(path, format string, args ...any)) {
	type ifaceUse struct {
		mode string
		at   int
	}
	ifaces := map[string]ifaceUse{}
	vipPort := map[string]uint16{} // listener name → VIP port
	for i, l := range c.Listeners {
		p := fmt.Sprintf("listeners[%d]", i)
		if !l.IsDirector() {
			if l.Interface != "" {
				fail(p+".interface", "interface names where the XDP director attaches; it needs forwarding (valid: %s)", strings.Join(forwardings, ", "))
			}
			continue
		}
		if !oneOf(l.Forwarding, forwardings) {
			fail(p+".forwarding", "unknown forwarding mode %q (valid: %s)", l.Forwarding, strings.Join(forwardings, ", "))
			continue
		}
		if !l.IsL4() {
			fail(p+".forwarding", "the XDP director balances tcp or udp flows: set protocol: tcp or udp (this listener is %s)", l.Protocol)
		}
		if l.Interface == "" {
			fail(p+".interface", "forwarding: %s needs the interface the director attaches to, e.g. interface: eth0", l.Forwarding)
		} else if prev, ok := ifaces[l.Interface]; ok && prev.mode != l.Forwarding {
			fail(p+".forwarding", "interface %s already forwards in %s mode (listeners[%d]); one director per interface has one mode (valid here: %s)", l.Interface, prev.mode, prev.at, prev.mode)
		} else if !ok {
			ifaces[l.Interface] = ifaceUse{l.Forwarding, i}
		}
		ap, err := netip.ParseAddrPort(l.Address)
		switch {
		case err != nil || !ap.Addr().Is4() || ap.Addr().IsUnspecified():
			fail(p+".address", "a director listener's address is the VIP: an IPv4 address and port such as 10.0.0.100:80, got %q", l.Address)
		case ap.Port() == 0:
			fail(p+".address", "a director listener needs a fixed port (the VIP's), got %q", l.Address)
		default:
			vipPort[l.Name] = ap.Port()
		}
		if l.AcceptProxy {
			fail(p+".accept_proxy", "the director forwards packets and reads no PROXY header; leave out accept_proxy with forwarding")
		}
	}
	routed := map[string]int{} // director listener → its route
	for i, r := range c.Routes {
		p := fmt.Sprintf("routes[%d]", i)
		for _, l := range c.Listeners {
			if !l.IsDirector() || (r.Listener != "" && r.Listener != l.Name) {
				continue
			}
			if prev, ok := routed[l.Name]; ok {
				fail(p+".listener", "director listener %q already takes routes[%d]; a VIP has one pool of real servers", l.Name, prev)
				continue
			}
			routed[l.Name] = i
			if r.SNI != "" {
				fail(p+".sni", "the director does not read TLS; listener %q (forwarding: %s) takes one route without sni", l.Name, l.Forwarding)
			}
			for j, pl := range c.Pools {
				if pl.Name == r.Pool {
					d.validateDirectorPool(pl, fmt.Sprintf("pools[%d]", j), l, vipPort[l.Name], fail)
				}
			}
		}
	}
	for i, l := range c.Listeners {
		if _, ok := routed[l.Name]; l.IsDirector() && !ok && len(c.Routes) > 0 {
			fail(fmt.Sprintf("listeners[%d].name", i), "director listener %q has no route: add one to the pool of its real servers, e.g. {listener: %s, pool: POOL}", l.Name, l.Name)
		}
	}
}

func (d *decoder) validateDirectorPool(pl Pool, p string, l Listener, port uint16, fail func(path, format string, args ...any)) {
	if !oneOf(pl.Balancer, directorBalancers) {
		fail(p+".balancer", "pool %q serves director listener %q: balancer %q is not one the XDP director runs (valid: %s)", pl.Name, l.Name, pl.Balancer, strings.Join(directorBalancers, ", "))
	}
	if s := pl.HashKey.Source; s != "" && !oneOf(s, directorSources) {
		fail(p+".hash_key.source", "the director hashes packets: %q is not valid (valid: %s)", s, strings.Join(directorSources, ", "))
	}
	for k, b := range pl.Backends {
		bp := fmt.Sprintf("%s.backends[%d]", p, k)
		ap, err := netip.ParseAddrPort(b.Address)
		switch {
		case err != nil || !ap.Addr().Is4():
			fail(bp+".address", "a real server of director listener %q is an IPv4 address and port such as 10.0.0.11:%d, got %q", l.Name, port, b.Address)
		case port != 0 && ap.Port() != port:
			fail(bp+".address", "the director does not translate ports: a real server of listener %q serves the VIP's port %d, got %q", l.Name, port, b.Address)
		}
		if b.Backup {
			fail(bp+".backup", "the director has no backup servers; give the backend weight 0 or down: true instead")
		}
	}
	proxyOnly := []struct {
		key string
		set bool
	}{
		{"send_proxy", pl.SendProxy != ""},
		{"persistence", pl.Persistence.Duration != 0},
		{"max_conns", pl.MaxConns != 0},
		{"max_queue", pl.MaxQueue != 0},
		{"slow_start", pl.SlowStart.Duration != 0},
		{"hedge.delay", pl.Hedge.Delay.Duration != 0},
		{"outlier.consecutive_failures", pl.Outlier.ConsecutiveFailures != 0},
		{"outlier.failure_percentage.threshold", pl.Outlier.FailurePercentage.Threshold != 0},
	}
	for _, k := range proxyOnly {
		if k.set {
			fail(p+"."+k.key, "%s is a proxy setting; pool %q serves director listener %q, which forwards packets (director pools take balancer, table_size, hash_key, backends and health_check)", k.key, pl.Name, l.Name)
		}
	}
}
