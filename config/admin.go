package config

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// The admin listener's keys (address, token, read_token, reads) and the rules the runtime
// API shares with the file: backend names and the addresses a backend may not have.

// MinTokenBytes is the shortest admin.token and admin.read_token accepted.
const MinTokenBytes = 16

// MaxBackendNameBytes bounds a backend's name: it goes into every log line and metric label.
const MaxBackendNameBytes = 128

// Values of admin.reads.
const (
	ReadsOpen  = "open"  // GET /api/pools, /metrics and the status page's data need no token
	ReadsToken = "token" // they need admin.token or admin.read_token
)

var readModes = []string{ReadsOpen, ReadsToken}

// adminDefaults fills admin.reads: protected unless the listener is loopback-only.
func (d *decoder) adminDefaults(a *Admin) {
	if a.Reads != "" || a.Address == "" {
		return
	}
	a.Reads = ReadsOpen
	if !LoopbackOnly(a.Address) {
		a.Reads = ReadsToken
	}
}

// ReadsProtected reports whether reads need a token.
func (a Admin) ReadsProtected() bool { return a.Reads == ReadsToken }

func (d *decoder) validateAdmin(c *Config, fail func(path, format string, args ...any)) {
	validateNotSelf(c, fail)
	a := c.Admin
	if a.Address == "" {
		if a.Token != "" || a.ReadToken != "" {
			fail("admin.token", "a token without admin.address does nothing: set admin.address too")
		}
		return
	}
	if err := checkHostPort(a.Address, true); err != nil {
		fail("admin.address", "%v", err)
	} else if a.Token == "" && !LoopbackOnly(a.Address) {
		fail("admin.token", "admin.address %s is reachable from other hosts: set a token (or listen on 127.0.0.1)", a.Address)
	}
	for _, t := range []struct{ key, v string }{{"token", a.Token}, {"read_token", a.ReadToken}} {
		if err := CheckToken(t.v); t.v != "" && err != nil {
			fail("admin."+t.key, "%v", err)
		}
	}
	if a.ReadToken != "" && a.ReadToken == a.Token {
		fail("admin.read_token", "must differ from admin.token (it grants reads only)")
	}
	if !oneOf(a.Reads, readModes) {
		fail("admin.reads", "unknown value %q (valid: %s)", a.Reads, strings.Join(readModes, ", "))
	} else if a.Reads == ReadsToken && a.Token == "" && a.ReadToken == "" && LoopbackOnly(a.Address) {
		fail("admin.reads", "reads: token needs admin.token or admin.read_token")
	}
}

// validateNotSelf refuses backends that are the process's own listeners or admin listener.
func validateNotSelf(c *Config, fail func(path, format string, args ...any)) {
	self := c.selfAddrs()
	for i, pl := range c.Pools {
		if c.DirectorPool(pl.Name) {
			continue // the director forwards packets to real servers, it does not connect
		}
		for j, b := range pl.Backends {
			if what := SelfTarget(b.Address, self); what != "" {
				fail(fmt.Sprintf("pools[%d].backends[%d].address", i, j), "%s is %s of this process: a backend may not be Ballast itself", b.Address, what)
			}
		}
	}
}

// CheckToken requires at least MinTokenBytes bytes of visible ASCII.
func CheckToken(t string) error {
	if len(t) < MinTokenBytes {
		return fmt.Errorf("must be at least %d bytes long, got %d (e.g. the output of `openssl rand -hex 16`)", MinTokenBytes, len(t))
	}
	for i := 0; i < len(t); i++ {
		if t[i] <= ' ' || t[i] >= 0x7f {
			return fmt.Errorf("must be visible ASCII (byte %d is %q)", i, t[i])
		}
	}
	return nil
}

// CheckBackendName accepts a backend name of 1 to MaxBackendNameBytes bytes of letters,
// digits and "-._~:[]@" (a name or a host:port): it appears in logs, metrics and the page.
func CheckBackendName(n string) error {
	if n == "" || len(n) > MaxBackendNameBytes {
		return fmt.Errorf("name must be 1 to %d bytes long, got %d", MaxBackendNameBytes, len(n))
	}
	for i := 0; i < len(n); i++ {
		c := n[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-._~:[]@", c) >= 0 {
			continue
		}
		return fmt.Errorf("name %.40q: byte %d (%q) is not a letter, digit or one of -._~:[]@", n, i, c)
	}
	return nil
}

// SelfAddr is an address the process accepts connections on, with what it is.
type SelfAddr struct {
	Addr netip.AddrPort // an unspecified address (0.0.0.0, ::) means every local address
	What string         // "the admin listener", "listener web"
}

// selfAddrs are the addresses of the file's listeners and admin listener that have a fixed
// port (port 0 is known once bound: the admin plane checks those).
func (c *Config) selfAddrs() []SelfAddr {
	var out []SelfAddr
	add := func(addr, what string) {
		if ap, ok := parseListen(addr); ok && ap.Port() != 0 {
			out = append(out, SelfAddr{ap, what})
		}
	}
	for _, l := range c.Listeners {
		if !l.IsDirector() {
			add(l.Address, "listener "+l.Name)
		}
	}
	add(c.Admin.Address, "the admin listener")
	return out
}

// parseListen reads a listen address: "host:port", ":port" (every address) or "localhost:port".
func parseListen(addr string) (netip.AddrPort, bool) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return netip.AddrPort{}, false
	}
	p, err := net.LookupPort("tcp", port)
	if err != nil {
		return netip.AddrPort{}, false
	}
	var a netip.Addr
	switch host {
	case "":
		a = netip.IPv6Unspecified()
	case "localhost":
		a = netip.MustParseAddr("127.0.0.1")
	default:
		if a, err = netip.ParseAddr(host); err != nil {
			return netip.AddrPort{}, false
		}
	}
	return netip.AddrPortFrom(a.Unmap(), uint16(p)), true
}

// SelfTarget says which of self a backend address reaches ("" for none): the same address
// and port, or the port of a listener on every address with a backend address of this
// machine (loopback or an interface's). Host names other than localhost are not resolved.
func SelfTarget(backend string, self []SelfAddr) string {
	b, ok := parseListen(backend)
	if !ok || b.Addr().IsUnspecified() && b.Port() == 0 {
		return ""
	}
	var local []netip.Addr // read once, when needed
	for _, s := range self {
		if s.Addr.Port() != b.Port() {
			continue
		}
		if s.Addr.Addr() == b.Addr() || b.Addr().IsUnspecified() {
			return s.What
		}
		if !s.Addr.Addr().IsUnspecified() {
			continue
		}
		if b.Addr().IsLoopback() {
			return s.What
		}
		if local == nil {
			local = localAddrs()
		}
		for _, a := range local {
			if a == b.Addr() {
				return s.What
			}
		}
	}
	return ""
}

func localAddrs() []netip.Addr {
	out := []netip.Addr{}
	as, err := net.InterfaceAddrs()
	if err != nil {
		return out
	}
	for _, a := range as {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			out = append(out, p.Addr().Unmap())
		}
	}
	return out
}
