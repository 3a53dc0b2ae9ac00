//go:build linux

package h1

import (
	"bytes"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"ballast/internal/h1conformance"
)

// scriptBackend answers each request it frames (strictly) with the next of its scripted
// responses, raw bytes; a response ending in "<close>" is written without those bytes and the
// connection closed after it. It counts connections and records the requests.
type scriptBackend struct {
	ln    net.Listener
	mu    sync.Mutex
	resp  []string
	next  int
	reqs  []h1conformance.Request
	conns atomic.Int64
}

func newScriptBackend(t testing.TB, resp ...string) *scriptBackend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sb := &scriptBackend{ln: ln, resp: resp}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			sb.conns.Add(1)
			go sb.serve(c)
		}
	}()
	t.Cleanup(func() { _ = ln.Close() })
	return sb
}

func (sb *scriptBackend) addr() string { return sb.ln.Addr().String() }

func (sb *scriptBackend) serve(c net.Conn) {
	defer c.Close()
	var buf []byte
	p := make([]byte, 64<<10)
	for {
		n, err := c.Read(p)
		buf = append(buf, p[:n]...)
		for len(buf) > 0 {
			r, m, ferr := h1conformance.ReadStrict(buf, false)
			early := false
			sb.mu.Lock()
			if sb.next < len(sb.resp) && strings.HasPrefix(sb.resp[sb.next], "<early>") {
				if i := bytes.Index(buf, []byte("\r\n\r\n")); i >= 0 { // answer after the head
					r, m, ferr, early = h1conformance.Request{Raw: buf[:i+4]}, len(buf), nil, true
				}
			}
			sb.mu.Unlock()
			if ferr != nil {
				break
			}
			r.Raw = append([]byte(nil), r.Raw...)
			r.Body = append([]byte(nil), r.Body...)
			buf = buf[m:]
			sb.mu.Lock()
			sb.reqs = append(sb.reqs, r)
			resp := "HTTP/1.1 500 Script Ended\r\nContent-Length: 0\r\n\r\n"
			if sb.next < len(sb.resp) {
				resp = sb.resp[sb.next]
				sb.next++
			}
			sb.mu.Unlock()
			closing := strings.HasSuffix(resp, "<close>") || early
			resp = strings.TrimSuffix(strings.TrimPrefix(resp, "<early>"), "<close>")
			if _, err := io.WriteString(c, resp); err != nil || closing {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (sb *scriptBackend) requests() []h1conformance.Request {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return append([]h1conformance.Request(nil), sb.reqs...)
}

// framingRows: what the backend answers, what the client asks, and what the client must
// read (exactly, up to the engine's close of the connection after the client's half-close).
var framingRows = []struct {
	name   string
	resp   []string // the backend's answers, in order
	req    string
	want   string // the client's bytes; "..." stands for any bytes in between
	conns  int64  // backend connections expected (0: don't care)
	ncheck func(t *testing.T, reqs []h1conformance.Request)
}{
	{name: "content-length passed on",
		resp: []string{"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A: 1\r\n\r\nhello"},
		req:  "GET / HTTP/1.1\r\nHost: a\r\n\r\n",
		want: "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A: 1\r\n\r\nhello"},
	{name: "chunked with trailers, re-chunked",
		resp: []string{"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n5;ext=1\r\nhello\r\n1\r\n!\r\n0\r\nX-Sum: 6\r\n\r\n"},
		req:  "GET / HTTP/1.1\r\nHost: a\r\n\r\n",
		want: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n5\r\nhello\r\n1\r\n!\r\n0\r\nX-Sum: 6\r\n\r\n"},
	{name: "chunked to an HTTP/1.0 client: the data, then the close",
		resp: []string{"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"},
		req:  "GET / HTTP/1.0\r\nHost: a\r\nConnection: keep-alive\r\n\r\n",
		want: "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nhello"},
	{name: "close-delimited to HTTP/1.1: chunked, the connection kept",
		resp:  []string{"HTTP/1.1 200 OK\r\n\r\nuntil the end<close>", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"},
		req:   "GET /1 HTTP/1.1\r\nHost: a\r\n\r\nGET /2 HTTP/1.1\r\nHost: a\r\n\r\n",
		want:  "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nd\r\nuntil the end\r\n0\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
		conns: 2},
	{name: "close-delimited to HTTP/1.0",
		resp: []string{"HTTP/1.0 200 OK\r\n\r\nold style<close>"},
		req:  "GET / HTTP/1.0\r\n\r\n",
		want: "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nold style"},
	{name: "HEAD: length but no body",
		resp: []string{"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"},
		req:  "HEAD / HTTP/1.1\r\nHost: a\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n",
		want: "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", conns: 1},
	{name: "204 and 304 have no body",
		resp: []string{"HTTP/1.1 204 No Content\r\n\r\n", "HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"},
		req:  "GET /1 HTTP/1.1\r\nHost: a\r\n\r\nGET /2 HTTP/1.1\r\nHost: a\r\n\r\nGET /3 HTTP/1.1\r\nHost: a\r\n\r\n",
		want: "HTTP/1.1 204 No Content\r\n\r\nHTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", conns: 1},
	{name: "interim responses skipped",
		resp: []string{"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"},
		req:  "GET / HTTP/1.1\r\nHost: a\r\n\r\n",
		want: "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"},
	{name: "hop-by-hop and Connection-named fields stripped",
		resp: []string{"HTTP/1.1 200 OK\r\nConnection: keep-alive, X-Private\r\nKeep-Alive: timeout=5\r\nX-Private: secret\r\nX-Public: 1\r\nContent-Length: 2\r\n\r\nok"},
		req:  "GET / HTTP/1.1\r\nHost: a\r\n\r\n",
		want: "HTTP/1.1 200 OK\r\nX-Public: 1\r\nContent-Length: 2\r\n\r\nok"},
	{name: "backend Connection: close is not reused",
		resp: []string{"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1\r\n\r\na<close>", "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nb"},
		req:  "GET /1 HTTP/1.1\r\nHost: a\r\n\r\nGET /2 HTTP/1.1\r\nHost: a\r\n\r\n",
		want: "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\naHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nb", conns: 2},
	{name: "Content-Length and chunked: chunked wins, connection dropped after",
		resp: []string{"HTTP/1.1 200 OK\r\nContent-Length: 100\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n", "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nb"},
		req:  "GET /1 HTTP/1.1\r\nHost: a\r\n\r\nGET /2 HTTP/1.1\r\nHost: a\r\n\r\n",
		want: "HTTP/1.1 200 OK\r\nContent-Length: 100\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nb", conns: 2},
	{name: "malformed chunk size from the backend cuts the client off",
		resp: []string{"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\nzz\r\nmore"},
		req:  "GET /1 HTTP/1.1\r\nHost: a\r\n\r\nGET /2 HTTP/1.1\r\nHost: a\r\n\r\n",
		want: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n"},
	{name: "malformed response head: 502",
		resp: []string{"HTTP/1.1 200 OK\r\nBad Header\r\n\r\n"},
		req:  "GET / HTTP/1.1\r\nHost: a\r\n\r\n",
		want: "HTTP/1.1 502 Bad Gateway\r\n...ballast: bad response from backend\n"},
	{name: "Expect: 100-continue answered by the engine, not forwarded",
		resp: []string{"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"},
		req:  "POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n",
		want: "HTTP/1.1 100 Continue\r\n\r\n",
		ncheck: func(t *testing.T, reqs []h1conformance.Request) {
			if len(reqs) != 0 {
				t.Errorf("forwarded %d requests before the body came", len(reqs))
			}
		}},
	// (More than maxEarlyDrain left of the body: with less, the rest is drained instead,
	// TestEarlyAnswerDrain.)
	{name: "an early answer closes the connection",
		resp: []string{"<early>HTTP/1.1 413 Payload Too Large\r\nContent-Length: 3\r\n\r\nbig"},
		req:  "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5000000\r\n\r\n" + strings.Repeat("x", 100000),
		want: "HTTP/1.1 413 Payload Too Large\r\nContent-Length: 3\r\nConnection: close\r\n\r\nbig"},
	{name: "HTTP/1.0 keep-alive kept and said",
		resp: []string{"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\na", "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nb"},
		req:  "GET /1 HTTP/1.0\r\nHost: a\r\nConnection: keep-alive\r\n\r\nGET /2 HTTP/1.0\r\nHost: a\r\n\r\n",
		want: "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nConnection: keep-alive\r\n\r\naHTTP/1.1 200 OK\r\nContent-Length: 1\r\nConnection: close\r\n\r\nb"},
	{name: "chunked request re-chunked, trailers kept, pipelined request after it",
		resp: []string{"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\na", "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nb"},
		req:  "POST /1 HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n2\r\nde\r\n0\r\nX-T: 1\r\n\r\nGET /2 HTTP/1.1\r\nHost: a\r\n\r\n",
		want: "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\naHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nb",
		ncheck: func(t *testing.T, reqs []h1conformance.Request) {
			if len(reqs) != 2 || string(reqs[0].Body) != "abcde" || !bytes.Contains(reqs[0].Raw, []byte("0\r\nX-T: 1\r\n\r\n")) || reqs[1].Target != "/2" {
				t.Errorf("backend got %d requests: %q", len(reqs), reqsRaw(reqs))
			}
		}},
	{name: "bad chunk size in a request: 400, nothing after it forwarded",
		resp: []string{"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\na"},
		req:  "POST /1 HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\nzz\r\nGET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n",
		want: "HTTP/1.1 400 Bad Request\r\n...",
		ncheck: func(t *testing.T, reqs []h1conformance.Request) {
			for _, r := range reqs {
				if r.Target == "/smuggled" {
					t.Errorf("the request hidden after a bad chunk was forwarded")
				}
			}
		}},
	{name: "chunk data without its CRLF: 400",
		resp: []string{"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\na"},
		req:  "POST /1 HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcX\r\n0\r\n\r\n",
		want: "HTTP/1.1 400 Bad Request\r\n..."},
}

func reqsRaw(reqs []h1conformance.Request) []string {
	var out []string
	for _, r := range reqs {
		out = append(out, string(r.Raw))
	}
	return out
}

// matches compares got with want, where "..." in want stands for any bytes.
func matches(got, want string) bool {
	parts := strings.Split(want, "...")
	if !strings.HasPrefix(got, parts[0]) {
		return false
	}
	got = got[len(parts[0]):]
	for _, p := range parts[1:] {
		i := strings.Index(got, p)
		if i < 0 {
			return false
		}
		got = got[i+len(p):]
	}
	return len(parts) > 1 && parts[len(parts)-1] == "" || got == ""
}

// TestResponseFraming drives each row through a listener to a scripted backend and checks
// every byte the client reads.
func TestResponseFraming(t *testing.T) {
	for _, tc := range framingRows {
		t.Run(tc.name, func(t *testing.T) {
			sb := newScriptBackend(t, tc.resp...)
			cfg := testConfig(testPool("p", "roundrobin", sb.addr()))
			cfg.Listeners[0].ExposeBackend = false
			cfg.Pools[0].Retries.Attempts = 1
			te := startEngine(t, cfg)
			var out []byte
			if strings.Contains(tc.req, "100-continue") || strings.HasPrefix(tc.resp[0], "<early>") {
				out = exchangeNoClose(t, te.addr, []byte(tc.req), len(tc.want))
			} else {
				out = h1conformance.Exchange(t, te.addr, []byte(tc.req))
			}
			if !matches(string(out), tc.want) {
				t.Errorf("client read:\n%q\nwant:\n%q", out, tc.want)
			}
			if tc.conns > 0 && sb.conns.Load() != tc.conns {
				t.Errorf("backend connections %d, want %d", sb.conns.Load(), tc.conns)
			}
			if tc.ncheck != nil {
				tc.ncheck(t, sb.requests())
			}
		})
	}
}

// exchangeNoClose writes req and reads until n bytes came (or a second passed), without
// half-closing.
func exchangeNoClose(t *testing.T, addr string, req []byte, n int) []byte {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(req); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(time.Second))
	out := make([]byte, 0, n)
	p := make([]byte, 4096)
	for len(out) < n {
		k, err := c.Read(p)
		out = append(out, p[:k]...)
		if err != nil {
			break
		}
	}
	return out
}
