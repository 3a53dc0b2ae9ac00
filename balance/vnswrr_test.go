package balance

import (
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
)

// TestVNSWRRIsRotatedSWRR: over random pools, vnswrr's picks are the SWRR sequence rotated by
// a start among the first n virtual nodes, for every max_init, and after one period the whole
// table is built.
func TestVNSWRRIsRotatedSWRR(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	for c := 0; c < 150; c++ {
		bs := rrBackends(rrRandomWeights(rng, 1+rng.IntN(10))...)
		usable := 0
		for i := range bs {
			if rng.IntN(8) == 0 {
				bs[i].Down = true
			} else {
				usable++
			}
		}
		if usable == 0 {
			continue
		}
		_, period := schedUnits(bs, rrUsable(bs))
		ref := rrSeq(t, rrBuild(t, "swrr", bs, Options{}), bs, 2*period)
		maxInit := rng.IntN(4) * rng.IntN(period+2)
		p := rrBuild(t, "vnswrr", bs, Options{MaxInit: maxInit, Rand: rand.NewPCG(uint64(c), 0)})
		got := rrSeq(t, p, bs, period)
		ok := false
		full := strings.Fields(ref)
		for s := 0; s < usable && !ok; s++ {
			ok = got == strings.Join(full[s:s+period], " ")
		}
		if !ok {
			t.Fatalf("pool %v, max_init %d: vnswrr %q is not swrr's %q rotated by less than %d", bs, maxInit, got, ref, usable)
		}
		if built, total := p.(*vnswrr).Built(); built != total || total != period {
			t.Fatalf("pool %v: after one period %d of %d virtual nodes built, period %d", bs, built, total, period)
		}
	}
}

// rrUsable lists the usable primaries, the tier Algorithm.New would build.
func rrUsable(bs []Backend) []int {
	var tier []int
	for i, b := range bs {
		if b.usable() && !b.Backup {
			tier = append(tier, i)
		}
	}
	return tier
}

// TestVNSWRRBackupTable: backups get their own table and their own SWRR order; they are used
// only when every primary is down or tried.
func TestVNSWRRBackupTable(t *testing.T) {
	bs := rrBackends(5, 1, 1, 2, 1)
	bs[3].Backup, bs[4].Backup = true, true
	p := rrBuild(t, "vnswrr", bs, Options{Rand: rrFixedRand(0)})
	if got := rrSeq(t, p, bs, 7); got != "a a b a c a a" {
		t.Fatalf("primaries: %q", got)
	}
	var tried Tried
	tried.Add(0)
	tried.Add(1)
	tried.Add(2)
	var seq []string
	for k := 0; k < 6; k++ {
		i, err := p.Pick(0, tried)
		if err != nil {
			t.Fatal(err)
		}
		seq = append(seq, bs[i].ID)
	}
	if got := strings.Join(seq, " "); got != "d e d d e d" {
		t.Errorf("backups with every primary tried: %q, want d e d d e d", got)
	}
}

func TestVNSWRRRejectsNegativeMaxInit(t *testing.T) {
	_, err := New("vnswrr", rrBackends(1, 2), Options{MaxInit: -1})
	var ce *ConfigError
	if !errors.As(err, &ce) {
		t.Fatalf("max_init -1: got %v, want a ConfigError", err)
	}
}

// TestVNSWRRConcurrentBuild races many goroutines through a lazily built table (batches of one
// entry) with tried sets; -race checks the publication of the built prefix, and the picks must
// be valid.
func TestVNSWRRConcurrentBuild(t *testing.T) {
	ws := make([]int, 300)
	for i := range ws {
		ws[i] = 1 + i%7
	}
	bs := rrBackends(ws...)
	p := rrBuild(t, "vnswrr", bs, Options{MaxInit: 1})
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; k < 400; k++ {
				var tried Tried
				tried.Add((g*400 + k) % len(bs))
				i, err := p.Pick(0, tried)
				if err != nil || i < 0 || i >= len(bs) || tried.Has(i) {
					t.Errorf("pick: %d, %v", i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if built, total := p.(*vnswrr).Built(); built != total || total != 1197 {
		t.Errorf("built %d of %d after 3200 picks", built, total)
	}
}
