package server

import (
	"fmt"
	"testing"
)

// TestEngineSwitch: with BALLAST_H1=engine a plain-HTTP listener is served by the event-loop
// engine (its counters move, fasthttp's do not), a reload moves its routes, and a listener
// with traffic policy stays on fasthttp.
func TestEngineSwitch(t *testing.T) {
	t.Setenv("BALLAST_H1", "engine")
	a, b := namedBackend(t, "a"), namedBackend(t, "b")
	yaml := func(backend, policy string) string {
		return fmt.Sprintf(`listeners:
  - name: web
    address: 127.0.0.1:0
  - name: guarded
    address: 127.0.0.1:0
%spools:
  - name: p
    backends:
      - address: %s
routes:
  - pool: p
`, policy, backend)
	}
	s, file := startFile(t, yaml(a, "    deny: [\"192.0.2.0/24\"]\n"))
	web, guarded := "http://"+s.Addr("web").String(), "http://"+s.Addr("guarded").String()
	var hp *httpPlane
	for _, pl := range s.planes {
		if p, ok := pl.(*httpPlane); ok {
			hp = p
		}
	}
	if hp == nil || hp.engine == nil {
		t.Fatal("the engine was not built with the switch on")
	}
	for range 3 {
		if code, body := get(t, web+"/"); code != 200 || body != "a" {
			t.Fatalf("web: %d %q", code, body)
		}
	}
	if n := hp.engine.Stats().Requests; n != 3 {
		t.Fatalf("the engine served %d requests, want 3", n)
	}
	if code, _ := get(t, guarded+"/"); code != 200 || hp.engine.Stats().Requests != 3 {
		t.Fatalf("the listener with policy: %d, engine requests %d (want it on fasthttp)", code, hp.engine.Stats().Requests)
	}
	writeFile(t, file, yaml(b, "    deny: [\"192.0.2.0/24\"]\n"))
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	if code, body := get(t, web+"/"); code != 200 || body != "b" {
		t.Fatalf("after the reload: %d %q", code, body)
	}
	if r := hp.Responses(s.pools["p"].Backends()[0]); r[2] == 0 {
		t.Fatalf("responses by class %v: the engine's are not counted", r)
	}
}
