//go:build linux

package h1

import (
	"ballast/internal/refused"
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
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

// The pool's protocol decides how an HTTP/2 client's request reaches the backend: HTTP/1.1,
// HTTP/2 with prior knowledge, or HTTP/2 over TLS (verified against the pool's CA).
func TestBackendProtocols(t *testing.T) {
	echo := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s tls=%v %s %s", r.Proto, r.TLS != nil, r.Host, r.URL.RequestURI())
	})
	plain := dualServer(t, echo)
	tlsAddr, ca := tlsH2Server(t, echo)
	tests := []struct{ protocol, extra, addr, want string }{
		{"http1", "", plain, "HTTP/1.1 tls=false"},
		{"h2c", "", plain, "HTTP/2.0 tls=false"},
		{"h2", "tls: {ca: " + ca + "}", tlsAddr, "HTTP/2.0 tls=true"},
		{"http1", "tls: {ca: " + ca + ", server_name: localhost}", tlsAddr, "HTTP/1.1 tls=true"},
	}
	for _, tt := range tests {
		t.Run(tt.protocol+"/"+tt.extra, func(t *testing.T) {
			s := startYAML(t, fmt.Sprintf(`
listeners: [{name: in, address: "127.0.0.1:0", h2c: true}]
pools:
  - name: p
    protocol: %s
    %s
    backends: [{address: %s}]
`, tt.protocol, tt.extra, tt.addr))
			resp, err := xh2c().Get("http://" + s.Addr("in").String() + "/a/b?c=d")
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			want := tt.want + " " + s.Addr("in").String() + " /a/b?c=d"
			if resp.StatusCode != 200 || string(b) != want {
				t.Errorf("got %d %q, want %q", resp.StatusCode, b, want)
			}
		})
	}
}

// Bodies stream both ways at once (the backend echoes each line as it arrives, the client
// sends the next line only after reading the echo) and trailers pass both ways.
func TestFullDuplexStreamingAndTrailers(t *testing.T) {
	backend := dualServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-Lines")
		w.WriteHeader(200)
		rc := http.NewResponseController(w)
		_ = rc.EnableFullDuplex()
		_ = rc.Flush()
		sc := bufio.NewScanner(r.Body)
		n := 0
		for sc.Scan() {
			n++
			fmt.Fprintf(w, "echo %s\n", sc.Text())
			_ = rc.Flush()
		}
		w.Header().Set("X-Lines", fmt.Sprint(n))
		w.Header().Set(http.TrailerPrefix+"X-Request-Trailer", r.Trailer.Get("X-Client-Sum"))
	}))
	s := startYAML(t, fmt.Sprintf(`
listeners: [{name: in, address: "127.0.0.1:0", h2c: true}]
pools: [{name: p, protocol: h2c, backends: [{address: %s}]}]
`, backend))
	pr, pw := io.Pipe()
	req, _ := http.NewRequest("POST", "http://"+s.Addr("in").String()+"/echo", pr)
	req.Trailer = http.Header{"X-Client-Sum": nil}
	resp, err := xh2c().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rd := bufio.NewReader(resp.Body)
	for i := range 3 {
		fmt.Fprintf(pw, "line%d\n", i)
		got, err := rd.ReadString('\n')
		if err != nil || got != fmt.Sprintf("echo line%d\n", i) {
			t.Fatalf("echo %d: %q %v (the body did not stream)", i, got, err)
		}
	}
	req.Trailer.Set("X-Client-Sum", "42")
	pw.Close()
	if rest, _ := io.ReadAll(rd); len(rest) != 0 {
		t.Errorf("unexpected tail %q", rest)
	}
	if resp.Trailer.Get("X-Lines") != "3" {
		t.Errorf("response trailers %v, want X-Lines: 3", resp.Trailer)
	}
	if got := resp.Trailer.Get("X-Request-Trailer"); got != "42" {
		t.Errorf("request trailer reached the backend as %q, want 42", got)
	}
}

// The balancer picks per stream: requests multiplexed on one client connection spread over
// the backends, and max_conns limits streams, not connections.
func TestPerStreamBalancingAndLimits(t *testing.T) {
	bothBackendProtocols(t, testPerStreamBalancingAndLimits)
}

func testPerStreamBalancingAndLimits(t *testing.T, protocol string) {
	var hits [2]atomic.Int64
	release := make(chan struct{})
	var blocked atomic.Int64
	mk := func(i int) string {
		return dualServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hits[i].Add(1)
			if r.URL.Path == "/block" {
				blocked.Add(1)
				<-release
			}
			fmt.Fprint(w, i)
		}))
	}
	a, b := mk(0), mk(1)
	s := startYAML(t, fmt.Sprintf(`
listeners: [{name: in, address: "127.0.0.1:0", h2c: true}]
pools: [{name: p, protocol: %s, max_conns: 1, backends: [{address: %s}, {address: %s}]}]
`, protocol, a, b))
	c := xh2c()
	base := "http://" + s.Addr("in").String()
	for range 10 {
		resp, err := c.Get(base + "/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if hits[0].Load() != 5 || hits[1].Load() != 5 {
		t.Errorf("10 streams on one connection went %d/%d, want 5/5 (roundrobin per stream)", hits[0].Load(), hits[1].Load())
	}
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := c.Get(base + "/block")
			if err == nil {
				resp.Body.Close()
			}
		}()
	}
	waitForD(t, 5*time.Second, "two streams in flight", func() bool { return blocked.Load() == 2 })
	resp, err := c.Get(base + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("a third stream with both backends at max_conns 1 got %d, want 503", resp.StatusCode)
	}
	close(release)
	wg.Wait()
}

// An idempotent request that cannot connect goes to another backend; a POST whose body the
// backend read and then reset is not replayed (502, one backend hit).
func TestRetries(t *testing.T) { bothBackendProtocols(t, testRetries) }

func testRetries(t *testing.T, protocol string) {
	var posts atomic.Int64
	live := dualServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == "POST" {
			posts.Add(1)
			io.ReadAll(r.Body)
			panic(http.ErrAbortHandler) // reset before any response
		}
		fmt.Fprint(w, "live")
	}))
	deadAddr := refused.TCP(t)
	s := startYAML(t, fmt.Sprintf(`
listeners: [{name: in, address: "127.0.0.1:0", h2c: true}]
pools: [{name: p, protocol: %s, retries: {attempts: 2}, backends: [{address: %s}, {address: %s}]}]
`, protocol, deadAddr, live))
	base := "http://" + s.Addr("in").String()
	for i := range 4 {
		resp, err := xh2c().Get(base + "/")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != "live" {
			t.Errorf("GET %d: %d %q, want 200 live (retried after the connect failure)", i, resp.StatusCode, b)
		}
	}
	// The dead backend is now held off for a second: posts go to the live one.
	resp, err := xh2c().Post(base+"/", "text/plain", strings.NewReader("payload"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway || posts.Load() != 1 {
		t.Errorf("POST reset by the backend: %d after %d backend hits, want 502 after 1", resp.StatusCode, posts.Load())
	}
}

// A client that cancels a stream cancels the backend's; a backend that resets mid-body resets
// the client's stream.
func TestCancellationBothWays(t *testing.T) { bothBackendProtocols(t, testCancellationBothWays) }

func testCancellationBothWays(t *testing.T, protocol string) {
	backendSawCancel := make(chan struct{})
	started := make(chan struct{})
	backend := dualServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/hang":
			w.WriteHeader(200)
			_ = http.NewResponseController(w).Flush()
			close(started)
			<-r.Context().Done()
			close(backendSawCancel)
		case "/reset":
			w.WriteHeader(200)
			io.WriteString(w, "partial")
			_ = http.NewResponseController(w).Flush()
			panic(http.ErrAbortHandler)
		}
	}))
	s := startYAML(t, fmt.Sprintf(`
listeners: [{name: in, address: "127.0.0.1:0", h2c: true}]
pools: [{name: p, protocol: %s, backends: [{address: %s}]}]
`, protocol, backend))
	base := "http://" + s.Addr("in").String()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"/hang", nil)
	resp, err := xh2c().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	<-started
	cancel()
	resp.Body.Close()
	select {
	case <-backendSawCancel:
	case <-time.After(5 * time.Second):
		t.Error("the backend stream was not cancelled after the client cancelled")
	}
	resp, err = xh2c().Get(base + "/reset")
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil {
		t.Errorf("a backend reset mid-body reached the client as a complete body %q", b)
	}
}

// Hedging: with a slow and a fast backend, every GET is answered by the fast one soon after
// hedge.delay, and the slow backend's copy is cancelled.
func TestH2Hedging(t *testing.T) {
	slowCancelled := make(chan struct{}, 16)
	slow := dualServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
			slowCancelled <- struct{}{}
		case <-time.After(10 * time.Second):
		}
	}))
	fast := dualServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "fast") }))
	s := startYAML(t, fmt.Sprintf(`
listeners: [{name: in, address: "127.0.0.1:0", h2c: true}]
pools: [{name: p, protocol: h2c, hedge: {delay: 50ms}, backends: [{address: %s}, {address: %s}]}]
`, slow, fast))
	for i := range 4 {
		begin := time.Now()
		resp, err := xh2c().Get("http://" + s.Addr("in").String() + "/")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != "fast" || time.Since(begin) > 5*time.Second {
			t.Errorf("GET %d: %d %q after %v, want fast well before the slow backend's 10 s", i, resp.StatusCode, b, time.Since(begin))
		}
	}
	select {
	case <-slowCancelled:
	case <-time.After(5 * time.Second):
		t.Error("the slow backend's copy was never cancelled")
	}
}

// HTTP/2 streams count in the same metrics as HTTP/1 requests: responses by class per backend
// and retries per pool, read from the core's counters that the admin listener's /metrics
// renders (yamlEngine.metrics writes them in its format).
func TestMetricsCountBothPlanes(t *testing.T) { bothBackendProtocols(t, testMetricsCountBothPlanes) }

func testMetricsCountBothPlanes(t *testing.T, protocol string) {
	live := dualServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") }))
	deadAddr := refused.TCP(t)
	s := startYAML(t, fmt.Sprintf(`
listeners: [{name: in, address: "127.0.0.1:0", h2c: true}]
admin: {address: "127.0.0.1:0"}
pools: [{name: p, protocol: %s, backends: [{address: %s, name: live}, {address: %s, name: dead}]}]
`, protocol, live, deadAddr))
	base := "http://" + s.Addr("in").String() + "/"
	for _, c := range []*http.Client{xh2c(), {Timeout: 10 * time.Second}} { // HTTP/2, then HTTP/1.1
		for range 3 {
			resp, err := c.Get(base)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("status %d", resp.StatusCode)
			}
		}
	}
	// A response is counted when its exchange ends, which may be a moment after the client
	// has its last byte (an HTTP/2 backend's END_STREAM can follow its DATA in a frame of its
	// own): scrape until the count is there, for at most 5 s.
	var metrics string
	for deadline := time.Now().Add(5 * time.Second); ; {
		metrics = s.metrics()
		if strings.Contains(metrics, `ballast_backend_responses_total{backend="live",class="2xx",pool="p"} 6`) || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(metrics, `ballast_backend_responses_total{backend="live",class="2xx",pool="p"} 6`) {
		t.Errorf("2xx of live is not 6 (3 HTTP/2 + 3 HTTP/1.1):\n%s", grep(metrics, "responses_total"))
	}
	if !strings.Contains(metrics, `ballast_pool_retries_total{pool="p"} `) || strings.Contains(metrics, `ballast_pool_retries_total{pool="p"} 0`) {
		t.Errorf("retries after the dead backend's connect failure not counted:\n%s", grep(metrics, "retries_total"))
	}
}

func grep(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// HTTP/2 streams are written to the same access-log file as HTTP/1 requests, with the same
// keys: one line each, the proto telling them apart.
func TestH2AccessLog(t *testing.T) { bothBackendProtocols(t, testAccessLog) }

func testAccessLog(t *testing.T, protocol string) {
	backend := dualServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(201) }))
	dir := t.TempDir()
	logFile := filepath.Join(dir, "access.log")
	s := startYAML(t, fmt.Sprintf(`
listeners: [{name: in, address: "127.0.0.1:0", h2c: true}]
logging: {access: true, access_file: %q}
pools: [{name: p, protocol: %s, backends: [{address: %s, name: b1}]}]
`, logFile, protocol, backend))
	for _, c := range []*http.Client{xh2c(), {Timeout: 10 * time.Second}} { // HTTP/2, then HTTP/1.1
		resp, err := c.Get("http://" + s.Addr("in").String() + "/logged?q=1")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	var lines []string
	waitForD(t, 5*time.Second, "two access-log lines", func() bool {
		data, _ := os.ReadFile(logFile)
		lines = strings.Split(strings.TrimSpace(string(data)), "\n")
		return len(data) > 0 && len(lines) >= 2
	})
	// The lines by proto: with HTTP/1.1 backends, HTTP/2 streams are served on the event-loop
	// engine's shards, whose lines are written by a goroutine of the shard's, so the two
	// planes' lines may come in either order.
	byProto := map[string]map[string]any{}
	for i, l := range lines {
		var e map[string]any
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("line %d is not JSON: %v\n%s", i, err, l)
		}
		p, _ := e["proto"].(string)
		byProto[p] = e
	}
	var keys []string
	for _, proto := range []string{"HTTP/2.0", "HTTP/1.1"} {
		e := byProto[proto]
		if e == nil {
			t.Fatalf("no %s line in %q", proto, lines)
		}
		for k, want := range map[string]any{"listener": "in", "method": "GET", "uri": "/logged?q=1", "status": 201.0, "pool": "p", "backend": "b1", "proto": proto, "termination": "--"} {
			if e[k] != want {
				t.Errorf("%s line: %s = %v, want %v", proto, k, e[k], want)
			}
		}
		var ks []string
		for k := range e {
			ks = append(ks, k)
		}
		slices.Sort(ks)
		if keys != nil && !slices.Equal(ks, keys) {
			t.Errorf("HTTP/1.1 line keys %v, HTTP/2 line keys %v", ks, keys)
		}
		keys = ks
	}
}

// bothBackendProtocols runs test once with h2c backends and once with HTTP/1.1 ones: the rules
// are the same.
func bothBackendProtocols(t *testing.T, test func(t *testing.T, protocol string)) {
	for _, protocol := range []string{"h2c", "http1"} {
		t.Run(protocol, func(t *testing.T) { test(t, protocol) })
	}
}
