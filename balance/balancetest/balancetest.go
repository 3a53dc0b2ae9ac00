package balancetest

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"ballast/balance"
)

// Run checks algorithm a against package balance's contract. Each check is a subtest.
func Run(t *testing.T, a balance.Algorithm) {
	t.Helper()
	if _, err := a.New([]balance.Backend{{ID: "a", Weight: 1}, {ID: "b", Weight: 2}}, balance.Options{Load: NewLoad(2)}); err != nil {
		t.Fatalf("%s: building two plain backends: %v", a.Name, err)
	}
	t.Run("eligibility", func(t *testing.T) { testEligibility(t, a, balance.Options{}) })
	// The algorithm-specific options change tables and walks; eligibility must not depend on
	// them. Each option is ignored by the algorithms it does not concern.
	t.Run("eligibility-options", func(t *testing.T) {
		testEligibility(t, a, balance.Options{MaxInit: 1, TableSize: 251, BalanceFactor: 1.25})
	})
	t.Run("edges", func(t *testing.T) { testEdges(t, a) })
	t.Run("weights", func(t *testing.T) { testWeights(t, a) })
	if a.Caps.NeedsKey {
		t.Run("hash-order", func(t *testing.T) { testHashOrder(t, a) })
		t.Run("hash-disruption", func(t *testing.T) { testHashDisruption(t, a) })
	}
	t.Run("concurrent", func(t *testing.T) { testConcurrent(t, a) })
}

// member is one backend of a scenario together with its live state.
type member struct {
	b        balance.Backend
	full     bool
	inflight int64
}

// instance is a built picker with the backend slice and Load it was built from.
type instance struct {
	p    balance.Picker
	bs   []balance.Backend
	load *Load
}

// build lays ms out in the order perm (nil: as given), builds a picker with a seeded random
// source and primes the Load (and the picker, if it tracks load) with the members' state.
func build(a balance.Algorithm, ms []member, perm []int, seed uint64) (instance, error) {
	return buildWith(a, ms, perm, seed, balance.Options{})
}

// buildWith is build with algorithm-specific options; Load and Rand are set here.
func buildWith(a balance.Algorithm, ms []member, perm []int, seed uint64, o balance.Options) (instance, error) {
	if perm == nil {
		perm = make([]int, len(ms))
		for i := range perm {
			perm[i] = i
		}
	}
	bs := make([]balance.Backend, len(ms))
	load := NewLoad(len(ms))
	for i, j := range perm {
		bs[i] = ms[j].b
	}
	o.Load, o.Rand = load, rand.NewPCG(seed, 0x9e3779b97f4a7c15)
	p, err := a.New(bs, o)
	if err != nil {
		return instance{}, err
	}
	load.Track(p)
	for i, j := range perm {
		load.SetFull(i, ms[j].full)
		load.SetLatency(i, 0.010)
		load.SetInFlight(i, ms[j].inflight)
	}
	return instance{p, bs, load}, nil
}

// expect says what the contract allows for one pick: the set of acceptable indexes, or the
// error that must come back.
func expect(bs []balance.Backend, load *Load, tried *balance.Tried) ([]bool, error) {
	allowed := make([]bool, len(bs))
	for _, backup := range []bool{false, true} {
		avail, any := false, false
		for i, b := range bs {
			if b.Down || b.Weight <= 0 || b.Backup != backup || tried.Has(i) {
				continue
			}
			avail = true
			if !load.Full(i) {
				allowed[i], any = true, true
			}
		}
		switch {
		case any:
			return allowed, nil
		case avail:
			return nil, balance.ErrBusy // a busy tier queues; it never spills onto backups
		}
	}
	return nil, balance.ErrNoBackend
}

// check compares one pick with the contract and describes any violation.
func check(in instance, tried *balance.Tried, i int, err error) error {
	allowed, wantErr := expect(in.bs, in.load, tried)
	switch {
	case wantErr != nil && !errors.Is(err, wantErr):
		return fmt.Errorf("want error %q, got index %d, error %v", wantErr, i, err)
	case wantErr != nil:
		return nil
	case err != nil:
		return fmt.Errorf("want a pick among %s, got error %v", indexes(allowed), err)
	case i < 0 || i >= len(in.bs):
		return fmt.Errorf("index %d out of range [0,%d)", i, len(in.bs))
	case !allowed[i]:
		return fmt.Errorf("picked %d (%s), allowed only %s", i, in.bs[i].ID, indexes(allowed))
	}
	return nil
}

func indexes(set []bool) string {
	var s []string
	for i, ok := range set {
		if ok {
			s = append(s, fmt.Sprint(i))
		}
	}
	return "{" + strings.Join(s, ",") + "}"
}

// describe renders a backend slice and its live state for failure messages.
func describe(bs []balance.Backend, load *Load) string {
	var sb strings.Builder
	for i, b := range bs {
		fmt.Fprintf(&sb, "[%d %s w=%d", i, b.ID, b.Weight)
		if b.Backup {
			sb.WriteString(" backup")
		}
		if b.Down {
			sb.WriteString(" down")
		}
		if load.Full(i) {
			sb.WriteString(" full")
		}
		if n := load.InFlight(i); n != 0 {
			fmt.Fprintf(&sb, " inflight=%d", n)
		}
		sb.WriteString("] ")
	}
	return sb.String()
}

func triedString(tr *balance.Tried, n int) string {
	var s []string
	for i := 0; i < n; i++ {
		if tr.Has(i) {
			s = append(s, fmt.Sprint(i))
		}
	}
	return "{" + strings.Join(s, ",") + "}"
}

// permutations returns every ordering of 0..n-1 (Heap's algorithm); callers keep n small.
func permutations(n int) [][]int {
	p := make([]int, n)
	for i := range p {
		p[i] = i
	}
	out := [][]int{append([]int(nil), p...)}
	c := make([]int, n)
	for i := 0; i < n; {
		if c[i] < i {
			if i%2 == 0 {
				p[0], p[i] = p[i], p[0]
			} else {
				p[c[i]], p[i] = p[i], p[c[i]]
			}
			out = append(out, append([]int(nil), p...))
			c[i]++
			i = 0
		} else {
			c[i] = 0
			i++
		}
	}
	return out
}

// orders returns every permutation for up to maxExhaustive members and a few seeded random
// ones beyond.
func orders(rng *rand.Rand, n int) [][]int {
	const maxExhaustive, randomOrders = 4, 4
	if n <= maxExhaustive {
		return permutations(n)
	}
	out := make([][]int, randomOrders)
	for k := range out {
		out[k] = rng.Perm(n)
	}
	return out
}

// randomScenario draws a pool of 1..10 members with weights 0..5, some down, some backups,
// some full and some load.
func randomScenario(rng *rand.Rand) []member {
	ms := make([]member, 1+rng.IntN(10))
	for i := range ms {
		ms[i] = member{
			b: balance.Backend{
				ID:     fmt.Sprintf("10.0.0.%d:80", i+1),
				Weight: rng.IntN(6),
				Backup: rng.IntN(4) == 0,
				Down:   rng.IntN(5) == 0,
			},
			full:     rng.IntN(5) == 0,
			inflight: int64(rng.IntN(4)),
		}
	}
	return ms
}

// testEligibility: across random pools, in every input order, a pick is never Down, of weight
// 0, tried or full; backups only when no primary is usable; ErrBusy and ErrNoBackend exactly
// when the contract says so.
func testEligibility(t *testing.T, a balance.Algorithm, o balance.Options) {
	scenarios, picks := 48, 16
	if testing.Short() {
		scenarios = 16
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for sc := 0; sc < scenarios; sc++ {
		ms := randomScenario(rng)
		for _, perm := range orders(rng, len(ms)) {
			in, err := buildWith(a, ms, perm, uint64(sc), o)
			if err != nil {
				t.Fatalf("scenario %d: build: %v", sc, err)
			}
			for k := 0; k < picks; k++ {
				var tried balance.Tried
				for range rng.IntN(3) {
					tried.Add(rng.IntN(len(in.bs)))
				}
				i, err := in.p.Pick(rng.Uint64(), tried)
				if msg := check(in, &tried, i, err); msg != nil {
					t.Fatalf("scenario %d, pick %d: %v\npool: %s\ntried: %s", sc, k, msg, describe(in.bs, in.load), triedString(&tried, len(in.bs)))
				}
			}
		}
	}
}

// testEdges runs the named corner cases of the contract.
func testEdges(t *testing.T, a balance.Algorithm) {
	up := func(id string, w int) member { return member{b: balance.Backend{ID: id, Weight: w}} }
	down := func(m member) member { m.b.Down = true; return m }
	backup := func(m member) member { m.b.Backup = true; return m }
	full := func(m member) member { m.full = true; return m }
	cases := []struct {
		name  string
		ms    []member
		tried []int
		// only, when not -1, is the one index every pick must return; otherwise err is the
		// error every pick must return.
		only int
		err  error
	}{
		{"one backend", []member{up("a", 1)}, nil, 0, nil},
		{"one backend heavy", []member{up("a", 7)}, nil, 0, nil},
		{"one backend tried", []member{up("a", 1)}, []int{0}, -1, balance.ErrNoBackend},
		{"one backend full", []member{full(up("a", 1))}, nil, -1, balance.ErrBusy},
		{"empty pool", nil, nil, -1, balance.ErrNoBackend},
		{"all down", []member{down(up("a", 1)), down(up("b", 1)), down(backup(up("c", 1)))}, nil, -1, balance.ErrNoBackend},
		{"zero weights", []member{up("a", 0), up("b", 0), backup(up("c", 0))}, nil, -1, balance.ErrNoBackend},
		{"single usable primary", []member{down(up("a", 3)), up("b", 0), up("c", 2), down(up("d", 1))}, nil, 2, nil},
		{"single usable backup", []member{down(up("a", 1)), up("b", 0), down(backup(up("c", 1))), backup(up("d", 1)), backup(up("e", 0))}, nil, 3, nil},
		{"backup when primaries tried", []member{up("a", 1), up("b", 1), backup(up("c", 1))}, []int{0, 1}, 2, nil},
		{"primaries full: busy, not backup", []member{full(up("a", 1)), full(up("b", 2)), backup(up("c", 1))}, nil, -1, balance.ErrBusy},
		{"full and tried primaries: busy", []member{full(up("a", 1)), up("b", 2), backup(up("c", 1))}, []int{1}, -1, balance.ErrBusy},
		{"backups all full: busy", []member{down(up("a", 1)), full(backup(up("b", 1))), full(backup(up("c", 1)))}, nil, -1, balance.ErrBusy},
		{"backups all tried", []member{down(up("a", 1)), backup(up("b", 1)), backup(up("c", 1))}, []int{1, 2}, -1, balance.ErrNoBackend},
		{"only non-full primary", []member{full(up("a", 5)), full(up("b", 5)), up("c", 1), backup(up("d", 9))}, nil, 2, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, perm := range orders(rand.New(rand.NewPCG(3, 4)), len(c.ms)) {
				in, err := build(a, c.ms, perm, 5)
				if err != nil {
					t.Fatalf("build: %v", err)
				}
				var tried balance.Tried
				for _, j := range c.tried {
					tried.Add(slot(perm, j))
				}
				for k := 0; k < 50; k++ {
					i, err := in.p.Pick(uint64(k)*0x9e3779b97f4a7c15, tried)
					if c.only >= 0 {
						if err != nil || i != slot(perm, c.only) {
							t.Fatalf("pick %d: want index %d, got %d, %v\npool: %s", k, slot(perm, c.only), i, err, describe(in.bs, in.load))
						}
					} else if !errors.Is(err, c.err) {
						t.Fatalf("pick %d: want %v, got index %d, error %v\npool: %s", k, c.err, i, err, describe(in.bs, in.load))
					}
				}
			}
		})
	}
	t.Run("all ties", func(t *testing.T) { testTies(t, a) })
}

// slot is where member j landed in a backend slice laid out in order perm.
func slot(perm []int, j int) int {
	for i, k := range perm {
		if k == j {
			return i
		}
	}
	panic("member not in permutation")
}

// testTies: equal weights and no load. Every pick must be valid; an algorithm that reads
// neither keys nor load must reach every backend within 50 picks per backend, and so must a
// hash algorithm over distinct keys. (Load-aware algorithms may legitimately break ties by
// position; the closed-loop weight check covers their spread.)
func testTies(t *testing.T, a balance.Algorithm) {
	const n = 6
	ms := make([]member, n)
	for i := range ms {
		ms[i] = member{b: balance.Backend{ID: fmt.Sprintf("tie-%d", i), Weight: 3}}
	}
	in, err := build(a, ms, nil, 6)
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	seen := make([]int, n)
	rng := rand.New(rand.NewPCG(7, 8))
	for k := 0; k < 50*n; k++ {
		var tried balance.Tried
		i, err := in.p.Pick(rng.Uint64(), tried)
		if msg := check(in, &tried, i, err); msg != nil {
			t.Fatalf("pick %d: %v", k, msg)
		}
		seen[i]++
	}
	if a.Caps.NeedsLoad {
		return
	}
	for i, c := range seen {
		if c == 0 {
			t.Errorf("backend %d never picked among %d equal backends in %d picks (counts %v)", i, n, 50*n, seen)
		}
	}
}

// Tolerances of the weight check, as absolute differences between a backend's observed share
// of picks and its expected share p, over N picks:
//   - counting (no key, no load): 0.01 + 4·sqrt(p(1−p)/N), a 4-sigma binomial bound for the
//     random algorithms plus 1 % slack; deterministic schedules are exact anyway;
//   - hash algorithms over N random keys: 0.25·p + 0.01, since a ring's arcs vary by a few
//     percent per backend and a 25 % relative error still tells 1 from 2 from 10;
//   - load algorithms in the closed loop: 0.04 + 4·sqrt(p(1−p)/N): shares follow the in-flight
//     split, which is quantised by the window C.
func tolerance(a balance.Algorithm, p float64, n int) float64 {
	sigma := math.Sqrt(p * (1 - p) / float64(n))
	switch {
	case a.Caps.NeedsKey:
		return 0.25*p + 0.01
	case a.Caps.NeedsLoad:
		return 0.04 + 4*sigma
	}
	return 0.01 + 4*sigma
}

// testWeights checks shares against weights (or, for algorithms that are not Proportional, an
// even split). Load algorithms run a closed loop: C requests stay in flight, the oldest
// finishes before each new pick, so each backend's share of picks equals its share of the
// in-flight requests, which the algorithm steers.
func testWeights(t *testing.T, a balance.Algorithm) {
	cases := []struct {
		name    string
		weights []int
	}{
		{"equal", []int{1, 1, 1, 1}},
		{"1-2-3-4", []int{1, 2, 3, 4}},
		{"nginx 5-1-1", []int{5, 1, 1}},
		{"one heavy", []int{1, 1, 1, 1, 1, 1, 1, 10}},
		{"common factor", []int{20, 40, 60}},
		{"with zero", []int{2, 0, 1}},
	}
	const picks = 40000
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ms := make([]member, len(c.weights))
			total := 0
			for i, w := range c.weights {
				ms[i] = member{b: balance.Backend{ID: fmt.Sprintf("w%d-%d", i, w), Weight: w}}
				total += w
			}
			in, err := build(a, ms, nil, 11)
			if err != nil {
				t.Fatalf("build: %v", err)
			}
			var counts []int
			if a.Caps.NeedsLoad {
				counts = closedLoop(t, in, 8*total, picks)
			} else {
				counts = openLoop(t, in, picks)
			}
			usable := 0
			for _, w := range c.weights {
				if w > 0 {
					usable++
				}
			}
			for i, w := range c.weights {
				want := float64(w) / float64(total)
				if !a.Caps.Proportional && w > 0 {
					want = 1 / float64(usable)
				}
				got := float64(counts[i]) / picks
				if tol := tolerance(a, want, picks); math.Abs(got-want) > tol {
					t.Errorf("backend %d (weight %d): share %.4f, want %.4f ± %.4f (counts %v, weights %v)", i, w, got, want, tol, counts, c.weights)
				}
			}
		})
	}
}

// openLoop counts picks with no load, a fresh random key each time.
func openLoop(t *testing.T, in instance, picks int) []int {
	counts := make([]int, len(in.bs))
	rng := rand.New(rand.NewPCG(12, 13))
	for k := 0; k < picks; k++ {
		i, err := in.p.Pick(rng.Uint64(), balance.Tried{})
		if err != nil {
			t.Fatalf("pick %d: %v", k, err)
		}
		counts[i]++
	}
	return counts
}

// closedLoop keeps window requests in flight in FIFO order and counts picks after a warm-up
// of one window.
func closedLoop(t *testing.T, in instance, window, picks int) []int {
	counts := make([]int, len(in.bs))
	fifo := make([]int, 0, window)
	rng := rand.New(rand.NewPCG(14, 15))
	for k := 0; k < window+picks; k++ {
		if len(fifo) == window {
			in.load.Finish(fifo[0])
			fifo = fifo[1:]
		}
		i, err := in.p.Pick(rng.Uint64(), balance.Tried{})
		if err != nil {
			t.Fatalf("pick %d: %v\npool: %s", k, err, describe(in.bs, in.load))
		}
		in.load.Start(i)
		fifo = append(fifo, i)
		if k >= window {
			counts[i]++
		}
	}
	return counts
}

// hashPool is the pool the hash checks use: mixed weights, IDs like real addresses.
func hashPool(n int, weighted bool) []member {
	ms := make([]member, n)
	for i := range ms {
		w := 1
		if weighted {
			w = 1 + i%3
		}
		ms[i] = member{b: balance.Backend{ID: fmt.Sprintf("192.168.1.%d:8080", 10+i), Weight: w}}
	}
	return ms
}

// owners maps each key to the ID of the backend it picks.
func owners(t *testing.T, in instance, keys []uint64) []string {
	out := make([]string, len(keys))
	for k, key := range keys {
		i, err := in.p.Pick(key, balance.Tried{})
		if err != nil {
			t.Fatalf("key %#x: %v", key, err)
		}
		out[k] = in.bs[i].ID
	}
	return out
}

func hashKeys(n int) []uint64 {
	rng := rand.New(rand.NewPCG(21, 22))
	keys := make([]uint64, n)
	for k := range keys {
		keys[k] = rng.Uint64()
	}
	return keys
}

// testHashOrder: a key maps to the same backend ID whatever the order of the backend slice
// (two balancers reading the same pool in different orders must agree) and on every repeat.
func testHashOrder(t *testing.T, a balance.Algorithm) {
	ms := hashPool(10, true)
	keys := hashKeys(2000)
	base, err := build(a, ms, nil, 31)
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	want := owners(t, base, keys)
	if again := owners(t, base, keys); !equalStrings(want, again) {
		t.Fatalf("the same picker mapped a key to two backends on repeat")
	}
	rng := rand.New(rand.NewPCG(32, 33))
	for o := 0; o < 5; o++ {
		perm := rng.Perm(len(ms))
		in, err := build(a, ms, perm, uint64(40+o))
		if err != nil {
			t.Fatalf("build: %v", err)
		}
		got := owners(t, in, keys)
		for k := range keys {
			if got[k] != want[k] {
				t.Fatalf("order %v: key %#x went to %s, in input order to %s", perm, keys[k], got[k], want[k])
			}
		}
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Disruption margins for the hash check, as fractions of all keys: removing or adding one
// backend out of N may move at most 1/N + disruptionMargin of the keys, and at most
// innocentMargin of the keys that were on neither the removed nor the added backend
// (Maglev moves a few such keys; a ring or rendezvous hashing moves none).
const disruptionMargin, innocentMargin = 0.05, 0.03

// testHashDisruption removes one backend out of N (and adds it back) and counts moved keys.
func testHashDisruption(t *testing.T, a balance.Algorithm) {
	const n = 10
	ms := hashPool(n, false)
	keys := hashKeys(20000)
	full, err := build(a, ms, nil, 51)
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	for _, gone := range []int{0, 3, n - 1} {
		rest := append(append([]member(nil), ms[:gone]...), ms[gone+1:]...)
		less, err := build(a, rest, nil, 52)
		if err != nil {
			t.Fatalf("build: %v", err)
		}
		before, after := owners(t, full, keys), owners(t, less, keys)
		goneID := ms[gone].b.ID
		for _, dir := range []struct {
			name          string
			from, to      []string
			changedMember string
		}{{"remove", before, after, goneID}, {"add", after, before, goneID}} {
			moved, innocent := 0, 0
			for k := range keys {
				if dir.from[k] == dir.to[k] {
					continue
				}
				moved++
				if dir.from[k] != dir.changedMember && dir.to[k] != dir.changedMember {
					innocent++
				}
			}
			fm, fi := float64(moved)/float64(len(keys)), float64(innocent)/float64(len(keys))
			if limit := 1.0/n + disruptionMargin; fm > limit {
				t.Errorf("%s %s out of %d: %.3f of keys moved, limit 1/N + %.2f = %.3f", dir.name, goneID, n, fm, disruptionMargin, limit)
			}
			if fi > innocentMargin {
				t.Errorf("%s %s out of %d: %.3f of keys moved between unchanged backends, limit %.2f", dir.name, goneID, n, fi, innocentMargin)
			}
		}
	}
}

// testConcurrent hammers one picker from many goroutines while the load changes and one
// backend flips between full and not; under -race this also checks the picker's memory
// discipline. Every pick must return a usable primary that the request has not tried.
func testConcurrent(t *testing.T, a balance.Algorithm) {
	const goroutines, picks = 8, 1500
	ms := hashPool(8, true)
	ms = append(ms,
		member{b: balance.Backend{ID: "down:1", Weight: 5, Down: true}},
		member{b: balance.Backend{ID: "zero:1", Weight: 0}},
		member{b: balance.Backend{ID: "backup:1", Weight: 1, Backup: true}})
	bs := make([]balance.Backend, len(ms))
	for i := range ms {
		bs[i] = ms[i].b
	}
	load := NewLoad(len(bs))
	p, err := a.New(bs, balance.Options{Load: load}) // the global random source is concurrency-safe
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	load.Track(p)
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	wg.Add(1)
	go func() { // flip backend 0 between full and not, a bounded number of times
		defer wg.Done()
		for k := 0; k < goroutines*picks/4; k++ {
			load.SetFull(0, k%2 == 0)
		}
		load.SetFull(0, false)
	}()
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 99))
			for k := 0; k < picks; k++ {
				var tried balance.Tried
				if k%3 == 0 {
					tried.Add(rng.IntN(8))
				}
				i, err := p.Pick(rng.Uint64(), tried)
				switch {
				case err != nil:
					errs <- fmt.Errorf("goroutine %d pick %d: %v", g, k, err)
					return
				case i < 0 || i >= 8:
					errs <- fmt.Errorf("goroutine %d pick %d: index %d is not a usable primary (pool %d)", g, k, i, len(bs))
					return
				case tried.Has(i):
					errs <- fmt.Errorf("goroutine %d pick %d: picked tried backend %d", g, k, i)
					return
				}
				load.Start(i)
				load.Finish(i)
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
