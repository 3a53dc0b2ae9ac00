package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"ballast/internal/netlab"
	"ballast/lab"
	"ballast/realserver"
)

// TestServeBGP: two `ballast serve` directors announce the VIP to a real FRR router, which
// spreads the client's connections over both (5-tuple ECMP) to the same real servers;
// `ctl bgp` and `ctl bgp --json` show the session established with BFD up and the VIP
// announced with its reason, /metrics the ballast_bgp_* series; with every backend disabled
// a director withdraws the VIP (and says why) and announces it again once one is enabled; on
// SIGTERM it withdraws first and keeps forwarding for withdraw_wait before it exits, and a
// long-lived flow it carried survives (the other director has it through flow sync).
func TestServeBGP(t *testing.T) {
	requireXDP(t)
	if why := netlab.FRRMissing(); why != "" {
		t.Skip("skipping: " + why)
	}
	l, err := netlab.New(netlab.Options{Reals: 2, Directors: 2, Router: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	for _, r := range l.Reals {
		ln, err := l.Listen(r.NS, "tcp4", ":80")
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
		if err := l.In(r.NS, func() error {
			rs, err := realserver.Setup(realserver.Options{VIPs: []netip.Addr{netlab.VIP}, Mode: realserver.DR, Iface: "eth0"})
			if err == nil {
				t.Cleanup(func() { _ = l.In(r.NS, rs.Close) })
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	bgpd, bfdd := lab.SoFRRConf(l)
	if _, err := l.StartFRR(l.Router, bgpd, bfdd); err != nil {
		t.Fatal(err)
	}
	const adm = "127.0.0.1:9193"
	dir := t.TempDir()
	var procs []*e2eProc
	for i, d := range l.Directors {
		other := l.Directors[1-i].IP
		conf := fmt.Sprintf(`listeners:
  - {name: web, address: %s:80, protocol: tcp, forwarding: dr, interface: eth0}
pools:
  - name: reals
    health_check: {type: tcp, interval: 200ms}
    backends: [{address: %s:80}, {address: %s:80}]
admin: {address: %s}
bgp:
  asn: 65010
  router_id: %s
  peers: [{address: %s, asn: 65000, bfd: true}]
  communities: ["65010:100"]
  bfd_interval: 100ms
  withdraw_wait: 1500ms
  cluster_seed: 7
  flow_sync: {peers: [%s]}
`, netlab.VIP, netlab.RealIP(0), netlab.RealIP(1), adm, d.IP, netlab.RouterIP, other)
		path := filepath.Join(dir, fmt.Sprintf("d%d.yaml", i))
		if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := runBin("check", "-c", path); err != nil {
			t.Fatalf("check: %v\n%s", err, out)
		}
		var p *e2eProc
		_ = l.In(d.NS, func() error { p = e2eStart(t, "serve", "-c", path); return nil })
		procs = append(procs, p)
	}
	d0, d1 := l.Directors[0].IP, l.Directors[1].IP
	waitNH := func(want []netip.Addr, within time.Duration) time.Duration {
		t.Helper()
		start := time.Now()
		for {
			got, err := l.Nexthops(l.Router.NS, netlab.VIP)
			if err == nil && slices.Equal(got, want) {
				return time.Since(start)
			}
			if time.Since(start) > within {
				t.Fatalf("router's next hops for the VIP: %v %v, want %v", got, err, want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitNH([]netip.Addr{d0, d1}, 30*time.Second)
	ctl := func(i int, args ...string) string {
		t.Helper()
		var out []byte
		if err := l.In(l.Directors[i].NS, func() error {
			var err error
			out, err = runBin(append([]string{"ctl", "--admin", adm}, args...)...)
			return err
		}); err != nil {
			t.Fatalf("ctl %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	// Both directors' sessions established with BFD up (a session whose BFD does not come up
	// is reset by GoBGP after its slow-start detection time and established again).
	for i := range 2 {
		deadline := time.Now().Add(20 * time.Second)
		for {
			var j struct {
				Sessions []struct{ State, BFD string } `json:"sessions"`
			}
			out := ctl(i, "bgp", "--json")
			if json.Unmarshal([]byte(out), &j) == nil && len(j.Sessions) == 1 && j.Sessions[0].State == "established" && j.Sessions[0].BFD == "up" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("director %d: session not established with BFD up: %s", i, out)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitNH([]netip.Addr{d0, d1}, 10*time.Second)
	deadline := time.Now().Add(10 * time.Second)
	for {
		var j struct {
			Sessions []struct{ State, BFD string } `json:"sessions"`
			Routes   []struct {
				Prefix    string `json:"prefix"`
				Announced bool   `json:"announced"`
				Reason    string `json:"reason"`
			} `json:"routes"`
		}
		out := ctl(0, "bgp", "--json")
		if err := json.Unmarshal([]byte(out), &j); err != nil {
			t.Fatalf("ctl bgp --json: %v\n%s", err, out)
		}
		if len(j.Sessions) == 1 && j.Sessions[0].State == "established" && j.Sessions[0].BFD == "up" {
			if len(j.Routes) != 1 || j.Routes[0].Prefix != netlab.VIP.String()+"/32" || !j.Routes[0].Announced || !strings.Contains(j.Routes[0].Reason, "2 usable real servers") {
				t.Errorf("ctl bgp --json routes: %s", out)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("session not established with BFD up: %s", out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if out := ctl(0, "bgp"); !strings.Contains(out, "10.77.0.254") || !strings.Contains(out, "established") || !strings.Contains(out, "10.77.1.100/32  true") {
		t.Errorf("ctl bgp:\n%s", out)
	}
	httpIn := &http.Client{Transport: &http.Transport{DialContext: l.Dialer(l.Directors[0].NS)}, Timeout: 2 * time.Second}
	resp, err := httpIn.Get("http://" + adm + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, m := range []string{`ballast_bgp_session_established{peer="10.77.0.254"} 1`, `ballast_bgp_route_announced{prefix="10.77.1.100/32"} 1`,
		`ballast_bgp_bfd_up{peer="10.77.0.254"} 1`, `ballast_bgp_prefixes_sent{peer="10.77.0.254"} 1`, "ballast_bgp_flow_sync_sent_total"} {
		if !strings.Contains(string(body), m) {
			t.Errorf("/metrics lacks %s", m)
		}
	}

	// The client's connections spread over both directors (their new-flow counters) and
	// reach both real servers.
	client := &http.Client{Transport: &http.Transport{DialContext: l.Dialer(l.Client.NS), DisableKeepAlives: true}, Timeout: 3 * time.Second}
	reals := map[string]int{}
	// A BFD session can go down for a moment on a loaded machine (100 ms timers); the router
	// then sends every connection to the other director. A round counts only when neither
	// director's session was re-established during it (its "since" unchanged) and both next
	// hops were there at its end; up to three rounds, one must spread.
	since := func() (s [2]string) {
		for i := range 2 {
			var j struct {
				Sessions []struct {
					Since string `json:"since"`
				} `json:"sessions"`
			}
			if err := json.Unmarshal([]byte(ctl(i, "bgp", "--json")), &j); err == nil && len(j.Sessions) == 1 {
				s[i] = j.Sessions[0].Since
			}
		}
		return s
	}
	spread := func() (f [2]uint64, ok bool) {
		waitNH([]netip.Addr{d0, d1}, 10*time.Second)
		sinceBefore := since()
		before := flows(t, ctl)
		for range 60 {
			resp, err := client.Get(fmt.Sprintf("http://%s/", netlab.VIP))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			name, seen, _ := strings.Cut(string(b), " ")
			if seen != netlab.RoutedClientIP.String() {
				t.Errorf("real server saw client %q, want %s (DR keeps the client's address)", seen, netlab.RoutedClientIP)
			}
			reals[name]++
		}
		after := flows(t, ctl)
		got, err := l.Nexthops(l.Router.NS, netlab.VIP)
		f = [2]uint64{after[0] - before[0], after[1] - before[1]}
		return f, err == nil && slices.Equal(got, []netip.Addr{d0, d1}) && since() == sinceBefore && sinceBefore[0] != "" && sinceBefore[1] != ""
	}
	var f [2]uint64
	for round := 1; ; round++ {
		var steady bool
		f, steady = spread()
		if f[0] >= 10 && f[1] >= 10 {
			break
		}
		if steady || round == 3 {
			t.Errorf("new flows per director %v of 60 connections (round %d): ECMP does not spread", f, round)
			break
		}
		t.Logf("round %d: next hops changed during the round (new flows %v); again", round, f)
	}
	if len(reals) != 2 {
		t.Errorf("connections reached %v, want both real servers", reals)
	}

	// Every backend disabled on director 1: it withdraws the VIP and says why.
	for _, r := range []string{netlab.RealIP(0).String() + ":80", netlab.RealIP(1).String() + ":80"} {
		ctl(1, "disable", "reals", r)
	}
	disabled := time.Now()
	for {
		out := ctl(1, "bgp")
		if strings.Contains(out, "withdrawn: listener web: pool reals has no usable real server") {
			break
		}
		if time.Since(disabled) > 5*time.Second {
			t.Fatalf("ctl bgp after disabling every backend:\n%s", out)
		}
		time.Sleep(10 * time.Millisecond)
	}
	waitNH([]netip.Addr{d0}, 5*time.Second)
	t.Logf("withdrawn, and the router followed, %v after the backends were disabled", time.Since(disabled))
	ctl(1, "enable", "reals", netlab.RealIP(0).String()+":80")
	ctl(1, "enable", "reals", netlab.RealIP(1).String()+":80")
	waitNH([]netip.Addr{d0, d1}, 10*time.Second)

	// A long-lived flow, then SIGTERM of whichever director carries it: the route goes at once,
	// the director forwards for withdraw_wait and exits, and the flow keeps its real server.
	var c net.Conn
	var first string
	carrier := -1
	for port := 0; port < 20 && carrier < 0; port++ {
		before := flows(t, ctl) // a flow counts when its SYN passes
		var err error
		if c, err = l.Dialer(l.Client.NS)(t.Context(), "tcp4", netlab.VIP.String()+":80"); err != nil {
			t.Fatal(err)
		}
		first = request(t, c)
		after := flows(t, ctl)
		for i := range 2 {
			if after[i] > before[i] {
				carrier = i
			}
		}
		if carrier != 0 { // director 0 carries it: the interesting case; else try another port
			c.Close()
			carrier = -1
		}
	}
	if carrier != 0 {
		t.Fatal("no connection of 20 went through director 0")
	}
	defer c.Close()
	stopped := time.Now()
	procs[0].signal(syscall.SIGTERM)
	took := waitNH([]netip.Addr{d1}, 3*time.Second)
	t.Logf("SIGTERM: route withdrawn after %v", took)
	for range 10 {
		if got := request(t, c); got != first {
			t.Fatalf("the long-lived flow moved from %s to %s", first, got)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if code := procs[0].wait(); code != 0 {
		t.Errorf("director 0 exited %d", code)
	}
	if d := time.Since(stopped); d < 1500*time.Millisecond {
		t.Errorf("director 0 exited %v after SIGTERM, before withdraw_wait (1.5 s)", d)
	}
	if got := request(t, c); got != first {
		t.Fatalf("after director 0 exited the flow moved from %s to %s", first, got)
	}
}

// flows reads each director's VIP new-flow counter.
func flows(t *testing.T, ctl func(int, ...string) string) [2]uint64 {
	t.Helper()
	var out [2]uint64
	for i := range 2 {
		var j struct {
			Directors []struct {
				VIPs []struct {
					NewFlows uint64 `json:"new_flows"`
				} `json:"vips"`
			} `json:"directors"`
		}
		if err := json.Unmarshal([]byte(ctl(i, "status", "--json")), &j); err == nil && len(j.Directors) > 0 && len(j.Directors[0].VIPs) > 0 {
			out[i] = j.Directors[0].VIPs[0].NewFlows
		}
	}
	return out
}

// request sends one keep-alive request on c and returns the real server's name.
func request(t *testing.T, c net.Conn) string {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: vip\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatalf("long-lived flow: %v", err)
	}
	s := string(buf[:n])
	i := strings.Index(s, "\r\n\r\n")
	if i < 0 {
		t.Fatalf("response: %q", s)
	}
	name, _, _ := strings.Cut(s[i+4:], " ")
	return name
}
