package fleet

import (
	"testing"

	"ballast/config"
)

// FuzzFleetValues: keys and values under the prefix never panic the node's parsers, and a
// backend they accept obeys the configuration's rules.
func FuzzFleetValues(f *testing.F) {
	f.Add("runtime/web/10.0.0.1:80/state", `{"address": "10.0.0.1:80", "weight": 2}`)
	f.Add("runtime/web/a/b/c/weight", "10.0.0.1:80")
	f.Add("runtime//x/state", `{"address": 1}`)
	f.Add("runtime/web/state", `{"address": "h:1", "max_conns": -1, "backup": true}`)
	f.Fuzz(func(t *testing.T, key, value string) {
		if pool, backend, aspect, ok := runtimeKey(key); ok && (pool == "" || backend == "" || aspect == "") {
			t.Fatalf("runtimeKey(%q) = %q %q %q", key, pool, backend, aspect)
		}
		b, err := parseBackend("id", value)
		if err != nil {
			return
		}
		if config.CheckBackend(config.Backend{Address: b.Address, Weight: b.Weight, MaxConns: b.MaxConns}) != nil || b.ID != "id" {
			t.Fatalf("accepted %+v from %q", b, value)
		}
	})
}
