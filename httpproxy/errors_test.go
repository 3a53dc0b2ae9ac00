package httpproxy

import (
	"bufio"
	"bytes"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"ballast/config"
	"ballast/upstream"
)

// closingBackend accepts connections, reads one request and closes without answering.
func closingBackend(t testing.TB) (addr string, hits *atomic.Int64) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hits = new(atomic.Int64)
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
			hits.Add(1)
			_, _ = http.ReadRequest(bufio.NewReader(c))
			c.Close()
		}
	}()
	return ln.Addr().String(), hits
}

// deadAddr is a 127.0.0.1 address nothing listens on.
func deadAddr(t testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func TestErrorStatuses(t *testing.T) {
	gate := make(chan struct{})
	defer close(gate)
	slow := newTiny(t, gate)
	ok := newTiny(t, nil)
	closer, _ := closingBackend(t)

	tests := []struct {
		name   string
		pool   func() config.Pool
		method string
		want   int
		body   string
	}{
		{"connect failure", func() config.Pool {
			pc := testPool("e", "roundrobin", deadAddr(t))
			pc.Retries.Attempts = 1
			return pc
		}, "GET", 502, "connect"},
		{"closed before response", func() config.Pool { return testPool("e", "roundrobin", closer) }, "GET", 502, "closed"},
		{"response timeout", func() config.Pool {
			pc := testPool("e", "roundrobin", hostOf(slow.Server))
			pc.Timeouts.Response = dur(100 * time.Millisecond)
			return pc
		}, "GET", 504, "timeout"},
		{"no backend", func() config.Pool {
			pc := testPool("e", "roundrobin", hostOf(ok.Server))
			pc.Backends[0].Down = true
			return pc
		}, "GET", 503, "no backend"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tp := startProxy(t, testConfig(tc.pool()))
			resp, body := get(t, testClient(), tc.method, tp.url("/"), nil, nil)
			if resp.StatusCode != tc.want || !strings.Contains(string(body), tc.body) {
				t.Errorf("got %d %q, want %d containing %q", resp.StatusCode, body, tc.want, tc.body)
			}
			waitFor(t, "in-flight back to 0", func() bool { return inflight(tp.pools["e"]) == 0 })
		})
	}
}

// TestRetryRules sends requests alternately first to a backend that closes every connection
// without answering and to a good one; what happens to those that hit the closer depends on
// the method and retries.non_idempotent.
func TestRetryRules(t *testing.T) {
	closer, closerHits := closingBackend(t)
	good := newTiny(t, nil)
	tests := []struct {
		name          string
		method        string
		nonIdempotent bool
		wantFailures  bool
	}{
		{"GET retried on the other backend", "GET", false, false},
		{"PUT retried (idempotent)", "PUT", false, false},
		{"POST not retried", "POST", false, true},
		// The closer received the POST before closing: never replayed (issue 8 item 1).
		{"POST not replayed even with non_idempotent", "POST", true, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pc := testPool("r", "roundrobin", closer, hostOf(good.Server))
			pc.Retries.NonIdempotent = tc.nonIdempotent
			pc.Retries.Budget = 1
			tp := startProxy(t, testConfig(pc))
			c := testClient()
			before := closerHits.Load()
			failures := 0
			for i := 0; i < 6; i++ {
				resp, body := get(t, c, tc.method, tp.url("/"), strings.NewReader("x"), nil)
				switch resp.StatusCode {
				case 200:
				case 502:
					failures++
				default:
					t.Fatalf("status %d %q", resp.StatusCode, body)
				}
			}
			hits := int(closerHits.Load() - before)
			if hits == 0 {
				t.Fatal("the closing backend got no request")
			}
			if tc.wantFailures && failures != hits {
				t.Errorf("%d failures for %d requests that hit the closer, want one each", failures, hits)
			}
			if !tc.wantFailures && failures != 0 {
				t.Errorf("%d failures, want every request retried to success", failures)
			}
			waitFor(t, "in-flight back to 0", func() bool { return inflight(tp.pools["r"]) == 0 })
		})
	}
}

func TestAccessLogAndSwap(t *testing.T) {
	a, b := newTiny(t, nil), newTiny(t, nil)
	var buf syncBuffer
	cfg := testConfig(testPool("p", "roundrobin", hostOf(a.Server)))
	cfg.Logging.Access = true
	cfg.Logging.AccessFile = filepath.Join(t.TempDir(), "access.log")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Listeners[0].Address = ln.Addr().String()
	poolA, err := upstream.NewPool(cfg.Pools[0].Spec(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	px, err := newEngine(cfg, map[string]*upstream.Pool{"p": poolA}, slog.New(slog.NewTextHandler(&buf, nil)))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- px.Serve(cfg.Listeners[0].Name, ln) }()
	defer func() {
		_ = px.Shutdown(t.Context())
		<-done
	}()
	url := "http://" + ln.Addr().String() + "/x"
	c := testClient()
	resp, _ := get(t, c, "GET", url, nil, nil)
	if got := resp.Header.Get("X-Ballast-Backend"); got != hostOf(a.Server) {
		t.Fatalf("before swap: served by %q", got)
	}
	if log, _ := os.ReadFile(cfg.Logging.AccessFile); !strings.Contains(string(log), `"uri":"/x"`) {
		t.Errorf("no access log line: %q", log)
	}
	if strings.Contains(buf.String(), "/x") {
		t.Errorf("the access line went to the error log: %q", buf.String())
	}

	// Reload: the pool now lists b too, with a weight that makes it the only choice.
	cfg2 := testConfig(testPool("p", "roundrobin", hostOf(a.Server), hostOf(b.Server)))
	cfg2.Pools[0].Backends[0].Weight = 0
	cfg2.Listeners[0].Address = ln.Addr().String()
	cfg2.Listeners[0].ExposeBackend = true
	transportA := stateOf(poolA.Backends()[0]).hc
	poolB, err := upstream.NewPool(cfg2.Pools[0].Spec(nil), poolA)
	if err != nil {
		t.Fatal(err)
	}
	if err := px.Swap(cfg2, map[string]*upstream.Pool{"p": poolB}); err != nil {
		t.Fatal(err)
	}
	if stateOf(poolB.Backend(hostOf(a.Server))).hc != transportA {
		t.Error("the reload replaced the connection pool of a backend that kept its identity")
	}
	if stateOf(poolB.Backend(hostOf(b.Server))) == nil {
		t.Error("the new backend got no connection pool")
	}
	resp, _ = get(t, c, "GET", url, nil, nil)
	if got := resp.Header.Get("X-Ballast-Backend"); got != hostOf(b.Server) {
		t.Errorf("after swap: served by %q", got)
	}
	if err := px.Swap(&config.Config{Listeners: cfg2.Listeners, Routes: []config.Route{{Pool: "missing"}}}, nil); err == nil {
		t.Error("Swap accepted a route to a missing pool")
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestSlowClientHeaders: a client that never finishes its headers is cut off after
// read_header_timeout (slowloris).
func TestSlowClientHeaders(t *testing.T) {
	be := newTiny(t, nil)
	cfg := testConfig(testPool("p", "roundrobin", hostOf(be.Server)))
	cfg.Listeners[0].ReadHeaderTimeout = dur(200 * time.Millisecond)
	tp := startProxy(t, cfg)
	c, err := net.Dial("tcp", tp.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\nX-Slow: "); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	b, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("connection not closed by the proxy: %v", err)
	}
	if len(b) > 0 && !bytes.HasPrefix(b, []byte("HTTP/1.1 408")) {
		t.Errorf("answer %q, want 408 or a plain close", b)
	}
	if be.hits.Load() != 0 {
		t.Error("the incomplete request reached the backend")
	}
}

// An HTTP/1.0 request without Host is valid; the backend gets one (its own address) and the
// client gets the backend's answer in HTTP/1.0.
func TestHTTP10WithoutHost(t *testing.T) {
	be := newTiny(t, nil)
	tp := startProxy(t, testConfig(testPool("p", "roundrobin", hostOf(be.Server))))
	c, err := net.Dial("tcp", tp.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET /old HTTP/1.0\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	b, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte("HTTP/1.0 200")) && !bytes.HasPrefix(b, []byte("HTTP/1.1 200")) {
		t.Fatalf("answer %q, want 200", b)
	}
	if be.hits.Load() != 1 {
		t.Errorf("backend hits = %d, want 1", be.hits.Load())
	}
}
