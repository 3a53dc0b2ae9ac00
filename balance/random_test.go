package balance

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
)

// rrAliasProbabilities computes the exact pick probability of each column of an alias table:
// column k is drawn with 1/n and kept with thr[k]/2^64, else its alias gets the draw.
func rrAliasProbabilities(thr []uint64, alias []int32) []float64 {
	n := float64(len(thr))
	p := make([]float64, len(thr))
	for k := range thr {
		keep := float64(thr[k]) / math.Exp2(64)
		if alias[k] == int32(k) {
			keep = 1
		}
		p[k] += keep / n
		p[alias[k]] += (1 - keep) / n
	}
	return p
}

func TestAliasTableExact(t *testing.T) {
	cases := [][]int{
		{1, 2},
		{5, 1, 1},
		{1, 2, 3, 4},
		{101, 102, 103, 104, 105},
		{1, 1000000},
		{7, 7, 7, 1},
		{1 << 40, 3, 1 << 20},
		{1 << 61, 1 << 60, 5}, // W·n overflows: the masses are scaled down first
	}
	rng := rand.New(rand.NewPCG(4, 4))
	big := make([]int, 500)
	for i := range big {
		big[i] = 1 + rng.IntN(1000)
	}
	cases = append(cases, big)
	for _, ws := range cases {
		bs := rrBackends(ws...)
		tier := make([]int, len(bs))
		total := 0.0
		for i := range tier {
			tier[i] = i
			total += float64(ws[i])
		}
		thr, alias := aliasTable(bs, tier)
		got := rrAliasProbabilities(thr, alias)
		for k, w := range ws {
			if want := float64(w) / total; math.Abs(got[k]-want) > 1e-9 {
				t.Errorf("weights %v: member %d has probability %.12f, want %.12f", ws[:min(len(ws), 8)], k, got[k], want)
			}
		}
	}
}

// TestRandomEqualWeightsUniform is lighttpd's "round-robin" of seed 000: uniform among the
// active backends, so every active one gets about the same count (4-sigma binomial bound) and
// an inactive one none. Equal weights need no alias table.
func TestRandomEqualWeightsUniform(t *testing.T) {
	bs := rrBackends(3, 3, 3, 3)
	bs[2].Down = true
	p := rrBuild(t, "random", bs, Options{Rand: rand.NewPCG(5, 5)})
	if r := p.(*random); r.cols != nil {
		t.Errorf("equal weights built an alias table")
	}
	const picks = 30000
	counts := make([]int, len(bs))
	for k := 0; k < picks; k++ {
		i, err := p.Pick(0, Tried{})
		if err != nil {
			t.Fatal(err)
		}
		counts[i]++
	}
	mean, sigma := picks/3.0, math.Sqrt(picks*(1.0/3)*(2.0/3))
	for i, c := range counts {
		if i == 2 {
			if c != 0 {
				t.Errorf("down backend picked %d times", c)
			}
			continue
		}
		if math.Abs(float64(c)-mean) > 4*sigma {
			t.Errorf("backend %d: %d picks, want %.0f ± %.0f (counts %v)", i, c, mean, 4*sigma, counts)
		}
	}
}

// TestRandomSkips: draws that hit tried or full backends fall back to the scan, which finds
// the only eligible one; with none eligible the error tells busy from nothing usable.
func TestRandomSkips(t *testing.T) {
	bs := rrBackends(1, 5, 1, 9, 1, 1, 1, 1, 1, 2)
	full := make([]bool, len(bs))
	load := &rrLoad{full: full}
	p := rrBuild(t, "random", bs, Options{Load: load, Rand: rand.NewPCG(6, 6)})
	var tried Tried
	for _, i := range []int{0, 1, 2, 3, 4, 5, 6} {
		tried.Add(i)
	}
	full[7], full[8] = true, true
	for k := 0; k < 200; k++ {
		if i, err := p.Pick(0, tried); i != 9 || err != nil {
			t.Fatalf("only backend 9 is eligible; picked %d, %v", i, err)
		}
	}
	full[9] = true
	if _, err := p.Pick(0, tried); !errors.Is(err, ErrBusy) {
		t.Errorf("all untried full: %v, want ErrBusy", err)
	}
	full[7], full[8], full[9] = false, false, false
	var all Tried
	for i := 0; i < 7; i++ {
		all.Add(i)
	}
	p2 := rrBuild(t, "random", bs[:7], Options{Load: load, Rand: rand.NewPCG(6, 6)})
	if _, err := p2.Pick(0, all); !errors.Is(err, ErrNoBackend) {
		t.Errorf("all tried: %v, want ErrNoBackend", err)
	}
}

// TestRandomSeeded: with the same seed, two pickers make the same choices (the simulator
// depends on this).
func TestRandomSeeded(t *testing.T) {
	bs := rrBackends(1, 2, 3, 4, 5)
	a := rrSeq(t, rrBuild(t, "random", bs, Options{Rand: rand.NewPCG(7, 7)}), bs, 50)
	b := rrSeq(t, rrBuild(t, "random", bs, Options{Rand: rand.NewPCG(7, 7)}), bs, 50)
	if a != b {
		t.Errorf("same seed, different picks:\n%s\n%s", a, b)
	}
}

// FuzzAliasTable builds the alias table from fuzzed weights (two bytes each, so up to 65535,
// sometimes shifted far up to reach the overflow guard) and checks it is a valid table whose
// probabilities match the weights.
func FuzzAliasTable(f *testing.F) {
	f.Add([]byte{1, 0, 2, 0}, uint8(0))
	f.Add([]byte{5, 0, 1, 0, 1, 0}, uint8(0))
	f.Add([]byte{255, 255, 1, 0, 7, 0}, uint8(45))
	f.Fuzz(func(t *testing.T, spec []byte, shift uint8) {
		var ws []int
		for k := 0; k+1 < len(spec) && len(ws) < 300; k += 2 {
			if w := int(spec[k]) | int(spec[k+1])<<8; w > 0 {
				ws = append(ws, w<<(shift%47))
			}
		}
		if len(ws) == 0 {
			return
		}
		bs := rrBackends(ws...)
		tier := make([]int, len(bs))
		total := 0.0
		for i := range tier {
			tier[i] = i
			total += float64(ws[i])
		}
		thr, alias := aliasTable(bs, tier)
		for k := range alias {
			if alias[k] < 0 || int(alias[k]) >= len(ws) {
				t.Fatalf("alias[%d] = %d out of range", k, alias[k])
			}
		}
		got := rrAliasProbabilities(thr, alias)
		for k, w := range ws {
			// Scaling (only past 2^62/n) may move a share by about n/2^62 of the total, and a
			// member scaled below 1 unit is kept at 1.
			want := float64(w) / total
			if math.Abs(got[k]-want) > 1e-9+want*1e-6 {
				t.Fatalf("weights %v: member %d has probability %.12g, want %.12g", ws, k, got[k], want)
			}
		}
	})
}
