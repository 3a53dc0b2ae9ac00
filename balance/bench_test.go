package balance_test

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync/atomic"
	"testing"

	"ballast/balance"
	"ballast/balance/balancetest"
)

// benchCase is one pool shape of the pick benchmarks.
type benchCase struct {
	name     string
	n        int
	weighted bool // weights 101..105 repeating instead of all 1
}

func benchCases() []benchCase {
	return []benchCase{
		{"n=2", 2, false},
		{"n=100", 100, false},
		{"n=2000", 2000, false},
		{"n=2000-weighted", 2000, true},
		{"n=10000", 10000, false},
	}
}

// benchKeys are varied request keys for the hash algorithms; a power of two so that the index
// is a mask.
var benchKeys = func() []uint64 {
	rng := rand.New(rand.NewPCG(1, 2))
	keys := make([]uint64, 4096)
	for i := range keys {
		keys[i] = rng.Uint64()
	}
	return keys
}()

// benchPicker builds algorithm a over c's pool with a fake Load.
func benchPicker(b *testing.B, a balance.Algorithm, c benchCase) (balance.Picker, *balancetest.Load) {
	b.Helper()
	bs := make([]balance.Backend, c.n)
	for i := range bs {
		bs[i] = balance.Backend{ID: fmt.Sprintf("10.%d.%d.%d:8080", i>>16, (i>>8)&255, i&255), Weight: 1}
		if c.weighted {
			bs[i].Weight = 101 + i%5
		}
	}
	load := balancetest.NewLoad(c.n)
	p, err := a.New(bs, balance.Options{Load: load})
	if err != nil {
		b.Fatal(err)
	}
	load.Track(p)
	return p, load
}

// benchWindow is how many requests a load-aware benchmark keeps in flight, a power of two
// near 4n capped at 1024. It is a closed loop: the oldest request finishes before each pick and
// the new one starts after it, so the in-flight counts move and Tracker pickers get two Updates
// per pick, all inside the timing.
func benchWindow(n int) int {
	w := 1
	for w < 4*n && w < 1024 {
		w <<= 1
	}
	return w
}

// benchLoop runs picks for one goroutine; fifo is its ring of in-flight requests.
type benchLoop struct {
	p      balance.Picker
	load   *balancetest.Load
	closed bool // load-aware: start and finish requests around each pick
	fifo   []int
	head   int
	count  int
	k      int
	_      [64]byte // loops of different goroutines must not share a cache line
}

func newBenchLoop(p balance.Picker, load *balancetest.Load, a balance.Algorithm, window int) *benchLoop {
	return &benchLoop{p: p, load: load, closed: a.Caps.NeedsLoad, fifo: make([]int, window), k: rand.IntN(len(benchKeys))}
}

// pick makes one pick; errors are returned, since RunParallel's goroutines must not call
// b.Fatal.
func (l *benchLoop) pick() error {
	mask := len(l.fifo) - 1
	if l.closed && l.count == len(l.fifo) {
		l.load.Finish(l.fifo[l.head])
		l.head = (l.head + 1) & mask
		l.count--
	}
	l.k++
	i, err := l.p.Pick(benchKeys[l.k&(len(benchKeys)-1)], balance.Tried{})
	if err != nil {
		return err
	}
	if l.closed {
		l.load.Start(i)
		l.fifo[(l.head+l.count)&mask] = i
		l.count++
	}
	return nil
}

// BenchmarkPick measures one pick (plus, for load-aware algorithms, one request start and one
// finish) for every registered algorithm and pool size.
func BenchmarkPick(b *testing.B) {
	for _, a := range balance.Algorithms() {
		b.Run(a.Name, func(b *testing.B) {
			for _, c := range benchCases() {
				b.Run(c.name, func(b *testing.B) {
					p, load := benchPicker(b, a, c)
					l := newBenchLoop(p, load, a, benchWindow(c.n))
					b.ReportAllocs()
					for b.Loop() {
						if err := l.pick(); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		})
	}
}

// BenchmarkPickParallel is BenchmarkPick from GOMAXPROCS goroutines on one picker, each with
// its own share of the in-flight window. RunParallel starts exactly GOMAXPROCS goroutines here
// (SetParallelism is never called), so each gets a loop of its own.
func BenchmarkPickParallel(b *testing.B) {
	for _, a := range balance.Algorithms() {
		b.Run(a.Name, func(b *testing.B) {
			for _, c := range benchCases() {
				b.Run(c.name, func(b *testing.B) {
					p, load := benchPicker(b, a, c)
					// One loop per goroutine, allocated before the timing starts.
					loops := make([]*benchLoop, runtime.GOMAXPROCS(0))
					for g := range loops {
						loops[g] = newBenchLoop(p, load, a, max(benchWindow(c.n)/len(loops), 1))
					}
					var next atomic.Int32
					b.ReportAllocs()
					b.ResetTimer()
					b.RunParallel(func(pb *testing.PB) {
						l := loops[int(next.Add(1)-1)%len(loops)]
						for pb.Next() {
							if err := l.pick(); err != nil {
								b.Error(err)
								return
							}
						}
					})
				})
			}
		})
	}
}
