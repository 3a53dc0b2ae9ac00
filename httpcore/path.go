package httpcore

import "bytes"

// Paths. Routes match, and rewrites and redirects work on, the normalised path: percent-
// encoding decoded (%2F included, so "/old%2Fx" is "/old/x"), runs of slashes collapsed, "."
// and ".." segments resolved (".." never climbs above the root). This is the path as nginx's
// $uri holds it, the same whichever HTTP version the request came in: what a route hides
// behind a rewrite cannot be reached by spelling the path another way. A target no rewrite
// changes is forwarded byte for byte.

// splitTarget splits an origin-form or absolute-form target into its path and its "?query"
// (empty when none). An absolute-form target's path starts after its authority ("/" when it
// has none). Other forms ("*", an authority) have no path.
func splitTarget(target []byte) (path, query []byte) {
	if len(target) == 0 {
		return nil, nil
	}
	if target[0] != '/' {
		i := bytes.Index(target, []byte("://"))
		if i < 0 {
			return nil, nil
		}
		rest := target[i+3:]
		j := bytes.IndexAny(rest, "/?")
		if j < 0 {
			return []byte("/"), nil
		}
		target = rest[j:]
		if target[0] == '?' {
			return []byte("/"), target
		}
	}
	if i := bytes.IndexByte(target, '?'); i >= 0 {
		return target[:i], target[i:]
	}
	return target, nil
}

// normal reports whether path is its own normalised form: a '/' first, and no
// percent-escape, repeated slash or dot segment (a segment starting with '.' is not looked
// into: NormalizePath decides).
func normal(path []byte) bool {
	if len(path) == 0 || path[0] != '/' {
		return false
	}
	for i := 0; i < len(path); i++ {
		switch path[i] {
		case '%':
			return false
		case '/':
			if i+1 < len(path) && (path[i+1] == '/' || path[i+1] == '.') {
				return false
			}
		}
	}
	return true
}

// NormalizePath appends the normalised form of path (percent-encoded, as in a request target)
// to dst. The result starts with '/'.
func NormalizePath(dst, path []byte) []byte {
	start := len(dst)
	dst = append(dst, '/')
	for i := 0; i < len(path); i++ {
		c := path[i]
		if c == '%' && i+2 < len(path) && isHex(path[i+1]) && isHex(path[i+2]) {
			c = unhex(path[i+1])<<4 | unhex(path[i+2])
			i += 2
		}
		if c == '/' {
			dst = endSegment(dst, start, false)
			continue
		}
		dst = append(dst, c)
	}
	return endSegment(dst, start, true)
}

// endSegment ends the segment that dst (the normalised path from start, whose last segment is
// the one being built) holds last: an empty segment or "." is dropped, ".." also removes the
// segment before it, and a kept segment gets its '/' unless it is the final one.
func endSegment(dst []byte, start int, final bool) []byte {
	seg := dst[bytes.LastIndexByte(dst[start:], '/')+start+1:]
	switch string(seg) {
	case "":
		return dst
	case ".":
		return dst[:len(dst)-1]
	case "..":
		dst = dst[:len(dst)-2] // drop ".."; dst now ends in the '/' before it
		if len(dst)-start > 1 {
			dst = dst[:len(dst)-1]
			dst = dst[:bytes.LastIndexByte(dst[start:], '/')+start+1]
		}
		return dst
	}
	if final {
		return dst
	}
	return append(dst, '/')
}

func isHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c >= 'a':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}

// appendEscapedPath appends a decoded path in request-target form: the bytes RFC 3986 allows
// in a path as they are, every other byte (%, ?, #, space, controls, non-ASCII) percent-encoded.
func appendEscapedPath(dst, path []byte) []byte {
	for _, c := range path {
		if pathChar[c] {
			dst = append(dst, c)
			continue
		}
		dst = append(dst, '%', "0123456789ABCDEF"[c>>4], "0123456789ABCDEF"[c&15])
	}
	return dst
}

// pathChar marks pchar and '/' (RFC 3986 §3.3): unreserved, sub-delims, ':' and '@'.
var pathChar = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
		t[c-'a'+'A'] = true
	}
	for _, c := range "-._~!$&'()*+,;=:@/" {
		t[c] = true
	}
	return t
}()
