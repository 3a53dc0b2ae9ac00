//go:build linux

package h1

import (
	"testing"

	"ballast/internal/h1conformance"
	"ballast/upstream"
)

// FuzzRequestHead writes arbitrary bytes to a real listener of the engine and checks the invariant of
// the request path that h1conformance.CheckForwarded states (the same target for both HTTP/1
// planes).
func FuzzRequestHead(f *testing.F) {
	h1conformance.AddSeeds(f)
	tp := startEngine(f, testConfig(testPool("p", "roundrobin", h1conformance.NewRawBackend(f).Addr())))
	f.Fuzz(func(t *testing.T, raw []byte) {
		// A fresh backend (and pool) per input: bytes of an earlier input that reach a backend
		// after its check (a broken body the proxy cuts and closes) cannot count for this one.
		rb := h1conformance.NewRawBackend(t)
		cfg := testConfig(testPool("p", "roundrobin", rb.Addr())) // every request has a route
		cfg.Listeners[0].Address = tp.addr
		pool, err := upstream.NewPool(cfg.Pools[0].Spec(nil), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		if err := tp.Swap(cfg, map[string]*upstream.Pool{"p": pool}); err != nil {
			t.Fatal(err)
		}
		out := h1conformance.Exchange(t, tp.addr, raw)
		got, fwd := rb.Take(t)
		h1conformance.CheckForwarded(t, raw, out, got, fwd)
	})
}
