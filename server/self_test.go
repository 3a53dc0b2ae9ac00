package server

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestBackendMayNotBeAListener: the runtime API refuses every bound listener of the process
// (http, tcp, udp, port 0 included) as a backend, and a reload naming one is refused.
func TestBackendMayNotBeAListener(t *testing.T) {
	be := namedBackend(t, "A")
	s, file := startFile(t, fmt.Sprintf(`
listeners:
  - {name: web, address: "127.0.0.1:0"}
  - {name: db, address: "127.0.0.1:0", protocol: tcp}
pools:
  - {name: p, backends: [{name: a, address: %q}]}
  - {name: t, backends: [{name: b, address: %q}]}
routes:
  - {listener: web, pool: p}
  - {listener: db, pool: t}
admin: {address: "127.0.0.1:0"}
`, be, be))
	for _, l := range []string{"web", "db"} {
		addr := s.Addr(l).String()
		req, _ := http.NewRequest("POST", "http://"+s.AdminAddr()+"/api/pools/p/backends", strings.NewReader(`{"address":"`+addr+`"}`))
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 400 || !strings.Contains(string(body), "listener "+l) {
			t.Errorf("adding listener %s (%s) as a backend: %d %s", l, addr, resp.StatusCode, body)
		}
	}
	if n := len(s.pools["p"].Backends()); n != 1 {
		t.Fatalf("pool p has %d backends after the refusals", n)
	}
	writeFile(t, file, fmt.Sprintf(`
listeners:
  - {name: web, address: "127.0.0.1:0"}
  - {name: db, address: "127.0.0.1:0", protocol: tcp}
pools:
  - {name: p, backends: [{name: a, address: %q}, {name: loop, address: %q}]}
  - {name: t, backends: [{name: b, address: %q}]}
routes:
  - {listener: web, pool: p}
  - {listener: db, pool: t}
admin: {address: "127.0.0.1:0"}
`, be, s.Addr("web").String(), be))
	if err := s.Reload(); err == nil || !strings.Contains(err.Error(), "listener web") {
		t.Fatalf("a reload naming listener web as a backend: %v", err)
	}
}
