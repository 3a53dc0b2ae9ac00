package balance

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
)

// laLoad is the load-aware tests' fake Load: atomic counters that, like the real counter
// owner, report every change to the attached Tracker with the authoritative count.
type laLoad struct {
	inflight []atomic.Int64
	full     []atomic.Bool
	lat      []atomic.Uint64
	tracker  Tracker
}

func newLALoad(n int) *laLoad {
	return &laLoad{inflight: make([]atomic.Int64, n), full: make([]atomic.Bool, n), lat: make([]atomic.Uint64, n)}
}

func (l *laLoad) InFlight(i int) int64  { return l.inflight[i].Load() }
func (l *laLoad) Full(i int) bool       { return l.full[i].Load() }
func (l *laLoad) Latency(i int) float64 { return math.Float64frombits(l.lat[i].Load()) }

func (l *laLoad) setLatency(i int, s float64) { l.lat[i].Store(math.Float64bits(s)) }

func (l *laLoad) tell(i int, n int64) {
	if l.tracker != nil {
		l.tracker.Update(i, n)
	}
}
func (l *laLoad) start(i int)            { l.tell(i, l.inflight[i].Add(1)) }
func (l *laLoad) finish(i int)           { l.tell(i, l.inflight[i].Add(-1)) }
func (l *laLoad) set(i int, n int64)     { l.inflight[i].Store(n); l.tell(i, n) }
func (l *laLoad) setFull(i int, f bool)  { l.full[i].Store(f) }
func (l *laLoad) attach(p Picker) Picker { l.tracker, _ = p.(Tracker); return p }

// laAlgorithms are the algorithms this file family covers.
var laAlgorithms = []string{"sqf", "leastconn", "bybusyness", "wlc", "p2c", "ewma"}

func laBackends(weights ...int) []Backend {
	bs := make([]Backend, len(weights))
	for i, w := range weights {
		bs[i] = Backend{ID: fmt.Sprintf("b%d", i), Weight: w}
	}
	return bs
}

// laRand is a seeded random source that is safe for concurrent use, as Options.Rand must be.
type laRand struct {
	mu sync.Mutex
	r  *rand.Rand
}

func (r *laRand) Uint64() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.r.Uint64()
}

// laNew builds the named picker over bs with a seeded random source and attaches it to l.
func laNew(t testing.TB, name string, bs []Backend, l *laLoad, seed uint64) Picker {
	t.Helper()
	r := &laRand{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	p, err := New(name, bs, Options{Load: l, Rand: r})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return l.attach(p)
}

func laTried(idx ...int) Tried {
	var tr Tried
	for _, i := range idx {
		tr.Add(i)
	}
	return tr
}

// checkHeap verifies the heap property and the slot index.
func checkHeap(t *testing.T, h *loadHeap) {
	t.Helper()
	for s := range h.heap {
		if got := h.slot[h.heap[s].k]; int(got) != s {
			t.Fatalf("slot[%d] = %d, want %d", h.heap[s].k, got, s)
		}
		if s > 0 && h.heap[s].before(&h.heap[(s-1)/2]) {
			t.Fatalf("heap property broken at slot %d", s)
		}
	}
}

// TestLoadHeapAgainstOracle drives the index with random updates, Full flags and tried sets
// and compares every pick with a brute-force scan over the same keys.
func TestLoadHeapAgainstOracle(t *testing.T) {
	for _, tc := range []struct {
		name string
		n    int
		plus int64
	}{{"sqf/n=1", 1, 0}, {"sqf/n=7", 7, 0}, {"sqf/n=64", 64, 0}, {"leastconn/n=33", 33, 1}} {
		t.Run(tc.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(1, uint64(tc.n)))
			ws := make([]int, tc.n)
			for i := range ws {
				ws[i] = 1 + r.IntN(4)
			}
			bs := laBackends(ws...)
			tier := make([]int, tc.n)
			for i := range tier {
				tier[i] = i
			}
			l := newLALoad(tc.n)
			h := newLoadHeap(bs, tier, Options{Load: l}, tc.plus)
			for step := 0; step < 3000; step++ {
				i := r.IntN(tc.n)
				switch r.IntN(3) {
				case 0:
					h.Update(i, int64(r.IntN(5)))
				case 1:
					l.setFull(i, r.IntN(3) == 0)
				}
				checkHeap(t, h)
				var tried Tried
				for k := r.IntN(4); k > 0; k-- {
					tried.Add(r.IntN(tc.n))
				}
				// Oracle: the lowest (num/w, seq) among usable members.
				want, sawFull := -1, false
				var wantNode loadNode
				for _, nd := range h.heap {
					b := tier[nd.k]
					if tried.Has(b) {
						continue
					}
					if l.Full(b) {
						sawFull = true
						continue
					}
					if want < 0 || nd.before(&wantNode) {
						want, wantNode = b, nd
					}
				}
				got, err := h.Pick(0, tried)
				if want < 0 {
					if wantErr := exhausted(sawFull); !errors.Is(err, wantErr) {
						t.Fatalf("step %d: got %d, %v; want %v", step, got, err, wantErr)
					}
					continue
				}
				if err != nil || got != want {
					t.Fatalf("step %d: got %d, %v; want %d", step, got, err, want)
				}
				if nd := h.heap[h.slot[h.where[got]]]; nd.num != wantNode.num+1 {
					t.Fatalf("step %d: pick did not claim: num %d, want %d", step, nd.num, wantNode.num+1)
				}
			}
		})
	}
}

// TestLoadHeapInitialOrder checks that ties start in SWRR first-appearance order (heavier
// first, then tier order) against the swrr reference, for sqf and leastconn.
func TestLoadHeapInitialOrder(t *testing.T) {
	for _, alg := range []string{"sqf", "leastconn"} {
		for _, weights := range [][]int{{1, 3, 1, 3, 2}, {5, 1, 1}, {2, 2, 2}, {1, 2, 3, 4, 5, 6, 7}, {9, 1, 9, 4, 4, 1}} {
			t.Run(fmt.Sprint(alg, weights), func(t *testing.T) {
				bs := laBackends(weights...)
				l := newLALoad(len(bs))
				p := laNew(t, alg, bs, l, 1)
				h := laHeapOf(p)
				// The members' initial sequence numbers, read in rank order.
				got := make([]int, len(bs))
				for _, nd := range h.heap {
					got[nd.seq] = h.tier[nd.k]
				}
				swrr, _ := New("swrr", bs, Options{})
				seen := map[int]bool{}
				var want []int
				for len(want) < len(bs) {
					i, _ := swrr.Pick(0, Tried{})
					if !seen[i] {
						seen[i] = true
						want = append(want, i)
					}
				}
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("initial FIFO order %v, SWRR first appearances %v", got, want)
				}
			})
		}
	}
}

// TestLoadAwareEligibility is the shared table: Full, tried, ErrBusy, ErrNoBackend, one
// member, Down members, for every load-aware algorithm.
func TestLoadAwareEligibility(t *testing.T) {
	cases := []struct {
		name    string
		weights []int
		down    []int
		full    []int
		tried   []int
		allowed []int // nil: expect err
		err     error
	}{
		{"full skipped", []int{1, 1, 1, 1, 1}, nil, []int{0, 1, 2, 3}, nil, []int{4}, nil},
		{"full root skipped, weighted", []int{5, 1, 2, 1}, nil, []int{0, 2}, nil, []int{1, 3}, nil},
		{"tried skipped", []int{1, 1, 1, 1}, nil, nil, []int{0, 1}, []int{2, 3}, nil},
		{"tried and full", []int{1, 2, 3, 4}, nil, []int{3}, []int{0, 1}, []int{2}, nil},
		{"down never", []int{1, 1, 1}, []int{1}, nil, nil, []int{0, 2}, nil},
		{"all full", []int{1, 1, 1}, nil, []int{0, 1, 2}, nil, nil, ErrBusy},
		{"untried all full", []int{1, 1, 1}, nil, []int{0, 1}, []int{2}, nil, ErrBusy},
		{"all tried", []int{1, 1, 1}, nil, nil, []int{0, 1, 2}, nil, ErrNoBackend},
		{"one member", []int{3}, nil, nil, nil, []int{0}, nil},
		{"one member tried", []int{3}, nil, nil, []int{0}, nil, ErrNoBackend},
		{"one member full", []int{3}, nil, []int{0}, nil, nil, ErrBusy},
		{"weight zero never", []int{0, 2, 0}, nil, nil, nil, []int{1}, nil},
	}
	for _, alg := range laAlgorithms {
		for _, tc := range cases {
			t.Run(alg+"/"+tc.name, func(t *testing.T) {
				bs := laBackends(tc.weights...)
				for _, i := range tc.down {
					bs[i].Down = true
				}
				l := newLALoad(len(bs))
				p := laNew(t, alg, bs, l, 7)
				for _, i := range tc.full {
					l.setFull(i, true)
				}
				tried := laTried(tc.tried...)
				var outstanding []int
				for n := 0; n < 200; n++ {
					i, err := p.Pick(0, tried)
					if tc.allowed == nil {
						if err != tc.err {
							t.Fatalf("pick %d: got %d, %v; want %v", n, i, err, tc.err)
						}
						continue
					}
					if err != nil {
						t.Fatalf("pick %d: %v", n, err)
					}
					ok := false
					for _, a := range tc.allowed {
						ok = ok || a == i
					}
					if !ok {
						t.Fatalf("pick %d: got %d, allowed %v", n, i, tc.allowed)
					}
					// Keep some load around so that the load comparison is exercised.
					l.start(i)
					outstanding = append(outstanding, i)
					if len(outstanding) > 3 {
						l.finish(outstanding[0])
						outstanding = outstanding[1:]
					}
				}
			})
		}
	}
}

// TestLoadAwareBusyAvoided: a member with more in flight than the others loses whenever it
// is compared with an idle one; for the deterministic algorithms, never picked at all.
func TestLoadAwareBusyAvoided(t *testing.T) {
	for _, alg := range laAlgorithms {
		t.Run(alg, func(t *testing.T) {
			bs := laBackends(1, 1, 1, 1)
			l := newLALoad(len(bs))
			l.set(2, 5)
			p := laNew(t, alg, bs, l, 3)
			for n := 0; n < 400; n++ {
				i, err := p.Pick(0, Tried{})
				if err != nil {
					t.Fatal(err)
				}
				if i == 2 {
					t.Fatalf("pick %d went to the busy member", n)
				}
				l.start(i)
				l.finish(i)
			}
		})
	}
}

// TestLoadAwareForeignUpdate: Update for indexes outside the tier (out of range, down, other
// tier) changes nothing.
func TestLoadAwareForeignUpdate(t *testing.T) {
	for _, alg := range []string{"sqf", "leastconn"} {
		t.Run(alg, func(t *testing.T) {
			bs := laBackends(1, 1, 1, 1, 1)
			bs[1].Down = true
			bs[3].Backup = true
			bs[4].Backup = true
			l := newLALoad(len(bs))
			p := laNew(t, alg, bs, l, 1)
			tr, ok := p.(Tracker)
			if !ok {
				t.Fatal("not a Tracker")
			}
			// Foreign: out of range, Down, and (for the primary tier) the backups.
			for _, i := range []int{-1, -1 << 40, 5, 1 << 40, 1} {
				tr.Update(i, 1000)
			}
			var got []int
			for n := 0; n < 4; n++ {
				i, err := p.Pick(0, Tried{})
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, i)
			}
			if want := "[0 2 0 2]"; fmt.Sprint(got) != want {
				t.Fatalf("picks %v, want %v", got, want)
			}
			// Backups answer once the primaries are tried, in their own order.
			tr.Update(3, 9) // backup 3 is busy
			for n := 0; n < 3; n++ {
				if i, err := p.Pick(0, laTried(0, 2)); err != nil || i != 4 {
					t.Fatalf("backup pick %d: %d, %v; want 4", n, i, err)
				}
				tr.Update(4, 0) // finished at once
			}
		})
	}
}

// TestLoadAwarePermutedInput: the same backends listed in another order give the same picks
// (by ID) for the deterministic algorithms when weights are distinct, and the same shares for
// the randomized ones.
func TestLoadAwarePermutedInput(t *testing.T) {
	weights := []int{5, 1, 3, 2, 4}
	perm := []int{3, 0, 4, 1, 2}
	run := func(t *testing.T, alg string, order []int) (seq []string, count map[string]int) {
		bs := make([]Backend, len(order))
		for k, j := range order {
			bs[k] = Backend{ID: fmt.Sprintf("b%d", j), Weight: weights[j]}
		}
		l := newLALoad(len(bs))
		p := laNew(t, alg, bs, l, 11)
		count = map[string]int{}
		var outstanding []int
		for n := 0; n < 6000; n++ {
			i, err := p.Pick(0, Tried{})
			if err != nil {
				t.Fatal(err)
			}
			seq = append(seq, bs[i].ID)
			count[bs[i].ID]++
			l.start(i)
			outstanding = append(outstanding, i)
			if len(outstanding) > 8 {
				l.finish(outstanding[0])
				outstanding = outstanding[1:]
			}
		}
		return seq, count
	}
	for _, alg := range laAlgorithms {
		t.Run(alg, func(t *testing.T) {
			seqA, countA := run(t, alg, []int{0, 1, 2, 3, 4})
			seqB, countB := run(t, alg, perm)
			switch alg {
			case "sqf", "leastconn", "bybusyness":
				for n := range seqA {
					if seqA[n] != seqB[n] {
						t.Fatalf("pick %d: %s vs %s", n, seqA[n], seqB[n])
					}
				}
			default:
				for id, c := range countA {
					if d := c - countB[id]; d > 300 || d < -300 {
						t.Fatalf("%s: %d picks vs %d", id, c, countB[id])
					}
				}
			}
		})
	}
}

// TestLoadAwareConcurrent runs picks, completions and Full flips from several goroutines
// (meaningful under -race), then checks that the trackers' indexes healed to the true counts.
func TestLoadAwareConcurrent(t *testing.T) {
	for _, alg := range laAlgorithms {
		t.Run(alg, func(t *testing.T) {
			const n = 16
			bs := laBackends(1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3, 4)
			bs[15].Backup = true
			l := newLALoad(n)
			p := laNew(t, alg, bs, l, 5)
			var wg sync.WaitGroup
			var picked atomic.Int64
			for g := 0; g < 4; g++ {
				wg.Add(1)
				go func(g int) {
					defer wg.Done()
					r := rand.New(rand.NewPCG(uint64(g), 2))
					var mine []int
					for step := 0; step < 2000; step++ {
						if r.IntN(50) == 0 {
							l.setFull(r.IntN(n), r.IntN(2) == 0)
						}
						i, err := p.Pick(0, laTried(r.IntN(n)))
						if err == nil {
							if bs[i].Down || i >= n {
								t.Errorf("picked %d", i)
								return
							}
							picked.Add(1)
							l.start(i)
							mine = append(mine, i)
						}
						if len(mine) > 4 {
							l.finish(mine[0])
							mine = mine[1:]
						}
						if sr, ok := p.(LBStatusReporter); ok && step%100 == 0 {
							sr.LBStatus(r.IntN(n))
						}
					}
					for _, i := range mine {
						l.finish(i)
					}
				}(g)
			}
			wg.Wait()
			if picked.Load() == 0 {
				t.Fatal("no pick succeeded")
			}
			h := laHeapOf(p)
			if h == nil {
				return
			}
			// Reordered Updates may leave stale keys; one authoritative Update heals each.
			for i := 0; i < n; i++ {
				l.set(i, 0)
			}
			for _, nd := range h.heap {
				if nd.num != h.plus {
					t.Fatalf("member %d key %d after healing, want %d", nd.k, nd.num, h.plus)
				}
			}
		})
	}
}

// laHeapOf digs the primary loadHeap out of a picker, nil for other pickers.
func laHeapOf(p Picker) *loadHeap {
	switch q := p.(type) {
	case *loadHeap:
		return q
	case *trackedTiers:
		return laHeapOf(q.primary)
	}
	return nil
}

// BenchmarkLoadAwareLocal measures the balancing work per request over a pool with a steady
// background load of 0 to 3 requests per member: "pick" is Pick alone (sqf and leastconn still
// claim, so their keys rise), "cycle" is Pick plus the dispatch and completion Updates (which
// move a tracked member in the heap twice).
func BenchmarkLoadAwareLocal(b *testing.B) {
	for _, alg := range laAlgorithms {
		for _, n := range []int{2000, 10000} {
			for _, mode := range []string{"pick", "cycle"} {
				b.Run(fmt.Sprintf("%s/n=%d/%s", alg, n, mode), func(b *testing.B) {
					ws := make([]int, n)
					for i := range ws {
						ws[i] = 1 + i%4
					}
					bs := laBackends(ws...)
					l := newLALoad(n)
					r := rand.New(rand.NewPCG(1, 2))
					for i := 0; i < n; i++ {
						l.inflight[i].Store(int64(r.IntN(4)))
						l.setLatency(i, 0.001*float64(1+r.IntN(20)))
					}
					p, err := New(alg, bs, Options{Load: l})
					if err != nil {
						b.Fatal(err)
					}
					l.attach(p)
					cycle := mode == "cycle"
					b.ReportAllocs()
					b.ResetTimer()
					for k := 0; k < b.N; k++ {
						i, err := p.Pick(0, Tried{})
						if err != nil {
							b.Fatal(err)
						}
						if cycle {
							l.start(i)
							l.finish(i)
						}
					}
				})
			}
		}
	}
}

// laExpect is the contract for one pick: the allowed indexes, or the error.
func laExpect(bs []Backend, l *laLoad, tried *Tried) ([]bool, error) {
	allowed := make([]bool, len(bs))
	for _, backup := range []bool{false, true} {
		any, busy := false, false
		for i, b := range bs {
			if b.Backup != backup || !b.usable() || tried.Has(i) {
				continue
			}
			if l.Full(i) {
				busy = true
				continue
			}
			allowed[i], any = true, true
		}
		if any {
			return allowed, nil
		}
		if busy {
			return nil, ErrBusy
		}
	}
	return nil, ErrNoBackend
}

// FuzzLoadAware builds every load-aware picker from fuzzed backends, states and tried sets and
// checks each pick against the contract.
func FuzzLoadAware(f *testing.F) {
	f.Add([]byte{3, 0x01, 0x02, 0x83, 0x10, 0})
	f.Add([]byte{8, 0x21, 0x41, 0x61, 0x09, 0x0a, 0x13, 0x24, 0x35, 2, 1, 2, 3})
	f.Add([]byte{1, 0x10})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 2 {
			return
		}
		n := 1 + int(data[0])%12
		data = data[1:]
		bs := make([]Backend, n)
		l := newLALoad(n)
		for i := range bs {
			var b byte
			if i < len(data) {
				b = data[i]
			}
			// bits 0-1 weight, 2 down, 3 backup, 4 full, 5-7 in flight
			bs[i] = Backend{ID: fmt.Sprint(i), Weight: int(b & 3), Down: b&4 != 0, Backup: b&8 != 0}
			l.setFull(i, b&16 != 0)
			l.inflight[i].Store(int64(b >> 5))
			l.setLatency(i, 0.001*float64(b>>5))
		}
		var tried Tried
		if len(data) > n {
			for _, b := range data[n:] {
				tried.Add(int(b) % n)
			}
		}
		for _, alg := range laAlgorithms {
			p := laNew(t, alg, bs, l, 1)
			for k := 0; k < 2*n; k++ {
				allowed, wantErr := laExpect(bs, l, &tried)
				i, err := p.Pick(0, tried)
				if wantErr != nil {
					if err != wantErr {
						t.Fatalf("%s: got %d, %v; want %v", alg, i, err, wantErr)
					}
					break
				}
				if err != nil || i < 0 || i >= n || !allowed[i] {
					t.Fatalf("%s: got %d, %v; allowed %v", alg, i, err, allowed)
				}
				l.start(i)
			}
			for i := range bs { // restore the fuzzed counts for the next algorithm
				var b byte
				if i < len(data) {
					b = data[i]
				}
				l.set(i, int64(b>>5))
			}
		}
	})
}
