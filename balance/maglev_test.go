package balance

import (
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var maglevUpdate = flag.Bool("update", false, "rewrite the maglev golden tables in testdata/")

// maglevCounts returns the number of slots of each position.
func maglevCounts(t *testing.T, table []int32, n int) []int {
	t.Helper()
	c := make([]int, n)
	for s, k := range table {
		if k < 0 || int(k) >= n {
			t.Fatalf("slot %d holds %d, outside [0,%d)", s, k, n)
		}
		c[k]++
	}
	return c
}

func hashIDs(n int) []string {
	ids := make([]string, n)
	for i, b := range hashPool(n, nil) {
		ids[i] = b.ID
	}
	return ids
}

func TestMaglevEqualWeightCounts(t *testing.T) {
	for _, tc := range []struct{ n, size int }{
		{1, 251}, {2, 251}, {3, 251}, {7, 251}, {251, 251},
		{2, 65537}, {10, 65537}, {100, 65537}, {1000, 65537}, {3, 4093},
	} {
		w := slices.Repeat([]int{5}, tc.n)
		table, err := MaglevTable(hashIDs(tc.n), w, tc.size)
		if err != nil {
			t.Fatalf("n=%d M=%d: %v", tc.n, tc.size, err)
		}
		if len(table) != tc.size {
			t.Fatalf("n=%d M=%d: table has %d slots", tc.n, tc.size, len(table))
		}
		lo, hi := tc.size/tc.n, (tc.size+tc.n-1)/tc.n
		for k, c := range maglevCounts(t, table, tc.n) {
			if c < lo || c > hi {
				t.Errorf("n=%d M=%d: backend %d has %d slots, want %d..%d", tc.n, tc.size, k, c, lo, hi)
			}
		}
	}
}

func TestMaglevWeightedCounts(t *testing.T) {
	for _, tc := range []struct {
		name    string
		weights []int
		size    int
	}{
		{"1-2-3-4", []int{1, 2, 3, 4}, 65537},
		{"5-1-1", []int{5, 1, 1}, 251},
		{"one heavy", []int{1000, 1, 1, 1}, 65537},
		{"tiny share gets one slot", []int{1000000, 1}, 251},
		{"common factor", []int{100, 200, 300}, 4093},
		{"many mixed", []int{1, 7, 3, 9, 2, 8, 4, 6, 5, 10, 1, 1, 2, 3}, 65537},
	} {
		table, err := MaglevTable(hashIDs(len(tc.weights)), tc.weights, tc.size)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		total := 0
		for _, w := range tc.weights {
			total += w
		}
		n := len(tc.weights)
		for k, c := range maglevCounts(t, table, n) {
			// One slot each, the rest in proportion to weight, rounded by largest remainder: the
			// count is within one slot of the exact share.
			exact := 1 + float64(tc.size-n)*float64(tc.weights[k])/float64(total)
			if d := float64(c) - exact; d <= -1 || d >= 1 {
				t.Errorf("%s: backend %d (w=%d) has %d slots, exact share %.2f", tc.name, k, tc.weights[k], c, exact)
			}
		}
	}
}

// TestMaglevOrderIndependent builds the table from every permutation of a small input (and
// random permutations of a larger one) and checks it maps every slot to the same ID.
func TestMaglevOrderIndependent(t *testing.T) {
	ids := []string{"c:80", "a:80", "e:80", "b:80", "d:80"}
	weights := []int{3, 1, 5, 2, 4}
	asIDs := func(perm []int) []string {
		pi, pw := make([]string, len(perm)), make([]int, len(perm))
		for k, i := range perm {
			pi[k], pw[k] = ids[i], weights[i]
		}
		table, err := MaglevTable(pi, pw, 251)
		if err != nil {
			t.Fatal(err)
		}
		out := make([]string, len(table))
		for s, k := range table {
			out[s] = pi[k]
		}
		return out
	}
	ref := asIDs([]int{0, 1, 2, 3, 4})
	var permute func(prefix, rest []int)
	count := 0
	permute = func(prefix, rest []int) {
		if len(rest) == 0 {
			count++
			if got := asIDs(prefix); !slices.Equal(got, ref) {
				t.Fatalf("order %v gives a different table", prefix)
			}
			return
		}
		for j := range rest {
			next := append(slices.Clone(prefix), rest[j])
			permute(next, slices.Delete(slices.Clone(rest), j, j+1))
		}
	}
	permute(nil, []int{0, 1, 2, 3, 4})
	if count != 120 {
		t.Fatalf("checked %d permutations, want 120", count)
	}

	// A pool through the picker: same backend ID for every key whatever the order.
	bs := hashPool(50, nil)
	keys := hashKeys(2000, 21)
	p := mustNew(t, "maglev", bs, Options{TableSize: 4093})
	r := rand.New(rand.NewPCG(5, 6))
	for round := 0; round < 3; round++ {
		sh := slices.Clone(bs)
		r.Shuffle(len(sh), func(i, j int) { sh[i], sh[j] = sh[j], sh[i] })
		q := mustNew(t, "maglev", sh, Options{TableSize: 4093})
		for _, k := range keys {
			if a, b := bs[mustPick(t, p, k, Tried{})].ID, sh[mustPick(t, q, k, Tried{})].ID; a != b {
				t.Fatalf("key %#x: %s vs %s after shuffling", k, a, b)
			}
		}
	}
}

// TestMaglevDisruption removes one of N backends and counts the slots that change owner
// although their owner stayed ("innocent" moves, which Maglev allows and a ring does not).
// Measured with these inputs (worst of three removals, as a fraction of all slots): N=10,
// M=65537: 0.38%; N=100, M=65537: 0.61%; N=100, M=4093 (M/N ≈ 41): 2.9%; N=20 weighted 1..4,
// M=65537: 0.35%. The limits are set a little above.
func TestMaglevDisruption(t *testing.T) {
	for _, tc := range []struct {
		n, size int
		weights bool
		limit   float64 // fraction of all slots
	}{
		{10, 65537, false, 0.01},
		{100, 65537, false, 0.025},
		{100, 4093, false, 0.05},
		{20, 65537, true, 0.025},
	} {
		ids := hashIDs(tc.n)
		w := slices.Repeat([]int{1}, tc.n)
		if tc.weights {
			for i := range w {
				w[i] = 1 + i%4
			}
		}
		before, err := MaglevTable(ids, w, tc.size)
		if err != nil {
			t.Fatal(err)
		}
		worst := 0
		for _, gone := range []int{0, tc.n / 2, tc.n - 1} {
			rest, rw := slices.Delete(slices.Clone(ids), gone, gone+1), slices.Delete(slices.Clone(w), gone, gone+1)
			after, err := MaglevTable(rest, rw, tc.size)
			if err != nil {
				t.Fatal(err)
			}
			innocent := 0
			for s := range before {
				if old := ids[before[s]]; old != ids[gone] && old != rest[after[s]] {
					innocent++
				}
			}
			worst = max(worst, innocent)
		}
		f := float64(worst) / float64(tc.size)
		t.Logf("n=%d M=%d weighted=%v: removing one moved at most %d innocent slots (%.2f%%; the removed one held about %.2f%%)",
			tc.n, tc.size, tc.weights, worst, 100*f, 100.0/float64(tc.n))
		if f > tc.limit {
			t.Errorf("n=%d M=%d: %.4f of slots moved between staying backends, limit %.3f", tc.n, tc.size, f, tc.limit)
		}
	}
}

func TestMaglevTableErrors(t *testing.T) {
	for _, tc := range []struct {
		name    string
		ids     []string
		weights []int
		size    int
	}{
		{"no backends", nil, nil, 251},
		{"length mismatch", []string{"a", "b"}, []int{1}, 251},
		{"not prime", []string{"a"}, []int{1}, 250},
		{"one is not prime", []string{"a"}, []int{1}, 1},
		{"negative size", []string{"a"}, []int{1}, -7},
		{"too large", []string{"a"}, []int{1}, 5000087},
		{"smaller than n", []string{"a", "b", "c"}, []int{1, 1, 1}, 2},
		{"zero weight", []string{"a", "b"}, []int{1, 0}, 251},
		{"negative weight", []string{"a", "b"}, []int{1, -1}, 251},
		{"duplicate ID", []string{"a", "b", "a"}, []int{1, 1, 1}, 251},
	} {
		_, err := MaglevTable(tc.ids, tc.weights, tc.size)
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Algorithm != "maglev" {
			t.Errorf("%s: err = %v, want a maglev ConfigError", tc.name, err)
		}
	}
	if table, err := MaglevTable([]string{"a"}, []int{1}, 0); err != nil || len(table) != MaglevDefaultSize {
		t.Errorf("size 0: len %d, err %v; want the default %d", len(table), err, MaglevDefaultSize)
	}
	if _, err := New("maglev", hashPool(3, nil), Options{TableSize: 100}); err == nil {
		t.Error("New with a non-prime table size succeeded")
	}
}

func TestMaglevPickUnusable(t *testing.T) {
	for _, n := range []int{2, 5, 40} {
		bs := hashPool(n, nil)
		load := newHashLoad(n)
		p := mustNew(t, "maglev", bs, Options{Load: load, TableSize: 251})
		m := p.(*maglev)
		for _, key := range hashKeys(300, 31) {
			own := int(m.table[key%m.size])
			if got := mustPick(t, p, key, Tried{}); got != own {
				t.Fatalf("n=%d key %#x: got %d, want table owner %d", n, key, got, own)
			}
			retry := mustPick(t, p, key, hashTried(own))
			if retry == own {
				t.Fatalf("n=%d: tried backend picked again", n)
			}
			if again := mustPick(t, p, key, hashTried(own)); again != retry {
				t.Fatalf("n=%d: retry not stable: %d then %d", n, retry, again)
			}
			load.full[own].Store(true)
			if got := mustPick(t, p, key, Tried{}); got != retry {
				t.Fatalf("n=%d: full owner should move the key like a tried one: %d vs %d", n, got, retry)
			}
			load.full[own].Store(false)
		}
		// Everything but one backend unusable: the probes mostly miss and the scan finds it.
		last := n - 1
		var all Tried
		for i := 0; i < n-1 && i < maxTried; i++ {
			all.Add(i)
		}
		for i := maxTried; i < n-1; i++ {
			load.full[i].Store(true)
		}
		for _, key := range hashKeys(50, 32) {
			if got := mustPick(t, p, key, all); got != last {
				t.Fatalf("n=%d: got %d, want the only usable %d", n, got, last)
			}
		}
		load.full[last].Store(true)
		if _, err := p.Pick(1, all); !errors.Is(err, ErrBusy) {
			t.Errorf("n=%d: rest full: err = %v, want ErrBusy", n, err)
		}
		if n <= maxTried {
			all.Add(last)
			if _, err := p.Pick(1, all); !errors.Is(err, ErrNoBackend) {
				t.Errorf("n=%d: all tried: err = %v, want ErrNoBackend", n, err)
			}
		}
		if a := testing.AllocsPerRun(100, func() { _, _ = p.Pick(12345, hashTried(0)) }); a != 0 {
			t.Errorf("Pick allocates %.1f times", a)
		}
	}
}

// maglevGolden is one fixed input whose M=251 table is kept in testdata/.
type maglevGolden struct {
	name    string
	ids     []string
	weights []int
}

var maglevGoldens = []maglevGolden{
	{"equal3", []string{"10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80"}, []int{1, 1, 1}},
	{"weighted5", []string{"c", "a", "e", "b", "d"}, []int{3, 1, 5, 2, 4}},
	{"names10", []string{"backend-09", "backend-08", "backend-07", "backend-06", "backend-05",
		"backend-04", "backend-03", "backend-02", "backend-01", "backend-00"}, []int{2, 1, 2, 1, 2, 1, 2, 1, 2, 1}},
}

// render writes the table as the IDs that own each slot, ten slots a line, so that a diff of
// a golden file is readable.
func (g maglevGolden) render(table []int32) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# MaglevTable(ids, weights, 251); regenerate with: go test ./balance -run TestMaglevGolden -update\n")
	for k, id := range g.ids {
		fmt.Fprintf(&b, "# %s weight %d\n", id, g.weights[k])
	}
	for s, k := range table {
		sep := " "
		if s%10 == 9 || s == len(table)-1 {
			sep = "\n"
		}
		fmt.Fprintf(&b, "%s%s", g.ids[k], sep)
	}
	return b.String()
}

// TestMaglevGolden pins the tables for fixed inputs: a change of hash, seed, turn order or
// quota rule would silently make nodes of different versions disagree, so it must show here.
func TestMaglevGolden(t *testing.T) {
	for _, g := range maglevGoldens {
		table, err := MaglevTable(g.ids, g.weights, 251)
		if err != nil {
			t.Fatalf("%s: %v", g.name, err)
		}
		got := g.render(table)
		path := filepath.Join("testdata", "maglev_"+g.name+".golden")
		if *maglevUpdate {
			if err := os.MkdirAll("testdata", 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%s: %v (run with -update to create it)", g.name, err)
		}
		if got != string(want) {
			t.Errorf("%s: table differs from %s (run with -update if the change is intended):\n%s", g.name, path, got)
		}
	}
}
