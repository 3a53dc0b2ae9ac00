package config

import (
	"fmt"
	"net/netip"
	"reflect"
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

// Empty reports whether the listener sets no policy.
func (p ListenerPolicy) Empty() bool { return reflect.ValueOf(p).IsZero() }

// RoutePolicy is what a route does to the requests it matches besides choosing their pool.
type RoutePolicy struct {
	// RequestHeaders change the request before it goes to the backend.
	RequestHeaders *HeaderRules `yaml:"request_headers,omitempty"`
	// ResponseHeaders change the backend's response before it goes to the client.
	ResponseHeaders *HeaderRules `yaml:"response_headers,omitempty"`
}

// Empty reports whether the route sets no policy.
func (p RoutePolicy) Empty() bool { return reflect.ValueOf(p).IsZero() }

// HeaderRules removes, sets and adds header fields, in that order. Set and Add entries are
// "Name: value" lines whose value may use the template variables (${client_ip}, ...).
type HeaderRules struct {
	Remove []string `yaml:"remove,omitempty"` // names
	Set    []string `yaml:"set,omitempty"`    // replaces every field of that name
	Add    []string `yaml:"add,omitempty"`    // appends a field, keeping those there
}

// Template variables in header values.
const (
	VarClientIP  = "client_ip"  // the client's address (see trusted_proxies)
	VarScheme    = "scheme"     // http or https, as the client connected
	VarHost      = "host"       // the request's Host
	VarRequestID = "request_id" // X-Request-Id (listeners[].request_id), else empty
	VarBackend   = "backend"    // the backend's name; response headers only
)

var templateVars = []string{VarClientIP, VarScheme, VarHost, VarRequestID, VarBackend}

// TemplatePart is a piece of a parsed header value: a literal, or a variable when Var is set.
type TemplatePart struct {
	Literal string
	Var     string
}

// ParseTemplate splits a header value into literals and ${variable}s; "$$" is a literal "$".
func ParseTemplate(s string) ([]TemplatePart, error) {
	var parts []TemplatePart
	var lit strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '\r' || c == '\n' || c == 0 {
			return nil, fmt.Errorf("a header value may not contain CR, LF or NUL")
		}
		if c != '$' {
			lit.WriteByte(c)
			continue
		}
		switch {
		case i+1 < len(s) && s[i+1] == '$':
			lit.WriteByte('$')
			i++
		case i+1 < len(s) && s[i+1] == '{':
			end := strings.IndexByte(s[i+2:], '}')
			if end < 0 {
				return nil, fmt.Errorf("%q: ${ without a closing }", s)
			}
			name := s[i+2 : i+2+end]
			if !oneOf(name, templateVars) {
				return nil, fmt.Errorf("%q: unknown variable ${%s} (valid: ${%s}; $$ is a literal $)", s, name, strings.Join(templateVars, "}, ${"))
			}
			if lit.Len() > 0 {
				parts = append(parts, TemplatePart{Literal: lit.String()})
				lit.Reset()
			}
			parts = append(parts, TemplatePart{Var: name})
			i += 2 + end
		default:
			return nil, fmt.Errorf("%q: a $ must start ${variable} or be written $$", s)
		}
	}
	if lit.Len() > 0 {
		parts = append(parts, TemplatePart{Literal: lit.String()})
	}
	return parts, nil
}

// ParseHeaderLine splits a "Name: value" rule and parses its value.
func ParseHeaderLine(line string) (name string, value []TemplatePart, err error) {
	name, v, ok := strings.Cut(line, ":")
	if !ok {
		return "", nil, fmt.Errorf("%q is not \"Name: value\"", line)
	}
	if err := checkHeaderName(name); err != nil {
		return "", nil, err
	}
	value, err = ParseTemplate(strings.TrimSpace(v))
	return name, value, err
}

// framingHeaders are the fields a header rule may not touch: they frame the message or
// describe the connection, and Ballast sets them itself.
var framingHeaders = []string{"content-length", "transfer-encoding", "connection", "keep-alive", "upgrade", "te", "trailer", "proxy-connection"}

func checkHeaderName(name string) error {
	if name == "" {
		return fmt.Errorf("empty header name")
	}
	for i := 0; i < len(name); i++ {
		if !isTChar(name[i]) {
			return fmt.Errorf("%q is not a header name (letters, digits and !#$%%&'*+-.^_`|~)", name)
		}
	}
	if oneOf(strings.ToLower(name), framingHeaders) {
		return fmt.Errorf("%s frames the message or the connection; Ballast manages it", name)
	}
	return nil
}

func isTChar(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// validateHeaderRules checks one request_headers or response_headers mapping.
func validateHeaderRules(hr *HeaderRules, p string, response bool, fail func(path, format string, args ...any)) {
	if hr == nil {
		return
	}
	for i, n := range hr.Remove {
		if err := checkHeaderName(n); err != nil {
			fail(fmt.Sprintf("%s.remove[%d]", p, i), "%v", err)
		}
	}
	for _, list := range []struct {
		key   string
		lines []string
	}{{"set", hr.Set}, {"add", hr.Add}} {
		for i, line := range list.lines {
			lp := fmt.Sprintf("%s.%s[%d]", p, list.key, i)
			_, value, err := ParseHeaderLine(line)
			if err != nil {
				fail(lp, "%v (e.g. \"X-Client: ${client_ip}\")", err)
				continue
			}
			for _, part := range value {
				if part.Var == VarBackend && !response {
					fail(lp, "${backend} is known only once a backend answered: use it in response_headers")
				}
			}
		}
	}
}

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
	for i := range c.Routes {
		r := &c.Routes[i]
		p := fmt.Sprintf("routes[%d]", i)
		validateHeaderRules(r.RequestHeaders, p+".request_headers", false, fail)
		validateHeaderRules(r.ResponseHeaders, p+".response_headers", true, fail)
	}
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
