//go:build linux

package h1

import (
	"bytes"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"ballast/internal/h1conformance"
)

// FuzzH2Request1 is the engine's analog of h2proxy's FuzzRequest1 (which fed h2proxy's
// bridge, fill1 writing a fasthttp request, what x/net/http2 let through): an h2c client
// sends one request of a fuzzed method, :path, :authority and one field, as they are, to the
// shards (h2mux validates it, h2stream.go's buildHead writes the HTTP/1.1 head, the engine's
// checks and forwarding follow), and the HTTP/1.1 bytes a strict backend (h1conformance's
// reader) gets must be exactly one request with the same method, target, Host and field:
// nothing a client sends over HTTP/2 can split or smuggle a request. A request refused (a
// reset, or a 4xx of Ballast's) forwards nothing; one that x/net's and RFC 9113's rules let
// through (the original's filter) must be forwarded.
func FuzzH2Request1(f *testing.F) {
	f.Add("GET", "/a/b?c=d", "example.com", "x-custom", "v")
	f.Add("POST", "/%0d%0a", "example.com:8080", "cookie", "a=1; b=2")
	f.Add("GET", "/", "h", "cookie", `a="b`)
	f.Add("GET", "/", "h", "cookie", `=x;;y`)
	f.Add("PURGE", "/x y", "h", "te", "trailers")
	f.Add("GET", "/", "[::1]:80", "x-forwarded-for", "10.0.0.1")
	f.Add("GET", "/\r\nX-Smuggled: 1", "h", "x-a", "b")
	f.Add("GET", "/", "h\r\nX-Smuggled: 1", "x-a", "b")
	f.Add("GET", "/", "h", "x-a", "b\r\n\r\nGET /smuggled HTTP/1.1")
	f.Add("GET", "/", "h", "x-a", "b\nX-Smuggled: 1")
	f.Add("GET / HTTP/1.1\r\nHost: h\r\n\r\nGET", "/", "h", "x-a", "b")
	f.Add("GET", "/", "h", "X-Upper", "b")
	f.Add("GET", "/", "h", "transfer-encoding", "chunked")
	f.Add("GET", "/", "h", "content-length", "5")
	f.Add("GET", "/", "h", "host", "other")
	f.Add("GET", "/", "h", "x-a", " padded ")
	f.Add("GET", "*", "h", "x-a", "b")
	f.Add("GET", "http://other/x", "h", "x-a", "b")
	f.Add("GET", "/", "", "x-a", "b")
	f.Add("CONNECT", "", "h:443", "x-a", "b")
	rb := h1conformance.NewRawBackend(f)
	te, _ := h2cEngine(f, testConfig(testPool("p", "roundrobin", rb.Addr())), nil)
	f.Fuzz(func(t *testing.T, method, path, host, key, value string) {
		if len(method)+len(path)+len(host)+len(key)+len(value) > 4000 {
			t.Skip("past the listener's header list")
		}
		status := h2Exchange(t, te.addr, method, path, host, key, value)
		got, fwd := rb.Take(t)
		valid := validH2Request(method, path, host, key, value)
		switch {
		case status == "200":
			if len(fwd) != 1 || !bytes.Equal(got, fwd[0].Raw) {
				t.Fatalf("one stream became %d requests at the backend: %q", len(fwd), got)
			}
			r := fwd[0]
			if r.Method != method || r.Target != path || len(r.Hosts) != 1 || r.Hosts[0] != host {
				t.Fatalf("%q %q Host %q reached the backend as %q %q Host %q:\n%s", method, path, host, r.Method, r.Target, r.Hosts, got)
			}
			if want, ok := keptAsIs(key, value); ok {
				if v, n := fieldOf(r.Raw, key); n != 1 || v != want {
					t.Fatalf("%s: %q reached the backend as %q (%d times):\n%s", key, value, v, n, got)
				}
			}
		case len(got) > 0:
			t.Fatalf("a request answered %q left bytes at the backend: %q", status, got)
		case valid:
			t.Fatalf("%q %q Host %q %s: %q, valid over HTTP/2, answered %q", method, path, host, key, value, status)
		}
	})
}

// h2Exchange sends the request as stream 1 of a fresh h2c connection to addr and returns its
// :status, "reset" when the stream or the connection ended without one.
func h2Exchange(t *testing.T, addr, method, path, host, key, value string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	fr.ReadMetaHeaders = hpack.NewDecoder(65536, nil)
	_ = fr.WriteSettings()
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	fields := [][2]string{{":method", method}, {":scheme", "http"}, {":authority", host}, {":path", path}}
	if method == "CONNECT" {
		fields = [][2]string{{":method", method}, {":authority", host}}
	}
	for _, kv := range append(fields, [2]string{key, value}) {
		_ = enc.WriteField(hpack.HeaderField{Name: kv[0], Value: kv[1]})
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
		return "reset"
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatal("no answer within 10 s")
			}
			return "reset"
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = fr.WriteSettingsAck()
			}
		case *http2.MetaHeadersFrame:
			if f.StreamID == 1 {
				if st := f.PseudoValue("status"); st != "" && st[0] != '1' {
					return st
				}
			}
		case *http2.RSTStreamFrame:
			if f.StreamID == 1 {
				return "reset"
			}
		case *http2.GoAwayFrame:
			return "reset"
		}
	}
}

// validH2Request is what h2proxy's FuzzRequest1 took as a request x/net/http2 lets through
// (a token method, an origin-form path, a valid Host, one valid field) and RFC 9113 allows
// (a lower-case field name, no connection-specific field, §8.2.2; a :path of URI characters,
// which x/net's server did not check), less the fields the proxy treats apart.
func validH2Request(method, path, host, key, value string) bool {
	if _, err := url.ParseRequestURI(path); err != nil || !strings.HasPrefix(path, "/") || host == "" ||
		!httpguts.ValidHostHeader(host) || !httpguts.ValidHeaderFieldName(method) ||
		!httpguts.ValidHeaderFieldName(key) || key != strings.ToLower(key) || !httpguts.ValidHeaderFieldValue(value) ||
		strings.TrimSpace(value) != value || method == "CONNECT" {
		return false
	}
	if h := host; !strings.HasSuffix(h, "]") { // RFC 9110 §4.2.1: an http URI's host is not empty
		if i := strings.LastIndexByte(h, ':'); i >= 0 && h[:i] == "" {
			return false
		}
	}
	for i := range len(path) { // RFC 9113 §8.3.1: a URI's path and query (RFC 3986), no raw bytes past ASCII
		if path[i] <= ' ' || path[i] >= 0x7f {
			return false
		}
	}
	switch key {
	case "host", "content-length", "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "te", "expect":
		return false
	}
	return true
}

// keptAsIs is the value the backend must see for key: fields Ballast sets, appends to or
// drops (forwarding fields, hop-by-hop ones, framing) have no such value. Cookie is kept as
// sent (the original excluded it: fasthttp parsed it into pairs and wrote it again, which the
// engine did too until TestCookieForwardedAsSent).
func keptAsIs(key, value string) (string, bool) {
	switch key {
	case "x-forwarded-for", "x-forwarded-host", "x-forwarded-proto", "forwarded", "x-real-ip", "x-request-id",
		"traceparent", "tracestate", "proxy-authorization", "host", "content-length", "te", "expect":
		return "", false
	}
	if !httpguts.ValidHeaderFieldName(key) || key != strings.ToLower(key) {
		return "", false
	}
	return strings.Trim(value, " \t"), true
}

// fieldOf is the value of the head's field name (case-insensitive) and how many times it came.
func fieldOf(raw []byte, name string) (value string, n int) {
	lines := strings.Split(string(raw), "\r\n")
	for _, l := range lines[1:] {
		if l == "" {
			break
		}
		k, v, _ := strings.Cut(l, ":")
		if strings.EqualFold(k, name) {
			value, n = strings.Trim(v, " \t"), n+1
		}
	}
	return value, n
}
