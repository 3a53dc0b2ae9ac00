package lab

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"ballast/config"
	"ballast/internal/testbin"
)

// ballastBin is the ballast binary TestMain builds once: the lab runs it as a child process.
var ballastBin string

func TestMain(m *testing.M) { testbin.Main(m, "ballast/cmd/ballast", &ballastBin) }

func TestStatTimes(t *testing.T) {
	tests := []struct {
		name    string
		line    string
		ppid    int
		cpu     time.Duration
		wantErr bool
	}{
		{"plain", "42 (ballast) S 7 42 42 0 -1 4194560 100 0 0 0 150 50 0 0 20 0 3 0", 7, 2 * time.Second, false},
		{"spaces and parens in comm", "9 (a (b) c) R 1 9 9 0 -1 0 0 0 0 0 1 2 0 0 20 0 1 0", 1, 30 * time.Millisecond, false},
		{"no comm", "42 ballast S 7", 0, 0, true},
		{"short", "42 (x) S 7 1 2", 0, 0, true},
		{"not numbers", "42 (x) S p 42 42 0 -1 0 0 0 0 0 u s 0 0 20 0 1 0", 0, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ppid, cpu, err := statTimes([]byte(tt.line))
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if !tt.wantErr && (ppid != tt.ppid || cpu != tt.cpu) {
				t.Errorf("got ppid %d cpu %v, want %d %v", ppid, cpu, tt.ppid, tt.cpu)
			}
		})
	}
}

func FuzzStatTimes(f *testing.F) {
	f.Add([]byte("42 (ballast) S 7 42 42 0 -1 4194560 100 0 0 0 150 50 0 0 20 0 3 0"))
	f.Add([]byte("1 ()) R"))
	f.Fuzz(func(t *testing.T, line []byte) {
		_, cpu, err := statTimes(line)
		if err == nil && cpu < 0 && !bytes.Contains(line, []byte("-")) {
			t.Errorf("negative CPU %v from %q", cpu, line)
		}
	})
}

func TestTreeCPU(t *testing.T) {
	// A busy child is counted in its parent's tree.
	cmd := exec.Command("sh", "-c", "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; sleep 30")
	if err := cmd.Start(); err != nil {
		t.Skip("no sh:", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	self, err := TreeCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if self < 0 {
		t.Errorf("negative CPU %v", self)
	}
	if _, err := TreeCPU(1 << 30); err == nil {
		t.Error("TreeCPU of a pid that cannot exist: want an error")
	}
}

func TestServingAddr(t *testing.T) {
	tests := []struct {
		line string
		addr string
		ok   bool
	}{
		{"ballast: serving on http://127.0.0.1:40123 (pool lab: sqf over 2 backends)", "127.0.0.1:40123", true},
		{"ballast: serving on http://127.0.0.1:1, http://127.0.0.1:2 (pool x)", "127.0.0.1:1", true},
		{"time=... level=WARN msg=something", "", false},
		{"ballast: serving on http://nonsense", "", false},
	}
	for _, tt := range tests {
		addr, ok := servingAddr(tt.line)
		if addr != tt.addr || ok != tt.ok {
			t.Errorf("servingAddr(%q) = %q, %v; want %q, %v", tt.line, addr, ok, tt.addr, tt.ok)
		}
	}
}

func FuzzServingAddr(f *testing.F) {
	f.Add("ballast: serving on http://127.0.0.1:40123 (pool lab)")
	f.Fuzz(func(t *testing.T, line string) {
		if addr, ok := servingAddr(line); ok && !strings.Contains(line, addr) {
			t.Errorf("address %q not in %q", addr, line)
		}
	})
}

// TestBallastConfig: every pool the lab builds is a configuration Ballast accepts, with the
// options that were asked for.
func TestBallastConfig(t *testing.T) {
	two := []Target{{Name: "A", Addr: "127.0.0.1:9001"}, {Name: "B", Addr: "127.0.0.1:9002", Weight: 3}}
	tests := []struct {
		name  string
		spec  PoolSpec
		check func(t *testing.T, p config.Pool)
	}{
		{"plain", PoolSpec{Balancer: "sqf", Backends: two, MaxConns: 32}, func(t *testing.T, p config.Pool) {
			if p.MaxConns != 32 || p.Backends[1].Weight != 3 || p.Backends[0].Name != "A" {
				t.Errorf("pool %+v", p)
			}
		}},
		{"backlog", PoolSpec{Balancer: "byrequests", Backends: two, MaxConns: 4, MaxQueue: 100}, func(t *testing.T, p config.Pool) {
			if p.MaxQueue != 100 || p.QueueTimeout.Duration != 120*time.Second {
				t.Errorf("queue %d timeout %v", p.MaxQueue, p.QueueTimeout)
			}
		}},
		{"hedge", PoolSpec{Balancer: "sqf", Backends: two, Hedge: 50 * time.Millisecond, HedgeBudget: 1}, func(t *testing.T, p config.Pool) {
			if p.Hedge.Delay.Duration != 50*time.Millisecond || p.Retries.Budget != 1 {
				t.Errorf("hedge %+v retries %+v", p.Hedge, p.Retries)
			}
		}},
		{"maglev by uri", PoolSpec{Balancer: "maglev", Backends: two, HashURI: true}, func(t *testing.T, p config.Pool) {
			if p.HashKey.Source != "uri" {
				t.Errorf("hash key %+v", p.HashKey)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data, err := ballastConfig(tt.spec, "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			c, err := config.Parse("lab.yaml", data)
			if err != nil {
				t.Fatalf("Ballast refuses the lab's configuration: %v\n%s", err, data)
			}
			if len(c.Pools) != 1 || c.Pools[0].Balancer != tt.spec.Balancer || len(c.Pools[0].Backends) != len(tt.spec.Backends) {
				t.Fatalf("pools %+v", c.Pools)
			}
			tt.check(t, c.Pools[0])
		})
	}
}

func TestGroupSplit(t *testing.T) {
	for _, n := range []int{2, 100, 101, 500, 2000, 10000} {
		split := map[string]int64{}
		var total int64
		for i := range n {
			split[fmt.Sprintf("b-%d", 20000+i)] = int64(i%7 + 1)
			total += int64(i%7 + 1)
		}
		g := groupSplit(split, 20000, n)
		var sum int64
		for _, c := range g {
			sum += c
		}
		if sum != total {
			t.Errorf("n=%d: grouped counts sum to %d, want %d", n, sum, total)
		}
		if len(g) > portBlocks {
			t.Errorf("n=%d: %d groups, want at most %d", n, len(g), portBlocks)
		}
		if n <= portBlocks && len(g) != n {
			t.Errorf("n=%d: %d entries, want every backend", n, len(g))
		}
	}
}

func FuzzGroupSplit(f *testing.F) {
	f.Add("b-20005", int64(3), 20000, 500)
	f.Add("other", int64(1), 0, 101)
	f.Fuzz(func(t *testing.T, name string, count int64, from, n int) {
		if n < 0 || n > 1<<16 || count < 0 || count > 1<<40 {
			return
		}
		g := groupSplit(map[string]int64{name: count, "b-1": 1}, from, n)
		var sum int64
		for _, c := range g {
			sum += c
		}
		if sum != count+1 {
			t.Errorf("sum %d, want %d", sum, count+1)
		}
	})
}

func TestMedianRow(t *testing.T) {
	if m := median([]float64{3, 1, 2}); m != 2 {
		t.Errorf("median odd = %v", m)
	}
	if m := median([]float64{4, 1, 3, 2}); m != 2.5 {
		t.Errorf("median even = %v", m)
	}
	runs := []Result{
		{ThroughputRPS: 100, P99Ms: 9, Split: map[string]int64{"A": 1}, Detail: Detail{CPUUsPerReq: 30, Failed: 1}},
		{ThroughputRPS: 300, P99Ms: 1, Split: map[string]int64{"A": 3}, Detail: Detail{CPUUsPerReq: 10}},
		{ThroughputRPS: 200, P99Ms: 5, Split: map[string]int64{"A": 2}, Detail: Detail{CPUUsPerReq: 20, Non2xx: 2}},
	}
	m := medianRow("x", runs)
	if m.Algorithm != "x" || m.ThroughputRPS != 200 || m.P99Ms != 5 || m.Detail.CPUUsPerReq != 20 || m.Split["A"] != 2 {
		t.Errorf("median row %+v", m)
	}
	if m.Detail.Failed != 1 || m.Detail.Non2xx != 2 || len(m.Detail.Runs) != 3 {
		t.Errorf("failures or runs not carried: %+v", m.Detail)
	}
}

// resultKeys is the exact key set of a row in the JSON contract.
var resultKeys = []string{"algorithm", "ideal_ratio", "makespan_s", "p50_ms", "p99_ms", "predicted", "seed", "split", "throughput_rps"}

// checkShape decodes a report's JSON and checks it has exactly the contract's keys.
func checkShape(t *testing.T, data []byte, scenario string) {
	t.Helper()
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		t.Fatalf("not JSON: %v", err)
	}
	if keys := sortedKeys(top); !slices.Equal(keys, []string{"results", "scenario"}) {
		t.Fatalf("top-level keys %v", keys)
	}
	var name string
	if err := json.Unmarshal(top["scenario"], &name); err != nil || name != scenario {
		t.Errorf("scenario %q (%v), want %q", name, err, scenario)
	}
	var rows []map[string]json.RawMessage
	if err := json.Unmarshal(top["results"], &rows); err != nil {
		t.Fatalf("results: %v", err)
	}
	if len(rows) == 0 {
		t.Fatal("no results")
	}
	for _, r := range rows {
		if keys := sortedKeys(r); !slices.Equal(keys, resultKeys) {
			t.Errorf("row keys %v, want %v", keys, resultKeys)
		}
		for _, k := range []string{"predicted", "seed"} {
			var obj map[string]any
			if err := json.Unmarshal(r[k], &obj); err != nil || obj == nil {
				t.Errorf("%s is not an object: %s", k, r[k])
			}
		}
		var split map[string]int64
		if err := json.Unmarshal(r["split"], &split); err != nil || split == nil {
			t.Errorf("split is not an object of counts: %s", r["split"])
		}
	}
}

func sampleReport() *Report {
	return &Report{
		Scenario: "heterogeneous", Metric: Throughput, Ideal: "sum", IdealValue: 4000,
		Results: []Result{
			{Algorithm: "random", ThroughputRPS: 2400, Split: map[string]int64{"A": 50, "B": 50}, P50Ms: 3, P99Ms: 9, IdealRatio: 0.6,
				Seed: Figures{ThroughputRPS: 2122, SplitPct: map[string]float64{"A": 50, "B": 50}}, Predicted: Figures{ThroughputRPS: 2500}},
			{Algorithm: "sqf", ThroughputRPS: 3900, Split: map[string]int64{"A": 69, "B": 31}, P50Ms: 2, P99Ms: 6, IdealRatio: 0.97,
				Detail: Detail{CPUUsPerReq: 60}},
			{Algorithm: "sqf (n=5)", ThroughputRPS: 3800, Split: map[string]int64{"A": 50, "B": 50}, P50Ms: 2, P99Ms: 6, IdealRatio: 0.95,
				Detail: Detail{CPUUsPerReq: 66, CPUVsBase: 1.1, BackendCPUUsPerReq: 30, LabCPUUsPerReq: 20.5}},
		},
	}
}

func TestReportJSONAndTable(t *testing.T) {
	r := sampleReport()
	checkShape(t, r.JSON(), "heterogeneous")
	var buf bytes.Buffer
	if err := r.WriteTable(&buf); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{"algorithm", "seed", "predicted", "measured", "% of ideal", "2122 req/s 50/50", "3900 req/s", "97.0%", "60.0µs", "A 69.0% / B 31.0%",
		"66.0µs (110% of n=2), backends 30.0µs, lab 20.5µs"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestWriteFiles(t *testing.T) {
	for _, metric := range []Metric{Throughput, Makespan} {
		t.Run(string(metric), func(t *testing.T) {
			dir := t.TempDir()
			r := sampleReport()
			r.Metric = metric
			if err := r.WriteFiles(dir); err != nil {
				t.Fatal(err)
			}
			data, err := os.ReadFile(filepath.Join(dir, "results.json"))
			if err != nil {
				t.Fatal(err)
			}
			checkShape(t, data, "heterogeneous")
			for _, f := range []string{string(metric) + ".svg", "latency.svg", "split.svg", "cpu.svg"} {
				b, err := os.ReadFile(filepath.Join(dir, f))
				if err != nil {
					t.Fatalf("chart %s: %v", f, err)
				}
				if err := xml.Unmarshal(b, new(struct{ XMLName xml.Name })); err != nil || !bytes.Contains(b, []byte("<svg")) {
					t.Errorf("%s is not SVG: %v", f, err)
				}
				if !bytes.Contains(b, []byte("sqf")) {
					t.Errorf("%s does not label the rows", f)
				}
			}
			var d struct {
				Rows []Detail `json:"rows"`
			}
			b, _ := os.ReadFile(filepath.Join(dir, "details.json"))
			if err := json.Unmarshal(b, &d); err != nil || len(d.Rows) != 3 || d.Rows[1].CPUUsPerReq != 60 ||
				d.Rows[2].CPUVsBase != 1.1 || d.Rows[2].BackendCPUUsPerReq != 30 || d.Rows[2].LabCPUUsPerReq != 20.5 {
				t.Errorf("details.json: %v %+v", err, d)
			}
		})
	}
}

// TestPeerConfigs checks each peer's generated configuration with the peer's own checker,
// when the peer is installed.
func TestPeerConfigs(t *testing.T) {
	ts := []Target{{Name: "A", Addr: "127.0.0.1:9001"}, {Name: "B", Addr: "127.0.0.1:9002"}}
	tests := []struct {
		bin, file, content string
		args               func(dir string) []string
	}{
		{"haproxy", "haproxy.cfg", haproxyConfig(9000, ts), func(d string) []string { return []string{"-c", "-f", filepath.Join(d, "haproxy.cfg")} }},
		{"nginx", "nginx.conf", nginxConfig(9000, ts), func(d string) []string {
			return []string{"-t", "-p", d + "/", "-c", filepath.Join(d, "nginx.conf"), "-e", "stderr"}
		}},
		{"caddy", "Caddyfile", caddyConfig(9000, ts), func(d string) []string {
			return []string{"validate", "--config", filepath.Join(d, "Caddyfile"), "--adapter", "caddyfile"}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.bin, func(t *testing.T) {
			bin, err := exec.LookPath(tt.bin)
			if err != nil {
				t.Skipf("%s not installed", tt.bin)
			}
			dir := t.TempDir()
			_ = os.MkdirAll(filepath.Join(dir, "tmp"), 0o755)
			content := strings.ReplaceAll(tt.content, "@DIR@", dir)
			if err := os.WriteFile(filepath.Join(dir, tt.file), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(bin, tt.args(dir)...)
			cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("%s rejects the lab's configuration: %v\n%s\n%s", tt.bin, err, out, content)
			}
		})
	}
}

func TestRunUnknown(t *testing.T) {
	if _, err := Run(context.Background(), "nope", Options{Ballast: ballastBin}); err == nil || !strings.Contains(err.Error(), "heterogeneous") {
		t.Errorf("unknown scenario: err = %v, want the list of names", err)
	}
	if _, err := Run(context.Background(), "heterogeneous", Options{}); err == nil {
		t.Error("no binary: want an error")
	}
}

// splitSum adds up a row's split.
func splitSum(r Result) int64 {
	var n int64
	for _, c := range r.Split {
		n += c
	}
	return n
}

func byLabel(t *testing.T, rep *Report, label string) Result {
	t.Helper()
	for _, r := range rep.Results {
		if r.Algorithm == label {
			return r
		}
	}
	t.Fatalf("no row %q in %s", label, rep.Scenario)
	return Result{}
}

// TestScenariosQuick runs every scenario as `ballast lab NAME --quick` does and checks the
// JSON shape and invariants that hold on any machine: every request answered once, splits
// summing to the responses, and the orderings the seeds are about.
func TestScenariosQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("runs every scenario end to end (about two minutes)")
	}
	// n is the request count each row must account for under Quick (0: a timed load).
	n := map[string]func(label string) int64{
		"heterogeneous": func(l string) int64 {
			if strings.Contains(l, "no keep-alive") {
				return 1000
			}
			return 3000
		},
		"slow-backend":  func(string) int64 { return 50 },
		"variable-cost": func(string) int64 { return 50 },
		"many-backends": func(string) int64 { return 0 },
		"backend-count": func(string) int64 { return 5000 },
		"peers":         func(string) int64 { return 0 },
		"jitter":        func(string) int64 { return 0 },
	}
	for _, name := range Names() {
		t.Run(name, func(t *testing.T) {
			switch name {
			case "lvs-modes":
				t.Skip("TestLVSModesQuick runs it (root, network namespaces)")
			case "failover":
				t.Skip("TestFailoverQuick runs it (root, network namespaces)")
			case "scale-out":
				t.Skip("TestScaleOutQuick runs it (root, network namespaces, FRR)")
			}
			rep, err := Run(context.Background(), name, Options{Ballast: ballastBin, Quick: true})
			if err != nil {
				t.Fatal(err)
			}
			checkShape(t, rep.JSON(), name)
			if name == "jitter" {
				// One row per hop of each calibration: every hop measured.
				for _, r := range rep.Results {
					if r.P99Ms < r.P50Ms || r.P99Ms <= 0 && !strings.HasSuffix(r.Algorithm, "overshoot") && !strings.HasSuffix(r.Algorithm, "connect") {
						t.Errorf("%s: p50 %v p99 %v", r.Algorithm, r.P50Ms, r.P99Ms)
					}
				}
				return
			}
			for _, r := range rep.Results {
				if r.Detail.Failed != 0 || r.Detail.Non2xx != 0 {
					t.Errorf("%s: %d failed, %d non-2xx", r.Algorithm, r.Detail.Failed, r.Detail.Non2xx)
				}
				want := n[name](r.Algorithm)
				if want == 0 {
					want = r.Detail.Requests
					if want == 0 {
						t.Errorf("%s: no request answered", r.Algorithm)
					}
				}
				if r.Detail.Requests != want || splitSum(r) != want {
					t.Errorf("%s: %d requests, split sums to %d, want %d", r.Algorithm, r.Detail.Requests, splitSum(r), want)
				}
				if r.ThroughputRPS <= 0 || r.MakespanS <= 0 || r.IdealRatio < 0 {
					t.Errorf("%s: throughput %v makespan %v ideal ratio %v", r.Algorithm, r.ThroughputRPS, r.MakespanS, r.IdealRatio)
				}
			}
			switch name {
			case "heterogeneous", "slow-backend", "variable-cost":
				// Every row has a predicted range and its goal stated; advise's best choice
				// was measured and judged, and its prediction for the seed's method held
				// against that row.
				for _, r := range rep.Results {
					g := r.Predicted.Range
					if g == nil || g.Runs < 10 || g.MakespanS[0] > g.MakespanS[1] || g.ThroughputRPS[0] > g.ThroughputRPS[1] || r.Detail.RangeGoal == "" {
						t.Errorf("%s: range %+v, goal %q", r.Algorithm, g, r.Detail.RangeGoal)
					}
					// The interval holds the runs it comes from, all of which details.json has.
					rg, x := g.ThroughputRPS, r.Detail.ModelExtremes
					if rep.Metric == Makespan {
						rg = g.MakespanS
					}
					if x == nil || len(r.Detail.ModelRuns) != g.Runs || x[0] < rg[0] || x[1] > rg[1] || x[0] > x[1] {
						t.Errorf("%s: range %v, the runs' extremes %v of %d runs", r.Algorithm, rg, x, len(r.Detail.ModelRuns))
					}
					// A traced row (its jitter on record) has the model's check on its own run.
					if o := r.Detail.OwnRange; r.Detail.Jitter != "" && !strings.Contains(r.Algorithm, "backlog") && !strings.Contains(r.Algorithm, "hedge") && !strings.Contains(r.Algorithm, "(advise)") &&
						(o == nil || o.Runs != g.Runs || o.MakespanS[0] > o.MakespanS[1] || o.MakespanS[0] <= 0) {
						t.Errorf("%s: own-run range %+v", r.Algorithm, o)
					}
				}
				// Ballast releases a slot before the client can have its response (h1's
				// releaseRead): no traced row of seed 001's scenarios, whose 50 requests
				// Ballast's ring holds whole, has a response read ahead of its release.
				for _, r := range rep.Results {
					if name != "heterogeneous" && r.Detail.Jitter != "" && !strings.Contains(r.Detail.Jitter, "; 0 responses read by their client before Ballast released their slot") {
						t.Errorf("%s: responses read before their release: %s", r.Algorithm, r.Detail.Jitter)
					}
				}
				// The lab's repeatability: stated beside the width wherever it was measured
				// (every traced heterogeneous row; seed 001's rows when their two runs of the
				// roundrobin row sent the same work), and a note says how, or why not.
				for _, r := range rep.Results {
					d := r.Detail
					if name == "heterogeneous" && !strings.Contains(r.Algorithm, "(advise)") && (d.Spread < 0 || !strings.Contains(d.SpreadFrom, "halves")) {
						t.Errorf("%s: spread %v from %q", r.Algorithm, d.Spread, d.SpreadFrom)
					}
					if (d.Spread > 0) != strings.Contains(d.RangeGoal, "repeatab") {
						t.Errorf("%s: spread %v but goal %q", r.Algorithm, d.Spread, d.RangeGoal)
					}
				}
				if !slices.ContainsFunc(rep.Notes, func(n string) bool { return strings.HasPrefix(n, "repeatability") }) {
					t.Errorf("no repeatability note in %q", rep.Notes)
				}
				a := rep.Advise
				if a == nil {
					t.Fatal("no advise check")
				}
				if a.Best == "" || a.BestGoal == "" || a.CurrentRange[1] <= 0 || a.CurrentMeasured <= 0 {
					t.Errorf("advise check %+v", *a)
				}
				if !slices.ContainsFunc(rep.Results, func(r Result) bool { return r.Algorithm == a.BestRow }) {
					t.Errorf("advise's best %q has no row %q", a.Best, a.BestRow)
				}
			}
			switch name {
			case "heterogeneous":
				sqf, random := byLabel(t, rep, "sqf"), byLabel(t, rep, "random")
				if sqf.ThroughputRPS <= random.ThroughputRPS {
					t.Errorf("sqf %.0f req/s does not beat random %.0f req/s", sqf.ThroughputRPS, random.ThroughputRPS)
				}
				if sqf.Predicted.ThroughputRPS <= 0 || random.Seed.ThroughputRPS != 2122 {
					t.Errorf("missing prediction or seed: %+v %+v", sqf.Predicted, random.Seed)
				}
				// Every traced row's range drew the half of its load's eight other measured
				// runs nearest its own in flow-stall share, and says so.
				for _, r := range rep.Results {
					if strings.Contains(r.Algorithm, "(advise)") {
						continue
					}
					if d := r.Detail.DrewFrom; !strings.HasPrefix(d, "4 measured runs") || !strings.Contains(d, "the nearest to it of 8") {
						t.Errorf("%s: drew from %q, want 4 of 8 runs", r.Algorithm, d)
					}
				}
			case "slow-backend":
				rr, busy := byLabel(t, rep, "byrequests"), byLabel(t, rep, "bybusyness")
				if busy.MakespanS >= rr.MakespanS {
					t.Errorf("bybusyness %.3f s not faster than byrequests %.3f s", busy.MakespanS, rr.MakespanS)
				}
				if rr.Split["A"] != 25 || rr.Split["B"] != 25 {
					t.Errorf("byrequests split %v, want 25/25", rr.Split)
				}
			case "variable-cost":
				// The backlog rows' requests waited (c 10 for 8 slots) and their hand-offs were
				// measured over the three clocks; the seed's rows without one measured none
				// (advise's extra row may have either).
				for _, r := range rep.Results {
					if strings.Contains(r.Algorithm, "(advise)") {
						continue
					}
					backlog := strings.Contains(r.Algorithm, "(backlog)")
					if got := strings.Contains(r.Detail.Jitter, "backlog hand-off"); got != backlog {
						t.Errorf("%s: hand-off measured %v, want %v (%s)", r.Algorithm, got, backlog, r.Detail.Jitter)
					}
				}
			case "many-backends", "backend-count":
				// Every row says where the CPU of a request went: Ballast (also relative to
				// n=2), the backend processes (many-backends' fleets), the lab process.
				for _, r := range rep.Results {
					d := r.Detail
					if d.CPUUsPerReq <= 0 || d.CPUVsBase <= 0 || d.LabCPUUsPerReq <= 0 || (name == "many-backends") != (d.BackendCPUUsPerReq > 0) {
						t.Errorf("%s: CPU per request: Ballast %v (%v of n=2), backends %v, lab %v", r.Algorithm, d.CPUUsPerReq, d.CPUVsBase, d.BackendCPUUsPerReq, d.LabCPUUsPerReq)
					}
				}
			case "peers":
				if !strings.HasPrefix(rep.Results[0].Algorithm, "ballast") || rep.Results[0].Detail.CPUUsPerReq <= 0 {
					t.Errorf("first row %+v: want Ballast with its CPU per request", rep.Results[0])
				}
			}
			if err := rep.WriteFiles(t.TempDir()); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestPickCost(t *testing.T) {
	ts := []Target{{Name: "a"}, {Name: "b", Weight: 3}, {Name: "c"}}
	for _, alg := range []string{"swrr", "vnswrr", "roundrobin", "p2c", "maglev"} {
		ns, err := pickCost(alg, ts)
		if err != nil || ns <= 0 {
			t.Errorf("%s: %v ns/pick, err %v", alg, ns, err)
		}
	}
	if _, err := pickCost("nope", ts); err == nil {
		t.Error("unknown algorithm: want an error")
	}
}
