package server_test

import (
	"bytes"
	"compress/gzip"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	brotli "github.com/molecule-man/go-brrr"
)

// The parity suite: every case of one table runs over HTTP/1.1 (plain and TLS), HTTP/2 over TLS
// and h2c, and HTTP/1.1 and HTTP/2 over TLS behind a PROXY header, against a raw recording
// backend, and must give the same status, the same response fields that matter, the same
// access-log line and, at the backend, the same request bytes (compared with the HTTP/1.1
// transport of the same scheme). HTTP semantics live once, in package httpcore; this table is
// what holds both HTTP planes to it.

// step is one request of a case and what it must give.
type step struct {
	req  preq
	want pwant
}

type pwant struct {
	status int               // 0: no answer (the client left first)
	header map[string]string // response fields (matchValue)
	body   string            // "" not checked; "~re" a regular expression; else exact
	reach  string            // "B0", "B1": the backend that gets the request; "" none
	line   string            // the request line the backend gets
	seen   map[string]string // fields the backend gets (matchValue)
	// The access-log line: its status (0: the answer's), termination state and retries.
	logStatus int
	term      string
	retries   int
	pool      string
	// hungUp: the backend's connection (answer "hang") is closed after the client left.
	hungUp bool
	// capture keeps the cookie the response's Set-Cookie sets, for a later step's preq.cookie.
	capture bool
	// also: a second backend the request reaches (a retry); trailer: the response's trailers
	// (matchValue); seenBody, seenTrailer: the body and trailers the backend gets (trailers
	// only from an HTTP/2 backend, which records them).
	also        string
	trailer     map[string]string
	seenBody    string
	seenTrailer map[string]string
}

type parityCase struct {
	name     string
	listener string   // YAML lines for both listeners
	yaml     string   // the rest of the configuration
	backends []string // each backend's answers (see rawBackend); nil: one that answers okAnswer
	only     []string // transports to run over; nil: all
	steps    []step
	// tlsBackends: the backends speak TLS (a certificate for backend.test; yaml names its CA
	// file {CA}).
	tlsBackends bool
}

const onePool = `
pools: [{name: p, backends: [{address: "{B0}"}]}]
`

func routeWith(policy string) string {
	return "routes:\n  - pool: p\n" + indent(policy, "    ") + onePool
}

func indent(s, by string) string {
	var out []string
	for _, l := range strings.Split(strings.Trim(s, "\n"), "\n") {
		if strings.TrimSpace(l) != "" {
			out = append(out, by+l)
		}
	}
	return strings.Join(out, "\n") + "\n"
}

var html2k = strings.Repeat("<p>Ballast parity</p>\n", 100)

var compressible = fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nETag: \"v1\"\r\nContent-Length: %d\r\n\r\n%s", len(html2k), html2k)

const compressRoute = `compress: {types: [text/html], min_size: 100, algorithms: [br, gzip]}`

var compressibleChunked = fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n",
	len(html2k), html2k, len(html2k), html2k)

var h1only = []string{"http1", "http1-tls", "http1-tls-proxy"}

var parityCases = []parityCase{
	{
		name: "forwarding headers",
		yaml: routeWith(""),
		steps: []step{{req: preq{target: "/a/b?c=d", header: [][2]string{{"User-Agent", "parity"}}}, want: pwant{
			status: 200, body: "ok", reach: "B0", line: "GET /a/b?c=d HTTP/1.1", term: "--", pool: "p",
			seen: map[string]string{"X-Forwarded-For": "127.0.0.1", "X-Forwarded-Host": "app.test", "Host": "app.test",
				"X-Forwarded-Proto": "~^https?$", "Forwarded": "~^for=127\\.0\\.0\\.1;proto=https?;host=app\\.test$"},
		}}},
	},
	{
		name: "client X-Forwarded-For kept without trusted_proxies",
		yaml: routeWith(""),
		steps: []step{{req: preq{header: [][2]string{{"X-Forwarded-For", "198.51.100.1"}, {"Forwarded", "for=198.51.100.1"}}}, want: pwant{
			status: 200, reach: "B0", term: "--", pool: "p",
			seen: map[string]string{"X-Forwarded-For": "198.51.100.1, 127.0.0.1", "Forwarded": "~^for=198\\.51\\.100\\.1, for=127\\.0\\.0\\.1;"},
		}}},
	},
	{
		name: "spoofed X-Forwarded-For from an untrusted peer",
		yaml: "trusted_proxies: [10.0.0.0/8]\n" + routeWith(""),
		// 127.0.0.1 may send no PROXY header then (h1's TestTLSAcceptProxyRefused).
		only: []string{"http1", "http1-tls", "h2", "h2c"},
		steps: []step{{req: preq{header: [][2]string{{"X-Forwarded-For", "203.0.113.9"}, {"Forwarded", "for=203.0.113.9"}}}, want: pwant{
			status: 200, reach: "B0", term: "--", pool: "p",
			seen: map[string]string{"X-Forwarded-For": "127.0.0.1", "Forwarded": "~^for=127\\.0\\.0\\.1;proto=https?;host=app\\.test$"},
		}}},
	},
	{
		name: "X-Forwarded-For from a trusted peer names the client",
		yaml: "trusted_proxies: [127.0.0.1/32]\n" + routeWith("deny: [203.0.113.0/24]"),
		steps: []step{
			{req: preq{header: [][2]string{{"X-Forwarded-For", "198.51.100.7"}}}, want: pwant{
				status: 200, reach: "B0", term: "--", pool: "p",
				seen: map[string]string{"X-Forwarded-For": "198.51.100.7, 127.0.0.1"},
			}},
			{req: preq{header: [][2]string{{"X-Forwarded-For", "203.0.113.9"}}}, want: pwant{status: 403, term: "PR"}},
		},
	},
	{
		name:     "listener deny",
		listener: "deny: [127.0.0.0/8]",
		yaml:     routeWith(""),
		steps:    []step{{want: pwant{status: 403, body: "ballast: forbidden\n", term: "PR"}}},
	},
	{
		name:  "route deny",
		yaml:  routeWith("deny: [127.0.0.0/8]"),
		steps: []step{{want: pwant{status: 403, body: "ballast: forbidden\n", term: "PR"}}},
	},
	{
		name:  "route allow",
		yaml:  routeWith("allow: [10.0.0.0/8]"),
		steps: []step{{want: pwant{status: 403, term: "PR"}}},
	},
	{
		name: "rate limit",
		yaml: routeWith("rate_limit: {rate: 0.001, burst: 1}"),
		steps: []step{
			{want: pwant{status: 200, reach: "B0", term: "--", pool: "p"}},
			{want: pwant{status: 429, header: map[string]string{"Retry-After": "~^[0-9]+$"}, term: "PR"}},
			{want: pwant{status: 429, term: "PR"}},
		},
	},
	{
		name: "rate-limit buckets evicted least recently used",
		yaml: routeWith("rate_limit: {rate: 0.001, burst: 1, key: header, name: X-Client, max_keys: 4}"),
		steps: func() []step {
			a := preq{header: [][2]string{{"X-Client", "a"}}}
			s := []step{{req: a, want: pwant{status: 200, reach: "B0", term: "--", pool: "p"}}, {req: a, want: pwant{status: 429, term: "PR"}}}
			for i := range 12 {
				for j := range 2 {
					s = append(s, step{req: preq{header: [][2]string{{"X-Client", fmt.Sprintf("fresh-%d-%d", i, j)}}}, want: pwant{status: 200, reach: "B0", term: "--", pool: "p"}})
				}
				s = append(s, step{req: a, want: pwant{status: 429, term: "PR"}})
			}
			return s
		}(),
	},
	{
		name:  "body over max_body_bytes",
		yaml:  routeWith("max_body_bytes: 5"),
		steps: []step{{req: preq{method: "POST", body: "0123456789"}, want: pwant{status: 413, term: "PR"}}},
	},
	{
		name: "body within max_body_bytes",
		yaml: routeWith("max_body_bytes: 10"),
		steps: []step{{req: preq{method: "POST", body: "0123456789"}, want: pwant{
			status: 200, reach: "B0", line: "POST / HTTP/1.1", seen: map[string]string{"Content-Length": "10"}, term: "--", pool: "p",
		}}},
	},
	{
		name: "body of unknown length over max_body_bytes",
		yaml: routeWith("max_body_bytes: 5"),
		// The backend gets the head and the first 5 bytes, never the end of the body: it has
		// received no request.
		steps: []step{{req: preq{method: "POST", body: "0123456789", chunked: true}, want: pwant{
			status: 413, term: "PR", pool: "p",
		}}},
	},
	{
		name: "sticky cookie",
		yaml: `
routes: [{pool: p}]
pools: [{name: p, balancer: roundrobin, sticky: {cookie: bsid, http_only: true}, backends: [{address: "{B0}"}, {address: "{B1}"}]}]
`,
		steps: []step{
			{want: pwant{status: 200, reach: "B0", term: "--", pool: "p", capture: true,
				header: map[string]string{"Set-Cookie": "~^bsid=[0-9a-f]{16}; Path=/; HttpOnly$", "X-Ballast-Backend": "{B0}"}}},
			{req: preq{cookie: true}, want: pwant{status: 200, reach: "B0", term: "--", pool: "p", header: map[string]string{"Set-Cookie": ""}}},
			{req: preq{cookie: true}, want: pwant{status: 200, reach: "B0", term: "--", pool: "p"}},
			{want: pwant{status: 200, reach: "B1", term: "--", pool: "p", header: map[string]string{"Set-Cookie": "~^bsid="}}},
		},
	},
	{
		name: "Expect 100-continue over max_body_bytes is refused at once",
		yaml: routeWith("max_body_bytes: 5"),
		steps: []step{{req: preq{method: "POST", partial: true, header: [][2]string{{"Content-Length", "100"}, {"Expect", "100-continue"}}}, want: pwant{
			status: 413, term: "PR",
		}}},
	},
	{
		name: "redirect route without a pool",
		yaml: `
routes:
  - path_prefix: /old/
    redirect: {status: 301, host: example.org}
  - pool: p
` + onePool,
		steps: []step{{req: preq{target: "/old/x?q=1"}, want: pwant{
			status: 301, header: map[string]string{"Location": "~^https?://example\\.org/old/x\\?q=1$"}, term: "LR",
		}}},
	},
	{
		name: "redirect after a rewrite of the normalised path",
		yaml: `
routes:
  - path_prefix: /old/
    rewrite: {prefix: /old/, replacement: /new/}
    redirect: {status: 301}
  - pool: p
` + onePool,
		steps: []step{
			{req: preq{target: "/old/x"}, want: pwant{status: 301, header: map[string]string{"Location": "~^https?://app\\.test/new/x$"}, term: "LR"}},
			{req: preq{target: "//old/x"}, want: pwant{status: 301, header: map[string]string{"Location": "~^https?://app\\.test/new/x$"}, term: "LR"}},
			{req: preq{target: "/%6fld/x"}, want: pwant{status: 301, header: map[string]string{"Location": "~^https?://app\\.test/new/x$"}, term: "LR"}},
			{req: preq{target: "/old%2Fx"}, want: pwant{status: 301, header: map[string]string{"Location": "~^https?://app\\.test/new/x$"}, term: "LR"}},
			{req: preq{target: "/a/../old/x?k=v"}, want: pwant{status: 301, header: map[string]string{"Location": "~^https?://app\\.test/new/x\\?k=v$"}, term: "LR"}},
		},
	},
	{
		name: "HTTP/1.0 redirect without Host names the listener",
		yaml: `
routes:
  - path_prefix: /old/
    redirect: {status: 302, path: /new/x}
  - pool: p
` + onePool,
		only: h1only,
		steps: []step{{req: preq{target: "/old/x", proto: "HTTP/1.0", host: "-"}, want: pwant{
			status: 302, header: map[string]string{"Location": "~^https?://127\\.0\\.0\\.1:[0-9]+/new/x$"}, term: "LR",
		}}},
	},
	{
		name: "strip_prefix on the normalised path",
		yaml: routeWith("path_prefix: /api\nrewrite: {strip_prefix: /api}"),
		steps: []step{
			{req: preq{target: "/api/users?x=1"}, want: pwant{status: 200, reach: "B0", line: "GET /users?x=1 HTTP/1.1", term: "--", pool: "p"}},
			{req: preq{target: "//api/users"}, want: pwant{status: 200, reach: "B0", line: "GET /users HTTP/1.1", term: "--", pool: "p"}},
			{req: preq{target: "/api//users"}, want: pwant{status: 200, reach: "B0", line: "GET /users HTTP/1.1", term: "--", pool: "p"}},
		},
	},
	{
		name: "regex rewrite on the decoded path",
		yaml: routeWith(`rewrite: {regex: '^/re/(\d+)$', replacement: '/id/$1'}`),
		steps: []step{
			{req: preq{target: "/re/4%32"}, want: pwant{status: 200, reach: "B0", line: "GET /id/42 HTTP/1.1", term: "--", pool: "p"}},
			{req: preq{target: "/re/7?a=%20"}, want: pwant{status: 200, reach: "B0", line: "GET /id/7?a=%20 HTTP/1.1", term: "--", pool: "p"}},
		},
	},
	{
		name: "no rewrite forwards the target byte for byte",
		yaml: routeWith(""),
		steps: []step{{req: preq{target: "/a%2Fb//c/./d?x=%41"}, want: pwant{
			status: 200, reach: "B0", line: "GET /a%2Fb//c/./d?x=%41 HTTP/1.1", term: "--", pool: "p",
		}}},
	},
	{
		name:     "request ID and traceparent",
		listener: "request_id: true",
		yaml:     routeWith(""),
		steps: []step{
			{req: preq{header: [][2]string{{"X-Request-Id", "client-chosen"}, {"Traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}}, want: pwant{
				status: 200, reach: "B0", term: "--", pool: "p",
				header: map[string]string{"X-Request-Id": "~^[0-9a-f]{32}$"},
				seen:   map[string]string{"X-Request-Id": "~^[0-9a-f]{32}$", "Traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
			}},
			{req: preq{header: [][2]string{{"Traceparent", "garbage"}, {"Tracestate", "a=b"}}}, want: pwant{
				status: 200, reach: "B0", term: "--", pool: "p", seen: map[string]string{"Traceparent": "", "Tracestate": ""},
			}},
		},
	},
	{
		name: "header rules",
		yaml: routeWith(`
request_headers: {remove: [X-Secret], set: ["X-Real-IP: ${client_ip}", "X-Scheme: ${scheme}"], add: ["X-Host: ${host}"]}
response_headers: {remove: [Server], set: ["X-Served-By: ${backend}"], add: ["X-Edge: 1"]}`),
		backends: []string{"HTTP/1.1 200 OK\r\nServer: secret/1.0\r\nContent-Length: 2\r\n\r\nok"},
		steps: []step{{req: preq{header: [][2]string{{"X-Secret", "s"}}}, want: pwant{
			status: 200, reach: "B0", term: "--", pool: "p",
			header: map[string]string{"Server": "", "X-Served-By": "{B0}", "X-Edge": "1"},
			seen:   map[string]string{"X-Secret": "", "X-Real-Ip": "127.0.0.1", "X-Scheme": "~^https?$", "X-Host": "app.test"},
		}}},
	},
	{
		// The rule's value goes to the backend as configured, in one field, replacing the
		// client's: not parsed into pairs and written again (which dropped `=x`'s "=" and the
		// empty pair, and kept the client's cookies beside the rule's).
		name: "Cookie set by a header rule",
		yaml: routeWith(`request_headers: {set: ["Cookie: a=1;;b=2; =x"]}`),
		steps: []step{
			{req: preq{header: [][2]string{{"Cookie", "client=1"}}}, want: pwant{
				status: 200, reach: "B0", term: "--", pool: "p", seen: map[string]string{"Cookie": "a=1;;b=2; =x"},
			}},
			{want: pwant{status: 200, reach: "B0", term: "--", pool: "p", seen: map[string]string{"Cookie": "a=1;;b=2; =x"}}},
		},
	},
	{
		name:     "hop-by-hop response fields",
		yaml:     routeWith(""),
		backends: []string{"HTTP/1.1 200 OK\r\nConnection: X-Internal, keep-alive\r\nX-Internal: secret\r\nKeep-Alive: timeout=5\r\nX-Kept: 1\r\nContent-Length: 2\r\n\r\nok"},
		steps: []step{{want: pwant{status: 200, body: "ok", reach: "B0", term: "--", pool: "p",
			header: map[string]string{"X-Internal": "", "Keep-Alive": "", "Connection": "", "X-Kept": "1"}}}},
	},
	{
		name: "hop-by-hop request fields",
		yaml: routeWith(""),
		only: h1only, // an HTTP/2 request cannot carry them (x/net refuses it)
		steps: []step{{req: preq{header: [][2]string{{"Connection", "X-Private"}, {"X-Private", "1"}, {"Keep-Alive", "5"}, {"X-Kept", "1"}}}, want: pwant{
			status: 200, reach: "B0", term: "--", pool: "p",
			seen: map[string]string{"X-Private": "", "Keep-Alive": "", "Connection": "", "X-Kept": "1"}}}},
	},
	{
		name:     "compression honours q-values",
		yaml:     routeWith(compressRoute),
		backends: []string{compressible},
		steps: []step{
			{req: preq{header: [][2]string{{"Accept-Encoding", "br;q=0.1, gzip;q=1"}}}, want: pwant{
				status: 200, reach: "B0", term: "--", pool: "p", body: "gzip:" + html2k,
				header: map[string]string{"Content-Encoding": "gzip", "Vary": "Accept-Encoding", "Etag": `W/"v1"`},
			}},
			{req: preq{header: [][2]string{{"Accept-Encoding", "gzip;q=0, br;q=0"}}}, want: pwant{
				status: 200, reach: "B0", term: "--", pool: "p", body: html2k,
				header: map[string]string{"Content-Encoding": "", "Vary": "Accept-Encoding", "Etag": `"v1"`},
			}},
			{want: pwant{
				status: 200, reach: "B0", term: "--", pool: "p", body: html2k,
				header: map[string]string{"Content-Encoding": "", "Vary": "Accept-Encoding"},
			}},
		},
	},
	{
		name:     "compression of a chunked body prefers the route's first coding",
		yaml:     routeWith(compressRoute),
		backends: []string{compressibleChunked},
		steps: []step{
			{req: preq{header: [][2]string{{"Accept-Encoding", "gzip, br"}}}, want: pwant{
				status: 200, reach: "B0", term: "--", pool: "p", body: "br:" + html2k + html2k,
				header: map[string]string{"Content-Encoding": "br", "Vary": "Accept-Encoding", "Content-Length": ""},
			}},
			{req: preq{header: [][2]string{{"Accept-Encoding", "gzip;q=0.5, br;q=0.4"}}}, want: pwant{
				status: 200, reach: "B0", term: "--", pool: "p", body: "gzip:" + html2k + html2k,
				header: map[string]string{"Content-Encoding": "gzip", "Vary": "Accept-Encoding", "Content-Length": ""},
			}},
		},
	},
	{
		name:     "304 keeps a weak ETag weak",
		yaml:     routeWith(compressRoute),
		backends: []string{"HTTP/1.1 304 Not Modified\r\nETag: \"v1\"\r\n\r\n"},
		steps: []step{{req: preq{header: [][2]string{{"Accept-Encoding", "gzip"}, {"If-None-Match", `W/"v1"`}}}, want: pwant{
			status: 304, reach: "B0", term: "--", pool: "p",
			header: map[string]string{"Etag": `W/"v1"`, "Vary": "Accept-Encoding"},
			seen:   map[string]string{"If-None-Match": `W/"v1"`},
		}}},
	},
	{
		name: "error pages",
		yaml: `
error_pages: [{status: 404, body: "<h1>nothing here</h1>"}, {status: 503, body: "busy", content_type: text/plain}]
routes: [{host: other.test, pool: p}, {host: down.test, pool: d}]
pools:
  - {name: p, backends: [{address: "{B0}"}]}
  - {name: d, backends: [{address: "{B0}", down: true}]}
`,
		steps: []step{
			{want: pwant{status: 404, body: "<h1>nothing here</h1>", header: map[string]string{"Content-Type": "text/html; charset=utf-8"}, term: "LR"}},
			{req: preq{host: "down.test"}, want: pwant{status: 503, body: "busy", header: map[string]string{"Content-Type": "text/plain"}, term: "SC", pool: "d"}},
		},
	},
	{
		name:  "no route",
		yaml:  "routes: [{host: other.test, pool: p}]\n" + onePool,
		steps: []step{{want: pwant{status: 404, body: "ballast: no route\n", term: "LR"}}},
	},
	{
		name: "no usable backend",
		yaml: `
routes: [{pool: p}]
pools: [{name: p, backends: [{address: "{B0}", down: true}]}]
`,
		steps: []step{{want: pwant{status: 503, term: "SC", pool: "p"}}},
	},
	{
		name: "connect refused with no other backend: 502, 0 retries",
		yaml: `
routes: [{pool: p}]
pools: [{name: p, retries: {attempts: 3}, backends: [{address: "{DEAD}"}]}]
`,
		steps: []step{{want: pwant{status: 502, term: "SC", pool: "p", retries: 0}}},
	},
	{
		name: "per-route retries move to another backend",
		yaml: `
routes:
  - pool: p
    retries: {attempts: 2}
pools: [{name: p, balancer: roundrobin, backends: [{address: "{DEAD}"}, {address: "{B0}"}]}]
`,
		steps: []step{
			// roundrobin starts with the dead backend: refused, then retried on B0.
			{want: pwant{status: 200, reach: "B0", term: "--", pool: "p", retries: 1}},
			// The refusing backend is out of rotation for a second: straight to B0.
			{want: pwant{status: 200, reach: "B0", term: "--", pool: "p"}},
		},
	},
	{
		name: "per-route response timeout",
		yaml: `
routes:
  - pool: p
    timeouts: {response: 300ms}
pools: [{name: p, backends: [{address: "{B0}"}]}]
`,
		backends: []string{"sleep 3s"},
		steps:    []step{{want: pwant{status: 504, reach: "B0", term: "sH", pool: "p"}}},
	},
	{
		name:     "client leaves before the response headers",
		yaml:     routeWith(""),
		backends: []string{"hang"},
		steps:    []step{{req: preq{leave: 300 * time.Millisecond}, want: pwant{status: 0, logStatus: 499, reach: "B0", term: "CH", pool: "p", hungUp: true}}},
	},
	{
		name:  "CONNECT",
		yaml:  routeWith(""),
		steps: []step{{req: preq{method: "CONNECT", target: "app.test:443", host: "app.test:443"}, want: pwant{status: 405, header: map[string]string{"Allow": "*"}, term: "PR"}}},
	},
	{
		name:  "malformed request",
		yaml:  routeWith(""),
		only:  h1only,
		steps: []step{{req: preq{raw: "GET / HTTP/1.1\r\nHost: app.test\r\nBad Field: x\r\n\r\n"}, want: pwant{status: 400, term: "PR"}}},
	},
	{
		name:  "unsupported version",
		yaml:  routeWith(""),
		only:  h1only,
		steps: []step{{req: preq{raw: "GET / HTTP/1.2\r\nHost: app.test\r\n\r\n"}, want: pwant{status: 505, term: "PR"}}},
	},
	{
		name:  "request header too large",
		yaml:  routeWith(""),
		only:  h1only,
		steps: []step{{req: preq{header: [][2]string{{"X-Big", strings.Repeat("b", 20000)}}}, want: pwant{status: 431, term: "PR"}}},
	},
	{
		name:  "request headers too slow",
		yaml:  routeWith(""),
		only:  h1only,
		steps: []step{{req: preq{raw: "GET / HTTP/1.1\r\nHost: app.test\r\n"}, want: pwant{status: 408, term: "cR"}}},
	},
	{
		// RFC 9112 §2.2 lets a server refuse bare LFs: a head that ends with one is refused at
		// once instead of waiting for read_header_timeout (listeners here wait 1 s; the
		// client 15 s, so a wait would show as 408).
		name: "a head ending in bare LFs is refused at once",
		yaml: routeWith(""),
		only: h1only,
		steps: []step{
			{req: preq{raw: "GET /lf HTTP/1.1\nHost: app.test\n\n"}, want: pwant{status: 400, body: "ballast: request head ends with a bare LF\n", term: "PR"}},
			{req: preq{raw: "GET /lf HTTP/1.1\r\nHost: app.test\n\r\n"}, want: pwant{status: 400, term: "PR"}},
			{req: preq{raw: "GET /lf HTTP/1.1\nHost: app.test\r\n\r\n"}, want: pwant{status: 200, reach: "B0", line: "GET /lf HTTP/1.1", term: "--", pool: "p"}},
		},
	},
	{
		name:        "backend over TLS",
		tlsBackends: true,
		yaml: `
routes: [{pool: p}]
pools: [{name: p, tls: {ca: "{CA}", server_name: backend.test}, backends: [{address: "{B0}"}]}]
`,
		steps: []step{
			{req: preq{target: "/a?b=c"}, want: pwant{status: 200, body: "ok", reach: "B0", line: "GET /a?b=c HTTP/1.1", term: "--", pool: "p",
				seen: map[string]string{"Host": "app.test", "X-Forwarded-For": "127.0.0.1", "X-Forwarded-Proto": "~^https?$"}}},
			{req: preq{method: "POST", target: "/up", body: "hello"}, want: pwant{status: 200, reach: "B0", line: "POST /up HTTP/1.1", term: "--", pool: "p",
				seen: map[string]string{"Content-Length": "5"}}},
		},
	},
	{
		name:        "backend over TLS whose certificate lacks the name: 502",
		tlsBackends: true,
		yaml: `
routes: [{pool: p}]
pools: [{name: p, tls: {ca: "{CA}", server_name: other.test}, backends: [{address: "{B0}"}]}]
`,
		steps: []step{{want: pwant{status: 502, term: "SC", pool: "p"}}},
	},
}

// portedCases are cases of the fasthttp plane's tests (issue 20's audit: every one of its
// tests ported to the engine or kept here) that hold for every transport: request-ID trust and
// trace context, the X-Forwarded-For walk through trusted proxies, forwarding fields appended
// to a client's, hop-by-hop request fields, rewrites and redirects. TestParity runs them with
// parityCases.
var portedCases = []parityCase{
	{
		name:     "request ID of a trusted peer kept, trace context checked",
		listener: "request_id: true",
		yaml:     "trusted_proxies: [127.0.0.0/8]\n" + routeWith(""),
		steps: []step{
			{req: preq{header: [][2]string{{"X-Request-Id", "abc-123"}}}, want: pwant{
				status: 200, reach: "B0", term: "--", pool: "p",
				header: map[string]string{"X-Request-Id": "abc-123"}, seen: map[string]string{"X-Request-Id": "abc-123"},
			}},
			{req: preq{header: [][2]string{{"X-Request-Id", "has space"}}}, want: pwant{
				status: 200, reach: "B0", term: "--", pool: "p",
				header: map[string]string{"X-Request-Id": "~^[0-9a-f]{32}$"}, seen: map[string]string{"X-Request-Id": "~^[0-9a-f]{32}$"},
			}},
			{req: preq{header: [][2]string{{"Traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"}, {"Tracestate", "k=v"}}}, want: pwant{
				status: 200, reach: "B0", term: "--", pool: "p",
				seen: map[string]string{"Traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00", "Tracestate": "k=v"},
			}},
			{req: preq{header: [][2]string{{"Traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331"}, {"Tracestate", "k=v"}}}, want: pwant{
				status: 200, reach: "B0", term: "--", pool: "p", seen: map[string]string{"Traceparent": "", "Tracestate": ""},
			}},
			{req: preq{header: [][2]string{{"Traceparent", "00-00000000000000000000000000000000-b7ad6b7169203331-01"}, {"Tracestate", "k=v"}}}, want: pwant{
				status: 200, reach: "B0", term: "--", pool: "p", seen: map[string]string{"Traceparent": "", "Tracestate": ""},
			}},
		},
	},
	{
		name:     "request ID of an untrusted peer replaced",
		listener: "request_id: true",
		yaml:     "trusted_proxies: [10.0.0.0/8]\n" + routeWith(""),
		only:     []string{"http1", "http1-tls", "h2", "h2c"}, // 127.0.0.1 may not send a PROXY header here
		steps: []step{{req: preq{header: [][2]string{{"X-Request-Id", "abc-123"}}}, want: pwant{
			status: 200, reach: "B0", term: "--", pool: "p",
			header: map[string]string{"X-Request-Id": "~^[0-9a-f]{32}$"}, seen: map[string]string{"X-Request-Id": "~^[0-9a-f]{32}$"},
		}}},
	},
	{
		name: "X-Forwarded-For walked to the rightmost untrusted hop",
		yaml: "trusted_proxies: [127.0.0.1/32, 10.0.0.0/8]\n" + routeWith(`request_headers: {set: ["X-Client: ${client_ip}"]}`),
		steps: []step{
			{req: preq{header: [][2]string{{"X-Forwarded-For", "6.6.6.6, 203.0.113.9, 10.1.1.1"}}}, want: pwant{
				status: 200, reach: "B0", term: "--", pool: "p",
				seen: map[string]string{"X-Forwarded-For": "6.6.6.6, 203.0.113.9, 10.1.1.1, 127.0.0.1", "X-Client": "203.0.113.9"},
			}},
			{req: preq{header: [][2]string{{"X-Forwarded-For", "203.0.113.9, junk, 10.1.1.1"}}}, want: pwant{
				status: 200, reach: "B0", term: "--", pool: "p",
				seen: map[string]string{"X-Forwarded-For": "203.0.113.9, junk, 10.1.1.1, 127.0.0.1", "X-Client": "10.1.1.1"},
			}},
		},
	},
	{
		name: "route allow and deny judge the client named by a trusted X-Forwarded-For",
		yaml: "trusted_proxies: [127.0.0.1]\n" + `
routes:
  - {path_prefix: /allow/, pool: p, allow: [203.0.113.0/24]}
  - {path_prefix: /both/, pool: p, allow: [127.0.0.0/8], deny: [127.0.0.1]}
  - {pool: p, deny: [198.51.100.0/24]}
` + onePool,
		steps: []step{
			{req: preq{target: "/allow/x", header: [][2]string{{"X-Forwarded-For", "203.0.113.9"}}}, want: pwant{status: 200, reach: "B0", term: "--", pool: "p"}},
			{req: preq{target: "/allow/x"}, want: pwant{status: 403, term: "PR"}},
			{req: preq{target: "/both/x"}, want: pwant{status: 403, term: "PR"}},
			{req: preq{header: [][2]string{{"X-Forwarded-For", "198.51.100.1"}}}, want: pwant{status: 403, term: "PR"}},
		},
	},
	{
		name: "Forwarded appended to the client's, a host with a port quoted",
		yaml: routeWith(""),
		steps: []step{{req: preq{host: "app.test:8080", header: [][2]string{{"Forwarded", `for="[2001:db8::1]";proto=https`}}}, want: pwant{
			status: 200, reach: "B0", term: "--", pool: "p",
			seen: map[string]string{"Host": "app.test:8080", "X-Forwarded-Host": "app.test:8080",
				"Forwarded": `~^for="\[2001:db8::1\]";proto=https, for=127\.0\.0\.1;proto=https?;host="app\.test:8080"$`},
		}}},
	},
	{
		name: "Proxy-Authorization not forwarded",
		yaml: routeWith(""),
		steps: []step{{req: preq{header: [][2]string{{"Proxy-Authorization", "Basic eDp5"}, {"X-Kept", "k"}}}, want: pwant{
			status: 200, reach: "B0", term: "--", pool: "p",
			seen: map[string]string{"Proxy-Authorization": "", "X-Kept": "k"},
		}}},
	},
	{
		name: "TE and Proxy-Connection not forwarded",
		yaml: routeWith(""),
		// An HTTP/2 request cannot carry Proxy-Connection (x/net refuses it), and its
		// "TE: trailers" is kept on purpose (httpcore/forward.go: gRPC servers expect it).
		only: h1only,
		steps: []step{{req: preq{header: [][2]string{{"Te", "trailers"}, {"Proxy-Connection", "keep-alive"}, {"X-Kept", "k"}}}, want: pwant{
			status: 200, reach: "B0", term: "--", pool: "p",
			seen: map[string]string{"Te": "", "Proxy-Connection": "", "X-Kept": "k"},
		}}},
	},
	{
		name: "prefix rewrite and strip_prefix encode the result again",
		yaml: `
routes:
  - {path_prefix: /old/, pool: p, rewrite: {prefix: /old/, replacement: /new/v2/}}
  - {path_prefix: /api/, pool: p, rewrite: {strip_prefix: /api}}
  - {path_prefix: /u/, pool: p, rewrite: {regex: '^/u/(\d+)/?$', replacement: '/users/${1}x'}}
  - pool: p
` + onePool,
		steps: []step{
			{req: preq{target: "/old/thing?q"}, want: pwant{status: 200, reach: "B0", line: "GET /new/v2/thing?q HTTP/1.1", term: "--", pool: "p"}},
			{req: preq{target: "/api/a%2Fb"}, want: pwant{status: 200, reach: "B0", line: "GET /a/b HTTP/1.1", term: "--", pool: "p"}},
			{req: preq{target: "/api/sp%20ace"}, want: pwant{status: 200, reach: "B0", line: "GET /sp%20ace HTTP/1.1", term: "--", pool: "p"}},
			{req: preq{target: "/u/42/?full=1"}, want: pwant{status: 200, reach: "B0", line: "GET /users/42x?full=1 HTTP/1.1", term: "--", pool: "p"}},
			{req: preq{target: "/u/abc"}, want: pwant{status: 200, reach: "B0", line: "GET /u/abc HTTP/1.1", term: "--", pool: "p"}},
		},
	},
	{
		name: "redirects set scheme, host and port",
		yaml: `
routes:
  - {host: plain.example, redirect: {status: 301, scheme: https}}
  - {host: port.example, redirect: {status: 307, scheme: https, port: 8443}}
  - {host: example.com, redirect: {status: 308, host: www.example.com}}
  - {path_prefix: /moved, redirect: {status: 301, path: /here}}
  - pool: p
` + onePool,
		steps: []step{
			// (From a plain listener the port of Host is dropped with the scheme's change; a
			// TLS one keeps it: the request was https already. TestRedirects checks the first.)
			{req: preq{host: "plain.example", target: "/a/b?c=d"}, want: pwant{status: 301, header: map[string]string{"Location": "https://plain.example/a/b?c=d"}, term: "LR"}},
			{req: preq{host: "port.example:80"}, want: pwant{status: 307, header: map[string]string{"Location": "https://port.example:8443/"}, term: "LR"}},
			{req: preq{method: "POST", host: "EXAMPLE.com", target: "/form", body: "abc"}, want: pwant{status: 308, header: map[string]string{"Location": "~^https?://www\\.example\\.com/form$"}, term: "LR"}},
			{req: preq{target: "/moved/away?k=v"}, want: pwant{status: 301, header: map[string]string{"Location": "~^https?://app\\.test/here\\?k=v$"}, term: "LR"}},
		},
	},
}

func TestParity(t *testing.T) {
	for _, pc := range append(append(parityCases[:len(parityCases):len(parityCases)], portedCases...), h2portCases...) {
		t.Run(strings.ReplaceAll(pc.name, " ", "_"), func(t *testing.T) {
			t.Parallel()
			results := map[string][]recorded{}
			for _, tr := range transports {
				if pc.only != nil && !contains(pc.only, tr.name) {
					continue
				}
				results[tr.name] = runParity(t, pc, tr)
			}
			// The same request bytes at the backend as the HTTP/1.1 transport of the same scheme.
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
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// runParity runs one case over one transport on a fresh server and returns what the backend
// received at each step (the zero record where it received nothing).
func runParity(t *testing.T, pc parityCase, tr transport) []recorded {
	return runParityOver(t, pc, tr, "")
}

// runParityOver is runParity with the case's pools reaching their backends over proto: ""
// (HTTP/1.1, as the case says), "h2c" or "h2" (parity_h2backend_test.go).
func runParityOver(t *testing.T, pc parityCase, tr transport, proto string) []recorded {
	var backends []*rawBackend
	answers := pc.backends
	if answers == nil {
		answers = []string{okAnswer}
	}
	var tc *tls.Config
	yaml, tlsBackends := pc.yaml, pc.tlsBackends
	if proto != "" {
		yaml, tlsBackends = h2BackendYAML(yaml, tlsBackends, proto)
	}
	if tlsBackends {
		tc, yaml = parityBackendTLS(t, yaml)
	}
	backend := func(answers ...string) *rawBackend {
		if proto != "" {
			return newH2RawBackend(t, tc, answers...)
		}
		return newRawBackendTLS(t, tc, answers...)
	}
	for _, a := range answers {
		backends = append(backends, backend(strings.Split(a, thenAnswer)...))
	}
	backends = append(backends, backend()) // B1, for cases that need a second
	env := startParity(t, pc.listener, yaml, backends)
	addr := env.srv.Addr(tr.listener).String()
	var seen []recorded
	cookie := ""
	for i, s := range pc.steps {
		if s.req.cookie {
			s.req.header = append(s.req.header, [2]string{"Cookie", cookie})
		}
		where := fmt.Sprintf("%s step %d (%s %s)", tr.name, i, s.req.withDefaults().method, s.req.withDefaults().target)
		counts := make([]int, len(backends))
		for j, b := range backends {
			counts[j] = b.count()
		}
		got := do(t, tr, addr, s.req)
		w := s.want
		if w.capture && got.header != nil {
			cookie, _, _ = strings.Cut(got.header.Get("Set-Cookie"), ";")
		}
		checkAnswer(t, where, got, w, backends)
		var rec recorded
		for j, b := range backends {
			name := fmt.Sprintf("B%d", j)
			reached := b.count() > counts[j]
			switch {
			case reached && w.reach != name && w.also != name:
				t.Errorf("%s: backend %s got the request, want %q", where, name, w.reach)
			case !reached && (w.reach == name || w.also == name):
				t.Errorf("%s: backend %s did not get the request", where, name)
			case reached && name == w.also:
				if proto != "" {
					checkH2Record(t, where, b.last(), proto)
				}
			case reached:
				rec = b.last()
				if proto != "" {
					w.line = strings.Replace(w.line, " HTTP/1.1", " HTTP/2.0", 1)
					checkH2Record(t, where, rec, proto)
				}
				checkBackend(t, where, rec, w, backends)
			}
		}
		seen = append(seen, rec)
		if w.hungUp {
			select {
			case <-backends[0].closed:
			case <-time.After(5 * time.Second):
				t.Errorf("%s: the backend's connection stayed open after the client left", where)
			}
		}
		checkLog(t, where, env.nextLog(t), got, w, tr)
	}
	return seen
}

func expand(s string, backends []*rawBackend) string {
	for i, b := range backends {
		s = strings.ReplaceAll(s, fmt.Sprintf("{B%d}", i), b.addr())
	}
	return s
}

func checkAnswer(t *testing.T, where string, got presp, w pwant, backends []*rawBackend) {
	t.Helper()
	if w.status == 0 {
		if !got.reset {
			t.Errorf("%s: got %d, want no answer", where, got.status)
		}
		return
	}
	if got.reset {
		t.Errorf("%s: the stream was reset or the connection closed, want %d", where, w.status)
		return
	}
	if got.status != w.status {
		t.Errorf("%s: status %d, want %d (body %q)", where, got.status, w.status, got.body)
	}
	for k, v := range w.header {
		if !matchValue(got.header.Values(k), expand(v, backends)) {
			t.Errorf("%s: response %s = %q, want %q", where, k, got.header.Values(k), v)
		}
	}
	for k, v := range w.trailer {
		if !matchValue(got.trailer.Values(k), v) {
			t.Errorf("%s: response trailer %s = %q, want %q", where, k, got.trailer.Values(k), v)
		}
	}
	body := got.body
	want := w.body
	if rest, ok := strings.CutPrefix(want, "gzip:"); ok {
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			t.Errorf("%s: body is not gzip: %v", where, err)
			return
		}
		body, _ = io.ReadAll(zr)
		want = rest
	}
	if rest, ok := strings.CutPrefix(want, "br:"); ok {
		var err error
		if body, err = io.ReadAll(brotli.NewReader(bytes.NewReader(body))); err != nil {
			t.Errorf("%s: body is not brotli: %v", where, err)
			return
		}
		want = rest
	}
	switch {
	case want == "":
	case strings.HasPrefix(want, "~"):
		if !matchValue([]string{string(body)}, want) {
			t.Errorf("%s: body %q, want %s", where, body, want)
		}
	case string(body) != want:
		t.Errorf("%s: body %q, want %q", where, body, want)
	}
}

func checkBackend(t *testing.T, where string, rec recorded, w pwant, backends []*rawBackend) {
	t.Helper()
	if w.line != "" && rec.requestLine() != w.line {
		t.Errorf("%s: the backend got %q, want %q", where, rec.requestLine(), w.line)
	}
	f := rec.fields()
	for k, v := range w.seen {
		if !matchValue(f.Values(k), expand(v, backends)) {
			t.Errorf("%s: the backend got %s = %q, want %q", where, k, f.Values(k), v)
		}
	}
	if w.seenBody != "" && string(rec.body) != w.seenBody {
		t.Errorf("%s: the backend got the body %q, want %q", where, rec.body, w.seenBody)
	}
	for k, v := range w.seenTrailer {
		var got []string
		if rec.h2 != nil {
			for _, f := range rec.h2.trailers {
				if f.Name == k {
					got = append(got, f.Value)
				}
			}
		}
		if !matchValue(got, v) {
			t.Errorf("%s: the backend got the trailer %s = %q, want %q", where, k, got, v)
		}
	}
}

func checkLog(t *testing.T, where string, e logEntry, got presp, w pwant, tr transport) {
	t.Helper()
	if e == nil {
		t.Errorf("%s: no access-log line", where)
		return
	}
	status := w.logStatus
	if status == 0 {
		status = w.status
	}
	if s, _ := e["status"].(float64); int(s) != status {
		t.Errorf("%s: logged status %v, want %d", where, e["status"], status)
	}
	if e["termination"] != w.term {
		t.Errorf("%s: logged termination %q, want %q", where, e["termination"], w.term)
	}
	if r, _ := e["retries"].(float64); int(r) != w.retries {
		t.Errorf("%s: logged retries %v, want %d", where, e["retries"], w.retries)
	}
	if e["pool"] != w.pool {
		t.Errorf("%s: logged pool %q, want %q", where, e["pool"], w.pool)
	}
	proto := "HTTP/1.1"
	if tr.h2 {
		proto = "HTTP/2.0"
	}
	if p := e["proto"]; p != proto && !(p == "HTTP/1.0" && !tr.h2) {
		t.Errorf("%s: logged proto %q, want %q", where, p, proto)
	}
	if e["listener"] != tr.listener {
		t.Errorf("%s: logged listener %q, want %q", where, e["listener"], tr.listener)
	}
}

// TestParityConnsPerClient: max_conns_per_client counts connections, so an HTTP/2 connection
// counts once however many streams it carries, and a connection over the limit is closed
// before any request on every transport.
func TestParityConnsPerClient(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			t.Parallel()
			b := newRawBackend(t)
			env := startParity(t, "max_conns_per_client: 1", routeWith(""), []*rawBackend{b})
			addr := env.srv.Addr(tr.listener).String()
			first := dial(t, tr, addr)
			defer first.Close()
			// Two requests in turn on the first connection: both served.
			if tr.h2 {
				checkTwoStreams(t, first, tr.tls)
			} else {
				for range 2 {
					got := h1Do(t, first, preq{}.withDefaults())
					if got.status != 200 {
						t.Fatalf("request on the first connection: %d", got.status)
					}
				}
			}
			// A second connection over the same transport is over the limit: closed without an
			// answer (a TLS one may already fail its handshake).
			if got, ok := secondConn(t, tr, addr); ok {
				t.Errorf("the second connection was answered %d, want it closed", got.status)
			}
		})
	}
}

// checkTwoStreams sends two streams in turn on one HTTP/2 connection and wants both answered.
func checkTwoStreams(t *testing.T, c net.Conn, isTLS bool) {
	t.Helper()
	h := newH2Conn(t, c, isTLS)
	for _, id := range []uint32{1, 3} {
		if got := h.do(t, id, preq{}.withDefaults()); got.status != 200 {
			t.Fatalf("stream %d: %d", id, got.status)
		}
	}
}

// secondConn opens another connection over tr and sends a request on it; ok reports that it
// was answered.
func secondConn(t *testing.T, tr transport, addr string) (presp, bool) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	sendProxyHeader(t, tr, c)
	var conn net.Conn = c
	if tr.tls {
		protos := []string{"http/1.1"}
		if tr.h2 {
			protos = []string{"h2"}
		}
		tc := tls.Client(c, &tls.Config{InsecureSkipVerify: true, NextProtos: protos, ServerName: "app.test"})
		if err := tc.Handshake(); err != nil {
			return presp{}, false // closed before its handshake ended
		}
		conn = tc
	}
	var got presp
	if tr.h2 {
		h, err := openH2(conn, tr.tls)
		if err != nil {
			return presp{}, false // closed (reset) while the preface was sent
		}
		got = h.do(t, 1, preq{}.withDefaults())
	} else {
		got = h1Do(t, conn, preq{}.withDefaults())
	}
	return got, !got.reset && got.status != 0
}
