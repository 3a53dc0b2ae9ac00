package lab

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"ballast/admin"
	"ballast/internal/netlab"
	"ballast/realserver"
)

// The scale-out lab: a client behind an FRR router, three active DR directors announcing the
// VIP by BGP (the router spreads flows over them with a 5-tuple ECMP hash), three real
// servers and a fourth one to add.
const (
	soAdmin     = "127.0.0.1:9192" // each director's admin API, inside its namespace
	soLongLived = 100              // long-lived flows, each sending a request every soEvery
	soEvery     = 50 * time.Millisecond
	soNewEvery  = 5 * time.Millisecond // 200 new connections a second
	soTimeout   = 2 * time.Second      // a new connection's bound (one SYN retransmission fits)
	soSlow      = 500 * time.Millisecond
	// soPatience bounds a long-lived flow's request: past TCP's retransmissions through a
	// 9 s hold time (0.2 + 0.4 + ... + 6.4 s = 12.6 s), so that a flow that waits the
	// detection out is a stall, not a break.
	soPatience  = 30 * time.Second
	soDirectors = 3
	soReals     = 3
	soASN       = 65010
	soRouterASN = 65000
	soSeed      = 7
)

// ScaleOutRow is one run of `ballast lab scale-out`: one fault of one director, with or
// without BFD, with or without a real server added at the same moment, with or without flow
// sync between the directors.
type ScaleOutRow struct {
	Fault   string `json:"fault"` // sigterm (drain), sigkill, link (the machine lost)
	BFD     bool   `json:"bfd"`
	AddReal bool   `json:"add_real"` // a fourth real server added to every director's pool just before the fault
	// Added is how many real servers were added, one after the other (2: the table changed
	// twice before the fault, which second chance, remembering one previous server, does
	// not cover).
	Added    int  `json:"added"`
	FlowSync bool `json:"flow_sync"` // the directors share the flows they place
	// SecondChance: GLB's second chance instead (bgp.second_chance, the real servers' program).
	SecondChance bool `json:"second_chance"`
	// RouterS is the time from the fault until the router's route to the VIP no longer has
	// the director as a next hop; -1: never within the phase.
	RouterS float64 `json:"router_s"`
	// New connections opened from the fault to the end of the phase: failed (no answer within
	// 2 s), slow (answered after more than 0.5 s: a SYN that went to the dead director and was
	// retransmitted), and the span from the first to the last failed or slow one.
	Requests  int     `json:"requests"`
	Failed    int     `json:"failed"`
	Slow      int     `json:"slow"`
	AffectedS float64 `json:"affected_s"`
	LongLived int     `json:"long_lived"`
	// Broken: long-lived flows reset, closed, timed out or answered by another real server.
	Broken int     `json:"broken"`
	StallS float64 `json:"stall_s"` // the longest request of a long-lived flow in the phase
	// The spreads before the fault.
	SpreadDirectors []int `json:"spread_directors"` // new flows per director over 1 s of new connections
	SpreadReals     []int `json:"spread_reals"`     // long-lived flows per real server
	// What keeping the flows cost: flows and datagrams the directors' flow sync sent before
	// the fault (every flow placed, to each other director), and segments the real servers'
	// second-chance programs passed on to another real server (each crossing the segment
	// twice) during the phase.
	SyncFlowsSent      uint64 `json:"sync_flows_sent"`
	SyncDatagrams      uint64 `json:"sync_datagrams"`
	SecondChancePassed uint64 `json:"second_chance_passed"`
	// Failures are the first failed new connections and broken flows: when after the fault,
	// and why.
	Failures []string `json:"failures,omitempty"`
	// Disturbed says why the run does not measure what it should: a surviving director's
	// session went down during the phase (BFD at 100 ms × 3 misses on a loaded machine). Such
	// a run is repeated, up to twice; Attempts counts the runs.
	Disturbed string `json:"disturbed,omitempty"`
	Attempts  int    `json:"attempts"`
	Error     string `json:"error,omitempty"`
}

type soRun struct {
	o    Options
	lab  *netlab.Lab
	dir  string
	frr  *netlab.FRR
	real []*netlab.Node           // the three real servers and the two added
	rs   []*realserver.RealServer // their set-up (second chance's counters)
}

// runScaleOut: issue 22's measurements (docs/lab.md, scale-out; docs/scale-out.md).
func runScaleOut(ctx context.Context, o Options, r *Report) error {
	if os.Geteuid() != 0 {
		return errors.New("scale-out builds network namespaces, runs FRR and attaches XDP programs: run it as root")
	}
	if why := netlab.FRRMissing(); why != "" {
		return errors.New(why)
	}
	r.Metric = Makespan
	r.Ideal = "0 established flows broken on a drain; on a kill only new connections sent to the dead director during detection (with BFD 100 ms × 3: under 0.5 s of them); 0 broken when a real server is added at the same moment"
	lab, err := netlab.New(netlab.Options{Reals: soReals, Directors: soDirectors, Router: true})
	if err != nil {
		return err
	}
	defer lab.Close()
	for k, v := range map[string]string{"net/ipv4/tcp_tw_reuse": "1", "net/ipv4/ip_local_port_range": "1024 65535"} {
		if err := lab.Sysctl(lab.Client.NS, k, v); err != nil {
			return err
		}
	}
	run := &soRun{o: o, lab: lab, real: slices.Clone(lab.Reals)}
	for k := soReals; k < soReals+2; k++ {
		extra, err := lab.AddNode(fmt.Sprintf("real%d", k), netlab.RealIP(k), 0)
		if err != nil {
			return err
		}
		run.real = append(run.real, extra)
	}
	for i, n := range run.real {
		ln, err := lab.Listen(n.NS, "tcp4", ":80")
		if err != nil {
			return err
		}
		name := fmt.Sprintf("real%d", i)
		srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			host, _, _ := net.SplitHostPort(r.RemoteAddr)
			fmt.Fprintf(w, "%s %s", name, host)
		})}
		go srv.Serve(ln)
		defer srv.Close()
		var others []netip.Addr // second chance: every other real server, the added one too
		for _, m := range run.real {
			if m != n {
				others = append(others, m.IP)
			}
		}
		var rs *realserver.RealServer
		err = lab.In(n.NS, func() error {
			var err error
			rs, err = realserver.Setup(realserver.Options{VIPs: []netip.Addr{netlab.VIP}, Mode: realserver.DR, Iface: "eth0", SecondChance: others})
			return err
		})
		if err != nil {
			return err
		}
		defer func() { _ = lab.In(n.NS, rs.Close) }()
		run.rs = append(run.rs, rs)
	}
	if run.dir, err = os.MkdirTemp("", "ballast-scaleout-"); err != nil {
		return err
	}
	defer os.RemoveAll(run.dir)
	bgpd, bfdd := SoFRRConf(lab)
	if run.frr, err = lab.StartFRR(lab.Router, bgpd, bfdd); err != nil {
		return err
	}

	type job struct {
		fault        string
		bfd          bool
		add          int
		flowSync, sc bool
	}
	jobs := []job{
		{"sigterm", true, 0, true, false},
		{"sigkill", true, 0, true, false},
		{"link", true, 0, true, false},
		{"link", false, 0, true, false},
	}
	for _, f := range []string{"sigterm", "sigkill", "link"} {
		jobs = append(jobs, job{f, true, 1, true, false}, job{f, true, 1, false, true}, job{f, true, 1, false, false})
	}
	jobs = append(jobs, job{"link", true, 2, true, false}, job{"link", true, 2, false, true}, job{"link", true, 2, false, false})
	if o.Quick {
		jobs = []job{{"link", true, 1, true, false}, {"link", true, 1, false, true}, {"link", true, 1, false, false}}
	}
	for _, j := range jobs {
		if err := ctx.Err(); err != nil {
			return err
		}
		var row ScaleOutRow
		for attempt := 1; attempt <= 3; attempt++ {
			row = run.one(ctx, j.fault, j.bfd, j.add, j.flowSync, j.sc)
			row.Attempts = attempt
			if row.Disturbed == "" || ctx.Err() != nil {
				break
			}
			o.logf("scale-out %s: disturbed (%s); again", soName(row), row.Disturbed)
		}
		o.logf("scale-out %s bfd=%v added=%d sync=%v second-chance=%v: router %.3f s; new %d/%d failed, %d slow over %.3f s; long-lived %d/%d broken, stall %.3f s; directors %v reals %v %s",
			row.Fault, row.BFD, row.Added, row.FlowSync, row.SecondChance, row.RouterS, row.Failed, row.Requests, row.Slow, row.AffectedS,
			row.Broken, row.LongLived, row.StallS, row.SpreadDirectors, row.SpreadReals, row.Error)
		r.ScaleOut = append(r.ScaleOut, row)
	}
	r.Notes = append(r.Notes, scaleOutVerdicts(r.ScaleOut)...)
	r.table = writeScaleOutTable
	return nil
}

// SoFRRConf is the lab's router: bgpd (AS 65000, one eBGP neighbour per director with BFD
// profile fast, maximum-paths 8) and bfdd (profile fast: 100 ms × 3). docs/scale-out.md
// shows the same configuration.
func SoFRRConf(l *netlab.Lab) (bgpd, bfdd string) {
	var b strings.Builder
	fmt.Fprintf(&b, "router bgp %d\n bgp router-id %s\n no bgp ebgp-requires-policy\n bgp bestpath as-path multipath-relax\n", soRouterASN, netlab.RouterIP)
	for _, d := range l.Directors {
		fmt.Fprintf(&b, " neighbor %s remote-as %d\n neighbor %s timers 3 9\n neighbor %s timers connect 1\n neighbor %s bfd profile fast\n", d.IP, soASN, d.IP, d.IP, d.IP)
	}
	b.WriteString(" address-family ipv4 unicast\n  maximum-paths 8\n exit-address-family\nexit\n")
	return b.String(), "bfd\n profile fast\n  receive-interval 100\n  transmit-interval 100\n  detect-multiplier 3\n exit\nexit\n"
}

// config writes director i's file.
func (run *soRun) config(i int, bfd, flowSync, sc bool) (string, error) {
	var reals []string
	for k := range soReals {
		reals = append(reals, fmt.Sprintf("{address: %s:80}", netlab.RealIP(k)))
	}
	sync := ""
	if flowSync {
		var peers []string
		for k, d := range run.lab.Directors {
			if k != i {
				peers = append(peers, d.IP.String())
			}
		}
		sync = fmt.Sprintf("  flow_sync: {peers: [%s]}\n", strings.Join(peers, ", "))
	}
	if sc {
		sync += "  second_chance: true\n"
	}
	conf := fmt.Sprintf(`listeners:
  - {name: web, address: %s:80, protocol: tcp, forwarding: dr, interface: eth0}
pools:
  - name: reals
    health_check: {type: tcp, interval: 200ms}
    backends: [%s]
admin: {address: %s}
bgp:
  asn: %d
  router_id: %s
  peers: [{address: %s, asn: %d, bfd: %v}]
  bfd_interval: 100ms
  bfd_multiplier: 3
  hold_time: 9s
  withdraw_wait: 2s
  cluster_seed: %d
%s`, netlab.VIP, strings.Join(reals, ", "), soAdmin, soASN, run.lab.Directors[i].IP, netlab.RouterIP, soRouterASN, bfd, soSeed, sync)
	path := filepath.Join(run.dir, fmt.Sprintf("director%d.yaml", i))
	return path, os.WriteFile(path, []byte(conf), 0o644)
}

// soProc is a ballast serve process in a director's namespace.
type soProc struct {
	cmd    *exec.Cmd
	exited chan struct{}
	mu     sync.Mutex
	out    strings.Builder
}

func (run *soRun) start(i int, path string) (*soProc, error) {
	p := &soProc{cmd: exec.Command(run.o.Ballast, "serve", "-c", path, "--grace", "2s"), exited: make(chan struct{})}
	w := &lockedWriter{mu: &p.mu, w: &p.out}
	p.cmd.Stdout, p.cmd.Stderr = w, w
	if err := run.lab.Start(run.lab.Directors[i].NS, p.cmd); err != nil {
		return nil, err
	}
	go func() { _ = p.cmd.Wait(); close(p.exited) }()
	return p, nil
}

func (p *soProc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.out.String()
	if len(s) > 1500 {
		s = "…" + s[len(s)-1500:]
	}
	return s
}

func (p *soProc) stop(sig syscall.Signal) {
	if p == nil {
		return
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// client is director i's admin API.
func (run *soRun) client(i int) *admin.Client {
	c := admin.NewClient(soAdmin, "")
	c.HTTP.Transport = &http.Transport{DialContext: run.lab.Dialer(run.lab.Directors[i].NS), DisableKeepAlives: true}
	c.HTTP.Timeout = time.Second
	return c
}

// vip reads director i's VIP view, or nil.
func (run *soRun) vip(ctx context.Context, i int) *admin.VIPView {
	r, err := run.client(i).Pools(ctx)
	if err != nil || len(r.Directors) == 0 || len(r.Directors[0].VIPs) == 0 {
		return nil
	}
	return &r.Directors[0].VIPs[0]
}

// waitNexthops waits until the router's route to the VIP has exactly want; it returns when.
func (run *soRun) waitNexthops(ctx context.Context, want []netip.Addr, within time.Duration) (time.Time, error) {
	deadline := time.Now().Add(within)
	var got []netip.Addr
	for time.Now().Before(deadline) && ctx.Err() == nil {
		got, _ = run.lab.Nexthops(run.lab.Router.NS, netlab.VIP)
		if slices.Equal(got, want) {
			return time.Now(), nil
		}
		time.Sleep(2 * time.Millisecond)
	}
	return time.Time{}, fmt.Errorf("router's next hops %v, want %v within %v", got, want, within)
}

// one runs one case: three directors up and announcing, load, the fault on director 0.
func (run *soRun) one(ctx context.Context, fault string, bfd bool, add int, flowSync, sc bool) (row ScaleOutRow) {
	row = ScaleOutRow{Fault: fault, BFD: bfd, AddReal: add > 0, Added: add, FlowSync: flowSync, SecondChance: sc, RouterS: -1}
	fail := func(err error) ScaleOutRow {
		row.Error = err.Error()
		return row
	}
	var procs [soDirectors]*soProc
	defer func() {
		for _, p := range procs {
			p.stop(syscall.SIGKILL)
		}
		_ = run.lab.SetLink(run.lab.Directors[0], true)
	}()
	var all []netip.Addr
	for i := range soDirectors {
		path, err := run.config(i, bfd, flowSync, sc)
		if err != nil {
			return fail(err)
		}
		if procs[i], err = run.start(i, path); err != nil {
			return fail(err)
		}
		all = append(all, run.lab.Directors[i].IP)
	}
	if _, err := run.waitNexthops(ctx, all, 30*time.Second); err != nil {
		return fail(fmt.Errorf("%w: %s", err, procs[0].output()))
	}
	if bfd { // every session established with BFD up, so that the fault meets BFD running
		// (BFD alone is not enough: on a loaded machine it can expire on every director at
		// once, and come back up before GoBGP has re-established the session it reset)
		deadline := time.Now().Add(10 * time.Second)
		for i := 0; i < soDirectors; {
			v, err := run.client(i).BGP(ctx)
			if err == nil && len(v.Sessions) == 1 && v.Sessions[0].State == "established" && v.Sessions[0].BFD == "up" {
				i++
				continue
			}
			if time.Now().After(deadline) {
				return fail(fmt.Errorf("director %d: BFD not up: %v %+v", i, err, v))
			}
			time.Sleep(20 * time.Millisecond)
		}
		if _, err := run.waitNexthops(ctx, all, 10*time.Second); err != nil {
			return fail(fmt.Errorf("after BFD came up: %w", err))
		}
	}
	before := make([]uint64, soDirectors)
	for i := range soDirectors {
		if v := run.vip(ctx, i); v != nil {
			before[i] = v.NewFlows
		}
	}
	warmFlaps := run.flaps(ctx)
	ld := &soLoad{run: run}
	lctx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	if err := ld.start(lctx); err != nil {
		// A session that went down since (BFD on a loaded machine) took the route with it.
		if now := run.flaps(ctx); !slices.Equal(now, warmFlaps) {
			row.Disturbed = fmt.Sprintf("a BGP session went down as the load started (flaps %v, %v before): %v", now, warmFlaps, err)
			return row
		}
		return fail(err)
	}
	time.Sleep(time.Second) // warm: every long-lived flow answered; the directors synced
	for i := range soDirectors {
		if v := run.vip(ctx, i); v != nil {
			row.SpreadDirectors = append(row.SpreadDirectors, int(v.NewFlows-before[i]))
		}
	}
	// A session that went down while the load warmed (BFD on a loaded machine) took its
	// director out of the router's spread and the flows' placement: the run measures nothing.
	for i, n := range run.flaps(ctx) {
		if n != warmFlaps[i] {
			row.Disturbed = fmt.Sprintf("director %d's BGP session went down while the load warmed (%d flaps, BFD %d failures before)", i, n-warmFlaps[i], warmFlaps[i])
			return row
		}
	}
	if got, err := run.lab.Nexthops(run.lab.Router.NS, netlab.VIP); err != nil || !slices.Equal(got, all) {
		row.Disturbed = fmt.Sprintf("the router's next hops after the warm-up were %v (%v), not every director", got, err)
		return row
	}
	row.LongLived, row.SpreadReals = ld.alive()

	// The ring changes on every director (once, or twice in a row), then the fault: Katran's
	// issue 155.
	for k := soReals; k < soReals+add; k++ {
		addr := fmt.Sprintf("%s:80", netlab.RealIP(k))
		for i := range soDirectors {
			if _, err := run.client(i).Add(ctx, "reals", admin.AddRequest{Address: addr}); err != nil {
				return fail(fmt.Errorf("director %d: adding a real server: %w", i, err))
			}
		}
		deadline := time.Now().Add(5 * time.Second)
		for i := 0; i < soDirectors; {
			v := run.vip(ctx, i)
			if v != nil && slices.ContainsFunc(v.Reals, func(r admin.RealView) bool { return r.Address == addr && r.Slots > 0 }) {
				i++
				continue
			}
			if time.Now().After(deadline) {
				return fail(fmt.Errorf("director %d: the added real server %s never entered the table", i, addr))
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	for i := range soDirectors {
		if v, err := run.client(i).BGP(ctx); err == nil && v.FlowSync != nil {
			row.SyncFlowsSent += v.FlowSync.FlowsSent
			row.SyncDatagrams += v.FlowSync.DatagramsSent
		}
	}
	passed := run.secondChancePassed()
	flaps := run.flaps(ctx)

	t0 := time.Now()
	var err error
	switch fault {
	case "sigterm":
		err = procs[0].cmd.Process.Signal(syscall.SIGTERM)
	case "sigkill":
		procs[0].stop(syscall.SIGKILL)
	case "link":
		err = run.lab.SetLink(run.lab.Directors[0], false)
	}
	if err != nil {
		return fail(err)
	}
	phase := 3 * time.Second
	if !bfd && fault == "link" {
		phase = 20 * time.Second // the 9 s hold time, and TCP's backoff after it (12.6 s)
	}
	if at, err := run.waitNexthops(ctx, all[1:], phase); err == nil {
		row.RouterS = at.Sub(t0).Seconds()
	}
	if d := time.Until(t0.Add(phase)); d > 0 {
		time.Sleep(d)
	}
	end := time.Now()
	if !bfd && fault == "link" { // let the requests in flight at the end finish or fail
		time.Sleep(soPatience - phase + time.Second)
	}
	stopLoad()
	ld.wg.Wait()
	row.Requests, row.Failed, row.Slow, row.AffectedS = ld.newBetween(t0, end)
	row.Failures = ld.failures(t0, end)
	row.Broken, row.StallS = ld.longBetween(t0, end)
	row.SecondChancePassed = run.secondChancePassed() - passed
	after := run.flaps(ctx)
	for i := 1; i < soDirectors; i++ {
		if after[i] != flaps[i] {
			row.Disturbed = fmt.Sprintf("director %d's BGP session went down during the phase (%d flaps, BFD %d failures before)", i, after[i]-flaps[i], flaps[i])
		}
	}
	return row
}

// flaps is each director's count of its session leaving established, plus BFD failures.
func (run *soRun) flaps(ctx context.Context) []uint64 {
	out := make([]uint64, soDirectors)
	for i := range soDirectors {
		if v, err := run.client(i).BGP(ctx); err == nil && len(v.Sessions) == 1 {
			out[i] = uint64(v.Sessions[0].Flops) + v.Sessions[0].BFDFailures
		}
	}
	return out
}

// secondChancePassed sums the real servers' second-chance programs' passed segments.
func (run *soRun) secondChancePassed() uint64 {
	var n uint64
	for _, rs := range run.rs {
		if st, err := rs.SecondChance(); err == nil {
			n += st.Passed
		}
	}
	return n
}

// soLoad is the client: soLongLived keep-alive flows and a new connection every soNewEvery.
type soLoad struct {
	run *soRun
	wg  sync.WaitGroup

	mu   sync.Mutex
	news []soReq
	long []*soFlow
}

type soReq struct {
	at   time.Time
	took time.Duration
	err  error
}

type soFlow struct {
	real     string
	brokenAt time.Time // zero: alive
	why      string
	reqs     []soReq
}

func (ld *soLoad) dial(ctx context.Context) (net.Conn, error) {
	return ld.run.lab.Dialer(ld.run.lab.Client.NS)(ctx, "tcp4", netip.AddrPortFrom(netlab.VIP, 80).String())
}

func (ld *soLoad) start(ctx context.Context) error {
	for range soLongLived {
		c, err := ld.dial(ctx)
		if err != nil {
			return err
		}
		br := bufio.NewReader(c)
		name, _, err := answer(c, br, soTimeout)
		if err != nil {
			c.Close()
			return fmt.Errorf("long-lived flow: %w", err)
		}
		f := &soFlow{real: name}
		ld.long = append(ld.long, f)
		ld.wg.Go(func() {
			defer c.Close()
			t := time.NewTicker(soEvery)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
				at := time.Now()
				got, _, err := answer(c, br, soPatience)
				if ctx.Err() != nil {
					return
				}
				if err == nil && got != f.real {
					err = fmt.Errorf("moved from %s to %s", f.real, got)
				}
				ld.mu.Lock()
				f.reqs = append(f.reqs, soReq{at: at, took: time.Since(at), err: err})
				if err != nil {
					f.brokenAt, f.why = at, err.Error()
				}
				ld.mu.Unlock()
				if err != nil {
					return
				}
			}
		})
	}
	ld.wg.Go(func() {
		t := time.NewTicker(soNewEvery)
		defer t.Stop()
		var inflight sync.WaitGroup
		defer inflight.Wait()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			inflight.Go(func() {
				at := time.Now()
				cctx, cancel := context.WithTimeout(context.Background(), soTimeout)
				defer cancel()
				c, err := ld.dial(cctx)
				if err == nil {
					_, _, err = answer(c, bufio.NewReader(c), time.Until(at.Add(soTimeout)))
					c.Close()
				}
				ld.mu.Lock()
				ld.news = append(ld.news, soReq{at: at, took: time.Since(at), err: err})
				ld.mu.Unlock()
			})
		}
	})
	return nil
}

// alive counts the long-lived flows not broken, and how many are on each real server.
func (ld *soLoad) alive() (int, []int) {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	n := 0
	per := make([]int, soReals)
	for _, f := range ld.long {
		if f.brokenAt.IsZero() {
			n++
			var k int
			if _, err := fmt.Sscanf(f.real, "real%d", &k); err == nil && k < soReals {
				per[k]++
			}
		}
	}
	return n, per
}

// newBetween: the new connections opened in [from, to): total, failed, slow, and the span of
// the failed and slow ones.
func (ld *soLoad) newBetween(from, to time.Time) (n, failed, slow int, span float64) {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	var first, last time.Time
	for _, r := range ld.news {
		if r.at.Before(from) || !r.at.Before(to) {
			continue
		}
		n++
		bad := false
		if r.err != nil {
			failed, bad = failed+1, true
		} else if r.took > soSlow {
			slow, bad = slow+1, true
		}
		if bad {
			if first.IsZero() || r.at.Before(first) {
				first = r.at
			}
			if r.at.After(last) {
				last = r.at
			}
		}
	}
	if !first.IsZero() {
		span = last.Sub(first).Seconds() + soNewEvery.Seconds()
	}
	return n, failed, slow, span
}

// longBetween: long-lived flows broken in [from, to) and the longest request among them.
func (ld *soLoad) longBetween(from, to time.Time) (broken int, stall float64) {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	for _, f := range ld.long {
		if !f.brokenAt.IsZero() && !f.brokenAt.Before(from) && f.brokenAt.Before(to) {
			broken++
		}
		for _, r := range f.reqs {
			if !r.at.Before(from) && r.at.Before(to) {
				stall = max(stall, r.took.Seconds())
			}
		}
	}
	return broken, stall
}

// failures describes the first few failed new connections and broken flows in [from, to).
func (ld *soLoad) failures(from, to time.Time) []string {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	var out []string
	for _, r := range ld.news {
		if r.err != nil && !r.at.Before(from) && r.at.Before(to) && len(out) < 5 {
			out = append(out, fmt.Sprintf("new connection at +%.3f s: %v", r.at.Sub(from).Seconds(), r.err))
		}
	}
	for _, f := range ld.long {
		if !f.brokenAt.IsZero() && !f.brokenAt.Before(from) && f.brokenAt.Before(to) && len(out) < 10 {
			out = append(out, fmt.Sprintf("long-lived flow at +%.3f s: %s", f.brokenAt.Sub(from).Seconds(), f.why))
		}
	}
	return out
}

func scaleOutVerdicts(rows []ScaleOutRow) []string {
	var out []string
	for _, r := range rows {
		name := soName(r)
		switch {
		case r.Error != "":
			out = append(out, fmt.Sprintf("%s: ERROR %s", name, r.Error))
		case r.Disturbed != "":
			out = append(out, fmt.Sprintf("%s: not measured: %s, in each of %d runs", name, r.Disturbed, r.Attempts))
		case r.AddReal && !r.FlowSync && !r.SecondChance:
			out = append(out, fmt.Sprintf("%s: the control (neither flow sync nor second chance): %d of %d long-lived flows broken", name, r.Broken, r.LongLived))
		case !r.BFD:
			out = append(out, fmt.Sprintf("%s: no goal (detection is the hold time): router %.3f s, %d of %d new connections failed, %d of %d long-lived flows broken, longest stall %.3f s", name, r.RouterS, r.Failed, r.Requests, r.Broken, r.LongLived, r.StallS))
		case (r.FlowSync || r.SecondChance) && r.Broken > 0:
			out = append(out, fmt.Sprintf("%s: goal missed: %d of %d long-lived flows broken", name, r.Broken, r.LongLived))
		case r.Fault == "sigterm" && (r.Failed > 0 || r.Broken > 0):
			out = append(out, fmt.Sprintf("%s: goal missed: a drain broke %d flows and failed %d new connections", name, r.Broken, r.Failed))
		case r.BFD && r.Fault != "sigterm" && r.AffectedS >= 0.5:
			out = append(out, fmt.Sprintf("%s: goal missed: %.3f s of new connections affected (want < 0.5 s with BFD)", name, r.AffectedS))
		default:
			out = append(out, fmt.Sprintf("%s: goal met (router %.3f s, %d broken, %.3f s of new connections affected)", name, r.RouterS, r.Broken, r.AffectedS))
		}
	}
	return out
}

func soName(r ScaleOutRow) string {
	parts := []string{r.Fault}
	if r.BFD {
		parts = append(parts, "BFD")
	} else {
		parts = append(parts, "no BFD")
	}
	switch r.Added {
	case 1:
		parts = append(parts, "+ real server added")
	case 2:
		parts = append(parts, "+ two real servers added in a row")
	}
	switch {
	case r.FlowSync:
		parts = append(parts, "flow sync")
	case r.SecondChance:
		parts = append(parts, "second chance")
	default:
		parts = append(parts, "neither")
	}
	return strings.Join(parts, ", ")
}

func writeScaleOutTable(r *Report, w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 1, ' ', 0)
	fmt.Fprintln(tw, "| fault | BFD | reals added | flows kept by | router stops using it (s) | new conns | failed | slow (> 0.5 s) | affected (s) | long-lived | broken | longest stall (s) | flows per director | long-lived per real | sync flows sent | second-chance passes |")
	fmt.Fprintln(tw, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	yn := func(b bool) string {
		if b {
			return "yes"
		}
		return "no"
	}
	rows := slices.Clone(r.ScaleOut)
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].Added < rows[j].Added })
	for _, x := range rows {
		router := fmt.Sprintf("%.3f", x.RouterS)
		if x.RouterS < 0 {
			router = "never"
		}
		kept := "none"
		if x.FlowSync {
			kept = "flow sync"
		} else if x.SecondChance {
			kept = "second chance"
		}
		if x.Error != "" {
			fmt.Fprintf(tw, "| %s | %s | %d | %s | error: %s |\n", x.Fault, yn(x.BFD), x.Added, kept, x.Error)
			continue
		}
		fmt.Fprintf(tw, "| %s | %s | %d | %s | %s | %d | %d | %d | %.3f | %d | %d | %.3f | %v | %v | %d | %d |\n", x.Fault, yn(x.BFD), x.Added, kept,
			router, x.Requests, x.Failed, x.Slow, x.AffectedS, x.LongLived, x.Broken, x.StallS, x.SpreadDirectors, x.SpreadReals, x.SyncFlowsSent, x.SecondChancePassed)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, n := range r.Notes {
		fmt.Fprintln(w, "- "+n)
	}
	return nil
}
