package httpproxy

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"ballast/balance"
	"ballast/config"
)

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

func TestBalancerSplits(t *testing.T) {
	backends := []*tinyBackend{newTiny(t, nil), newTiny(t, nil), newTiny(t, nil)}
	var addrs []string
	for _, b := range backends {
		addrs = append(addrs, hostOf(b.Server))
	}
	for _, name := range balance.Names() {
		t.Run(name, func(t *testing.T) {
			a, err := balance.Lookup(name)
			if err != nil {
				t.Fatal(err)
			}
			pc := testPool("p", name, addrs...)
			pc.Backends[2].Weight = 2
			tp := startProxy(t, testConfig(pc))
			c := testClient()
			const n = 300
			counts := make(map[string]int)
			var mu sync.Mutex
			var wg sync.WaitGroup
			sem := make(chan struct{}, 6)
			for i := 0; i < n; i++ {
				wg.Add(1)
				sem <- struct{}{}
				go func(i int) {
					defer wg.Done()
					defer func() { <-sem }()
					resp, err := c.Get(tp.url(fmt.Sprintf("/k/%d", i)))
					if err != nil {
						t.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						t.Errorf("status %d", resp.StatusCode)
					}
					mu.Lock()
					counts[resp.Header.Get("X-Ballast-Backend")]++
					mu.Unlock()
				}(i)
			}
			wg.Wait()
			total := 0
			for id, k := range counts {
				if id == "" {
					t.Errorf("%d responses without X-Ballast-Backend", k)
				}
				total += k
			}
			if total != n || len(counts) < 2 {
				t.Errorf("split %v: want %d requests over at least 2 backends", counts, n)
			}
			// Hash balancers follow weights only over many keys and backend IDs (which are
			// random ports here), so only the key-free ones are held to the weights.
			if a.Caps.Proportional && !a.Caps.NeedsLoad && !a.Caps.NeedsKey && counts[addrs[2]] <= counts[addrs[0]] {
				t.Errorf("split %v: the weight-2 backend should get more than a weight-1 one", counts)
			}
			if a.Caps.NeedsKey {
				// The same URI always lands on the same backend.
				seen := map[string]bool{}
				for i := 0; i < 20; i++ {
					resp, _ := get(t, c, "GET", tp.url("/same/key"), nil, nil)
					seen[resp.Header.Get("X-Ballast-Backend")] = true
				}
				if len(seen) != 1 {
					t.Errorf("one key went to %d backends", len(seen))
				}
			}
			waitFor(t, "in-flight back to 0", func() bool { return inflight(tp.pools["p"]) == 0 })
		})
	}
}

func TestQueue(t *testing.T) {
	gate := make(chan struct{})
	be := newTiny(t, gate)
	pc := testPool("q", "leastconn", hostOf(be.Server))
	pc.MaxConns = 1
	pc.MaxQueue = 2
	pc.QueueTimeout = dur(time.Minute)
	tp := startProxy(t, testConfig(pc))
	c := testClient()

	type result struct {
		status     int
		retryAfter string
		body       string
	}
	results := make(chan result, 4)
	send := func(id int) {
		req, _ := http.NewRequest("GET", tp.url("/"), nil)
		req.Header.Set("X-Req-Id", fmt.Sprint(id))
		resp, err := c.Do(req)
		if err != nil {
			results <- result{status: -1, body: err.Error()}
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		results <- result{resp.StatusCode, resp.Header.Get("Retry-After"), string(b)}
	}
	go send(0)
	waitFor(t, "first request at the backend", func() bool { return be.hits.Load() == 1 })
	for i := 1; i <= 3; i++ {
		go send(i)
	}
	// Two of the three wait in the queue; the third finds it full.
	first := <-results
	if first.status != 503 || first.retryAfter == "" || !strings.Contains(first.body, "queue full") {
		t.Fatalf("queue overflow: %+v, want 503 with Retry-After", first)
	}
	if be.hits.Load() != 1 {
		t.Fatalf("max_conns 1 exceeded: %d requests reached the backend", be.hits.Load())
	}
	close(gate)
	for i := 0; i < 3; i++ {
		if r := <-results; r.status != 200 {
			t.Errorf("queued request: %+v", r)
		}
	}
}

func TestQueueTimeout(t *testing.T) {
	gate := make(chan struct{})
	be := newTiny(t, gate)
	pc := testPool("q", "roundrobin", hostOf(be.Server))
	pc.MaxConns = 1
	pc.MaxQueue = 5
	pc.QueueTimeout = dur(100 * time.Millisecond)
	tp := startProxy(t, testConfig(pc))
	c := testClient()
	done := make(chan int, 1)
	go func() {
		resp, err := c.Get(tp.url("/"))
		if err != nil {
			done <- -1
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	waitFor(t, "first request at the backend", func() bool { return be.hits.Load() == 1 })
	resp, body := get(t, c, "GET", tp.url("/"), nil, nil)
	if resp.StatusCode != 503 || !strings.Contains(string(body), "timed out in the backlog queue") {
		t.Errorf("got %d %q, want 503 queue timeout", resp.StatusCode, body)
	}
	close(gate)
	if s := <-done; s != 200 {
		t.Errorf("first request: %d", s)
	}
}

func TestBackendKilledUnderLoad(t *testing.T) {
	a, b := newTiny(t, nil), newTiny(t, nil)
	// The default retry budget (0.2): a backend that refuses connections is held off for
	// upstream.UnreachableHoldoff after its first refusal, so the requests behind the first ones do not
	// all need a retry.
	pc := testPool("k", "roundrobin", hostOf(a.Server), hostOf(b.Server))
	tp := startProxy(t, testConfig(pc))
	c := testClient()
	var ok, bad atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 2000; i++ {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := c.Get(tp.url(fmt.Sprintf("/w/%d", i)))
				if err != nil {
					bad.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					bad.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Sprintf("%d %s", resp.StatusCode, body))
					continue
				}
				ok.Add(1)
			}
		}()
	}
	waitFor(t, "load running", func() bool { return ok.Load() > 200 })
	a.CloseClientConnections()
	a.Listener.Close()
	a.CloseClientConnections()
	after := ok.Load()
	waitFor(t, "load continuing on the survivor", func() bool { return ok.Load() > after+500 })
	close(stop)
	wg.Wait()
	if bad.Load() != 0 {
		t.Errorf("%d failed GETs of %d (first: %v)", bad.Load(), bad.Load()+ok.Load(), firstErr.Load())
	}
	waitFor(t, "in-flight back to 0", func() bool { return inflight(tp.pools["k"]) == 0 })
	if retries, _ := tp.PoolCounters("k"); retries == 0 {
		t.Error("no retry counted: the kill was not seen by any request")
	}
}

func TestHedging(t *testing.T) {
	slowGate := make(chan struct{})
	defer close(slowGate)
	slow, fast := newTiny(t, slowGate), newTiny(t, nil)
	pc := testPool("h", "roundrobin", hostOf(slow.Server), hostOf(fast.Server))
	pc.Hedge = config.Hedge{Delay: dur(50 * time.Millisecond), MaxHedges: 1}
	pc.Retries.Budget = 1
	tp := startProxy(t, testConfig(pc))
	c := testClient()
	const n = 20
	for i := 0; i < n; i++ {
		id := fmt.Sprint(i)
		resp, body := get(t, c, "GET", tp.url("/h"), nil, map[string]string{"X-Req-Id": id})
		if resp.StatusCode != 200 || string(body) != "ok "+id || resp.Header.Get("X-Req-Id") != id {
			t.Fatalf("request %s: %d %q", id, resp.StatusCode, body)
		}
		if got := resp.Header.Get("X-Ballast-Backend"); got != hostOf(fast.Server) {
			t.Errorf("request %s answered by %s, want the fast backend", id, got)
		}
	}
	if slow.hits.Load() == 0 {
		t.Fatal("the slow backend never got a request: nothing was hedged")
	}
	waitFor(t, "losers cancelled at the slow backend", func() bool { return slow.cancelled.Load() == slow.hits.Load() })
	waitFor(t, "in-flight back to 0", func() bool { return inflight(tp.pools["h"]) == 0 })
	if fast.hits.Load() != n {
		t.Errorf("fast backend served %d, want %d (one per request)", fast.hits.Load(), n)
	}
}

func TestShutdownDrains(t *testing.T) {
	gate := make(chan struct{})
	be := newTiny(t, gate)
	tp := startProxy(t, testConfig(testPool("s", "roundrobin", hostOf(be.Server))))
	c := testClient()
	done := make(chan string, 1)
	go func() {
		resp, err := c.Get(tp.url("/slow"))
		if err != nil {
			done <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		done <- fmt.Sprint(resp.StatusCode, " ", string(b))
	}()
	waitFor(t, "request in flight", func() bool { return be.hits.Load() == 1 })
	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		shut <- tp.Shutdown(ctx)
	}()
	waitFor(t, "new connections refused", func() bool {
		conn, err := net.DialTimeout("tcp", tp.addr, time.Second)
		if err != nil {
			return true
		}
		conn.Close()
		return false
	})
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned %v before the request finished", err)
	default:
	}
	close(gate)
	if got := <-done; got != "200 ok " {
		t.Errorf("in-flight request: %q", got)
	}
	if err := <-shut; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if err := <-tp.done; err != nil {
		t.Errorf("Serve: %v", err)
	}
	tp.done <- nil // for the cleanup
}
