package upstream

import (
	"fmt"
	"testing"

	"ballast/balance"
)

func benchPool(b *testing.B, alg string, n int, maxConns int) *Pool {
	b.Helper()
	bs := make([]BackendSpec, n)
	for i := range bs {
		bs[i] = BackendSpec{ID: fmt.Sprintf("b%d", i), Address: fmt.Sprintf("127.0.0.1:%d", 10000+i), Weight: 1}
	}
	cfg := poolCfg(alg, bs...)
	cfg.MaxConns = maxConns
	return mustPool(b, cfg, nil, nil)
}

// BenchmarkAcquireRelease measures the fast path: one Acquire and one Release, no waiting.
// It must not allocate.
func BenchmarkAcquireRelease(b *testing.B) {
	for _, alg := range []string{"sqf", "roundrobin", "swrr", "p2c", "ewma"} {
		for _, n := range []int{2, 100} {
			for _, mc := range []int{0, 64} {
				b.Run(fmt.Sprintf("%s/n=%d/max_conns=%d", alg, n, mc), func(b *testing.B) {
					p := benchPool(b, alg, n, mc)
					b.ReportAllocs()
					for b.Loop() {
						be, err := p.Acquire(0, balance.Tried{})
						if err != nil {
							b.Fatal(err)
						}
						p.Release(be, 0, false)
					}
				})
			}
		}
	}
}

// BenchmarkAcquireReleaseParallel is the same under contention from every P.
func BenchmarkAcquireReleaseParallel(b *testing.B) {
	for _, alg := range []string{"sqf", "roundrobin"} {
		for _, n := range []int{2, 100} {
			b.Run(fmt.Sprintf("%s/n=%d", alg, n), func(b *testing.B) {
				p := benchPool(b, alg, n, 0)
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						be, err := p.Acquire(0, balance.Tried{})
						if err != nil {
							b.Error(err)
							return
						}
						p.Release(be, 0, false)
					}
				})
			})
		}
	}
}

// TestAcquireReleaseAllocs pins the benchmark's zero-allocation promise in the unit tests.
func TestAcquireReleaseAllocs(t *testing.T) {
	for _, alg := range []string{"sqf", "roundrobin", "swrr", "random", "p2c", "ewma", "leastconn", "maglev"} {
		cfg := poolCfg(alg, be("a", 1), be("b", 2))
		cfg.MaxConns = 8
		p := mustPool(t, cfg, nil, nil)
		allocs := testing.AllocsPerRun(200, func() {
			b, err := p.Acquire(42, balance.Tried{})
			if err != nil {
				t.Fatal(err)
			}
			p.Release(b, 0, false)
		})
		if allocs != 0 {
			t.Errorf("%s: %v allocations per Acquire+Release, want 0", alg, allocs)
		}
	}
}
