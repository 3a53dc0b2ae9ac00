package hdr

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// exactQuantile is the reference: the order statistic of rank ⌈q·n⌉ (at least 1).
func exactQuantile(sorted []int64, q float64) int64 {
	r := int(math.Ceil(q * float64(len(sorted))))
	r = min(max(r, 1), len(sorted))
	return sorted[r-1]
}

func checkQuantiles(t *testing.T, vals []int64) {
	t.Helper()
	var h Histogram
	for _, v := range vals {
		h.Record(v)
	}
	sorted := slices.Clone(vals)
	slices.Sort(sorted)
	for _, q := range []float64{0, 0.01, 0.5, 0.9, 0.99, 0.999, 1} {
		want := exactQuantile(sorted, q)
		got := h.Quantile(q)
		if want >= 1<<maxBits {
			continue // clamped region: only Max stays exact
		}
		if d := float64(got - want); d < 0 || d > float64(want)/128 {
			t.Errorf("q=%v: got %d, want %d (error %.3f %%)", q, got, want, 100*d/float64(want))
		}
	}
	if h.Max() != sorted[len(sorted)-1] || h.Min() != sorted[0] || h.Count() != uint64(len(vals)) {
		t.Errorf("min/max/count %d/%d/%d, want %d/%d/%d", h.Min(), h.Max(), h.Count(), sorted[0], sorted[len(sorted)-1], len(vals))
	}
}

func TestQuantiles(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct {
		name string
		gen  func() int64
	}{
		{"small exact", func() int64 { return r.Int64N(300) }},
		{"uniform ms", func() int64 { return r.Int64N(10_000_000) }},
		{"lognormal", func() int64 { return int64(math.Exp(12 + 2*r.NormFloat64())) }},
		{"constant", func() int64 { return 706_000 }},
		{"huge", func() int64 { return r.Int64N(1 << 50) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vals := make([]int64, 10000)
			for i := range vals {
				vals[i] = tc.gen()
			}
			checkQuantiles(t, vals)
		})
	}
}

func TestBucketsContiguous(t *testing.T) {
	prevEnd := int64(0)
	for i := range nBuckets {
		lo, w := bounds(i)
		if lo != prevEnd {
			t.Fatalf("bucket %d starts at %d, previous ended at %d", i, lo, prevEnd)
		}
		if index(lo) != i || index(lo+w-1) != i {
			t.Fatalf("bucket %d [%d, %d) maps to %d..%d", i, lo, lo+w, index(lo), index(lo+w-1))
		}
		if i >= exact && float64(w)/float64(lo) > 1.0/128 {
			t.Fatalf("bucket %d too wide: %d at %d", i, w, lo)
		}
		prevEnd = lo + w
	}
}

func TestMerge(t *testing.T) {
	var a, b, all Histogram
	r := rand.New(rand.NewPCG(3, 4))
	for i := range 5000 {
		v := r.Int64N(1e9)
		all.Record(v)
		if i%3 == 0 {
			a.Record(v)
		} else {
			b.Record(v)
		}
	}
	var empty Histogram
	a.Merge(&b)
	a.Merge(&empty)
	if a != all {
		t.Error("merged histogram differs from the one that saw every value")
	}
	empty.Merge(&all)
	if empty.Min() != all.Min() {
		t.Errorf("merge into empty: min %d, want %d", empty.Min(), all.Min())
	}
}

func TestEmptyAndNegative(t *testing.T) {
	var h Histogram
	if h.Quantile(0.5) != 0 || h.Mean() != 0 {
		t.Error("empty histogram not zero")
	}
	h.Record(-5)
	if h.Quantile(0.5) != 0 || h.Min() != 0 {
		t.Error("negative value not counted as 0")
	}
	h.Reset()
	if h.Count() != 0 {
		t.Error("Reset left counts")
	}
}

func FuzzQuantile(f *testing.F) {
	f.Add(int64(1), int64(1000), int64(123456789))
	f.Add(int64(0), int64(255), int64(256))
	f.Fuzz(func(t *testing.T, a, b, c int64) {
		vals := []int64{max(a, 0), max(b, 0), max(c, 0), max(a, 0) / 2}
		checkQuantiles(t, vals)
	})
}

func BenchmarkRecord(b *testing.B) {
	b.ReportAllocs()
	var h Histogram
	v := int64(12345)
	for b.Loop() {
		h.Record(v)
		v = v*31 + 7&0xffffffff
	}
}
