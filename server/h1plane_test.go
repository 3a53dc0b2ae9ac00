package server

import (
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"testing"
)

// TestEnginePlane: a plain-HTTP listener is served by the event-loop engine (its counters
// move), traffic policy applies there through the HTTP core (a denied client gets 403 from
// the engine), a reload moves its routes, and a configuration with a compressing route is
// the engine's too (it compresses on the shards).
func TestEnginePlane(t *testing.T) {
	a, b := namedBackend(t, "a"), namedBackend(t, "b")
	yaml := func(backend, route string) string {
		return fmt.Sprintf(`listeners:
  - name: web
    address: 127.0.0.1:0
  - name: guarded
    address: 127.0.0.1:0
    deny: ["127.0.0.0/8"]
pools:
  - name: p
    backends:
      - address: %s
routes:
  - pool: p
%s`, backend, route)
	}
	s, file := startFile(t, yaml(a, ""))
	web, guarded := "http://"+s.Addr("web").String(), "http://"+s.Addr("guarded").String()
	var hp *httpPlane
	for _, pl := range s.planes {
		if p, ok := pl.(*httpPlane); ok {
			hp = p
		}
	}
	if hp == nil || hp.engine == nil {
		t.Fatal("the engine was not built")
	}
	for range 3 {
		if code, body := get(t, web+"/"); code != 200 || body != "a" {
			t.Fatalf("web: %d %q", code, body)
		}
	}
	if n := hp.engine.Stats().Requests; n != 3 {
		t.Fatalf("the engine served %d requests, want 3", n)
	}
	if code, _ := get(t, guarded+"/"); code != 403 || hp.engine.Stats().Requests != 4 {
		t.Fatalf("the listener with policy: %d, engine requests %d (want 403 from the engine)", code, hp.engine.Stats().Requests)
	}
	writeFile(t, file, yaml(b, ""))
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	if code, body := get(t, web+"/"); code != 200 || body != "b" {
		t.Fatalf("after the reload: %d %q", code, body)
	}
	// The count follows the response's last byte to the client: wait for it, bounded.
	waitUntil(t, "the engine's response counted in the core's status classes", func() bool {
		return hp.Responses(s.pool("p").Backends()[0])[2] > 0
	})
	// A reload that adds compression: the engine compresses the next response itself.
	writeFile(t, file, yaml(b, "    compress: {types: [text/plain], min_size: 0, algorithms: [gzip]}"))
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("GET", web+"/", nil)
	req.Header.Set("Accept-Encoding", "gzip")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	zr, err := gzip.NewReader(resp.Body)
	if err != nil {
		t.Fatalf("Content-Encoding %q: %v", resp.Header.Get("Content-Encoding"), err)
	}
	body, _ := io.ReadAll(zr)
	if resp.Header.Get("Content-Encoding") != "gzip" || string(body) != "b" || hp.engine.Stats().Compressed != 1 {
		t.Fatalf("compressed: Content-Encoding %q, %q, engine compressed %d (want gzip, \"b\", 1)", resp.Header.Get("Content-Encoding"), body, hp.engine.Stats().Compressed)
	}
}
