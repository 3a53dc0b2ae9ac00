package httpproxy

import "bytes"

// Byte helpers of the HTTP/1 head checks (head.go) and the Upgrade test (tunnel.go).

// asciiEqualFold reports whether b equals the lower-case ASCII string s, ignoring case.
func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}

// hasToken reports whether the comma-separated list contains tok (lower case), ignoring case.
func hasToken(list []byte, tok string) bool {
	for len(list) > 0 {
		var t []byte
		if i := bytes.IndexByte(list, ','); i >= 0 {
			t, list = list[:i], list[i+1:]
		} else {
			t, list = list, nil
		}
		if asciiEqualFold(bytes.TrimSpace(t), tok) {
			return true
		}
	}
	return false
}

var tchar = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
		t[c-'a'+'A'] = true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()
