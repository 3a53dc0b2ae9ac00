package config

import (
	"fmt"
	"net/netip"
	"strings"
	"time"
)

// Discovery says where a pool's backends come from besides its backends list: DNS, a watched
// file, or the fleet's etcd prefix (exactly one). Discovered backends join the listed ones;
// package discovery applies each new set through the pool's runtime changes.
type Discovery struct {
	DNS *DNSDiscovery `yaml:"dns,omitempty"`
	// File is a YAML file of backends (`backends:` with the same fields as a pool's), re-read
	// when it changes. A relative path is relative to the working directory, as TLS files are.
	File string `yaml:"file,omitempty"`
	// Fleet takes the backends from the keys <fleet.etcd.prefix>/pools/<pool>/ (package fleet).
	Fleet bool `yaml:"fleet,omitempty"`
	// MaxBackends caps one discovered set; a larger answer or file is cut (DNS) or refused
	// (file, fleet) and counted.
	MaxBackends int `yaml:"max_backends"`
}

// DNSDiscovery resolves a name: SRV records give addresses, ports and weights (the lowest
// priority is primary, the others backup), A or AAAA records give addresses with Port.
type DNSDiscovery struct {
	Name string `yaml:"name"`
	Type string `yaml:"type"` // srv | a | aaaa
	// Port is the backends' port for A and AAAA answers (SRV records carry their own).
	Port int `yaml:"port,omitempty"`
	// Resolvers are asked in order (IP:PORT); the next is tried when one fails.
	Resolvers []string `yaml:"resolvers"`
	// MinTTL and MaxTTL bound the time until the next resolution (the answer's smallest TTL).
	MinTTL Duration `yaml:"min_ttl"`
	MaxTTL Duration `yaml:"max_ttl"`
	// Timeout bounds one query to one resolver.
	Timeout Duration `yaml:"timeout"`
}

// Fleet connects this node to the others that share runtime changes (package fleet).
type Fleet struct {
	Etcd *EtcdFleet `yaml:"etcd"`
}

// EtcdFleet is the etcd cluster and the key prefix the fleet shares (docs/discovery.md has the
// key layout).
type EtcdFleet struct {
	Endpoints []string `yaml:"endpoints"` // host:port or http(s)://host:port
	Prefix    string   `yaml:"prefix"`    // e.g. /ballast/prod
	// TLS, when set, connects to etcd over TLS (ca, cert and key for mTLS, server_name).
	TLS *BackendTLS `yaml:"tls,omitempty"`
	// Username and Password authenticate to etcd when its auth is on.
	Username string `yaml:"username,omitempty"`
	Password string `yaml:"password,omitempty"`
	// MaxKeys caps the keys one node holds from the prefix; keys beyond it are ignored and counted.
	MaxKeys int `yaml:"max_keys"`
}

// DNS record types of DNS discovery.
const (
	DNSTypeSRV  = "srv"
	DNSTypeA    = "a"
	DNSTypeAAAA = "aaaa"
)

// Discovery defaults and bounds (docs/config.md).
const (
	DefaultDiscoveryMaxBackends = 1000
	MaxDiscoveryBackends        = 10000
	DefaultDNSMinTTL            = time.Second
	DefaultDNSMaxTTL            = 5 * time.Minute
	DefaultDNSTimeout           = 2 * time.Second
	DefaultDNSResolver          = "127.0.0.1:53"
	minDNSTTL                   = 100 * time.Millisecond
	DefaultFleetMaxKeys         = 10000
	MaxFleetMaxKeys             = 1000000
)

var dnsTypes = []string{DNSTypeSRV, DNSTypeA, DNSTypeAAAA}

// Discovered reports whether the pool takes backends from a discovery source.
func (p Pool) Discovered() bool { return p.Discovery != nil }

func (d *decoder) discoveryDefaults(c *Config) {
	for i := range c.Pools {
		ds := c.Pools[i].Discovery
		if ds == nil {
			continue
		}
		p := fmt.Sprintf("pools[%d].discovery", i)
		setInt(d, p+".max_backends", &ds.MaxBackends, DefaultDiscoveryMaxBackends)
		if n := ds.DNS; n != nil {
			dp := p + ".dns"
			n.Type = strings.ToLower(n.Type)
			if n.Type == "" {
				n.Type = DNSTypeSRV
			}
			if len(n.Resolvers) == 0 && !d.has(dp+".resolvers", false) {
				n.Resolvers = []string{DefaultDNSResolver}
			}
			setDur(d, dp+".min_ttl", &n.MinTTL, DefaultDNSMinTTL)
			setDur(d, dp+".max_ttl", &n.MaxTTL, DefaultDNSMaxTTL)
			setDur(d, dp+".timeout", &n.Timeout, DefaultDNSTimeout)
		}
	}
	if f := c.Fleet; f != nil && f.Etcd != nil {
		setInt(d, "fleet.etcd.max_keys", &f.Etcd.MaxKeys, DefaultFleetMaxKeys)
		f.Etcd.Prefix = strings.TrimRight(f.Etcd.Prefix, "/")
	}
}

// validateDiscovery checks every pool's discovery and the fleet.
func (d *decoder) validateDiscovery(c *Config, fail func(path, format string, args ...any)) {
	fleet := c.Fleet != nil && c.Fleet.Etcd != nil
	for i, pl := range c.Pools {
		ds := pl.Discovery
		if ds == nil {
			continue
		}
		p := fmt.Sprintf("pools[%d].discovery", i)
		n := 0
		for _, set := range []bool{ds.DNS != nil, ds.File != "", ds.Fleet} {
			if set {
				n++
			}
		}
		if n != 1 {
			fail(p, "give exactly one source (valid: dns, file, fleet), got %d", n)
		}
		if ds.MaxBackends < 1 || ds.MaxBackends > MaxDiscoveryBackends {
			fail(p+".max_backends", "must be between 1 and %d, got %d", MaxDiscoveryBackends, ds.MaxBackends)
		}
		if ds.Fleet && !fleet {
			fail(p+".fleet", "fleet: true takes the backends from the fleet's etcd prefix: configure fleet.etcd too")
		}
		if n := ds.DNS; n != nil {
			d.validateDNS(n, p+".dns", c.DirectorPool(pl.Name), fail)
		}
	}
	if c.Fleet == nil {
		return
	}
	e := c.Fleet.Etcd
	if e == nil {
		fail("fleet.etcd", "the fleet needs etcd, e.g.\n  fleet:\n    etcd: {endpoints: [127.0.0.1:2379], prefix: /ballast/prod}")
		return
	}
	if len(e.Endpoints) == 0 {
		fail("fleet.etcd.endpoints", "at least one etcd endpoint is required (host:port or http(s)://host:port)")
	}
	for j, ep := range e.Endpoints {
		if err := checkEtcdEndpoint(ep); err != nil {
			fail(fmt.Sprintf("fleet.etcd.endpoints[%d]", j), "%v", err)
		}
	}
	switch {
	case e.Prefix == "":
		fail("fleet.etcd.prefix", "a key prefix is required, e.g. /ballast/prod (every node of one fleet uses the same)")
	case !strings.HasPrefix(e.Prefix, "/") || strings.ContainsAny(e.Prefix, " \t\n"):
		fail("fleet.etcd.prefix", "must start with / and have no spaces, e.g. /ballast/prod; got %q", e.Prefix)
	}
	if e.MaxKeys < 1 || e.MaxKeys > MaxFleetMaxKeys {
		fail("fleet.etcd.max_keys", "must be between 1 and %d, got %d", MaxFleetMaxKeys, e.MaxKeys)
	}
	if (e.Username == "") != (e.Password == "") {
		fail("fleet.etcd.username", "set both username and password, or neither")
	}
	if t := e.TLS; t != nil && (t.Cert == "") != (t.Key == "") {
		fail("fleet.etcd.tls", "a client certificate needs both cert and key (PEM files)")
	}
}

func (d *decoder) validateDNS(n *DNSDiscovery, p string, director bool, fail func(path, format string, args ...any)) {
	if n.Name == "" || strings.ContainsAny(n.Name, " /\t") || len(n.Name) > 253 {
		fail(p+".name", "a DNS name is required, e.g. _http._tcp.api.service.internal (SRV) or api.service.internal; got %q", n.Name)
	}
	if !oneOf(n.Type, dnsTypes) {
		fail(p+".type", "unknown record type %q (valid: %s)", n.Type, strings.Join(dnsTypes, ", "))
	}
	switch {
	case n.Type == DNSTypeSRV && n.Port != 0:
		fail(p+".port", "SRV records carry their own ports: leave out port (it is for type a or aaaa)")
	case (n.Type == DNSTypeA || n.Type == DNSTypeAAAA) && (n.Port < 1 || n.Port > 65535):
		fail(p+".port", "type %s answers give addresses only: set the backends' port (1 to 65535), got %d", n.Type, n.Port)
	}
	if director && n.Type == DNSTypeAAAA {
		fail(p+".type", "the XDP director balances IPv4 real servers: use type a or srv")
	}
	if len(n.Resolvers) == 0 {
		fail(p+".resolvers", "at least one resolver is required (IP:PORT, e.g. 127.0.0.1:53)")
	}
	for j, r := range n.Resolvers {
		if _, err := netip.ParseAddrPort(r); err != nil {
			fail(fmt.Sprintf("%s.resolvers[%d]", p, j), "a resolver is IP:PORT, e.g. 127.0.0.1:53 or [::1]:53; got %q", r)
		}
	}
	if n.MinTTL.Duration < minDNSTTL {
		fail(p+".min_ttl", "must be at least %s (the shortest wait between two resolutions), got %s", minDNSTTL, n.MinTTL.Duration)
	}
	if n.MaxTTL.Duration < n.MinTTL.Duration {
		fail(p+".max_ttl", "must be at least min_ttl (%s), got %s", n.MinTTL.Duration, n.MaxTTL.Duration)
	}
	if n.Timeout.Duration <= 0 {
		fail(p+".timeout", "must be more than 0s, e.g. 2s")
	}
}

func checkEtcdEndpoint(ep string) error {
	hp := ep
	if i := strings.Index(ep, "://"); i >= 0 {
		scheme := ep[:i]
		if scheme != "http" && scheme != "https" {
			return fmt.Errorf("%q: scheme must be http or https", ep)
		}
		hp = ep[i+3:]
	}
	if err := checkHostPort(hp, false); err != nil {
		return fmt.Errorf("etcd endpoint %v", err)
	}
	return nil
}

// BackendsFile is the file of file discovery: a list of backends with the fields of a pool's.
type BackendsFile struct {
	Backends []Backend `yaml:"backends"`
}

// ParseBackends reads a file discovery's file as strictly as Load reads a configuration: every
// problem is an Error with the file, line, column and field, and at most max backends are
// accepted. Weights default to 1 and names to addresses, as in a pool.
func ParseBackends(name string, data []byte, max int) ([]Backend, error) {
	d := &decoder{file: name, seen: map[string]pos{}}
	var f BackendsFile
	if !d.parse(data, &f) {
		if d.nodes > maxNodes { // cut short: say what the limit is for
			return nil, Errors{{File: name, Path: "backends", Msg: fmt.Sprintf("more than %d values: too many backends (at most %d, discovery.max_backends)", maxNodes, max)}}
		}
		return nil, sorted(d.errs)
	}
	fail := func(path, format string, args ...any) {
		if !d.quiet(path) {
			d.errorf(d.at(path), path, format, args...)
		}
	}
	if !d.has("backends", false) {
		fail("backends", "a backends file lists backends, e.g.\n  backends:\n    - address: 10.0.0.1:8080")
	}
	if len(f.Backends) > max {
		fail("backends", "%d backends; at most %d (discovery.max_backends)", len(f.Backends), max)
		return nil, sorted(d.errs)
	}
	ids := map[string]int{}
	for j := range f.Backends {
		b := &f.Backends[j]
		bp := fmt.Sprintf("backends[%d]", j)
		b.Name = b.ID()
		setInt(d, bp+".weight", &b.Weight, 1)
		if err := CheckBackendAddress(b.Address); err != nil {
			fail(bp+".address", "%v", err)
		}
		if prev, dup := ids[b.Name]; dup {
			fail(bp+".name", "backend %q is already backends[%d]; give one of them another name", b.Name, prev)
		} else {
			ids[b.Name] = j
		}
		if err := CheckWeight(b.Weight); err != nil {
			fail(bp+".weight", "%v", err)
		}
		if err := checkBackendMaxConns(b.MaxConns); err != nil {
			fail(bp+".max_conns", "%v", err)
		}
	}
	if len(d.errs) > 0 {
		return nil, sorted(d.errs)
	}
	return f.Backends, nil
}
