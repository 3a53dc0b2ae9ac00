package balance

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
)

func TestCARPHashesByHand(t *testing.T) {
	// Member hash of "a", step by step with explicit uint32 arithmetic (draft §3.1):
	// loop: h = 0 + ROTL(0,19) + 'a' = 97; then h += h·0x62531965; then h = ROTL(h, 21).
	h := uint32(97)
	h += h * 0x62531965
	if h != 0x417c9fa6 {
		t.Fatalf("97 + 97·0x62531965 mod 2^32 = %#x, want 0x417c9fa6", h)
	}
	h = h<<21 | h>>11
	if h != 0xf4c82f93 {
		t.Fatalf("ROTL(0x417c9fa6, 21) = %#x, want 0xf4c82f93", h)
	}
	if got := carpMemberHash("a"); got != h {
		t.Errorf("carpMemberHash(a) = %#x, want %#x", got, h)
	}

	// A longer member name and URL, and their combination (draft §3.2), checked against the
	// formulas written out with shifts.
	ref := func(s string) uint32 {
		h := carpURLHashRef(s)
		h += h * 0x62531965
		return h<<21 | h>>11
	}
	for _, tc := range []struct {
		member, url        string
		memberHash, urlHsh uint32
		combined           uint32
	}{
		{"proxy1.example.com", "http://www.example.com/", 0x0fdd6087, 0xa31b69fa, 0x99c36b7f},
	} {
		if got := carpMemberHash(tc.member); got != tc.memberHash || got != ref(tc.member) {
			t.Errorf("carpMemberHash(%q) = %#x, want %#x", tc.member, got, tc.memberHash)
		}
		if got := uint32(CARPURLHashString(tc.url)); got != tc.urlHsh {
			t.Errorf("url hash(%q) = %#x, want %#x", tc.url, got, tc.urlHsh)
		}
		c := tc.urlHsh ^ tc.memberHash
		c += c * 0x62531965
		c = c<<21 | c>>11
		if c != tc.combined {
			t.Fatalf("hand-computed combined hash %#x, want %#x", c, tc.combined)
		}
		if got := carpCombine(tc.urlHsh, tc.memberHash); got != tc.combined {
			t.Errorf("carpCombine = %#x, want %#x", got, tc.combined)
		}
	}
}

func TestCARPMultipliers(t *testing.T) {
	x1 := math.Pow(3*(1.0/6), 1.0/3)
	x2 := math.Pow(2*(2.0/6-1.0/6)/x1+x1*x1, 0.5)
	x3 := (3.0/6-2.0/6)/(x1*x2) + x2
	for _, tc := range []struct {
		name string
		p    []float64
		want []float64
	}{
		{"one", []float64{1}, []float64{1}},
		{"equal", []float64{0.25, 0.25, 0.25, 0.25}, []float64{1, 1, 1, 1}},
		// X_1 = (2·¼)^½ = 1/√2; X_2 = (1·(¾−¼))/X_1 + X_1 = √2.
		{"quarter", []float64{0.25, 0.75}, []float64{1 / math.Sqrt2, math.Sqrt2}},
		{"1-2-3", []float64{1.0 / 6, 2.0 / 6, 3.0 / 6}, []float64{x1, x2, x3}},
	} {
		got := carpMultipliers(tc.p)
		for k := range got {
			if math.Abs(got[k]-tc.want[k]) > 1e-12 {
				t.Errorf("%s: X_%d = %.15f, want %.15f", tc.name, k+1, got[k], tc.want[k])
			}
		}
	}
}

// carpShares picks for every key and returns each backend's share of the keys.
func carpShares(t *testing.T, p Picker, n int, keys []uint64) []float64 {
	t.Helper()
	s := make([]float64, n)
	for _, k := range keys {
		s[mustPick(t, p, k, Tried{})]++
	}
	for i := range s {
		s[i] /= float64(len(keys))
	}
	return s
}

// TestCARPMultipliersIdealShares checks the multipliers where the draft's derivation holds
// exactly: independent uniform scores. Member k then wins a fraction P_k of the keys.
func TestCARPMultipliersIdealShares(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, p := range [][]float64{
		{0.5, 0.5},
		{0.1, 0.2, 0.3, 0.4},
		{1.0 / 13, 1.0 / 13, 1.0 / 13, 10.0 / 13},
		{0.01, 0.09, 0.3, 0.6},
	} {
		x := carpMultipliers(p)
		wins := make([]float64, len(p))
		const draws = 100000
		for d := 0; d < draws; d++ {
			best, bestScore := 0, -1.0
			for k := range p {
				if s := r.Float64() * x[k]; s > bestScore {
					best, bestScore = k, s
				}
			}
			wins[best]++
		}
		for k := range p {
			if got := wins[k] / draws; math.Abs(got-p[k]) > 0.005 {
				t.Errorf("shares %v: member %d wins %.4f, want %.4f ± 0.005", p, k, got, p[k])
			}
		}
	}
}

// TestCARPWeights measures shares with the draft's own combination function. It is not an
// independent hash: the top 11 bits of a score depend only on the low 11 bits of
// url_hash XOR member_hash (the multiply carries upwards, then ROTL 21 brings the low bits to
// the top), so members' scores are correlated and shares deviate from P_k by up to about 6
// points even with uniform keys (measured: weights 4,1,3,2 over IP-like IDs give
// 0.41/0.06/0.26/0.26 for 0.4/0.1/0.3/0.2). That is the protocol, kept exactly for
// interoperability; the test bounds the deviation and checks that no member is starved.
func TestCARPWeights(t *testing.T) {
	urls := make([]uint64, 100000)
	for i := range urls {
		urls[i] = CARPURLHashString("http://www.example.com/objects/" + strconv.Itoa(i) + ".jpg")
	}
	for _, tc := range []struct {
		name    string
		weights []int
		keys    []uint64
	}{
		{"equal/random keys", []int{1, 1, 1, 1, 1}, hashKeys(100000, 7)},
		{"1-2-3/random keys", []int{1, 2, 3}, hashKeys(100000, 8)},
		{"4-1-3-2/random keys", []int{4, 1, 3, 2}, hashKeys(100000, 9)},
		{"one heavy/random keys", []int{10, 1, 1, 1}, hashKeys(100000, 10)},
		{"1-2-3/CARP url hash", []int{1, 2, 3}, urls},
	} {
		bs := hashPool(len(tc.weights), tc.weights)
		p := mustNew(t, "carp", bs, Options{})
		got := carpShares(t, p, len(bs), tc.keys)
		total := 0
		for _, w := range tc.weights {
			total += w
		}
		worst := 0.0
		for i, w := range tc.weights {
			want := float64(w) / float64(total)
			worst = max(worst, math.Abs(got[i]-want))
			if math.Abs(got[i]-want) > 0.08 || got[i] < want/2 {
				t.Errorf("%s: backend %d (w=%d) share %.4f, want %.4f ± 0.08 and at least half", tc.name, i, w, got[i], want)
			}
		}
		t.Logf("%s: shares %.3f, worst deviation %.3f", tc.name, got, worst)
	}
}

func TestCARPOrderIndependent(t *testing.T) {
	bs := hashPool(7, []int{3, 1, 1, 2, 5, 1, 2})
	ref := mustNew(t, "carp", bs, Options{})
	keys := hashKeys(5000, 11)
	r := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 5; round++ {
		perm := r.Perm(len(bs))
		shuffled := make([]Backend, len(bs))
		for k, i := range perm {
			shuffled[k] = bs[i]
		}
		p := mustNew(t, "carp", shuffled, Options{})
		for _, k := range keys {
			if a, b := bs[mustPick(t, ref, k, Tried{})].ID, shuffled[mustPick(t, p, k, Tried{})].ID; a != b {
				t.Fatalf("order %v: key %#x goes to %s, want %s", perm, k, b, a)
			}
		}
	}
}

// TestCARPDisruption removes one member. With equal weights the multipliers stay 1, so only
// the removed member's keys move (exactly). With unequal weights every multiplier changes with
// the shares, so a few keys move between the survivors too; the test bounds that measured
// fraction (about 2% for 1..5 below) rather than pretending it is zero.
func TestCARPDisruption(t *testing.T) {
	keys := hashKeys(20000, 12)
	for _, tc := range []struct {
		name      string
		weights   []int
		innocents float64 // max fraction of all keys moved between surviving members
	}{
		{"equal", []int{1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, 0},
		{"1..5", []int{1, 2, 3, 4, 5}, 0.05},
	} {
		bs := hashPool(len(tc.weights), tc.weights)
		before := mustNew(t, "carp", bs, Options{})
		for gone := range bs {
			rest := slices.Delete(slices.Clone(bs), gone, gone+1)
			after := mustNew(t, "carp", rest, Options{})
			innocent, owned := 0, 0
			for _, k := range keys {
				a, b := bs[mustPick(t, before, k, Tried{})].ID, rest[mustPick(t, after, k, Tried{})].ID
				if a == bs[gone].ID {
					owned++
					continue
				}
				if a != b {
					innocent++
				}
			}
			if f := float64(innocent) / float64(len(keys)); f > tc.innocents {
				t.Errorf("%s: removing %s moved %.4f of keys between survivors, limit %.2f", tc.name, bs[gone].ID, f, tc.innocents)
			} else if tc.innocents > 0 && gone == 0 {
				t.Logf("%s: removing %s (owned %.3f) moved %.4f of keys between survivors", tc.name, bs[gone].ID, float64(owned)/float64(len(keys)), f)
			}
		}
	}
}

// TestCARPRetryOrder checks that successive retries walk the members by descending score.
func TestCARPRetryOrder(t *testing.T) {
	bs := hashPool(6, []int{1, 2, 3, 1, 2, 3})
	p := mustNew(t, "carp", bs, Options{})
	c := p.(*carp)
	for _, key := range hashKeys(200, 13) {
		type scored struct {
			idx   int
			score float64
		}
		var want []scored
		for k := range c.idx {
			want = append(want, scored{c.idx[k], float64(carpCombine(uint32(key), c.hash[k])) * c.mult[k]})
		}
		slices.SortStableFunc(want, func(a, b scored) int {
			switch {
			case a.score > b.score:
				return -1
			case a.score < b.score:
				return 1
			}
			return 0
		})
		var tried Tried
		for k := range want {
			got := mustPick(t, p, key, tried)
			if got != want[k].idx {
				t.Fatalf("key %#x attempt %d: got %d, want %d (scores %v)", key, k, got, want[k].idx, want)
			}
			if !tried.Add(got) {
				break
			}
		}
	}
}

func TestCARPUnusable(t *testing.T) {
	bs := hashPool(4, nil)
	load := newHashLoad(4)
	p := mustNew(t, "carp", bs, Options{Load: load})
	key := uint64(0x1234567)
	first := mustPick(t, p, key, Tried{})
	load.full[first].Store(true)
	second := mustPick(t, p, key, Tried{})
	if second == first {
		t.Fatalf("full backend %d picked", first)
	}
	if got := mustPick(t, p, key, hashTried(first)); got != second {
		t.Errorf("tried and full must move the key the same way: %d vs %d", got, second)
	}
	for i := range bs {
		load.full[i].Store(true)
	}
	if _, err := p.Pick(key, Tried{}); !errors.Is(err, ErrBusy) {
		t.Errorf("all full: err = %v, want ErrBusy", err)
	}
	if _, err := p.Pick(key, hashTried(0, 1)); !errors.Is(err, ErrBusy) {
		t.Errorf("some tried, rest full: err = %v, want ErrBusy", err)
	}
	if _, err := p.Pick(key, hashTried(0, 1, 2, 3)); !errors.Is(err, ErrNoBackend) {
		t.Errorf("all tried: err = %v, want ErrNoBackend", err)
	}
	load.full[first].Store(false)
	if got := mustPick(t, p, key, hashTried()); got != first {
		t.Errorf("after un-full: got %d, want %d", got, first)
	}
	if a := testing.AllocsPerRun(100, func() { _, _ = p.Pick(key, hashTried(1)) }); a != 0 {
		t.Errorf("Pick allocates %.1f times", a)
	}
}
