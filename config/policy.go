package config

import (
	"fmt"
	"io"
	"math"
	"net/netip"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Traffic policy: what an edge proxy does to a request besides routing it. Each part is
// optional; a route or listener that sets none of it costs nothing on the request path
// (the HTTP core compiles a policy only for those that do).

// ListenerPolicy is the part of a listener's configuration that applies to every request it
// accepts, whatever the route.
type ListenerPolicy struct {
	// RequestID makes sure every request carries X-Request-Id: a client's is kept when it comes
	// from a trusted proxy, otherwise a new one replaces it. It is sent to the backend, returned
	// to the client and written in the access log.
	RequestID bool `yaml:"request_id,omitempty"`
	// Allow and Deny are access control on the client's address (see trusted_proxies): a
	// client in Deny, or outside a non-empty Allow, gets 403.
	Allow []string `yaml:"allow,omitempty"`
	Deny  []string `yaml:"deny,omitempty"`
	// MaxConnsPerClient caps the connections one client address may hold open on this
	// listener; more are closed at once. 0 = no limit. Trusted proxies are not limited.
	MaxConnsPerClient int `yaml:"max_conns_per_client,omitempty"`
}

// Empty reports whether the listener sets no policy.
func (p ListenerPolicy) Empty() bool { return reflect.ValueOf(p).IsZero() }

// RoutePolicy is what a route does to the requests it matches besides choosing their pool.
type RoutePolicy struct {
	// RequestHeaders change the request before it goes to the backend.
	RequestHeaders *HeaderRules `yaml:"request_headers,omitempty"`
	// ResponseHeaders change the backend's response before it goes to the client.
	ResponseHeaders *HeaderRules `yaml:"response_headers,omitempty"`
	// Rewrite changes the path before the request goes to the backend.
	Rewrite *Rewrite `yaml:"rewrite,omitempty"`
	// Redirect answers the request with a redirection instead of forwarding it; such a
	// route needs no pool.
	Redirect *Redirect `yaml:"redirect,omitempty"`
	// Allow and Deny: access control as on listeners, checked after the listener's.
	Allow []string `yaml:"allow,omitempty"`
	Deny  []string `yaml:"deny,omitempty"`
	// MaxBodyBytes refuses larger request bodies with 413; 0 = no limit.
	MaxBodyBytes int `yaml:"max_body_bytes,omitempty"`
	// Timeouts and Retries override the pool's for this route's requests.
	Timeouts *RouteTimeouts `yaml:"timeouts,omitempty"`
	Retries  *RouteRetries  `yaml:"retries,omitempty"`
	// RateLimit answers 429 to a client over its rate.
	RateLimit *RateLimit `yaml:"rate_limit,omitempty"`
	// Compress compresses responses for clients that accept it; off when absent.
	Compress *Compress `yaml:"compress,omitempty"`
}

// Compress says which responses a route compresses and how.
type Compress struct {
	Types      []string `yaml:"types"`      // media types, "text/*" allowed; default DefaultCompressTypes
	MinSize    int      `yaml:"min_size"`   // bytes; smaller responses of known length go as they are
	Algorithms []string `yaml:"algorithms"` // in order of preference; default br, gzip
}

// Compression defaults.
var (
	DefaultCompressTypes = []string{"text/html", "text/css", "text/plain", "text/javascript", "text/xml",
		"application/javascript", "application/json", "application/xml", "image/svg+xml"}
	DefaultCompressAlgorithms = []string{"br", "gzip"}
)

// DefaultCompressMinSize is compress.min_size when left out.
const DefaultCompressMinSize = 1024

// RateLimit is a token bucket per key: Rate tokens a second, up to Burst.
type RateLimit struct {
	Rate    float64 `yaml:"rate"`     // requests per second, e.g. 10 or 0.5
	Burst   int     `yaml:"burst"`    // bucket size; default max(1, ceil(rate))
	Key     string  `yaml:"key"`      // source_ip (default), header or cookie
	Name    string  `yaml:"name"`     // the header or cookie name
	MaxKeys int     `yaml:"max_keys"` // buckets kept at most (default 100000)
}

// Rate limit keys.
const (
	RateKeySourceIP = "source_ip"
	RateKeyHeader   = "header"
	RateKeyCookie   = "cookie"
)

// DefaultRateMaxKeys bounds a rate limit's memory when max_keys is left out.
const DefaultRateMaxKeys = 100000

var rateKeys = []string{RateKeySourceIP, RateKeyHeader, RateKeyCookie}

// RouteTimeouts overrides a pool's response timeout; what is left out is the pool's.
type RouteTimeouts struct {
	Response Duration `yaml:"response"`
}

// RouteRetries overrides a pool's retry settings; what is left out is the pool's. The retry
// budget stays the pool's.
type RouteRetries struct {
	Attempts      int  `yaml:"attempts"`
	NonIdempotent bool `yaml:"non_idempotent"`
}

// Rewrite is one of: strip_prefix; prefix with replacement; regex with replacement. The
// query string is kept as it is.
type Rewrite struct {
	StripPrefix string `yaml:"strip_prefix,omitempty"`
	Prefix      string `yaml:"prefix,omitempty"`
	Regex       string `yaml:"regex,omitempty"` // RE2 syntax, matched against the path
	Replacement string `yaml:"replacement,omitempty"`
}

// Redirect builds the Location from the request, replacing what is set.
type Redirect struct {
	Status int    `yaml:"status"`           // 301 (default), 302, 307 or 308
	Scheme string `yaml:"scheme,omitempty"` // http or https; default the request's
	Host   string `yaml:"host,omitempty"`   // default the request's Host
	Port   int    `yaml:"port,omitempty"`   // default: none (the scheme's) when scheme or host change, else the request's
	Path   string `yaml:"path,omitempty"`   // default the request's path (after rewrite)
}

// DefaultRedirectStatus is a redirect's status when none is given.
const DefaultRedirectStatus = 301

var redirectStatuses = []int{301, 302, 307, 308}

// Empty reports whether the route sets no policy.
func (p RoutePolicy) Empty() bool { return reflect.ValueOf(p).IsZero() }

// HeaderRules removes, sets and adds header fields, in that order. Set and Add entries are
// "Name: value" lines whose value may use the template variables (${client_ip}, ...).
type HeaderRules struct {
	Remove []string `yaml:"remove,omitempty"` // names
	Set    []string `yaml:"set,omitempty"`    // replaces every field of that name
	Add    []string `yaml:"add,omitempty"`    // appends a field, keeping those there
}

// ErrorPage replaces the body of a response Ballast itself produces with a given status.
type ErrorPage struct {
	Status      int    `yaml:"status"`
	File        string `yaml:"file,omitempty"` // read when the configuration loads
	Body        string `yaml:"body,omitempty"`
	ContentType string `yaml:"content_type"` // default text/html; charset=utf-8
}

// DefaultErrorPageType is an error page's Content-Type when none is given.
const DefaultErrorPageType = "text/html; charset=utf-8"

// maxErrorPage bounds an error page file, which is held in memory.
const maxErrorPage = 1 << 20

var errorPageStatuses = []int{403, 404, 413, 429, 502, 503, 504}

// Sticky is cookie insertion (HAProxy's "cookie NAME insert"): the first response sets a
// cookie naming the backend by an opaque token, and later requests carrying it go to that
// backend while it is usable.
type Sticky struct {
	Cookie   string   `yaml:"cookie"`
	MaxAge   Duration `yaml:"max_age"` // 0 = a session cookie
	Path     string   `yaml:"path"`    // default /
	Secure   bool     `yaml:"secure"`
	HTTPOnly bool     `yaml:"http_only"`
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
	pools := map[string]*Pool{}
	for i := range c.Pools {
		pools[c.Pools[i].Name] = &c.Pools[i]
	}
	for i := range c.Pools {
		if st := c.Pools[i].Sticky; st != nil && st.Path == "" {
			st.Path = "/"
		}
	}
	for i := range c.ErrorPages {
		if c.ErrorPages[i].ContentType == "" {
			c.ErrorPages[i].ContentType = DefaultErrorPageType
		}
	}
	for i := range c.Routes {
		r := &c.Routes[i]
		p := fmt.Sprintf("routes[%d]", i)
		if rd := r.Redirect; rd != nil && rd.Status == 0 {
			rd.Status = DefaultRedirectStatus
		}
		if cp := r.Compress; cp != nil {
			if len(cp.Types) == 0 {
				cp.Types = append([]string(nil), DefaultCompressTypes...)
			}
			if len(cp.Algorithms) == 0 {
				cp.Algorithms = append([]string(nil), DefaultCompressAlgorithms...)
			}
			setInt(d, p+".compress.min_size", &cp.MinSize, DefaultCompressMinSize)
		}
		if rl := r.RateLimit; rl != nil {
			if rl.Key == "" {
				rl.Key = RateKeySourceIP
			}
			setInt(d, p+".rate_limit.burst", &rl.Burst, max(1, int(math.Ceil(rl.Rate))))
			setInt(d, p+".rate_limit.max_keys", &rl.MaxKeys, DefaultRateMaxKeys)
		}
		// A route's timeouts and retries start from its pool's: only what is written differs.
		pl := pools[r.Pool]
		if pl == nil {
			continue
		}
		if rt := r.Timeouts; rt != nil && !d.has(p+".timeouts.response", rt.Response.Duration != 0) {
			rt.Response = pl.Timeouts.Response
		}
		if rr := r.Retries; rr != nil {
			if !d.has(p+".retries.attempts", rr.Attempts != 0) {
				rr.Attempts = pl.Retries.Attempts
			}
			if !d.has(p+".retries.non_idempotent", rr.NonIdempotent) {
				rr.NonIdempotent = pl.Retries.NonIdempotent
			}
		}
	}
	if c.Logging.Access && c.Logging.AccessFormat == "" {
		c.Logging.AccessFormat = AccessJSON
	}
}

// validatePolicy checks the policy keys of every listener and route.
func (d *decoder) validatePolicy(c *Config, fail func(path, format string, args ...any)) {
	checkPrefixes("trusted_proxies", c.TrustedProxies, fail)
	for i := range c.Listeners {
		l := &c.Listeners[i]
		p := fmt.Sprintf("listeners[%d]", i)
		if l.IsL4() && !l.ListenerPolicy.Empty() {
			fail(p, "listener %s is %s: request_id, allow, deny and max_conns_per_client apply to http listeners", l.Name, l.Protocol)
		}
		checkPrefixes(p+".allow", l.Allow, fail)
		checkPrefixes(p+".deny", l.Deny, fail)
		if l.MaxConnsPerClient < 0 {
			fail(p+".max_conns_per_client", "must be 0 (no limit) or more, got %d", l.MaxConnsPerClient)
		}
	}
	for i := range c.Routes {
		r := &c.Routes[i]
		p := fmt.Sprintf("routes[%d]", i)
		for _, l := range c.Listeners {
			if (r.Listener == "" || r.Listener == l.Name) && l.IsL4() && !r.RoutePolicy.Empty() {
				fail(p, "listener %s is %s: traffic policy applies to http routes only", l.Name, l.Protocol)
				break
			}
		}
		validateHeaderRules(r.RequestHeaders, p+".request_headers", false, fail)
		validateHeaderRules(r.ResponseHeaders, p+".response_headers", true, fail)
		ValidateRewrite(r.Rewrite, p+".rewrite", fail)
		checkPrefixes(p+".allow", r.Allow, fail)
		checkPrefixes(p+".deny", r.Deny, fail)
		if r.MaxBodyBytes < 0 {
			fail(p+".max_body_bytes", "must be 0 (no limit) or more, got %d", r.MaxBodyBytes)
		}
		if r.Redirect != nil && (r.Timeouts != nil || r.Retries != nil || r.MaxBodyBytes != 0) {
			fail(p+".redirect", "a redirect is answered by Ballast: max_body_bytes, timeouts and retries do nothing here")
		}
		if rl := r.RateLimit; rl != nil {
			validateRateLimit(rl, p+".rate_limit", fail)
		}
		if cp := r.Compress; cp != nil {
			validateCompress(cp, p+".compress", fail)
		}
		if rr := r.Retries; rr != nil && (rr.Attempts < 1 || rr.Attempts > MaxAttempts) {
			fail(p+".retries.attempts", "must be between 1 (no retry) and %d, got %d", MaxAttempts, rr.Attempts)
		}
		validateRedirect(r.Redirect, p+".redirect", fail)
	}
	for i := range c.Pools {
		st := c.Pools[i].Sticky
		if st == nil {
			continue
		}
		p := fmt.Sprintf("pools[%d].sticky", i)
		if c.L4Pool(c.Pools[i].Name) {
			fail(p, "sticky cookies need http; for tcp and udp pools use persistence")
		}
		if err := checkHeaderName(st.Cookie); err != nil || strings.ContainsAny(st.Cookie, "=;,") {
			fail(p+".cookie", "needs a cookie name such as SRV (a token), got %q", st.Cookie)
		}
		if !strings.HasPrefix(st.Path, "/") || strings.ContainsAny(st.Path, "; \t\r\n") {
			fail(p+".path", "must start with / and hold no ; or spaces, got %q", st.Path)
		}
	}
	seen := map[int]bool{}
	for i, ep := range c.ErrorPages {
		p := fmt.Sprintf("error_pages[%d]", i)
		switch {
		case !slices.Contains(errorPageStatuses, ep.Status):
			fail(p+".status", "Ballast produces no %d of its own; valid: 403, 404, 413, 429, 502, 503, 504", ep.Status)
		case seen[ep.Status]:
			fail(p+".status", "status %d has two pages", ep.Status)
		}
		seen[ep.Status] = true
		if (ep.File == "") == (ep.Body == "") {
			fail(p, "set either file (a path) or body (the text), not both")
		} else if ep.File != "" {
			if _, err := ReadErrorPage(ep.File); err != nil {
				fail(p+".file", "%v", err)
			}
		}
		if strings.ContainsAny(ep.ContentType, "\r\n") {
			fail(p+".content_type", "may not contain CR or LF")
		}
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

// ValidateRewrite reports what is wrong with a rewrite through fail; p is its field path.
func ValidateRewrite(rw *Rewrite, p string, fail func(path, format string, args ...any)) {
	if rw == nil {
		return
	}
	n := 0
	for _, set := range []bool{rw.StripPrefix != "", rw.Prefix != "", rw.Regex != ""} {
		if set {
			n++
		}
	}
	switch {
	case n != 1:
		fail(p, "set one of strip_prefix, prefix (with replacement) or regex (with replacement)")
		return
	case rw.StripPrefix != "" && !strings.HasPrefix(rw.StripPrefix, "/"):
		fail(p+".strip_prefix", "must start with /, got %q", rw.StripPrefix)
	case rw.StripPrefix != "" && rw.Replacement != "":
		fail(p+".replacement", "strip_prefix removes the prefix; use prefix: with replacement: to replace it")
	case rw.Prefix != "" && !strings.HasPrefix(rw.Prefix, "/"):
		fail(p+".prefix", "must start with /, got %q", rw.Prefix)
	case rw.StripPrefix == "" && rw.Replacement == "":
		fail(p+".replacement", "prefix and regex need a replacement, e.g. /v2/ or /users/$1")
	}
	if rw.Regex != "" {
		if _, err := CompileRewrite(rw.Regex, rw.Replacement); err != nil {
			fail(p+".regex", "%v", err)
		}
	}
	if err := checkPathChars(rw.Replacement); err != nil {
		fail(p+".replacement", "%v", err)
	}
}

// CompileRewrite compiles a regex rewrite: the expression (RE2 syntax, with $1 or ${name}
// references to its groups in the replacement).
func CompileRewrite(expr, replacement string) (*regexp.Regexp, error) {
	re, err := regexp.Compile(expr)
	if err != nil {
		return nil, fmt.Errorf("not a regular expression (RE2 syntax): %v", err)
	}
	for _, m := range groupRef.FindAllStringSubmatch(replacement, -1) {
		name := m[1] + m[2]
		if n, err := strconv.Atoi(name); err == nil {
			if n > re.NumSubexp() {
				return nil, fmt.Errorf("the replacement uses $%d but the expression has %d groups", n, re.NumSubexp())
			}
		} else if re.SubexpIndex(name) < 0 {
			return nil, fmt.Errorf("the replacement uses ${%s} but the expression has no group of that name (write ${1}x for group 1 followed by x)", name)
		}
	}
	return re, nil
}

var groupRef = regexp.MustCompile(`\$(?:\{(\w+)\}|(\w+))`)

// checkPathChars refuses what may not appear in a path written into the request line.
func checkPathChars(s string) error {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f || c == '?' || c == '#' {
			return fmt.Errorf("%q: a path may not contain spaces, control characters, ? or # (the query string is kept as it is)", s)
		}
	}
	return nil
}

func validateRedirect(rd *Redirect, p string, fail func(path, format string, args ...any)) {
	if rd == nil {
		return
	}
	if !slices.Contains(redirectStatuses, rd.Status) {
		fail(p+".status", "must be 301, 302, 307 or 308, got %d", rd.Status)
	}
	if rd.Scheme != "" && rd.Scheme != "http" && rd.Scheme != "https" {
		fail(p+".scheme", "must be http or https, got %q", rd.Scheme)
	}
	if strings.ContainsAny(rd.Host, "/ ?#@") || strings.Contains(rd.Host, ":") && !strings.HasPrefix(rd.Host, "[") {
		fail(p+".host", "must be a host name such as www.example.com (the port goes in port:), got %q", rd.Host)
	}
	if rd.Port < 0 || rd.Port > 65535 {
		fail(p+".port", "must be a port from 1 to 65535, got %d", rd.Port)
	}
	if rd.Path != "" {
		if !strings.HasPrefix(rd.Path, "/") {
			fail(p+".path", "must start with /, got %q", rd.Path)
		} else if err := checkPathChars(rd.Path); err != nil {
			fail(p+".path", "%v", err)
		}
	}
}

func validateRateLimit(rl *RateLimit, p string, fail func(path, format string, args ...any)) {
	if rl.Rate <= 0 || rl.Rate > 1e6 {
		fail(p+".rate", "must be more than 0 and at most 1000000 requests a second, e.g. 10 or 0.5; got %g", rl.Rate)
	}
	if rl.Burst < 1 {
		fail(p+".burst", "must be at least 1, got %d", rl.Burst)
	}
	if rl.MaxKeys < 1 || rl.MaxKeys > 10_000_000 {
		fail(p+".max_keys", "must be between 1 and 10000000, got %d", rl.MaxKeys)
	}
	switch {
	case !oneOf(rl.Key, rateKeys):
		fail(p+".key", "unknown key %q (valid: %s)", rl.Key, strings.Join(rateKeys, ", "))
	case rl.Key != RateKeySourceIP && rl.Name == "":
		fail(p+".name", "key %s needs the %s name", rl.Key, rl.Key)
	case rl.Key == RateKeySourceIP && rl.Name != "":
		fail(p+".name", "key source_ip takes no name")
	}
}

// ReadErrorPage reads an error page file, refusing one over 1 MiB (it is held in memory).
func ReadErrorPage(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxErrorPage+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxErrorPage {
		return nil, fmt.Errorf("%s is over 1 MiB", path)
	}
	return b, nil
}

func validateCompress(cp *Compress, p string, fail func(path, format string, args ...any)) {
	if cp.MinSize < 0 {
		fail(p+".min_size", "must be 0 or more bytes, got %d", cp.MinSize)
	}
	for i, t := range cp.Types {
		typ, sub, ok := strings.Cut(t, "/")
		if !ok || typ == "" || sub == "" || strings.ContainsAny(t, " ;,") || typ == "*" {
			fail(fmt.Sprintf("%s.types[%d]", p, i), "%q is not a media type such as text/html or text/*", t)
		}
	}
	seen := map[string]bool{}
	for i, a := range cp.Algorithms {
		ap := fmt.Sprintf("%s.algorithms[%d]", p, i)
		switch {
		case !oneOf(a, DefaultCompressAlgorithms):
			fail(ap, "unknown algorithm %q (valid: br, gzip)", a)
		case seen[a]:
			fail(ap, "%s is listed twice", a)
		}
		seen[a] = true
	}
}
