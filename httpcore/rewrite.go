package httpcore

import (
	"bytes"
	"regexp"
	"strconv"

	"ballast/config"
)

// rewrite is a compiled route rewrite: one of strip, prefix→repl, re→repl. It works on the
// normalised path the route matched (decoded, see path.go), so that a request cannot avoid a
// rewrite by encoding its path differently, and the result is encoded again for the target;
// the query is kept as the client sent it. Prefixes and the replacement are paths as a route
// prefix is written (percent-escapes in them are decoded once, when compiled).
type rewrite struct {
	strip  []byte
	prefix []byte
	repl   []byte
	re     *regexp.Regexp
}

func compileRewrite(rw *config.Rewrite) (*rewrite, error) {
	if rw == nil {
		return nil, nil
	}
	c := &rewrite{strip: decodePath(rw.StripPrefix), prefix: decodePath(rw.Prefix), repl: []byte(rw.Replacement)}
	if rw.Regex != "" {
		re, err := config.CompileRewrite(rw.Regex, rw.Replacement)
		if err != nil {
			return nil, err
		}
		c.re = re
	} else {
		c.repl = decodePath(rw.Replacement)
	}
	return c, nil
}

// decodePath percent-decodes a configured path.
func decodePath(p string) []byte {
	var out []byte
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c == '%' && i+2 < len(p) && isHex(p[i+1]) && isHex(p[i+2]) {
			c = unhex(p[i+1])<<4 | unhex(p[i+2])
			i += 2
		}
		out = append(out, c)
	}
	return out
}

// path returns the rewritten (decoded) path, appended to dst, and whether the rule applied.
// The result always starts with '/'.
func (rw *rewrite) path(dst, path []byte) ([]byte, bool) {
	start := len(dst)
	switch {
	case len(rw.strip) > 0:
		if !bytes.HasPrefix(path, rw.strip) {
			return dst, false
		}
		dst = append(dst, path[len(rw.strip):]...)
	case len(rw.prefix) > 0:
		if !bytes.HasPrefix(path, rw.prefix) {
			return dst, false
		}
		dst = append(dst, rw.repl...)
		dst = append(dst, path[len(rw.prefix):]...)
	case rw.re != nil:
		m := rw.re.FindSubmatchIndex(path)
		if m == nil {
			return dst, false
		}
		// Like ReplaceAll for the first match: what precedes and follows it is kept.
		dst = append(dst, path[:m[0]]...)
		dst = rw.re.Expand(dst, rw.repl, path, m)
		dst = append(dst, path[m[1]:]...)
	default:
		return dst, false
	}
	if len(dst) == start || dst[start] != '/' {
		dst = append(dst, 0)
		copy(dst[start+1:], dst[start:len(dst)-1])
		dst[start] = '/'
	}
	return dst, true
}

// redirect is a compiled route redirect.
type redirect struct {
	status int
	scheme []byte // empty: the request's
	host   []byte // empty: the request's
	port   []byte // ":8443"; empty: see config.Redirect.Port
	path   []byte // empty: the request's (after rewrite)
}

func compileRedirect(rd *config.Redirect) *redirect {
	if rd == nil {
		return nil
	}
	c := &redirect{status: rd.Status, scheme: []byte(rd.Scheme), host: []byte(rd.Host), path: []byte(rd.Path)}
	if c.status == 0 {
		c.status = config.DefaultRedirectStatus
	}
	if rd.Port > 0 {
		c.port = []byte(":" + strconv.Itoa(rd.Port))
	}
	return c
}

func schemeOf(tls bool) []byte {
	if tls {
		return valHTTPS
	}
	return valHTTP
}

// location appends the redirect's Location, scheme://host[:port]path?query, to buf. path is
// the target's path as it would be forwarded (rewritten, or as sent); a request without a
// host (HTTP/1.0 without Host) is sent to the address it connected to.
func (rd *redirect) location(buf []byte, req Request, tls bool, path, query []byte) []byte {
	scheme := rd.scheme
	if len(scheme) == 0 {
		scheme = schemeOf(tls)
	}
	b := append(buf[:0], scheme...)
	b = append(b, "://"...)
	host := rd.host
	if len(host) == 0 {
		host = req.Host()
		if len(host) == 0 {
			if a := req.LocalAddr(); a != nil {
				host = []byte(a.String()) // rare: an HTTP/1.0 request without Host
			}
		}
		// A changed scheme or an explicit port makes the request's port meaningless.
		if len(rd.scheme) > 0 && !bytes.Equal(rd.scheme, schemeOf(tls)) || len(rd.port) > 0 {
			host = stripPort(host)
		}
	}
	b = append(b, host...)
	b = append(b, rd.port...)
	if len(rd.path) > 0 {
		b = append(b, rd.path...)
	} else {
		if len(path) == 0 {
			path = []byte("/")
		}
		b = append(b, path...)
	}
	return append(b, query...)
}
