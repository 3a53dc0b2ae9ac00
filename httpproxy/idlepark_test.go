package httpproxy

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// echoBackend answers every request with "METHOD PATH BODY".
func echoBackend(t *testing.T) string {
	t.Helper()
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		_, _ = io.WriteString(w, r.Method+" "+r.URL.RequestURI()+" "+string(b))
	}))
	t.Cleanup(be.Close)
	return strings.TrimPrefix(be.URL, "http://")
}

// parkedConns is the number of connections in the proxy's pollers now.
func parkedConns(tp *testProxy) int {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	n := 0
	for _, pl := range tp.pollers {
		n += pl.Len()
	}
	return n
}

// rawClient is one client connection read with a bufio.Reader, with a bounded deadline.
type rawClient struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
}

func dialRaw(t *testing.T, addr string) *rawClient {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	return &rawClient{t: t, c: c, br: bufio.NewReader(c)}
}

func (rc *rawClient) send(raw string) {
	rc.t.Helper()
	if _, err := io.WriteString(rc.c, raw); err != nil {
		rc.t.Fatal(err)
	}
}

// response reads one response and returns whether it said Connection: close, and its body.
func (rc *rawClient) response() (closing bool, body string) {
	rc.t.Helper()
	resp, err := http.ReadResponse(rc.br, nil)
	if err != nil {
		rc.t.Fatalf("reading response: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil || resp.StatusCode != 200 {
		rc.t.Fatalf("response %d, body %q, %v", resp.StatusCode, b, err)
	}
	return resp.Close, string(b)
}

// closedByProxy reports whether the proxy closed the connection (EOF) before the deadline.
func (rc *rawClient) closedByProxy(within time.Duration) bool {
	_ = rc.c.SetReadDeadline(time.Now().Add(within))
	_, err := rc.br.ReadByte()
	return err == io.EOF
}

// TestIdleConnectionParking drives keep-alive connections through the poller end to end: a
// connection idle longer than parkAfter is parked (its goroutine ends) and is served again,
// with every kind of next request, when it becomes readable.
func TestIdleConnectionParking(t *testing.T) {
	be := echoBackend(t)
	tests := []struct {
		name string
		next string   // written at once after the connection was parked
		want []string // the bodies of the answers, in order
	}{
		{"GET", "GET /b HTTP/1.1\r\nHost: x\r\n\r\n", []string{"GET /b "}},
		{"POST with a body", "POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello", []string{"POST /p hello"}},
		{"chunked body", "POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", []string{"POST /c abc"}},
		{"two pipelined", "GET /1 HTTP/1.1\r\nHost: x\r\n\r\nGET /2 HTTP/1.1\r\nHost: x\r\n\r\n", []string{"GET /1 ", "GET /2 "}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tp := startProxy(t, testConfig(testPool("p", "roundrobin", be)))
			rc := dialRaw(t, tp.addr)
			rc.send("GET /a HTTP/1.1\r\nHost: x\r\n\r\n")
			if _, body := rc.response(); body != "GET /a " {
				t.Fatalf("first answer %q", body)
			}
			waitFor(t, "connection parked", func() bool { return parkedConns(tp) == 1 })
			rc.send(tc.next)
			for _, want := range tc.want {
				if _, body := rc.response(); body != want {
					t.Fatalf("answer after parking %q, want %q", body, want)
				}
			}
			if n := parkedConns(tp); n != 0 {
				t.Fatalf("%d connections parked while one is being served", n)
			}
			// And it parks again.
			waitFor(t, "connection parked again", func() bool { return parkedConns(tp) == 1 })
			rc.send("GET /again HTTP/1.1\r\nHost: x\r\n\r\n")
			if _, body := rc.response(); body != "GET /again " {
				t.Fatalf("answer after the second parking %q", body)
			}
		})
	}
}

// TestParkedConnectionLimits: a parked connection still obeys idle_timeout,
// max_keepalive_requests, the client closing it and Shutdown.
func TestParkedConnectionLimits(t *testing.T) {
	be := echoBackend(t)
	park := func(t *testing.T, tp *testProxy) *rawClient {
		rc := dialRaw(t, tp.addr)
		rc.send("GET /a HTTP/1.1\r\nHost: x\r\n\r\n")
		rc.response()
		waitFor(t, "connection parked", func() bool { return parkedConns(tp) == 1 })
		return rc
	}
	t.Run("idle timeout closes it", func(t *testing.T) {
		cfg := testConfig(testPool("p", "roundrobin", be))
		cfg.Listeners[0].IdleTimeout = dur(parkAfter + 300*time.Millisecond)
		tp := startProxy(t, cfg)
		start := time.Now()
		rc := park(t, tp)
		if !rc.closedByProxy(10 * time.Second) {
			t.Fatal("the parked connection was not closed at its idle timeout")
		}
		if since := time.Since(start); since < parkAfter+300*time.Millisecond {
			t.Fatalf("closed after %v, before the idle timeout", since)
		}
		waitFor(t, "poller empty", func() bool { return parkedConns(tp) == 0 })
	})
	t.Run("max_keepalive_requests counts across parkings", func(t *testing.T) {
		cfg := testConfig(testPool("p", "roundrobin", be))
		cfg.Listeners[0].MaxKeepAliveRequests = 2
		tp := startProxy(t, cfg)
		rc := park(t, tp)
		rc.send("GET /b HTTP/1.1\r\nHost: x\r\n\r\n")
		if closing, _ := rc.response(); !closing {
			t.Fatal("second request on a 2-request connection: no Connection: close")
		}
		if !rc.closedByProxy(10 * time.Second) {
			t.Fatal("connection open after max_keepalive_requests")
		}
	})
	t.Run("client close is noticed", func(t *testing.T) {
		tp := startProxy(t, testConfig(testPool("p", "roundrobin", be)))
		rc := park(t, tp)
		_ = rc.c.Close()
		waitFor(t, "closed connection leaves the poller", func() bool { return parkedConns(tp) == 0 })
	})
	t.Run("shutdown closes it and waits for active ones", func(t *testing.T) {
		tp := startProxy(t, testConfig(testPool("p", "roundrobin", be)))
		rc := park(t, tp)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := tp.Shutdown(ctx); err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
		if !rc.closedByProxy(5 * time.Second) {
			t.Fatal("parked connection open after Shutdown")
		}
	})
}

// TestBurstMemoryRelease: when releaseBurst connections have parked, the proxy returns the
// memory they used while active (two collections and debug.FreeOSMemory), once; a smaller
// second wave after it (a burst that paused) gets a release of its own.
func TestBurstMemoryRelease(t *testing.T) {
	tp := startProxy(t, testConfig(testPool("p", "roundrobin", smallBackend(t))))
	conns := make([]net.Conn, 0, 2*releaseBurst)
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	buf := make([]byte, 512)
	wave := func(n int) {
		start := len(conns)
		for range n {
			c, err := net.Dial("tcp", tp.addr)
			if err != nil {
				t.Fatal(err)
			}
			conns = append(conns, c)
			_ = c.SetDeadline(time.Now().Add(20 * time.Second))
			if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
		}
		for _, c := range conns[start:] {
			if n, err := c.Read(buf); err != nil || !strings.HasPrefix(string(buf[:n]), "HTTP/1.1 200") {
				t.Fatalf("answer %q, %v", buf[:n], err)
			}
		}
	}
	wave(releaseBurst)
	if n := tp.releases.Load(); n != 0 {
		t.Fatalf("%d releases before the connections parked", n)
	}
	waitFor(t, "all connections parked", func() bool { return parkedConns(tp) == releaseBurst })
	waitFor(t, "memory released", func() bool { return tp.releases.Load() == 1 })

	wave(releaseBurst / 8)
	waitFor(t, "the second wave parked", func() bool { return parkedConns(tp) == releaseBurst+releaseBurst/8 })
	waitFor(t, "the second wave's memory released", func() bool { return tp.releases.Load() == 2 })
}
