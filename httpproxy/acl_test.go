package httpproxy

import (
	"testing"

	"ballast/config"
)

// TestAccessControl: allow and deny lists on listeners and routes, judged on the client
// address, which X-Forwarded-For supplies only through trusted proxies. Every client here
// connects from 127.0.0.1.
func TestAccessControl(t *testing.T) {
	tests := []struct {
		name           string
		trusted        []string
		listener       config.ListenerPolicy
		route          config.RoutePolicy
		xff            string
		status         int
		backendSeesXFF string // X-Forwarded-For the backend gets, when the request passes
		clientIP       string // ${client_ip} as the backend sees it
	}{
		{name: "no lists", status: 200, backendSeesXFF: "127.0.0.1", clientIP: "127.0.0.1"},
		{name: "route deny", route: config.RoutePolicy{Deny: []string{"127.0.0.0/8"}}, status: 403},
		{name: "route allow elsewhere", route: config.RoutePolicy{Allow: []string{"10.0.0.0/8"}}, status: 403},
		{name: "route allow us", route: config.RoutePolicy{Allow: []string{"10.0.0.0/8", "127.0.0.1"}}, status: 200, backendSeesXFF: "127.0.0.1", clientIP: "127.0.0.1"},
		{name: "deny wins over allow", route: config.RoutePolicy{Allow: []string{"127.0.0.0/8"}, Deny: []string{"127.0.0.1"}}, status: 403},
		{name: "listener deny", listener: config.ListenerPolicy{Deny: []string{"127.0.0.1/32"}}, status: 403},
		{name: "listener allow, route deny", listener: config.ListenerPolicy{Allow: []string{"127.0.0.0/8"}}, route: config.RoutePolicy{Deny: []string{"127.0.0.0/8"}}, status: 403},
		{name: "untrusted XFF is not believed", route: config.RoutePolicy{Allow: []string{"203.0.113.0/24"}}, xff: "203.0.113.9", status: 403},
		{name: "untrusted XFF is appended without trusted_proxies", xff: "203.0.113.9", status: 200, backendSeesXFF: "203.0.113.9, 127.0.0.1", clientIP: "127.0.0.1"},
		{name: "untrusted XFF is dropped with trusted_proxies", trusted: []string{"10.0.0.0/8"}, xff: "203.0.113.9", status: 200, backendSeesXFF: "127.0.0.1", clientIP: "127.0.0.1"},
		{name: "trusted XFF allows", trusted: []string{"127.0.0.1"}, route: config.RoutePolicy{Allow: []string{"203.0.113.0/24"}}, xff: "203.0.113.9", status: 200, backendSeesXFF: "203.0.113.9, 127.0.0.1", clientIP: "203.0.113.9"},
		{name: "trusted XFF denies", trusted: []string{"127.0.0.1"}, route: config.RoutePolicy{Deny: []string{"198.51.100.0/24"}}, xff: "198.51.100.1", status: 403},
		{name: "rightmost untrusted hop", trusted: []string{"127.0.0.1", "10.0.0.0/8"}, xff: "6.6.6.6, 203.0.113.9, 10.1.1.1", status: 200, backendSeesXFF: "6.6.6.6, 203.0.113.9, 10.1.1.1, 127.0.0.1", clientIP: "203.0.113.9"},
		{name: "garbage stops the walk", trusted: []string{"127.0.0.1", "10.0.0.0/8"}, xff: "203.0.113.9, junk, 10.1.1.1", status: 200, backendSeesXFF: "203.0.113.9, junk, 10.1.1.1, 127.0.0.1", clientIP: "10.1.1.1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := newRecorder(t, nil)
			cfg := testConfig(testPool("p", "roundrobin", hostOf(rec.Server)))
			cfg.TrustedProxies = tc.trusted
			cfg.Listeners[0].ListenerPolicy = tc.listener
			cfg.Routes[0].RoutePolicy = tc.route
			cfg.Routes[0].RequestHeaders = &config.HeaderRules{Set: []string{"X-Client: ${client_ip}"}}
			tp := startProxy(t, cfg)
			req := "GET /x HTTP/1.1\r\nHost: h\r\n"
			if tc.xff != "" {
				req += "X-Forwarded-For: " + tc.xff + "\r\n"
			}
			resp, body := rawDo(t, tp.addr, req+"\r\n")
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d (%q), want %d", resp.StatusCode, body, tc.status)
			}
			if tc.status != 200 {
				if rec.count() != 0 {
					t.Errorf("a refused request reached the backend")
				}
				return
			}
			got := rec.last(t).header
			if g := got.Get("X-Forwarded-For"); g != tc.backendSeesXFF {
				t.Errorf("backend X-Forwarded-For %q, want %q", g, tc.backendSeesXFF)
			}
			if g := got.Get("X-Client"); g != tc.clientIP {
				t.Errorf("client_ip %q, want %q", g, tc.clientIP)
			}
		})
	}
}
