package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"ballast/admin"
	"ballast/internal/netlab"
	"ballast/realserver"
)

// The HA tests' addresses: on the directors' own segment, so that ARP (answered by the
// master only) decides which director the client reaches.
var (
	haVIP  = netip.MustParseAddr("10.77.0.100") // a DR director VIP
	haSite = netip.MustParseAddr("10.77.0.101") // an HTTP listener's address
)

// haLab is the HA topology: two directors, two DR real servers that answer "NAME CLIENT-IP"
// on port 80 (for the VIP and for their own address), a client on the same segment.
type haLab struct {
	*netlab.Lab
	t   *testing.T
	dir string
}

func newHALab(t *testing.T) *haLab {
	t.Helper()
	requireXDP(t)
	lab, err := netlab.New(netlab.Options{Reals: 2, Directors: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lab.Close)
	h := &haLab{Lab: lab, t: t, dir: t.TempDir()}
	for _, r := range lab.Reals {
		ln, err := lab.Listen(r.NS, "tcp4", ":80")
		if err != nil {
			t.Fatal(err)
		}
		name := r.Name
		srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			host, _, _ := net.SplitHostPort(r.RemoteAddr)
			fmt.Fprintf(w, "%s %s", name, host)
		})}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
		err = lab.In(r.NS, func() error {
			rs, err := realserver.Setup(realserver.Options{VIPs: []netip.Addr{haVIP}, Mode: realserver.DR, Iface: "eth0"})
			if err == nil {
				t.Cleanup(func() { rs.Close() })
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return h
}

const haAdmin = "127.0.0.1:9191"

// start runs `ballast serve` on director i with priority prio.
func (h *haLab) start(i, prio int) *e2eProc {
	h.t.Helper()
	conf := fmt.Sprintf(`listeners:
  - {name: web, address: %s:80, protocol: tcp, forwarding: dr, interface: eth0}
  - {name: site, address: %s:8080}
pools:
  - name: reals
    balancer: wlc
    health_check: {type: tcp, interval: 200ms}
    backends: [{address: %s:80}, {address: %s:80}]
  - name: app
    backends: [{address: %s:80}]
routes:
  - {listener: web, pool: reals}
  - {listener: site, pool: app}
admin: {address: %s}
ha:
  interface: eth0
  virtual_router_id: 51
  priority: %d
  advert_interval: 100ms
`, haVIP, haSite, netlab.RealIP(0), netlab.RealIP(1), netlab.RealIP(0), haAdmin, prio)
	path := filepath.Join(h.dir, fmt.Sprintf("director%d.yaml", i))
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		h.t.Fatal(err)
	}
	var p *e2eProc
	if err := h.In(h.Directors[i].NS, func() error { p = e2eStart(h.t, "serve", "-c", path); return nil }); err != nil {
		h.t.Fatal(err)
	}
	p.waitLine(false, 0, e2eServingRE2)
	return p
}

var e2eServingRE2 = regexp.MustCompile(`^ballast: serving on `)

// ha reads director i's GET /api/ha.
func (h *haLab) ha(i int) *admin.HAView {
	h.t.Helper()
	c := admin.NewClient(haAdmin, "")
	c.HTTP.Transport = &http.Transport{DialContext: h.Dialer(h.Directors[i].NS)}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	v, err := c.HA(ctx)
	if err != nil {
		return nil
	}
	return v
}

func (h *haLab) waitHA(i int, what string, within time.Duration, ok func(*admin.HAView) bool) time.Duration {
	h.t.Helper()
	start := time.Now()
	for {
		if v := h.ha(i); v != nil && ok(v) {
			return time.Since(start)
		}
		if time.Since(start) > within {
			h.t.Fatalf("director %d: %s not within %v: %+v", i, what, within, h.ha(i))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func isState(s string) func(*admin.HAView) bool {
	return func(v *admin.HAView) bool { return v.State == s }
}

// get fetches url from the client and returns the body.
func (h *haLab) get(url string) (string, error) {
	c := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{DisableKeepAlives: true, DialContext: h.Dialer(h.Client.NS)}}
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// keepalive is a long-lived connection to the DR VIP.
type keepalive struct {
	c net.Conn
	r *bufio.Reader
}

func (h *haLab) open() *keepalive {
	h.t.Helper()
	c, err := h.Dialer(h.Client.NS)(context.Background(), "tcp4", netip.AddrPortFrom(haVIP, 80).String())
	if err != nil {
		h.t.Fatalf("connecting to the VIP: %v", err)
	}
	h.t.Cleanup(func() { c.Close() })
	return &keepalive{c: c, r: bufio.NewReader(c)}
}

// ask sends one request and returns the answering real server's name.
func (k *keepalive) ask() (string, error) {
	_ = k.c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(k.c, "GET / HTTP/1.1\r\nHost: vip\r\n\r\n"); err != nil {
		return "", err
	}
	resp, err := http.ReadResponse(k.r, nil)
	if err != nil {
		return "", err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	name, _, _ := strings.Cut(string(b), " ")
	return name, err
}

// TestServeHA: two `ballast serve` processes with an ha section on one segment: the higher
// priority is master, answers for the DR VIP and the HTTP listener's address, and syncs its
// flows; SIGKILL of the master's process hands everything to the backup within the
// master-down interval with no long-lived flow broken; the old master's return preempts
// (flows kept: it asked the new master for them); SIGTERM hands over after the skew time.
// ctl ha, its JSON and /metrics show the states.
func TestServeHA(t *testing.T) {
	h := newHALab(t)
	a := h.start(0, 150)
	b := h.start(1, 100)
	aIP, bIP := h.Directors[0].IP.String(), h.Directors[1].IP.String()
	h.waitHA(0, "master", 3*time.Second, isState("master"))
	h.waitHA(1, "backup of A", 3*time.Second, func(v *admin.HAView) bool { return v.State == "backup" && v.Master == aIP })
	if v := h.ha(0); v.Priority != 150 || v.VRID != 51 || v.AdvertsSent == 0 || !strings.Contains(strings.Join(v.Addresses, " "), haSite.String()) {
		t.Errorf("A's ha view %+v", v)
	}

	// Through A: the DR VIP (the real server sees the client) and the HTTP listener (the
	// backend sees director A).
	if body, err := h.get(fmt.Sprintf("http://%s/", haVIP)); err != nil || !strings.HasSuffix(body, " "+netlab.ClientIP.String()) {
		t.Fatalf("DR VIP through A: %q %v", body, err)
	}
	if body, err := h.get(fmt.Sprintf("http://%s:8080/", haSite)); err != nil || body != "real0 "+aIP {
		t.Fatalf("HTTP listener through A: %q %v", body, err)
	}
	conns := make([]*keepalive, 12)
	first := make([]string, len(conns))
	for i := range conns {
		conns[i] = h.open()
		var err error
		if first[i], err = conns[i].ask(); err != nil {
			t.Fatal(err)
		}
	}
	h.waitHA(1, "A's flows installed at B", 3*time.Second, func(v *admin.HAView) bool {
		return v.FlowSync != nil && v.FlowSync.FlowsInstalled >= uint64(len(conns)+1)
	})
	check := func(what string) {
		t.Helper()
		for i, c := range conns {
			if name, err := c.ask(); err != nil || name != first[i] {
				t.Errorf("%s: long-lived connection %d answered by %q (%v), was %s", what, i, name, err, first[i])
			}
		}
	}

	// SIGKILL of A: B takes over within its master-down interval (3 × 100 ms + 156/256 ×
	// 100 ms), and nothing A left answers for the addresses.
	a.signal(syscall.SIGKILL)
	a.wait()
	took := h.waitHA(1, "B master after A's SIGKILL", 361*time.Millisecond+time.Second, isState("master"))
	t.Logf("SIGKILL: B master after %v", took)
	check("after A's SIGKILL")
	if body, err := h.get(fmt.Sprintf("http://%s:8080/", haSite)); err != nil || body != "real0 "+bIP {
		t.Errorf("HTTP listener after the failover: %q %v, want it through B", body, err)
	}
	if body, err := h.get(fmt.Sprintf("http://%s/", haVIP)); err != nil || !strings.HasSuffix(body, " "+netlab.ClientIP.String()) {
		t.Errorf("a new connection to the DR VIP after the failover: %q %v", body, err)
	}

	// A returns (as backup, asks B for its flows) and preempts.
	a = h.start(0, 150)
	took = h.waitHA(0, "A master again", 3*time.Second, isState("master"))
	t.Logf("preemption: A master %v after its start", took)
	h.waitHA(1, "B backup again", time.Second, isState("backup"))
	check("after A preempted")
	if v := h.ha(0); v.FlowSync == nil || v.FlowSync.FlowsInstalled == 0 {
		t.Errorf("A installed no flows from B's dump: %+v", v.FlowSync)
	}

	// ctl ha, its JSON, /metrics.
	var out []byte
	err := h.In(h.Directors[1].NS, func() error {
		var err error
		out, err = runBin("ctl", "--admin", haAdmin, "ha")
		return err
	})
	if err != nil || !strings.Contains(string(out), "state") || !strings.Contains(string(out), "backup") || !strings.Contains(string(out), "master") || !strings.Contains(string(out), aIP) {
		t.Errorf("ctl ha: %v\n%s", err, out)
	}
	err = h.In(h.Directors[0].NS, func() error {
		var err error
		out, err = runBin("ctl", "--admin", haAdmin, "ha", "--json")
		return err
	})
	var j map[string]any
	if err != nil || json.Unmarshal(out, &j) != nil || j["state"] != "master" || j["priority"] != float64(150) || j["master"] != aIP {
		t.Errorf("ctl ha --json: %v\n%s", err, out)
	}
	resp, err := (&http.Client{Transport: &http.Transport{DialContext: h.Dialer(h.Directors[0].NS)}}).Get("http://" + haAdmin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`ballast_ha_state{state="master"} 1`, `ballast_ha_state{state="backup"} 0`, "ballast_ha_priority 150", "ballast_ha_adverts_sent_total", "ballast_ha_flow_sync_installed_total"} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	// track_pools: with every real server of the VIP disabled on A, A steps down (fault)
	// and B takes over; enabled again, A is healthy, a backup, then master (preemption).
	ctl := func(i int, args ...string) {
		t.Helper()
		if err := h.In(h.Directors[i].NS, func() error {
			out, err := runBin(append([]string{"ctl", "--admin", haAdmin}, args...)...)
			if err != nil {
				return fmt.Errorf("ctl %v: %v: %s", args, err, out)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range []netip.Addr{netlab.RealIP(0), netlab.RealIP(1)} {
		ctl(0, "disable", "reals", r.String()+":80")
	}
	h.waitHA(0, "A in fault", time.Second, func(v *admin.HAView) bool {
		return v.State == "fault" && v.Priority == 0 && strings.Contains(v.Fault, "web")
	})
	h.waitHA(1, "B master while A is in fault", time.Second, isState("master"))
	check("while A is in fault")
	for _, r := range []netip.Addr{netlab.RealIP(0), netlab.RealIP(1)} {
		ctl(0, "enable", "reals", r.String()+":80")
	}
	h.waitHA(0, "A master once healthy", 3*time.Second, isState("master"))
	check("after A recovered")

	// SIGTERM of A: it hands over (priority 0) and B is master after its skew time.
	a.signal(syscall.SIGTERM)
	took = h.waitHA(1, "B master after A's SIGTERM", time.Second, isState("master"))
	t.Logf("SIGTERM: B master after %v", took)
	if code := a.wait(); code != 0 {
		t.Errorf("A exited %d after SIGTERM", code)
	}
	check("after A's SIGTERM")
	_ = b
}

// runBin runs the ballast binary with args in the calling thread's namespace.
func runBin(args ...string) ([]byte, error) {
	return exec.Command(e2eBin, args...).CombinedOutput()
}

// TestQuickFormHA: the --ha-* flags make the ha section, checked as a file's would be.
func TestQuickFormHA(t *testing.T) {
	base := func() quickForm {
		return quickForm{mode: "dr", director: directorFlags{iface: "eth0"}, listen: "10.0.0.100:80", backends: stringList{"10.0.0.11:80"}}
	}
	q := base()
	q.ha = haFlags{iface: "eth0", vrid: 51, priority: 150, advert: 100 * time.Millisecond, peers: stringList{"10.0.0.3"}, addresses: stringList{"10.0.0.1/32"}}
	cfg, err := q.config()
	if err != nil {
		t.Fatal(err)
	}
	h := cfg.HA
	if h == nil || h.Interface != "eth0" || h.VirtualRouterID != 51 || h.Priority != 150 || h.AdvertInterval.Duration != 100*time.Millisecond ||
		fmt.Sprint(h.UnicastPeers) != "[10.0.0.3]" || fmt.Sprint(h.Addresses) != "[10.0.0.1/32]" || !h.Preempt || !h.TrackPools || !h.FlowSync {
		t.Errorf("ha %+v", h)
	}
	q = base()
	q.ha = haFlags{iface: "eth0", priority: 150}
	if cfg, err := q.config(); err == nil || !strings.Contains(err.Error(), "ha.virtual_router_id: must be 1-255") {
		t.Errorf("no --ha-vrid: %v %+v", err, cfg)
	}
	q = base()
	q.ha = haFlags{vrid: 51, priority: 150}
	if _, err := q.config(); err == nil || !strings.Contains(err.Error(), "ha needs the interface") {
		t.Errorf("--ha-vrid without --ha-iface: %v", err)
	}
	q = base()
	q.mode, q.listen, q.director = "http", "10.0.0.101:8080", directorFlags{}
	q.ha = haFlags{iface: "eth0", vrid: 7, priority: 100}
	if cfg, err := q.config(); err != nil || cfg.HA == nil || cfg.HA.AdvertInterval.Duration != time.Second {
		t.Errorf("http quick form with ha: %v %+v", err, cfg)
	}
	q = base()
	if cfg, err := q.config(); err != nil || cfg.HA != nil {
		t.Errorf("no --ha flags: ha %+v, %v", cfg.HA, err)
	}
}
