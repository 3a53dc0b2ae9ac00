package admin

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"ballast/config"
)

const (
	testToken     = "change-token-0123456789"
	testReadToken = "read-token-0123456789ab"
)

// raw sends body as it is to the admin API.
func (s *stack) raw(t *testing.T, method, path, token, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, s.admin+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := testHTTP.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestAddTakesOneObjectAndSaneNames: POST /api/pools/P/backends takes exactly one JSON object
// (trailing data is refused, not ignored) and names of at most 128 bytes of a token-like
// charset; nothing refused is added.
func TestAddTakesOneObjectAndSaneNames(t *testing.T) {
	a := newTestBackend(t, "a")
	s := startStack(t, "", pool("web", a))
	name := func(n string) string { return `{"address":"127.0.0.1:9","name":"` + n + `"}` }
	cases := []struct {
		what, body string
		want       int
	}{
		{"two objects", `{"address":"127.0.0.1:9","name":"x1"}{"address":"127.0.0.1:10","name":"x2"}`, 400},
		{"trailing garbage", `{"address":"127.0.0.1:9","name":"x1"} junk`, 400},
		{"a newline in the name", name(`x\ny`), 400},
		{"HTML in the name", name("<b>x</b>"), 400},
		{"a space in the name", name("x y"), 400},
		{"129 bytes", name(strings.Repeat("n", 129)), 400},
		{"60 KB", name(strings.Repeat("n", 60<<10)), 400},
		{"an address as name with a newline", `{"address":"127.0.0.1:9\n"}`, 400},
		{"128 bytes", name(strings.Repeat("n", 128)), 200},
		{"trailing white space", `{"address":"127.0.0.1:11","name":"web-2.x_y:z"}` + "\n \t", 200},
	}
	for _, c := range cases {
		if code, out := s.raw(t, "POST", "/api/pools/web/backends", "", c.body); code != c.want {
			t.Errorf("%s: %d %s, want %d", c.what, code, out, c.want)
		}
	}
	if n := len(s.pools["web"].Backends()); n != 3 {
		t.Fatalf("the pool has %d backends, want 3 (a and the two valid additions)", n)
	}
}

// TestBackendMayNotBeTheAdminListener: the admin listener's own address (and localhost for
// it) is refused as a backend, through the API and in a reloaded configuration.
func TestBackendMayNotBeTheAdminListener(t *testing.T) {
	a := newTestBackend(t, "a")
	s := startStack(t, "", pool("web", a))
	addr := strings.TrimPrefix(s.admin, "http://")
	_, port, _ := strings.Cut(addr, ":")
	for _, target := range []string{addr, "localhost:" + port, "0.0.0.0:" + port} {
		code, out := s.raw(t, "POST", "/api/pools/web/backends", "", `{"address":"`+target+`"}`)
		if code != 400 || !strings.Contains(out, "admin listener") {
			t.Errorf("adding %s: %d %s, want 400 naming the admin listener", target, code, out)
		}
	}
	if n := len(s.pools["web"].Backends()); n != 1 {
		t.Fatalf("%d backends after the refusals", n)
	}
	reload := *s.cfg
	pc := pool("web", a)
	pc.Backends = append(pc.Backends, config.Backend{Name: "self", Address: addr, Weight: 1})
	reload.Pools = []config.Pool{pc}
	if err := s.plane.Check(&reload); err == nil || !strings.Contains(err.Error(), "admin listener") {
		t.Fatalf("a reload naming the admin listener as a backend: %v", err)
	}
}

// TestReadsNeedAToken: with admin.reads: token, GET /api/pools, a pool and /metrics need the
// change token or the read token; the read token changes nothing; the page is served and
// says it needs the token.
func TestReadsNeedAToken(t *testing.T) {
	a := newTestBackend(t, "a")
	s := startStackAdmin(t, config.Admin{Address: "127.0.0.1:0", Token: testToken, ReadToken: testReadToken, Reads: config.ReadsToken}, pool("web", a))
	for _, path := range []string{"/api/pools", "/api/pools/web", "/metrics"} {
		for _, c := range []struct {
			token string
			want  int
		}{{"", 401}, {"wrong-token-0123456789", 401}, {testReadToken, 200}, {testToken, 200}} {
			if code, out := s.raw(t, "GET", path, c.token, ""); code != c.want {
				t.Errorf("GET %s with %q: %d %.80s, want %d", path, c.token, code, out, c.want)
			}
		}
	}
	if code, _ := s.raw(t, "POST", "/api/pools/web/backends/a/drain", testReadToken, "{}"); code != 401 {
		t.Errorf("a change with the read token: %d, want 401", code)
	}
	code, page := s.raw(t, "GET", "/", "", "")
	if code != 200 || !strings.Contains(page, `name="ballast-reads-need-token" content="true"`) {
		t.Errorf("status page: %d, reads-need-token meta missing", code)
	}
}

// TestTokensAtLeast16Bytes: a short admin.token or admin.read_token is refused with the rule
// in the message, by the file's validation and by the plane itself.
func TestTokensAtLeast16Bytes(t *testing.T) {
	for _, adm := range []config.Admin{
		{Address: "127.0.0.1:0", Token: "x"},
		{Address: "127.0.0.1:0", Token: testToken, ReadToken: "short"},
	} {
		cfg := &config.Config{Pools: []config.Pool{pool("web", newTestBackend(t, "a"))}, Admin: adm}
		if err := config.Check("t", cfg); err == nil || !strings.Contains(err.Error(), "at least 16 bytes") {
			t.Errorf("config.Check(%+v) = %v", adm, err)
		}
		if err := newTestPlane(t).Install(cfg, nil); err == nil || !strings.Contains(err.Error(), "at least 16 bytes") {
			t.Errorf("Install(%+v) = %v", adm, err)
		}
	}
}
