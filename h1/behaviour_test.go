//go:build linux

package h1

import (
	"ballast/internal/refused"
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"ballast/config"
	"ballast/internal/h1conformance"
	"ballast/internal/testcert"
	"ballast/upstream"
)

// pattern is a reader of n deterministic bytes.
type pattern struct{ n, off int64 }

func (p *pattern) Read(b []byte) (int, error) {
	if p.off >= p.n {
		return 0, io.EOF
	}
	k := int(min(int64(len(b)), p.n-p.off))
	for i := range k {
		b[i] = byte((p.off + int64(i)) * 31 >> 3)
	}
	p.off += int64(k)
	return k, nil
}

func patternSum(n int64) [32]byte {
	h := sha256.New()
	_, _ = io.Copy(h, &pattern{n: n})
	var s [32]byte
	copy(s[:], h.Sum(nil))
	return s
}

const big = 64 << 20

// bigBackend serves GET /down (64 MiB, Content-Length or chunked with ?chunked) and
// POST /up (answers the body's size and SHA-256).
func bigBackend(t testing.TB) string { return httpBackend(t, bigHandler) }

// bigHandler is bigBackend's handler.
func bigHandler(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/down":
		if r.URL.Query().Get("chunked") == "" {
			w.Header().Set("Content-Length", strconv.Itoa(big))
		}
		_, _ = io.Copy(w, &pattern{n: big})
	case "/up":
		h := sha256.New()
		n, err := io.Copy(h, r.Body)
		if err != nil {
			w.WriteHeader(500)
			return
		}
		fmt.Fprintf(w, "%d %x", n, h.Sum(nil))
	}
}

// Test64MiBBothWays moves 64 MiB each way, with a length and chunked, and checks every byte,
// over plain TCP and over TLS (records on the shard, ciphertext kept when the client's socket
// is full).
func Test64MiBBothWays(t *testing.T) {
	for _, overTLS := range []bool{false, true} {
		name := "plain"
		if overTLS {
			name = "tls"
		}
		t.Run(name, func(t *testing.T) {
			cfg := testConfig(testPool("p", "roundrobin", bigBackend(t)))
			var te *testEngine
			if overTLS {
				te = startTLSEngine(t, cfg)
			} else {
				te = startEngine(t, cfg)
			}
			test64MiBBothWays(t, te)
		})
	}
}

func test64MiBBothWays(t *testing.T, te *testEngine) {
	c := te.client()
	want := patternSum(big)
	for _, q := range []string{"", "?chunked=1"} {
		resp, err := c.Get(te.url("/down" + q))
		if err != nil {
			t.Fatal(err)
		}
		h := sha256.New()
		n, err := io.Copy(h, resp.Body)
		resp.Body.Close()
		if err != nil || n != big || [32]byte(h.Sum(nil)) != want {
			t.Fatalf("download%s: %d bytes, %v, sum match %v", q, n, err, [32]byte(h.Sum(nil)) == want)
		}
		if q != "" && len(resp.TransferEncoding) == 0 {
			t.Errorf("a chunked download reached the client with %v", resp.TransferEncoding)
		}
	}
	for _, chunked := range []bool{false, true} {
		var body io.Reader = &pattern{n: big}
		if chunked {
			body = io.MultiReader(body) // hides the length: net/http sends it chunked
		}
		req, _ := http.NewRequest("POST", te.url("/up"), body)
		if !chunked {
			req.ContentLength = big
		}
		resp, b := doReq(t, c, req)
		if resp.StatusCode != 200 || string(b) != fmt.Sprintf("%d %x", big, want) {
			t.Fatalf("upload (chunked %v): %d %q", chunked, resp.StatusCode, b)
		}
	}
}

func doReq(t testing.TB, c *http.Client, req *http.Request) (*http.Response, []byte) {
	t.Helper()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// TestSlowReaderStopsTheBackend: a client that reads nothing makes the engine stop reading
// the backend (which then blocks in its writes) instead of buffering the response; the
// engine's heap stays flat; the transfer completes once the client reads.
func TestSlowReaderStopsTheBackend(t *testing.T) {
	for _, overTLS := range []bool{false, true} {
		name := "plain"
		if overTLS {
			name = "tls"
		}
		t.Run(name, func(t *testing.T) { testSlowReaderStopsTheBackend(t, overTLS) })
	}
}

func testSlowReaderStopsTheBackend(t *testing.T, overTLS bool) {
	var written atomic.Int64
	addr := httpBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(big))
		buf := make([]byte, 64<<10)
		for sent := 0; sent < big; sent += len(buf) {
			if _, err := w.Write(buf); err != nil {
				return
			}
			written.Add(int64(len(buf)))
		}
	})
	cfg := testConfig(testPool("p", "roundrobin", addr))
	var te *testEngine
	if overTLS {
		te = startTLSEngine(t, cfg)
	} else {
		te = startEngine(t, cfg)
	}
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	raw, err := net.Dial("tcp", te.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	_ = raw.(*net.TCPConn).SetReadBuffer(64 << 10)
	c := raw
	if overTLS {
		tc := tls.Client(raw, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
		if err := tc.Handshake(); err != nil {
			t.Fatal(err)
		}
		c = tc
	}
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
	// Let the pipeline fill, then watch the backend stall.
	var stalled int64
	for range 100 {
		time.Sleep(30 * time.Millisecond)
		w := written.Load()
		if w == stalled && w > 0 {
			break
		}
		stalled = w
	}
	if stalled >= big/2 {
		t.Fatalf("the backend wrote %d of %d bytes to a client that read nothing", stalled, big)
	}
	var during runtime.MemStats
	runtime.ReadMemStats(&during)
	if grown := int64(during.HeapInuse) - int64(before.HeapInuse); grown > 8<<20 {
		t.Fatalf("heap grew by %d bytes while the client was not reading", grown)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil || n != big {
		t.Fatalf("read %d bytes after resuming: %v", n, err)
	}
	t.Logf("the backend stalled after %d bytes (sockets' buffers and one read of the engine's)", stalled)
}

// TestSlowUploadTimesOut: a body that stops arriving gets 408 after idle_timeout, and the
// counter shows it; a slow but steady body is not cut.
func TestSlowUploadTimesOut(t *testing.T) {
	addr := httpBackend(t, func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		fmt.Fprint(w, n)
	})
	cfg := testConfig(testPool("p", "roundrobin", addr))
	cfg.Listeners[0].IdleTimeout = dur(300 * time.Millisecond)
	te := startEngine(t, cfg)
	for _, small := range []bool{true, false} {
		size := 100 << 10 // streamed
		if small {
			size = 10 << 10 // read whole first
		}
		c, err := net.Dial("tcp", te.addr)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n", size)
		_, _ = c.Write(make([]byte, 1000)) // then nothing
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		out, _ := io.ReadAll(c)
		c.Close()
		if !bytes.HasPrefix(out, []byte("HTTP/1.1 408 ")) {
			t.Fatalf("stalled body (small %v): %q, want 408", small, out)
		}
	}
	if n := te.Stats().BodyTimeouts; n != 2 {
		t.Fatalf("body timeouts %d, want 2", n)
	}
	// A slow but steady body (64 KiB every 200 ms, ten times within a 2 s idle timeout) is
	// not cut.
	cfg2 := testConfig(testPool("p", "roundrobin", addr))
	cfg2.Listeners[0].IdleTimeout = dur(2 * time.Second)
	te2 := startEngine(t, cfg2)
	pr, pw := io.Pipe()
	go func() {
		for range 5 {
			time.Sleep(200 * time.Millisecond)
			_, _ = pw.Write(make([]byte, 64<<10))
		}
		pw.Close()
	}()
	req, _ := http.NewRequest("POST", te2.url("/"), pr)
	req.ContentLength = 5 * 64 << 10
	resp, b := doReq(t, testClient(), req)
	if resp.StatusCode != 200 || string(b) != strconv.Itoa(5*64<<10) {
		t.Fatalf("steady slow body: %d %q", resp.StatusCode, b)
	}
}

// TestSlowloris: heads that never end are answered 408 and closed at read_header_timeout,
// counted; a connection that sends nothing is closed silently.
func TestSlowloris(t *testing.T) {
	cfg := testConfig(testPool("p", "roundrobin", h1conformance.NewRawBackend(t).Addr()))
	cfg.Listeners[0].ReadHeaderTimeout = dur(200 * time.Millisecond)
	te := startEngine(t, cfg)
	const n = 200
	conns := make([]net.Conn, n)
	for i := range conns {
		c, err := net.Dial("tcp", te.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if i%2 == 0 {
			fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: a\r\nX-Slow: ")
		}
		conns[i] = c
	}
	for i, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		out, err := io.ReadAll(c)
		if err != nil {
			t.Fatalf("connection %d not closed: %v", i, err)
		}
		if i%2 == 0 && !bytes.HasPrefix(out, []byte("HTTP/1.1 408 ")) || i%2 == 1 && len(out) > 0 {
			t.Fatalf("connection %d got %q", i, out)
		}
	}
	waitFor(t, "the connections to be closed", func() bool { return te.Stats().Conns == 0 })
	if st := te.Stats(); st.HeaderTimeouts != n {
		t.Fatalf("header timeouts %d, want %d", st.HeaderTimeouts, n)
	}
}

// TestIdleFlood: thousands of idle keep-alive connections cost no goroutine each, and
// idle_timeout closes them all, counted.
func TestIdleFlood(t *testing.T) {
	cfg := testConfig(testPool("p", "roundrobin", fixedBackend(t)))
	cfg.Listeners[0].IdleTimeout = dur(5 * time.Second)
	te := startEngine(t, cfg)
	const n = 2000
	goroutines := runtime.NumGoroutine()
	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	buf := make([]byte, 4096)
	for range n {
		c, err := net.Dial("tcp", te.addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
		if _, err := c.Read(buf); err != nil {
			t.Fatal(err)
		}
	}
	if st := te.Stats(); st.Conns != n {
		t.Fatalf("open connections %d, want %d", st.Conns, n)
	}
	if g := runtime.NumGoroutine(); g > goroutines+10 {
		t.Fatalf("%d goroutines for %d idle connections (%d before)", g, n, goroutines)
	}
	for _, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
		if _, err := c.Read(buf); err != io.EOF {
			t.Fatalf("an idle connection was not closed: %v", err)
		}
	}
	waitFor(t, "the idle connections to be closed", func() bool { return te.Stats().Conns == 0 })
	if st := te.Stats(); st.IdleTimeouts != n {
		t.Fatalf("idle timeouts %d, want %d", st.IdleTimeouts, n)
	}
}

// slowBackend answers after d, counting requests.
func slowBackend(t testing.TB, d time.Duration, count *atomic.Int64) string {
	return httpBackend(t, func(w http.ResponseWriter, r *http.Request) {
		count.Add(1)
		time.Sleep(d)
		fmt.Fprint(w, "done")
	})
}

// gatedBackend answers each request once the test opens the gate (a token per request),
// counting the requests that arrived.
func gatedBackend(t testing.TB, arrived *atomic.Int64) (addr string, open func(n int)) {
	gate := make(chan struct{}, 64)
	addr = httpBackend(t, func(w http.ResponseWriter, r *http.Request) {
		arrived.Add(1)
		select {
		case <-gate:
		case <-r.Context().Done():
			return
		}
		fmt.Fprint(w, "done")
	})
	return addr, func(n int) {
		for range n {
			gate <- struct{}{}
		}
	}
}

// TestBacklog: max_conns 1 and max_queue 2: of four requests one runs, two wait (no goroutine
// of the engine's) and run in turn, the fourth gets 503 at once; a wait longer than
// queue_timeout gets 503 with Retry-After.
func TestBacklog(t *testing.T) {
	var arrived atomic.Int64
	addr, open := gatedBackend(t, &arrived)
	pc := testPool("p", "roundrobin", addr)
	pc.MaxConns, pc.MaxQueue, pc.QueueTimeout = 1, 2, dur(time.Minute)
	te := startEngine(t, testConfig(pc))
	codes := make(chan int, 4)
	send := func() {
		resp, _ := get(t, testClient(), "GET", te.url("/"), nil, nil)
		codes <- resp.StatusCode
	}
	go send()
	waitFor(t, "the first request at the backend", func() bool { return arrived.Load() == 1 })
	go send()
	go send()
	waitFor(t, "two requests to queue", func() bool { return te.pools["p"].Queue() == 2 })
	resp, _ := get(t, testClient(), "GET", te.url("/"), nil, nil)
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "1" {
		t.Fatalf("a request beyond the backlog: %d, want 503 with Retry-After", resp.StatusCode)
	}
	open(3)
	for range 3 {
		if c := <-codes; c != 200 {
			t.Fatalf("a queued request got %d", c)
		}
	}
	if arrived.Load() != 3 {
		t.Fatalf("the backend saw %d requests, want 3", arrived.Load())
	}
	if st := te.Stats(); st.Queued != 2 {
		t.Fatalf("queued %d, want 2", st.Queued)
	}

	var arrived2 atomic.Int64
	addr2, open2 := gatedBackend(t, &arrived2)
	pc2 := testPool("p", "roundrobin", addr2)
	pc2.MaxConns, pc2.MaxQueue, pc2.QueueTimeout = 1, 2, dur(100*time.Millisecond)
	te2 := startEngine(t, testConfig(pc2))
	go func() { _, _ = get(t, testClient(), "GET", te2.url("/"), nil, nil) }()
	waitFor(t, "the first request to run", func() bool { return arrived2.Load() == 1 })
	resp, body := get(t, testClient(), "GET", te2.url("/"), nil, nil)
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "1" || !strings.Contains(string(body), "timed out") {
		t.Fatalf("queue timeout: %d %v %q", resp.StatusCode, resp.Header, body)
	}
	if st := te2.pools["p"].QueueStats(); st.TimedOut != 1 {
		t.Fatalf("timed out %d, want 1", st.TimedOut)
	}
	open2(1)
}

// TestRetryOnConnectFailure: a pool with a dead backend answers every request from the live
// one, the dead one taken out of rotation.
func TestRetryOnConnectFailure(t *testing.T) {
	dead := refused.TCP(t)
	var count atomic.Int64
	live := slowBackend(t, 0, &count)
	te := startEngine(t, testConfig(testPool("p", "roundrobin", dead, live)))
	c := testClient()
	for i := range 20 {
		resp, b := get(t, c, "GET", te.url("/"), nil, nil)
		if resp.StatusCode != 200 || string(b) != "done" {
			t.Fatalf("request %d: %d %q", i, resp.StatusCode, b)
		}
	}
	if r, _ := te.PoolCounters("p"); r == 0 {
		t.Fatal("no retry counted")
	}
	if st := te.Stats(); st.ConnectFailures == 0 {
		t.Fatal("no connect failure counted")
	}
}

// dropBackend reads each request whole and closes the connection without answering, counting
// the requests by method.
func dropBackend(t testing.TB, seen *sync.Map) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				_, _ = io.Copy(io.Discard, req.Body)
				v, _ := seen.LoadOrStore(req.Method, new(atomic.Int64))
				v.(*atomic.Int64).Add(1)
			}()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return ln.Addr().String()
}

// TestReplaySafety: a backend that takes a request and dies sees a POST exactly once (502 to
// the client) and a GET once per attempt (it is idempotent), within retries.attempts.
func TestReplaySafety(t *testing.T) {
	var seen sync.Map
	a, b := dropBackend(t, &seen), dropBackend(t, &seen)
	te := startEngine(t, testConfig(testPool("p", "roundrobin", a, b)))
	c := testClient()
	resp, _ := get(t, c, "POST", te.url("/"), strings.NewReader("once"), nil)
	if resp.StatusCode != 502 {
		t.Fatalf("POST to a dying backend: %d, want 502", resp.StatusCode)
	}
	if v, _ := seen.Load("POST"); v == nil || v.(*atomic.Int64).Load() != 1 {
		t.Fatalf("the POST reached the backends %v times, want once", v)
	}
	resp, _ = get(t, c, "GET", te.url("/"), nil, nil)
	if resp.StatusCode != 502 {
		t.Fatalf("GET: %d, want 502 after the attempts", resp.StatusCode)
	}
	if v, _ := seen.Load("GET"); v == nil || v.(*atomic.Int64).Load() < 2 || v.(*atomic.Int64).Load() > 3 {
		t.Fatalf("the GET was sent %v times, want 2 or 3 (retries.attempts 3, two backends)", v)
	}
}

// TestStaleKeepAlive: a backend that closes its idle connections between requests costs no
// failed request, GET or POST.
func TestStaleKeepAlive(t *testing.T) {
	sb := newScriptBackend(t)
	for range 20 {
		sb.resp = append(sb.resp, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok<close>")
	}
	cfg := testConfig(testPool("p", "roundrobin", sb.addr()))
	cfg.Pools[0].Retries.Attempts = 1
	te := startEngine(t, cfg)
	c := testClient()
	for i := range 10 {
		method := "GET"
		if i%2 == 1 {
			method = "POST"
		}
		// The backend's close lands while the connection is idle in the engine's pool.
		waitFor(t, "the backend's close", func() bool { return te.Stats().BackendConns == 0 })
		resp, b := get(t, c, method, te.url("/"), strings.NewReader("x"), nil)
		if resp.StatusCode != 200 || string(b) != "ok" {
			t.Fatalf("request %d (%s): %d %q", i, method, resp.StatusCode, b)
		}
	}
	if got := len(sb.requests()); got != 10 {
		t.Fatalf("backend got %d requests, want 10 (none replayed)", got)
	}
}

// TestTunnel: an Upgrade request gets the backend's 101 and a two-way byte stream; the
// client's half-close reaches the backend and the backend's last bytes still reach the
// client; the slot is held for the tunnel's life. The backend is reached in cleartext and
// over TLS (half-closes as close_notify and FIN).
func TestTunnel(t *testing.T) {
	for _, overTLS := range []bool{false, true} {
		name := "plain"
		if overTLS {
			name = "tls-backend"
		}
		t.Run(name, func(t *testing.T) { testTunnel(t, overTLS) })
	}
}

func testTunnel(t *testing.T, overTLS bool) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	pc := testPool("p", "roundrobin", ln.Addr().String())
	if overTLS {
		ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{testcert.New(t, "backend.test")}})
		pc.TLS = &config.BackendTLS{InsecureSkipVerify: true}
	}
	gotHead := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		gotHead <- req.Header.Get("Upgrade") + "|" + req.Header.Get("Connection")
		io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\nhello ")
		// Echo until the client's half-close, then say goodbye.
		_, _ = io.Copy(c, br)
		io.WriteString(c, " bye")
		_ = c.(interface{ CloseWrite() error }).CloseWrite()
	}()
	te := startEngine(t, testConfig(pc))
	c, err := net.Dial("tcp", te.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET /ws HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 101 || resp.Header.Get("Upgrade") != "echo" {
		t.Fatalf("switch: %v %v", resp, err)
	}
	if h := <-gotHead; !strings.EqualFold(h, "echo|Upgrade") {
		t.Fatalf("the backend got Upgrade|Connection %q", h)
	}
	if n := inflight(te.pools["p"]); n != 1 {
		t.Fatalf("in flight %d during the tunnel, want 1 (%+v)", n, te.Stats())
	}
	payload := strings.Repeat("0123456789", 100000) // 1 MB through the tunnel
	go func() {
		io.WriteString(c, payload)
		_ = c.(*net.TCPConn).CloseWrite()
	}()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	rest, err := io.ReadAll(br)
	if err != nil || string(rest) != "hello "+payload+" bye" {
		t.Fatalf("tunnel carried %d bytes (%v), want %d", len(rest), err, len("hello "+payload+" bye"))
	}
	waitFor(t, "the tunnel to end", func() bool { return te.Stats().Tunnels == 0 && inflight(te.pools["p"]) == 0 })
}

// TestReloadKeepsRequestsInFlight: a Swap to another pool while a slow request runs: it
// finishes on the old table, new requests go to the new pool.
func TestReloadKeepsRequestsInFlight(t *testing.T) {
	var a, b atomic.Int64
	cfg := testConfig(testPool("p", "roundrobin", slowBackend(t, 300*time.Millisecond, &a)))
	te := startEngine(t, cfg)
	done := make(chan int, 1)
	go func() {
		resp, _ := get(t, testClient(), "GET", te.url("/"), nil, nil)
		done <- resp.StatusCode
	}()
	waitFor(t, "the slow request", func() bool { return a.Load() == 1 })
	cfg2 := testConfig(testPool("q", "roundrobin", slowBackend(t, 0, &b)))
	cfg2.Listeners[0].Address = te.addr
	pool, err := upstream.NewPool(cfg2.Pools[0].Spec(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := te.Swap(cfg2, map[string]*upstream.Pool{"q": pool}); err != nil {
		t.Fatal(err)
	}
	resp, _ := get(t, testClient(), "GET", te.url("/"), nil, nil)
	if resp.StatusCode != 200 || b.Load() != 1 {
		t.Fatalf("after the swap: %d, new pool saw %d", resp.StatusCode, b.Load())
	}
	if code := <-done; code != 200 {
		t.Fatalf("the request in flight during the swap: %d", code)
	}
}

// TestShutdownDrains: Shutdown lets a request in flight finish, closes idle connections at
// once and stops accepting.
func TestShutdownDrains(t *testing.T) {
	var n atomic.Int64
	cfg := testConfig(testPool("p", "roundrobin", slowBackend(t, 300*time.Millisecond, &n)))
	te := startEngine(t, cfg)
	idle, err := net.Dial("tcp", te.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	waitFor(t, "the idle connection", func() bool { return te.Stats().Conns == 1 })
	done := make(chan int, 1)
	go func() {
		resp, _ := get(t, testClient(), "GET", te.url("/"), nil, nil)
		done <- resp.StatusCode
	}()
	waitFor(t, "the request", func() bool { return n.Load() == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- te.Shutdown(ctx) }()
	waitFor(t, "the listening socket to close", func() bool {
		c, err := net.DialTimeout("tcp", te.addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err != nil // refused, not queued in a backlog nobody accepts from
	})
	if err := <-shut; err != nil {
		t.Fatal(err)
	}
	if code := <-done; code != 200 {
		t.Fatalf("the request in flight at shutdown: %d", code)
	}
	_ = idle.SetReadDeadline(time.Now().Add(time.Second))
	if _, err := idle.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("the idle connection after shutdown: %v, want EOF", err)
	}
	select {
	case err := <-te.done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("Serve did not return after Shutdown")
	}
}

// TestMaxKeepAliveRequests: the connection closes after max_keepalive_requests responses.
func TestMaxKeepAliveRequests(t *testing.T) {
	cfg := testConfig(testPool("p", "roundrobin", h1conformance.NewRawBackend(t).Addr()))
	cfg.Listeners[0].MaxKeepAliveRequests = 3
	te := startEngine(t, cfg)
	out := h1conformance.Exchange(t, te.addr, []byte(strings.Repeat("GET / HTTP/1.1\r\nHost: a\r\n\r\n", 5)))
	if s := h1conformance.Statuses(out); s != "200 200 200" || !bytes.Contains(out, []byte("Connection: close")) {
		t.Fatalf("statuses %q (want three, the last with Connection: close): %q", s, out)
	}
}

// TestBackendByName: a backend named by host name is resolved off the shard, and its address
// kept for the next connections.
func TestBackendByName(t *testing.T) {
	var n atomic.Int64
	addr := slowBackend(t, 0, &n)
	_, port, _ := net.SplitHostPort(addr)
	te := startEngine(t, testConfig(testPool("p", "roundrobin", "localhost:"+port)))
	c := testClient()
	for i := range 3 {
		resp, b := get(t, c, "GET", te.url("/"), nil, nil)
		if resp.StatusCode != 200 || string(b) != "done" {
			t.Fatalf("request %d: %d %q", i, resp.StatusCode, b)
		}
	}
	st := stateOf(te.pools["p"].Backends()[0])
	if r := st.resolved.Load(); r == nil || r.ap.Port() == 0 {
		t.Fatal("the resolved address was not kept")
	}
}

// TestAcceptPausesWithoutDescriptors: when the process runs out of descriptors the shards stop
// accepting for a while (counted) instead of spinning, and accept again once some are free.
// The clients' sockets are made before the limit is lowered (connecting takes no new
// descriptor), so connections wait on the listener when the accepts run out.
func TestAcceptPausesWithoutDescriptors(t *testing.T) {
	te := startEngine(t, testConfig(testPool("p", "roundrobin", fixedBackend(t))))
	ap := netip.MustParseAddrPort(te.addr)
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	var socks []int
	defer func() {
		for _, fd := range socks {
			_ = syscall.Close(fd)
		}
	}()
	for range 35 {
		fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		socks = append(socks, fd)
	}
	low := lim
	low.Cur = uint64(countFDs(t) + 10)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Skip("cannot lower RLIMIT_NOFILE:", err)
	}
	defer func() { _ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim) }()
	for _, fd := range socks {
		if err := syscall.Connect(fd, &syscall.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "an accept failure", func() bool { return te.Stats().AcceptFailures > 0 })
	wakes := te.group.Shards()[0].Wakes.Load() + te.group.Shards()[1%len(te.group.Shards())].Wakes.Load()
	time.Sleep(300 * time.Millisecond)
	if w := te.group.Shards()[0].Wakes.Load() + te.group.Shards()[1%len(te.group.Shards())].Wakes.Load() - wakes; w > 200 {
		t.Fatalf("the shards woke %d times in 300 ms without descriptors (spinning)", w)
	}
	for _, fd := range socks {
		_ = syscall.Close(fd)
	}
	socks = nil
	_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	resp, _ := get(t, testClient(), "GET", te.url("/"), nil, nil)
	if resp.StatusCode != 200 {
		t.Fatalf("after descriptors came back: %d", resp.StatusCode)
	}
}

func countFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip(err)
	}
	return len(ents)
}

// TestShutdownClosesBackendConnections: after Shutdown no backend connection of the engine is
// left open, idle ones included.
func TestShutdownClosesBackendConnections(t *testing.T) {
	sb := newScriptBackend(t, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	te := startEngine(t, testConfig(testPool("p", "roundrobin", sb.addr())))
	for range 2 {
		get(t, testClient(), "GET", te.url("/"), nil, nil)
	}
	if n := te.Stats().BackendConns; n == 0 {
		t.Fatal("no pooled backend connection")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := te.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if n := te.Stats().BackendConns; n != 0 {
		t.Fatalf("%d backend connections open after Shutdown", n)
	}
}

// TestHedging: with hedge.delay, an idempotent request to a slow backend gets a copy on
// another backend and the first response wins; the loser's slot is released; a POST is
// never hedged.
func TestHedging(t *testing.T) {
	var slowN, fastN atomic.Int64
	slow := httpBackend(t, func(w http.ResponseWriter, r *http.Request) {
		slowN.Add(1)
		select {
		case <-time.After(4 * time.Second):
		case <-r.Context().Done():
		}
		fmt.Fprint(w, "slow")
	})
	fast := slowBackend(t, 0, &fastN)
	pc := testPool("p", "roundrobin", slow, fast)
	pc.Hedge = config.Hedge{Delay: dur(50 * time.Millisecond), MaxHedges: 1}
	pc.Retries.Budget = 1
	te := startEngine(t, testConfig(pc))
	c := testClient()
	for i := range 6 {
		start := time.Now()
		resp, b := get(t, c, "GET", te.url("/"), nil, nil)
		if resp.StatusCode != 200 || string(b) != "done" || time.Since(start) > 3*time.Second {
			t.Fatalf("request %d: %d %q after %v", i, resp.StatusCode, b, time.Since(start))
		}
	}
	if _, h := te.PoolCounters("p"); h == 0 || slowN.Load() == 0 {
		t.Fatalf("hedges %d, slow backend saw %d", h, slowN.Load())
	}
	waitFor(t, "the losers' slots", func() bool { return inflight(te.pools["p"]) == 0 })
	_, hedges := te.PoolCounters("p")
	for range 2 { // POSTs take their backend's time, unhedged
		get(t, c, "POST", te.url("/"), strings.NewReader("x"), nil)
	}
	if _, h := te.PoolCounters("p"); h != hedges {
		t.Fatalf("a POST was hedged (%d hedges, %d before)", h, hedges)
	}
}
