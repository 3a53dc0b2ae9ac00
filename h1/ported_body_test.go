//go:build linux

package h1

import (
	"ballast/config"
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// TestRequestBodyTimeout is issue 8 item 10: a request body trickling in holds a backend slot
// no longer than the body timeout (listener.idle_timeout), whatever its framing: every 64 KiB
// of it must arrive within the timeout, so a byte every 100 ms against a 1.5 s timeout is cut
// (408, connection closed, slot freed) although no single gap comes near the timeout, while
// an upload that moves 64 KiB per 100 ms may take longer than the timeout in all.
func TestRequestBodyTimeout(t *testing.T) {
	var complete atomic.Int64
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, err := io.Copy(io.Discard, r.Body)
		if err != nil {
			return
		}
		complete.Add(1)
		fmt.Fprintf(w, "%d", n)
	}))
	t.Cleanup(be.Close)

	// Longer than the second by which the fasthttp plane's old code moved the deadline on while
	// bytes came, which is how a trickle used to escape it; the trickles last four times as long.
	const bt = 1500 * time.Millisecond
	tests := []struct {
		name    string
		timeout time.Duration
		head    string // request head after the request line, without the blank line
		first   string // body bytes sent at once with the head
		piece   string // written every gap
		gap     time.Duration
		pieces  int  // at most; a trickle stops when the proxy answers
		held    bool // the request is forwarded (holds a slot) while its body trickles
		want    int  // status
	}{
		{"chunked trickle", bt, "Transfer-Encoding: chunked", "", "1\r\na\r\n", 100 * time.Millisecond, 60, true, 408},
		// The first 8 KiB sent at once (the fasthttp plane read them before its handler ran): a
		// body over 64 KiB streams, so the request holds a backend while the trickle goes on.
		{"large content-length trickle", bt, "Content-Length: 1000000", strings.Repeat("a", 8<<10), "a", 100 * time.Millisecond, 60, true, 408},
		{"small content-length trickle", bt, "Content-Length: 1000", "", "a", 100 * time.Millisecond, 60, false, 408},
		{"long upload that keeps moving", bt, "Content-Length: 1966080", "", strings.Repeat("u", 64<<10), 100 * time.Millisecond, 30, true, 200},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(testPool("b", "roundrobin", hostOf(be)))
			cfg.Listeners[0].IdleTimeout = dur(tc.timeout)
			tp := startProxy(t, cfg)
			before := complete.Load()
			c, err := net.Dial("tcp", tp.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(30 * time.Second))
			if _, err := io.WriteString(c, "POST /up HTTP/1.1\r\nHost: x\r\n"+tc.head+"\r\n\r\n"+tc.first); err != nil {
				t.Fatal(err)
			}
			type answer struct {
				status int
				body   string
				err    error
			}
			answered := make(chan answer, 1)
			go func() {
				br := bufio.NewReader(c)
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					answered <- answer{err: err}
					return
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				answered <- answer{status: resp.StatusCode, body: string(b)}
			}()
			var got answer
			sent := 0
		trickle:
			for sent < tc.pieces {
				select {
				case got = <-answered:
					break trickle
				default:
				}
				if _, err := io.WriteString(c, tc.piece); err != nil {
					break // the proxy closed the connection; its answer is read below
				}
				sent++
				if sent == 2 && tc.held {
					waitFor(t, "the request to hold a backend slot", func() bool { return inflight(tp.pools["b"]) == 1 })
				}
				time.Sleep(tc.gap) // the client's pace, not a wait for the proxy
			}
			if got == (answer{}) {
				select {
				case got = <-answered:
				case <-time.After(10 * time.Second):
					t.Fatalf("no answer after %d pieces: the body was never cut", sent)
				}
			}
			if tc.want == 408 && sent >= tc.pieces {
				t.Fatalf("the whole trickle (%d pieces over %v) was taken in; answer %d %q", sent,
					time.Duration(sent)*tc.gap, got.status, got.body)
			}
			if got.err != nil {
				t.Fatalf("after %d pieces the client got no answer: %v", sent, got.err)
			}
			if got.status != tc.want {
				t.Fatalf("after %d pieces: %d %q, want %d", sent, got.status, got.body, tc.want)
			}
			if tc.want == 408 {
				// The connection is closed after the 408: the rest of the body is unread.
				_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
				if n, err := c.Read(make([]byte, 1)); err == nil {
					t.Fatalf("connection still open after 408 (read %d bytes)", n)
				}
				if n := complete.Load() - before; n != 0 {
					t.Fatalf("the backend received %d complete bodies, want none", n)
				}
			}
			waitFor(t, "in-flight back to 0", func() bool { return inflight(tp.pools["b"]) == 0 })
		})
	}
}

// refusingBackend answers POST /upload with 413 and Connection: close as soon as it has the
// request headers, without reading the body; on /crash it closes the connection without
// answering at that point; anything else gets 200 "next".
func refusingBackend(t *testing.T) (addr string, refused *atomic.Int64) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused = new(atomic.Int64)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(20 * time.Second))
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					if req.URL.Path == "/crash" {
						refused.Add(1)
						return
					}
					if req.URL.Path == "/upload" {
						refused.Add(1)
						_, _ = io.WriteString(c, "HTTP/1.1 413 Content Too Large\r\nContent-Length: 9\r\nConnection: close\r\n\r\ntoo large")
						return
					}
					_, _ = io.Copy(io.Discard, req.Body)
					_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nnext")
				}
			}()
		}
	}()
	return ln.Addr().String(), refused
}

// TestEarlyResponseToUpload is issue 8 item 9: a backend that refuses a streamed upload after
// its headers (413, Connection: close) has its answer passed to the client, not a 502. If the
// client is still holding back most of the body, the client connection is closed after the
// 413 (the body cannot be drained); if the whole body is already there, it is drained and a
// request pipelined behind it is answered.
func TestEarlyResponseToUpload(t *testing.T) {
	t.Run("plain", func(t *testing.T) { earlyResponseToUpload(t, false) })
	t.Run("tls", func(t *testing.T) { earlyResponseToUpload(t, true) }) // the client's records on the shard
}

func earlyResponseToUpload(t *testing.T, overTLS bool) {
	addr, refused := refusingBackend(t)
	tests := []struct {
		name       string
		path       string
		length     int // Content-Length
		send       int // body bytes the client sends before it waits for the answer
		pipelined  bool
		wantStatus int
		wantBody   string
	}{
		// The first 8 KiB come with the head (the fasthttp plane read them before its handler ran).
		{"client waits with most of a large body unsent", "/upload", 10 << 20, 8 << 10, false, 413, "too large"},
		{"client keeps sending a large body", "/upload", 10 << 20, 10 << 20, false, 413, "too large"},
		{"whole body sent, request pipelined behind it", "/upload", 70000, 70000, true, 413, "too large"},
		{"backend dies after the headers, client waits", "/crash", 10 << 20, 8 << 10, false, 502, "ballast: backend closed the connection before responding\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(testPool("u", "roundrobin", addr))
			cfg.Listeners[0].IdleTimeout = dur(5 * time.Second) // a wait for the body (a failure) ends within the test's deadlines
			var tp *testProxy
			var c net.Conn
			if overTLS {
				tp = startTLSEngine(t, cfg)
				c = dialTLS(t, tp.addr, "http/1.1")
			} else {
				tp = startProxy(t, cfg)
				var err error
				if c, err = net.Dial("tcp", tp.addr); err != nil {
					t.Fatal(err)
				}
			}
			before := refused.Load()
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(20 * time.Second))
			msg := fmt.Sprintf("POST "+tc.path+" HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", tc.length, strings.Repeat("b", tc.send))
			if tc.pipelined {
				msg += "GET /after HTTP/1.1\r\nHost: x\r\n\r\n"
			}
			go func() { _, _ = io.WriteString(c, msg) }() // may block on a full window; the reads below drain nothing of it
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("no response: %v", err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.wantStatus || string(body) != tc.wantBody {
				t.Fatalf("got %d %q, want %d %q", resp.StatusCode, body, tc.wantStatus, tc.wantBody)
			}
			if n := refused.Load() - before; n != 1 {
				t.Fatalf("the backend refused %d uploads, want 1", n)
			}
			if tc.pipelined {
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatalf("pipelined request not answered: %v", err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || string(body) != "next" {
					t.Fatalf("pipelined request: %d %q", resp.StatusCode, body)
				}
			} else {
				if !resp.Close {
					t.Errorf("%d without Connection: close although the body stays unread", resp.StatusCode)
				}
				if n, err := br.ReadByte(); err == nil {
					t.Fatalf("connection still open after the %d (read %q)", resp.StatusCode, n)
				}
			}
			waitFor(t, "in-flight back to 0", func() bool { return inflight(tp.pools["u"]) == 0 })
		})
	}
}

// TestClientGoneCancelsTheAttempt: a client that closes its connection while the backend
// thinks is noticed within watchSlice: the backend connection is closed, the backend's slot
// is free again at once (not after the backend's answer or the response timeout) and the
// access log says 499 with termination CH.
func TestClientGoneCancelsTheAttempt(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	closed := make(chan time.Time, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, 4096)
		_, _ = c.Read(buf) // the request; no answer
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		_, _ = c.Read(buf) // returns when the proxy closes the connection
		closed <- time.Now()
	}()
	cfg := testConfig(testPool("p", "roundrobin", ln.Addr().String()))
	cfg.Logging.Access, cfg.Logging.AccessFormat = true, config.AccessJSON
	cfg.Logging.AccessFile = filepath.Join(t.TempDir(), "access.log")
	tp := startProxy(t, cfg)
	c, err := net.Dial("tcp", tp.addr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("GET /slow HTTP/1.1\r\nHost: h\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the request in flight", func() bool { return inflight(tp.pools["p"]) == 1 })
	left := time.Now()
	c.Close()
	select {
	case at := <-closed:
		if d := at.Sub(left); d > 10*time.Second { // a bound, well below the pool's 20 s response timeout
			t.Errorf("the backend connection closed %v after the client left", d)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the backend connection stayed open after the client left")
	}
	waitFor(t, "the slot freed", func() bool { return inflight(tp.pools["p"]) == 0 })
	line := readLog(t, cfg.Logging.AccessFile, 1)[0]
	for _, want := range []string{`"status":499`, `"termination":"CH"`, `"uri":"/slow"`} {
		if !strings.Contains(line, want) {
			t.Errorf("access line %s lacks %s", line, want)
		}
	}
	if data, _ := os.ReadFile(cfg.Logging.AccessFile); strings.Count(string(data), "\n") != 1 {
		t.Errorf("%d access lines, want 1", strings.Count(string(data), "\n"))
	}
}

// TestHeadAcrossTheWatchSlice: a backend that sends the first line of its response at once and
// the rest of the head 2.5 watch slices later (past the fasthttp plane's per-slice wait; the
// engine keeps the partial head in the connection's buffer) is still answered within
// timeouts.response: the head is read again.
func TestHeadAcrossTheWatchSlice(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 4096)
				if _, err := c.Read(buf); err != nil {
					return
				}
				_, _ = c.Write([]byte("HTTP/1.1 200 OK\r\nX-Part: 1\r\n"))
				time.Sleep(time.Duration(2*watchSlice + watchSlice/2)) // past the first wait's deadline, at most 2 slices
				_, _ = c.Write([]byte("Content-Length: 4\r\n\r\nslow"))
			}()
		}
	}()
	tp := startProxy(t, testConfig(testPool("p", "roundrobin", ln.Addr().String())))
	resp, body := rawDo(t, tp.addr, "GET / HTTP/1.1\r\nHost: h\r\n\r\n")
	if resp.StatusCode != 200 || body != "slow" || resp.Header.Get("X-Part") != "1" {
		t.Fatalf("%d %q %v, want 200 slow", resp.StatusCode, body, resp.Header)
	}
}

func TestExpectContinue(t *testing.T) {
	be := bigBackend(t)
	tp := startProxy(t, testConfig(testPool("big", "roundrobin", be)))
	const size = 200000
	req, _ := http.NewRequest("POST", tp.url("/up"), &pattern{n: size})
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

// TestRequestTrailers sends a chunked body with a trailer; the backend must see both.
func TestRequestTrailers(t *testing.T) {
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%d %s", len(b), r.Trailer.Get("X-Sum"))
	}))
	defer be.Close()
	tp := startProxy(t, testConfig(testPool("p", "roundrobin", hostOf(be))))
	for _, size := range []int64{10, 200000} {
		req, _ := http.NewRequest("POST", tp.url("/"), io.NopCloser(&pattern{n: size}))
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

// TestTunnelHalfCloseAndEarlyBytes: after a 101 the tunnel passes on the bytes the backend sent
// right behind its answer, then copies both ways with half-close: the client's FIN reaches the
// backend, which still answers, and the client reads that answer before the end of stream.
func TestTunnelHalfCloseAndEarlyBytes(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	got := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		// The 101 and the first bytes of the new protocol in one write.
		_, _ = io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: raw\r\nConnection: Upgrade\r\n\r\nearly;")
		rest, _ := io.ReadAll(br) // up to the client's FIN, passed on as a half-close
		got <- string(rest)
		_, _ = io.WriteString(c, "echo:"+string(rest)+";bye")
	}()
	tp := startProxy(t, testConfig(testPool("p", "roundrobin", ln.Addr().String())))
	c, err := net.Dial("tcp", tp.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "GET /chat HTTP/1.1\r\nHost: x\r\nUpgrade: raw\r\nConnection: Upgrade\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 101 {
		t.Fatalf("%v %v", resp, err)
	}
	if _, err := io.WriteString(c, "hello"); err != nil {
		t.Fatal(err)
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	rest, err := io.ReadAll(br)
	if err != nil {
		t.Fatalf("reading after the half-close: %v", err)
	}
	if want := "early;echo:hello;bye"; string(rest) != want {
		t.Fatalf("client read %q, want %q", rest, want)
	}
	select {
	case s := <-got:
		if s != "hello" {
			t.Fatalf("backend read %q, want exactly hello", s)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("backend never saw the client's end of stream")
	}
}

// TestTunnelBackendFinReachesClient: the backend ends its direction first; the client sees the
// end of stream at once (a half-close through the hijacked connection) and can still send.
func TestTunnelBackendFinReachesClient(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	got := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		_, _ = io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: raw\r\nConnection: Upgrade\r\n\r\nserver-done")
		_ = c.(*net.TCPConn).CloseWrite()
		rest, _ := io.ReadAll(br)
		got <- string(rest)
	}()
	tp := startProxy(t, testConfig(testPool("p", "roundrobin", ln.Addr().String())))
	c, err := net.Dial("tcp", tp.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "GET /chat HTTP/1.1\r\nHost: x\r\nUpgrade: raw\r\nConnection: Upgrade\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 101 {
		t.Fatalf("%v %v", resp, err)
	}
	rest, err := io.ReadAll(br) // ends at the backend's FIN, while the client's side is open
	if err != nil || string(rest) != "server-done" {
		t.Fatalf("client read %q, %v", rest, err)
	}
	if _, err := io.WriteString(c, "client-late"); err != nil {
		t.Fatal(err)
	}
	_ = c.(*net.TCPConn).CloseWrite()
	select {
	case s := <-got:
		if s != "client-late" {
			t.Fatalf("backend read %q after its own FIN, want client-late", s)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("backend never saw the client's bytes and end of stream")
	}
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
