package server_test

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Parity rows through HTTP/2 backends: the parity cases that reach a backend run again with
// every pool of the case reaching its backends over HTTP/2, with prior knowledge (protocol
// h2c) and over TLS (protocol h2), against the raw recording HTTP/2 backend
// (parity_h2backend_helpers_test.go), over every client transport. The same wants hold (the
// request line the backend gets is the HTTP/2 request's :method and :path with HTTP/2.0, its
// Host the :authority), every stream Ballast opens is checked as HTTP/2 (checkH2Record), and
// each transport's backend bytes equal its baseline's, as in TestParity. h2Cases add what only
// an HTTP/2 backend can do: refuse a stream, reset one, go away, close under a request, send
// trailers and a body in pieces.

// h2Skipped are the parity cases that do not run over HTTP/2 backends, and why. Cases whose
// steps never reach a backend (routing, policy and parsing answered by Ballast itself) do not
// run either unless h2Unreached names them: the pool's protocol plays no part in them.
var h2Skipped = map[string]string{
	"hop-by-hop response fields":                                 "an HTTP/2 response cannot carry connection-specific fields (RFC 9113 §8.2.2): the backend's answer would be malformed (h2Cases: \"a response with a connection field is malformed: 502\")",
	"Expect 100-continue over max_body_bytes is refused at once": "100-continue is between the client and Ballast, and this one is refused before any backend; HTTP/2 backends get no Expect (an HTTP/2 request's body follows its head)",
}

// h2Unreached are cases that reach no backend with a request and still run: the backend is
// dialled, or the request begun.
var h2Unreached = map[string]bool{
	"connect refused with no other backend: 502, 0 retries":  true,
	"body of unknown length over max_body_bytes":             true,
	"backend over TLS whose certificate lacks the name: 502": true,
}

// (No case of the table is an Upgrade tunnel: an HTTP/2 pool refuses Upgrade, which
// h2Cases checks; over HTTP/2 backends there is no Upgrade, RFC 9113 §8.6.)

var h2Cases = []parityCase{
	{
		name:     "response body in pieces with trailers",
		yaml:     routeWith(""),
		backends: []string{"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n3\r\none\r\n3\r\ntwo\r\n5\r\nthree\r\n0\r\nX-Checksum: abc\r\nGrpc-Status: 0\r\n\r\n"},
		steps: []step{{want: pwant{status: 200, body: "onetwothree", reach: "B0", term: "--", pool: "p",
			header: map[string]string{"Content-Length": "", "Content-Type": "text/plain"}, trailer: map[string]string{"X-Checksum": "abc", "Grpc-Status": "0"}}}},
	},
	{
		// (Found by this case: they were dropped for HTTP/2 clients too; h2backend.go renderHead.)
		name:     "announced trailers after a body with a content-length reach HTTP/2 clients",
		yaml:     routeWith(""),
		backends: []string{trailersWithLength},
		only:     []string{"h2", "h2c", "h2-proxy"},
		steps: []step{{want: pwant{status: 200, body: "onetwo", reach: "B0", term: "--", pool: "p",
			header: map[string]string{"Content-Length": "6", "Trailer": "X-Checksum"}, trailer: map[string]string{"X-Checksum": "abc"}}}},
	},
	{
		name:     "trailers after a body with a content-length are dropped for HTTP/1.1 clients",
		yaml:     routeWith(""),
		backends: []string{trailersWithLength},
		only:     h1only, // a Content-Length body has no trailer section (RFC 9112 §6.5)
		steps: []step{{want: pwant{status: 200, body: "onetwo", reach: "B0", term: "--", pool: "p",
			header: map[string]string{"Content-Length": "6"}, trailer: map[string]string{"X-Checksum": ""}}}},
	},
	{
		name:     "a request head larger than a frame reaches the backend in CONTINUATION frames",
		listener: "max_header_bytes: 65536",
		yaml:     routeWith(""),
		only:     h1only, // the suite's raw HTTP/2 client sends one HEADERS frame, within 16 KiB
		steps: []step{{req: preq{header: [][2]string{{"X-Big", strings.Repeat("b", 30000)}, {"X-After", "1"}}}, want: pwant{
			status: 200, reach: "B0", term: "--", pool: "p", seen: map[string]string{"X-Big": strings.Repeat("b", 30000), "X-After": "1"},
		}}},
	},
	{
		name: "HEAD: the length without a body",
		yaml: routeWith(""),
		steps: []step{{req: preq{method: "HEAD"}, want: pwant{status: 200, reach: "B0", line: "HEAD / HTTP/1.1", term: "--", pool: "p",
			header: map[string]string{"Content-Length": "2"}}}},
	},
	{
		name: "chunked request body reaches the backend as DATA without a length",
		yaml: routeWith(""),
		steps: []step{{req: preq{method: "POST", target: "/up", body: "hello, world", chunked: true}, want: pwant{
			status: 200, reach: "B0", line: "POST /up HTTP/1.1", term: "--", pool: "p", seenBody: "hello, world",
			seen: map[string]string{"Content-Length": "", "Transfer-Encoding": ""},
		}}},
	},
	{
		name: "request trailers reach the backend as trailing HEADERS",
		yaml: routeWith(""),
		steps: []step{{req: preq{method: "POST", target: "/up", body: "abc", chunked: true, trailer: [][2]string{{"X-Sum", "7"}}}, want: pwant{
			status: 200, reach: "B0", term: "--", pool: "p", seenBody: "abc", seenTrailer: map[string]string{"x-sum": "7"},
		}}},
	},
	{
		name:     "a stream refused (REFUSED_STREAM) is sent again, a POST too",
		yaml:     routeWith(""),
		backends: []string{"h2:refuse" + thenAnswer + okAnswer + thenAnswer + "h2:refuse" + thenAnswer + okAnswer},
		steps: []step{
			{want: pwant{status: 200, body: "ok", reach: "B0", term: "--", pool: "p"}},
			{req: preq{method: "POST", body: "once"}, want: pwant{status: 200, body: "ok", reach: "B0", term: "--", pool: "p", seenBody: "once"}},
		},
	},
	{
		name:     "streams a GOAWAY did not process are sent again, a POST too",
		yaml:     routeWith(""),
		backends: []string{"h2:goaway" + thenAnswer + okAnswer + thenAnswer + "h2:goaway" + thenAnswer + okAnswer},
		steps: []step{
			{want: pwant{status: 200, body: "ok", reach: "B0", term: "--", pool: "p"}},
			{req: preq{method: "POST", body: "once"}, want: pwant{status: 200, body: "ok", reach: "B0", term: "--", pool: "p", seenBody: "once"}},
		},
	},
	{
		name: "a GET reset after it was sent is retried on another backend, a POST is not",
		yaml: `
routes: [{pool: p}]
pools: [{name: p, balancer: roundrobin, retries: {attempts: 2}, backends: [{address: "{B0}"}, {address: "{B1}"}]}]
`,
		backends: []string{"h2:reset"},
		steps: []step{
			{want: pwant{status: 200, reach: "B0", also: "B1", term: "--", pool: "p", retries: 1}},
			{req: preq{method: "POST", body: "once"}, want: pwant{status: 502, reach: "B0", term: "SH", pool: "p"}},
		},
	},
	{
		name: "a GET whose connection closed under it is retried on another backend, a POST is not",
		yaml: `
routes: [{pool: p}]
pools: [{name: p, balancer: roundrobin, retries: {attempts: 2}, backends: [{address: "{B0}"}, {address: "{B1}"}]}]
`,
		backends: []string{"h2:close"},
		steps: []step{
			{want: pwant{status: 200, reach: "B0", also: "B1", term: "--", pool: "p", retries: 1}},
			{req: preq{method: "POST", body: "once"}, want: pwant{status: 502, reach: "B0", term: "SH", pool: "p"}},
		},
	},
	{
		name: "a GET a GOAWAY counted as processed is retried on another backend, a POST is not",
		yaml: `
routes: [{pool: p}]
pools: [{name: p, balancer: roundrobin, retries: {attempts: 2}, backends: [{address: "{B0}"}, {address: "{B1}"}]}]
`,
		backends: []string{"h2:goaway-last"},
		steps: []step{
			{want: pwant{status: 200, reach: "B0", also: "B1", term: "--", pool: "p", retries: 1}},
			{req: preq{method: "POST", body: "once"}, want: pwant{status: 502, reach: "B0", term: "SH", pool: "p"}},
		},
	},
	{
		name:     "a response with a connection field is malformed: 502",
		yaml:     routeWith(""),
		backends: []string{"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok"},
		steps:    []step{{want: pwant{status: 502, reach: "B0", term: "SH", pool: "p"}}},
	},
	{
		// Refused by Ballast (P: errH2Upgrade) before any head went out (H).
		name:  "Upgrade to an HTTP/2 pool: 502",
		yaml:  routeWith(""),
		only:  h1only, // an HTTP/2 request carries no Upgrade
		steps: []step{{req: preq{header: [][2]string{{"Connection", "Upgrade"}, {"Upgrade", "websocket"}}}, want: pwant{status: 502, term: "PH", pool: "p"}}},
	},
	{
		name:     "response timeout: 504, the stream reset",
		yaml:     routeWith("timeouts: {response: 300ms}"),
		backends: []string{"hang"},
		steps:    []step{{want: pwant{status: 504, reach: "B0", term: "sH", pool: "p", hungUp: true}}},
	},
}

// trailersWithLength is, from the raw HTTP/2 backend, a body of 6 bytes with content-length 6
// in two DATA frames, then trailers it announced.
const trailersWithLength = "HTTP/1.1 200 OK\r\nContent-Length: 6\r\nTrailer: X-Checksum\r\nTransfer-Encoding: chunked\r\n\r\n3\r\none\r\n3\r\ntwo\r\n0\r\nX-Checksum: abc\r\n\r\n"

// h2BackendYAML gives every pool of yaml (each a flow mapping "{name: ...}" after "pools:")
// protocol proto: h2c, or h2 over TLS (a pool without tls gets the cases' backend TLS, {CA}).
// It reports whether the backends speak TLS.
func h2BackendYAML(yaml string, tlsBackends bool, proto string) (string, bool) {
	i := strings.Index(yaml, "pools:")
	if i < 0 {
		return yaml, tlsBackends
	}
	add := "{protocol: " + proto + ", "
	if proto == "h2" && !tlsBackends {
		add += `tls: {ca: "{CA}", server_name: backend.test}, `
	}
	return yaml[:i] + strings.ReplaceAll(yaml[i:], "{name: ", add+"name: "), tlsBackends || proto == "h2"
}

// checkH2Record checks that a stream Ballast opened is an HTTP/2 request as RFC 9113 §8.3
// wants it: the pseudo-header fields :method, :scheme (http for h2c, https for h2), :path
// and :authority in that order and before every field, no Host beside :authority, field
// names in lower case, no connection-specific field, te only as "trailers".
func checkH2Record(t *testing.T, where string, rec recorded, proto string) {
	t.Helper()
	r := rec.h2
	if r == nil {
		t.Errorf("%s: the HTTP/2 backend recorded no stream", where)
		return
	}
	var names []string
	scheme := ""
	for _, f := range r.pseudo {
		names = append(names, f.Name)
		if f.Name == ":scheme" {
			scheme = f.Value
		}
	}
	if got := strings.Join(names, " "); got != ":method :scheme :path :authority" {
		t.Errorf("%s: pseudo-header fields %q", where, got)
	}
	if want := map[string]string{"h2c": "http", "h2": "https"}[proto]; scheme != want {
		t.Errorf("%s: :scheme %q, want %q", where, scheme, want)
	}
	for _, f := range append(r.fields[:len(r.fields):len(r.fields)], r.trailers...) {
		switch {
		case f.Name != strings.ToLower(f.Name):
			t.Errorf("%s: field name %q not in lower case", where, f.Name)
		case f.Name == "host", f.Name == "connection", f.Name == "keep-alive", f.Name == "proxy-connection",
			f.Name == "transfer-encoding", f.Name == "upgrade", f.Name == "te" && f.Value != "trailers":
			t.Errorf("%s: the backend got %s: %s over HTTP/2", where, f.Name, f.Value)
		case strings.HasPrefix(f.Name, ":"):
			t.Errorf("%s: pseudo-header field %s after the fields", where, f.Name)
		}
	}
}

func TestParityH2Backends(t *testing.T) {
	var cases []parityCase
	for _, pc := range append(parityCases[:len(parityCases):len(parityCases)], portedCases...) {
		if _, skip := h2Skipped[pc.name]; skip {
			continue
		}
		reaches := h2Unreached[pc.name]
		for _, s := range pc.steps {
			reaches = reaches || s.want.reach != ""
		}
		if reaches {
			cases = append(cases, pc)
		}
	}
	cases = append(cases, h2Cases...)
	for _, proto := range []string{"h2c", "h2"} {
		t.Run(proto, func(t *testing.T) {
			for _, pc := range cases {
				if proto == "h2c" && pc.tlsBackends {
					continue // a pool with tls is protocol h2: its row is h2's
				}
				t.Run(strings.ReplaceAll(pc.name, " ", "_"), func(t *testing.T) {
					t.Parallel()
					results := map[string][]recorded{}
					for _, tr := range transports {
						if pc.only != nil && !contains(pc.only, tr.name) {
							continue
						}
						results[tr.name] = runParityOver(t, pc, tr, proto)
					}
					// The same forwarding as to an HTTP/1.1 backend: the fields, the target, the
					// body (the first transport's run, once more with the case's own pools).
					if !h2Only(pc.name) {
						tr := transports[0]
						if pc.only != nil {
							tr = transportNamed(pc.only[0])
						}
						h1 := runParityOver(t, pc, tr, "")
						for i, r := range results[tr.name] {
							if i < len(h1) && h1[i].head != "" && r.head != "" {
								if g, b := r.canonical(), asHTTP2(h1[i]).canonical(); g != b {
									t.Errorf("%s step %d: the HTTP/2 backend got\n%s\nthe HTTP/1.1 backend got\n%s", tr.name, i, g, b)
								}
							}
						}
					}
					for _, tr := range transports {
						got, ok := results[tr.name]
						base, bok := results[tr.baseline]
						if !ok || !bok {
							continue
						}
						for i := range min(len(got), len(base)) {
							if g, b := got[i].canonical(), base[i].canonical(); g != b {
								t.Errorf("%s step %d: the backend got\n%s\nover %s it got\n%s", tr.name, i, g, tr.baseline, b)
							}
						}
					}
				})
			}
		})
	}
}

// TestH2BackendYAML: every pool of a case gets the protocol, h2 gets TLS unless the pool has
// it, routes are left alone.
func TestH2BackendYAML(t *testing.T) {
	yaml := "routes: [{name: r, pool: p}]\npools:\n  - {name: p, backends: [{address: \"{B0}\"}]}\n  - {name: d, backends: []}\n"
	got, tlsB := h2BackendYAML(yaml, false, "h2c")
	if tlsB || strings.Count(got, "{protocol: h2c, name: ") != 2 || !strings.Contains(got, "{name: r, pool: p}") {
		t.Errorf("h2c: %v\n%s", tlsB, got)
	}
	got, tlsB = h2BackendYAML(yaml, false, "h2")
	if !tlsB || strings.Count(got, `{protocol: h2, tls: {ca: "{CA}", server_name: backend.test}, name: `) != 2 {
		t.Errorf("h2: %v\n%s", tlsB, got)
	}
	if got, _ = h2BackendYAML(yaml, true, "h2"); strings.Contains(got, "tls:") {
		t.Errorf("h2 for a pool with tls already: %s", got)
	}
}

func h2Only(name string) bool {
	for _, pc := range h2Cases {
		if pc.name == name {
			return true
		}
	}
	return false
}

func transportNamed(name string) transport {
	for _, tr := range transports {
		if tr.name == name {
			return tr
		}
	}
	panic("no transport " + name)
}

// asHTTP2 is what an HTTP/1.1 backend's request becomes over HTTP/2: the request line's
// version HTTP/2.0, the fields HTTP/2 has no place for (RFC 9113 §8.2.2) left out.
func asHTTP2(r recorded) recorded {
	line, rest, _ := strings.Cut(r.head, "\r\n")
	var b strings.Builder
	b.WriteString(strings.Replace(line, " HTTP/1.1", " HTTP/2.0", 1) + "\r\n")
	for _, l := range strings.SplitAfter(rest, "\r\n") {
		k, _, _ := strings.Cut(l, ":")
		switch strings.ToLower(strings.TrimSpace(k)) {
		case "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade":
			continue
		}
		b.WriteString(l)
	}
	r.head = b.String()
	return r
}

// TestParityH2Backend64MiB: 64 MiB up and 64 MiB down through a pool of protocol h2c and h2,
// from net/http's clients over HTTP/1.1, HTTP/1.1 over TLS, h2 and h2c (the PROXY transports
// differ from these only before the first request): the raw HTTP/2 backend gets every byte of
// the upload in DATA frames within its windows, and the client every byte of the download,
// which the backend sends within Ballast's windows.
func TestParityH2Backend64MiB(t *testing.T) {
	const size = 64 << 20
	pattern := make([]byte, size)
	for i := range pattern {
		pattern[i] = byte(i*7 + i>>16)
	}
	sum := sha256.Sum256(pattern)
	big := fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: %d\r\n\r\n%s", size, pattern)
	for _, proto := range []string{"h2c", "h2"} {
		t.Run(proto, func(t *testing.T) {
			for _, trName := range []string{"http1", "http1-tls", "h2", "h2c"} {
				t.Run(trName, func(t *testing.T) {
					tr := transportNamed(trName)
					yaml, tlsB := h2BackendYAML(routeWith(""), false, proto)
					var tc *tls.Config
					if tlsB {
						tc, yaml = parityBackendTLS(t, yaml)
					}
					b := newH2RawBackend(t, tc, okAnswer, big)
					env := startParity(t, "", yaml, []*rawBackend{b})
					c := bodyClient(tr, env.srv.Addr(tr.listener).String())
					defer c.CloseIdleConnections()
					scheme := "http"
					if tr.tls {
						scheme = "https"
					}
					base := scheme + "://" + env.srv.Addr(tr.listener).String()
					resp, err := c.Post(base+"/up", "application/octet-stream", bytes.NewReader(pattern))
					if err != nil {
						t.Fatal(err)
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 || b.count() != 1 {
						t.Fatalf("upload: %d, %d requests at the backend", resp.StatusCode, b.count())
					}
					if up := b.last(); up.h2 == nil || len(up.body) != size || sha256.Sum256(up.body) != sum || up.h2.data < size/(1<<20) {
						t.Errorf("upload: the backend got %d bytes (HTTP/2 %v), want %d intact in DATA frames", len(up.body), up.h2 != nil, size)
					}
					resp, err = c.Get(base + "/down")
					if err != nil {
						t.Fatal(err)
					}
					h := sha256.New()
					n, err := io.Copy(h, resp.Body)
					resp.Body.Close()
					if err != nil || resp.StatusCode != 200 || n != size || !bytes.Equal(h.Sum(nil), sum[:]) {
						t.Errorf("download: %d, %d bytes (%v), intact %v", resp.StatusCode, n, err, bytes.Equal(h.Sum(nil), sum[:]))
					}
					if tr.h2 != (resp.ProtoMajor == 2) {
						t.Errorf("download over %s: %s", tr.name, resp.Proto)
					}
				})
			}
		})
	}
}

// bodyClient is a net/http client over tr (not a PROXY one) to addr.
func bodyClient(tr transport, addr string) *http.Client {
	ht := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, ServerName: "app.test"}}
	ht.Protocols = new(http.Protocols)
	switch {
	case tr.h2 && tr.tls:
		ht.Protocols.SetHTTP2(true)
	case tr.h2:
		ht.Protocols.SetUnencryptedHTTP2(true)
	default:
		ht.Protocols.SetHTTP1(true)
	}
	return &http.Client{Timeout: 2 * time.Minute, Transport: ht}
}
