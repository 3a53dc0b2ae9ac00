//go:build linux

package h1

import (
	"ballast/internal/h1conformance"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// curl runs curl with args (silent, bounded to 20 s) and returns what it printed. Tests that
// use it skip when curl is not installed.
func curl(t *testing.T, args ...string) string {
	t.Helper()
	bin, err := exec.LookPath("curl")
	if err != nil {
		t.Skip("curl not installed (Debian package curl): ", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, append([]string{"-s", "--max-time", "15"}, args...)...).Output()
	if ctx.Err() != nil {
		t.Fatalf("curl %v: %v", args, ctx.Err())
	}
	_ = err // curl exits non-zero for a refused CONNECT; the printed status is what counts
	return string(out)
}

// startHeadProxy serves conformanceConfig (routes: Host public.example, path prefix /api/)
// in front of a raw recording backend.
func startHeadProxy(t *testing.T) (*testProxy, *h1conformance.RawBackend) {
	rb := h1conformance.NewRawBackend(t)
	return startProxy(t, conformanceConfig(rb.Addr())), rb
}

// Issue 8 item 2: an absolute-form target is routed on its authority, which is also the Host
// the backend gets; before, the request was routed on Host and forwarded with the authority.
func TestE2EAbsoluteFormRoutesOnAuthority(t *testing.T) {
	tp, rb := startHeadProxy(t)
	code := curl(t, "-o", "/dev/null", "-w", "%{http_code}", "--request-target", "http://internal.example/x",
		"-H", "Host: public.example", tp.url("/"))
	if got, _ := rb.Take(t); code != "404" || len(got) > 0 {
		t.Errorf("authority internal.example with Host public.example: status %s, backend got %q; want 404 and nothing", code, got)
	}
	code = curl(t, "-o", "/dev/null", "-w", "%{http_code}", "--request-target", "http://public.example/x",
		"-H", "Host: internal.example", tp.url("/"))
	_, reqs := rb.Take(t)
	if code != "200" || len(reqs) != 1 {
		t.Fatalf("authority public.example: status %s, %d requests at the backend; want 200 and 1", code, len(reqs))
	}
	if r := reqs[0]; r.Target != "http://public.example/x" || len(r.Hosts) != 1 || r.Hosts[0] != "public.example" {
		t.Errorf("backend got target %q with Host %q; want the target as sent and Host public.example", r.Target, r.Hosts)
	}
	if raw := string(reqs[0].Raw); !strings.Contains(raw, "X-Forwarded-Host: public.example\r\n") {
		t.Errorf("X-Forwarded-Host does not name the routed host:\n%s", raw)
	}
}

// Issue 8 item 3: a field name that is not a token is refused with 400 and nothing reaches
// the backend; before, "X Forwarded For" and friends were forwarded verbatim.
func TestE2EInvalidFieldNameRefused(t *testing.T) {
	tp, rb := startHeadProxy(t)
	for _, hdr := range []string{"X Forwarded For: 6.6.6.6", "Content Length: 4", "Transfer Encoding: chunked"} {
		code := curl(t, "-o", "/dev/null", "-w", "%{http_code}", "-H", "Host: public.example", "-H", hdr, tp.url("/"))
		if got, _ := rb.Take(t); code != "400" || len(got) > 0 {
			t.Errorf("%q: status %s, backend got %q; want 400 and nothing", hdr, code, got)
		}
	}
}

// Issue 8 item 7: the request target reaches the backend byte for byte (encoded slashes, the
// asterisk of OPTIONS *); before, it was percent-decoded and normalised on the way.
func TestE2ETargetForwardedByteForByte(t *testing.T) {
	tp, rb := startHeadProxy(t)
	for _, tc := range []struct{ method, target string }{
		{"GET", "/anything/a%2Fb?x=%2F"},
		{"GET", "/a/%2e%2e/b"},
		{"OPTIONS", "*"},
	} {
		code := curl(t, "-o", "/dev/null", "-w", "%{http_code}", "-X", tc.method, "--path-as-is",
			"--request-target", tc.target, "-H", "Host: public.example", tp.url("/"))
		_, reqs := rb.Take(t)
		if code != "200" || len(reqs) != 1 || reqs[0].Target != tc.target {
			var got []string
			for _, r := range reqs {
				got = append(got, r.Target)
			}
			t.Errorf("%s %s: status %s, backend targets %q; want 200 and the target unchanged", tc.method, tc.target, code, got)
		}
	}
}

// Issue 8 item 8: a body without Content-Type is forwarded without one, and CONNECT is
// answered 405 with Allow instead of being forwarded as an ordinary request.
func TestE2ERequestForwardedUnchangedAndConnectRefused(t *testing.T) {
	tp, rb := startHeadProxy(t)
	code := curl(t, "-o", "/dev/null", "-w", "%{http_code}", "--data-binary", "abcd", "-H", "Content-Type:",
		"-H", "Host: public.example", tp.url("/up"))
	_, reqs := rb.Take(t)
	if code != "200" || len(reqs) != 1 {
		t.Fatalf("POST: status %s, %d requests at the backend", code, len(reqs))
	}
	if raw := string(reqs[0].Raw); strings.Contains(strings.ToLower(raw), "content-type") || !strings.HasSuffix(raw, "\r\n\r\nabcd") {
		t.Errorf("backend got a changed request:\n%s", raw)
	}

	// curl as an HTTPS client with Ballast as its proxy: the CONNECT is refused.
	out := curl(t, "-o", "/dev/null", "-w", "%{http_connect}", "-p", "-x", tp.url(""), "https://public.example/")
	if got, _ := rb.Take(t); out != "405" || len(got) > 0 {
		t.Errorf("CONNECT through curl -p: status %q, backend got %q; want 405 and nothing", out, got)
	}
	head := curl(t, "-i", "-X", "CONNECT", "--request-target", "public.example:443", tp.url(""))
	if !strings.HasPrefix(head, "HTTP/1.1 405 ") || !strings.Contains(head, "\r\nAllow: GET, HEAD, POST, PUT, DELETE, OPTIONS, PATCH, TRACE\r\n") {
		t.Errorf("CONNECT answer lacks 405 or Allow:\n%s", head)
	}
	if got, _ := rb.Take(t); len(got) > 0 {
		t.Errorf("backend got %q for CONNECT", got)
	}
}

// TestProxiedMatchesDirect compares each proxied response with the same request sent straight
// to the backend: status, body and the headers that must pass through untouched.
func TestProxiedMatchesDirect(t *testing.T) {
	hb := startHTTPBin(t)
	tp := startProxy(t, testConfig(testPool("bin", "roundrobin", hostOf(hb))))
	c := testClient()
	tests := []struct {
		name, method, path string
		hdr                map[string]string
		headers            []string // response headers that must match
	}{
		{"status 418", "GET", "/status/418", nil, nil},
		{"status 500", "GET", "/status/500", nil, nil},
		{"status 204", "GET", "/status/204", nil, nil},
		{"redirect not followed", "GET", "/redirect-to?url=/get&status_code=302", nil, []string{"Location"}},
		{"relative redirect", "GET", "/relative-redirect/2", nil, []string{"Location"}},
		{"bytes", "GET", "/bytes/100000?seed=7", nil, []string{"Content-Type", "Content-Length"}},
		{"stream bytes chunked", "GET", "/stream-bytes/300000?seed=3&chunk_size=1000", nil, []string{"Content-Type"}},
		{"html", "GET", "/html", nil, []string{"Content-Type"}},
		{"json", "GET", "/json", nil, []string{"Content-Type"}},
		{"xml", "GET", "/xml", nil, []string{"Content-Type"}},
		{"utf8", "GET", "/encoding/utf8", nil, []string{"Content-Type"}},
		{"robots", "GET", "/robots.txt", nil, nil},
		{"range", "GET", "/range/1000?duration=0", map[string]string{"Range": "bytes=10-99"}, []string{"Content-Range", "Content-Length"}},
		{"etag 304", "GET", "/etag/abc", map[string]string{"If-None-Match": `"abc"`}, []string{"Etag"}},
		{"response headers", "GET", "/response-headers?X-Test=one&Cache-Control=no-store", nil, []string{"X-Test", "Cache-Control"}},
		{"head", "HEAD", "/head", nil, []string{"Content-Length", "Content-Type"}},
		{"deny", "GET", "/deny", nil, nil},
		{"image", "GET", "/image/png", nil, []string{"Content-Type"}},
		{"base64", "GET", "/base64/aGVsbG8gd29ybGQ=", nil, nil},
		{"unknown path 404", "GET", "/no/such/thing", nil, nil},
		{"method not allowed", "DELETE", "/get", nil, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			want, wantBody := get(t, c, tc.method, hb.URL+tc.path, nil, tc.hdr)
			got, gotBody := get(t, c, tc.method, tp.url(tc.path), nil, tc.hdr)
			if got.StatusCode != want.StatusCode {
				t.Fatalf("status %d, direct %d (body %q)", got.StatusCode, want.StatusCode, gotBody)
			}
			if !bytes.Equal(gotBody, wantBody) {
				t.Errorf("body differs: %d bytes, direct %d", len(gotBody), len(wantBody))
			}
			for _, h := range tc.headers {
				if g, w := got.Header.Get(h), want.Header.Get(h); g != w {
					t.Errorf("header %s = %q, direct %q", h, g, w)
				}
			}
			if got.Header.Get("X-Ballast-Backend") != hostOf(hb) {
				t.Errorf("X-Ballast-Backend = %q", got.Header.Get("X-Ballast-Backend"))
			}
		})
	}
}

func TestMethodsAndBodies(t *testing.T) {
	hb := startHTTPBin(t)
	tp := startProxy(t, testConfig(testPool("bin", "roundrobin", hostOf(hb))))
	c := testClient()
	for _, m := range []string{"GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"} {
		t.Run(m, func(t *testing.T) {
			var body io.Reader
			if m != "GET" && m != "OPTIONS" {
				body = strings.NewReader("payload-" + m)
			}
			resp, b := get(t, c, m, tp.url("/anything/x?q=1"), body, map[string]string{"Content-Type": "text/plain"})
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, b)
			}
			if m == "OPTIONS" {
				return // httpbin answers CORS preflight itself
			}
			var e echoed
			if err := json.Unmarshal(b, &e); err != nil {
				t.Fatal(err)
			}
			if e.Method != m {
				t.Errorf("method %q", e.Method)
			}
			if body != nil && e.Data != "payload-"+m {
				t.Errorf("data %q", e.Data)
			}
			if q := e.Args["q"]; len(q) != 1 || q[0] != "1" {
				t.Errorf("args %v", e.Args)
			}
		})
	}
}

func TestForwardingHeaders(t *testing.T) {
	hb := startHTTPBin(t)
	tp := startProxy(t, testConfig(testPool("bin", "roundrobin", hostOf(hb))))
	c := testClient()
	tests := []struct {
		name    string
		hdr     map[string]string
		want    map[string]string // header → value the backend sees
		missing []string          // headers the backend must not see
	}{
		{
			name: "fresh",
			hdr:  map[string]string{"Host": "example.com"},
			want: map[string]string{
				"X-Forwarded-For": "127.0.0.1", "X-Forwarded-Proto": "http", "X-Forwarded-Host": "example.com",
				"Forwarded": "for=127.0.0.1;proto=http;host=example.com",
			},
		},
		{
			name: "appended",
			hdr: map[string]string{"Host": "example.com:8080", "X-Forwarded-For": "203.0.113.9",
				"Forwarded": `for="[2001:db8::1]";proto=https`},
			want: map[string]string{
				"X-Forwarded-For": "203.0.113.9, 127.0.0.1",
				"Forwarded":       `for="[2001:db8::1]";proto=https, for=127.0.0.1;proto=http;host="example.com:8080"`,
			},
		},
		{
			name: "hop-by-hop stripped",
			hdr: map[string]string{"Connection": "keep-alive, X-Secret, x-other", "X-Secret": "s", "X-Other": "o",
				"Keep-Alive": "timeout=5", "Proxy-Authorization": "Basic eDp5", "Te": "trailers", "X-Kept": "k",
				"Proxy-Connection": "keep-alive"},
			want:    map[string]string{"X-Kept": "k"},
			missing: []string{"X-Secret", "X-Other", "Keep-Alive", "Proxy-Authorization", "Te", "Proxy-Connection", "Connection"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, b := get(t, c, "GET", tp.url("/headers"), nil, tc.hdr)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d", resp.StatusCode)
			}
			var e echoed
			if err := json.Unmarshal(b, &e); err != nil {
				t.Fatal(err)
			}
			for k, v := range tc.want {
				if got := strings.Join(e.Headers[k], ","); got != v {
					t.Errorf("%s = %q, want %q", k, got, v)
				}
			}
			for _, k := range tc.missing {
				if v, ok := e.Headers[k]; ok {
					t.Errorf("%s reached the backend: %q", k, v)
				}
			}
		})
	}
}

func TestGzipAndStreamPassThrough(t *testing.T) {
	hb := startHTTPBin(t)
	tp := startProxy(t, testConfig(testPool("bin", "roundrobin", hostOf(hb))))
	c := testClient()
	resp, b := get(t, c, "GET", tp.url("/gzip"), nil, map[string]string{"Accept-Encoding": "gzip"})
	if resp.Header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("Content-Encoding %q", resp.Header.Get("Content-Encoding"))
	}
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := io.ReadAll(zr)
	if err != nil || !bytes.Contains(plain, []byte(`"gzipped": true`)) {
		t.Fatalf("gunzip: %v %q", err, plain)
	}

	resp, b = get(t, c, "GET", tp.url("/stream/7"), nil, nil)
	if resp.StatusCode != 200 || len(resp.TransferEncoding) == 0 || resp.TransferEncoding[0] != "chunked" {
		t.Fatalf("status %d TE %v", resp.StatusCode, resp.TransferEncoding)
	}
	if n := bytes.Count(b, []byte("\n")); n != 7 {
		t.Errorf("%d lines, want 7", n)
	}

	req, _ := http.NewRequest("GET", tp.url("/trailers?X-Trailer-One=1"), nil)
	r2, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, r2.Body)
	r2.Body.Close()
	if r2.StatusCode != 200 {
		t.Fatalf("trailers status %d", r2.StatusCode)
	}
	if got := r2.Trailer.Get("X-Trailer-One"); got != "1" {
		t.Errorf("trailer X-Trailer-One = %q (trailers %v)", got, r2.Trailer)
	}
}

// rawExchange writes raw bytes on a fresh connection and returns the status line.
func rawExchange(t *testing.T, addr, raw string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatalf("reading status: %v", err)
	}
	return strings.TrimSpace(line)
}

func TestMalformedRequests(t *testing.T) {
	hb := startHTTPBin(t)
	tp := startProxy(t, testConfig(testPool("bin", "roundrobin", hostOf(hb))))
	tests := []struct{ name, raw, want string }{
		{"ok", "GET /get HTTP/1.1\r\nHost: x\r\n\r\n", "HTTP/1.1 200 OK"},
		{"garbage", "BLAH\r\n\r\n", "HTTP/1.1 400 Bad Request"},
		{"bad header", "GET / HTTP/1.1\r\nHost: x\r\nNo colon here\r\n\r\n", "HTTP/1.1 400 Bad Request"},
		{"CL then TE", "POST /post HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "HTTP/1.1 400 Bad Request"},
		{"TE then CL", "POST /post HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n", "HTTP/1.1 400 Bad Request"},
		{"two CL", "POST /post HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", "HTTP/1.1 400 Bad Request"},
		{"bad TE", "POST /post HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", "HTTP/1.1 400 Bad Request"},
		{"oversize header", "GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 20000) + "\r\n\r\n", "HTTP/1.1 431 Request Header Fields Too Large"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := rawExchange(t, tp.addr, tc.raw); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}
