//go:build linux

package h1

import (
	"ballast/config"
	"ballast/internal/refused"
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mccutchen/go-httpbin/v2/httpbin"
)

// Helpers of the tests ported from the fasthttp plane (issue 20), so that each runs
// against the engine as it was written: startProxy is startEngine, and a testProxy is a
// testEngine.

// testProxy is the engine under test, under the name the ported tests use.
type testProxy = testEngine

// startProxy serves cfg's only listener from the engine (startEngine).
func startProxy(t testing.TB, cfg *config.Config) *testProxy { return startEngine(t, cfg) }

// ReopenAccessLog reopens the access log, as SIGUSR1 does: through the core.
func (te *testEngine) ReopenAccessLog() error { return te.core.ReopenAccessLog() }

// seen is what a recorder backend received in one request.
type seen struct {
	method, uri string
	header      http.Header
	body        []byte
}

// recorder is a backend that remembers every request it got and answers with the handler's
// response (200 "ok" when nil).
type recorder struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []seen
}

func newRecorder(t testing.TB, h http.HandlerFunc) *recorder {
	rec := &recorder{}
	rec.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rec.mu.Lock()
		rec.reqs = append(rec.reqs, seen{r.Method, r.RequestURI, r.Header.Clone(), body})
		rec.mu.Unlock()
		if h != nil {
			h(w, r)
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(rec.Server.Close)
	return rec
}

// last is the last request the backend received.
func (rec *recorder) last(t testing.TB) seen {
	t.Helper()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.reqs) == 0 {
		t.Fatal("the backend received no request")
	}
	return rec.reqs[len(rec.reqs)-1]
}

// find returns the request the backend got for uri, if any.
func (rec *recorder) find(uri string) (seen, bool) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, r := range rec.reqs {
		if r.uri == uri {
			return r, true
		}
	}
	return seen{}, false
}

func (rec *recorder) count() int {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return len(rec.reqs)
}

// rawDo writes req as is on a new connection to addr and reads one response.
func rawDo(t testing.TB, addr, req string) (*http.Response, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the response to %q: %v", req, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

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
	return refused.TCP(t)
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

// tinyBackend answers every request with its own name; gate, when non-nil, holds each request
// until it is closed (or the client goes away).
type tinyBackend struct {
	*httptest.Server
	hits      atomic.Int64
	cancelled atomic.Int64
}

func newTiny(t testing.TB, gate <-chan struct{}) *tinyBackend {
	tb := &tinyBackend{}
	tb.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tb.hits.Add(1)
		if gate != nil {
			select {
			case <-gate:
			case <-r.Context().Done():
				tb.cancelled.Add(1)
				return
			}
		}
		w.Header().Set("X-Req-Id", r.Header.Get("X-Req-Id"))
		_, _ = io.WriteString(w, "ok "+r.Header.Get("X-Req-Id"))
	}))
	t.Cleanup(tb.Server.Close)
	return tb
}

func startHTTPBin(t testing.TB) *httptest.Server {
	s := httptest.NewServer(httpbin.New(httpbin.WithMaxBodySize(128 << 20)))
	t.Cleanup(s.Close)
	return s
}

func hostOf(s *httptest.Server) string { return strings.TrimPrefix(s.URL, "http://") }

type echoed struct {
	Method  string              `json:"method"`
	Headers map[string][]string `json:"headers"`
	Data    string              `json:"data"`
	Args    map[string][]string `json:"args"`
	URL     string              `json:"url"`
}

// readLog waits until the log at path holds n lines and returns them.
func readLog(t *testing.T, path string, n int) []string {
	t.Helper()
	var lines []string
	waitFor(t, "access log lines", func() bool {
		data, _ := os.ReadFile(path)
		lines = strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
		return len(data) > 0 && len(lines) >= n
	})
	return lines
}

// chunked encodes body as one chunk per 1000 bytes.
func chunked(body string) string {
	var b strings.Builder
	for len(body) > 0 {
		n := min(len(body), 1000)
		fmt.Fprintf(&b, "%x\r\n%s\r\n", n, body[:n])
		body = body[n:]
	}
	return b.String() + "0\r\n\r\n"
}

// oneShard makes the engines the test builds run one shard: the engine keeps idle backend
// connections per shard (a request's connections live on the shard that accepted its
// client), so a test that counts the backend's connections, or that needs the next request
// to find the pooled ones, counts one pool, as the fasthttp plane has.
func oneShard(t *testing.T) { t.Setenv("BALLAST_H1_SHARDS", "1") }
