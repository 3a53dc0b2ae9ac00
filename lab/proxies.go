package lab

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"ballast/balance"
	"ballast/lab/backend"
	"ballast/lab/loadgen"
)

// Seeds 002 and 004 and the peers: the proxy's own cost, with backends that answer at once.

// fastBackend answers at once and never queues, so that the proxy is what is measured.
func fastBackend(name string) backend.Config {
	return backend.Config{Name: name, Workers: 1024} // more than any load's concurrency
}

// portChunk bounds the backends one `ballast backend --ports` process serves: its listeners
// and its accepted connections must fit the process's file limit (20000 here).
const portChunk = 2500

// portBlocks is the most split entries a report row keeps; larger pools are counted per block
// of consecutive ports.
const portBlocks = 100

// backendFleet is a range of emulated backends served by child processes.
type backendFleet struct {
	procs   []*child
	targets []Target
	from    int
}

// cpu is the CPU time the fleet's processes have used so far.
func (f *backendFleet) cpu() (time.Duration, error) {
	var total time.Duration
	for _, c := range f.procs {
		t, err := c.cpu()
		if err != nil {
			return 0, err
		}
		total += t
	}
	return total, nil
}

func (f *backendFleet) close() {
	for _, c := range f.procs {
		c.stop()
	}
}

// startFleet serves n fast backends named b-PORT on consecutive loopback ports below the
// ephemeral range, retrying with another base port when one is taken.
func startFleet(ctx context.Context, bin string, n int, weighted bool) (*backendFleet, error) {
	const lo, hi = 10000, 32000 // below Linux's ephemeral ports (32768-60999)
	if n > hi-lo {
		return nil, fmt.Errorf("lab: %d backends do not fit ports %d-%d", n, lo, hi)
	}
	// Service is instant, so workers only bound concurrency; each costs a timer, so large
	// fleets get fewer.
	workers := max(4, min(64, 65536/n))
	var lastErr error
	for attempt := 0; attempt < 8; attempt++ {
		from := lo + rand.IntN(hi-lo-n+1)
		f := &backendFleet{from: from}
		var err error
		for start := from; start < from+n && err == nil; start += portChunk {
			end := min(start+portChunk, from+n) - 1
			args := []string{"backend", "--listen", "127.0.0.1:0", "--ports", fmt.Sprintf("%d-%d", start, end), "--name", "b", "--workers", strconv.Itoa(workers)}
			var c *child
			c, _, err = startChild(ctx, bin, args, nil, "", 60*time.Second, func(line string) (string, bool) {
				return "", strings.Contains(line, "listening on") || strings.Contains(line, "backends on")
			})
			if err == nil {
				f.procs = append(f.procs, c)
			}
		}
		if err != nil {
			f.close()
			lastErr = err
			if ctx.Err() != nil {
				return nil, err
			}
			continue
		}
		for i := 0; i < n; i++ {
			port := from + i
			t := Target{Name: "b-" + strconv.Itoa(port), Addr: "127.0.0.1:" + strconv.Itoa(port)}
			if weighted {
				t.Weight = 101 + i%5 // seed 002's example weights
			}
			f.targets = append(f.targets, t)
		}
		return f, nil
	}
	return nil, lastErr
}

// groupSplit folds a split over more than portBlocks backends into blocks of consecutive
// ports named "b-FIRST..LAST", so that the counts still sum to the responses.
func groupSplit(split map[string]int64, from, n int) map[string]int64 {
	if n <= portBlocks {
		return split
	}
	size := (n + portBlocks - 1) / portBlocks
	out := map[string]int64{}
	for name, c := range split {
		port, err := strconv.Atoi(strings.TrimPrefix(name, "b-"))
		if err != nil || port < from || port >= from+n {
			out[name] += c
			continue
		}
		first := from + (port-from)/size*size
		last := min(first+size, from+n) - 1
		out[fmt.Sprintf("b-%d..%d", first, last)] += c
	}
	return out
}

func runManyBackends(ctx context.Context, o Options, r *Report) error {
	r.Metric = Throughput
	r.Ideal = "the same algorithm's throughput with 2 backends (goal: vnswrr at 2000 >= 97 %)"
	counts := pick(o, []int{2, 100, 500, 2000, 10000}, []int{2, 500})
	weightedAt := pick(o, 2000, 500)
	dur := pick(o, 10*time.Second, time.Second)
	algs := []string{"swrr", "vnswrr", "roundrobin", "p2c", "maglev"}
	// Distinct paths, so that maglev (hashing the URI) spreads requests; every algorithm gets them.
	suffixes := make([]string, 4096)
	for i := range suffixes {
		suffixes[i] = "/k/" + strconv.Itoa(i)
	}
	base, baseCPU := map[string]float64{}, map[string]float64{}
	type variant struct {
		n        int
		weighted bool
	}
	var variants []variant
	for _, n := range counts {
		variants = append(variants, variant{n, false})
		if n == weightedAt {
			variants = append(variants, variant{n, true})
		}
	}
	for _, v := range variants {
		fleet, err := startFleet(ctx, o.Ballast, v.n, v.weighted)
		if err != nil {
			return err
		}
		for _, alg := range algs {
			spec := PoolSpec{Balancer: alg, Backends: fleet.targets, HashURI: alg == "maglev"}
			load := loadgen.Options{C: 64, Duration: dur, KeepAlive: true, URLSuffixes: suffixes}
			// The warm-up opens the backend connections (a few per backend), so that the row
			// measures forwarding over them and not 2000 connection set-ups.
			warm := load
			warm.Duration, warm.N = 0, int64(4*v.n+1000)
			res, cpus, err := runMeasured(ctx, o, spec, warm, load, fleet.cpu, labCPU)
			if err != nil {
				fleet.close()
				return fmt.Errorf("%s with %d backends: %w", alg, v.n, err)
			}
			label := fmt.Sprintf("%s (n=%d)", alg, v.n)
			if v.weighted {
				label = fmt.Sprintf("%s (n=%d, weighted)", alg, v.n)
			}
			row := row(label, res, cpus[0])
			row.Detail.BackendCPUUsPerReq = perReq(cpus[1], res)
			row.Detail.LabCPUUsPerReq = perReq(cpus[2], res)
			row.Split = groupSplit(row.Split, fleet.from, v.n)
			if ns, err := pickCost(alg, fleet.targets); err == nil {
				row.Detail.PickNs = ns
				if c := row.Detail.CPUUsPerReq; c > 0 {
					row.Detail.PickCPUPct = 100 * ns / (c * 1000)
				}
			}
			if v.n == counts[0] && !v.weighted {
				base[alg], baseCPU[alg] = row.ThroughputRPS, row.Detail.CPUUsPerReq
			}
			if b := base[alg]; b > 0 {
				row.IdealRatio = row.ThroughputRPS / b
			}
			if b := baseCPU[alg]; b > 0 {
				row.Detail.CPUVsBase = row.Detail.CPUUsPerReq / b
			}
			if v.n == 2000 && !v.weighted {
				switch alg {
				case "swrr":
					row.Seed = Figures{PickCPUPct: 39, Source: "nginx SWRR at 2000 endpoints, seed 002"}
				case "vnswrr":
					row.Seed = Figures{PickCPUPct: 0.27, Source: "Tengine VNSWRR at 2000 endpoints (+60 % QPS over SWRR), seed 002"}
				}
			}
			o.logf("many-backends: %s: %.0f req/s (%.1f%% of n=%d), CPU/req: Ballast %.1f µs (%.1f%% of n=%d), backends %.1f µs, lab %.1f µs",
				label, row.ThroughputRPS, 100*row.IdealRatio, counts[0], row.Detail.CPUUsPerReq, 100*row.Detail.CPUVsBase, counts[0],
				row.Detail.BackendCPUUsPerReq, row.Detail.LabCPUUsPerReq)
			r.Results = append(r.Results, row)
		}
		fleet.close()
	}
	r.Notes = append(r.Notes,
		fmt.Sprintf("keep-alive -c 64 for %v per row, after 4n+1000 requests that open the backend connections; backends answer at once (ballast backend --ports, %d per process); weighted = weights 101..105 repeating", dur, portChunk),
		fmt.Sprintf("pools over %d backends report their split per block of consecutive ports", portBlocks),
		"the model predicts nothing here: throughput is bounded by the proxy's CPU, which the model does not simulate",
		"cpu/req = Ballast's utime+stime per request (and its share of the same algorithm's at the smallest n); backends = the fleet processes', lab = the lab process's (the load generator): all share the same cores, so a throughput loss with Ballast's CPU per request unchanged comes from the others",
		"pick % CPU = the algorithm's pick time over the same pool, timed in the lab process with the same balance code and an idle load view, divided by Ballast's measured CPU per request: an estimate of seed 002's profile figure, not a profile")
	return nil
}

func runBackendCount(ctx context.Context, o Options, r *Report) error {
	r.Metric = Throughput
	r.Ideal = "the same algorithm's throughput with 2 backends (goal: 5 backends >= 98 %)"
	cfgs := make([]backend.Config, 5)
	for i := range cfgs {
		cfgs[i] = fastBackend(string(rune('A' + i)))
	}
	_, ts, closeAll, err := localBackends(cfgs...)
	if err != nil {
		return err
	}
	defer closeAll()
	n := pick[int64](o, 100000, 5000)
	c := pick(o, 500, 100) // 500 connections for 10 requests each would measure only set-up
	load := loadgen.Options{N: n, C: c, KeepAlive: true}
	for _, alg := range []string{"roundrobin", "sqf"} {
		proxies := map[int]Proxy{}
		for _, k := range []int{2, 5} {
			p, err := StartBallast(ctx, o.Ballast, PoolSpec{Balancer: alg, Backends: ts[:k]}, 30*time.Second)
			if err != nil {
				for _, q := range proxies {
					q.Close()
				}
				return err
			}
			proxies[k] = p
		}
		runs := map[int][]Result{}
		var err error
		for rep := 0; rep < o.reps() && err == nil; rep++ {
			for _, k := range []int{2, 5} { // interleaved: 2 5 2 5 ...
				var res *loadgen.Result
				var cpus []time.Duration
				res, cpus, err = measureCPU(ctx, o, proxies[k], load, proxies[k].CPU, labCPU)
				if err != nil {
					break
				}
				r := row("", res, cpus[0])
				r.Detail.LabCPUUsPerReq = perReq(cpus[1], res)
				runs[k] = append(runs[k], r)
			}
		}
		for _, q := range proxies {
			q.Close()
		}
		if err != nil {
			return fmt.Errorf("%s: %w", alg, err)
		}
		two := medianRow("", runs[2])
		for _, k := range []int{2, 5} {
			row := medianRow(fmt.Sprintf("%s (n=%d)", alg, k), runs[k])
			if two.ThroughputRPS > 0 {
				row.IdealRatio = row.ThroughputRPS / two.ThroughputRPS
			}
			if c := two.Detail.CPUUsPerReq; c > 0 {
				row.Detail.CPUVsBase = row.Detail.CPUUsPerReq / c
			}
			if alg == "roundrobin" {
				row.Seed = Figures{ThroughputRPS: map[int]float64{2: 4675.61, 5: 3653.37}[k], Source: "HAProxy roundrobin, seed 004"}
			}
			o.logf("backend-count: %s: %.0f req/s (%.1f%% of n=2), CPU/req: Ballast %.1f µs (%.1f%% of n=2), lab %.1f µs",
				row.Algorithm, row.ThroughputRPS, 100*row.IdealRatio, row.Detail.CPUUsPerReq, 100*row.Detail.CPUVsBase, row.Detail.LabCPUUsPerReq)
			r.Results = append(r.Results, row)
		}
	}
	r.Notes = append(r.Notes, fmt.Sprintf("keep-alive -c %d -n %d; backends answer at once; 2 and 5 backends interleaved, %d repetitions, medians", c, n, o.reps()),
		"the model predicts nothing here: the proxy's CPU is the bottleneck",
		"cpu/req = Ballast's utime+stime per request (and its share of the same algorithm's with 2 backends); lab = the lab process's, which runs both the load generator and the five backends on the same cores")
	return nil
}

// peerLoad is one of the peers scenario's loads.
type peerLoad struct {
	label string
	opts  loadgen.Options
}

func runPeers(ctx context.Context, o Options, r *Report) error {
	r.Metric = Throughput
	r.Ideal = "HAProxy's CPU per request at the same load divided by this proxy's (>= 100 % meets the goal)"
	_, ts, closeAll, err := localBackends(fastBackend("A"), fastBackend("B"))
	if err != nil {
		return err
	}
	defer closeAll()
	dur := pick(o, 10*time.Second, time.Second)
	loads := []peerLoad{
		{"c=16", loadgen.Options{C: 16, Duration: dur, KeepAlive: true}},
		{"c=256", loadgen.Options{C: 256, Duration: dur, KeepAlive: true}},
		{"c=16, no keep-alive", loadgen.Options{C: 16, Duration: dur}},
	}
	var proxies []Proxy
	defer func() {
		for _, p := range proxies {
			p.Close()
		}
	}()
	b, err := StartBallast(ctx, o.Ballast, PoolSpec{Balancer: "roundrobin", Backends: ts, GOMAXPROCS: 1}, 30*time.Second)
	if err != nil {
		return err
	}
	proxies = append(proxies, b)
	var skipped []string
	for _, peer := range Peers() {
		p, err := peer.Start(ctx, ts)
		if err != nil {
			if _, avail := peer.Available(); avail != nil {
				skipped = append(skipped, avail.Error())
			} else {
				skipped = append(skipped, fmt.Sprintf("%s failed to start: %v", peer.Name, err))
			}
			continue
		}
		proxies = append(proxies, p)
		if v := peer.VersionLine(); v != "" {
			r.Notes = append(r.Notes, peer.Name+": "+v)
		}
	}
	for _, l := range loads {
		runs := make([][]Result, len(proxies))
		for rep := 0; rep < o.reps(); rep++ {
			for i, p := range proxies { // interleaved: A B C A B C ...
				res, cpu, err := measure(ctx, o, p, l.opts)
				if err != nil {
					return fmt.Errorf("%s at %s: %w", p.Name(), l.label, err)
				}
				runs[i] = append(runs[i], row("", res, cpu))
			}
		}
		rows := make([]Result, len(proxies))
		haproxy := 0.0
		for i, p := range proxies {
			rows[i] = medianRow(fmt.Sprintf("%s (%s)", p.Name(), l.label), runs[i])
			if p.Name() == "haproxy" {
				haproxy = rows[i].Detail.CPUUsPerReq
			}
		}
		for i := range rows {
			if c := rows[i].Detail.CPUUsPerReq; haproxy > 0 && c > 0 {
				rows[i].IdealRatio = haproxy / c
			}
			o.logf("peers: %s: %.0f req/s, %.1f µs CPU/req, p99 %.2f ms", rows[i].Algorithm, rows[i].ThroughputRPS, rows[i].Detail.CPUUsPerReq, rows[i].P99Ms)
		}
		r.Results = append(r.Results, rows...)
		if haproxy > 0 {
			verdict := "meets"
			if rows[0].Detail.CPUUsPerReq > haproxy {
				verdict = "misses"
			}
			r.Notes = append(r.Notes, fmt.Sprintf("%s: Ballast %.1f µs CPU/req vs HAProxy %.1f: %s the goal", l.label, rows[0].Detail.CPUUsPerReq, haproxy, verdict))
		}
	}
	r.Notes = append(r.Notes, fmt.Sprintf("every proxy: round robin over two backends that answer at once, keep-alive to them, one worker thread (Ballast and Caddy GOMAXPROCS=1); %v per load, %d interleaved repetitions, medians; CPU = utime+stime of the proxy's processes from /proc", dur, o.reps()))
	for _, s := range skipped {
		r.Notes = append(r.Notes, "skipped: "+s)
	}
	if len(skipped) == len(Peers()) {
		r.Notes = append(r.Notes, "no peer installed: only Ballast was measured")
	}
	return errors.Join(ctx.Err())
}

// pickCost times the algorithm's Pick over ts in this process: the same balance code Ballast
// runs, with an idle load view. It returns nanoseconds per pick.
func pickCost(alg string, ts []Target) (float64, error) {
	bs := make([]balance.Backend, len(ts))
	for i, t := range ts {
		bs[i] = balance.Backend{ID: t.Name, Weight: max(t.Weight, 1)}
	}
	p, err := balance.New(alg, bs, balance.Options{Load: idleLoad{}})
	if err != nil {
		return 0, err
	}
	var tried balance.Tried
	key := uint64(0x9e3779b97f4a7c15)
	batch := func() {
		for range 1000 {
			key = key*6364136223846793005 + 1442695040888963407 // a new hash key per pick
			_, _ = p.Pick(key, tried)
		}
	}
	batch() // warm-up: lazily built tables (vnswrr) fill here
	start := time.Now()
	n := 0
	for n < 20000 || time.Since(start) < 50*time.Millisecond {
		batch()
		n += 1000
	}
	return float64(time.Since(start).Nanoseconds()) / float64(n), nil
}

// idleLoad is a load view with nothing in flight, for timing picks.
type idleLoad struct{}

func (idleLoad) InFlight(int) int64  { return 0 }
func (idleLoad) Full(int) bool       { return false }
func (idleLoad) Latency(int) float64 { return 0 }
