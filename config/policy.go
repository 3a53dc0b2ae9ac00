package config

import (
	"fmt"
	"net/netip"
	"strings"
)

// Traffic policy: what an edge proxy does to a request besides routing it. Each part is
// optional; a route or listener that sets none of it costs nothing on the request path
// (httpproxy compiles a policy only for those that do).

// ListenerPolicy is the part of a listener's configuration that applies to every request it
// accepts, whatever the route.
type ListenerPolicy struct {
	// RequestID makes sure every request carries X-Request-Id: a client's is kept when it comes
	// from a trusted proxy, otherwise a new one replaces it. It is sent to the backend, returned
	// to the client and written in the access log.
	RequestID bool `yaml:"request_id,omitempty"`
}

// RoutePolicy is what a route does to the requests it matches besides choosing their pool.
type RoutePolicy struct{}

// AccessLog says where the access log goes and its format.
type AccessLog struct {
	// AccessFile is the access log's path; empty writes it to stderr. Reopened on SIGUSR1.
	AccessFile string `yaml:"access_file,omitempty"`
	// AccessFormat is json (one object per line) or combined (NCSA combined plus fields).
	AccessFormat string `yaml:"access_format,omitempty"`
}

// Access log formats.
const (
	AccessJSON     = "json"
	AccessCombined = "combined"
)

var accessFormats = []string{AccessJSON, AccessCombined}

// policyDefaults fills the policy keys left out.
func (d *decoder) policyDefaults(c *Config) {
	if c.Logging.Access && c.Logging.AccessFormat == "" {
		c.Logging.AccessFormat = AccessJSON
	}
}

// validatePolicy checks the policy keys of every listener and route.
func (d *decoder) validatePolicy(c *Config, fail func(path, format string, args ...any)) {
	checkPrefixes("trusted_proxies", c.TrustedProxies, fail)
	lg := c.Logging
	switch {
	case !lg.Access && (lg.AccessFile != "" || lg.AccessFormat != ""):
		fail("logging.access", "access_file and access_format need access: true")
	case lg.Access && !oneOf(lg.AccessFormat, accessFormats):
		fail("logging.access_format", "unknown format %q (valid: %s)", lg.AccessFormat, strings.Join(accessFormats, ", "))
	}
}

// checkPrefixes reports each element of list that ParsePrefixes refuses, at its own path.
func checkPrefixes(path string, list []string, fail func(path, format string, args ...any)) {
	for i, s := range list {
		if _, err := ParsePrefixes([]string{s}); err != nil {
			fail(fmt.Sprintf("%s[%d]", path, i), "%s", strings.TrimPrefix(err.Error(), "[0]: "))
		}
	}
}

// ParsePrefixes parses a list of CIDR prefixes (10.0.0.0/8, 2001:db8::/32) and single
// addresses (192.0.2.1, which means /32 or /128). IPv4-mapped IPv6 forms are unmapped, so a
// rule written either way matches the same clients.
func ParsePrefixes(list []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(list))
	for i, s := range list {
		s = strings.TrimSpace(s)
		var p netip.Prefix
		if strings.Contains(s, "/") {
			var err error
			if p, err = netip.ParsePrefix(s); err != nil {
				return nil, fmt.Errorf("[%d]: %q is not an address or CIDR prefix (e.g. 10.0.0.0/8, 192.0.2.7, 2001:db8::/32)", i, s)
			}
			if p.Addr().Is4In6() && p.Bits() >= 96 {
				p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
			}
		} else {
			a, err := netip.ParseAddr(s)
			if err != nil || a.Zone() != "" {
				return nil, fmt.Errorf("[%d]: %q is not an address or CIDR prefix (e.g. 10.0.0.0/8, 192.0.2.7, 2001:db8::/32)", i, s)
			}
			a = a.Unmap()
			p = netip.PrefixFrom(a, a.BitLen())
		}
		out = append(out, p.Masked())
	}
	return out, nil
}
