package admin

import (
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

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
	// The engine records a request's release on its shard after the response's last bytes
	// were written, so the client may read its answer a moment before the last release is
	// counted: read the observation until it holds all 200 (or 2 s have passed).
	var o advise.Observation
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		code, body := get("/api/pools/web/observed?releases=1")
		if code != 200 {
			t.Fatalf("observed: %d %s", code, body)
		}
		o = advise.Observation{}
		if err := json.Unmarshal(body, &o); err != nil {
			t.Fatal(err)
		}
		if o.Samples >= 200 || time.Now().After(deadline) {
			break
		}
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

// TestReleaseEntriesPerPlane: the release path keeps each backend's records on the backend
// (an attachment) for the plane that saw it first; a second plane in the same process, and a
// pool renamed under the same backend, still count into their own records.
func TestReleaseEntriesPerPlane(t *testing.T) {
	p := testPool(t, "web", "a", "b")
	bs := p.Backends()
	m1, m2 := newMetrics(nil), newMetrics(nil)
	var o1, o2 observer
	for i := range 10 {
		m1.release(p, bs[i%2], time.Millisecond, false)
		o1.release(p, bs[i%2], time.Millisecond, false)
	}
	for range 3 {
		m2.release(p, bs[0], time.Millisecond, false)
		o2.release(p, bs[0], time.Millisecond, false)
	}
	count := func(m *metrics, b *upstream.Backend) uint64 {
		v, ok := m.hist.Load(b)
		if !ok {
			return 0
		}
		e := v.(*histEntry)
		var d dto.Metric
		if err := e.h.metric(m.latency, e.pool, e.id).Write(&d); err != nil {
			t.Fatal(err)
		}
		return d.GetHistogram().GetSampleCount()
	}
	if a, b, c := count(m1, bs[0]), count(m1, bs[1]), count(m2, bs[0]); a != 5 || b != 5 || c != 3 {
		t.Fatalf("histogram counts: plane 1 %d/%d, plane 2 %d; want 5/5, 3", a, b, c)
	}
	if n1, n2 := len(o1.releases("web")), len(o2.releases("web")); n1 != 10 || n2 != 3 {
		t.Fatalf("observed releases: %d and %d, want 10 and 3", n1, n2)
	}
	if e, _ := bs[0].Attachment(histSlot).(*histEntry); e == nil || e.m != m1 {
		t.Fatal("the backend does not hold the first plane's histogram")
	}
	// The same backend under another pool name gets its own series.
	p.Name = "web2"
	m1.release(p, bs[0], time.Millisecond, false)
	o1.release(p, bs[0], time.Millisecond, false)
	if n := len(o1.releases("web2")); n != 1 {
		t.Fatalf("releases under the new name: %d, want 1", n)
	}
	if e, _ := bs[0].Attachment(histSlot).(*histEntry); e == nil || e.pool != "web2" {
		t.Fatal("the attachment did not follow the pool's new name")
	}
}

// TestLatHistMatchesClientGolang: the backends' own latency histogram counts, sums and
// renders as client_golang's histogram with the same buckets does, bounds included (a value
// equal to a bound is in that bucket) and past the last one (+Inf).
func TestLatHistMatchesClientGolang(t *testing.T) {
	ref := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "ref", Buckets: latencyBuckets})
	var h latHist
	for _, d := range []time.Duration{0, 500 * time.Microsecond, 501 * time.Microsecond, time.Millisecond,
		7 * time.Millisecond, 250 * time.Millisecond, 30 * time.Second, time.Minute, 3 * time.Second} {
		h.observe(d)
		ref.Observe(d.Seconds())
	}
	var got, want dto.Metric
	desc := prometheus.NewDesc("x", "x", []string{"pool", "backend"}, nil)
	if err := h.metric(desc, "p", "b").Write(&got); err != nil {
		t.Fatal(err)
	}
	if err := ref.Write(&want); err != nil {
		t.Fatal(err)
	}
	g, w := got.GetHistogram(), want.GetHistogram()
	if g.GetSampleCount() != w.GetSampleCount() || math.Abs(g.GetSampleSum()-w.GetSampleSum()) > 1e-9 {
		t.Fatalf("count/sum %d/%v, want %d/%v", g.GetSampleCount(), g.GetSampleSum(), w.GetSampleCount(), w.GetSampleSum())
	}
	if len(g.GetBucket()) != len(w.GetBucket()) {
		t.Fatalf("%d buckets, want %d", len(g.GetBucket()), len(w.GetBucket()))
	}
	for i, b := range w.GetBucket() {
		if gb := g.GetBucket()[i]; gb.GetUpperBound() != b.GetUpperBound() || gb.GetCumulativeCount() != b.GetCumulativeCount() {
			t.Fatalf("bucket le=%v: %d, want le=%v: %d", gb.GetUpperBound(), gb.GetCumulativeCount(), b.GetUpperBound(), b.GetCumulativeCount())
		}
	}
}

// TestLatencySeriesShared: two backend records with the same pool and ID (a discovered
// backend that left and came back) count into one series, and a scrape renders it once (a
// duplicate would fail the whole scrape).
func TestLatencySeriesShared(t *testing.T) {
	p1 := testPool(t, "web", "a")
	p2 := testPool(t, "web", "a")
	m := newMetrics(nil)
	m.release(p1, p1.Backends()[0], time.Millisecond, false)
	m.release(p2, p2.Backends()[0], time.Millisecond, false)
	reg := prometheus.NewRegistry() // the histograms alone (the live collector needs a Plane)
	reg.MustRegister((*histCollector)(m))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "ballast_backend_latency_seconds" {
			continue
		}
		if n := len(mf.GetMetric()); n != 1 {
			t.Fatalf("%d series, want 1", n)
		}
		if c := mf.GetMetric()[0].GetHistogram().GetSampleCount(); c != 2 {
			t.Fatalf("count %d, want 2", c)
		}
		return
	}
	t.Fatal("no latency histogram in the scrape")
}
