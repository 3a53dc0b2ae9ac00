package httpproxy

import (
	"bufio"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// patternReader yields n deterministic bytes without holding them.
type patternReader struct{ off, n int64 }

func (r *patternReader) Read(p []byte) (int, error) {
	if r.off >= r.n {
		return 0, io.EOF
	}
	k := int64(len(p))
	if rem := r.n - r.off; k > rem {
		k = rem
	}
	for i := int64(0); i < k; i++ {
		p[i] = byte((r.off + i) * 7 % 251)
	}
	r.off += k
	return int(k), nil
}

func patternSum(n int64) [32]byte {
	h := sha256.New()
	_, _ = io.Copy(h, &patternReader{n: n})
	var s [32]byte
	copy(s[:], h.Sum(nil))
	return s
}

// bigBackend hashes uploads (/up) and serves n pattern bytes (/down/n), streaming both ways.
func bigBackend(t testing.TB) *httptest.Server {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/up":
			h := sha256.New()
			n, err := io.Copy(h, r.Body)
			if err != nil {
				http.Error(w, err.Error(), 500)
				return
			}
			fmt.Fprintf(w, "%d %x", n, h.Sum(nil))
		case strings.HasPrefix(r.URL.Path, "/down/"):
			n, _ := strconv.ParseInt(strings.TrimPrefix(r.URL.Path, "/down/"), 10, 64)
			if r.URL.Query().Get("chunked") == "" {
				w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
			}
			_, _ = io.Copy(w, &patternReader{n: n})
		}
	}))
	t.Cleanup(s.Close)
	return s
}

// TestLargeBodies moves 64 MiB up and down through the proxy and checks that the whole
// process (client, proxy and backend together) allocated far less than one body.
func TestLargeBodies(t *testing.T) {
	const size = 64 << 20
	be := bigBackend(t)
	tp := startProxy(t, testConfig(testPool("big", "roundrobin", hostOf(be))))
	c := testClient()
	want := patternSum(size)
	tests := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"upload content-length", func(t *testing.T) {
			req, _ := http.NewRequest("POST", tp.url("/up"), &patternReader{n: size})
			req.ContentLength = size
			checkUpload(t, c, req, size, want)
		}},
		{"upload chunked", func(t *testing.T) {
			req, _ := http.NewRequest("POST", tp.url("/up"), io.NopCloser(&patternReader{n: size}))
			req.ContentLength = -1
			checkUpload(t, c, req, size, want)
		}},
		{"download content-length", func(t *testing.T) { checkDownload(t, c, tp.url(fmt.Sprintf("/down/%d", size)), want) }},
		{"download chunked", func(t *testing.T) { checkDownload(t, c, tp.url(fmt.Sprintf("/down/%d?chunked=1", size)), want) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			tc.run(t)
			runtime.ReadMemStats(&after)
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > size/2 {
				t.Errorf("allocated %d MiB moving a %d MiB body: something buffers it", alloc>>20, size>>20)
			}
		})
	}
	waitFor(t, "in-flight back to 0", func() bool { return inflight(tp.pools["big"]) == 0 })
}

func checkUpload(t *testing.T, c *http.Client, req *http.Request, size int64, want [32]byte) {
	t.Helper()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if exp := fmt.Sprintf("%d %x", size, want); string(b) != exp {
		t.Fatalf("status %d, backend saw %q, want %q", resp.StatusCode, b, exp)
	}
}

func checkDownload(t *testing.T, c *http.Client, url string, want [32]byte) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	h := sha256.New()
	if _, err := io.Copy(h, resp.Body); err != nil {
		t.Fatal(err)
	}
	var got [32]byte
	copy(got[:], h.Sum(nil))
	if got != want {
		t.Fatalf("downloaded body differs")
	}
}

func TestExpectContinue(t *testing.T) {
	be := bigBackend(t)
	tp := startProxy(t, testConfig(testPool("big", "roundrobin", hostOf(be))))
	const size = 200000
	req, _ := http.NewRequest("POST", tp.url("/up"), &patternReader{n: size})
	req.ContentLength = size
	req.Header.Set("Expect", "100-continue")
	c := &http.Client{Transport: &http.Transport{ExpectContinueTimeout: 10 * time.Second}}
	checkUpload(t, c, req, size, patternSum(size))
}

func TestWebSocketEcho(t *testing.T) {
	hb := startHTTPBin(t)
	tp := startProxy(t, testConfig(testPool("bin", "roundrobin", hostOf(hb))))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, resp, err := websocket.Dial(ctx, "ws://"+tp.addr+"/websocket/echo", nil)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	conn.SetReadLimit(1 << 20)
	if resp.Header.Get("X-Ballast-Backend") == "" {
		t.Errorf("101 without X-Ballast-Backend")
	}
	waitFor(t, "tunnel counted in flight", func() bool { return inflight(tp.pools["bin"]) == 1 })
	for i, msg := range []string{"hello", strings.Repeat("x", 70000), "bye"} {
		if err := conn.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		_, got, err := conn.Read(ctx)
		if err != nil {
			t.Fatalf("read %d: %v", i, err)
		}
		if string(got) != msg {
			t.Fatalf("echo %d: got %d bytes, want %d", i, len(got), len(msg))
		}
	}
	_ = conn.Close(websocket.StatusNormalClosure, "")
	waitFor(t, "tunnel released", func() bool { return inflight(tp.pools["bin"]) == 0 })
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

// TestRequestTrailers sends a chunked body with a trailer; the backend must see both.
func TestRequestTrailers(t *testing.T) {
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%d %s", len(b), r.Trailer.Get("X-Sum"))
	}))
	defer be.Close()
	tp := startProxy(t, testConfig(testPool("p", "roundrobin", hostOf(be))))
	for _, size := range []int64{10, 200000} {
		req, _ := http.NewRequest("POST", tp.url("/"), io.NopCloser(&patternReader{n: size}))
		req.ContentLength = -1
		req.Trailer = http.Header{"X-Sum": {"abc"}}
		resp, err := testClient().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if want := fmt.Sprintf("%d abc", size); string(b) != want {
			t.Errorf("size %d: backend saw %q, want %q", size, b, want)
		}
	}
}
