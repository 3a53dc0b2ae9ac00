package httpcore

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"ballast/config"
)

func TestParseToken(t *testing.T) {
	for _, tc := range []struct {
		in string
		ok bool
	}{{"0123456789abcdef", true}, {"0123456789ABCDEF", false}, {"0123456789abcde", false}, {"0123456789abcdef0", false}, {"", false}, {"g123456789abcdef", false}} {
		if _, ok := parseToken([]byte(tc.in)); ok != tc.ok {
			t.Errorf("parseToken(%q) ok=%v, want %v", tc.in, ok, tc.ok)
		}
	}
}

// FuzzParseToken: any cookie value is either refused or round-trips to itself.
func FuzzParseToken(f *testing.F) {
	f.Add([]byte("0123456789abcdef"))
	f.Add([]byte("ffffffffffffffff"))
	f.Add([]byte("-123456789abcdef"))
	f.Fuzz(func(t *testing.T, v []byte) {
		n, ok := parseToken(v)
		if ok && string(appendHex16(nil, n)) != string(v) {
			t.Fatalf("parseToken(%q) = %x", v, n)
		}
	})
}

func TestCookieValue(t *testing.T) {
	for _, tc := range []struct{ field, name, want string }{
		{"a=1; b=2", "b", "2"},
		{"a=1;b=2", "a", "1"},
		{"ab=1; a=2", "a", "2"},
		{"a", "a", ""},
		{"", "a", ""},
		{" a = 1", "a", ""},
	} {
		if got := string(CookieValue([]byte(tc.field), []byte(tc.name))); got != tc.want {
			t.Errorf("CookieValue(%q, %q) = %q, want %q", tc.field, tc.name, got, tc.want)
		}
	}
}

// FuzzTraceID: traceID never panics and accepts only what it can return a 32-hex trace-id of.
func FuzzTraceID(f *testing.F) {
	f.Add([]byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"))
	f.Add([]byte("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra"))
	f.Add([]byte("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, v []byte) {
		id, ok := traceID(v)
		if ok && (len(id) != 32 || !lowerHex(id) || allZero(id)) {
			t.Fatalf("traceID(%q) = %q", v, id)
		}
	})
}

// TestChooseEncoding: the client's q-values decide, the route's order breaks a tie.
func TestChooseEncoding(t *testing.T) {
	cp := compileCompress(&config.Compress{Algorithms: []string{"br", "gzip"}})
	for ae, want := range map[string]Encoding{
		"gzip, deflate, br":         EncBrotli,
		"br;q=0.1, gzip;q=1":        EncGzip,
		"gzip;q=0.5, br;q=0.5":      EncBrotli,
		"gzip":                      EncGzip,
		"br;q=0, gzip;q=0":          EncNone,
		"*;q=0.1, gzip;q=0":         EncBrotli,
		"*":                         EncBrotli,
		"identity":                  EncNone,
		"":                          EncNone,
		"GZIP;Q=0.9, BR;q=0.001":    EncGzip,
		"br;q=1.5, gzip;q=0.8":      EncGzip, // an invalid q-value counts as 0
		"br;q=0.8;x=y, gzip;q=0.75": EncBrotli,
	} {
		if got := cp.choose([]byte(ae)); got != want {
			t.Errorf("choose(%q) = %v, want %v", ae, got, want)
		}
	}
}

// FuzzQuality: never panics, stays in 0..1000, and an explicit q=0 for a coding refuses it.
func FuzzQuality(f *testing.F) {
	for _, s := range []string{"gzip, deflate, br", "br;q=0", "*;q=0.1, gzip;q=0", "", ";;,,", "GZIP;Q=0.0", "gzip;q=0.999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, ae string) {
		for _, name := range []string{"gzip", "br"} {
			q := quality([]byte(ae), name)
			if q < 0 || q > 1000 {
				t.Fatalf("quality(%q, %s) = %d", ae, name, q)
			}
			if q > 0 && strings.HasSuffix(strings.ToLower(ae), ", "+name+";q=0") {
				t.Fatalf("quality(%q, %s) = %d despite a final q=0", ae, name, q)
			}
		}
	})
}

func TestQValue(t *testing.T) {
	for in, want := range map[string]int{"": 1000, "q=1": 1000, "q=0.5": 500, "q=0.123": 123, "q=0.1234": 0, "q=1.000": 1000, "q=2": 0, "Q=0.25": 250, " x=1; q=0.3": 300} {
		if got := qvalue([]byte(in)); got != want {
			t.Errorf("qvalue(%q) = %d, want %d", in, got, want)
		}
	}
}

// FuzzRewrite: a rewrite that validation accepts never panics, always yields a path starting
// with '/', and brings in no byte that neither the path nor the replacement had (so no space
// or CR/LF can reach the request line once the result is encoded).
func FuzzRewrite(f *testing.F) {
	f.Add(`^/u/(\d+)$`, "/users/$1", "/u/42", "")
	f.Add("", "/new/", "/old/x", "/old/")
	f.Add("", "", "/api/x", "/api")
	f.Add(`(?P<id>\w+)`, "${id}-$0", "/abc", "")
	f.Fuzz(func(t *testing.T, expr, repl, path, prefix string) {
		rw := &config.Rewrite{Regex: expr, Replacement: repl}
		switch {
		case expr != "":
		case repl != "":
			rw.Prefix = prefix
		default:
			rw.StripPrefix = prefix
		}
		var es []string
		fail := func(p, format string, args ...any) { es = append(es, p) }
		config.ValidateRewrite(rw, "r", fail)
		if len(es) > 0 || !strings.HasPrefix(path, "/") {
			return
		}
		c, err := compileRewrite(rw)
		if err != nil {
			t.Fatalf("validated but does not compile: %v", err)
		}
		out, ok := c.path(nil, []byte(path))
		if !ok {
			if len(out) != 0 {
				t.Fatalf("%+v on %q did not apply but wrote %q", rw, path, out)
			}
			return
		}
		if len(out) == 0 || out[0] != '/' {
			t.Fatalf("%+v on %q = %q", rw, path, out)
		}
		enc := appendEscapedPath(nil, out)
		for _, b := range enc {
			if b <= ' ' || b >= 0x7f || b == '?' || b == '#' {
				t.Fatalf("%+v on %q encodes to %q, with %q in it", rw, path, enc, b)
			}
		}
	})
}

func TestRetryBudget(t *testing.T) {
	b := newRetryBudget(0.2)
	const sec = 1000
	for i := 0; i < 100; i++ {
		b.request(sec)
	}
	spent := 0
	for b.spend(sec) {
		spent++
		if spent > 1000 {
			t.Fatal("budget never ran out")
		}
	}
	if want := 20 + 2*budgetMinPerSecond; spent != want {
		t.Errorf("spent %d retries for 100 requests at 20%%, want %d", spent, want)
	}
	// One second later the previous second still counts; two seconds later it is gone.
	if b.spend(sec + 1) {
		t.Error("budget refilled after one second")
	}
	if !b.spend(sec + 3) {
		t.Error("budget not refilled after the window passed")
	}
}

// The budget itself: a ratio of 0 spends nothing, not even the per-second floor.
func TestRetryBudgetZeroSpendsNothing(t *testing.T) {
	b := newRetryBudget(0)
	for range 100 {
		b.request(1000)
	}
	if b.spend(1000) {
		t.Fatal("a budget of 0 allowed a retry")
	}
	if c := newRetryBudget(0.2); !c.spend(1000) {
		t.Fatal("a budget of 0.2 allowed no retry at all (the floor)")
	}
}

// TestLimiterBoundedMemory: however many keys, a limiter keeps at most max_keys buckets, and
// a key evicted or forgotten starts again with a full burst.
func TestLimiterBoundedMemory(t *testing.T) {
	l := newLimiter(&config.RateLimit{Rate: 1, Burst: 2, Key: "source_ip", MaxKeys: 640})
	for i := range 100000 {
		l.allow([]byte(strconv.Itoa(i)))
	}
	if n := l.size(); n > 640 {
		t.Fatalf("%d buckets, want at most 640", n)
	}
	if ok, _ := l.allow([]byte("fresh")); !ok {
		t.Error("a new key was refused")
	}
}

// TestLimiterEvictsLeastRecentlyUsed: under a churn of fresh keys that fills the limiter
// again and again, a throttled key that keeps asking keeps its (empty) bucket: a full limiter
// evicts the bucket seen longest ago, never a busy one.
func TestLimiterEvictsLeastRecentlyUsed(t *testing.T) {
	l := newLimiter(&config.RateLimit{Rate: 0.001, Burst: 1, Key: "header", Name: "X-Client", MaxKeys: 256})
	if ok, _ := l.allow([]byte("hot")); !ok {
		t.Fatal("first request refused")
	}
	for round := range 200 {
		if ok, _ := l.allow([]byte("hot")); ok {
			t.Fatalf("round %d: the throttled key passed (its bucket was evicted)", round)
		}
		for i := range 128 { // far fewer than a shard holds between two requests of the hot key
			l.allow([]byte(fmt.Sprintf("fresh-%d-%d", round, i)))
		}
	}
	if n := l.size(); n > 256 {
		t.Fatalf("%d buckets, want at most 256", n)
	}
}

func BenchmarkLimiterAllow(b *testing.B) {
	l := newLimiter(&config.RateLimit{Rate: 1e6, Burst: 1e6, Key: "source_ip", MaxKeys: 100000})
	keys := make([][]byte, 1024)
	for i := range keys {
		keys[i] = []byte(fmt.Sprintf("a10.0.%d.%d", i/256, i%256))
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			l.allow(keys[i%len(keys)])
			i++
		}
	})
}
