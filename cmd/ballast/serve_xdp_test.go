package main

import (
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
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netns"

	"ballast/admin"
	"ballast/director"
	"ballast/internal/netlab"
	"ballast/realserver"
)

func TestQuickFormDirectorConfig(t *testing.T) {
	cases := []struct {
		name    string
		q       quickForm
		wantErr string
	}{
		{"dr", quickForm{mode: "dr", director: directorFlags{iface: "eth0"}, listen: "10.0.0.100:80", backends: stringList{"10.0.0.11:80", "10.0.0.12:80"}}, ""},
		{"udp wlc http check", quickForm{mode: "nat", director: directorFlags{iface: "eth1", udp: true}, listen: "10.0.0.100:53", balancer: "wlc", healthPath: "/h", backends: stringList{"10.0.0.11:53"}}, ""},
		{"no iface", quickForm{mode: "tun", listen: "10.0.0.100:80", backends: stringList{"10.0.0.11:80"}}, "--mode tun needs --iface"},
		{"port translation", quickForm{mode: "dr", director: directorFlags{iface: "eth0"}, listen: "10.0.0.100:80", backends: stringList{"10.0.0.11:8080"}}, "does not translate ports"},
		{"proxy balancer", quickForm{mode: "dr", director: directorFlags{iface: "eth0"}, listen: "10.0.0.100:80", balancer: "sqf", backends: stringList{"10.0.0.11:80"}}, `balancer "sqf" is not one the XDP director runs (valid: maglev, wlc)`},
		{"max conns", quickForm{mode: "dr", director: directorFlags{iface: "eth0"}, listen: "10.0.0.100:80", maxConns: 3, backends: stringList{"10.0.0.11:80"}}, "max_conns is a proxy setting"},
		{"roundrobin", quickForm{mode: "dr", director: directorFlags{iface: "eth0"}, listen: "10.0.0.100:80", balancer: "roundrobin", backends: stringList{"10.0.0.11:80"}}, `balancer "roundrobin" is not one the XDP director runs`},
		{"bad mode", quickForm{mode: "gre", listen: "10.0.0.100:80", backends: stringList{"10.0.0.11:80"}}, `unknown protocol "gre" (valid: http, tcp, udp)`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := c.q.config()
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("got %v, want an error containing %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			l, pl := cfg.Listeners[0], cfg.Pools[0]
			if l.Forwarding != c.q.mode || l.Interface != c.q.director.iface || !l.IsDirector() || l.Address != c.q.listen {
				t.Errorf("listener %+v", l)
			}
			wantProto, wantBal, wantCheck := "tcp", "maglev", "tcp"
			if c.q.director.udp {
				wantProto = "udp"
			}
			if c.q.balancer == "wlc" {
				wantBal = "wlc"
			}
			if c.q.healthPath != "" {
				wantCheck = "http"
			}
			if l.Protocol != wantProto || pl.Balancer != wantBal || pl.Health.Type != wantCheck || pl.Health.Interval.Duration != 2*time.Second {
				t.Errorf("protocol %s balancer %s check %s every %v; want %s, %s, %s every 2s", l.Protocol, pl.Balancer, pl.Health.Type, pl.Health.Interval, wantProto, wantBal, wantCheck)
			}
			if len(pl.Backends) != len(c.q.backends) {
				t.Errorf("backends %+v", pl.Backends)
			}
		})
	}
}

// xdpLab is the director topology with an HTTP server on port 80 of each real server, which
// answers "NAME CLIENT-IP".
type xdpLab struct {
	*netlab.Lab
	t       *testing.T
	client  *http.Client
	servers []*http.Server // the real servers' HTTP servers, by index
}

// requireXDP skips the test unless it runs as root where the director's program loads.
func requireXDP(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipping: the XDP director and network namespaces need root")
	}
	d, err := director.New(director.Options{Mode: director.DR, MAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, TableSize: 7, MaxVIPs: 1, MaxReals: 2, ConnTableSize: 64})
	if err != nil {
		if errors.Is(err, ebpf.ErrNotSupported) || errors.Is(err, os.ErrPermission) {
			t.Skipf("skipping: BPF cannot load here: %v", err)
		}
		t.Fatalf("loading the director: %v", err)
	}
	d.Close()
}

func newXDPLab(t *testing.T, reals int) *xdpLab {
	t.Helper()
	requireXDP(t)
	lab, err := netlab.New(netlab.Options{Reals: reals})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lab.Close)
	x := &xdpLab{Lab: lab, t: t}
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
		x.servers = append(x.servers, srv)
		err = lab.In(r.NS, func() error {
			rs, err := realserver.Setup(realserver.Options{VIPs: []netip.Addr{netlab.VIP}, Mode: realserver.DR, Iface: "eth0"})
			if err == nil {
				t.Cleanup(func() { rs.Close() })
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	x.client = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true, DialContext: lab.Dialer(lab.Client.NS)}}
	return x
}

// startIn runs ballast with args in ns.
func (x *xdpLab) startIn(ns netns.NsHandle, args ...string) *e2eProc {
	var p *e2eProc
	if err := x.In(ns, func() error { p = e2eStart(x.t, args...); return nil }); err != nil {
		x.t.Fatal(err)
	}
	return p
}

// spread makes n requests to url from the client and counts the answering real servers; each
// must have seen wantClient as the client.
func (x *xdpLab) spread(url string, n int, wantClient netip.Addr) map[string]int {
	x.t.Helper()
	seen := map[string]int{}
	for i := range n {
		resp, err := x.client.Get(url)
		if err != nil {
			x.t.Fatalf("request %d to %s: %v", i, url, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		name, client, _ := strings.Cut(string(b), " ")
		if resp.StatusCode != 200 || client != wantClient.String() {
			x.t.Fatalf("request %d to %s: status %d body %q, want 200 from a real server that saw %s", i, url, resp.StatusCode, b, wantClient)
		}
		seen[name]++
	}
	return seen
}

// status reads the admin API's JSON (what `ballast ctl status --json` prints) from inside the
// director's namespace, where the admin listener is.
func (x *xdpLab) status(adminAddr string) admin.PoolsResponse {
	x.t.Helper()
	c := admin.NewClient(adminAddr, "")
	c.HTTP.Transport = &http.Transport{DialContext: x.Dialer(x.Director.NS)}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := c.Pools(ctx)
	if err != nil {
		x.t.Fatal(err)
	}
	return *r
}

// ctl runs `ballast ctl ARGS` in the director's namespace and returns its output.
func (x *xdpLab) ctl(args ...string) string {
	x.t.Helper()
	var out []byte
	err := x.In(x.Director.NS, func() error {
		var err error
		out, err = exec.Command(e2eBin, append([]string{"ctl"}, args...)...).CombinedOutput()
		return err
	})
	if err != nil {
		x.t.Fatalf("ballast ctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// waitState waits until the status shows real server i of the only VIP in state.
func (x *xdpLab) waitState(adminAddr string, i int, state string) {
	x.t.Helper()
	deadline := time.Now().Add(e2eWait)
	for {
		r := realsOf(x.t, x.status(adminAddr))
		if len(r) > i && r[i].State == state {
			return
		}
		if time.Now().After(deadline) {
			x.t.Fatalf("real server %d never shown %s: %+v", i, state, r)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// realsOf returns the real servers of the director's first VIP (by address order: the TCP one
// in these tests).
func realsOf(t *testing.T, r admin.PoolsResponse) []admin.RealView {
	t.Helper()
	if len(r.Directors) != 1 || len(r.Directors[0].VIPs) == 0 {
		t.Fatalf("status shows directors %+v, want one with a VIP", r.Directors)
	}
	return r.Directors[0].VIPs[0].Reals
}

// serveUDP answers every datagram to VIP:port on each real server with "NAME CLIENT-IP", from
// the VIP itself (DR: the reply goes straight to the client).
func (x *xdpLab) serveUDP(port uint16) {
	for _, r := range x.Reals {
		var c *net.UDPConn
		err := x.In(r.NS, func() error {
			var err error
			c, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(netlab.VIP, port)))
			return err
		})
		if err != nil {
			x.t.Fatal(err)
		}
		x.t.Cleanup(func() { c.Close() })
		name := r.Name
		go func() {
			buf := make([]byte, 1500)
			for {
				_, from, err := c.ReadFromUDPAddrPort(buf)
				if err != nil {
					return
				}
				_, _ = c.WriteToUDPAddrPort([]byte(name+" "+from.Addr().String()), from)
			}
		}()
	}
}

// askUDP sends one datagram per flow to VIP:port from the client and counts the answering
// real servers; each must have seen the client's own address.
func (x *xdpLab) askUDP(port uint16, n int) map[string]int {
	x.t.Helper()
	seen := map[string]int{}
	// Every socket stays open until all are asked, so each query has its own source port: a
	// flow of its own (a closed socket's port may be handed out again, which would be one flow).
	var open []net.Conn
	defer func() {
		for _, c := range open {
			_ = c.Close()
		}
	}()
	for i := range n {
		c, err := x.Dialer(x.Client.NS)(context.Background(), "udp4", netip.AddrPortFrom(netlab.VIP, port).String())
		if err != nil {
			x.t.Fatal(err)
		}
		open = append(open, c)
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 1500)
		_, err = fmt.Fprintf(c, "q%d", i)
		k := 0
		if err == nil {
			k, err = c.Read(buf)
		}
		if err != nil {
			x.t.Fatalf("UDP query %d through the VIP: %v", i, err)
		}
		name, client, _ := strings.Cut(string(buf[:k]), " ")
		if client != netlab.ClientIP.String() {
			x.t.Fatalf("UDP query %d: %s saw the client as %q", i, name, client)
		}
		seen[name]++
	}
	return seen
}

var e2eDirectorRE = regexp.MustCompile(`^ballast: serving on VIP (\S+) \(XDP (\w+) on (\w+)\)`)

// TestServeDirectorDR: `ballast serve --mode dr` in the director's namespace balances HTTP
// through the VIP over two real servers that see the client's own address; the status shows
// per real server packets and new flows; a runtime disable moves new flows to the other real
// server; /metrics exports the director; SIGTERM detaches it.
func TestServeDirectorDR(t *testing.T) {
	x := newXDPLab(t, 2)
	const adminAddr = "127.0.0.1:9190"
	vip := netip.AddrPortFrom(netlab.VIP, 80)
	p := x.startIn(x.Director.NS, "serve", "--mode", "dr", "--iface", "eth0", "--listen", vip.String(),
		"--backend", netlab.RealIP(0).String()+":80", "--backend", netlab.RealIP(1).String()+":80",
		"--admin", adminAddr, "--health-interval", "200ms")
	m, _ := p.waitLine(false, 0, e2eDirectorRE)
	if m[1] != vip.String()+"/tcp" || m[2] != "dr" || m[3] != "eth0" {
		t.Errorf("start-up line %q", m[0])
	}
	url := "http://" + vip.String() + "/"
	seen := x.spread(url, 30, netlab.ClientIP)
	if seen["real0"] == 0 || seen["real1"] == 0 {
		t.Errorf("30 connections through the VIP reached %v, want both real servers", seen)
	}
	reals := realsOf(t, x.status(adminAddr))
	var flows uint64
	for i, r := range reals {
		if r.Packets == 0 || r.NewFlows == 0 || r.Bytes == 0 || r.State != "up" || r.Weight != 1 || r.Backend != netlab.RealIP(i).String()+":80" {
			t.Errorf("real %d in the status: %+v; want up, weight 1, packets, bytes and new flows > 0", i, r)
		}
		flows += r.NewFlows
	}
	if flows != 30 {
		t.Errorf("the real servers counted %d new flows, want 30", flows)
	}

	if out := x.ctl("--admin", adminAddr, "disable", "default", netlab.RealIP(0).String()+":80"); !strings.Contains(out, "ok: disable") {
		t.Fatalf("ctl disable: %s", out)
	}
	before := realsOf(t, x.status(adminAddr))[0].NewFlows
	x.waitState(adminAddr, 0, "disabled")
	if seen := x.spread(url, 20, netlab.ClientIP); seen["real1"] != 20 {
		t.Errorf("after disabling real0, 20 new connections reached %v, want all on real1", seen)
	}
	if after := realsOf(t, x.status(adminAddr))[0].NewFlows; after != before {
		t.Errorf("disabled real0 took %d new flows", after-before)
	}

	// enable and a weight of 0 (the API's weight override) reach the table too.
	x.ctl("--admin", adminAddr, "enable", "default", netlab.RealIP(0).String()+":80")
	x.ctl("--admin", adminAddr, "weight", "default", netlab.RealIP(1).String()+":80", "0")
	x.waitState(adminAddr, 1, "drain")
	if r := realsOf(t, x.status(adminAddr)); r[0].State != "up" || r[1].Weight != 0 || r[1].Slots != 0 {
		t.Errorf("after enable real0 and weight 0 for real1: %+v", r)
	}
	if seen := x.spread(url, 20, netlab.ClientIP); seen["real0"] != 20 {
		t.Errorf("with real1 at weight 0, 20 new connections reached %v, want all on real0", seen)
	}
	x.ctl("--admin", adminAddr, "disable", "default", netlab.RealIP(0).String()+":80")
	x.waitState(adminAddr, 0, "disabled")

	text := x.ctl("--admin", adminAddr, "status")
	for _, want := range []string{"director eth0 (dr)", "vip " + vip.String() + "/tcp", "disabled"} {
		if !strings.Contains(text, want) {
			t.Errorf("ctl status lacks %q:\n%s", want, text)
		}
	}
	resp, err := (&http.Client{Transport: &http.Transport{DialContext: x.Dialer(x.Director.NS)}}).Get("http://" + adminAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	want := fmt.Sprintf(`ballast_director_real_new_flows_total{backend="%s:80",interface="eth0",listener="%s",pool="default",vip="%s/tcp"}`, netlab.RealIP(1), vip, vip)
	if !strings.Contains(string(metrics), want) {
		t.Errorf("/metrics lacks %s", want)
	}
	p.signal(syscall.SIGTERM)
	if code := p.wait(); code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0", code)
	}
}

// TestServeDirectorFile: one process runs an HTTP proxy listener and two director listeners
// (TCP and UDP VIPs on one director) from one file; the pool's health check takes a dead real
// server out of the director's table; a reload that changes the director's pool moves new flows.
func TestServeDirectorFile(t *testing.T) {
	x := newXDPLab(t, 2)
	const adminAddrFile = "127.0.0.1:9191"
	dir := t.TempDir()
	file := filepath.Join(dir, "ballast.yaml")
	write := func(reals string) {
		e2eWriteFile(t, file, fmt.Sprintf(`listeners:
  - {name: web, address: %[1]s:8080}
  - {name: vip, address: %[2]s:80, protocol: tcp, forwarding: dr, interface: eth0}
  - {name: dns, address: %[2]s:5353, protocol: udp, forwarding: dr, interface: eth0}
pools:
  - name: web
    backends: [{address: %[3]s:80}, {address: %[4]s:80}]
  - name: reals
    health_check: {type: http, path: /, interval: 200ms}
    backends: [%[5]s]
  - name: dns
    backends: [{address: %[3]s:5353}, {address: %[4]s:5353}]
routes:
  - {listener: web, pool: web}
  - {listener: vip, pool: reals}
  - {listener: dns, pool: dns}
admin: {address: %[6]s}
`, netlab.DirectorIP, netlab.VIP, netlab.RealIP(0), netlab.RealIP(1), reals, adminAddrFile))
	}
	write(fmt.Sprintf("{address: %s:80}, {address: %s:80}", netlab.RealIP(0), netlab.RealIP(1)))
	x.serveUDP(5353)
	p := x.startIn(x.Director.NS, "serve", "-c", file)
	m, _ := p.waitLine(false, 0, regexp.MustCompile(`^ballast: serving on http://(\S+), VIP (\S+)/tcp \(XDP dr on eth0\)`))
	if m[1] != netlab.DirectorIP.String()+":8080" || m[2] != netlab.VIP.String()+":80" {
		t.Errorf("start-up line %q", m[0])
	}
	// The proxy: the real servers see the director's address.
	if seen := x.spread("http://"+netlab.DirectorIP.String()+":8080/", 10, netlab.DirectorIP); len(seen) != 2 {
		t.Errorf("10 proxied requests reached %v, want both real servers", seen)
	}
	// The director: they see the client's.
	vipURL := "http://" + netlab.VIP.String() + "/"
	if seen := x.spread(vipURL, 30, netlab.ClientIP); len(seen) != 2 {
		t.Errorf("30 connections through the VIP reached %v, want both real servers", seen)
	}
	// The UDP VIP, on the same director.
	if seen := x.askUDP(5353, 20); len(seen) != 2 {
		t.Errorf("20 UDP flows through the VIP reached %v, want both real servers", seen)
	}
	if st := x.status(adminAddrFile); len(st.Directors) != 1 || len(st.Directors[0].VIPs) != 2 || st.Directors[0].VIPs[1].NewFlows != 20 {
		t.Errorf("status: want one director with the TCP and the UDP VIP, the UDP one with 20 new flows: %+v", st.Directors)
	}
	// real1 dies: the pool's HTTP check (the health package, run by the server) marks it down
	// and the director stops giving it new flows.
	x.servers[1].Close()
	x.waitState(adminAddrFile, 1, "down")
	if seen := x.spread(vipURL, 20, netlab.ClientIP); seen["real0"] != 20 {
		t.Errorf("with real1 down, 20 connections through the VIP reached %v, want all on real0", seen)
	}
	// A reload leaves real0 alone in the pool: real0 keeps every new flow.
	write(fmt.Sprintf("{address: %s:80}", netlab.RealIP(0)))
	from := p.errCount()
	p.signal(syscall.SIGHUP)
	p.waitLine(true, from, regexp.MustCompile(`configuration reloaded`))
	if seen := x.spread(vipURL, 20, netlab.ClientIP); seen["real0"] != 20 {
		t.Errorf("after the reload, 20 connections through the VIP reached %v, want all on real0", seen)
	}
	if reals := realsOf(t, x.status(adminAddrFile)); len(reals) != 1 || reals[0].Address != netlab.RealIP(0).String()+":80" {
		t.Errorf("after the reload the director lists %+v, want real0 alone", reals)
	}
	p.signal(syscall.SIGTERM)
	if code := p.wait(); code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0", code)
	}
}
