package balance

import (
	"fmt"
	"math/bits"
	"math/rand/v2"
	"net/netip"
	"sync/atomic"
	"testing"
)

// hashLoad is the hash tests' Load: atomic counters, and an optional TotalInFlight.
type hashLoad struct {
	inflight []atomic.Int64
	full     []atomic.Bool
}

func newHashLoad(n int) *hashLoad {
	return &hashLoad{inflight: make([]atomic.Int64, n), full: make([]atomic.Bool, n)}
}

func (l *hashLoad) InFlight(i int) int64 { return l.inflight[i].Load() }
func (l *hashLoad) Full(i int) bool      { return l.full[i].Load() }
func (l *hashLoad) Latency(int) float64  { return 0 }

// hashTotalLoad adds the optional TotalLoad interface (an O(n) sum is fine in a test).
type hashTotalLoad struct{ *hashLoad }

func (l hashTotalLoad) TotalInFlight() int64 {
	var t int64
	for i := range l.inflight {
		t += l.inflight[i].Load()
	}
	return t
}

// hashPool returns n backends "10.0.<i/250>.<i%250>:8080" with the given weights (1 if nil).
func hashPool(n int, weights []int) []Backend {
	bs := make([]Backend, n)
	for i := range bs {
		bs[i] = Backend{ID: fmt.Sprintf("10.0.%d.%d:8080", i/250, i%250), Weight: 1}
		if weights != nil {
			bs[i].Weight = weights[i]
		}
	}
	return bs
}

func hashTried(idx ...int) Tried {
	var t Tried
	for _, i := range idx {
		t.Add(i)
	}
	return t
}

// hashKeys returns n reproducible well-mixed keys.
func hashKeys(n int, seed uint64) []uint64 {
	r := rand.New(rand.NewPCG(seed, 0x68617368))
	keys := make([]uint64, n)
	for i := range keys {
		keys[i] = r.Uint64()
	}
	return keys
}

func mustNew(t testing.TB, name string, bs []Backend, o Options) Picker {
	t.Helper()
	p, err := New(name, bs, o)
	if err != nil {
		t.Fatalf("New(%s): %v", name, err)
	}
	return p
}

func mustPick(t testing.TB, p Picker, key uint64, tried Tried) int {
	i, err := p.Pick(key, tried)
	if err != nil {
		t.Helper() // only here: Helper walks the stack, too slow for every pick under -race
		t.Fatalf("Pick(%#x): %v", key, err)
	}
	return i
}

func TestKeyHashVectors(t *testing.T) {
	// xxHash64 with seed 0: the published vectors. They pin the key function, which every node
	// of a cluster must share.
	for _, tc := range []struct {
		in   string
		want uint64
	}{
		{"", 0xef46db3751d8e999},
		{"a", 0xd24ec4f1a98c6e5b},
		{"abc", 0x44bc2cf5ad770999},
	} {
		if got := KeyHash([]byte(tc.in)); got != tc.want {
			t.Errorf("KeyHash(%q) = %#x, want %#x", tc.in, got, tc.want)
		}
		if got := KeyHashString(tc.in); got != tc.want {
			t.Errorf("KeyHashString(%q) = %#x, want %#x", tc.in, got, tc.want)
		}
	}
}

func TestHashSourceIP(t *testing.T) {
	v4 := netip.MustParseAddr("192.0.2.7")
	mapped := netip.MustParseAddr("::ffff:192.0.2.7")
	zoned := netip.MustParseAddr("fe80::1%eth0")
	for _, tc := range []struct {
		name string
		a, b netip.Addr
		same bool
	}{
		{"v4 equals v4-mapped v6", v4, mapped, true},
		{"zone ignored", zoned, netip.MustParseAddr("fe80::1"), true},
		{"neighbours differ", v4, netip.MustParseAddr("192.0.2.8"), false},
		{"v6 differs from v4", netip.MustParseAddr("2001:db8::7"), v4, false},
	} {
		if got := HashSourceIP(tc.a) == HashSourceIP(tc.b); got != tc.same {
			t.Errorf("%s: equal = %v, want %v", tc.name, got, tc.same)
		}
	}
	if got, want := HashSourceIP(v4), KeyHash([]byte{192, 0, 2, 7}); got != want {
		t.Errorf("HashSourceIP(v4) = %#x, want KeyHash of the 4 bytes %#x", got, want)
	}
}

func TestHashURI(t *testing.T) {
	for _, tc := range []struct {
		uri       string
		withQuery bool
		want      string // the bytes that must be hashed
	}{
		{"/a/b?x=1", false, "/a/b"},
		{"/a/b?x=1", true, "/a/b?x=1"},
		{"/a/b", false, "/a/b"},
		{"?only", false, ""},
		{"", true, ""},
	} {
		if got, want := HashURI([]byte(tc.uri), tc.withQuery), KeyHashString(tc.want); got != want {
			t.Errorf("HashURI(%q, %v) = %#x, want KeyHash(%q) = %#x", tc.uri, tc.withQuery, got, tc.want, want)
		}
	}
	if HashHeader([]byte("v")) != KeyHashString("v") || HashCookie([]byte("v")) != KeyHashString("v") {
		t.Error("HashHeader/HashCookie must hash the value alone")
	}
}

// carpURLHashRef is the draft's URL hash written with explicit shifts, independently of the
// implementation's bits.RotateLeft32.
func carpURLHashRef(s string) uint32 {
	var h uint32
	for i := 0; i < len(s); i++ {
		h += (h<<19 | h>>13) + uint32(s[i])
	}
	return h
}

func TestCARPURLHash(t *testing.T) {
	// By hand: "ab" → after 'a': 0 + rotl(0,19) + 97 = 97; after 'b': 97 + (97<<19) + 98.
	if got, want := CARPURLHash([]byte("ab")), uint64(97+97<<19+98); got != want {
		t.Errorf("CARPURLHash(ab) = %d, want %d", got, want)
	}
	for _, s := range []string{"", "a", "http://www.example.com/", "http://cache.example.org/a/very/long/path/index.html?q=1&r=2"} {
		want := uint64(carpURLHashRef(s))
		if got := CARPURLHash([]byte(s)); got != want {
			t.Errorf("CARPURLHash(%q) = %#x, want %#x", s, got, want)
		}
		if got := CARPURLHashString(s); got != want {
			t.Errorf("CARPURLHashString(%q) = %#x, want %#x", s, got, want)
		}
		if CARPURLHash([]byte(s))>>32 != 0 {
			t.Errorf("CARPURLHash(%q) has high bits set", s)
		}
	}
}

func TestKeyHashNoAlloc(t *testing.T) {
	uri, ip := []byte("/some/path?with=query"), netip.MustParseAddr("2001:db8::1")
	var sink uint64
	for name, f := range map[string]func(){
		"KeyHash":      func() { sink += KeyHash(uri) },
		"HashURI":      func() { sink += HashURI(uri, false) },
		"HashSourceIP": func() { sink += HashSourceIP(ip) },
		"CARPURLHash":  func() { sink += CARPURLHash(uri) },
	} {
		if a := testing.AllocsPerRun(100, f); a != 0 {
			t.Errorf("%s allocates %.1f times", name, a)
		}
	}
	_ = sink
}

func TestMix64Bijective(t *testing.T) {
	// mix64 derives ring points: distinct inputs must give distinct outputs. Spot-check on
	// consecutive inputs and check the avalanche roughly (each bit flips about half the bits).
	seen := make(map[uint64]bool)
	flips := 0
	for x := uint64(0); x < 4096; x++ {
		y := mix64(x)
		if seen[y] {
			t.Fatalf("mix64 collision at %d", x)
		}
		seen[y] = true
		flips += bits.OnesCount64(y ^ mix64(x^1))
	}
	if avg := float64(flips) / 4096; avg < 28 || avg > 36 {
		t.Errorf("flipping the low input bit flips %.1f output bits on average, want about 32", avg)
	}
}

// BenchmarkHashLocal measures Pick for the three hash algorithms at several pool sizes, equal
// weights, default options, random keys, nothing tried.
func BenchmarkHashLocal(b *testing.B) {
	for _, name := range []string{"carp", "maglev", "ringhash", "ringhash-bounded"} {
		for _, n := range []int{2, 100, 2000, 10000} {
			b.Run(fmt.Sprintf("%s/n=%d", name, n), func(b *testing.B) {
				o, alg := Options{}, name
				if name == "ringhash-bounded" {
					alg, o.BalanceFactor, o.Load = "ringhash", 1.25, newHashLoad(n)
				}
				p := mustNew(b, alg, hashPool(n, nil), o)
				keys := hashKeys(1<<14, 1) // enough distinct keys to leave the big tables' caches cold
				b.ReportAllocs()
				b.ResetTimer()
				var sink int
				for i := 0; i < b.N; i++ {
					j, _ := p.Pick(keys[i&(1<<14-1)], Tried{})
					sink += j
				}
				_ = sink
			})
		}
	}
	b.Run("KeyHash/uri", func(b *testing.B) {
		uri := []byte("/static/img/2026/11/header-background.png?v=1234")
		b.ReportAllocs()
		var sink uint64
		for i := 0; i < b.N; i++ {
			sink += KeyHash(uri)
		}
		_ = sink
	})
}

// BenchmarkHashBuildLocal measures building a picker (a rebuild happens on every membership,
// state or weight change): maglev at the default M=65537, ringhash up to 2^18 points.
func BenchmarkHashBuildLocal(b *testing.B) {
	for _, name := range []string{"carp", "maglev", "ringhash"} {
		for _, n := range []int{100, 10000} {
			b.Run(fmt.Sprintf("%s/n=%d", name, n), func(b *testing.B) {
				bs := hashPool(n, nil)
				b.ReportAllocs()
				for i := 0; i < b.N; i++ {
					if _, err := New(name, bs, Options{}); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
