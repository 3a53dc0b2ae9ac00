// Package h1conformance is what the HTTP/1 engine's request path is held to (package h1 runs
// it through a real listener, plain and over TLS): the request-head table (what a client
// writes, the statuses it must get and the exact bytes the backend must receive), a request
// framer written from RFC 9112 independently of the engine, a raw backend that records every
// byte it receives and frames it with that reference, and the invariant the fuzz targets
// check. One copy, so that the plain and TLS paths cannot drift apart. It is test code: only
// tests import it.
package h1conformance

import (
	"regexp"
	"strings"
)

// Row is one case: what the client writes, the status codes it must get (in order,
// space-separated) and the exact bytes the backend must receive (BACKEND stands for the
// backend's address).
type Row struct {
	Name    string
	Req     string
	Status  string
	Backend string
}

// Routes of the table's configuration: Host public.example and the path prefix /api/ (any
// host) go to the pool; every other request has no route (404).
const (
	RouteHost   = "public.example"
	RoutePrefix = "/api/"
)

// FwdFor is what Ballast appends to every forwarded request from the test client, whose
// address is 127.0.0.1, for a request whose host is host.
func FwdFor(host string) string {
	return "X-Forwarded-For: 127.0.0.1\r\nX-Forwarded-Proto: http\r\nX-Forwarded-Host: " + host +
		"\r\nForwarded: for=127.0.0.1;proto=http;host=" + host + "\r\n"
}

// Pub is the usual forwarded head: the request line, Host: public.example, the given
// fields, then the forwarding fields and the blank line.
func Pub(requestLine string, fields ...string) string {
	s := requestLine + "\r\nHost: public.example\r\n"
	for _, f := range fields {
		s += f + "\r\n"
	}
	return s + FwdFor("public.example") + "\r\n"
}

var statusLine = regexp.MustCompile(`HTTP/1\.[01] (\d{3}) `)

// Statuses lists the status codes of the responses in a raw response stream.
func Statuses(out []byte) string {
	var codes []string
	for _, m := range statusLine.FindAllSubmatch(out, -1) {
		codes = append(codes, string(m[1]))
	}
	return strings.Join(codes, " ")
}

const h = "Host: public.example\r\n"

// Rows is the request-head table: what the client writes, the status codes it
// must get (in order, space-separated) and the exact bytes the backend must receive.
var Rows = []Row{
	// Targets are forwarded byte for byte; routing uses the normalised path.
	{"plain GET", "GET /x HTTP/1.1\r\n" + h + "\r\n", "200", Pub("GET /x HTTP/1.1")},
	{"encoded slash in path and query", "GET /anything/a%2Fb?x=%2F HTTP/1.1\r\n" + h + "\r\n", "200", Pub("GET /anything/a%2Fb?x=%2F HTTP/1.1")},
	{"encoded dot segments kept", "GET /a/%2e%2e/b HTTP/1.1\r\n" + h + "\r\n", "200", Pub("GET /a/%2e%2e/b HTTP/1.1")},
	{"dot segments kept", "GET /a/../b/./c HTTP/1.1\r\n" + h + "\r\n", "200", Pub("GET /a/../b/./c HTTP/1.1")},
	{"double slashes kept", "GET //x//y HTTP/1.1\r\n" + h + "\r\n", "200", Pub("GET //x//y HTTP/1.1")},
	{"encoded space and unicode kept", "GET /a%20b/%C3%A9?q=a+b HTTP/1.1\r\n" + h + "\r\n", "200", Pub("GET /a%20b/%C3%A9?q=a+b HTTP/1.1")},
	{"prefix route on normalised path", "GET /api/a%2Fb HTTP/1.1\r\nHost: other.example\r\n\r\n", "200",
		"GET /api/a%2Fb HTTP/1.1\r\nHost: other.example\r\n" + FwdFor("other.example") + "\r\n"},
	{"dot segments leave the prefix", "GET /api/%2e%2e/secret HTTP/1.1\r\nHost: other.example\r\n\r\n", "404", ""},
	{"dot segments into the prefix", "GET /x/../api/y HTTP/1.1\r\nHost: other.example\r\n\r\n", "200",
		"GET /x/../api/y HTTP/1.1\r\nHost: other.example\r\n" + FwdFor("other.example") + "\r\n"},
	// fasthttp adds "Content-Length: 0" to a request other than GET and HEAD without a body:
	// the same framing (RFC 9112 §6.3), said explicitly.
	{"OPTIONS asterisk", "OPTIONS * HTTP/1.1\r\n" + h + "\r\n", "200", Pub("OPTIONS * HTTP/1.1", "Content-Length: 0")},
	{"asterisk with GET", "GET * HTTP/1.1\r\n" + h + "\r\n", "400", ""},
	{"relative target", "GET x HTTP/1.1\r\n" + h + "\r\n", "400", ""},
	{"space in target", "GET /a b HTTP/1.1\r\n" + h + "\r\n", "400", ""},
	{"raw UTF-8 in target", "GET /caf\xc3\xa9 HTTP/1.1\r\n" + h + "\r\n", "400", ""},
	{"method not a token", "G@T / HTTP/1.1\r\n" + h + "\r\n", "400", ""},
	{"NUL in target", "GET /a\x00b HTTP/1.1\r\n" + h + "\r\n", "400", ""},

	// Absolute form: the authority replaces Host (RFC 9112 §3.2.2), for routing and forwarding.
	{"absolute form names an unrouted host", "GET http://internal.example/x HTTP/1.1\r\n" + h + "\r\n", "404", ""},
	{"absolute form replaces Host", "GET http://public.example/x?y=1 HTTP/1.1\r\nHost: internal.example\r\n\r\n", "200", Pub("GET http://public.example/x?y=1 HTTP/1.1")},
	{"absolute form with port", "GET http://public.example:8080/x HTTP/1.1\r\n" + h + "\r\n", "200",
		"GET http://public.example:8080/x HTTP/1.1\r\nHost: public.example:8080\r\n" + "X-Forwarded-For: 127.0.0.1\r\nX-Forwarded-Proto: http\r\nX-Forwarded-Host: public.example:8080\r\n" +
			"Forwarded: for=127.0.0.1;proto=http;host=\"public.example:8080\"\r\n\r\n"},
	{"absolute form without path", "GET http://public.example HTTP/1.1\r\n" + h + "\r\n", "200", Pub("GET http://public.example HTTP/1.1")},
	{"absolute form HTTP/1.0 without Host", "GET http://public.example/x HTTP/1.0\r\n\r\n", "200", Pub("GET http://public.example/x HTTP/1.1")},
	{"absolute form with userinfo", "GET http://u@public.example/x HTTP/1.1\r\n" + h + "\r\n", "400", ""},
	{"absolute form other scheme", "GET ftp://public.example/x HTTP/1.1\r\n" + h + "\r\n", "400", ""},
	{"absolute form empty authority", "GET http:///x HTTP/1.1\r\n" + h + "\r\n", "400", ""},

	// Field names must be tokens; obs-fold and control characters are refused.
	{"space in X-Forwarded-For name", "GET / HTTP/1.1\r\n" + h + "X Forwarded For: 6.6.6.6\r\n\r\n", "400", ""},
	{"space in Content-Length name", "POST / HTTP/1.1\r\n" + h + "Content Length: 4\r\n\r\nabcd", "400", ""},
	{"space in Transfer-Encoding name", "POST / HTTP/1.1\r\n" + h + "Transfer Encoding: chunked\r\n\r\n4\r\nabcd\r\n0\r\n\r\n", "400", ""},
	{"space before colon", "POST / HTTP/1.1\r\n" + h + "Transfer-Encoding : chunked\r\n\r\n0\r\n\r\n", "400", ""},
	{"separator in name", "GET / HTTP/1.1\r\n" + h + "X@Y: 1\r\n\r\n", "400", ""},
	{"empty name", "GET / HTTP/1.1\r\n" + h + ": 1\r\n\r\n", "400", ""},
	{"NUL in name", "GET / HTTP/1.1\r\n" + h + "X\x00Y: 1\r\n\r\n", "400", ""},
	{"NUL in value", "GET / HTTP/1.1\r\n" + h + "X-A: a\x00b\r\n\r\n", "400", ""},
	{"bare CR in value", "GET / HTTP/1.1\r\n" + h + "X-A: a\rb\r\n\r\n", "400", ""},
	{"obs-fold", "GET / HTTP/1.1\r\n" + h + "X-A: 1\r\n 2\r\n\r\n", "400", ""},
	{"obs-fold with tab", "GET / HTTP/1.1\r\n" + h + "X-A: 1\r\n\t2\r\n\r\n", "400", ""},
	{"first field line folded", "GET / HTTP/1.1\r\n X-A: 1\r\n" + h + "\r\n", "400", ""},
	{"bare LF after the request line", "GET / HTTP/1.1\n" + h + "X-A: 1\n\r\n", "400", ""},
	{"bare LF before the blank line", "GET / HTTP/1.1\r\n" + h + "X-A: 1\n\r\n", "400", ""},
	{"bare LF between fields", "GET / HTTP/1.1\r\n" + h + "X-A: 1\nX-B: 2\r\n\r\n", "200", Pub("GET / HTTP/1.1", "X-A: 1", "X-B: 2")},
	{"bare LF only", "GET / HTTP/1.1\n" + h[:len(h)-2] + "\n\n", "400", ""},
	{"field value whitespace trimmed", "GET / HTTP/1.1\r\n" + h + "X-A: \t 1 \t\r\n\r\n", "200", Pub("GET / HTTP/1.1", "X-A: 1")},
	{"HTTP/1.1 without Host", "GET / HTTP/1.1\r\n\r\n", "400", ""},
	{"empty Host", "GET / HTTP/1.1\r\nHost:\r\n\r\n", "400", ""},
	{"Host with userinfo", "GET / HTTP/1.1\r\nHost: u@public.example\r\n\r\n", "400", ""},
	{"Host with a path", "GET / HTTP/1.1\r\nHost: public.example/x\r\n\r\n", "400", ""},
	{"HTTP/1.0 without Host", "GET /api/x HTTP/1.0\r\n\r\n", "200", "GET /api/x HTTP/1.0\r\nHost: BACKEND\r\n" +
		"X-Forwarded-For: 127.0.0.1\r\nX-Forwarded-Proto: http\r\nForwarded: for=127.0.0.1;proto=http\r\n\r\n"},
	{"duplicate Host", "GET / HTTP/1.1\r\n" + h + h + "\r\n", "400", ""},

	// Framing: Content-Length and Transfer-Encoding.
	{"Content-Length body, no Content-Type added", "POST /x HTTP/1.1\r\n" + h + "Content-Length: 4\r\n\r\nabcd", "200", Pub("POST /x HTTP/1.1", "Content-Length: 4")[:0] +
		"POST /x HTTP/1.1\r\nHost: public.example\r\nContent-Length: 4\r\n" + FwdFor("public.example") + "\r\nabcd"},
	{"Content-Type kept", "POST /x HTTP/1.1\r\n" + h + "Content-Type: text/plain\r\nContent-Length: 2\r\n\r\nhi", "200",
		"POST /x HTTP/1.1\r\nHost: public.example\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n" + FwdFor("public.example") + "\r\nhi"},
	{"chunked body", "POST /x HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n\r\n4\r\nabcd\r\n0\r\n\r\n", "200",
		"POST /x HTTP/1.1\r\nHost: public.example\r\nTransfer-Encoding: chunked\r\n" + FwdFor("public.example") + "\r\n4\r\nabcd\r\n0\r\n\r\n"},
	{"Content-Length and Transfer-Encoding", "POST / HTTP/1.1\r\n" + h + "Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "400", ""},
	{"duplicate Content-Length", "POST / HTTP/1.1\r\n" + h + "Content-Length: 1\r\nContent-Length: 1\r\n\r\na", "400", ""},
	{"Content-Length list", "POST / HTTP/1.1\r\n" + h + "Content-Length: 1, 1\r\n\r\na", "400", ""},
	{"Content-Length with sign", "POST / HTTP/1.1\r\n" + h + "Content-Length: +1\r\n\r\na", "400", ""},
	{"negative Content-Length", "POST / HTTP/1.1\r\n" + h + "Content-Length: -1\r\n\r\na", "400", ""},
	{"Transfer-Encoding identity", "POST / HTTP/1.1\r\n" + h + "Transfer-Encoding: identity\r\n\r\n", "400", ""},
	{"Transfer-Encoding identity with Content-Length", "POST / HTTP/1.1\r\n" + h + "Transfer-Encoding: identity\r\nContent-Length: 3\r\n\r\nabc", "400", ""},
	{"Transfer-Encoding gzip", "POST / HTTP/1.1\r\n" + h + "Transfer-Encoding: gzip\r\n\r\n", "400", ""},
	{"Transfer-Encoding chunked twice in a list", "POST / HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n", "400", ""},
	{"two Transfer-Encoding fields", "POST / HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "400", ""},
	{"Transfer-Encoding in HTTP/1.0", "POST / HTTP/1.0\r\n" + h + "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "400", ""},
	{"body shorter than Content-Length", "POST / HTTP/1.1\r\n" + h + "Content-Length: 10\r\n\r\nabc", "400", ""},

	// Methods and versions.
	{"CONNECT authority form", "CONNECT public.example:443 HTTP/1.1\r\n" + h + "\r\n", "405", ""},
	{"CONNECT with a body", "CONNECT public.example:443 HTTP/1.1\r\n" + h + "Content-Length: 3\r\n\r\nabc", "405", ""},
	{"POST without body", "POST /x HTTP/1.1\r\n" + h + "\r\n", "200", Pub("POST /x HTTP/1.1", "Content-Length: 0")},
	{"HTTP/1.0 sent as HTTP/1.1", "GET /x HTTP/1.0\r\n" + h + "\r\n", "200", Pub("GET /x HTTP/1.1")},
	{"unknown version", "GET / HTTP/2.0\r\n" + h + "\r\n", "505", ""},
	{"HTTP/0.9 request line", "GET /\r\n\r\n", "400", ""},

	// Pipelining and hop-by-hop fields.
	{"pipelined GETs", "GET /1 HTTP/1.1\r\n" + h + "\r\nGET /2 HTTP/1.1\r\n" + h + "\r\n", "200 200", Pub("GET /1 HTTP/1.1") + Pub("GET /2 HTTP/1.1")},
	{"pipelined POST then GET", "POST /1 HTTP/1.1\r\n" + h + "Content-Length: 3\r\n\r\nabcGET /2 HTTP/1.1\r\n" + h + "\r\n", "200 200",
		"POST /1 HTTP/1.1\r\nHost: public.example\r\nContent-Length: 3\r\n" + FwdFor("public.example") + "\r\nabc" + Pub("GET /2 HTTP/1.1")},
	{"pipelined GET then bad name", "GET /1 HTTP/1.1\r\n" + h + "\r\nGET /2 HTTP/1.1\r\n" + h + "X Y: 1\r\n\r\n", "200 400", Pub("GET /1 HTTP/1.1")},
	{"body that looks like a request", "POST /1 HTTP/1.1\r\n" + h + "Content-Length: 39\r\n\r\nGET /admin HTTP/1.1\r\nHost: internal\r\n\r\n", "200",
		"POST /1 HTTP/1.1\r\nHost: public.example\r\nContent-Length: 39\r\n" + FwdFor("public.example") + "\r\nGET /admin HTTP/1.1\r\nHost: internal\r\n\r\n"},
	{"Upgrade with a body", "POST / HTTP/1.1\r\n" + h + "Connection: Upgrade\r\nUpgrade: x\r\nContent-Length: 3\r\n\r\nabc", "400", ""},
	{"Connection-named field stripped", "GET / HTTP/1.1\r\n" + h + "Connection: X-Secret\r\nX-Secret: 1\r\nX-Kept: 2\r\n\r\n", "200", Pub("GET / HTTP/1.1", "X-Kept: 2")},
	{"empty line before request line", "\r\nGET /x HTTP/1.1\r\n" + h + "\r\n", "200", Pub("GET /x HTTP/1.1")},
	{"empty lines before request line", "\r\n\n\r\nGET /x HTTP/1.1\r\n" + h + "\r\n", "200", Pub("GET /x HTTP/1.1")},
}
