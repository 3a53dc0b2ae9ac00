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

// TestTrickledResponseStreams is issue 8 item 6: a response body the backend sends piece by
// piece reaches the client piece by piece. The test is ordered by events, not timed: the
// backend sends the next piece only once the client has reported the previous one (or after
// a bounded wait that fails the test), so a proxy that holds bytes back until the body is
// complete cannot pass.
func TestTrickledResponseStreams(t *testing.T) {
	tests := []struct {
		name   string
		header string   // response head up to the blank line
		pieces []string // what the backend writes, one at a time
		want   []string // what the client must have received after each piece
	}{
		{"small content-length", "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n",
			[]string{"a", "b", "c", "d"}, []string{"a", "b", "c", "d"}},
		{"large content-length", "HTTP/1.1 200 OK\r\nContent-Length: 20000\r\n",
			[]string{"head", strings.Repeat("x", 19996)}, []string{"head", strings.Repeat("x", 19996)}},
		{"chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n",
			[]string{"1\r\na\r\n", "1\r\nb\r\n", "0\r\n\r\n"}, []string{"a", "b", ""}},
		{"until close", "HTTP/1.1 200 OK\r\nConnection: close\r\n",
			[]string{"a", "b", "c"}, []string{"a", "b", "c"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := make(chan struct{}, len(tc.pieces))
			late := make(chan int, len(tc.pieces))
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = ln.Close() })
			go func() {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(20 * time.Second))
				if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
					return
				}
				_, _ = io.WriteString(c, tc.header+"\r\n")
				for i, p := range tc.pieces {
					if _, err := io.WriteString(c, p); err != nil {
						return
					}
					if i == len(tc.pieces)-1 {
						break
					}
					select {
					case <-got:
					case <-time.After(5 * time.Second):
						late <- i // the client still lacks piece i: send on so the test ends
					}
				}
			}()
			tp := startProxy(t, testConfig(testPool("s", "roundrobin", ln.Addr().String())))
			c, err := net.Dial("tcp", tp.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(30 * time.Second))
			if _, err := io.WriteString(c, "GET /events HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			for i, w := range tc.want {
				b := make([]byte, len(w))
				if _, err := io.ReadFull(resp.Body, b); err != nil || string(b) != w {
					t.Fatalf("piece %d: %q, %v; want %q", i, b, err, w)
				}
				select {
				case i := <-late:
					t.Fatalf("the client received piece %d only after the backend sent the next one", i)
				default:
				}
				got <- struct{}{}
			}
			if rest, err := io.ReadAll(resp.Body); err != nil || len(rest) != 0 {
				t.Fatalf("after the body: %q, %v", rest, err)
			}
			waitFor(t, "in-flight back to 0", func() bool { return inflight(tp.pools["s"]) == 0 })
		})
	}
}
