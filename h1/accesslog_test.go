//go:build linux

package h1

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"ballast/config"
	"ballast/internal/h1conformance"
)

// TestAccessLog: every request gets one JSON line, written off the shard, with what the
// request and its backend were.
func TestAccessLog(t *testing.T) {
	rb := h1conformance.NewRawBackend(t)
	file := filepath.Join(t.TempDir(), "access.log")
	cfg := testConfig(testPool("p", "roundrobin", rb.Addr()))
	cfg.Logging = config.Logging{Access: true, AccessLog: config.AccessLog{AccessFile: file}}
	te := startEngine(t, cfg)
	c := testClient()
	for range 5 {
		get(t, c, "GET", te.url("/a?b=1"), nil, map[string]string{"User-Agent": "ua/1"})
	}
	get(t, c, "GET", te.url("/x"), nil, map[string]string{"Host": "nowhere.example"}) // still routed: one catch-all route
	waitFor(t, "six lines", func() bool {
		b, _ := os.ReadFile(file)
		n := 0
		for _, c := range b {
			if c == '\n' {
				n++
			}
		}
		return n == 6
	})
	f, _ := os.Open(file)
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var e map[string]any
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("line %q: %v", sc.Bytes(), err)
		}
		if e["listener"] != "web" || e["status"] != 200.0 || e["pool"] != "p" || e["backend"] != rb.Addr() || e["method"] != "GET" {
			t.Fatalf("line %v", e)
		}
	}
	if te.Stats().LogDropped != 0 {
		t.Fatal("lines dropped")
	}
}
