package httpproxy

import (
	"bytes"
	"regexp"
	"strconv"

	"github.com/valyala/fasthttp"

	"ballast/config"
)

// rewrite is a compiled route rewrite: one of strip, prefix→repl, re→repl. It works on the
// path of the request URI as the client wrote it (still percent-encoded) and keeps the query.
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
	c := &rewrite{strip: []byte(rw.StripPrefix), prefix: []byte(rw.Prefix), repl: []byte(rw.Replacement)}
	if rw.Regex != "" {
		re, err := config.CompileRewrite(rw.Regex, rw.Replacement)
		if err != nil {
			return nil, err
		}
		c.re = re
	}
	return c, nil
}

// path returns the rewritten path, appended to dst, and whether the rule applied. The result
// always starts with '/'.
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

// splitURI splits an origin-form request URI into path and "?query" (empty when none).
func splitURI(uri []byte) (path, query []byte) {
	if i := bytes.IndexByte(uri, '?'); i >= 0 {
		return uri[:i], uri[i:]
	}
	return uri, nil
}

// applyRewrite rewrites the request's path; a request in absolute form (a proxy request) or
// with a path the rule does not match is left alone.
func (st *reqState) applyRewrite(req *fasthttp.Request, rw *rewrite) {
	uri := req.Header.RequestURI()
	if len(uri) == 0 || uri[0] != '/' {
		return
	}
	path, query := splitURI(uri)
	b, ok := rw.path(st.tmp[:0], path)
	if !ok {
		return
	}
	b = append(b, query...)
	st.tmp = b
	req.SetRequestURIBytes(b) // copies; the parsed URI is dropped so Write sends this one
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
	if rd.Port > 0 {
		c.port = []byte(":" + strconv.Itoa(rd.Port))
	}
	return c
}

// answer sends the redirect: Location is scheme://host[:port]path?query.
func (rd *redirect) answer(ctx *fasthttp.RequestCtx, rw *rewrite, tls bool, buf []byte) []byte {
	h := &ctx.Request.Header
	scheme := rd.scheme
	if len(scheme) == 0 {
		scheme = valHTTP
		if tls {
			scheme = valHTTPS
		}
	}
	b := append(buf[:0], scheme...)
	b = append(b, "://"...)
	host := rd.host
	if len(host) == 0 {
		host = h.Host()
		// A changed scheme or an explicit port makes the request's port meaningless.
		if len(rd.scheme) > 0 && !bytes.Equal(rd.scheme, schemeOf(tls)) || len(rd.port) > 0 {
			host = stripPort(host)
		}
	}
	b = append(b, host...)
	b = append(b, rd.port...)
	uri := h.RequestURI()
	if len(uri) == 0 || uri[0] != '/' { // absolute form: take the path from the parsed URI
		uri = ctx.Request.URI().RequestURI()
	}
	path, query := splitURI(uri)
	switch {
	case len(rd.path) > 0:
		b = append(b, rd.path...)
	case rw != nil:
		var ok bool
		if b, ok = rw.path(b, path); !ok {
			b = append(b, path...)
		}
	default:
		b = append(b, path...)
	}
	b = append(b, query...)
	ctx.Response.Reset()
	ctx.SetStatusCode(rd.status)
	ctx.Response.Header.SetCanonical(keyLocation, b)
	ctx.Response.Header.SetContentLength(0)
	if h.ContentLength() != 0 {
		ctx.SetConnectionClose() // the body was not read
	}
	return b
}

var keyLocation = []byte("Location")

func schemeOf(tls bool) []byte {
	if tls {
		return valHTTPS
	}
	return valHTTP
}

// stripPort removes a :port from a Host value (IPv6 literals keep their brackets).
func stripPort(host []byte) []byte {
	if i := bytes.LastIndexByte(host, ':'); i >= 0 && bytes.IndexByte(host[i:], ']') < 0 {
		return host[:i]
	}
	return host
}
