package balance

import (
	"errors"
	"math/rand/v2"
	"testing"
)

// FuzzVNSWRR builds vnswrr from fuzzed pools (each byte is one backend: weight in the low five
// bits, backup and down in the high two) and max_init. Building never panics; a negative
// max_init is a ConfigError; otherwise one full period of picks gives every member of the
// serving tier (the primaries, or the backups when no primary is usable) exactly weight/gcd
// picks, and a tried member is never picked.
func FuzzVNSWRR(f *testing.F) {
	f.Add([]byte{5, 1, 1}, 0, uint64(1))
	f.Add([]byte{25, 25, 25, 25}, 2, uint64(2))
	f.Add([]byte{0x80 | 3, 0x40 | 2, 0x40 | 4, 0}, 1, uint64(3))
	f.Add([]byte{31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20}, 1000, uint64(4))
	f.Add([]byte{}, 0, uint64(5))
	f.Add([]byte{7}, -1, uint64(6))
	f.Fuzz(func(t *testing.T, spec []byte, maxInit int, seed uint64) {
		if len(spec) > 64 {
			spec = spec[:64]
		}
		bs := make([]Backend, len(spec))
		for i, b := range spec {
			bs[i] = Backend{ID: rrName(i), Weight: int(b & 0x1f), Backup: b&0x40 != 0, Down: b&0x80 != 0}
		}
		p, err := New("vnswrr", bs, Options{MaxInit: maxInit, Rand: rand.NewPCG(seed, 0)})
		if maxInit < 0 {
			var ce *ConfigError
			if !errors.As(err, &ce) && !(err == nil && fzNoUsable(bs)) {
				t.Fatalf("max_init %d: got %v, want a ConfigError", maxInit, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("build %v: %v", bs, err)
		}
		tier := rrUsable(bs)
		if len(tier) == 0 {
			for i, b := range bs {
				if b.usable() {
					tier = append(tier, i)
				}
			}
		}
		if len(tier) == 0 {
			if _, err := p.Pick(0, Tried{}); !errors.Is(err, ErrNoBackend) {
				t.Fatalf("nothing usable: %v", err)
			}
			return
		}
		var g int64
		for _, i := range tier {
			g = gcd64(g, int64(bs[i].Weight))
		}
		period := 0
		for _, i := range tier {
			period += bs[i].Weight / int(g)
		}
		counts := make([]int, len(bs))
		for k := 0; k < period; k++ {
			i, err := p.Pick(0, Tried{})
			if err != nil || i < 0 || i >= len(bs) {
				t.Fatalf("pick %d: %d, %v", k, i, err)
			}
			counts[i]++
		}
		inTier := make([]bool, len(bs))
		for _, i := range tier {
			inTier[i] = true
			if want := bs[i].Weight / int(g); counts[i] != want {
				t.Fatalf("pool %v: %s picked %d times in a period of %d, want %d", bs, bs[i].ID, counts[i], period, want)
			}
		}
		for i, c := range counts {
			if c > 0 && !inTier[i] {
				t.Fatalf("pool %v: %s is not in the serving tier but was picked %d times", bs, bs[i].ID, c)
			}
		}
		var tried Tried
		tried.Add(tier[0])
		for k := 0; k < 2*len(tier); k++ {
			i, err := p.Pick(0, tried)
			if err == nil && i == tier[0] {
				t.Fatalf("pool %v: picked tried %s", bs, bs[i].ID)
			}
		}
	})
}

// fzNoUsable reports whether no backend is usable, in which case no tier is built and even an
// invalid max_init goes unnoticed.
func fzNoUsable(bs []Backend) bool {
	for _, b := range bs {
		if b.usable() {
			return false
		}
	}
	return true
}
