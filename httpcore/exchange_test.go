package httpcore

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"ballast/config"
	"ballast/upstream"
)

// coreFor installs cfg (with a listener "web" added when it has none) on a fresh Core over
// pools built from it.
func coreFor(t testing.TB, cfg *config.Config) *Core {
	t.Helper()
	if len(cfg.Listeners) == 0 {
		cfg.Listeners = []config.Listener{{Name: "web", Address: "127.0.0.1:0"}}
	}
	pools := map[string]*upstream.Pool{}
	for _, pc := range cfg.Pools {
		if pc.Balancer == "" {
			pc.Balancer = "roundrobin"
		}
		p, err := upstream.NewPool(pc.Spec(nil), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		pools[pc.Name] = p
	}
	c := New(nil)
	t.Cleanup(c.Close)
	if err := c.Swap(cfg, pools); err != nil {
		t.Fatal(err)
	}
	return c
}

func onePool(routes ...config.Route) *config.Config {
	return &config.Config{
		Pools:  []config.Pool{{Name: "p", Balancer: "roundrobin", Backends: []config.Backend{{Address: "127.0.0.1:1", Name: "b1", Weight: 1}}}},
		Routes: routes,
	}
}

var peer = netip.MustParseAddr("127.0.0.1")

// begin starts r on c's "web" listener from peer and routes it.
func begin(t *testing.T, c *Core, r *testReq) *Exchange {
	t.Helper()
	x := &Exchange{}
	tb := c.Table()
	x.Begin(tb, tb.Listener("web"), r, Conn{Peer: peer})
	x.Route(r)
	return x
}

func TestRouteMatch(t *testing.T) {
	cfg := &config.Config{
		Listeners: []config.Listener{{Name: "web"}, {Name: "admin"}},
		Pools:     []config.Pool{{Name: "a", Balancer: "roundrobin"}, {Name: "b", Balancer: "roundrobin"}, {Name: "c", Balancer: "roundrobin"}},
		Routes: []config.Route{
			{Listener: "admin", Pool: "c"},
			{Host: "Api.Example.com", PathPrefix: "/v1/", Pool: "a"},
			{PathPrefix: "/static/", Pool: "b"},
			{Pool: "a"},
		},
	}
	tb := coreFor(t, cfg).Table()
	tests := []struct{ listener, host, path, want string }{
		{"web", "api.example.com", "/v1/users", "a"},
		{"web", "API.EXAMPLE.COM:8443", "/v1/x", "a"},
		{"web", "other.com", "/v1/x", "a"},
		{"web", "other.com", "/static/x.css", "b"},
		{"web", "other.com", "//static/./x.css", "b"}, // the normalised path matches
		{"web", "other.com", "/%73tatic/x.css", "b"},
		{"admin", "api.example.com", "/v1/", "c"},
		{"web", "[::1]:80", "/", "a"},
	}
	for _, tc := range tests {
		r := newReq("GET", tc.path)
		r.host = tc.host
		x := &Exchange{}
		x.Begin(tb, tb.Listener(tc.listener), r, Conn{Peer: peer})
		rt := x.Route(r)
		if rt == nil || rt.Pool().Name != tc.want {
			t.Errorf("Route(%s, %s, %s) = %v, want %s", tc.listener, tc.host, tc.path, rt, tc.want)
		}
	}
	cfg.Routes = cfg.Routes[1:3]
	tb = coreFor(t, cfg).Table()
	x := &Exchange{}
	r := newReq("GET", "/")
	r.host = "x"
	x.Begin(tb, tb.Listener("web"), r, Conn{Peer: peer})
	if rt := x.Route(r); rt != nil || x.Reply.Status != 404 || x.Reply.Term != "LR" {
		t.Errorf("an unmatched request: route %v, reply %d %s; want none, 404 LR", rt, x.Reply.Status, x.Reply.Term)
	}
}

func TestAdmit(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy config.RoutePolicy
		req    *testReq
		status int
		term   string
		check  func(*Reply) string
	}{
		{"deny", config.RoutePolicy{Deny: []string{"127.0.0.0/8"}}, newReq("GET", "/"), 403, "PR", nil},
		{"allow", config.RoutePolicy{Allow: []string{"10.0.0.0/8"}}, newReq("GET", "/"), 403, "PR", nil},
		{"allowed", config.RoutePolicy{Allow: []string{"127.0.0.1/32"}}, newReq("GET", "/"), 0, "", nil},
		{"body over the limit", config.RoutePolicy{MaxBodyBytes: 5}, &testReq{method: "POST", target: "/", cl: 6}, 413, "PR",
			func(r *Reply) string {
				if !r.Close {
					return "the connection stays open with the body unread"
				}
				return ""
			}},
		{"body within", config.RoutePolicy{MaxBodyBytes: 5}, &testReq{method: "POST", target: "/", cl: 5}, 0, "", nil},
		{"redirect", config.RoutePolicy{Redirect: &config.Redirect{Status: 308, Scheme: "https"}}, newReq("GET", "/a?b"), 308, "LR",
			func(r *Reply) string {
				if string(r.Location) != "https://app.test/a?b" {
					return "Location " + string(r.Location)
				}
				return ""
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := coreFor(t, onePool(config.Route{Pool: "p", RoutePolicy: tc.policy}))
			x := begin(t, c, tc.req)
			ok := x.Admit(tc.req)
			if ok != (tc.status == 0) || x.Reply.Status != tc.status || x.Reply.Term != tc.term {
				t.Fatalf("Admit = %v, reply %d %q; want %d %q", ok, x.Reply.Status, x.Reply.Term, tc.status, tc.term)
			}
			if tc.check != nil {
				if msg := tc.check(&x.Reply); msg != "" {
					t.Error(msg)
				}
			}
		})
	}
}

func TestRateLimitAdmit(t *testing.T) {
	c := coreFor(t, onePool(config.Route{Pool: "p", RoutePolicy: config.RoutePolicy{RateLimit: &config.RateLimit{Rate: 0.01, Burst: 2, Key: "source_ip", MaxKeys: 10}}}))
	for i, want := range []bool{true, true, false, false} {
		r := newReq("GET", "/")
		x := begin(t, c, r)
		if got := x.Admit(r); got != want {
			t.Fatalf("request %d admitted %v, want %v", i, got, want)
		}
		if !want && (x.Reply.Status != 429 || string(x.Reply.RetryAfter) != "100") {
			t.Errorf("request %d: %d Retry-After %q, want 429 and 100 s", i, x.Reply.Status, x.Reply.RetryAfter)
		}
	}
}

// TestRewriteAndRedirectOnTheNormalisedPath: however the path is spelled, the rewrite applies
// to what the route matched, so a redirect never points at itself.
func TestRewriteAndRedirectOnTheNormalisedPath(t *testing.T) {
	c := coreFor(t, onePool(
		config.Route{PathPrefix: "/old/", RoutePolicy: config.RoutePolicy{
			Rewrite: &config.Rewrite{Prefix: "/old/", Replacement: "/new/"}, Redirect: &config.Redirect{Status: 301}}},
		config.Route{PathPrefix: "/api", Pool: "p", RoutePolicy: config.RoutePolicy{Rewrite: &config.Rewrite{StripPrefix: "/api"}}},
		config.Route{Pool: "p"},
	))
	for _, target := range []string{"/old/x", "//old/x", "/%6fld/x", "/old%2Fx", "/a/../old/x", "/old/./x"} {
		r := newReq("GET", target+"?q=1")
		x := begin(t, c, r)
		if x.Admit(r) || string(x.Reply.Location) != "http://app.test/new/x?q=1" {
			t.Errorf("%s: Location %q, want http://app.test/new/x?q=1", target, x.Reply.Location)
		}
	}
	for target, want := range map[string]string{"/api/users": "/users", "//api/users": "/users", "/api//users?a=%20": "/users?a=%20", "/api/a%20b": "/a%20b", "/api/100%25": "/100%25"} {
		r := newReq("GET", target)
		x := begin(t, c, r)
		if !x.Admit(r) {
			t.Fatalf("%s refused", target)
		}
		s := r.scan()
		x.Prepare(r, &s, false)
		if r.target != want {
			t.Errorf("%s forwarded as %s, want %s", target, r.target, want)
		}
		x.Log(r, &Done{})
	}
}

func TestRedirectWithoutHostNamesTheListener(t *testing.T) {
	c := coreFor(t, onePool(config.Route{RoutePolicy: config.RoutePolicy{Redirect: &config.Redirect{Status: 302, Path: "/new/x"}}}))
	r := newReq("GET", "/old/x")
	r.host, r.proto = "", "HTTP/1.0"
	x := begin(t, c, r)
	if x.Admit(r) || string(x.Reply.Location) != "http://127.0.0.1:8080/new/x" {
		t.Errorf("Location %q, want the listener's address", x.Reply.Location)
	}
}

// TestUntrustedForwardingFields: with trusted_proxies set, a client outside them has its own
// X-Forwarded-For and Forwarded dropped; one inside names the client.
func TestUntrustedForwardingFields(t *testing.T) {
	for _, tc := range []struct {
		trusted  string
		xff, fwd string
		client   string
	}{
		{"10.0.0.0/8", "127.0.0.1", "for=127.0.0.1;proto=http;host=app.test", "127.0.0.1"},
		{"127.0.0.1/32", "203.0.113.9, 127.0.0.1", "for=203.0.113.9, for=127.0.0.1;proto=http;host=app.test", "203.0.113.9"},
	} {
		cfg := onePool(config.Route{Pool: "p"})
		cfg.TrustedProxies = []string{tc.trusted}
		c := coreFor(t, cfg)
		r := newReq("GET", "/", "X-Forwarded-For", "203.0.113.9", "Forwarded", "for=203.0.113.9")
		x := begin(t, c, r)
		s := r.scan()
		x.Prepare(r, &s, false)
		if got := r.get("X-Forwarded-For"); got != tc.xff {
			t.Errorf("trusted %s: X-Forwarded-For %q, want %q", tc.trusted, got, tc.xff)
		}
		if got := r.get("Forwarded"); got != tc.fwd {
			t.Errorf("trusted %s: Forwarded %q, want %q", tc.trusted, got, tc.fwd)
		}
		if x.Client().String() != tc.client {
			t.Errorf("trusted %s: client %s, want %s", tc.trusted, x.Client(), tc.client)
		}
	}
}

func TestRespondCompression(t *testing.T) {
	c := coreFor(t, onePool(config.Route{Pool: "p", RoutePolicy: config.RoutePolicy{Compress: &config.Compress{
		Types: []string{"text/*"}, MinSize: 100, Algorithms: []string{"br", "gzip"}}}}))
	b := c.Table().Pool("p").Upstream.Backends()[0]
	for _, tc := range []struct {
		name          string
		ae            string
		status        int
		ctype, etag   string
		cl            int64
		enc           Encoding
		vary, outETag string
	}{
		{"q-values", "br;q=0.1, gzip;q=1", 200, "text/html", `"v1"`, 1000, EncGzip, "Accept-Encoding", `W/"v1"`},
		{"none accepted", "gzip;q=0", 200, "text/html", `"v1"`, 1000, EncNone, "Accept-Encoding", `"v1"`},
		{"no Accept-Encoding", "", 200, "text/html", `"v1"`, 1000, EncNone, "Accept-Encoding", `"v1"`},
		{"weak stays weak", "gzip", 200, "text/html", `W/"v1"`, 1000, EncGzip, "Accept-Encoding", `W/"v1"`},
		{"too small", "gzip", 200, "text/html", `"v1"`, 10, EncNone, "", `"v1"`},
		{"not the type", "gzip", 200, "image/png", `"v1"`, 1000, EncNone, "", `"v1"`},
		{"304 for a compressed one", "gzip", 304, "", `"v1"`, -1, EncNone, "Accept-Encoding", `W/"v1"`},
		{"304 for an identity one", "identity", 304, "", `"v1"`, -1, EncNone, "Accept-Encoding", `"v1"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newReq("GET", "/")
			if tc.ae != "" {
				r.Add(keyAcceptEnc, []byte(tc.ae))
			}
			x := begin(t, c, r)
			resp := &testResp{status: tc.status, cl: tc.cl}
			if tc.ctype != "" {
				resp.Set(keyContentType, []byte(tc.ctype))
			}
			resp.Set(keyETag, []byte(tc.etag))
			enc := x.Respond(r, resp, b)
			if enc != tc.enc || resp.get("Vary") != tc.vary || resp.get("Etag") != tc.outETag {
				t.Errorf("encoding %v, Vary %q, ETag %q; want %v, %q, %q", enc, resp.get("Vary"), resp.get("Etag"), tc.enc, tc.vary, tc.outETag)
			}
			if enc != EncNone && resp.get("Content-Encoding") != enc.Name() {
				t.Errorf("Content-Encoding %q", resp.get("Content-Encoding"))
			}
		})
	}
}

// TestReplayOnlyIdempotent: a failure after some of the request may have reached a backend is
// retried only for an idempotent method; one where nothing was sent, for any.
func TestReplayOnlyIdempotent(t *testing.T) {
	p := &Pool{}
	for _, tc := range []struct {
		o         Outcome
		idem, ok  bool
		untouched bool
	}{
		{Outcome{Failure: Connect}, false, true, true},
		{Outcome{Failure: Closed, Sent: true}, false, false, true},
		{Outcome{Failure: Closed, Sent: true}, true, true, true},
		{Outcome{Failure: Stale, Reused: true}, false, false, true},
		{Outcome{Failure: Stale, Reused: true}, true, true, true},
		{Outcome{Failure: Timeout}, true, false, true},
		{Outcome{Failure: Connect}, true, false, false},
	} {
		if got := p.Retryable(&tc.o, tc.idem, tc.untouched); got != tc.ok {
			t.Errorf("%v (sent %v, idempotent %v, untouched %v): retry %v, want %v", tc.o.Failure, tc.o.Sent, tc.idem, tc.untouched, got, tc.ok)
		}
	}
}

// TestLogLine: every request gets a line with what it says of itself, the rewritten one its
// target as received.
func TestLogLine(t *testing.T) {
	dir := t.TempDir()
	cfg := onePool(config.Route{Pool: "p", RoutePolicy: config.RoutePolicy{Rewrite: &config.Rewrite{StripPrefix: "/api"}}})
	cfg.Logging = config.Logging{Access: true, AccessLog: config.AccessLog{AccessFile: dir + "/a.log", AccessFormat: "json"}}
	c := coreFor(t, cfg)
	r := newReq("GET", "/api/x", "User-Agent", "ua")
	x := begin(t, c, r)
	x.Admit(r)
	s := r.scan()
	x.Prepare(r, &s, false)
	x.Log(r, &Done{Status: 499, Term: "CH", Pool: x.Pool(), Upstream: time.Millisecond})
	line := readFile(t, dir+"/a.log")
	for _, want := range []string{`"uri":"/api/x"`, `"status":499`, `"termination":"CH"`, `"pool":"p"`, `"user_agent":"ua"`, `"listener":"web"`} {
		if !strings.Contains(line, want) {
			t.Errorf("line %s lacks %s", line, want)
		}
	}
}
