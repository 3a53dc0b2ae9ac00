//go:build linux

package h1

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// rawBackend is an HTTP/1.1 backend on a loopback port that hands each request head it reads
// (the exact bytes) to answer, which writes the response bytes itself and says whether the
// connection stays open.
type rawBackend struct {
	addr  string
	heads chan string
	conns atomic.Int64
}

func newRawBackend(t *testing.T, answer func(head string, w io.Writer) (keep bool)) *rawBackend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rb := &rawBackend{addr: ln.Addr().String(), heads: make(chan string, 64)}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			rb.conns.Add(1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					var head strings.Builder
					for {
						line, err := br.ReadString('\n')
						if err != nil {
							return
						}
						head.WriteString(line)
						if line == "\r\n" {
							break
						}
					}
					select {
					case rb.heads <- head.String():
					default:
					}
					if !answer(head.String(), c) {
						return
					}
				}
			}()
		}
	}()
	return rb
}

// lines is a request head as its request line and its sorted header lines.
func lines(head string) (first string, fields []string) {
	ls := strings.Split(strings.TrimSuffix(head, "\r\n\r\n"), "\r\n")
	fields = ls[1:]
	slices.Sort(fields)
	return ls[0], fields
}

// An HTTP/2 stream without a body reaches an HTTP/1.1 backend through the HTTP/1 plane's
// connection pool: the exact request head the backend gets, and what the client gets back for
// each way a response can end (length, chunked, end of connection, no body, interim 1xx, HEAD,
// malformed).
func TestHTTP1BackendExchange(t *testing.T) {
	rb := newRawBackend(t, func(head string, w io.Writer) bool {
		first, _ := lines(head)
		method, path, _ := strings.Cut(first, " ")
		path, _, _ = strings.Cut(path, " ")
		switch path {
		case "/close":
			io.WriteString(w, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the end")
			return false
		case "/chunked":
			io.WriteString(w, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")
		case "/nocontent":
			io.WriteString(w, "HTTP/1.1 204 No Content\r\nX-Why: nothing\r\n\r\n")
		case "/interim":
			io.WriteString(w, "HTTP/1.1 103 Early Hints\r\nLink: </s.css>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		case "/bad":
			io.WriteString(w, "HTTP/1.1 two hundred\r\n\r\n")
			return false
		default:
			hdr := "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\n" +
				"Set-Cookie: a=1; Path=/\r\nSet-Cookie: b=2\r\nX-Custom: v\r\n\r\n"
			if method != "HEAD" {
				hdr += "hello"
			}
			io.WriteString(w, hdr)
		}
		return true
	})
	s := startYAML(t, fmt.Sprintf(`
listeners: [{name: in, address: "127.0.0.1:0", h2c: true}]
pools: [{name: p, backends: [{address: %s}]}]
`, rb.addr))
	in := s.Addr("in").String()
	c := xh2c()

	req, _ := http.NewRequest("GET", "http://"+in+"/a%2Fb/c?x=1&y", nil)
	req.Header.Set("User-Agent", "test")
	req.Header.Set("Accept-Encoding", "identity")
	req.Header.Set("X-Custom", "1")
	req.Header.Add("Cookie", "a=1")
	req.Header.Add("Cookie", "b=2")
	req.Header.Set("X-Forwarded-For", "10.0.0.1")
	req.Header.Set("X-Forwarded-Proto", "https") // the client's word is replaced
	req.Header.Set("Te", "trailers")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	first, fields := lines(<-rb.heads)
	wantFields := []string{
		"Accept-Encoding: identity", "Cookie: a=1; b=2", `Forwarded: for=127.0.0.1;proto=http;host="` + in + `"`, "Host: " + in, "Te: trailers", "User-Agent: test",
		"X-Custom: 1", "X-Forwarded-For: 10.0.0.1, 127.0.0.1", "X-Forwarded-Host: " + in, "X-Forwarded-Proto: http",
	}
	if first != "GET /a%2Fb/c?x=1&y HTTP/1.1" || !slices.Equal(fields, wantFields) {
		t.Errorf("backend got\n%s\n%s\nwant\n%s\n%s", first, strings.Join(fields, "\n"), "GET /a%2Fb/c?x=1&y HTTP/1.1", strings.Join(wantFields, "\n"))
	}
	if resp.StatusCode != 200 || string(body) != "hello" || resp.ContentLength != 5 {
		t.Errorf("client got %d %q (length %d), want 200 hello (5)", resp.StatusCode, body, resp.ContentLength)
	}
	if got := resp.Header.Values("Set-Cookie"); !slices.Equal(got, []string{"a=1; Path=/", "b=2"}) {
		t.Errorf("Set-Cookie %q, want both backend cookies", got)
	}
	if resp.Header.Get("X-Custom") != "v" || resp.Header.Get("Keep-Alive") != "" || resp.Header.Get("Connection") != "" {
		t.Errorf("response header %v: want X-Custom and no hop-by-hop fields", resp.Header)
	}

	tests := []struct {
		method, path string
		status       int
		body         string
		header       string // a header field the client must see, "" for none
	}{
		{"GET", "/chunked", 200, "hello world", ""},
		{"GET", "/close", 200, "until the end", "Content-Type: text/plain"},
		{"GET", "/nocontent", 204, "", "X-Why: nothing"},
		{"GET", "/interim", 200, "ok", ""},
		{"HEAD", "/plain", 200, "", "X-Custom: v"},
		{"POST", "/plain", 200, "hello", ""},
		{"GET", "/bad", 502, "ballast: bad response from backend", ""},
	}
	for _, tt := range tests {
		req, _ := http.NewRequest(tt.method, "http://"+in+tt.path, nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", tt.method, tt.path, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		got := strings.TrimSpace(string(b))
		if tt.status == 502 && strings.HasPrefix(got, tt.body+": ") {
			got = tt.body // what follows are the parser's words
		}
		if resp.StatusCode != tt.status || got != tt.body {
			t.Errorf("%s %s: %d %q, want %d %q", tt.method, tt.path, resp.StatusCode, got, tt.status, tt.body)
		}
		if k, v, ok := strings.Cut(tt.header, ": "); ok && resp.Header.Get(k) != v {
			t.Errorf("%s %s: %s = %q, want %q", tt.method, tt.path, k, resp.Header.Get(k), v)
		}
	}
}

// A pooled backend connection that the backend closed while it was idle is the keep-alive
// race, not a failure: GET (written, then the end of the connection seen) and POST (the close
// seen before writing) both go out again on a fresh connection and succeed.
func TestHTTP1BackendKeepAliveRace(t *testing.T) {
	closed := make(chan struct{}, 16)
	rb := newRawBackend(t, func(head string, w io.Writer) bool {
		io.WriteString(w, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		w.(net.Conn).Close() // without saying so: the proxy keeps the connection pooled
		closed <- struct{}{}
		return false
	})
	s := startYAML(t, fmt.Sprintf(`
listeners: [{name: in, address: "127.0.0.1:0", h2c: true}]
pools: [{name: p, backends: [{address: %s}]}]
`, rb.addr))
	c := xh2c()
	url := "http://" + s.Addr("in").String() + "/"
	for i, method := range []string{"GET", "GET", "POST", "GET", "POST"} {
		req, _ := http.NewRequest(method, url, nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != "ok" {
			t.Fatalf("%s %d after the backend closed the pooled connection: %d %q, want 200 ok", method, i, resp.StatusCode, b)
		}
		select {
		case <-closed:
		case <-time.After(5 * time.Second):
			t.Fatal("backend did not close")
		}
		time.Sleep(20 * time.Millisecond) // let the FIN reach the pooled connection (either way is right)
	}
}

// No response headers within timeouts.response is 504; a backend that closes after reading a
// POST gets it once (it may have acted on it: 502, no second backend), a GET is retried on the
// other backend.
func TestHTTP1BackendFailures(t *testing.T) {
	silent := newRawBackend(t, func(string, io.Writer) bool { time.Sleep(2 * time.Second); return false })
	var hits atomic.Int64
	drop := func(string, io.Writer) bool { hits.Add(1); return false }
	d1, d2 := newRawBackend(t, drop), newRawBackend(t, drop)
	s := startYAML(t, fmt.Sprintf(`
listeners:
  - {name: slow, address: "127.0.0.1:0", h2c: true}
  - {name: drop, address: "127.0.0.1:0", h2c: true}
routes:
  - {listener: slow, pool: slow}
  - {listener: drop, pool: drop}
pools:
  - {name: slow, timeouts: {response: 300ms}, backends: [{address: %s}]}
  - {name: drop, retries: {attempts: 2}, backends: [{address: %s}, {address: %s}]}
`, silent.addr, d1.addr, d2.addr))
	c := xh2c()
	do := func(method, url string) int {
		req, _ := http.NewRequest(method, url, nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := do("GET", "http://"+s.Addr("slow").String()+"/"); code != http.StatusGatewayTimeout {
		t.Errorf("silent backend: %d, want 504", code)
	}
	if code := do("POST", "http://"+s.Addr("drop").String()+"/"); code != http.StatusBadGateway || hits.Load() != 1 {
		t.Errorf("POST to a backend that closes: %d after %d hits, want 502 after 1", code, hits.Load())
	}
	hits.Store(0)
	if code := do("GET", "http://"+s.Addr("drop").String()+"/"); code != http.StatusBadGateway || hits.Load() != 2 {
		t.Errorf("GET to backends that close: %d after %d hits, want 502 after 2 (retried once)", code, hits.Load())
	}
}

// A reload that changes a pool's tls is followed by HTTP/2 streams to its HTTP/1.1 backends,
// although the HTTP/1 plane's connections keep the tls they were first built with: after
// the reload the backend's streams take http.Transport. Here a TLS backend answers a
// cleartext request with 400, which shows which way the request went.
func TestHTTP1BackendTLSFollowsReload(t *testing.T) {
	echo := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintf(w, "tls=%v", r.TLS != nil) })
	addr, ca := tlsH2Server(t, echo)
	file := filepath.Join(t.TempDir(), "ballast.yaml")
	write := func(tls string) {
		yaml := fmt.Sprintf(`
listeners: [{name: in, address: "127.0.0.1:0", h2c: true}]
pools: [{name: p, %s backends: [{address: %s}]}]
`, tls, addr)
		if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("tls: {ca: " + ca + ", server_name: localhost},")
	s := startYAMLFile(t, file)
	url := "http://" + s.Addr("in").String() + "/"
	get := func() (int, string) {
		resp, err := xh2c().Get(url)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(b)
	}
	if code, body := get(); code != 200 || body != "tls=true" {
		t.Fatalf("before the reload: %d %q, want 200 tls=true", code, body)
	}
	write("")
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	if code, _ := get(); code != http.StatusBadRequest {
		t.Errorf("after a reload without tls: %d, want the TLS backend's 400 to a cleartext request", code)
	}
}
