package balance

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// ringOf returns the plain ring inside a ringhash picker, bounded or not.
func ringOf(t *testing.T, p Picker) *ringhash {
	t.Helper()
	switch r := p.(type) {
	case *ringhash:
		return r
	case *boundedRing:
		return &r.ringhash
	}
	t.Fatalf("not a ringhash picker: %T", p)
	return nil
}

func TestRingHashPoints(t *testing.T) {
	for _, tc := range []struct {
		name    string
		weights []int
		scale   float64 // points per weight unit
	}{
		{"equal", []int{1, 1, 1}, 160},
		{"weighted", []int{1, 2, 3, 10}, 160},
		{"large weights shrink", []int{1000, 2000, 3000}, float64(ringMaxPoints) / 6000},
		{"tiny share keeps a point", []int{1000000, 1}, float64(ringMaxPoints) / 1000001},
	} {
		bs := hashPool(len(tc.weights), tc.weights)
		r := ringOf(t, mustNew(t, "ringhash", bs, Options{}))
		count := make([]int, len(bs))
		for j, o := range r.owner {
			count[o]++
			if j > 0 && r.points[j] < r.points[j-1] {
				t.Fatalf("%s: ring not sorted at %d", tc.name, j)
			}
		}
		for i, w := range tc.weights {
			if want := max(1, int(math.Round(float64(w)*tc.scale))); count[i] != want {
				t.Errorf("%s: backend %d (w=%d) has %d points, want %d", tc.name, i, w, count[i], want)
			}
		}
		if len(r.points) > ringMaxPoints+len(bs) {
			t.Errorf("%s: %d points, cap %d", tc.name, len(r.points), ringMaxPoints)
		}
	}
}

// TestRingHashShares measures key shares on the plain ring. With 160 points per weight unit
// an arc total has a relative spread of about 1/√(160·w); measured deviations with these IDs
// are at most 2.1 points (weights 1,2,3 give 0.167/0.312/0.521), and the bound is 5.
func TestRingHashShares(t *testing.T) {
	keys := hashKeys(100000, 41)
	for _, weights := range [][]int{{1, 1, 1, 1, 1}, {1, 2, 3}, {4, 1, 3, 2}, {10, 1, 1, 1}} {
		bs := hashPool(len(weights), weights)
		p := mustNew(t, "ringhash", bs, Options{})
		got := make([]float64, len(bs))
		for _, k := range keys {
			got[mustPick(t, p, k, Tried{})] += 1 / float64(len(keys))
		}
		total := 0
		for _, w := range weights {
			total += w
		}
		for i, w := range weights {
			if want := float64(w) / float64(total); math.Abs(got[i]-want) > 0.05 {
				t.Errorf("weights %v: backend %d share %.4f, want %.4f ± 0.05", weights, i, got[i], want)
			}
		}
		t.Logf("weights %v: shares %.3f", weights, got)
	}
}

func TestRingHashOrderIndependent(t *testing.T) {
	bs := hashPool(30, []int{1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3})
	keys := hashKeys(5000, 42)
	p := mustNew(t, "ringhash", bs, Options{})
	r := rand.New(rand.NewPCG(7, 8))
	for round := 0; round < 3; round++ {
		sh := slices.Clone(bs)
		r.Shuffle(len(sh), func(i, j int) { sh[i], sh[j] = sh[j], sh[i] })
		q := mustNew(t, "ringhash", sh, Options{})
		for _, k := range keys {
			if a, b := bs[mustPick(t, p, k, Tried{})].ID, sh[mustPick(t, q, k, Tried{})].ID; a != b {
				t.Fatalf("key %#x: %s vs %s after shuffling", k, a, b)
			}
		}
	}
}

// TestRingHashDisruption removes and adds one backend. While the points per weight unit stay
// at 160 (Σw·160 ≤ 2^18) nothing moves between the other backends. Above that cap the scale
// follows Σw, so about |ΔΣw|/Σw of the keys also move between the others: measured 0.94% for
// 100 backends of weight 100 (the removed one owned 1.07%).
func TestRingHashDisruption(t *testing.T) {
	keys := hashKeys(20000, 43)
	for _, tc := range []struct {
		name    string
		n, w    int
		limit   float64 // fraction of all keys moved between unchanged backends
		indexes []int
	}{
		{"10 equal", 10, 1, 0, []int{0, 4, 9}},
		{"200 equal", 200, 1, 0, []int{0, 199}},
		{"100 of weight 100 (scaled)", 100, 100, 0.02, []int{0, 50}},
	} {
		bs := hashPool(tc.n, slices.Repeat([]int{tc.w}, tc.n))
		full := mustNew(t, "ringhash", bs, Options{})
		for _, gone := range tc.indexes {
			rest := slices.Delete(slices.Clone(bs), gone, gone+1)
			less := mustNew(t, "ringhash", rest, Options{})
			innocent, toNew := 0, 0
			for _, k := range keys {
				a, b := bs[mustPick(t, full, k, Tried{})].ID, rest[mustPick(t, less, k, Tried{})].ID
				switch {
				case a == bs[gone].ID: // removed: its keys must move (and, read backwards, adding moves exactly these)
					toNew++
				case a != b:
					innocent++
				}
			}
			f := float64(innocent) / float64(len(keys))
			if f > tc.limit {
				t.Errorf("%s: removing %s moved %.4f of keys between others, limit %.3f", tc.name, bs[gone].ID, f, tc.limit)
			}
			if gone == tc.indexes[0] {
				t.Logf("%s: the removed backend owned %.4f, %.4f moved between others", tc.name, float64(toNew)/float64(len(keys)), f)
			}
		}
	}
}

// TestRingHashRetry checks that tried or full backends move the key to the owner of the next
// point clockwise that belongs to a different usable backend.
func TestRingHashRetry(t *testing.T) {
	bs := hashPool(5, []int{1, 2, 1, 2, 1})
	load := newHashLoad(5)
	p := mustNew(t, "ringhash", bs, Options{Load: load})
	r := ringOf(t, p)
	for _, key := range hashKeys(300, 44) {
		var tried Tried
		start := r.search(key)
		for attempt := 0; attempt < len(bs); attempt++ {
			var want int = -1
			for j := 0; j < len(r.points); j++ {
				o := int(r.owner[(start+j)%len(r.points)])
				if !tried.Has(o) {
					want = o
					break
				}
			}
			got := mustPick(t, p, key, tried)
			if got != want {
				t.Fatalf("key %#x attempt %d: got %d, want %d", key, attempt, got, want)
			}
			if attempt == 0 {
				load.full[got].Store(true)
				second := mustPick(t, p, key, Tried{})
				load.full[got].Store(false)
				if retry := mustPick(t, p, key, hashTried(got)); retry != second {
					t.Fatalf("full and tried must move the key alike: %d vs %d", second, retry)
				}
			}
			tried.Add(got)
		}
		if _, err := p.Pick(key, tried); !errors.Is(err, ErrNoBackend) {
			t.Fatalf("all tried: err = %v, want ErrNoBackend", err)
		}
	}
	for i := range bs {
		load.full[i].Store(true)
	}
	if _, err := p.Pick(1, hashTried(0)); !errors.Is(err, ErrBusy) {
		t.Errorf("rest full: err = %v, want ErrBusy", err)
	}
}

func TestRingHashFactorErrors(t *testing.T) {
	for _, f := range []float64{-1, 0.5, 0.999, math.NaN(), math.Inf(1)} {
		_, err := New("ringhash", hashPool(3, nil), Options{BalanceFactor: f})
		var ce *ConfigError
		if !errors.As(err, &ce) {
			t.Errorf("factor %v: err = %v, want ConfigError", f, err)
		}
	}
	for _, f := range []float64{0, 1, 1.25, 2} {
		if _, err := New("ringhash", hashPool(3, nil), Options{BalanceFactor: f}); err != nil {
			t.Errorf("factor %v: %v", f, err)
		}
	}
}

// ringLoop is a closed-loop client: `window` requests in flight, a request finishes (a random
// one) each time a new one starts. It checks the bounded-load rule on every pick against the
// true total and returns the pick counts. tell is called with every count change (nil when the
// Load reports the total itself).
func ringLoop(t *testing.T, p Picker, bs []Backend, load *hashLoad, factor float64, window, picks int, keyOf func(r *rand.Rand) uint64, tell func(i int, n int64)) []int {
	t.Helper()
	r := rand.New(rand.NewPCG(9, 10))
	var inflight []int // backend of each request in flight
	counts := make([]int, len(bs))
	totalW := 0
	for _, b := range bs {
		totalW += b.Weight
	}
	change := func(i int, d int64) {
		n := load.inflight[i].Add(d)
		if tell != nil {
			tell(i, n)
		}
	}
	for step := 0; step < picks; step++ {
		var total int64
		for i := range bs {
			total += load.InFlight(i)
		}
		i := mustPick(t, p, keyOf(r), Tried{})
		capacity := math.Ceil(factor * float64(total+1) * float64(bs[i].Weight) / float64(totalW))
		if got := load.InFlight(i); float64(got) >= capacity {
			t.Fatalf("step %d: backend %d (w=%d) has %d in flight, capacity %.0f of total %d+1", step, i, bs[i].Weight, got, capacity, total)
		}
		change(i, 1)
		counts[i]++
		inflight = append(inflight, i)
		if len(inflight) == window {
			k := r.IntN(len(inflight))
			change(inflight[k], -1)
			inflight[k] = inflight[len(inflight)-1]
			inflight = inflight[:len(inflight)-1]
		}
	}
	return counts
}

func TestRingHashBoundedClosedLoop(t *testing.T) {
	weights := []int{1, 1, 2, 2, 3, 3}
	hot := uint64(0xdeadbeefcafe)
	keyOf := func(r *rand.Rand) uint64 {
		if r.IntN(2) == 0 {
			return hot // half of all requests share one key
		}
		return r.Uint64()
	}
	for _, tc := range []struct {
		name   string
		factor float64
		total  bool // the Load implements TotalLoad; no Update calls
	}{
		{"tracker 1.25", 1.25, false},
		{"tracker 1.0", 1.0, false},
		{"tracker 2.0", 2.0, false},
		{"TotalLoad 1.25", 1.25, true},
	} {
		bs := hashPool(len(weights), weights)
		load := newHashLoad(len(bs))
		o := Options{Load: load, BalanceFactor: tc.factor}
		if tc.total {
			o.Load = hashTotalLoad{load}
		}
		p := mustNew(t, "ringhash", bs, o)
		var tell func(int, int64)
		if !tc.total {
			tr, ok := p.(Tracker)
			if !ok {
				t.Fatalf("%s: bounded ringhash is not a Tracker", tc.name)
			}
			tell = tr.Update
		}
		counts := ringLoop(t, p, bs, load, tc.factor, 60, 20000, keyOf, tell)
		// The hot key alone would put half the traffic on one backend; bounded loads spread it.
		for i, c := range counts {
			if c == 0 {
				t.Errorf("%s: backend %d got nothing", tc.name, i)
			}
		}
		t.Logf("%s: picks %v", tc.name, counts)
	}

	// Unbounded, the same loop sends every hot request to one backend.
	bs := hashPool(len(weights), weights)
	load := newHashLoad(len(bs))
	p := mustNew(t, "ringhash", bs, Options{Load: load})
	if _, ok := p.(Tracker); ok {
		t.Error("unbounded ringhash should not ask for Update calls")
	}
	owner := mustPick(t, p, hot, Tried{})
	r := rand.New(rand.NewPCG(1, 1))
	hits := 0
	for k := 0; k < 1000; k++ {
		if mustPick(t, p, keyOf(r), Tried{}) == owner {
			hits++
		}
	}
	if hits < 500 {
		t.Errorf("unbounded: hot key owner got %d of 1000, want at least the hot half", hits)
	}
}

func TestRingHashBoundedTracker(t *testing.T) {
	// Backups form their own tier; both tiers are bounded rings, so New returns a Tracker
	// that forwards to both, and each ignores the other's indexes.
	bs := hashPool(4, nil)
	bs[3].Backup = true
	load := newHashLoad(4)
	load.inflight[0].Store(5) // counted at build
	p := mustNew(t, "ringhash", bs, Options{Load: load, BalanceFactor: 1.25})
	tr, ok := p.(Tracker)
	if !ok {
		t.Fatalf("%T is not a Tracker", p)
	}
	prim := p.(*trackedTiers).primary.(*boundedRing)
	if got := prim.total.Load(); got != 5 {
		t.Fatalf("initial total %d, want 5", got)
	}
	tr.Update(1, 3)
	tr.Update(3, 7) // a backup: not the primary tier's
	tr.Update(0, 4)
	tr.Update(99, 1) // out of range: ignored
	tr.Update(-1, 1)
	if got := prim.total.Load(); got != 7 {
		t.Errorf("primary total %d, want 4+3", got)
	}

	// Without updates or TotalLoad the bound degrades to the plain ring, never to an error.
	load2 := newHashLoad(3)
	q := mustNew(t, "ringhash", hashPool(3, nil), Options{Load: load2, BalanceFactor: 1.25})
	for i := 0; i < 3; i++ {
		load2.inflight[i].Store(100)
	}
	plain := mustNew(t, "ringhash", hashPool(3, nil), Options{})
	for _, k := range hashKeys(200, 45) {
		if a, b := mustPick(t, q, k, Tried{}), mustPick(t, plain, k, Tried{}); a != b {
			t.Fatalf("stale total: got %d, want the plain ring's %d", a, b)
		}
	}
	for _, pk := range []Picker{p, q, plain} {
		if a := testing.AllocsPerRun(100, func() { _, _ = pk.Pick(777, hashTried(1)) }); a != 0 {
			t.Errorf("%T.Pick allocates %.1f times", pk, a)
		}
	}
}

// TestSortRingPoints compares the bucket sort with a stable comparison sort, on uniform
// hashes, duplicates (which must keep member order) and one crowded bucket.
func TestSortRingPoints(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for _, tc := range []struct {
		name string
		gen  func(j int) uint64
	}{
		{"uniform", func(int) uint64 { return r.Uint64() }},
		{"duplicates", func(int) uint64 { return uint64(r.IntN(50)) << 40 }},
		{"crowded bucket", func(int) uint64 { return 0xabcd<<48 | uint64(r.IntN(1000)) }},
		{"mixed", func(j int) uint64 {
			if j%3 == 0 {
				return 7 << 48
			}
			return r.Uint64()
		}},
	} {
		pts := make([]ringPoint, 5000)
		for j := range pts {
			pts[j] = ringPoint{tc.gen(j), int32(j)} // generated in member order, like the build
		}
		want := slices.Clone(pts)
		slices.SortStableFunc(want, func(a, b ringPoint) int {
			switch {
			case a.h < b.h:
				return -1
			case a.h > b.h:
				return 1
			}
			return 0
		})
		if got := sortRingPoints(pts); !slices.Equal(got, want) {
			t.Errorf("%s: bucket sort differs from a stable sort", tc.name)
		}
	}
	if got := sortRingPoints(nil); len(got) != 0 {
		t.Errorf("empty input gave %d points", len(got))
	}
}

// TestRingHashSearchIndex checks the indexed search against a plain binary search, on ring
// sizes from one point up, with keys on, between, before and after the points.
func TestRingHashSearchIndex(t *testing.T) {
	for _, weights := range [][]int{{1}, {1, 1}, {3, 1, 2}, slices.Repeat([]int{7}, 300)} {
		r := ringOf(t, mustNew(t, "ringhash", hashPool(len(weights), weights), Options{}))
		want := func(key uint64) int {
			j, _ := slices.BinarySearch(r.points, key)
			if j == len(r.points) {
				return 0
			}
			return j
		}
		keys := append(hashKeys(2000, 46), 0, math.MaxUint64, r.points[0], r.points[0]-1, r.points[len(r.points)-1], r.points[len(r.points)-1]+1)
		for _, p := range r.points[:min(len(r.points), 500)] {
			keys = append(keys, p, p+1)
		}
		for _, k := range keys {
			if got, w := r.search(k), want(k); got != w {
				t.Fatalf("%d points: search(%#x) = %d, want %d", len(r.points), k, got, w)
			}
		}
	}
}
