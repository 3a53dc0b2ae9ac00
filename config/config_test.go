package config

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

// TestGolden loads every testdata/*.yaml and compares the normalised config (ok_*) or the error
// text (err_*) with its .golden file.
func TestGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no testdata: %v", err)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".yaml"), func(t *testing.T) {
			cfg, err := Load(f)
			wantOK := strings.HasPrefix(filepath.Base(f), "ok_")
			var got []byte
			switch {
			case wantOK && err != nil:
				t.Fatalf("Load: %v", err)
			case !wantOK && err == nil:
				t.Fatalf("Load succeeded; want errors. Normalised:\n%s", cfg.Normalised())
			case wantOK:
				got = cfg.Normalised()
			default:
				got = []byte(err.Error() + "\n")
			}
			golden := strings.TrimSuffix(f, ".yaml") + ".golden"
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./config -run TestGolden -update)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("output differs from %s:\n--- got\n%s--- want\n%s", golden, got, want)
			}
		})
	}
}

// TestNormalisedRoundTrip: the normalised output loads back to the same normalised output, so
// `ballast check` output is itself a valid, equivalent configuration.
func TestNormalisedRoundTrip(t *testing.T) {
	files, _ := filepath.Glob("testdata/ok_*.yaml")
	ex, _ := filepath.Glob("../examples/*.yaml")
	for _, f := range append(files, ex...) {
		cfg, err := Load(f)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		first := cfg.Normalised()
		again, err := Parse(f+" (normalised)", first)
		if err != nil {
			t.Fatalf("%s: normalised output does not load: %v\n%s", f, err, first)
		}
		if second := again.Normalised(); !bytes.Equal(first, second) {
			t.Errorf("%s: normalising twice changes the output:\n%s\n---\n%s", f, first, second)
		}
	}
}

// TestExamples: every file shipped in examples/ is valid.
func TestExamples(t *testing.T) {
	files, _ := filepath.Glob("../examples/*.yaml")
	if len(files) == 0 {
		t.Skip("no examples yet")
	}
	for _, f := range files {
		if _, err := Load(f); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// TestErrorPositions pins the line, column and path of individual problems.
func TestErrorPositions(t *testing.T) {
	tests := []struct {
		name, yaml string
		line, col  int
		path, msg  string
	}{
		{"unknown key", "listeners:\n  - address: 127.0.0.1:80\n    bogus: 1\n", 3, 5, "listeners[0].bogus", `unknown key "bogus"`},
		{"bad balancer", "pools:\n  - name: a\n    balancer: rr\n", 3, 15, "pools[0].balancer", `unknown balancer "rr" (valid: bybusyness, byrequests, carp`},
		{"bare number duration", "pools:\n  - name: a\n    slow_start: 30\n", 3, 17, "pools[0].slow_start", "needs a unit"},
		{"missing hash key points at the pool", "pools:\n  - name: a\n    balancer: carp\n", 2, 5, "pools[0].hash_key", "set hash_key.source"},
		{"route to nowhere", "routes:\n  - pool: nope\npools:\n  - name: a\n", 2, 11, "routes[0].pool", `no pool named "nope" (valid: a)`},
		{"no listeners has no position", "pools:\n  - name: a\n", 0, 0, "listeners", "at least one listener"},
		{"syntax", "a: b\n c: d\n", 2, 0, "", "YAML syntax"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("t.yaml", []byte(tt.yaml))
			var es Errors
			if !errors.As(err, &es) {
				t.Fatalf("want Errors, got %v", err)
			}
			for _, e := range es {
				if e.Path == tt.path && strings.Contains(e.Msg, tt.msg) {
					if e.Line != tt.line || e.Column != tt.col || e.File != "t.yaml" {
						t.Errorf("%s:%d:%d, want t.yaml:%d:%d", e.File, e.Line, e.Column, tt.line, tt.col)
					}
					return
				}
			}
			t.Errorf("no error for %s containing %q in:\n%v", tt.path, tt.msg, err)
		})
	}
}

// TestDefaultsPresence: a value written as zero stays zero; an absent one gets the default.
func TestDefaultsPresence(t *testing.T) {
	base := "listeners:\n  - address: 127.0.0.1:8080\npools:\n  - name: a\n    backends:\n      - address: 127.0.0.1:8081\n"
	tests := []struct {
		name  string
		extra string // appended under the first backend or the pool
		check func(c *Config) bool
	}{
		{"weight absent → 1", "", func(c *Config) bool { return c.Pools[0].Backends[0].Weight == 1 }},
		{"weight 0 stays", "        weight: 0\n", func(c *Config) bool { return c.Pools[0].Backends[0].Weight == 0 }},
		{"no health section → off", "", func(c *Config) bool { return c.Pools[0].Health.Interval.Duration == 0 }},
		{"health section → 2s", "    health_check:\n      path: /h\n", func(c *Config) bool {
			h := c.Pools[0].Health
			return h.Interval.Duration == 2*time.Second && h.Path == "/h" && h.Rise == 2 && h.Fall == 3
		}},
		{"health interval 0s → off", "    health_check:\n      interval: 0s\n", func(c *Config) bool { return c.Pools[0].Health.Interval.Duration == 0 }},
		{"response 0s stays", "    timeouts:\n      response: 0s\n", func(c *Config) bool {
			return c.Pools[0].Timeouts.Response.Duration == 0 && c.Pools[0].Timeouts.Connect.Duration == 2*time.Second
		}},
		{"budget 0 stays", "    retries:\n      budget: 0\n", func(c *Config) bool { return c.Pools[0].Retries.Budget == 0 && c.Pools[0].Retries.Attempts == 3 }},
		{"queue timeout only with a queue", "    max_conns: 4\n    max_queue: 8\n", func(c *Config) bool { return c.Pools[0].QueueTimeout.Duration == 30*time.Second }},
		{"hedge defaults to one copy", "    hedge:\n      delay: 20ms\n", func(c *Config) bool { return c.Pools[0].Hedge.MaxHedges == 1 }},
		{"default route", "", func(c *Config) bool { return len(c.Routes) == 1 && c.Routes[0].Pool == "a" }},
		{"listener defaults", "", func(c *Config) bool {
			l := c.Listeners[0]
			return l.Name == "127.0.0.1:8080" && l.ReadHeaderTimeout.Duration == 10*time.Second && l.IdleTimeout.Duration == time.Minute && l.MaxHeaderBytes == 8192
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse("t.yaml", []byte(base+tt.extra))
			if err != nil {
				t.Fatal(err)
			}
			if !tt.check(c) {
				t.Errorf("unexpected result:\n%s", c.Normalised())
			}
		})
	}
}

// TestCheck validates configs built in code, as `ballast serve`'s quick form does.
func TestCheck(t *testing.T) {
	good := func() *Config {
		return &Config{
			Listeners: []Listener{{Address: "127.0.0.1:0"}},
			Pools: []Pool{{Name: "default", Balancer: "sqf", MaxConns: 4, MaxQueue: 10,
				Backends: []Backend{{Address: "127.0.0.1:8081"}, {Address: "127.0.0.1:8082"}}}},
		}
	}
	c := good()
	if err := Check("flags", c); err != nil {
		t.Fatal(err)
	}
	if c.Pools[0].Backends[1].Weight != 1 || c.Pools[0].QueueTimeout.Duration != DefaultQueueTimeout || len(c.Routes) != 1 {
		t.Errorf("defaults not applied:\n%s", c.Normalised())
	}
	bad := good()
	bad.Pools[0].Balancer = "fastest"
	bad.Pools[0].Backends[0].Address = "nowhere"
	err := Check("flags", bad)
	want := "flags: pools[0].balancer: unknown balancer \"fastest\""
	if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), `flags: pools[0].backends[0].address: "nowhere" is not host:port`) {
		t.Errorf("got %v, want errors starting with %q", err, want)
	}
}

func TestDuration(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
		err  string
	}{
		{"5s", 5 * time.Second, ""},
		{"250ms", 250 * time.Millisecond, ""},
		{"1m30s", 90 * time.Second, ""},
		{"5", 0, "needs a unit"},
		{"1.5", 0, "needs a unit"},
		{"-1s", 0, "negative"},
		{"soon", 0, "invalid duration"},
		{"[1s]", 0, "expected a duration"},
	}
	for _, tt := range tests {
		var v struct {
			D Duration `yaml:"d"`
		}
		err := yaml.Unmarshal([]byte("d: "+tt.in), &v)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s: got %v, want error containing %q", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil || v.D.Duration != tt.want {
			t.Errorf("%s: got %v, %v; want %v", tt.in, v.D, err, tt.want)
			continue
		}
		out, _ := yaml.Marshal(v)
		var back struct {
			D Duration `yaml:"d"`
		}
		if err := yaml.Unmarshal(out, &back); err != nil || back.D != v.D {
			t.Errorf("%s: round trip via %q gave %v, %v", tt.in, out, back.D, err)
		}
	}
}

func TestStatusRanges(t *testing.T) {
	tests := []struct {
		in   string
		want [][2]int
		ok   bool
	}{
		{"200-399", [][2]int{{200, 399}}, true},
		{"200, 204,300-308", [][2]int{{200, 200}, {204, 204}, {300, 308}}, true},
		{"399-200", nil, false},
		{"2xx", nil, false},
		{"", nil, false},
		{"99", nil, false},
	}
	for _, tt := range tests {
		got, err := StatusRanges(tt.in)
		if (err == nil) != tt.ok || (tt.ok && !equalRanges(got, tt.want)) {
			t.Errorf("%q: got %v, %v", tt.in, got, err)
		}
	}
}

func equalRanges(a, b [][2]int) bool {
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

// FuzzParse: no input makes Parse panic, every error is positioned in the input, and a
// configuration that loads normalises to a file that loads back to the same thing.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.yaml")
	for _, file := range files {
		data, _ := os.ReadFile(file)
		f.Add(data)
	}
	f.Add([]byte("a: &a [*a]"))
	f.Add([]byte("pools: [&p {name: x, backends: [{address: 'a:1'}]}, *p]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse("fuzz.yaml", data)
		if err != nil {
			var es Errors
			if !errors.As(err, &es) || len(es) == 0 {
				t.Fatalf("error is not a non-empty Errors: %v", err)
			}
			return
		}
		out := cfg.Normalised()
		again, err := Parse("normalised.yaml", out)
		if err != nil {
			t.Fatalf("normalised output does not load: %v\n%s", err, out)
		}
		if !bytes.Equal(out, again.Normalised()) {
			t.Fatalf("normalising is not stable:\n%s", out)
		}
	})
}

// TestAliasBomb: aliases that multiply a small file into millions of values are refused
// quickly instead of being expanded.
func TestAliasBomb(t *testing.T) {
	var b strings.Builder
	b.WriteString("listeners: [{address: '127.0.0.1:80'}]\npools:\n  - &p\n    name: x\n    backends:\n      - &b {address: 'a:1'}\n")
	for range 2000 {
		b.WriteString("      - *b\n")
	}
	for range 2000 {
		b.WriteString("  - *p\n")
	}
	_, err := Parse("bomb.yaml", []byte(b.String()))
	if err == nil || !strings.Contains(err.Error(), "expands to more than") {
		t.Fatalf("want the expansion limit error, got %.300v", err)
	}
}

// BenchmarkParse loads a pool of 1000 backends: the cost of a reload's parsing step.
func BenchmarkParse(b *testing.B) {
	var sb strings.Builder
	sb.WriteString("listeners:\n  - address: 127.0.0.1:8080\npools:\n  - name: web\n    balancer: vnswrr\n    backends:\n")
	for i := range 1000 {
		fmt.Fprintf(&sb, "      - address: 10.0.%d.%d:80\n        weight: %d\n", i/250, i%250+1, i%5+1)
	}
	data := []byte(sb.String())
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := Parse("bench.yaml", data); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzCheckBackendAddress: whatever the backend-address rule (shared by the file and the admin
// API) accepts has a host without spaces or slashes and a port from 1 to 65535.
func FuzzCheckBackendAddress(f *testing.F) {
	for _, s := range []string{"127.0.0.1:80", "[::1]:8080", "host:0", "host:65536", ":80", "nohost", "a:b:c", "a b/c:80", "/tmp/x:80"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if CheckBackendAddress(s) != nil {
			return
		}
		h, port, err := net.SplitHostPort(s)
		n, perr := strconv.Atoi(port)
		if err != nil || h == "" || strings.ContainsAny(h, " /") || perr != nil || n < 1 || n > 65535 {
			t.Fatalf("accepted %q", s)
		}
	})
}

func TestCheckBackendAddress(t *testing.T) {
	for _, tc := range []struct {
		addr string
		ok   bool
	}{
		{"127.0.0.1:80", true}, {"[::1]:8080", true}, {"backend.internal:443", true},
		{"a b/c:80", false}, {"/tmp/x:80", false}, {"host:0", false}, {":80", false}, {"nohost", false}, {"h:65536", false},
	} {
		if err := CheckBackendAddress(tc.addr); (err == nil) != tc.ok {
			t.Errorf("CheckBackendAddress(%q) = %v, want ok %v", tc.addr, err, tc.ok)
		}
	}
}

// TestHAAddresses: what moves with mastership: director VIPs are answered for, the other
// listeners' specific IPv4 addresses and ha.addresses are held; wildcard, loopback and IPv6
// listeners do not move.
func TestHAAddresses(t *testing.T) {
	cfg, err := Load("testdata/ok_ha.yaml")
	if err != nil {
		t.Fatal(err)
	}
	local, answer := cfg.HAAddresses()
	if got := fmt.Sprint(local); got != "[10.0.0.101 10.0.0.1 10.0.0.254]" {
		t.Errorf("local %s", got)
	}
	if got := fmt.Sprint(answer); got != "[10.0.0.100]" {
		t.Errorf("answer %s", got)
	}
	cfg.HA = nil
	if l, a := cfg.HAAddresses(); l != nil || a != nil {
		t.Errorf("without ha: %v %v", l, a)
	}
}
