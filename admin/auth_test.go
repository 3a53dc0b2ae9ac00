package admin

import (
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"

	"ballast/balance"
	"ballast/config"
	"ballast/upstream"
)

// handlerPlane is a Plane over one pool of two unreachable backends, with no listener.
func handlerPlane(t testing.TB, token string) (*Plane, *upstream.Pool) {
	t.Helper()
	pc := config.Pool{Name: "web", Balancer: "swrr", Backends: []config.Backend{
		{Name: "a", Address: "127.0.0.1:1", Weight: 2}, {Name: "b", Address: "127.0.0.1:2", Weight: 1}}}
	pl := newTestPlane(t)
	p, err := upstream.NewPool(pc.Spec(pl.ObserveRelease), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	cfg := &config.Config{Pools: []config.Pool{pc}}
	if err := pl.Install(cfg, map[string]*upstream.Pool{"web": p}); err != nil {
		t.Fatal(err)
	}
	pl.token = token
	return pl, p
}

// pageSession loads the status page and returns its session cookie and nonce.
func pageSession(t *testing.T, h http.Handler) (*http.Cookie, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "http://127.0.0.1:9090/", nil))
	if rec.Code != 200 {
		t.Fatalf("GET / = %d", rec.Code)
	}
	cs := rec.Result().Cookies()
	if len(cs) != 1 || cs[0].Name != sessionCookie || !cs[0].HttpOnly || cs[0].SameSite != http.SameSiteStrictMode {
		t.Fatalf("session cookie: %+v", cs)
	}
	m := regexp.MustCompile(`name="ballast-nonce" content="([0-9a-f]{32})"`).FindStringSubmatch(rec.Body.String())
	if m == nil {
		t.Fatal("no nonce in the page")
	}
	return cs[0], m[1]
}

func TestAuthorize(t *testing.T) {
	type req struct {
		host, ctype, origin, fetchSite, auth, nonce string
		cookie                                      bool
		peer                                        string // RemoteAddr; empty = 127.0.0.1
	}
	json := "application/json"
	cases := []struct {
		name  string
		token string
		r     req
		want  int
	}{
		{"loopback JSON", "", req{host: "127.0.0.1:9090", ctype: json}, 200},
		{"localhost JSON", "", req{host: "localhost:9090", ctype: json}, 200},
		{"form post (CSRF shape)", "", req{host: "127.0.0.1:9090", ctype: "application/x-www-form-urlencoded"}, 403},
		{"no content type", "", req{host: "127.0.0.1:9090"}, 403},
		{"DNS rebinding host", "", req{host: "evil.example:9090", ctype: json}, 403},
		{"loopback Host from another machine", "", req{host: "127.0.0.1:9090", ctype: json, peer: "192.0.2.7:40000"}, 403},
		{"loopback Host from another machine, page nonce", "", req{host: "127.0.0.1", ctype: json, cookie: true, nonce: "page", peer: "192.0.2.7:40000"}, 403},
		{"IPv6 loopback peer", "", req{host: "[::1]:9090", ctype: json, peer: "[::1]:40000"}, 200},
		{"IPv4-mapped loopback peer", "", req{host: "127.0.0.1:9090", ctype: json, peer: "[::ffff:127.0.0.1]:40000"}, 200},
		{"foreign origin", "", req{host: "127.0.0.1:9090", ctype: json, origin: "http://evil.example"}, 403},
		{"own origin", "", req{host: "127.0.0.1:9090", ctype: json, origin: "http://127.0.0.1:9090"}, 200},
		{"cross-site fetch", "", req{host: "127.0.0.1:9090", ctype: json, fetchSite: "cross-site"}, 403},
		{"page nonce", "", req{host: "127.0.0.1:9090", ctype: "text/plain", cookie: true, nonce: "page"}, 200},
		{"wrong nonce", "", req{host: "127.0.0.1:9090", ctype: json, cookie: true, nonce: "0123456789abcdef0123456789abcdef"}, 403},
		{"nonce without cookie", "", req{host: "127.0.0.1:9090", ctype: json, nonce: "page"}, 403},
		{"token missing", "t0k", req{host: "10.0.0.1:9090", ctype: json}, 401},
		{"token wrong", "t0k", req{host: "10.0.0.1:9090", ctype: json, auth: "Bearer nope"}, 401},
		{"token right, any host", "t0k", req{host: "10.0.0.1:9090", auth: "Bearer t0k"}, 200},
		{"token right, another machine", "t0k", req{host: "10.0.0.1:9090", auth: "Bearer t0k", peer: "192.0.2.7:40000"}, 200},
		{"token missing, loopback Host from another machine", "t0k", req{host: "127.0.0.1:9090", ctype: json, peer: "192.0.2.7:40000"}, 401},
		{"token right, page nonce", "t0k", req{host: "10.0.0.1:9090", ctype: json, auth: "Bearer t0k", cookie: true, nonce: "page"}, 200},
		{"token right, stale nonce", "t0k", req{host: "10.0.0.1:9090", ctype: json, auth: "Bearer t0k", cookie: true, nonce: "0123456789abcdef0123456789abcdef"}, 403},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pl, p := handlerPlane(t, tc.token)
			h := pl.Handler()
			cookie, nonce := pageSession(t, h)
			r := httptest.NewRequest("POST", "http://"+tc.r.host+"/api/pools/web/backends/b/disable", strings.NewReader("{}"))
			r.Host = tc.r.host
			r.RemoteAddr = "127.0.0.1:40000"
			if tc.r.peer != "" {
				r.RemoteAddr = tc.r.peer
			}
			for k, v := range map[string]string{"Content-Type": tc.r.ctype, "Origin": tc.r.origin, "Sec-Fetch-Site": tc.r.fetchSite, "Authorization": tc.r.auth} {
				if v != "" {
					r.Header.Set(k, v)
				}
			}
			if tc.r.cookie {
				r.AddCookie(cookie)
			}
			switch tc.r.nonce {
			case "":
			case "page":
				r.Header.Set(nonceHeader, nonce)
			default:
				r.Header.Set(nonceHeader, tc.r.nonce)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, r)
			if rec.Code != tc.want {
				t.Fatalf("status %d (%s), want %d", rec.Code, rec.Body.String(), tc.want)
			}
			disabled := p.Backend("b").State() == upstream.StateDisabled
			if disabled != (tc.want == 200) {
				t.Fatalf("b disabled = %v after status %d", disabled, rec.Code)
			}
		})
	}
}

func TestMetricsExposition(t *testing.T) {
	pl, p := handlerPlane(t, "")
	b, err := p.Acquire(0, balance.Tried{})
	if err != nil {
		t.Fatal(err)
	}
	pl.Count(fakeCounters{"a": {5: 1}}, fakeCounters{"web": {0: 1}})
	p.Release(b, 3_000_000, true) // 3 ms, failed
	if err := p.Drain("b"); err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	pl.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	text := string(body)
	for _, want := range []string{
		`ballast_backend_requests_total{backend="a",pool="web"} 1`,
		`ballast_backend_errors_total{backend="a",kind="request",pool="web"} 1`,
		`ballast_backend_in_flight{backend="a",pool="web"} 0`,
		`ballast_backend_state{backend="b",pool="web",state="draining"} 1`,
		`ballast_backend_state{backend="b",pool="web",state="up"} 0`,
		`ballast_backend_weight{backend="a",pool="web"} 2`,
		`ballast_backend_latency_seconds_bucket{backend="a",pool="web",le="0.005"} 1`,
		`ballast_backend_latency_seconds_bucket{backend="a",pool="web",le="0.0025"} 0`,
		`ballast_pool_queue_length{pool="web"} 0`,
		`ballast_pool_queue_wait_seconds_count{pool="web"} 0`,
		`ballast_pool_queue_wait_seconds_bucket{pool="web",le="0.001"} 0`,
		`ballast_pool_queue_wait_seconds_bucket{pool="web",le="30"} 0`,
		`ballast_backend_responses_total{backend="a",class="5xx",pool="web"} 1`,
		`ballast_pool_retries_total{pool="web"} 1`,
		`ballast_pool_hedges_total{pool="web"} 0`,
		`ballast_pool_no_backend_total{pool="web"} 0`,
		`ballast_pool_backends{pool="web",state="draining"} 1`,
		`ballast_backend_lbstatus{backend="a",pool="web"}`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	for _, line := range strings.Split(text, "\n") {
		if line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, "go_") || strings.HasPrefix(line, "process_") || strings.HasPrefix(line, "promhttp_") {
			continue
		}
		if !strings.HasPrefix(line, "ballast_") {
			t.Errorf("metric without the ballast_ prefix: %s", line)
		}
	}
}

func TestQuantile(t *testing.T) {
	h := func(bounds []float64, counts []uint64, total uint64) *dto.Histogram {
		d := &dto.Histogram{SampleCount: proto.Uint64(total)}
		for i, b := range bounds {
			d.Bucket = append(d.Bucket, &dto.Bucket{UpperBound: proto.Float64(b), CumulativeCount: proto.Uint64(counts[i])})
		}
		return d
	}
	cases := []struct {
		name string
		q    float64
		h    *dto.Histogram
		want float64
	}{
		{"all in the first bucket", 0.99, h([]float64{1, 2}, []uint64{100, 100}, 100), 0.99},
		{"interpolated in the second", 0.5, h([]float64{1, 3}, []uint64{0, 100}, 100), 2},
		{"beyond the last finite bound", 0.99, h([]float64{1, 2}, []uint64{10, 10}, 20), 2},
	}
	for _, tc := range cases {
		if got := quantile(tc.q, tc.h); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	if !math.IsNaN(quantile(0.99, &dto.Histogram{})) {
		t.Error("empty histogram should give NaN")
	}
}

func FuzzLoopbackHost(f *testing.F) {
	for _, s := range []string{"127.0.0.1:9090", "localhost", "[::1]:1", "evil.example", "127.0.0.1.evil:80", "LOCALHOST:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if loopbackHost(s) && strings.Contains(strings.ToLower(s), ".example") {
			t.Fatalf("%q taken for loopback", s)
		}
	})
}

// FuzzChangeBodies feeds arbitrary bodies to the handlers that parse one: the answer is a
// 200 or a 4xx, never a 5xx or a panic, and a refused change leaves the pool as it was.
func FuzzChangeBodies(f *testing.F) {
	for _, s := range []string{`{"weight":3}`, `{"weight":null}`, `{"weight":-1}`, `{"address":"127.0.0.1:9","name":"n"}`, `{"address":"x"}`, `{`, ``, `[]`, `{"bogus":1}`} {
		f.Add(s, true)
		f.Add(s, false)
	}
	pl, p := handlerPlane(f, "")
	h := pl.Handler()
	f.Fuzz(func(t *testing.T, body string, weight bool) {
		path := "/api/pools/web/backends"
		if weight {
			path += "/a/weight"
		}
		n := len(p.Backends())
		r := httptest.NewRequest("POST", "http://127.0.0.1"+path, strings.NewReader(body))
		r.RemoteAddr = "127.0.0.1:40000"
		r.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		switch {
		case rec.Code >= 500:
			t.Fatalf("%q: %d %s", body, rec.Code, rec.Body.String())
		case rec.Code != 200 && len(p.Backends()) != n:
			t.Fatalf("%q refused (%d) but the pool changed", body, rec.Code)
		case rec.Code == 200 && !weight:
			// Undo the addition so that the corpus keeps exercising the same pool.
			bs := p.Backends()
			if err := p.Remove(bs[len(bs)-1].ID); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// TestInstallFollowsReloads: after a reload the API acts on the new pools, and a runtime
// override made before it is still reported (upstream carries it over).
func TestInstallFollowsReloads(t *testing.T) {
	pl, p1 := handlerPlane(t, "")
	h := pl.Handler()
	post := func(path, body string) int {
		r := httptest.NewRequest("POST", "http://127.0.0.1"+path, strings.NewReader(body))
		r.RemoteAddr = "127.0.0.1:40000"
		r.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		return rec.Code
	}
	if code := post("/api/pools/web/backends/a/weight", `{"weight":7}`); code != 200 {
		t.Fatalf("weight: %d", code)
	}
	pc := config.Pool{Name: "web", Balancer: "swrr", Backends: []config.Backend{
		{Name: "a", Address: "127.0.0.1:1", Weight: 2}, {Name: "c", Address: "127.0.0.1:3", Weight: 1}}}
	p2, err := upstream.NewPool(pc.Spec(nil), p1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p2.Close)
	if err := pl.Install(&config.Config{Pools: []config.Pool{pc}}, map[string]*upstream.Pool{"web": p2}); err != nil {
		t.Fatal(err)
	}
	if code := post("/api/pools/web/backends/c/drain", ""); code != 200 {
		t.Fatalf("drain c on the reloaded pool: %d", code)
	}
	if p2.Backend("c").State() != upstream.StateDraining {
		t.Fatal("the drain did not reach the new pool")
	}
	if code := post("/api/pools/web/backends/b/drain", ""); code != 404 {
		t.Fatalf("b left with the reload, drain gave %d", code)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/api/pools/web", nil))
	if !strings.Contains(rec.Body.String(), `"weight": 7`) || !strings.Contains(rec.Body.String(), `"draining": true`) {
		t.Fatalf("overrides after reload: %s", rec.Body.String())
	}
}

// fakeCounters stands for a data plane's own counters: by backend ID the status classes,
// by pool name index 0 the retries.
type fakeCounters map[string][6]uint64

func (f fakeCounters) Responses(b *upstream.Backend) [6]uint64 { return f[b.ID] }

func (f fakeCounters) PoolCounters(pool string) (retries, hedges uint64) { return f[pool][0], 0 }
