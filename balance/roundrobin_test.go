package balance

import (
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
)

// rrLoad is a single-goroutine Load for the round-robin family's tests: only Full matters.
type rrLoad struct{ full []bool }

func (l *rrLoad) InFlight(int) int64  { return 0 }
func (l *rrLoad) Full(i int) bool     { return l.full[i] }
func (l *rrLoad) Latency(int) float64 { return 0 }

// rrScanSWRR is the textbook O(n) SWRR over unit weights, the oracle for swrrSeq.
func rrScanSWRR(units []int64, steps int) []int {
	cw := make([]int64, len(units))
	out := make([]int, steps)
	for s := range out {
		best, total := -1, int64(0)
		for k, w := range units {
			cw[k] += w
			total += w
			if best < 0 || cw[k] > cw[best] {
				best = k
			}
		}
		cw[best] -= total
		out[s] = best
	}
	return out
}

// rrRandomWeights draws n weights from a few values so that equal-weight classes occur.
func rrRandomWeights(rng *rand.Rand, n int) []int {
	values := []int{1, 2, 3, 5, 8, 13}
	ws := make([]int, n)
	for i := range ws {
		ws[i] = values[rng.IntN(len(values))]
	}
	return ws
}

func TestSWRRSeqMatchesScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	for c := 0; c < 200; c++ {
		n := 1 + rng.IntN(12)
		units := make([]int64, n)
		for k := range units {
			units[k] = int64(1 + rng.IntN(7))
		}
		if c%5 == 0 { // many members of one weight
			for k := range units {
				units[k] = int64(1 + k%2)
			}
		}
		var total int64
		for _, u := range units {
			total += u
		}
		steps := int(2*total + 3)
		want := rrScanSWRR(units, steps)
		seq := newSWRRSeq(units)
		for s := 0; s < steps; s++ {
			if got := seq.step(); got != want[s] {
				t.Fatalf("units %v, step %d: class stepper chose %d, the O(n) scan %d", units, s, got, want[s])
			}
		}
	}
}

// TestRoundRobinMatchesSWRR: roundrobin is the swrr sequence itself, from its first pick, for
// pools with down and weight-0 members too.
func TestRoundRobinMatchesSWRR(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 2))
	for c := 0; c < 100; c++ {
		bs := rrBackends(rrRandomWeights(rng, 1+rng.IntN(10))...)
		for i := range bs {
			switch rng.IntN(8) {
			case 0:
				bs[i].Down = true
			case 1:
				bs[i].Weight = 0
			}
		}
		sw, err := New("swrr", bs, Options{})
		if err != nil {
			t.Fatal(err)
		}
		rr := rrBuild(t, "roundrobin", bs, Options{})
		for k := 0; k < 300; k++ {
			i, err1 := sw.Pick(0, Tried{})
			j, err2 := rr.Pick(0, Tried{})
			if i != j || !errors.Is(err2, err1) {
				t.Fatalf("pool %v, pick %d: swrr %d (%v), roundrobin %d (%v)", bs, k, i, err1, j, err2)
			}
		}
	}
}

// TestRoundRobinSkipConsumes: a full backend's entries are consumed, not handed to one
// neighbour, so the others keep their exact ratio: 5,1,1 with c full gives a:b = 5:1.
func TestRoundRobinSkipConsumes(t *testing.T) {
	for _, name := range []string{"roundrobin", "vnswrr"} {
		bs := rrBackends(5, 1, 1)
		p := rrBuild(t, name, bs, Options{Load: &rrLoad{full: []bool{false, false, true}}})
		counts := make([]int, 3)
		for k := 0; k < 600; k++ {
			i, err := p.Pick(0, Tried{})
			if err != nil {
				t.Fatal(err)
			}
			counts[i]++
		}
		if counts[0] != 500 || counts[1] != 100 || counts[2] != 0 {
			t.Errorf("%s: counts %v over 600 picks with c full, want [500 100 0]", name, counts)
		}
	}
}

// TestRoundRobinBusy covers the walk's fallback: a heavy backend's long runs of entries are
// longer than the walk, so the scan must find the light one; then ErrBusy and ErrNoBackend.
func TestRoundRobinBusy(t *testing.T) {
	for _, name := range []string{"roundrobin", "vnswrr"} {
		bs := rrBackends(1000, 1)
		load := &rrLoad{full: []bool{true, false}}
		p := rrBuild(t, name, bs, Options{Load: load})
		for k := 0; k < 100; k++ {
			if i, err := p.Pick(0, Tried{}); i != 1 || err != nil {
				t.Fatalf("%s: a full: picked %d, %v; want b", name, i, err)
			}
		}
		var tried Tried
		tried.Add(1)
		if _, err := p.Pick(0, tried); !errors.Is(err, ErrBusy) {
			t.Errorf("%s: a full, b tried: %v, want ErrBusy", name, err)
		}
		load.full[0] = false
		tried.Add(0)
		if _, err := p.Pick(0, tried); !errors.Is(err, ErrNoBackend) {
			t.Errorf("%s: both tried: %v, want ErrNoBackend", name, err)
		}
	}
}

// TestRoundRobinScaledPeriod: a period longer than schedMaxPeriod is scaled down, keeping
// every member and its share to within the cap's resolution.
func TestRoundRobinScaledPeriod(t *testing.T) {
	bs := rrBackends(1<<30, 1, 3<<20)
	r := rrBuild(t, "roundrobin", bs, Options{}).(*roundRobin)
	if len(r.sched) > schedMaxPeriod+len(bs) {
		t.Fatalf("schedule has %d entries, cap %d", len(r.sched), schedMaxPeriod)
	}
	counts := make([]int, len(bs))
	for _, i := range r.sched {
		counts[i]++
	}
	total := float64(1<<30 + 1 + 3<<20)
	for i, b := range bs {
		want := float64(b.Weight) / total * float64(len(r.sched))
		if counts[i] < 1 || (want > 1000 && (float64(counts[i]) < want*0.999 || float64(counts[i]) > want*1.001)) {
			t.Errorf("%s: %d entries of %d, want about %.1f (at least 1)", b.ID, counts[i], len(r.sched), want)
		}
	}
}

// TestRoundRobinConcurrentExact: the atomic cursor hands out consecutive entries, so m whole
// periods picked from many goroutines give every backend exactly m·w/gcd picks.
func TestRoundRobinConcurrentExact(t *testing.T) {
	for _, name := range []string{"roundrobin", "vnswrr"} {
		t.Run(name, func(t *testing.T) {
			weights := []int{30, 20, 10, 10, 50, 40} // gcd 10, period 16
			bs := rrBackends(weights...)
			p := rrBuild(t, name, bs, Options{MaxInit: 1})
			const goroutines, periods = 8, 400
			perG := periods * 16 / goroutines
			counts := make([][]int, goroutines)
			var wg sync.WaitGroup
			for g := range counts {
				counts[g] = make([]int, len(bs))
				wg.Add(1)
				go func() {
					defer wg.Done()
					for k := 0; k < perG; k++ {
						i, err := p.Pick(0, Tried{})
						if err != nil || i < 0 || i >= len(bs) {
							t.Errorf("pick: %d, %v", i, err)
							return
						}
						counts[g][i]++
					}
				}()
			}
			wg.Wait()
			for i, w := range weights {
				sum := 0
				for g := range counts {
					sum += counts[g][i]
				}
				if sum != periods*w/10 {
					t.Errorf("%s: %d picks, want exactly %d", bs[i].ID, sum, periods*w/10)
				}
			}
		})
	}
}

// FuzzRoundRobinSchedule builds roundrobin from fuzzed weights: the schedule has one entry per
// weight/gcd unit of every member, and equals swrr's sequence pick for pick.
func FuzzRoundRobinSchedule(f *testing.F) {
	f.Add([]byte{5, 1, 1})
	f.Add([]byte{25, 25, 25, 25})
	f.Add([]byte{0, 3, 0, 9, 200})
	f.Fuzz(func(t *testing.T, spec []byte) {
		if len(spec) > 40 {
			spec = spec[:40]
		}
		ws := make([]int, len(spec))
		for i, b := range spec {
			ws[i] = int(b)
		}
		bs := rrBackends(ws...)
		p, err := New("roundrobin", bs, Options{})
		if err != nil {
			t.Fatal(err)
		}
		r, ok := p.(*roundRobin)
		if !ok {
			if _, err := p.Pick(0, Tried{}); !errors.Is(err, ErrNoBackend) {
				t.Fatalf("weights %v: empty picker answered %v", ws, err)
			}
			return
		}
		var g int
		for _, w := range ws {
			g = int(gcd64(int64(g), int64(w)))
		}
		counts := make([]int, len(ws))
		for _, i := range r.sched {
			counts[i]++
		}
		for i, w := range ws {
			if counts[i] != w/g {
				t.Fatalf("weights %v: %s has %d entries, want %d", ws, bs[i].ID, counts[i], w/g)
			}
		}
		sw, _ := New("swrr", bs, Options{})
		for k := range r.sched {
			want, _ := sw.Pick(0, Tried{})
			if got, _ := p.Pick(0, Tried{}); got != want {
				t.Fatalf("weights %v, pick %d: roundrobin %d, swrr %d", ws, k, got, want)
			}
		}
	})
}
