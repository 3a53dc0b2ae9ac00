package httpcore

import (
	"strings"
	"testing"
)

func TestNormalizePath(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"/", "/"},
		{"", "/"},
		{"/a/b", "/a/b"},
		{"/a/b/", "/a/b/"},
		{"//old/x", "/old/x"},
		{"/old//x", "/old/x"},
		{"/%6fld/x", "/old/x"},
		{"/old%2Fx", "/old/x"},
		{"/a/./b", "/a/b"},
		{"/a/../b", "/b"},
		{"/../../b", "/b"},
		{"/a/b/..", "/a/"},
		{"/a/b/.", "/a/b/"},
		{"/a/%2e%2e/b", "/b"},
		{"/re/4%32", "/re/42"},
		{"/bad%zz%4", "/bad%zz%4"},
		{"/sp%20ace", "/sp ace"},
	} {
		if got := string(NormalizePath(nil, []byte(tc.in))); got != tc.want {
			t.Errorf("NormalizePath(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestSplitTarget(t *testing.T) {
	for _, tc := range []struct{ in, path, query string }{
		{"/a?b=c", "/a", "?b=c"},
		{"/a", "/a", ""},
		{"http://h:1/x/y?z", "/x/y", "?z"},
		{"http://h", "/", ""},
		{"http://h?q", "/", "?q"},
		{"*", "", ""},
		{"h:443", "", ""},
	} {
		p, q := splitTarget([]byte(tc.in))
		if string(p) != tc.path || string(q) != tc.query {
			t.Errorf("splitTarget(%q) = %q, %q; want %q, %q", tc.in, p, q, tc.path, tc.query)
		}
	}
}

// FuzzNormalizePath: the result starts with '/', has no empty, "." or ".." segment, and is a
// fixed point (normalising it again, once encoded, gives it back).
func FuzzNormalizePath(f *testing.F) {
	for _, s := range []string{"/a/../b", "//x/./y/", "/%2e%2E/%2f", "/a%", "", "/.."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		n := NormalizePath(nil, []byte(p))
		if normal([]byte(p)) && string(n) != p {
			t.Fatalf("normal(%q), yet it normalises to %q", p, n)
		}
		if len(n) == 0 || n[0] != '/' {
			t.Fatalf("NormalizePath(%q) = %q", p, n)
		}
		segs := strings.Split(string(n[1:]), "/")
		for i, s := range segs {
			if s == "." || s == ".." || s == "" && i != len(segs)-1 {
				t.Fatalf("NormalizePath(%q) = %q has segment %q", p, n, s)
			}
		}
		again := NormalizePath(nil, appendEscapedPath(nil, n))
		if string(again) != string(n) {
			t.Fatalf("NormalizePath(%q) = %q, but once encoded it normalises to %q", p, n, again)
		}
	})
}
