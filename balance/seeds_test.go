package balance

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// rrBackends names backends a, b, c, … with the given weights.
func rrBackends(weights ...int) []Backend {
	bs := make([]Backend, len(weights))
	for i, w := range weights {
		bs[i] = Backend{ID: rrName(i), Weight: w}
	}
	return bs
}

func rrName(i int) string {
	if i < 26 {
		return string(rune('a' + i))
	}
	return fmt.Sprintf("s%d", i)
}

func rrBuild(t testing.TB, name string, bs []Backend, o Options) Picker {
	t.Helper()
	p, err := New(name, bs, o)
	if err != nil {
		t.Fatalf("New(%s): %v", name, err)
	}
	return p
}

// rrSeq picks n times without key or tried and spells the chosen IDs.
func rrSeq(t testing.TB, p Picker, bs []Backend, n int) string {
	t.Helper()
	out := make([]string, n)
	for k := range out {
		i, err := p.Pick(0, Tried{})
		if err != nil {
			t.Fatalf("pick %d: %v", k, err)
		}
		out[k] = bs[i].ID
	}
	return strings.Join(out, " ")
}

// rrRotations lists the rotations of a space-separated sequence by 0..k-1 entries.
func rrRotations(seq string, k int) []string {
	f := strings.Fields(seq)
	out := make([]string, k)
	for s := range out {
		out[s] = strings.Join(append(append([]string(nil), f[s:]...), f[:s]...), " ")
	}
	return out
}

// rrFixedRand always returns the same number; with it, vnswrr starts at entry 0.
type rrFixedRand uint64

func (r rrFixedRand) Uint64() uint64 { return uint64(r) }

// TestSeedApacheByRequestsTable reproduces the lbstatus table of seed 001 (Apache byrequests,
// four workers of lbfactor 25). The table shows each worker's lbstatus at the start of a loop,
// before that loop's credit step, and the worker the loop then elects.
func TestSeedApacheByRequestsTable(t *testing.T) {
	bs := rrBackends(25, 25, 25, 25)
	p := rrBuild(t, "byrequests", bs, Options{})
	rep, ok := p.(LBStatusReporter)
	if !ok {
		t.Fatalf("byrequests picker %T does not report lbstatus", p)
	}
	table := []struct {
		lbstatus [4]int64
		chosen   string
	}{
		{[4]int64{0, 0, 0, 0}, "a"},
		{[4]int64{-75, 25, 25, 25}, "b"},
		{[4]int64{-50, -50, 50, 50}, "c"},
		{[4]int64{-25, -25, -25, 75}, "d"},
		{[4]int64{0, 0, 0, 0}, "a"},
		{[4]int64{-75, 25, 25, 25}, "b"},
		{[4]int64{-50, -50, 50, 50}, "c"},
	}
	for loop, row := range table {
		for w := range bs {
			got, ok := rep.LBStatus(w)
			if !ok || got != row.lbstatus[w] {
				t.Fatalf("loop %d: lbstatus of %s = %d (%v), want %d", loop, bs[w].ID, got, ok, row.lbstatus[w])
			}
		}
		i, err := p.Pick(0, Tried{})
		if err != nil || bs[i].ID != row.chosen {
			t.Fatalf("loop %d: elected %d (%v), want %s", loop, i, err, row.chosen)
		}
	}
}

// TestSeedApacheCommentCase checks the example in mod_lbmethod_byrequests.c's comment, factors
// a b c d = 1 1 1 2. The comment prints "b a d c d a c d b d …" and, with b disabled,
// "a c d a c d …", but the rule it documents (credit every usable worker its factor, elect the
// first worker with the highest lbstatus, debit it the total) gives what is asserted here: d
// leads at once with 2, and a period of 5 elects d twice and a, b, c once each. The comment's
// sequences are illustrations (the second gives d a third of the picks where its factor 2 of
// 4 calls for half); our swrr follows the rule, as Apache's code does.
func TestSeedApacheCommentCase(t *testing.T) {
	cases := []struct {
		name string
		down string
		want string
	}{
		{"all enabled", "", "d a b c d d a b c d"},
		{"b disabled", "b", "d a c d d a c d d a c d"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			bs := rrBackends(1, 1, 1, 2)
			for i := range bs {
				bs[i].Down = bs[i].ID == c.down
			}
			p := rrBuild(t, "byrequests", bs, Options{})
			if got := rrSeq(t, p, bs, len(strings.Fields(c.want))); got != c.want {
				t.Fatalf("got %q, want %q", got, c.want)
			}
		})
	}
}

// TestSeedNginx511 is nginx's documented smooth sequence for weights 5, 1, 1: a a b a c a a.
// swrr and roundrobin (fixed start) produce it from the first pick; vnswrr produces a rotation
// of it that starts among the first n = 3 virtual nodes (Tengine's random() % n).
func TestSeedNginx511(t *testing.T) {
	const period = "a a b a c a a"
	want := period + " " + period
	bs := rrBackends(5, 1, 1)
	for _, name := range []string{"swrr", "roundrobin"} {
		if got := rrSeq(t, rrBuild(t, name, bs, Options{}), bs, 14); got != want {
			t.Errorf("%s: got %q, want %q", name, got, want)
		}
	}
	rots := rrRotations(period, 3)
	seen := map[int]bool{}
	for seed := uint64(0); seed < 64; seed++ {
		p := rrBuild(t, "vnswrr", bs, Options{Rand: rand.NewPCG(seed, 1)})
		got := rrSeq(t, p, bs, 14)
		found := false
		for s, r := range rots {
			if got == r+" "+r {
				found, seen[s] = true, true
			}
		}
		if !found {
			t.Fatalf("seed %d: vnswrr gave %q, not a rotation of %q by 0..2", seed, got, period)
		}
	}
	if len(seen) != 3 {
		t.Errorf("64 seeded pickers started only at offsets %v of 0..2", seen)
	}
}

// TestSeedTengineMaxInit checks Tengine's max_init rules (0 → the number of servers, more than
// the total weight → the total weight) and that the table grows one batch at a time, only
// when the cursor reaches the end of the built part.
func TestSeedTengineMaxInit(t *testing.T) {
	cases := []struct {
		name    string
		weights []int
		maxInit int
		// growth lists the built size after Build and then after each pick, starting at
		// entry 0.
		growth []int
	}{
		{"0 means servers", []int{5, 1, 1}, 0, []int{3, 3, 3, 3, 6, 6, 6, 7, 7}},
		{"above total means total", []int{5, 1, 1}, 100, []int{7, 7, 7}},
		{"equal to total", []int{5, 1, 1}, 7, []int{7, 7}},
		{"batches of 2", []int{5, 1, 1}, 2, []int{2, 2, 2, 4, 4, 6, 6, 7, 7, 7}},
		{"batches of 1", []int{2, 1}, 1, []int{1, 1, 2, 3, 3}},
		{"gcd shrinks the table", []int{50, 10, 10}, 0, []int{3, 3, 3, 3, 6, 6, 6, 7}},
		{"equal weights", []int{4, 4, 4, 4}, 0, []int{4, 4, 4, 4, 4, 4}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			bs := rrBackends(c.weights...)
			p := rrBuild(t, "vnswrr", bs, Options{MaxInit: c.maxInit, Rand: rrFixedRand(0)})
			v := p.(*vnswrr)
			for k, want := range c.growth {
				if k > 0 {
					if _, err := p.Pick(0, Tried{}); err != nil {
						t.Fatal(err)
					}
				}
				if got, _ := v.Built(); got != want {
					t.Fatalf("after %d picks: %d virtual nodes built, want %d (growth %v)", k, got, want, c.growth)
				}
			}
		})
	}
	// A big pool builds only its first batch up front: 2000 servers, weights 101..105.
	ws := make([]int, 2000)
	for i := range ws {
		ws[i] = 101 + i%5
	}
	v := rrBuild(t, "vnswrr", rrBackends(ws...), Options{}).(*vnswrr)
	if built, total := v.Built(); built != 2000 || total != 206000 {
		t.Errorf("2000 servers: built %d of %d virtual nodes, want 2000 of 206000", built, total)
	}
}
