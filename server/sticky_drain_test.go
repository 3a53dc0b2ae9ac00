package server

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestStickyDrain: on both HTTP planes (HTTP/1.1 and h2c on one listener), a draining backend
// keeps its cookie-pinned requests and takes no unpinned one (HAProxy's DRAIN); disabled, it
// moves them; a drain with a grace moves them once the grace has passed. The changes go
// through the admin API.
func TestStickyDrain(t *testing.T) {
	a, b, c := namedBackend(t, "a"), namedBackend(t, "b"), namedBackend(t, "c")
	s, _ := startFile(t, fmt.Sprintf(`
listeners: [{name: web, address: "127.0.0.1:0", h2c: true}]
pools:
  - name: p
    balancer: roundrobin
    sticky: {cookie: SRV}
    backends: [{name: a, address: %q}, {name: b, address: %q}, {name: c, address: %q}]
admin: {address: "127.0.0.1:0"}
`, a, b, c))
	url := "http://" + s.Addr("web").String() + "/"
	h1 := &http.Client{Transport: &http.Transport{}}
	for _, plane := range []struct {
		name string
		c    *http.Client
	}{{"HTTP/1.1", h1}, {"h2c", h2cClient()}} {
		t.Run(plane.name, func(t *testing.T) {
			get := func(cookie string) (string, string) {
				req, _ := http.NewRequest("GET", url, nil)
				if cookie != "" {
					req.Header.Set("Cookie", cookie)
				}
				resp, err := plane.c.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				body, _ := io.ReadAll(resp.Body)
				set, _, _ := strings.Cut(resp.Header.Get("Set-Cookie"), ";")
				return string(body), set
			}
			first, cookie := get("")
			if cookie == "" {
				t.Fatal("no sticky cookie")
			}
			defer func() {
				if code := adminPost(t, s.AdminAddr(), "/api/pools/p/backends/"+first+"/enable", ""); code != 200 {
					t.Fatalf("enable: %d", code)
				}
			}()
			if code := adminPost(t, s.AdminAddr(), "/api/pools/p/backends/"+first+"/drain", ""); code != 200 {
				t.Fatalf("drain: %d", code)
			}
			for i := range 6 {
				if got, _ := get(cookie); got != first {
					t.Fatalf("request %d pinned to draining %s went to %s", i, first, got)
				}
				if got, _ := get(""); got == first {
					t.Fatalf("an unpinned request went to draining %s", first)
				}
			}
			if code := adminPost(t, s.AdminAddr(), "/api/pools/p/backends/"+first+"/disable", ""); code != 200 {
				t.Fatalf("disable: %d", code)
			}
			if got, set := get(cookie); got == first || set == "" {
				t.Fatalf("pinned to disabled %s: served by %s, new cookie %q", first, got, set)
			}
			// A drain with a grace: pinned requests stay until it ends, then move.
			if code := adminPost(t, s.AdminAddr(), "/api/pools/p/backends/"+first+"/enable", ""); code != 200 {
				t.Fatalf("enable: %d", code)
			}
			start := time.Now()
			resp, err := http.Post("http://"+s.AdminAddr()+"/api/pools/p/backends/"+first+"/drain", "application/json", strings.NewReader(`{"grace": "400ms"}`))
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("drain with a grace: %v %v", resp, err)
			}
			resp.Body.Close()
			// The grace began between start and answered: before answered+400ms it has ended.
			answered := time.Now()
			if got, _ := get(cookie); got != first && time.Since(start) < 400*time.Millisecond {
				t.Fatalf("within the grace a request pinned to %s went to %s", first, got)
			}
			time.Sleep(time.Until(answered.Add(400 * time.Millisecond)))
			if got, _ := get(cookie); got == first {
				t.Fatalf("after the grace a request pinned to %s still went there", first)
			}
		})
	}
}
