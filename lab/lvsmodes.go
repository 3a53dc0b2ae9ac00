package lab

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"ballast/admin"
	"ballast/internal/netlab"
	"ballast/lab/backend"
	"ballast/lab/loadgen"
	"ballast/realserver"
)

// Seed 004's ab -c 500 -n 100000 figures; HAProxy (2 backends) stands for the L7 proxy, and
// its note that HAProxy's L7 forwarding performs about like LVS-NAT for the user-space L4 one.
var lvsSeed = map[string]float64{"xdp-dr": 9825.68, "xdp-tun": 9339.80, "xdp-nat": 4448.34, "l7": 4675.61}

// lvsPage is seed 003's 20 kB index.html.
const lvsPage = 20 << 10

// lvsAdmin is the admin address of the ballast under test, inside the director's namespace.
const lvsAdmin = "127.0.0.1:9190"

// lvsMode is one way from the client to the real servers.
type lvsMode struct {
	name string
	// start brings the mode up and returns the URL the client loads and a stop function.
	start func(ctx context.Context) (url string, stop func(), err error)
	xdp   bool // Ballast's XDP director: its counters and program are read per throughput run
	// program, when set, is the XDP program whose run time per packet the throughput run
	// reads (a mode without Ballast's director).
	program func() *ebpf.Program
}

// lvsRun is the state of one lvs-modes run.
type lvsRun struct {
	o   Options
	lab *netlab.Lab
	r   *Report
}

// runLVSModes: seeds 003 and 004 (docs/lab.md, lvs-modes).
func runLVSModes(ctx context.Context, o Options, r *Report) error {
	if os.Geteuid() != 0 {
		return errors.New("lvs-modes builds network namespaces and attaches XDP programs: run it as root")
	}
	r.Metric = Throughput
	r.Ideal = "direct to one real server (DR and TUN ≥ 95 % of it)"
	lab, err := netlab.New(netlab.Options{Reals: 2, MTU: 1600})
	if err != nil {
		return err
	}
	defer lab.Close()
	// The client opens a connection per request, as ab does: let TIME_WAIT ports be reused.
	for k, v := range map[string]string{"net/ipv4/tcp_tw_reuse": "1", "net/ipv4/ip_local_port_range": "1024 65535"} {
		if err := lab.Sysctl(lab.Client.NS, k, v); err != nil {
			return err
		}
	}
	for i, n := range lab.Reals {
		ln, err := lab.Listen(n.NS, "tcp4", ":80")
		if err != nil {
			return err
		}
		srv := backend.Serve(ln, backend.Config{Name: fmt.Sprintf("real%d", i), Workers: 4096, Body: lvsPage})
		defer srv.Close()
	}
	run := &lvsRun{o: o, lab: lab, r: r}
	restore, err := bpfStats()
	if err != nil {
		r.Notes = append(r.Notes, "kernel.bpf_stats_enabled could not be set: no program ns/packet ("+err.Error()+")")
	} else {
		defer restore()
	}
	var rs []func() // undo the real servers' DR/TUN set-up
	closeReals := func() {
		for _, undo := range rs {
			undo()
		}
		rs = nil
	}
	defer closeReals()
	direct := netlab.RealIP(0).String() + ":80"
	reals := []string{netlab.RealIP(0).String() + ":80", netlab.RealIP(1).String() + ":80"}
	vip := netlab.VIP.String() + ":80"
	var least *ebpf.Program // xdp-least's, while it runs
	modes := []lvsMode{
		{name: "direct", start: func(context.Context) (string, func(), error) {
			closeReals()
			return "http://" + direct + "/", func() {}, nil
		}},
		{name: "l7", start: func(ctx context.Context) (string, func(), error) {
			closeReals()
			addr := netlab.DirectorIP.String() + ":8080"
			stop, err := run.ballast(ctx, "serve", "--mode", "http", "--listen", addr, "--balancer", "wlc", "--backend", reals[0], "--backend", reals[1])
			return "http://" + addr + "/", stop, err
		}},
		{name: "l4", start: func(ctx context.Context) (string, func(), error) {
			closeReals()
			addr := netlab.DirectorIP.String() + ":8081"
			stop, err := run.ballast(ctx, "serve", "--mode", "tcp", "--listen", addr, "--balancer", "wlc", "--backend", reals[0], "--backend", reals[1])
			return "http://" + addr + "/", stop, err
		}},
		{name: "xdp-dr", xdp: true, start: func(ctx context.Context) (string, func(), error) {
			closeReals()
			if err := run.realServers(&rs, realserver.DR); err != nil {
				return "", nil, err
			}
			stop, err := run.director(ctx, "dr", vip, reals)
			return "http://" + vip + "/", stop, err
		}},
		// The same topology with the director's namespace routing the VIP to the real servers
		// in the kernel (no XDP, no ballast): what the extra hop costs on this machine with
		// nothing of the director's own. A reference only; the goals stay "vs direct".
		{name: "kernel-fwd", start: func(context.Context) (string, func(), error) {
			closeReals()
			if err := run.realServers(&rs, realserver.DR); err != nil {
				return "", nil, err
			}
			stop, err := run.kernelForwarding()
			return "http://" + vip + "/", stop, err
		}},
		// The least DR program possible (bpf/leastdr.c: two MAC rewrites and XDP_TX, every
		// flow to real server 0, no map) on the director's eth0: what any DR program costs per
		// packet in this place before it does a director's work. A reference only.
		{name: "xdp-least", program: func() *ebpf.Program { return least }, start: func(context.Context) (string, func(), error) {
			closeReals()
			if err := run.realServers(&rs, realserver.DR); err != nil {
				return "", nil, err
			}
			realMAC, err := run.mac(run.lab.Reals[0].NS)
			if err != nil {
				return "", nil, err
			}
			ownMAC, err := run.mac(run.lab.Director.NS)
			if err != nil {
				return "", nil, err
			}
			prog, detach, err := attachLeastDR(run.lab.In, run.lab.Director.NS, netip.AddrPortFrom(netlab.VIP, 80), realMAC, ownMAC)
			if err != nil {
				return "", nil, err
			}
			least = prog
			return "http://" + vip + "/", func() { detach(); least = nil }, nil
		}},
		{name: "xdp-tun", xdp: true, start: func(ctx context.Context) (string, func(), error) {
			closeReals()
			if err := run.realServers(&rs, realserver.TUN); err != nil {
				return "", nil, err
			}
			stop, err := run.director(ctx, "tun", vip, reals)
			return "http://" + vip + "/", stop, err
		}},
		{name: "xdp-nat", xdp: true, start: func(ctx context.Context) (string, func(), error) {
			closeReals()
			undo, err := run.natRouting()
			if err != nil {
				return "", nil, err
			}
			stop, err := run.director(ctx, "nat", vip, reals)
			if err != nil {
				undo()
				return "", nil, err
			}
			return "http://" + vip + "/", func() { stop(); undo() }, nil
		}},
	}
	concs := pick(o, []int{10, 50, 100, 200, 500}, []int{10, 100})
	step := pick(o, 10*time.Second, time.Second)
	n := pick(o, int64(100000), int64(3000))
	rounds := map[string][]Result{} // each mode's throughput rows, round by round
	for _, m := range modes {
		url, stop, err := m.start(ctx)
		if err != nil {
			return fmt.Errorf("%s: %w", m.name, err)
		}
		rows, err := run.curve(ctx, m, url, concs, step)
		var thr Result
		if err == nil {
			thr, err = run.throughput(ctx, m, url, n)
		}
		stop()
		if err != nil {
			return fmt.Errorf("%s: %w", m.name, err)
		}
		r.Results = append(r.Results, rows...)
		rounds[m.name] = append(rounds[m.name], thr)
	}
	// More throughput rounds for the modes the goals compare, interleaved, so that a drift of
	// the shared machine's load over the run does not decide the comparison: each round's
	// ratio is to that round's direct run.
	for round := 2; round <= o.reps(); round++ {
		for _, m := range modes {
			if !lvsRoundModes[m.name] {
				continue
			}
			url, stop, err := m.start(ctx)
			if err != nil {
				return fmt.Errorf("%s, round %d: %w", m.name, round, err)
			}
			thr, err := run.throughput(ctx, m, url, n)
			stop()
			if err != nil {
				return fmt.Errorf("%s, round %d: %w", m.name, round, err)
			}
			rounds[m.name] = append(rounds[m.name], thr)
		}
	}
	byMode := map[string]Result{}
	for _, m := range modes {
		row := medianRow(rounds[m.name][0].Algorithm, rounds[m.name])
		byMode[m.name] = row
		r.Results = append(r.Results, row)
	}
	directRPS := byMode["direct"].ThroughputRPS
	if o.reps() > 1 {
		r.Notes = append(r.Notes, lvsRoundNotes(modes, rounds)...)
	}
	for i := range r.Results {
		if directRPS > 0 {
			r.Results[i].IdealRatio = r.Results[i].ThroughputRPS / directRPS
		}
	}
	r.IdealValue = directRPS
	r.Notes = append(r.Notes, lvsVerdicts(byMode, rounds, directRPS)...)
	r.charts = lvsCharts
	return nil
}

// mac returns the Ethernet address of eth0 in the namespace ns.
func (run *lvsRun) mac(ns netns.NsHandle) (net.HardwareAddr, error) {
	var hw net.HardwareAddr
	err := run.lab.In(ns, func() error {
		l, err := netlink.LinkByName("eth0")
		if err == nil {
			hw = l.Attrs().HardwareAddr
		}
		return err
	})
	return hw, err
}

// realServers prepares every real server for DR or TUN (VIP on lo, ARP sysctls, decap).
func (run *lvsRun) realServers(rs *[]func(), mode realserver.Mode) error {
	for _, n := range run.lab.Reals {
		err := run.lab.In(n.NS, func() error {
			s, err := realserver.Setup(realserver.Options{VIPs: []netip.Addr{netlab.VIP}, Mode: mode, Iface: "eth0"})
			if err == nil {
				*rs = append(*rs, func() { _ = run.lab.In(n.NS, s.Close) })
			}
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// natRouting makes the director a router and the real servers reach the client through it;
// undo puts the direct routes back (a later round's direct run must not cross the director).
func (run *lvsRun) natRouting() (undo func(), err error) {
	l := run.lab
	undo = func() {
		for _, n := range l.Reals {
			_ = l.RouteDel(n.NS, netlab.ClientIP, netlab.DirectorIP)
		}
		_ = l.Sysctl(l.Director.NS, "net/ipv4/ip_forward", "0")
	}
	for k, v := range map[string]string{"net/ipv4/ip_forward": "1", "net/ipv4/conf/all/send_redirects": "0", "net/ipv4/conf/eth0/send_redirects": "0"} {
		if err := l.Sysctl(l.Director.NS, k, v); err != nil {
			undo()
			return nil, err
		}
	}
	for _, n := range l.Reals {
		if err := l.RouteVia(n.NS, netlab.ClientIP, netlab.DirectorIP); err != nil {
			undo()
			return nil, err
		}
	}
	return undo, nil
}

// kernelForwarding makes the director's namespace a plain router for the VIP: ip_forward, and
// one route to the VIP over both real servers (multipath, hashed by the flow's 5-tuple), which
// hold the VIP on lo and answer the client directly, as in DR. Redirects are off, or the client
// would be told to bypass the director. stop removes the route and turns forwarding off.
func (run *lvsRun) kernelForwarding() (stop func(), err error) {
	l := run.lab
	for k, v := range map[string]string{"net/ipv4/ip_forward": "1", "net/ipv4/fib_multipath_hash_policy": "1",
		"net/ipv4/conf/all/send_redirects": "0", "net/ipv4/conf/eth0/send_redirects": "0"} {
		if err := l.Sysctl(l.Director.NS, k, v); err != nil {
			return nil, err
		}
	}
	if err := l.RouteMultipath(l.Director.NS, netlab.VIP, netlab.RealIP(0), netlab.RealIP(1)); err != nil {
		return nil, err
	}
	return func() {
		_ = l.RouteDel(l.Director.NS, netlab.VIP, netip.Addr{})
		_ = l.Sysctl(l.Director.NS, "net/ipv4/ip_forward", "0")
	}, nil
}

// ballast starts `ballast ARGS` in the director's namespace and waits for its start-up line.
func (run *lvsRun) ballast(ctx context.Context, args ...string) (stop func(), err error) {
	cmd := exec.Command(run.o.Ballast, args...)
	var out bytes.Buffer
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = pw, &out
	if err := run.lab.Start(run.lab.Director.NS, cmd); err != nil {
		pr.Close()
		pw.Close()
		return nil, err
	}
	pw.Close()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop = func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		pr.Close()
	}
	line := make(chan string, 1)
	go func() {
		buf := make([]byte, 4096)
		k, _ := pr.Read(buf)
		line <- string(buf[:k])
	}()
	select {
	case l := <-line:
		if strings.HasPrefix(l, "ballast: serving on") {
			return stop, nil
		}
		stop()
		return nil, fmt.Errorf("ballast %s: %s", strings.Join(args, " "), strings.TrimSpace(out.String()))
	case <-time.After(30 * time.Second):
	case <-ctx.Done():
	}
	stop()
	return nil, fmt.Errorf("ballast %s did not start: %s", strings.Join(args, " "), strings.TrimSpace(out.String()))
}

// director starts `ballast serve --mode MODE` on the director's eth0 and waits until both
// real servers take new flows (their next hops are resolved in DR and TUN).
func (run *lvsRun) director(ctx context.Context, mode, vip string, reals []string) (func(), error) {
	stop, err := run.ballast(ctx, "serve", "--mode", mode, "--iface", "eth0", "--listen", vip, "--balancer", "wlc",
		"--backend", reals[0], "--backend", reals[1], "--admin", lvsAdmin)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		v, err := run.vipStats(ctx)
		up := 0
		if err == nil {
			for _, r := range v.Reals {
				if r.State == "up" {
					up++
				}
			}
		}
		if up == len(reals) {
			return stop, nil
		}
		if time.Now().After(deadline) {
			stop()
			return nil, fmt.Errorf("the director's real servers are not all up after 30 s: %+v (%v)", v.Reals, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// vipStats reads the director's only VIP from the admin API in the director's namespace.
func (run *lvsRun) vipStats(ctx context.Context) (admin.VIPView, error) {
	c := admin.NewClient(lvsAdmin, "")
	c.HTTP.Transport = &http.Transport{DialContext: run.lab.Dialer(run.lab.Director.NS)}
	r, err := c.Pools(ctx)
	if err != nil {
		return admin.VIPView{}, err
	}
	if len(r.Directors) != 1 || len(r.Directors[0].VIPs) != 1 {
		return admin.VIPView{}, fmt.Errorf("status shows %d directors", len(r.Directors))
	}
	return r.Directors[0].VIPs[0], nil
}

// bench runs `ballast bench` in the client's namespace and returns its JSON figures.
func (run *lvsRun) bench(ctx context.Context, url string, args ...string) (*loadgen.Result, error) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Minute) // a hang detector
	defer cancel()
	cmd := exec.CommandContext(cctx, run.o.Ballast, append(append([]string{"bench", "--json"}, args...), url)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := run.lab.Start(run.lab.Client.NS, cmd); err != nil {
		return nil, err
	}
	if err := cmd.Wait(); err != nil {
		return nil, fmt.Errorf("ballast bench %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(errOut.String()))
	}
	var res loadgen.Result
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		return nil, fmt.Errorf("ballast bench: %w: %q", err, out.String())
	}
	return &res, nil
}

// curve runs the concurrency steps of one mode.
func (run *lvsRun) curve(ctx context.Context, m lvsMode, url string, concs []int, step time.Duration) ([]Result, error) {
	var rows []Result
	for _, c := range concs {
		res, err := run.bench(ctx, url, "-c", strconv.Itoa(c), "-t", strconv.FormatFloat(step.Seconds(), 'f', -1, 64))
		if err != nil {
			return nil, err
		}
		row := lvsRow(fmt.Sprintf("%s (c=%d)", m.name, c), res)
		run.o.logf("lvs-modes: %s: %.0f req/s, p50 %.2f ms, p99 %.2f ms, TTFB p50 %.2f ms", row.Algorithm, res.ThroughputRPS, res.P50Ms, res.P99Ms, res.TTFBP50Ms)
		rows = append(rows, row)
	}
	return rows, nil
}

// throughput runs seed 004's load (-c 500, n requests) on one mode; the row carries the
// director's figures per request.
func (run *lvsRun) throughput(ctx context.Context, m lvsMode, url string, n int64) (Result, error) {
	var before admin.VIPView
	var prog *ebpf.Program
	var ps0 *ebpf.ProgramStats
	if m.xdp {
		var err error
		if before, err = run.vipStats(ctx); err != nil {
			return Result{}, err
		}
		if id, err := run.lab.XDPProgram(run.lab.Director.NS); err == nil && id != 0 {
			if prog, err = ebpf.NewProgramFromID(ebpf.ProgramID(id)); err == nil {
				defer prog.Close()
			}
		}
	}
	if m.program != nil {
		prog = m.program()
	}
	if prog != nil {
		ps0, _ = prog.Stats()
	}
	dirRx0, _, err1 := run.lab.Traffic(run.lab.Director.NS)
	_, cliTx0, err2 := run.lab.Traffic(run.lab.Client.NS)
	res, err := run.bench(ctx, url, "-c", "500", "-n", strconv.FormatInt(n, 10))
	if err != nil {
		return Result{}, err
	}
	dirRx1, _, err3 := run.lab.Traffic(run.lab.Director.NS)
	_, cliTx1, err4 := run.lab.Traffic(run.lab.Client.NS)
	row := lvsRow(fmt.Sprintf("%s (-c 500 -n %d)", m.name, n), res)
	if s, ok := lvsSeed[m.name]; ok {
		row.Seed = Figures{ThroughputRPS: s, Source: "seed 004, ab -c 500 -n 100000"}
		if m.name == "l7" {
			row.Seed.Source = "seed 004: HAProxy with 2 backends"
		}
	}
	req := float64(res.Requests)
	if errors.Join(err1, err2, err3, err4) == nil && req > 0 && m.name != "direct" {
		// Everything the director receives that the client did not send came from the real
		// servers: the responses, in the modes where they cross it.
		row.Detail.ResponseBytesPerReq = max(0, float64(int64(dirRx1-dirRx0)-int64(cliTx1-cliTx0))) / req
	}
	if m.xdp && req > 0 {
		after, err := run.vipStats(ctx)
		if err != nil {
			return Result{}, err
		}
		row.Detail.DirectorPacketsPerReq = float64(after.Packets-before.Packets) / req
		row.Detail.DirectorBytesPerReq = float64(after.Bytes-before.Bytes) / req
	}
	if ps0 != nil {
		if ps1, err := prog.Stats(); err == nil && ps1.RunCount > ps0.RunCount && ps1.Runtime > 0 {
			row.Detail.ProgNsPerPacket = float64(ps1.Runtime-ps0.Runtime) / float64(ps1.RunCount-ps0.RunCount)
		}
	}
	run.o.logf("lvs-modes: %s: %.0f req/s, p50 %.2f ms, p99 %.2f ms; director %.1f packets %.0f bytes per request, %.0f response bytes through it per request, %.0f ns per packet",
		row.Algorithm, res.ThroughputRPS, res.P50Ms, res.P99Ms, row.Detail.DirectorPacketsPerReq, row.Detail.DirectorBytesPerReq, row.Detail.ResponseBytesPerReq, row.Detail.ProgNsPerPacket)
	if res.Failed > 0 || res.Non2xx > 0 {
		run.o.fail(fmt.Sprintf("%s: %d failed, %d non-2xx of %d", row.Algorithm, res.Failed, res.Non2xx, res.Requests))
	}
	return row, nil
}

// lvsRoundModes are the modes whose throughput runs repeat in interleaved rounds (Options.Reps):
// the goals' (DR and TUN against direct) and the two references for the extra hop, kernel
// forwarding and the least DR program.
var lvsRoundModes = map[string]bool{"direct": true, "xdp-dr": true, "kernel-fwd": true, "xdp-least": true, "xdp-tun": true}

// pairedRatios returns mode's throughput over direct's, round by round.
func pairedRatios(rounds map[string][]Result, mode string) []float64 {
	var out []float64
	for i, r := range rounds[mode] {
		if i < len(rounds["direct"]) && rounds["direct"][i].ThroughputRPS > 0 {
			out = append(out, r.ThroughputRPS/rounds["direct"][i].ThroughputRPS)
		}
	}
	return out
}

// lvsRoundNotes lists every round's throughput of the repeated modes.
func lvsRoundNotes(modes []lvsMode, rounds map[string][]Result) []string {
	var out []string
	for _, m := range modes {
		if !lvsRoundModes[m.name] {
			continue
		}
		line := fmt.Sprintf("rounds: %s", m.name)
		for i, r := range rounds[m.name] {
			line += fmt.Sprintf("%s %.0f req/s", map[bool]string{true: ":", false: ","}[i == 0], r.ThroughputRPS)
		}
		if m.name != "direct" {
			line += " (of that round's direct:"
			for i, x := range pairedRatios(rounds, m.name) {
				line += fmt.Sprintf("%s %.1f%%", map[bool]string{true: "", false: ","}[i == 0], 100*x)
			}
			line += ")"
		}
		out = append(out, line)
	}
	return out
}

func lvsRow(label string, res *loadgen.Result) Result {
	row := row(label, res, 0)
	row.Detail.TTFBP50Ms = res.TTFBP50Ms
	return row
}

// lvsVerdicts says whether each goal of the scenario was met.
//
// With several rounds, DR and TUN are judged by the median of their round-by-round ratios to
// direct; with one, by the one ratio.
func lvsVerdicts(by map[string]Result, rounds map[string][]Result, direct float64) []string {
	met := func(ok bool) string {
		if ok {
			return "met"
		}
		return "NOT met"
	}
	// ofDirect is mode's throughput as a share of direct's: with several rounds the median of
	// the rounds' ratios, else the one ratio.
	ofDirect := func(m string) (x float64, how string, ok bool) {
		r, ok := by[m]
		if !ok || direct <= 0 {
			return 0, "", false
		}
		if ratios := pairedRatios(rounds, m); len(ratios) > 1 {
			return median(ratios), fmt.Sprintf(", the median of %d interleaved rounds' ratios (median runs %.0f vs %.0f req/s)", len(ratios), r.ThroughputRPS, direct), true
		}
		return r.ThroughputRPS / direct, fmt.Sprintf(" (%.0f vs %.0f req/s)", r.ThroughputRPS, direct), true
	}
	// progNs is the median over the rounds of mode's program time per packet, and the rounds'
	// range as text.
	progNs := func(m string) (float64, string) {
		var ns []float64
		for _, r := range rounds[m] {
			if r.Detail.ProgNsPerPacket > 0 {
				ns = append(ns, r.Detail.ProgNsPerPacket)
			}
		}
		if len(ns) == 0 {
			return 0, ""
		}
		lo, hi := slices.Min(ns), slices.Max(ns)
		if len(ns) == 1 {
			return ns[0], fmt.Sprintf("%.0f ns", lo)
		}
		return median(ns), fmt.Sprintf("%.0f ns (rounds %.0f–%.0f)", median(ns), lo, hi)
	}
	var out []string
	for _, m := range []string{"xdp-dr", "xdp-tun"} {
		if x, how, ok := ofDirect(m); ok {
			out = append(out, fmt.Sprintf("goal %s ≥ 95%% of direct: %.1f%%%s: %s", m, 100*x, how, met(x >= 0.95)))
		}
	}
	if x, how, ok := ofDirect("xdp-least"); ok {
		out = append(out, fmt.Sprintf("reference: the least DR program possible (no map, every flow to real server 0) reaches %.1f%% of direct%s: the extra hop's own cost on this machine", 100*x, how))
	}
	if k, how, ok := ofDirect("kernel-fwd"); ok {
		line := fmt.Sprintf("reference: the director's namespace forwarding in the kernel (no XDP) reaches %.1f%% of direct%s", 100*k, how)
		for _, m := range []string{"xdp-dr", "xdp-tun"} {
			if x, _, ok := ofDirect(m); ok && k > 0 {
				line += fmt.Sprintf("; %s %.1f%% of it", m, 100*x/k)
			}
		}
		out = append(out, line)
	}
	dr, okDR := by["xdp-dr"]
	nat, okNAT := by["xdp-nat"]
	if okDR && okNAT && nat.Detail.ResponseBytesPerReq > 0 {
		ratio := dr.Detail.ResponseBytesPerReq / nat.Detail.ResponseBytesPerReq
		out = append(out, fmt.Sprintf("goal response bytes through the director in DR ≤ 5%% of NAT's: %.0f vs %.0f bytes per request (%.2f%%): %s",
			dr.Detail.ResponseBytesPerReq, nat.Detail.ResponseBytesPerReq, 100*ratio, met(ratio <= 0.05)))
	}
	drNs, drText := progNs("xdp-dr")
	if drNs > 0 {
		out = append(out, fmt.Sprintf("goal XDP program ≤ 150 ns per packet in DR: %s: %s", drText, met(drNs <= 150)))
	}
	if leastNs, leastText := progNs("xdp-least"); leastNs > 0 {
		line := fmt.Sprintf("reference: the least DR program possible (two MAC rewrites and XDP_TX, no map) costs %s per packet in the same place", leastText)
		if drNs > 0 {
			line += fmt.Sprintf("; the director's DR program %.0f ns above it", drNs-leastNs)
		}
		out = append(out, line)
	}
	return out
}

// bpfStats turns kernel.bpf_stats_enabled on (a global sysctl) and returns what puts it back.
func bpfStats() (restore func(), err error) {
	const path = "/proc/sys/kernel/bpf_stats_enabled"
	old, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(path, []byte("1"), 0o644); err != nil {
		return nil, err
	}
	return func() { _ = os.WriteFile(path, old, 0o644) }, nil
}
