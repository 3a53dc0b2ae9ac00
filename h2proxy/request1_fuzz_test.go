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

	"ballast/httpcore"
)

// FuzzRequest1 feeds fill1 what x/net/http2 lets through from a client (a token method, an
// origin-form path, a valid Host, one valid header field), written through a fasthttp request
// as the HTTP/1 engine's bridge writes it, and checks that the HTTP/1.1 bytes the backend would
// get are exactly one request, which parses back to the same method, target, Host and field:
// nothing a client sends over HTTP/2 can split or smuggle a request.
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
		if key == "Host" || key == "Content-Length" || connectionField(key) && key != "Te" {
			return // x/net or the proxy treat these apart
		}
		r := &http.Request{Method: method, URL: u, Host: host, RequestURI: u.RequestURI(), Header: http.Header{key: {value}}}
		e := &exchange{r: r}
		e.req.init(r, nil)
		fr := &fastReq{}
		fr.req.Header.SetNoDefaultContentType(true)
		e.fill1(fr, nil)
		req := &fr.req
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
		want := strings.Trim(value, " \t")
		if key == "Cookie" || key == "X-Forwarded-For" {
			return // fasthttp re-serialises cookies; X-Forwarded-For gets the client appended
		}
		if got := string(back.Header.Peek(key)); got != want {
			t.Fatalf("%q: %s parsed back as %q, want %q", wire, key, got, want)
		}
	})
}

// fastReq is the bridge's request as the HTTP/1 engine holds it: a fasthttp request.
type fastReq struct{ req fasthttp.Request }

func (f *fastReq) SetLine(method, target, host []byte) {
	f.req.Header.SetMethodBytes(method)
	f.req.Header.SetRequestURIBytes(target)
	f.req.Header.SetHostBytes(host)
}

func (f *fastReq) Header() httpcore.Header { return (*fastFields)(&f.req.Header) }

type fastFields fasthttp.RequestHeader

func (h *fastFields) Peek(name []byte) []byte { return (*fasthttp.RequestHeader)(h).PeekBytes(name) }
func (h *fastFields) AppendValues(dst, name []byte) []byte {
	return append(dst, (*fasthttp.RequestHeader)(h).PeekBytes(name)...)
}
func (h *fastFields) Set(name, value []byte) { (*fasthttp.RequestHeader)(h).SetBytesKV(name, value) }
func (h *fastFields) Add(name, value []byte) { (*fasthttp.RequestHeader)(h).AddBytesKV(name, value) }
func (h *fastFields) Del(name []byte)        { (*fasthttp.RequestHeader)(h).DelBytes(name) }
