package h2proxy

import (
	"bufio"
	"bytes"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
	"golang.org/x/net/http/httpguts"
)

// FuzzRequest1 feeds request1 what x/net/http2 lets through from a client (a token method, an
// origin-form path, a valid Host, one valid header field) and checks that the HTTP/1.1 bytes
// the backend would get are exactly one request, which parses back to the same method,
// target, Host and field: nothing a client sends over HTTP/2 can split or smuggle a request.
func FuzzRequest1(f *testing.F) {
	f.Add("GET", "/a/b?c=d", "example.com", "X-Custom", "v")
	f.Add("POST", "/%0d%0a", "example.com:8080", "Cookie", "a=1; b=2")
	f.Add("PURGE", "/x y", "h", "Te", "trailers")
	f.Add("GET", "/", "[::1]:80", "X-Forwarded-For", "10.0.0.1")
	f.Fuzz(func(t *testing.T, method, path, host, key, value string) {
		u, err := url.ParseRequestURI(path)
		if err != nil || !strings.HasPrefix(path, "/") || host == "" || !httpguts.ValidHostHeader(host) ||
			!httpguts.ValidHeaderFieldName(method) || !httpguts.ValidHeaderFieldName(key) ||
			!httpguts.ValidHeaderFieldValue(value) {
			return // refused by x/net/http2 before a handler runs
		}
		key = http.CanonicalHeaderKey(key)
		if key == "Host" || key == "Content-Length" || hopByHop(key) && key != "Te" {
			return // x/net or the proxy treat these apart
		}
		r := &http.Request{Method: method, URL: u, Host: host, Header: http.Header{key: {value}}}
		e := &exchange{r: r, cs: &connState{clientIP: "192.0.2.1"}}
		var req fasthttp.Request
		req.Header.SetNoDefaultContentType(true)
		e.request1(&req, nil)
		var buf bytes.Buffer
		w := bufio.NewWriter(&buf)
		if err := req.Write(w); err != nil {
			t.Fatalf("write: %v", err)
		}
		w.Flush()
		wire := buf.String()
		var back fasthttp.Request
		br := bufio.NewReader(strings.NewReader(wire))
		if err := back.Read(br); err != nil {
			t.Fatalf("the backend could not parse %q: %v", wire, err)
		}
		if br.Buffered() != 0 {
			t.Fatalf("%q is more than one request", wire)
		}
		if string(back.Header.Method()) != method || string(back.Header.RequestURI()) != u.RequestURI() ||
			string(back.Header.Host()) != host {
			t.Fatalf("%q parsed back as %s %s Host %s", wire, back.Header.Method(), back.Header.RequestURI(), back.Header.Host())
		}
		if key == "Te" && !strings.EqualFold(value, "trailers") {
			return // dropped: only TE: trailers passes
		}
		want := strings.Trim(value, " \t")
		if key == "Cookie" || key == "X-Forwarded-For" {
			return // fasthttp re-serialises cookies; X-Forwarded-For gets the client appended
		}
		if got := string(back.Header.Peek(key)); got != want {
			t.Fatalf("%q: %s parsed back as %q, want %q", wire, key, got, want)
		}
	})
}
