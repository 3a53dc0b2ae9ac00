package httpproxy

import (
	"net/http"
	"reflect"
	"testing"

	"ballast/config"
)

// TestHeaderRules: request and response rules remove, set and add fields, with the
// variables expanded per request, through real sockets.
func TestHeaderRules(t *testing.T) {
	rec := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Server", "leaky/1.0")
		w.Header().Add("Cache-Control", "no-store")
		_, _ = w.Write([]byte("ok"))
	})
	cfg := testConfig(testPool("p", "roundrobin", hostOf(rec.Server)))
	cfg.Listeners[0].RequestID = true
	cfg.Routes[0].RequestHeaders = &config.HeaderRules{
		Remove: []string{"x-secret"},
		Set: []string{"X-Client: ${client_ip}", "X-Scheme: ${scheme}", "X-Host: [${host}]",
			"X-Id: id=${request_id}", "X-Literal: costs $$5", "X-Empty:"},
		Add: []string{"X-Multi: b"},
	}
	cfg.Routes[0].ResponseHeaders = &config.HeaderRules{
		Remove: []string{"Server"},
		Set:    []string{"X-Served-By: ${backend} for ${client_ip}"},
		Add:    []string{"Cache-Control: private"},
	}
	tp := startProxy(t, cfg)
	resp, _ := get(t, testClient(), "GET", tp.url("/"), nil, map[string]string{
		"X-Secret": "hunter2", "X-Multi": "a", "Host": "Example.COM:8080", "X-Literal": "client's",
	})
	got := rec.last(t).header
	id := resp.Header.Get("X-Request-Id")
	want := map[string][]string{
		"X-Secret":  nil,
		"X-Client":  {"127.0.0.1"},
		"X-Scheme":  {"http"},
		"X-Host":    {"[Example.COM:8080]"},
		"X-Id":      {"id=" + id},
		"X-Literal": {"costs $5"},
		"X-Empty":   {""},
		"X-Multi":   {"a", "b"},
	}
	for k, v := range want {
		if g := got.Values(k); !reflect.DeepEqual(g, v) && !(len(g) == 0 && len(v) == 0) {
			t.Errorf("backend got %s = %q, want %q", k, g, v)
		}
	}
	if s := resp.Header.Values("Server"); len(s) != 0 { // the backend's is gone; Ballast adds none (as over HTTP/2)
		t.Errorf("Server %q, want none", s)
	}
	if s := resp.Header.Get("X-Served-By"); s != hostOf(rec.Server)+" for 127.0.0.1" {
		t.Errorf("X-Served-By = %q", s)
	}
	if cc := resp.Header.Values("Cache-Control"); !reflect.DeepEqual(cc, []string{"no-store", "private"}) {
		t.Errorf("Cache-Control = %q, want the backend's and the added one", cc)
	}
}

// TestHeaderRulesOnlyTheirRoute: a route's rules do not touch requests of another route.
func TestHeaderRulesOnlyTheirRoute(t *testing.T) {
	rec := newRecorder(t, nil)
	cfg := testConfig(testPool("p", "roundrobin", hostOf(rec.Server)))
	cfg.Routes = append([]config.Route{{PathPrefix: "/tagged/", Pool: "p", RoutePolicy: config.RoutePolicy{
		RequestHeaders: &config.HeaderRules{Set: []string{"X-Tag: yes"}}}}}, cfg.Routes...)
	tp := startProxy(t, cfg)
	c := testClient()
	get(t, c, "GET", tp.url("/tagged/x"), nil, nil)
	if g := rec.last(t).header.Get("X-Tag"); g != "yes" {
		t.Errorf("tagged route: X-Tag %q", g)
	}
	get(t, c, "GET", tp.url("/plain"), nil, nil)
	if g := rec.last(t).header.Get("X-Tag"); g != "" {
		t.Errorf("plain route: X-Tag %q", g)
	}
}
