package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"ballast/admin"
	"ballast/internal/peertest"
)

// planeLoad runs one client loop until stop, counting answers by backend and failures.
type planeLoad struct {
	name string
	// pause paces a loop that opens a connection or flow per request, so that its ports (in
	// TIME_WAIT, or held until a flow's idle timeout) leave room for other tests' port picks.
	pause  time.Duration
	ok     atomic.Int64
	failed atomic.Int64
	mu     sync.Mutex
	seen   map[string]int
	errs   []string
}

func (l *planeLoad) record(backend string, err error) {
	if err != nil {
		l.failed.Add(1)
		l.mu.Lock()
		if len(l.errs) < 10 {
			l.errs = append(l.errs, err.Error())
		}
		l.mu.Unlock()
		return
	}
	l.ok.Add(1)
	l.mu.Lock()
	l.seen[backend]++
	l.mu.Unlock()
}

func (l *planeLoad) run(stop <-chan struct{}, wg *sync.WaitGroup, once func() (string, error)) {
	l.seen = map[string]int{}
	wg.Go(func() {
		for n := 0; n < 200000; n++ { // bounded in count as well as by stop
			select {
			case <-stop:
				return
			default:
			}
			l.record(once())
			if l.pause > 0 {
				time.Sleep(l.pause)
			}
		}
	})
}

func httpOnce(c *http.Client, url string, proto int) func() (string, error) {
	return func() (string, error) {
		resp, err := c.Get(url)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			return "", err
		}
		if resp.StatusCode != http.StatusOK || resp.ProtoMajor != proto {
			return "", fmt.Errorf("%s: HTTP/%d %d %s", url, resp.ProtoMajor, resp.StatusCode, b)
		}
		return strings.TrimSpace(string(b)), nil
	}
}

func h2cClient() *http.Client {
	var ps http.Protocols
	ps.SetUnencryptedHTTP2(true) // prior knowledge, as the h2c listener expects
	return &http.Client{Timeout: e2eWait, Transport: &http.Transport{Protocols: &ps}}
}

func tcpOnce(addr string) func() (string, error) {
	return func() (string, error) {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			return "", err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 64)
		n, err := c.Read(buf)
		if err != nil {
			return "", fmt.Errorf("greeting: %w", err)
		}
		name := strings.TrimSpace(string(buf[:n]))
		if _, err := c.Write([]byte("ping\n")); err != nil {
			return "", err
		}
		if n, err = io.ReadFull(c, buf[:5]); err != nil || string(buf[:n]) != "ping\n" {
			return "", fmt.Errorf("echo through %s: %q %v", name, buf[:n], err)
		}
		return name, nil
	}
}

func udpOnce(addr string) func() (string, error) {
	return func() (string, error) {
		c, err := net.Dial("udp", addr) // a new flow each time: balanced over the current set
		if err != nil {
			return "", err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(3 * time.Second))
		if _, err := c.Write([]byte("q")); err != nil {
			return "", err
		}
		buf := make([]byte, 64)
		n, err := c.Read(buf)
		if err != nil {
			return "", fmt.Errorf("udp: %w", err)
		}
		name, _, _ := strings.Cut(string(buf[:n]), ":")
		return name, nil
	}
}

// udpNamersSamePort starts UDP backends on 127.0.0.2, .3, ... all on one port (A records give
// addresses only), each answering with its name.
func udpNamersSamePort(t *testing.T, n int) (port int, names []string) {
	t.Helper()
	for try := 0; try < 20; try++ {
		port = peertest.FreePort(t, "udp")
		var conns []*net.UDPConn
		for i := range n {
			c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, byte(2+i)), Port: port})
			if err != nil {
				break
			}
			conns = append(conns, c)
		}
		if len(conns) < n {
			for _, c := range conns {
				c.Close()
			}
			continue
		}
		for i, c := range conns {
			name := fmt.Sprintf("u%d", i)
			names = append(names, name)
			t.Cleanup(func() { c.Close() })
			go func() {
				buf := make([]byte, 2048)
				for {
					k, from, err := c.ReadFromUDPAddrPort(buf)
					if err != nil {
						return
					}
					_, _ = c.WriteToUDPAddrPort(append([]byte(name+":"), buf[:k]...), from)
				}
			}()
		}
		return port, names
	}
	t.Fatal("no UDP port free on 127.0.0.2-5")
	return 0, nil
}

// slowBackend answers with its name, after a second and a half on /slow.
func slowBackend(t *testing.T, name string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			time.Sleep(1500 * time.Millisecond)
		}
		fmt.Fprintln(w, name)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// liveIDs are the pool's backends that take new traffic (up or ramping), sorted.
func liveIDs(p admin.PoolView) []string {
	var out []string
	for _, b := range p.Backends {
		if b.State == "up" || b.State == "slow-start" {
			out = append(out, b.ID)
		}
	}
	sort.Strings(out)
	return out
}

// TestServeDNSDiscoveryUnderLoad: three pools discovered from a real unbound (SRV for the
// HTTP and TCP pools, A for the UDP pool) serve HTTP/1.1, h2c, TCP and UDP clients while the
// test changes the zone 20 times: every change reaches the pools, backends that leave drain
// (slow requests in flight on them finish) and are removed once idle or come back during their
// drain, and no request fails. Then the SRV
// name disappears (NXDOMAIN): the pool keeps its last good set and the API, /metrics and ctl
// status say it is stale and since when.
func TestServeDNSDiscoveryUnderLoad(t *testing.T) {
	bin := peertest.Binary(t, "unbound", "unbound")
	const n = 4
	var httpAddrs, tcpAddrs []string
	for i := range n {
		httpAddrs = append(httpAddrs, slowBackend(t, fmt.Sprintf("h%d", i)))
		tcpAddrs = append(tcpAddrs, peertest.TCPGreeter(t, fmt.Sprintf("t%d", i)))
	}
	udpPort, _ := udpNamersSamePort(t, n)
	const (
		webName = "_http._tcp.web.ballast.test."
		tcpName = "_app._tcp.l4.ballast.test."
		udpName = "dns.ballast.test."
	)
	srv := func(name string, addrs []string, set []int) []string {
		var out []string
		for _, i := range set {
			_, port, _ := net.SplitHostPort(addrs[i])
			out = append(out, fmt.Sprintf("%s 1 IN SRV 10 1 %s h.ballast.test.", name, port))
		}
		return out
	}
	aRecords := func(set []int) []string {
		var out []string
		for _, i := range set {
			out = append(out, fmt.Sprintf("%s 1 IN A 127.0.0.%d", udpName, 2+i))
		}
		return out
	}
	first := []int{0, 1}
	records := append(append(append([]string{"h.ballast.test. 60 IN A 127.0.0.1"}, srv(webName, httpAddrs, first)...), srv(tcpName, tcpAddrs, first)...), aRecords(first)...)
	zone := peertest.UnboundZone(t, bin, records...)

	file := filepath.Join(t.TempDir(), "ballast.yaml")
	dns := func(name, typ string, port int) string {
		p := ""
		if port > 0 {
			p = fmt.Sprintf(", port: %d", port)
		}
		return fmt.Sprintf("{dns: {name: %s, type: %s%s, resolvers: [%s], min_ttl: 100ms, max_ttl: 200ms}}", name, typ, p, zone.Addr)
	}
	e2eWriteFile(t, file, fmt.Sprintf(`
listeners:
  - {name: web, address: "127.0.0.1:0", h2c: true}
  - {name: tcp, address: "127.0.0.1:0", protocol: tcp}
  - {name: udp, address: "127.0.0.1:0", protocol: udp, idle_timeout: 1s}
pools:
  - {name: web, slow_start: 2s, discovery: %s}
  - {name: tcp, discovery: %s}
  - {name: udp, discovery: %s}
routes:
  - {listener: web, pool: web}
  - {listener: tcp, pool: tcp}
  - {listener: udp, pool: udp}
admin: {address: "127.0.0.1:0"}
`, dns(webName, "srv", 0), dns(tcpName, "srv", 0), dns(udpName, "a", udpPort)))
	p := e2eStart(t, "serve", "-c", file)
	ls := e2eListeners(p)
	m, _ := p.waitLine(true, 0, e2eAdminRE)
	adminURL := m[1]
	web := "http://" + ls["http"][0]

	ids := func(set []int) map[string][]string {
		out := map[string][]string{}
		for _, i := range set {
			out["web"] = append(out["web"], httpAddrs[i])
			out["tcp"] = append(out["tcp"], tcpAddrs[i])
			out["udp"] = append(out["udp"], fmt.Sprintf("127.0.0.%d:%d", 2+i, udpPort))
		}
		for k := range out {
			sort.Strings(out[k])
		}
		return out
	}
	var lastMismatch string
	applied := func(set []int) bool {
		r := adminPools(t, adminURL)
		want := ids(set)
		for _, pool := range []string{"web", "tcp", "udp"} {
			if got := liveIDs(findPool(t, r, pool)); !slices.Equal(got, want[pool]) {
				lastMismatch = fmt.Sprintf("pool %s: %v, want %v; %+v", pool, got, want[pool], r.Discovery)
				return false
			}
		}
		return true
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log("last mismatch: ", lastMismatch)
		}
	})
	// The first answer came before the listeners opened.
	if !applied(first) {
		t.Fatalf("at start the pools are %+v, want %v", adminPools(t, adminURL).Pools, ids(first))
	}

	loads := []*planeLoad{{name: "http/1.1"}, {name: "h2c"}, {name: "tcp", pause: 2 * time.Millisecond}, {name: "udp", pause: 2 * time.Millisecond}}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	h1 := &http.Client{Timeout: e2eWait, Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
	loads[0].run(stop, &wg, httpOnce(h1, web+"/", 1))
	loads[1].run(stop, &wg, httpOnce(h2cClient(), web+"/", 2))
	loads[2].run(stop, &wg, tcpOnce(ls["tcp"][0]))
	loads[3].run(stop, &wg, udpOnce(ls["udp"][0]))

	var took []time.Duration
	var slowOK, slowOnLeaving atomic.Int64
	var slowWG sync.WaitGroup
	prev := first
	for i := range 20 {
		set := []int{i % n, (i + 1) % n}
		if i%3 == 0 {
			set = append(set, (i+2)%n)
		}
		slices.Sort(set)
		if slices.Equal(set, prev) {
			set = []int{(i + 2) % n, (i + 3) % n}
		}
		if i == 5 { // slow requests in flight when their backends leave
			leaving, next := prev, set // the loop assigns prev while these requests run
			for range 6 {
				slowWG.Go(func() {
					name, err := httpOnce(h1, web+"/slow", 1)()
					if err != nil {
						t.Errorf("slow request during a change: %v", err)
						return
					}
					slowOK.Add(1)
					for _, k := range leaving {
						if name == fmt.Sprintf("h%d", k) && !slices.Contains(next, k) {
							slowOnLeaving.Add(1)
						}
					}
				})
			}
			time.Sleep(200 * time.Millisecond) // let them reach their backends
		}
		start := time.Now()
		zone.Set(webName, srv(webName, httpAddrs, set)...)
		zone.Set(tcpName, srv(tcpName, tcpAddrs, set)...)
		zone.Set(udpName, aRecords(set)...)
		e2eWaitFor(t, fmt.Sprintf("change %d (%v) to reach the pools", i, set), func() bool { return applied(set) })
		took = append(took, time.Since(start))
		if i == 5 {
			r := adminPools(t, adminURL)
			draining := 0
			for _, b := range findPool(t, r, "web").Backends {
				if b.State == "draining" && b.InFlight > 0 {
					draining++
				}
			}
			if slowOnLeaving.Load() == 0 && draining == 0 {
				t.Log("no slow request landed on a leaving backend this time")
			}
		}
		prev = set
		time.Sleep(150 * time.Millisecond) // traffic on the new set before the next change
	}
	slowWG.Wait()
	close(stop)
	wg.Wait()

	for _, l := range loads {
		t.Logf("%-8s %6d requests, %d failed, by backend %v", l.name, l.ok.Load(), l.failed.Load(), l.seen)
		if l.failed.Load() != 0 {
			t.Errorf("%s: %d requests failed across 20 zone changes: %v", l.name, l.failed.Load(), l.errs)
		}
		if len(l.seen) < n {
			t.Errorf("%s reached %v, want all %d backends over the changes", l.name, l.seen, n)
		}
	}
	if slowOK.Load() != 6 {
		t.Errorf("%d of 6 slow requests finished", slowOK.Load())
	}
	slices.Sort(took)
	t.Logf("zone change to all three pools applied: min %s, median %s, max %s (min_ttl 100ms, max_ttl 200ms); %d slow requests finished on leaving backends",
		took[0], took[len(took)/2], took[len(took)-1], slowOnLeaving.Load())

	r := adminPools(t, adminURL)
	for _, d := range r.Discovery {
		if d.Changes < 20 || d.Added < 2 || d.Drained < 10 {
			t.Errorf("discovery of %s: %+v; want 20 changes or more, backends added and drained", d.Pool, d)
		}
	}
	e2eWaitFor(t, "drained backends to be removed", func() bool {
		r := adminPools(t, adminURL)
		for _, d := range r.Discovery {
			// Every drained backend was removed once idle, or came back during its drain.
			if d.Draining != 0 || d.Removed == 0 || d.Drained != d.Removed+d.Returned {
				lastMismatch = fmt.Sprintf("%+v %+v", d, findPool(t, r, d.Pool).Backends)
				return false
			}
		}
		return true
	})

	// The SRV name goes away: the last good set keeps serving, said to be stale.
	before := time.Now()
	zone.Remove(webName)
	var st admin.DiscoveryView
	e2eWaitFor(t, "the web pool's set to be stale", func() bool {
		for _, d := range adminPools(t, adminURL).Discovery {
			if d.Pool == "web" {
				st = d
			}
		}
		return st.Stale
	})
	if st.StaleSince.Before(before.Add(-time.Second)) || !strings.Contains(st.LastError, "NXDOMAIN") || st.Backends != len(prev) {
		t.Errorf("stale status %+v", st)
	}
	if got := liveIDs(findPool(t, adminPools(t, adminURL), "web")); !slices.Equal(got, ids(prev)["web"]) {
		t.Errorf("while stale the pool has %v, want the last good set %v", got, ids(prev)["web"])
	}
	for range 20 {
		if _, err := httpOnce(h1, web+"/", 1)(); err != nil {
			t.Fatalf("a request while the set is stale: %v", err)
		}
	}
	metrics := adminBody(t, adminURL+"/metrics")
	if want := `ballast_discovery_stale{pool="web",source="dns srv ` + webName + `"} 1`; !strings.Contains(metrics, want) {
		t.Errorf("/metrics lacks %s", want)
	}
	if !strings.Contains(metrics, `ballast_discovery_events_total{event="drained",pool="udp"`) {
		t.Error("/metrics lacks the discovery events")
	}
	out, code := e2eRun(t, "ctl", "--admin", adminURL, "status")
	if code != 0 || !strings.Contains(out, "discovery of pool web: dns srv "+webName) || !strings.Contains(out, "STALE since") || !strings.Contains(out, "NXDOMAIN") {
		t.Errorf("ctl status (exit %d):\n%s", code, out)
	}
	zone.Set(webName, srv(webName, httpAddrs, prev)...)
	e2eWaitFor(t, "the web pool's set to be current again", func() bool {
		for _, d := range adminPools(t, adminURL).Discovery {
			if d.Pool == "web" {
				return !d.Stale
			}
		}
		return false
	})
}

// e2eRun runs a ballast subcommand in this process and returns its output and exit code.
func e2eRun(t *testing.T, args ...string) (string, int) {
	t.Helper()
	var out strings.Builder
	code := run(args, &out, &out)
	return out.String(), code
}
