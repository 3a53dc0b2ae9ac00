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
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"

	"ballast/admin"
	"ballast/internal/netlab"
	"ballast/realserver"
)

// The failover lab's addresses: on the directors' segment, so that ARP (answered by the
// master only) decides which director the client reaches.
var (
	foVIP     = netip.MustParseAddr("10.77.0.100")
	foGateway = netip.MustParseAddr("10.77.0.254") // NAT: the real servers' gateway, moving too
)

const (
	foAdmin     = "127.0.0.1:9191" // each director's admin API, inside its namespace
	foLongLived = 50               // long-lived flows, each sending a request every 10 ms
	foEvery     = 10 * time.Millisecond
	foNewEvery  = 5 * time.Millisecond // one new connection every 5 ms: 200 per second
	foTimeout   = 2 * time.Second      // a new connection's bound (one SYN retransmission fits)
	foBucket    = 50 * time.Millisecond
)

// FailoverRow is one run of `ballast lab failover`: one plane, one fault, one advert interval.
type FailoverRow struct {
	Plane          string `json:"plane"` // l7, l4, dr, tun, nat
	Fault          string `json:"fault"` // sigterm, sigkill, link (the machine lost), partition (VRRP between the directors lost)
	AdvertInterval string `json:"advert_interval"`
	// NewMasterS is the time from the fault to the backup's reporting master; FailoverS to
	// the first new connection (opened after the fault) answered through the new master.
	// -1: never within the phase.
	NewMasterS float64 `json:"new_master_s"`
	FailoverS  float64 `json:"failover_s"`
	Requests   int     `json:"requests"` // new connections opened from the fault to the restore
	Failed     int     `json:"failed"`
	LongLived  int     `json:"long_lived"`
	Broken     int     `json:"broken"` // long-lived flows reset, closed or moved to another real server
	// StallS is the longest a long-lived flow's request took in the phase: a flow whose
	// packets went to the dead master waits for TCP's retransmissions (0.2, 0.6, 1.4, 3.0, 6.2 s
	// after the first try), which is a stall, not a break.
	StallS float64 `json:"stall_s"`
	// The restore: the old master's process restarted, its link or the partition healed.
	// RestoreMasterS is the time until it is master again (preemption; after a partition:
	// until only one master is left), RestoreGapS the longest time without a new connection
	// answered in that phase.
	RestoreMasterS  float64 `json:"restore_master_s"`
	RestoreGapS     float64 `json:"restore_gap_s"`
	RestoreRequests int     `json:"restore_requests"`
	RestoreFailed   int     `json:"restore_failed"`
	RestoreBroken   int     `json:"restore_broken"`
	RestoreStallS   float64 `json:"restore_stall_s"`
	// Timeline is the new connections answered per bucket of 50 ms, from 0.5 s before the
	// fault to the end of the fault phase (the chart).
	Timeline []int  `json:"timeline_per_50ms"`
	Note     string `json:"note,omitempty"`
	Error    string `json:"error,omitempty"`
}

// foPlane is one plane's configuration and real-server set-up.
type foPlane struct {
	name     string
	listener string // the listener line of the file
	// setup prepares the real servers (and directors) for the plane and returns its undo.
	setup func(run *foRun) (func(), error)
}

type foRun struct {
	o   Options
	lab *netlab.Lab
	dir string
}

// runFailover: seed 003's master and backup directors, measured (docs/lab.md, failover).
func runFailover(ctx context.Context, o Options, r *Report) error {
	if os.Geteuid() != 0 {
		return errors.New("failover builds network namespaces and attaches XDP programs: run it as root")
	}
	r.Metric = Makespan
	r.Ideal = "failover ≤ 0.5 s at 100 ms adverts after a machine loss (≤ 3.7 s at 1 s), ≤ 0.2 s after SIGTERM; no long-lived DR/TUN/NAT flow broken; one master within one advert after a partition heals"
	lab, err := netlab.New(netlab.Options{Reals: 2, Directors: 2, MTU: 1600})
	if err != nil {
		return err
	}
	defer lab.Close()
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
		name := fmt.Sprintf("real%d", i)
		srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			host, _, _ := net.SplitHostPort(r.RemoteAddr)
			fmt.Fprintf(w, "%s %s", name, host)
		})}
		go srv.Serve(ln)
		defer srv.Close()
	}
	dir, err := os.MkdirTemp("", "ballast-failover-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	run := &foRun{o: o, lab: lab, dir: dir}

	planes := run.planes()
	faults := []string{"sigterm", "sigkill", "link"}
	intervals := []time.Duration{100 * time.Millisecond, time.Second}
	if o.Quick {
		planes = slices.DeleteFunc(planes, func(p foPlane) bool { return p.name != "dr" && p.name != "nat" && p.name != "l7" })
		faults, intervals = []string{"sigkill"}, intervals[:1]
	}
	type job struct {
		plane foPlane
		fault string
		iv    time.Duration
	}
	var jobs []job
	for _, iv := range intervals {
		for _, f := range faults {
			for _, p := range planes {
				jobs = append(jobs, job{p, f, iv})
			}
		}
		if i := slices.IndexFunc(planes, func(p foPlane) bool { return p.name == "dr" }); !o.Quick && i >= 0 && len(faults) > 1 {
			jobs = append(jobs, job{planes[i], "partition", iv})
		}
	}
	for _, j := range jobs {
		if err := ctx.Err(); err != nil {
			return err
		}
		row := run.one(ctx, j.plane, j.fault, j.iv)
		o.logf("failover %s %s %v: master %.3f s, failover %.3f s, %d/%d failed, %d/%d broken; restore: master %.3f s, gap %.3f s, %d failed, %d broken %s",
			row.Plane, row.Fault, j.iv, row.NewMasterS, row.FailoverS, row.Failed, row.Requests, row.Broken, row.LongLived,
			row.RestoreMasterS, row.RestoreGapS, row.RestoreFailed, row.RestoreBroken, row.Error)
		o.logf("  stalls: %.3f s, restore %.3f s", row.StallS, row.RestoreStallS)
		r.Failover = append(r.Failover, row)
	}
	r.Notes = append(r.Notes, failoverVerdicts(r.Failover)...)
	r.table = writeFailoverTable
	r.charts = failoverCharts
	return nil
}

// planes are the five planes, each with its listener and real-server set-up.
func (run *foRun) planes() []foPlane {
	vip := foVIP.String() + ":80"
	none := func(*foRun) (func(), error) { return func() {}, nil }
	realservers := func(mode realserver.Mode) func(*foRun) (func(), error) {
		return func(run *foRun) (func(), error) {
			var undo []func()
			for _, n := range run.lab.Reals {
				err := run.lab.In(n.NS, func() error {
					s, err := realserver.Setup(realserver.Options{VIPs: []netip.Addr{foVIP}, Mode: mode, Iface: "eth0"})
					if err == nil {
						undo = append(undo, func() { _ = run.lab.In(n.NS, s.Close) })
					}
					return err
				})
				if err != nil {
					for _, u := range undo {
						u()
					}
					return nil, err
				}
			}
			return func() {
				for _, u := range undo {
					u()
				}
			}, nil
		}
	}
	nat := func(run *foRun) (func(), error) {
		l := run.lab
		undo := func() {
			for _, n := range l.Reals {
				_ = l.RouteDel(n.NS, netlab.ClientIP, foGateway)
			}
			for _, d := range l.Directors {
				_ = l.Sysctl(d.NS, "net/ipv4/ip_forward", "0")
			}
		}
		for _, d := range l.Directors {
			for k, v := range map[string]string{"net/ipv4/ip_forward": "1", "net/ipv4/conf/all/send_redirects": "0", "net/ipv4/conf/eth0/send_redirects": "0"} {
				if err := l.Sysctl(d.NS, k, v); err != nil {
					undo()
					return nil, err
				}
			}
		}
		for _, n := range l.Reals {
			if err := l.RouteVia(n.NS, netlab.ClientIP, foGateway); err != nil {
				undo()
				return nil, err
			}
		}
		return undo, nil
	}
	director := func(mode string) string {
		return fmt.Sprintf("{name: web, address: %s, protocol: tcp, forwarding: %s, interface: eth0}", vip, mode)
	}
	return []foPlane{
		{"l7", fmt.Sprintf("{name: web, address: %s}", vip), none},
		{"l4", fmt.Sprintf("{name: web, address: %s, protocol: tcp}", vip), none},
		{"dr", director("dr"), realservers(realserver.DR)},
		{"tun", director("tun"), realservers(realserver.TUN)},
		{"nat", director("nat"), nat},
	}
}

// config writes director i's file for plane p at interval iv.
func (run *foRun) config(p foPlane, i int, iv time.Duration) (string, error) {
	prio := []int{150, 100}[i]
	extra := ""
	if p.name == "nat" {
		extra = fmt.Sprintf("  addresses: [%s/32]\n", foGateway)
	}
	balancer := "wlc"
	if p.name == "l7" || p.name == "l4" {
		balancer = "leastconn"
	}
	conf := fmt.Sprintf(`listeners:
  - %s
pools:
  - name: reals
    balancer: %s
    health_check: {type: tcp, interval: 200ms}
    backends: [{address: %s:80}, {address: %s:80}]
admin: {address: %s}
ha:
  interface: eth0
  virtual_router_id: 51
  priority: %d
  advert_interval: %s
%s`, p.listener, balancer, netlab.RealIP(0), netlab.RealIP(1), foAdmin, prio, iv, extra)
	path := filepath.Join(run.dir, fmt.Sprintf("%s-%d.yaml", p.name, i))
	return path, os.WriteFile(path, []byte(conf), 0o644)
}

// foProc is a ballast serve process in a director's namespace.
type foProc struct {
	cmd    *exec.Cmd
	exited chan struct{}
	out    *strings.Builder
	mu     *sync.Mutex
}

func (run *foRun) start(i int, path string) (*foProc, error) {
	cmd := exec.Command(run.o.Ballast, "serve", "-c", path, "--grace", "2s")
	p := &foProc{cmd: cmd, exited: make(chan struct{}), out: &strings.Builder{}, mu: &sync.Mutex{}}
	w := &lockedWriter{mu: p.mu, w: p.out}
	cmd.Stdout, cmd.Stderr = w, w
	if err := run.lab.Start(run.lab.Directors[i].NS, cmd); err != nil {
		return nil, err
	}
	go func() { _ = cmd.Wait(); close(p.exited) }()
	return p, nil
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

func (p *foProc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.out.String()
	if len(s) > 2000 {
		s = "…" + s[len(s)-2000:]
	}
	return s
}

// stop ends the process with sig and waits (SIGKILL after 10 s).
func (p *foProc) stop(sig syscall.Signal) {
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

// ha reads director i's virtual router, or nil.
func (run *foRun) ha(ctx context.Context, i int) *admin.HAView {
	c := admin.NewClient(foAdmin, "")
	c.HTTP.Transport = &http.Transport{DialContext: run.lab.Dialer(run.lab.Directors[i].NS), DisableKeepAlives: true}
	c.HTTP.Timeout = 500 * time.Millisecond
	v, err := c.HA(ctx)
	if err != nil {
		return nil
	}
	return v
}

// waitState waits until director i reports state, and returns when it first did.
func (run *foRun) waitState(ctx context.Context, i int, state string, within time.Duration) (time.Time, error) {
	deadline := time.Now().Add(within)
	for {
		if v := run.ha(ctx, i); v != nil && v.State == state {
			return time.Now(), nil
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("director %d not %s within %v", i, state, within)
		}
		if err := ctx.Err(); err != nil {
			return time.Time{}, err
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// one runs one plane under one fault at one interval.
func (run *foRun) one(ctx context.Context, p foPlane, fault string, iv time.Duration) (row FailoverRow) {
	row = FailoverRow{Plane: p.name, Fault: fault, AdvertInterval: iv.String(), NewMasterS: -1, FailoverS: -1, RestoreMasterS: -1}
	fail := func(err error) FailoverRow {
		row.Error = err.Error()
		return row
	}
	undo, err := p.setup(run)
	if err != nil {
		return fail(err)
	}
	defer undo()
	_ = run.flushVIP()
	var procs [2]*foProc
	defer func() {
		for _, pr := range procs {
			pr.stop(syscall.SIGKILL)
		}
		_ = run.lab.SetLink(run.lab.Directors[0], true)
		_ = run.lab.DropProto(run.lab.Directors[0], 112, false)
	}()
	paths := [2]string{}
	for i := range 2 {
		if paths[i], err = run.config(p, i, iv); err != nil {
			return fail(err)
		}
		if procs[i], err = run.start(i, paths[i]); err != nil {
			return fail(err)
		}
	}
	mdi := 3*iv + iv // a bound on the master-down interval, for waits
	if _, err := run.waitState(ctx, 0, "master", mdi+5*time.Second); err != nil {
		return fail(fmt.Errorf("%w: %s", err, procs[0].output()))
	}
	if _, err := run.waitState(ctx, 1, "backup", 5*time.Second); err != nil {
		return fail(fmt.Errorf("%w: %s", err, procs[1].output()))
	}
	macs, err := run.macs()
	if err != nil {
		return fail(err)
	}
	ld := newFOLoad(run, macs)
	lctx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	if err := ld.start(lctx, p.name); err != nil {
		return fail(err)
	}
	time.Sleep(time.Second) // warm: every long-lived flow answered, the backup has their flows
	row.LongLived = ld.alive()

	// The fault.
	t0 := time.Now()
	switch fault {
	case "sigterm":
		_ = procs[0].cmd.Process.Signal(syscall.SIGTERM)
	case "sigkill":
		procs[0].stop(syscall.SIGKILL)
	case "link":
		err = run.lab.SetLink(run.lab.Directors[0], false)
	case "partition":
		// The directors stop hearing each other (VRRP dropped at the old master's switch
		// port) while every host still reaches every other: both become master.
		err = run.lab.DropProto(run.lab.Directors[0], 112, true)
	}
	if err != nil {
		return fail(err)
	}
	if at, err := run.waitState(ctx, 1, "master", mdi+2*time.Second); err == nil {
		row.NewMasterS = at.Sub(t0).Seconds()
	}
	// The fault phase: the new master serves for a while, and the long-lived flows that sent
	// to the dead master get through on TCP's next retransmission (6.2 s after the first try
	// at worst, with 1 s adverts).
	time.Sleep(max(time.Second, mdi, 2*mdi+2*time.Second))
	if fault == "sigterm" {
		<-procs[0].exited
	}
	t1 := time.Now()
	phase := ld.since(t0, t1)
	row.Requests, row.Failed, row.Broken = phase.requests, phase.failed, ld.brokenBetween(t0, t1)
	row.StallS = ld.stallBetween(t0, t1)
	row.FailoverS = phase.firstVia(t0, "B")
	row.Timeline = ld.timeline(t0.Add(-500*time.Millisecond), t1)

	// The restore: the old master comes back and, with the higher priority, preempts (after
	// a partition it was master all along: one master must remain).
	ld.refill(lctx) // broken long-lived flows are replaced, so the restore has 50 again
	t2 := time.Now()
	switch fault {
	case "sigterm", "sigkill":
		procs[0], err = run.start(0, paths[0])
	case "link":
		err = run.lab.SetLink(run.lab.Directors[0], true)
	case "partition":
		err = run.lab.DropProto(run.lab.Directors[0], 112, false)
	}
	if err != nil {
		return fail(err)
	}
	if fault == "partition" {
		// Both directors are masters when it heals.
		masters, states := run.masters(ctx)
		row.Note = "at the heal: A " + states[0] + ", B " + states[1]
		deadline := time.Now().Add(mdi + 5*time.Second)
		for masters > 1 && time.Now().Before(deadline) {
			time.Sleep(2 * time.Millisecond)
			masters, _ = run.masters(ctx)
		}
		if masters <= 1 {
			row.RestoreMasterS = time.Since(t2).Seconds()
		}
	} else if at, err := run.waitState(ctx, 0, "master", mdi+5*time.Second); err == nil {
		row.RestoreMasterS = at.Sub(t2).Seconds()
	}
	time.Sleep(max(time.Second, mdi))
	t3 := time.Now()
	stopLoad()
	ld.wait()
	rp := ld.since(t2, t3)
	row.RestoreRequests, row.RestoreFailed, row.RestoreBroken = rp.requests, rp.failed, ld.brokenBetween(t2, t3)
	row.RestoreStallS = ld.stallBetween(t2, t3)
	row.RestoreGapS = rp.longestGap(t2, t3)
	return row
}

// masters counts the directors that report master, and gives each one's state.
func (run *foRun) masters(ctx context.Context) (int, [2]string) {
	var n int
	var states [2]string
	for i := range 2 {
		states[i] = "unknown"
		if v := run.ha(ctx, i); v != nil {
			states[i] = v.State
			if v.State == "master" {
				n++
			}
		}
	}
	return n, states
}

// flushVIP forgets the client's neighbour entries of the VIP (each run starts afresh).
func (run *foRun) flushVIP() error {
	return run.lab.In(run.lab.Client.NS, func() error {
		eth0, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		return netlink.NeighDel(&netlink.Neigh{LinkIndex: eth0.Attrs().Index, IP: foVIP.AsSlice(), Family: netlink.FAMILY_V4})
	})
}

// macs maps each director's MAC to its name, A (the first master) or B.
func (run *foRun) macs() (map[string]string, error) {
	out := map[string]string{}
	for i, n := range run.lab.Directors {
		err := run.lab.In(n.NS, func() error {
			eth0, err := netlink.LinkByName("eth0")
			if err == nil {
				out[eth0.Attrs().HardwareAddr.String()] = []string{"A", "B"}[i]
			}
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// foLoad is the client's load: a new connection every foNewEvery and foLongLived
// keep-alive flows each sending a request every foEvery.
type foLoad struct {
	run  *foRun
	macs map[string]string // director MAC -> A or B
	ips  map[string]string // director address -> A or B (what an L7/L4 backend sees)
	via  atomic.Value      // the director the client's ARP entry for the VIP names now

	mu     sync.Mutex
	reqs   []foReq
	broken []time.Time // when each broken long-lived flow broke
	stalls []foReq     // long-lived requests that took longer than 100 ms
	live   int
	wg     sync.WaitGroup
	plane  string
}

type foReq struct {
	start, end time.Time
	ok         bool
	via        string
}

func newFOLoad(run *foRun, macs map[string]string) *foLoad {
	ld := &foLoad{run: run, macs: macs, ips: map[string]string{}}
	for i, n := range run.lab.Directors {
		ld.ips[n.IP.String()] = []string{"A", "B"}[i]
	}
	ld.via.Store("")
	return ld
}

func (ld *foLoad) start(ctx context.Context, plane string) error {
	ld.plane = plane
	ld.wg.Add(2)
	go ld.watchARP(ctx)
	go ld.newConns(ctx)
	for range foLongLived {
		if err := ld.longLived(ctx); err != nil {
			return err
		}
	}
	return nil
}

// watchARP follows the client's neighbour entry of the VIP.
func (ld *foLoad) watchARP(ctx context.Context) {
	defer ld.wg.Done()
	_ = ld.run.lab.In(ld.run.lab.Client.NS, func() error {
		eth0, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		for ctx.Err() == nil {
			ns, _ := netlink.NeighList(eth0.Attrs().Index, netlink.FAMILY_V4)
			for _, n := range ns {
				if n.IP.Equal(foVIP.AsSlice()) && n.HardwareAddr != nil {
					ld.via.Store(ld.macs[n.HardwareAddr.String()])
				}
			}
			time.Sleep(2 * time.Millisecond)
		}
		return nil
	})
}

func (ld *foLoad) dial(ctx context.Context) (net.Conn, error) {
	return ld.run.lab.Dialer(ld.run.lab.Client.NS)(ctx, "tcp4", netip.AddrPortFrom(foVIP, 80).String())
}

// answer sends one request on c and returns the body's two words: the real server and the
// client it saw.
func answer(c net.Conn, r *bufio.Reader, timeout time.Duration) (string, string, error) {
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: vip\r\n\r\n"); err != nil {
		return "", "", err
	}
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		return "", "", err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("status %d", resp.StatusCode)
	}
	name, seen, _ := strings.Cut(string(b), " ")
	return name, seen, err
}

// newConns opens a connection for one request every foNewEvery.
func (ld *foLoad) newConns(ctx context.Context) {
	defer ld.wg.Done()
	t := time.NewTicker(foNewEvery)
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
			q := foReq{start: time.Now()}
			cctx, cancel := context.WithTimeout(context.Background(), foTimeout)
			defer cancel()
			c, err := ld.dial(cctx)
			if err == nil {
				_, seen, aerr := answer(c, bufio.NewReader(c), time.Until(q.start.Add(foTimeout)))
				c.Close()
				err = aerr
				q.via = ld.via.Load().(string)
				if v, ok := ld.ips[seen]; ok { // L7, L4: the backend saw the director
					q.via = v
				}
			}
			q.end, q.ok = time.Now(), err == nil
			ld.mu.Lock()
			ld.reqs = append(ld.reqs, q)
			ld.mu.Unlock()
		})
	}
}

// longLived opens one keep-alive flow; it sends a request every foEvery until it breaks (an
// error, or another real server answering) or the load ends.
func (ld *foLoad) longLived(ctx context.Context) error {
	dctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	c, err := ld.dial(dctx)
	if err != nil {
		return fmt.Errorf("long-lived flow: %w", err)
	}
	r := bufio.NewReader(c)
	first, _, err := answer(c, r, time.Second)
	if err != nil {
		c.Close()
		return fmt.Errorf("long-lived flow: %w", err)
	}
	ld.mu.Lock()
	ld.live++
	ld.mu.Unlock()
	ld.wg.Go(func() {
		defer c.Close()
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(foEvery):
			}
			// A flow may wait out a failover: TCP retransmits, and a long gap is not a break
			// (the bound is past TCP's fifth retransmission, 12.6 s after the first try).
			start := time.Now()
			name, _, err := answer(c, r, 15*time.Second)
			if ctx.Err() != nil {
				return
			}
			if d := time.Since(start); d > 100*time.Millisecond {
				ld.mu.Lock()
				ld.stalls = append(ld.stalls, foReq{start: start, end: time.Now()})
				ld.mu.Unlock()
			}
			// L7 balances each request; a flow through the other planes keeps its real server.
			if err != nil || (name != first && ld.plane != "l7") {
				ld.mu.Lock()
				ld.live--
				ld.broken = append(ld.broken, time.Now())
				ld.mu.Unlock()
				return
			}
		}
	})
	return nil
}

func (ld *foLoad) alive() int {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	return ld.live
}

// refill opens new long-lived flows for the broken ones.
func (ld *foLoad) refill(ctx context.Context) {
	for range foLongLived - ld.alive() {
		if ld.longLived(ctx) != nil {
			return
		}
	}
}

func (ld *foLoad) wait() { ld.wg.Wait() }

func (ld *foLoad) brokenBetween(from, to time.Time) int {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	n := 0
	for _, t := range ld.broken {
		if !t.Before(from) && t.Before(to) {
			n++
		}
	}
	return n
}

// stallBetween is the longest long-lived request that ended in [from, to), in seconds.
func (ld *foLoad) stallBetween(from, to time.Time) float64 {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	var worst time.Duration
	for _, q := range ld.stalls {
		if !q.end.Before(from) && q.end.Before(to) {
			worst = max(worst, q.end.Sub(q.start))
		}
	}
	return worst.Seconds()
}

// foPhase is the new connections opened in a phase.
type foPhase struct {
	requests, failed int
	reqs             []foReq
}

func (ld *foLoad) since(from, to time.Time) foPhase {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	var p foPhase
	for _, q := range ld.reqs {
		if q.start.Before(from) || !q.start.Before(to) {
			continue
		}
		p.requests++
		if !q.ok {
			p.failed++
		}
		p.reqs = append(p.reqs, q)
	}
	return p
}

// firstVia is the time from t0 to the first answered connection through the director named
// via, or -1.
func (p foPhase) firstVia(t0 time.Time, via string) float64 {
	best := -1.0
	for _, q := range p.reqs {
		if q.ok && q.via == via {
			if d := q.end.Sub(t0).Seconds(); best < 0 || d < best {
				best = d
			}
		}
	}
	return best
}

// longestGap is the longest time in [from, to) with no connection answered.
func (p foPhase) longestGap(from, to time.Time) float64 {
	var ends []time.Time
	for _, q := range p.reqs {
		if q.ok {
			ends = append(ends, q.end)
		}
	}
	slices.SortFunc(ends, func(a, b time.Time) int { return a.Compare(b) })
	prev, gap := from, time.Duration(0)
	for _, e := range ends {
		gap = max(gap, e.Sub(prev))
		prev = e
	}
	return max(gap, to.Sub(prev)).Seconds()
}

// timeline counts the connections answered per foBucket in [from, to).
func (ld *foLoad) timeline(from, to time.Time) []int {
	out := make([]int, int(to.Sub(from)/foBucket)+1)
	ld.mu.Lock()
	defer ld.mu.Unlock()
	for _, q := range ld.reqs {
		if q.ok && !q.end.Before(from) && q.end.Before(to) {
			out[int(q.end.Sub(from)/foBucket)]++
		}
	}
	return out
}

// failoverVerdicts judges the rows against the goals.
func failoverVerdicts(rows []FailoverRow) []string {
	var out []string
	verdict := func(ok bool) string { return map[bool]string{true: "met", false: "NOT met"}[ok] }
	for _, iv := range []string{"100ms", "1s"} {
		goal := map[string]float64{"100ms": 0.5, "1s": 3.7}[iv]
		worst, n := 0.0, 0
		for _, r := range rows {
			if r.AdvertInterval == iv && r.Fault == "link" {
				worst, n = max(worst, failoverOrInf(r)), n+1
			}
		}
		if n > 0 {
			out = append(out, fmt.Sprintf("goal failover ≤ %.1f s after a machine loss at %s adverts: worst %.3f s over %d planes: %s", goal, iv, worst, n, verdict(worst <= goal)))
		}
	}
	worst, n := 0.0, 0
	for _, r := range rows {
		if r.Fault == "sigterm" && r.AdvertInterval == "100ms" {
			worst, n = max(worst, failoverOrInf(r)), n+1
		}
	}
	if n > 0 {
		out = append(out, fmt.Sprintf("goal failover ≤ 0.2 s after SIGTERM (100ms adverts): worst %.3f s over %d planes: %s", worst, n, verdict(worst <= 0.2)))
	}
	broken, flows := 0, 0
	for _, r := range rows {
		if r.Plane == "dr" || r.Plane == "tun" || r.Plane == "nat" {
			broken += r.Broken + r.RestoreBroken
			flows += 2 * r.LongLived
		}
	}
	if flows > 0 {
		out = append(out, fmt.Sprintf("goal 0 long-lived DR/TUN/NAT flows broken (failover and preemption): %d broken of %d: %s", broken, flows, verdict(broken == 0)))
	}
	for _, r := range rows {
		if r.Fault == "partition" {
			iv, _ := time.ParseDuration(r.AdvertInterval)
			out = append(out, fmt.Sprintf("goal one master within one advert (%s) after a partition heals: %.3f s (%s): %s", r.AdvertInterval, r.RestoreMasterS, r.Note, verdict(r.RestoreMasterS >= 0 && r.RestoreMasterS <= iv.Seconds()+0.05)))
		}
	}
	out = append(out, "failover: from the fault to the first new connection answered through the new master (the client's ARP entry names it; for l7 and l4 the backend saw it); new connections: one every 5 ms, 2 s bound each; long-lived: 50 keep-alive flows, a request every 10 ms each, broken when reset or closed or another real server answers (for l7, which balances each request, only the former), a stall the longest one request waited (TCP retransmissions); restore: the old master's process restarted, its link up, or the partition healed; partition: VRRP dropped between the directors (both masters; clients and real servers reach both)")
	return out
}

func failoverOrInf(r FailoverRow) float64 {
	if r.FailoverS < 0 {
		return 1e9
	}
	return r.FailoverS
}

// writeFailoverTable prints the failover rows.
func writeFailoverTable(r *Report, w io.Writer) error {
	fmt.Fprintf(w, "scenario %s (ideal: %s)\n", r.Scenario, r.Ideal)
	tw := newTab(w)
	fmt.Fprintln(tw, "plane\tfault\tadvert\tnew master\tfailover\tfailed\tbroken\tstall\trestore: master\tlongest gap\tfailed\tbroken\tstall")
	sec := func(s float64) string {
		if s < 0 {
			return "never"
		}
		return fmt.Sprintf("%.3f s", s)
	}
	for _, x := range r.Failover {
		if x.Error != "" {
			fmt.Fprintf(tw, "%s\t%s\t%s\terror: %s\n", x.Plane, x.Fault, x.AdvertInterval, x.Error)
			continue
		}
		restore := sec(x.RestoreMasterS)
		if x.Note != "" {
			restore += " (" + x.Note + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d/%d\t%d/%d\t%s\t%s\t%s\t%d/%d\t%d/%d\t%s\n", x.Plane, x.Fault, x.AdvertInterval,
			sec(x.NewMasterS), sec(x.FailoverS), x.Failed, x.Requests, x.Broken, x.LongLived, sec(x.StallS),
			restore, sec(x.RestoreGapS), x.RestoreFailed, x.RestoreRequests, x.RestoreBroken, foLongLived, sec(x.RestoreStallS))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "  note: %s\n", n)
	}
	_, err := fmt.Fprintln(w)
	return err
}
