package loadgen

import (
	"ballast/internal/refused"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"ballast/lab/backend"
)

func startBackend(t testing.TB, cfg backend.Config) *backend.Server {
	t.Helper()
	s, err := backend.Listen("127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// recorder is a test server that records request URIs in arrival order and names itself
// after names[i mod len] on its i-th response.
type recorder struct {
	mu    sync.Mutex
	uris  []string
	names []string
	ln    net.Listener
}

func startRecorder(t *testing.T, names ...string) *recorder {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &recorder{names: names, ln: ln}
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		r.mu.Lock()
		i := len(r.uris)
		r.uris = append(r.uris, string(ctx.RequestURI()))
		r.mu.Unlock()
		if len(r.names) > 0 {
			ctx.Response.Header.Set(HeaderBackend, r.names[i%len(r.names)])
		}
		ctx.SetBodyString("ok")
	}}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Shutdown() })
	return r
}

func run(t *testing.T, o Options) *Result {
	t.Helper()
	res, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestCountsAndConnections(t *testing.T) {
	for _, tc := range []struct {
		name      string
		n         int64
		c         int
		keepAlive bool
		wantConns int64
	}{
		{"keep-alive", 537, 7, true, 7},
		{"keep-alive, c > n", 3, 10, true, 3},
		{"new connection per request", 120, 4, false, 120},
		{"single", 1, 1, false, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startBackend(t, backend.Config{Name: "b1", Workers: 8})
			res := run(t, Options{URL: "http://" + s.Addr() + "/", N: tc.n, C: tc.c, KeepAlive: tc.keepAlive})
			st := s.Stats()
			if res.Requests != tc.n || res.Failed != 0 || res.Non2xx != 0 || st.Completed != tc.n {
				t.Errorf("requests %d failed %d non2xx %d (server completed %d), want %d, 0, 0", res.Requests, res.Failed, res.Non2xx, st.Completed, tc.n)
			}
			if st.Conns != tc.wantConns || res.Conns != tc.wantConns {
				t.Errorf("server accepted %d connections, client opened %d, want %d", st.Conns, res.Conns, tc.wantConns)
			}
			if res.Split["b1"] != tc.n || len(res.Split) != 1 {
				t.Errorf("split %v, want b1: %d", res.Split, tc.n)
			}
			if res.Latency.Count() != uint64(tc.n) || res.BodyBytes != backend.DefaultBody || res.Status[200] != tc.n {
				t.Errorf("latency count %d, body %d, status %v", res.Latency.Count(), res.BodyBytes, res.Status)
			}
			if res.P50Ms <= 0 || res.MaxMs < res.P99Ms || res.P99Ms < res.P90Ms || res.P90Ms < res.P50Ms || res.TTFBP50Ms <= 0 {
				t.Errorf("quantiles out of order: %+v", res)
			}
		})
	}
}

func TestFailuresAndNon2xx(t *testing.T) {
	for _, tc := range []struct {
		name      string
		cfg       backend.Config
		keepAlive bool
	}{
		{"resets, keep-alive", backend.Config{ResetRate: 0.3, Seed: 5, Workers: 4}, true},
		{"resets, new connections", backend.Config{ResetRate: 0.3, Seed: 6, Workers: 4}, false},
		{"errors", backend.Config{ErrorRate: 0.4, Seed: 7, Workers: 4}, true},
		{"all reset", backend.Config{ResetRate: 1, Workers: 4}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const n = 300
			s := startBackend(t, tc.cfg)
			res := run(t, Options{URL: "http://" + s.Addr() + "/", N: n, C: 4, KeepAlive: tc.keepAlive})
			st := s.Stats()
			if res.Requests != n {
				t.Errorf("requests %d, want %d", res.Requests, n)
			}
			if res.Failed != st.Resets || res.Non2xx != st.Errors {
				t.Errorf("failed %d non2xx %d, server reset %d and erred %d", res.Failed, res.Non2xx, st.Resets, st.Errors)
			}
			if (tc.cfg.ResetRate > 0) != (res.Failed > 0) || (tc.cfg.ErrorRate > 0) != (res.Non2xx > 0) {
				t.Errorf("failed %d non2xx %d for %+v", res.Failed, res.Non2xx, tc.cfg)
			}
			if res.Split["backend"] != n-res.Failed {
				t.Errorf("split %v, want %d answers", res.Split, n-res.Failed)
			}
		})
	}
}

func TestSuffixesInOrder(t *testing.T) {
	rec := startRecorder(t)
	list := []string{"?wait=0", "wait=1", "&wait=2", "/x?wait=3"}
	res := run(t, Options{URL: "http://" + rec.ln.Addr().String() + "/p", N: 10, C: 1, KeepAlive: true, URLSuffixes: list})
	want := []string{"/p?wait=0", "/p?wait=1", "/p?wait=2", "/p/x?wait=3", "/p?wait=0", "/p?wait=1", "/p?wait=2", "/p/x?wait=3", "/p?wait=0", "/p?wait=1"}
	if res.Requests != 10 || !slices.Equal(rec.uris, want) {
		t.Errorf("server saw %v, want %v", rec.uris, want)
	}
	// With more workers the order interleaves, but every suffix still goes out its share.
	rec2 := startRecorder(t)
	run(t, Options{URL: "http://" + rec2.ln.Addr().String() + "/?a=1", N: 40, C: 5, URLSuffixes: list[:2]})
	count := map[string]int{}
	for _, u := range rec2.uris {
		count[u]++
	}
	if count["/?a=1&wait=0"] != 20 || count["/?a=1&wait=1"] != 20 {
		t.Errorf("suffix counts %v, want 20 each", count)
	}
}

// With -R every request is written in index order, as ab's single loop sends them, however
// many workers there are.
func TestSuffixedRequestsLeaveInIndexOrder(t *testing.T) {
	var mu sync.Mutex
	var order []int64
	sentHook = func(i int64) {
		mu.Lock()
		order = append(order, i)
		mu.Unlock()
	}
	t.Cleanup(func() { sentHook = nil })
	rec := startRecorder(t)
	const n = 400
	run(t, Options{URL: "http://" + rec.ln.Addr().String() + "/", N: n, C: 8, KeepAlive: true,
		URLSuffixes: []string{"?a", "?b", "?c"}})
	if len(order) != n {
		t.Fatalf("%d requests written, want %d", len(order), n)
	}
	for k, i := range order {
		if i != int64(k) {
			t.Fatalf("write %d was request %d: requests left out of index order (%v...)", k, i, order[max(0, k-3):k+1])
		}
	}
}

func TestSplit(t *testing.T) {
	rec := startRecorder(t, "a", "b", "b", "c")
	res := run(t, Options{URL: "http://" + rec.ln.Addr().String() + "/", N: 400, C: 3, KeepAlive: true})
	want := map[string]int64{"a": 100, "b": 200, "c": 100}
	if fmt.Sprint(res.Split) != fmt.Sprint(want) {
		t.Errorf("split %v, want %v", res.Split, want)
	}
}

func TestJSONShape(t *testing.T) {
	s := startBackend(t, backend.Config{Name: "j"})
	res := run(t, Options{URL: "http://" + s.Addr() + "/", N: 10, C: 2, KeepAlive: true})
	var m map[string]any
	if err := json.Unmarshal(res.JSON(), &m); err != nil {
		t.Fatal(err)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	want := []string{"failed", "max_ms", "non2xx", "p50_ms", "p90_ms", "p99_ms", "requests", "seconds", "split", "throughput_rps", "ttfb_p50_ms"}
	if !slices.Equal(keys, want) {
		t.Errorf("keys %v, want %v", keys, want)
	}
	if m["requests"].(float64) != 10 || m["split"].(map[string]any)["j"].(float64) != 10 {
		t.Errorf("values %v", m)
	}
}

func TestRequestShape(t *testing.T) {
	var mu sync.Mutex
	var got []string
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		mu.Lock()
		got = append(got, fmt.Sprintf("%s %s host=%s x=%s body=%s close=%v", ctx.Method(), ctx.RequestURI(), ctx.Host(), ctx.Request.Header.Peek("X-Test"), ctx.PostBody(), ctx.Request.Header.ConnectionClose()))
		mu.Unlock()
	}}
	go srv.Serve(ln)
	defer srv.Shutdown()
	run(t, Options{URL: "http://" + ln.Addr().String() + "/q", N: 1, C: 1, Method: "POST",
		Headers: []string{"X-Test: yes", "Host: example.org"}, Body: []byte("hello")})
	want := "POST /q host=example.org x=yes body=hello close=true"
	if len(got) != 1 || got[0] != want {
		t.Errorf("server saw %q, want %q", got, want)
	}
}

func TestHead(t *testing.T) {
	s := startBackend(t, backend.Config{Name: "h", Body: 100})
	res := run(t, Options{URL: "http://" + s.Addr() + "/", N: 5, C: 1, KeepAlive: true, Method: "HEAD"})
	if res.Requests != 5 || res.Failed != 0 || res.Split["h"] != 5 {
		t.Errorf("HEAD: %d requests, %d failed, split %v", res.Requests, res.Failed, res.Split)
	}
}

func TestDurationAndCancel(t *testing.T) {
	s := startBackend(t, backend.Config{Workers: 4})
	res := run(t, Options{URL: "http://" + s.Addr() + "/", C: 2, KeepAlive: true, Duration: 200 * time.Millisecond})
	if res.Requests == 0 || res.Failed != 0 {
		t.Errorf("duration run: %d requests, %d failed", res.Requests, res.Failed)
	}
	// Requests in flight when the run is cancelled are neither completed nor failed.
	slow := startBackend(t, backend.Config{Workers: 4, Service: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for i := 0; slow.Stats().InService < 2 && i < 10000; i++ {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	res, err := Run(ctx, Options{URL: "http://" + slow.Addr() + "/", C: 2, N: 10, KeepAlive: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests != 0 || res.Failed != 0 {
		t.Errorf("cancelled run: %d requests, %d failed, want 0, 0", res.Requests, res.Failed)
	}
}

func TestConnectionRefused(t *testing.T) {
	addr := refused.TCP(t)
	res := run(t, Options{URL: "http://" + addr + "/", N: 5, C: 2})
	if res.Requests != 5 || res.Failed != 5 {
		t.Errorf("refused: %d requests, %d failed, want 5, 5", res.Requests, res.Failed)
	}
}

func TestBadOptions(t *testing.T) {
	for _, o := range []Options{
		{URL: "http://127.0.0.1:1/", N: 1},
		{URL: "http://127.0.0.1:1/", C: 1},
		{URL: "https://127.0.0.1:1/", N: 1, C: 1},
		{URL: "http:///nohost", N: 1, C: 1},
		{URL: "http://127.0.0.1:1/", N: 1, C: 1, Headers: []string{"nocolon"}},
		{URL: "://", N: 1, C: 1},
	} {
		if _, err := Run(context.Background(), o); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
}

func TestWriteText(t *testing.T) {
	s := startBackend(t, backend.Config{Name: "w", ErrorRate: 1})
	res := run(t, Options{URL: "http://" + s.Addr() + "/x", N: 4, C: 1, KeepAlive: true})
	var b strings.Builder
	res.WriteText(&b)
	for _, want := range []string{"Complete requests:      4", "Failed requests:        0", "Non-2xx responses:      4",
		"Requests per second:", "Time taken for tests:", "Transfer rate:", "p99.9", "Document Path:          /x", "  w ", "Keep-Alive requests:    3"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
	var p strings.Builder
	Bar(&p, 10, 0)(5)
	if !strings.Contains(p.String(), " 50%") {
		t.Errorf("bar %q", p.String())
	}
}

// BenchmarkKeepAlive measures the client's cost per request against an in-process backend;
// allocs/op shows the loop allocates nothing (the setup is amortised over b.N).
func BenchmarkKeepAlive(b *testing.B) {
	b.ReportAllocs()
	s := startBackend(b, backend.Config{Workers: 64})
	b.ResetTimer()
	res, err := Run(context.Background(), Options{URL: "http://" + s.Addr() + "/", N: int64(b.N), C: 4, KeepAlive: true})
	if err != nil || res.Failed != 0 {
		b.Fatal(err, res.Failed)
	}
}

// TestTrace: a traced run records every request once, in index order, with its times in
// order and its backend; each request carries its index to the server, which the emulated
// backend's own trace reads, so the two sides can be matched request by request.
func TestTrace(t *testing.T) {
	if HeaderSeq != backend.HeaderSeq {
		t.Fatalf("loadgen sends %q, backend reads %q", HeaderSeq, backend.HeaderSeq)
	}
	for _, keepAlive := range []bool{true, false} {
		t.Run(fmt.Sprintf("keepalive=%v", keepAlive), func(t *testing.T) {
			s := startBackend(t, backend.Config{Name: "b1", Workers: 4, Service: time.Millisecond})
			s.StartTrace()
			const n = 120
			res := run(t, Options{URL: "http://" + s.Addr() + "/x?y=1", N: n, C: 3, KeepAlive: keepAlive, Trace: true,
				URLSuffixes: []string{"ms=0", "ms=2"}})
			if len(res.Trace) != n {
				t.Fatalf("%d events for %d requests", len(res.Trace), n)
			}
			fresh := 0
			for i, e := range res.Trace {
				if e.Index != int64(i) || !e.OK || e.Backend != "b1" {
					t.Fatalf("event %d: %+v", i, e)
				}
				if e.Start < 0 || e.Sent < e.Start || e.Done < e.Sent {
					t.Fatalf("event %d: times out of order: %+v", i, e)
				}
				if e.Fresh {
					fresh++
				}
			}
			if want := map[bool]int{true: 0, false: n}[keepAlive]; fresh != want {
				t.Errorf("%d requests on fresh connections, want %d", fresh, want)
			}
			arr := s.Trace()
			if len(arr) != n {
				t.Fatalf("backend traced %d requests, want %d", len(arr), n)
			}
			seen := map[int64]bool{}
			firsts := 0
			for _, a := range arr {
				if a.Seq < 0 || a.Seq >= n || seen[a.Seq] {
					t.Fatalf("backend saw seq %d (twice: %v)", a.Seq, seen[a.Seq])
				}
				seen[a.Seq] = true
				if want := time.Duration(a.Seq%2) * 2 * time.Millisecond; a.Service != want {
					t.Errorf("seq %d: service %v, want %v (the suffix of its index)", a.Seq, a.Service, want)
				}
				if a.Done.Before(a.Started) || a.Started.Before(a.Arrived.Add(-time.Second)) {
					t.Errorf("seq %d: arrived %v started %v done %v", a.Seq, a.Arrived, a.Started, a.Done)
				}
				if e := res.Trace[a.Seq]; a.Arrived.Sub(res.Begin) < time.Duration(e.Start) || a.Done.Sub(res.Begin) > time.Duration(e.Done) {
					t.Errorf("seq %d: the backend's times are not inside the client's", a.Seq)
				}
				if a.FreshConn {
					firsts++
				}
			}
			if want := map[bool]int{true: 3, false: n}[keepAlive]; firsts != want {
				t.Errorf("%d requests first on their connection, want %d", firsts, want)
			}
		})
	}
	// Without Trace nothing is recorded and no header is sent.
	s := startBackend(t, backend.Config{Name: "b1"})
	s.StartTrace()
	res := run(t, Options{URL: "http://" + s.Addr() + "/", N: 5, C: 1})
	if len(res.Trace) != 0 {
		t.Errorf("untraced run has %d events", len(res.Trace))
	}
	for _, a := range s.Trace() {
		if a.Seq != -1 {
			t.Errorf("untraced request carried seq %d", a.Seq)
		}
	}
}
