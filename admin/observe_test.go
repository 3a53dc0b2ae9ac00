package admin

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"ballast/advise"
	"ballast/upstream"
)

func testPool(t *testing.T, name string, ids ...string) *upstream.Pool {
	t.Helper()
	spec := upstream.Spec{Name: name, Balancer: "roundrobin"}
	for _, id := range ids {
		spec.Backends = append(spec.Backends, upstream.BackendSpec{ID: id, Address: "127.0.0.1:1", Weight: 1})
	}
	p, err := upstream.NewPool(spec, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// TestObserverRing: releases written from many goroutines at once are read back whole, the
// newest obsRing of them, oldest first, each with its backend and outcome.
func TestObserverRing(t *testing.T) {
	var o observer
	p := testPool(t, "web", "a", "b")
	bs := p.Backends()
	const writers, each = 8, 1000
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				b := bs[(w+i)%2]
				o.release(p, b, time.Duration(1+i)*time.Microsecond, b.ID == "b")
			}
		}()
		// A reader alongside the writers sees only whole records.
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				for _, r := range o.releases("web") {
					if r.Backend != "a" && r.Backend != "b" || r.Failed != (r.Backend == "b") || r.LatencyNs < 1000 {
						t.Errorf("torn record %+v", r)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	rs := o.releases("web")
	// A writer preempted for a whole lap of the ring can overwrite a newer record with its
	// older one: the reader then skips that slot rather than return it. At most one per writer.
	if len(rs) > obsRing || len(rs) < obsRing-writers {
		t.Fatalf("%d releases kept of %d, want the newest %d (less at most %d)", len(rs), writers*each, obsRing, writers)
	}
	for i := 1; i < len(rs); i++ {
		if rs[i].AtNs < rs[i-1].AtNs {
			t.Fatal("releases out of time order")
		}
	}
	if o.releases("nope") != nil {
		t.Error("a pool never seen has releases")
	}
}

// TestObservedAndAdvice drives the endpoints over a real proxy: the observation counts the
// requests sent, the advice has the contract's shape, is served from the cache within its
// lifetime, and bad requests get clear answers.
func TestObservedAndAdvice(t *testing.T) {
	a, b := newTestBackend(t, "app-1"), newTestBackend(t, "app-2")
	s := startStack(t, "", pool("web", a, b))
	get := func(path string) (int, []byte) {
		t.Helper()
		resp, err := testHTTP.Get(s.admin + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, body
	}
	if code, body := get("/api/pools/web/advice"); code != http.StatusConflict {
		t.Fatalf("advice before any traffic: %d %s, want 409", code, body)
	}
	s.send(t, 200)
	code, body := get("/api/pools/web/observed?releases=1")
	if code != 200 {
		t.Fatalf("observed: %d %s", code, body)
	}
	var o advise.Observation
	if err := json.Unmarshal(body, &o); err != nil {
		t.Fatal(err)
	}
	if o.Pool != "web" || o.Balancer != "roundrobin" || o.Samples != 200 || len(o.Releases) != 200 || len(o.Backends) != 2 {
		t.Fatalf("observation: pool %s balancer %s samples %d releases %d backends %d", o.Pool, o.Balancer, o.Samples, len(o.Releases), len(o.Backends))
	}
	for _, be := range o.Backends {
		if be.Samples != 100 || len(be.ServiceMs) != len(advise.QuantileP) || be.Requests != 100 {
			t.Errorf("backend %+v", be)
		}
	}
	// The sequential client is a closed loop of one.
	if o.Load.Kind != "closed" || o.Load.Concurrency != 1 {
		t.Errorf("load %+v, want closed with one client", o.Load)
	}
	c := NewClient(s.admin, "")
	got, err := c.Observed(context.Background(), "web", false)
	if err != nil || got.Samples != 200 || got.Releases != nil {
		t.Fatalf("client: %d samples, %d releases, %v", got.Samples, len(got.Releases), err)
	}

	code, first := get("/api/pools/web/advice?objective=throughput&runs=2")
	if code != 200 {
		t.Fatalf("advice: %d %s", code, first)
	}
	var adv map[string]any
	if err := json.Unmarshal(first, &adv); err != nil {
		t.Fatal(err)
	}
	if adv["objective"] != "throughput" || adv["best"] == nil || len(adv["choices"].([]any)) < 5 {
		t.Fatalf("advice %v", adv)
	}
	if _, again := get("/api/pools/web/advice?objective=throughput&runs=2"); string(again) != string(first) {
		t.Error("a second request within the cache's lifetime computed the advice again")
	}
	for _, tt := range []struct {
		path string
		code int
	}{
		{"/api/pools/nope/observed", 404},
		{"/api/pools/nope/advice", 404},
		{"/api/pools/web/advice?objective=p50", 400},
		{"/api/pools/web/advice?runs=0", 400},
		{"/api/pools/web/advice?runs=x", 400},
	} {
		if code, body := get(tt.path); code != tt.code {
			t.Errorf("%s: %d %s, want %d", tt.path, code, body, tt.code)
		}
	}
}

// BenchmarkObserveRelease is the ring's cost on the request path: no allocation, and a
// fraction of the histogram's.
func BenchmarkObserveRelease(b *testing.B) {
	var o observer
	p := testPool(&testing.T{}, "web", "a", "b")
	bs := p.Backends()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			o.release(p, bs[i&1], time.Millisecond, false)
			i++
		}
	})
}

// BenchmarkObserveReleaseSerial is the same from one goroutine, beside BenchmarkReleaseObserver.
func BenchmarkObserveReleaseSerial(b *testing.B) {
	var o observer
	p := testPool(&testing.T{}, "web", "a", "b")
	bs := p.Backends()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		o.release(p, bs[i&1], time.Millisecond, false)
		i++
	}
}
