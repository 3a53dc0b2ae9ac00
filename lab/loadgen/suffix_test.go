package loadgen

import (
	"bufio"
	"bytes"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

func TestJoinSuffix(t *testing.T) {
	for _, tc := range []struct{ url, line, want string }{
		{"http://h/", "?wait=1", "http://h/?wait=1"},
		{"http://h/", "wait=1", "http://h/?wait=1"},
		{"http://h/", "&wait=1", "http://h/?wait=1"},
		{"http://h/?a=1", "?wait=1", "http://h/?a=1&wait=1"},
		{"http://h/?a=1", "wait=1", "http://h/?a=1&wait=1"},
		{"http://h/?", "wait=1", "http://h/?wait=1"},
		{"http://h/?a=1&", "&wait=1", "http://h/?a=1&wait=1"},
		{"http://h/", "/x", "http://h/x"},
		{"http://h", "/x", "http://h/x"},
		{"http://h/a/", "/b", "http://h/a/b"},
		{"http://h/a", "/b?c=1", "http://h/a/b?c=1"},
		{"http://h/", "", "http://h/"},
		{"http://h/", "  wait=1\r", "http://h/?wait=1"},
		{"http://h/", "?", "http://h/"},
	} {
		if got := JoinSuffix(tc.url, tc.line); got != tc.want {
			t.Errorf("JoinSuffix(%q, %q) = %q, want %q", tc.url, tc.line, got, tc.want)
		}
	}
}

func FuzzJoinSuffix(f *testing.F) {
	for _, s := range [][2]string{{"http://h/", "?wait=1"}, {"http://h/?a", "b"}, {"http://h", "/x"}, {"", "&&"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, url, line string) {
		got := JoinSuffix(url, line)
		q := strings.TrimLeft(strings.TrimSpace(line), "?&")
		if !strings.HasSuffix(got, q) {
			t.Errorf("JoinSuffix(%q, %q) = %q lost the suffix %q", url, line, got, q)
		}
		if !strings.HasPrefix(got, strings.TrimSuffix(url, "/")) {
			t.Errorf("JoinSuffix(%q, %q) = %q lost the URL", url, line, got)
		}
		if strings.Count(got, "?") > strings.Count(url, "?")+strings.Count(line, "?")+1 {
			t.Errorf("JoinSuffix(%q, %q) = %q added more than one '?'", url, line, got)
		}
		if strings.Contains(got[min(len(url), len(got)):], "&&") && !strings.Contains(line, "&&") {
			t.Errorf("JoinSuffix(%q, %q) = %q doubled '&'", url, line, got)
		}
	})
}

func TestReadSuffixes(t *testing.T) {
	got, err := ReadSuffixes(strings.NewReader("?wait=0\r\n\n# comment\nwait=1\n  ?wait=5  \n"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"?wait=0", "wait=1", "?wait=5"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("ReadSuffixes = %q, want %q", got, want)
	}
}

func FuzzReadSuffixes(f *testing.F) {
	f.Add("a\nb\r\n#c\n\n")
	f.Fuzz(func(t *testing.T, s string) {
		lines, err := ReadSuffixes(strings.NewReader(s))
		if err != nil {
			return
		}
		for _, l := range lines {
			if l == "" || l[0] == '#' || strings.ContainsAny(l, "\n") || l != strings.TrimSpace(l) {
				t.Errorf("bad line %q from %q", l, s)
			}
		}
	})
}

// FuzzBuildRequest checks that every request the builder accepts parses back with the same
// method, path and headers.
func FuzzBuildRequest(f *testing.F) {
	f.Add("GET", "/p", "?wait=1", "X-A: b", "")
	f.Add("POST", "/", "ms=3", "Host: example.org", "body")
	f.Fuzz(func(t *testing.T, method, path, suffix, header, body string) {
		o := Options{Method: method, Headers: []string{header}, Body: []byte(body), KeepAlive: true}
		full := JoinSuffix("http://127.0.0.1:1"+path, suffix)
		b, err := buildRequest(o, full)
		if err != nil {
			return
		}
		var req fasthttp.Request
		if err := req.Read(bufio.NewReader(bytes.NewReader(b))); err != nil {
			t.Skip("fasthttp rejects its own serialisation:", err) // not the builder's contract
		}
		if method != "" && string(req.Header.Method()) != method {
			t.Errorf("method %q, want %q", req.Header.Method(), method)
		}
		if len(body) > 0 && string(req.Body()) != body {
			t.Errorf("body %q, want %q", req.Body(), body)
		}
	})
}
