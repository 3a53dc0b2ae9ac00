package main

import (
	"ballast/internal/refused"
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"ballast/admin"
	"ballast/internal/peertest"
	"ballast/proxyproto"
)

// The L4 end-to-end tests: `ballast serve` with tcp and udp listeners, through real sockets.

// e2eListenersRE takes every listener URL of the start-up line.
var e2eListenersRE = regexp.MustCompile(`^ballast: serving on (.*?) \(pool.*$`)

// e2eListeners waits for the start-up line and returns its listener addresses by scheme, in
// order ("http", "tcp", "udp").
func e2eListeners(p *e2eProc) map[string][]string {
	p.t.Helper()
	m, _ := p.waitLine(false, 0, e2eListenersRE)
	out := map[string][]string{}
	for _, u := range strings.Split(m[1], ", ") {
		scheme, addr, ok := strings.Cut(u, "://")
		if !ok {
			p.t.Fatalf("start-up line %q: %q is not a URL", m[0], u)
		}
		out[scheme] = append(out[scheme], addr)
	}
	return out
}

// l4Conn is a client connection through a tcp listener, with the backend's greeting read.
type l4Conn struct {
	net.Conn
	r       *bufio.Reader
	backend string
}

func dialNamed(t *testing.T, addr string) *l4Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, e2eWait)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	lc := &l4Conn{Conn: c, r: bufio.NewReader(c)}
	_ = c.SetReadDeadline(time.Now().Add(e2eWait))
	name, err := lc.r.ReadString('\n')
	if err != nil {
		t.Fatalf("no greeting through %s: %v", addr, err)
	}
	lc.backend = strings.TrimSpace(name)
	return lc
}

// echo sends a line and checks it comes back.
func (c *l4Conn) echo(t *testing.T, msg string) {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(e2eWait))
	if _, err := io.WriteString(c, msg+"\n"); err != nil {
		t.Fatalf("write %q: %v", msg, err)
	}
	got, err := c.r.ReadString('\n')
	if err != nil || got != msg+"\n" {
		t.Fatalf("echo of %q: %q, %v", msg, got, err)
	}
}

// udpAsk sends msg from a fresh client socket and returns the reply, retrying a few times (UDP
// may drop on a busy machine); the socket is returned for more datagrams of the same flow.
func udpAsk(t *testing.T, addr, msg string) (string, *net.UDPConn) {
	t.Helper()
	ra, _ := net.ResolveUDPAddr("udp", addr)
	c, err := net.DialUDP("udp", nil, ra)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	buf := make([]byte, 2048)
	for try := 0; try < 10; try++ {
		_, _ = c.Write([]byte(msg))
		_ = c.SetReadDeadline(time.Now().Add(time.Second))
		n, err := c.Read(buf)
		if err == nil {
			return string(buf[:n]), c
		}
	}
	t.Fatalf("no answer to %q through %s", msg, addr)
	return "", nil
}

// adminPools reads GET /api/pools.
func adminPools(t *testing.T, base string) admin.PoolsResponse {
	t.Helper()
	resp, err := e2eClient.Get(base + "/api/pools")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out admin.PoolsResponse
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out
}

func adminBody(t *testing.T, url string) string {
	t.Helper()
	resp, err := e2eClient.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func findPool(t *testing.T, r admin.PoolsResponse, name string) admin.PoolView {
	t.Helper()
	for _, p := range r.Pools {
		if p.Name == name {
			return p
		}
	}
	t.Fatalf("no pool %q in %+v", name, r.Pools)
	return admin.PoolView{}
}

func findListener(t *testing.T, r admin.PoolsResponse, name string) admin.ListenerStats {
	t.Helper()
	for _, l := range r.Listeners {
		if l.Listener == name {
			return l
		}
	}
	t.Fatalf("no listener %q in %+v", name, r.Listeners)
	return admin.ListenerStats{}
}

// TestServeL4OneFile: one file with an http, a tcp and a udp listener, served together; the API,
// the status page and /metrics show the tcp and udp pools and listeners; a runtime disable
// through the API moves new TCP connections off the backend.
func TestServeL4OneFile(t *testing.T) {
	h := e2eNewBackend(t, "h")
	ta, tb := peertest.TCPGreeter(t, "ta"), peertest.TCPGreeter(t, "tb")
	ua, ub := peertest.UDPNamer(t, "ua"), peertest.UDPNamer(t, "ub")
	file := filepath.Join(t.TempDir(), "ballast.yaml")
	e2eWriteFile(t, file, fmt.Sprintf(`
listeners:
  - {name: web, address: "127.0.0.1:0"}
  - {name: db, address: "127.0.0.1:0", protocol: tcp}
  - {name: dns, address: "127.0.0.1:0", protocol: udp}
pools:
  - {name: site, backends: [{address: %q}]}
  - {name: tcp, backends: [{name: ta, address: %q}, {name: tb, address: %q}]}
  - {name: udp, backends: [{name: ua, address: %q}, {name: ub, address: %q}]}
routes:
  - {listener: web, pool: site}
  - {listener: db, pool: tcp}
  - {listener: dns, pool: udp}
admin: {address: "127.0.0.1:0"}
`, h.addr(), ta, tb, ua, ub))
	p := e2eStart(t, "serve", "-c", file)
	ls := e2eListeners(p)
	am, _ := p.waitLine(true, 0, e2eAdminRE)
	base := am[1]
	if len(ls["http"]) != 1 || len(ls["tcp"]) != 1 || len(ls["udp"]) != 1 {
		t.Fatalf("listeners %v, want one http, one tcp and one udp", ls)
	}
	if body, code := e2eGet(t, "http://"+ls["http"][0]+"/"); code != 200 || body != "h" {
		t.Fatalf("http listener answered %d %q", code, body)
	}
	// Four connections held open at once: leastconn puts two on each backend.
	tcpAt := map[string]int{}
	var conns []*l4Conn
	for i := range 4 {
		c := dialNamed(t, ls["tcp"][0])
		c.echo(t, fmt.Sprintf("hello %d", i))
		tcpAt[c.backend]++
		conns = append(conns, c)
	}
	if tcpAt["ta"] != 2 || tcpAt["tb"] != 2 {
		t.Errorf("tcp connections by backend %v, want 2 and 2 (leastconn)", tcpAt)
	}
	udpAt := map[string]int{}
	for i := range 2 {
		reply, _ := udpAsk(t, ls["udp"][0], fmt.Sprintf("q%d", i))
		name, rest, _ := strings.Cut(reply, ":")
		if rest != fmt.Sprintf("q%d", i) {
			t.Fatalf("udp reply %q to q%d", reply, i)
		}
		udpAt[name]++
	}
	if udpAt["ua"] != 1 || udpAt["ub"] != 1 {
		t.Errorf("udp flows by backend %v, want one each (leastconn over live flows)", udpAt)
	}

	st := adminPools(t, base)
	tp := findPool(t, st, "tcp")
	if tp.Protocol != "l4" || tp.Balancer != "leastconn" {
		t.Errorf("tcp pool shows protocol %q balancer %q, want l4 and the l4 default leastconn", tp.Protocol, tp.Balancer)
	}
	for _, b := range tp.Backends {
		if b.InFlight != 2 || b.Conns == nil || b.Conns.Conns != 2 {
			t.Errorf("tcp backend %s: in_flight %d conns %+v; want 2 open and 2 connections", b.ID, b.InFlight, b.Conns)
		}
	}
	if l := findListener(t, st, "db"); l.Protocol != "tcp" || l.Accepted != 4 || l.Active != 4 {
		t.Errorf("tcp listener %+v, want 4 accepted and open", l)
	}
	if l := findListener(t, st, "dns"); l.Protocol != "udp" || l.Flows != 2 || l.Active != 2 {
		t.Errorf("udp listener %+v, want 2 flows", l)
	}
	metrics := adminBody(t, base+"/metrics")
	for _, want := range []string{
		`ballast_backend_connections_total{backend="ta",pool="tcp"} 2`,
		`ballast_backend_in_flight{backend="tb",pool="tcp"} 2`,
		`ballast_backend_in_flight{backend="ua",pool="udp"} 1`,
		`ballast_listener_accepted_total{listener="db",protocol="tcp"} 4`,
		`ballast_listener_flows_total{listener="dns",protocol="udp"} 2`,
		`ballast_listener_dropped_total{listener="dns",protocol="udp",reason="max_flows"} 0`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if page := adminBody(t, base+"/"); !strings.Contains(page, `id="listeners"`) {
		t.Error("the status page has no listeners section")
	}

	// Runtime API: disable ta; new connections all go to tb, the open ones keep flowing.
	req, _ := http.NewRequest("POST", base+"/api/pools/tcp/backends/ta/disable", strings.NewReader("{}"))
	req.Header.Set("Content-Type", "application/json")
	resp, err := e2eClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("disable through the API: %d", resp.StatusCode)
	}
	for i := range 4 {
		c := dialNamed(t, ls["tcp"][0])
		if c.backend != "tb" {
			t.Errorf("connection %d after disabling ta went to %s", i, c.backend)
		}
		c.Close()
	}
	for i, c := range conns {
		c.echo(t, fmt.Sprintf("still %d", i))
		c.Close()
	}
	// Every byte is counted once the connections have closed.
	for deadline := time.Now().Add(e2eWait); ; time.Sleep(20 * time.Millisecond) {
		b := findPool(t, adminPools(t, base), "tcp").Backends[0]
		if b.InFlight == 0 && b.Conns.BytesIn > 0 && b.Conns.BytesOut > 0 {
			// ta: greeting "ta\n" out, twice per connection; echoed lines both ways.
			if b.Conns.BytesOut <= b.Conns.BytesIn {
				t.Errorf("ta: bytes in %d out %d, want more out (the greetings)", b.Conns.BytesIn, b.Conns.BytesOut)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ta: %+v %+v after every connection closed", b, b.Conns)
		}
	}
	p.signal(syscall.SIGTERM)
	if code := p.wait(); code != 0 {
		t.Errorf("exit code %d, want 0", code)
	}
}

// TestServeL4ReloadAndDrain: SIGHUP adds a backend to a tcp pool while an established
// connection keeps flowing; SIGTERM stops accepting and lets the open connections finish.
func TestServeL4ReloadAndDrain(t *testing.T) {
	a, b := peertest.TCPGreeter(t, "a"), peertest.TCPGreeter(t, "b")
	file := filepath.Join(t.TempDir(), "ballast.yaml")
	conf := `
listeners: [{name: db, address: "127.0.0.1:0", protocol: tcp}]
pools: [{name: tcp, backends: [%s]}]
`
	e2eWriteFile(t, file, fmt.Sprintf(conf, fmt.Sprintf("{name: a, address: %q}", a)))
	p := e2eStart(t, "serve", "-c", file, "--grace", "25s")
	addr := e2eListeners(p)["tcp"][0]
	c1 := dialNamed(t, addr)
	c1.echo(t, "before")
	if c1.backend != "a" {
		t.Fatalf("first connection went to %q", c1.backend)
	}

	e2eWriteFile(t, file, fmt.Sprintf(conf, fmt.Sprintf("{name: a, address: %q}, {name: b, address: %q}", a, b)))
	from := p.errCount()
	p.signal(syscall.SIGHUP)
	p.waitLine(true, from, regexp.MustCompile(`msg="configuration reloaded"`))
	c1.echo(t, "during the reload")
	c2 := dialNamed(t, addr) // leastconn: a holds c1, b holds nothing
	if c2.backend != "b" {
		t.Fatalf("the connection after adding b went to %q", c2.backend)
	}
	c1.echo(t, "after")

	from = p.errCount()
	p.signal(syscall.SIGTERM)
	p.waitLine(true, from, regexp.MustCompile(`msg="shutting down`))
	for deadline := time.Now().Add(e2eWait); ; {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatal("still accepting connections after SIGTERM")
		}
		time.Sleep(10 * time.Millisecond)
	}
	c1.echo(t, "draining")
	c2.echo(t, "draining too")
	select {
	case code := <-p.exit:
		t.Fatalf("ballast exited (%d) with connections open", code)
	default:
	}
	c1.Close()
	c2.Close()
	if code := p.wait(); code != 0 {
		t.Errorf("exit code %d, want 0", code)
	}
}

// TestServeL4GraceEnds: a connection still open when the grace period ends is closed, and the
// exit code says the drain did not finish.
func TestServeL4GraceEnds(t *testing.T) {
	a := peertest.TCPGreeter(t, "a")
	p := e2eStart(t, "serve", "--mode", "tcp", "--listen", "127.0.0.1:0", "--backend", a, "--grace", "1s")
	c := dialNamed(t, e2eListeners(p)["tcp"][0])
	c.echo(t, "open")
	p.signal(syscall.SIGTERM)
	if code := p.wait(); code != 1 {
		t.Errorf("exit code %d, want 1 (a connection outlived the grace period)", code)
	}
	_ = c.SetReadDeadline(time.Now().Add(e2eWait))
	if n, err := c.r.Read(make([]byte, 1)); err == nil {
		t.Errorf("the connection still reads (%d bytes) after the process ended", n)
	}
}

// TestServeQuickFormL4: --mode tcp and --mode udp with the same quick flags as http;
// --send-proxy and --accept-proxy; a bad mode.
func TestServeQuickFormL4(t *testing.T) {
	t.Run("tcp", func(t *testing.T) {
		a, b := peertest.TCPGreeter(t, "a"), peertest.TCPGreeter(t, "b")
		p := e2eStart(t, "serve", "--mode", "tcp", "--listen", "127.0.0.1:0", "--backend", a, "--backend", b,
			"--balancer", "roundrobin", "--max-conns", "1", "--max-queue", "4", "--queue-timeout", "5s",
			"--admin", "127.0.0.1:0")
		m, _ := p.waitLine(false, 0, e2eListenersRE)
		if !strings.Contains(m[0], "pool default: roundrobin over 2 backends") {
			t.Errorf("start-up line %q", m[0])
		}
		am, _ := p.waitLine(true, 0, e2eAdminRE)
		addr := e2eListeners(p)["tcp"][0]
		seen := map[string]int{}
		for i := range 4 {
			c := dialNamed(t, addr)
			c.echo(t, fmt.Sprint(i))
			seen[c.backend]++
			c.Close()
			// The slot is released once the proxy has seen the close; until then the backend
			// is full (max-conns 1) and roundrobin would rightly skip it.
			for deadline := time.Now().Add(e2eWait); ; time.Sleep(5 * time.Millisecond) {
				busy := int64(0)
				for _, pv := range adminPools(t, am[1]).Pools {
					for _, bv := range pv.Backends {
						busy += bv.InFlight
					}
				}
				if busy == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("connection %d: a backend slot is still held after the client closed", i)
				}
			}
		}
		if seen["a"] != 2 || seen["b"] != 2 {
			t.Errorf("roundrobin over two backends: %v", seen)
		}
		// max_conns 1 each: two open connections fill both backends, a third waits in the
		// backlog queue (no greeting) until one closes.
		c1, c2 := dialNamed(t, addr), dialNamed(t, addr)
		waiting, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer waiting.Close()
		greeting := make(chan string, 1)
		go func() {
			_ = waiting.SetReadDeadline(time.Now().Add(e2eWait))
			line, _ := bufio.NewReader(waiting).ReadString('\n')
			greeting <- line
		}()
		select {
		case line := <-greeting:
			t.Fatalf("a third connection was served (%q) while both backends were at max_conns", line)
		case <-time.After(300 * time.Millisecond):
		}
		c1.Close()
		if line := <-greeting; line != c1.backend+"\n" {
			t.Errorf("the queued connection got %q, want the freed backend %s", line, c1.backend)
		}
		c2.Close()
	})
	t.Run("udp", func(t *testing.T) {
		a, b := peertest.UDPNamer(t, "a"), peertest.UDPNamer(t, "b")
		p := e2eStart(t, "serve", "--mode", "udp", "--listen", "127.0.0.1:0", "--backend", a, "--backend", b)
		addr := e2eListeners(p)["udp"][0]
		seen := map[string]int{}
		for i := range 4 {
			reply, _ := udpAsk(t, addr, fmt.Sprint(i))
			name, _, _ := strings.Cut(reply, ":")
			seen[name]++
		}
		if seen["a"] != 2 || seen["b"] != 2 {
			t.Errorf("leastconn over live flows: %v", seen)
		}
	})
	t.Run("send-proxy and accept-proxy", func(t *testing.T) {
		p := e2eStart(t, "serve", "--mode", "tcp", "--listen", "127.0.0.1:0", "--backend", firstLineBackend(t),
			"--send-proxy", "v1", "--accept-proxy")
		addr := e2eListeners(p)["tcp"][0]
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(e2eWait))
		io.WriteString(c, "PROXY TCP4 192.0.2.10 127.0.0.1 4711 80\r\n")
		got, _ := bufio.NewReader(c).ReadString('\n')
		if want := "PROXY TCP4 192.0.2.10 127.0.0.1 4711 80\r\n"; got != want {
			t.Errorf("backend received %q, want %q (the client's header, passed on as v1)", got, want)
		}
		bare, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer bare.Close()
		_ = bare.SetDeadline(time.Now().Add(e2eWait))
		io.WriteString(bare, "hello without a header\r\n")
		if n, err := bare.Read(make([]byte, 64)); err == nil {
			t.Errorf("a connection without a PROXY header got %d bytes back", n)
		}
	})
	t.Run("bad mode", func(t *testing.T) {
		p := e2eStart(t, "serve", "--mode", "sctp", "--backend", "127.0.0.1:9")
		if code := p.wait(); code != 2 {
			t.Errorf("exit code %d, want 2", code)
		}
		if errs := p.lines(&p.err); !strings.Contains(errs, `unknown --mode "sctp" (valid: http, tcp, udp, dr, tun, nat)`) {
			t.Errorf("stderr %q", errs)
		}
	})
	t.Run("send-proxy on http", func(t *testing.T) {
		p := e2eStart(t, "serve", "--send-proxy", "v2", "--backend", "127.0.0.1:9")
		if code := p.wait(); code != 1 {
			t.Errorf("exit code %d, want 1", code)
		}
		if errs := p.lines(&p.err); !strings.Contains(errs, "pools[0].send_proxy: send_proxy applies to pools behind tcp listeners") {
			t.Errorf("stderr %q", errs)
		}
	})
}

// TestServeNginxProxyProtocolV2: a tcp listener with send_proxy: v2 in front of real nginx
// (`listen ... proxy_protocol`): nginx answers and logs the original client's address and port.
func TestServeNginxProxyProtocolV2(t *testing.T) {
	nginx := peertest.Binary(t, "nginx", "nginx")
	backend, accessLog := peertest.NginxProxyProtocol(t, nginx)
	file := filepath.Join(t.TempDir(), "ballast.yaml")
	e2eWriteFile(t, file, fmt.Sprintf(`
listeners: [{name: front, address: "127.0.0.1:0", protocol: tcp}]
pools: [{name: nginx, send_proxy: v2, backends: [{address: %q}]}]
`, backend))
	p := e2eStart(t, "serve", "-c", file)
	addr := e2eListeners(p)["tcp"][0]
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(e2eWait))
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	client := c.LocalAddr().String()
	if got := strings.TrimSpace(string(body)); resp.StatusCode != 200 || got != client {
		t.Fatalf("nginx answered %d %q, want the client %s", resp.StatusCode, got, client)
	}
	for deadline := time.Now().Add(e2eWait); ; time.Sleep(20 * time.Millisecond) {
		log, _ := os.ReadFile(accessLog)
		if strings.Contains(string(log), "client="+client+" peer=127.0.0.1") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("nginx logged %q, want client=%s", log, client)
		}
	}
}

// TestServeAcceptProxyHTTP: an http listener with accept_proxy takes the client from the PROXY
// header (v1 and v2): the backend sees it in X-Forwarded-For. A connection without a header is
// closed without an answer and counted in /metrics.
func TestServeAcceptProxyHTTP(t *testing.T) {
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.Header.Get("X-Forwarded-For"))
	}))
	defer be.Close()
	file := filepath.Join(t.TempDir(), "ballast.yaml")
	e2eWriteFile(t, file, fmt.Sprintf(`
listeners: [{name: web, address: "127.0.0.1:0", accept_proxy: true}]
pools: [{name: site, backends: [{address: %q}]}]
admin: {address: "127.0.0.1:0"}
`, strings.TrimPrefix(be.URL, "http://")))
	p := e2eStart(t, "serve", "-c", file)
	addr := e2eListeners(p)["http"][0]
	am, _ := p.waitLine(true, 0, e2eAdminRE)
	v2 := proxyproto.Header{Version: proxyproto.V2, Transport: proxyproto.TCP,
		Src: netip.MustParseAddrPort("[2001:db8::7]:5555"), Dst: netip.MustParseAddrPort("[2001:db8::1]:80")}.Append(nil)
	for _, tt := range []struct {
		name, header, want string
	}{
		{"v1", "PROXY TCP4 198.51.100.7 127.0.0.1 40000 80\r\n", "198.51.100.7"},
		{"v2", string(v2), "2001:db8::7"},
	} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(e2eWait))
		io.WriteString(c, tt.header+"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		c.Close()
		if resp.StatusCode != 200 || string(body) != tt.want {
			t.Errorf("%s: backend saw X-Forwarded-For %q (status %d), want %q", tt.name, body, resp.StatusCode, tt.want)
		}
	}
	for _, bad := range []string{"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "PROXY TCP4 nonsense\r\n"} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(e2eWait))
		io.WriteString(c, bad)
		if b, err := io.ReadAll(c); err != nil || len(b) != 0 {
			t.Errorf("%q: got %q, %v; want the connection closed without an answer", bad, b, err)
		}
		c.Close()
	}
	want := `ballast_listener_proxy_refused_total{listener="web",protocol="http"} 2`
	for deadline := time.Now().Add(e2eWait); ; time.Sleep(20 * time.Millisecond) {
		if m := adminBody(t, am[1]+"/metrics"); strings.Contains(m, want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/metrics never showed %s", want)
		}
	}
	if l := findListener(t, adminPools(t, am[1]), "web"); l.ProxyRefused != 2 || l.Protocol != "http" {
		t.Errorf("API listener %+v, want 2 refused", l)
	}
}

// TestServeDNSThroughUnbound: DNS queries through a udp listener to two real unbound
// instances are answered, each to the client that asked, and split between both.
func TestServeDNSThroughUnbound(t *testing.T) {
	bin := peertest.Binary(t, "unbound", "unbound")
	a, b := peertest.Unbound(t, bin, "10.0.0.1"), peertest.Unbound(t, bin, "10.0.0.2")
	p := e2eStart(t, "serve", "--mode", "udp", "--listen", "127.0.0.1:0", "--backend", a, "--backend", b)
	addr := e2eListeners(p)["udp"][0]
	answers := map[string]int{}
	for i := range 20 {
		id := uint16(1000 + i)
		reply, _ := udpAsk(t, addr, string(peertest.DNSQuery(id, "www.ballast.test")))
		rid, ans, err := peertest.DNSAnswerA([]byte(reply))
		if err != nil || rid != id {
			t.Fatalf("query %d: id %d, %v", i, rid, err)
		}
		answers[ans.String()]++
	}
	if answers["10.0.0.1"] != 10 || answers["10.0.0.2"] != 10 {
		t.Fatalf("answers %v, want 10 from each unbound", answers)
	}
}

// fdCount counts the open descriptors of process pid: pipes apart, everything else (sockets,
// files, epoll) as others.
func fdCount(t *testing.T, pid int) (others, pipes int) {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if l, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && strings.HasPrefix(l, "pipe:") {
			pipes++
		} else {
			others++
		}
	}
	return others, pipes
}

// TestServeTCPFaults: a backend that refuses connections is skipped without the client seeing
// it; 10,000 connections opened and closed leave the process with the sockets it had (and no
// more cached splice pipes after 10,000 than after 5,000); a backend that resets mid-stream
// closes the client connection.
func TestServeTCPFaults(t *testing.T) {
	refusing := refused.TCP(t)
	a := peertest.TCPGreeter(t, "a")
	// dies answers its greeting, reads one line and resets the connection.
	dies, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer dies.Close()
	go func() {
		for {
			c, err := dies.Accept()
			if err != nil {
				return
			}
			go func() {
				io.WriteString(c, "dies\n")
				bufio.NewReader(c).ReadString('\n')
				c.(*net.TCPConn).SetLinger(0)
				c.Close()
			}()
		}
	}()
	file := filepath.Join(t.TempDir(), "ballast.yaml")
	e2eWriteFile(t, file, fmt.Sprintf(`
listeners:
  - {name: main, address: "127.0.0.1:0", protocol: tcp}
  - {name: dying, address: "127.0.0.1:0", protocol: tcp}
pools:
  - {name: p, balancer: roundrobin, backends: [{name: refused, address: %q}, {name: a, address: %q}]}
  - {name: d, backends: [{address: %q}]}
routes:
  - {listener: main, pool: p}
  - {listener: dying, pool: d}
`, refusing, a, dies.Addr().String()))
	p := e2eStart(t, "serve", "-c", file)
	ls := e2eListeners(p)
	pid := p.cmd.Process.Pid
	first := dialNamed(t, ls["tcp"][0]) // warms the runtime's descriptors (netpoll) up
	first.Close()
	before, _ := fdCount(t, pid)

	// Two batches of 5,000 short connections, 16 at a time.
	batch := func() {
		const n, conc = 5000, 16
		errs := make(chan error, conc)
		next := make(chan int, n)
		for i := range n {
			next <- i
		}
		close(next)
		deadline := time.Now().Add(2 * time.Minute)
		for range conc {
			go func() {
				for range next {
					if time.Now().After(deadline) {
						errs <- fmt.Errorf("not done within 2 minutes")
						return
					}
					c, err := net.DialTimeout("tcp", ls["tcp"][0], e2eWait)
					if err != nil {
						errs <- err
						return
					}
					_ = c.SetDeadline(time.Now().Add(e2eWait))
					line, err := bufio.NewReader(c).ReadString('\n')
					c.Close()
					if err != nil || line != "a\n" {
						errs <- fmt.Errorf("greeting %q, %v; want a (the refusing backend is never seen)", line, err)
						return
					}
				}
				errs <- nil
			}()
		}
		for range conc {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
	}
	// Sockets and every other descriptor return to their count. Pipes are Go's splice pipes,
	// which the runtime keeps for reuse until a garbage collection: their number follows the
	// concurrency, so a second batch as large as the first must not add to them.
	settle := func(what string) int {
		for end := time.Now().Add(e2eWait); ; time.Sleep(20 * time.Millisecond) {
			others, pipes := fdCount(t, pid)
			if others <= before {
				return pipes
			}
			if time.Now().After(end) {
				t.Fatalf("%s: %d descriptors other than pipes, %d before", what, others, before)
			}
		}
	}
	batch()
	pipes1 := settle("after 5,000 connections")
	batch()
	if pipes2 := settle("after 10,000 connections"); pipes2 > pipes1+16 {
		t.Errorf("splice pipes grew with the connection count: %d after 5,000, %d after 10,000", pipes1, pipes2)
	} else {
		t.Logf("descriptors other than pipes: %d before and after; cached splice pipes: %d, then %d", before, pipes1, pipes2)
	}

	c := dialNamed(t, ls["tcp"][1])
	if c.backend != "dies" {
		t.Fatalf("greeting %q", c.backend)
	}
	_ = c.SetDeadline(time.Now().Add(e2eWait))
	io.WriteString(c, "bye\n")
	if b, err := io.ReadAll(c.r); err == nil && len(b) > 0 {
		t.Errorf("after the backend reset, the client read %q", b)
	}
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Error("the client connection is still open after its backend reset")
	}
}

// TestServeBehindHAProxy: real HAProxy (`send-proxy-v2`) in front of a tcp listener with
// accept_proxy, whose pool sends v1 on: the backend's PROXY line names the client as HAProxy
// saw it, so the address survives two proxies.
func TestServeBehindHAProxy(t *testing.T) {
	haproxy := peertest.Binary(t, "haproxy", "haproxy")
	be := firstLineBackend(t)
	file := filepath.Join(t.TempDir(), "ballast.yaml")
	e2eWriteFile(t, file, fmt.Sprintf(`
listeners: [{name: front, address: "127.0.0.1:0", protocol: tcp, accept_proxy: true}]
pools: [{name: p, send_proxy: v1, backends: [{address: %q}]}]
`, be))
	p := e2eStart(t, "serve", "-c", file)
	ballast := e2eListeners(p)["tcp"][0]
	dir := peertest.Dir(t)
	cfg := filepath.Join(dir, "haproxy.cfg")
	port := peertest.Start(t, "tcp", haproxy, func(port int) []string {
		e2eWriteFile(t, cfg, fmt.Sprintf(`global
    nbthread 1
defaults
    mode tcp
    timeout connect 5s
    timeout client 30s
    timeout server 30s
listen front
    bind 127.0.0.1:%d
    server ballast %s send-proxy-v2
`, port, ballast))
		return []string{"-f", cfg, "-db"}
	}, func(port int) bool {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(e2eWait))
	io.WriteString(c, "hello\n")
	got, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	client := c.LocalAddr().(*net.TCPAddr)
	want := fmt.Sprintf("PROXY TCP4 127.0.0.1 127.0.0.1 %d %d\r\n", client.Port, port)
	if got != want {
		t.Fatalf("backend received %q, want %q", got, want)
	}
}

// TestQuickFormL4Config: --mode tcp builds a tcp listener whose pool takes the L4 defaults
// (leastconn, a tcp health check with --health-interval alone) and the PROXY flags.
func TestQuickFormL4Config(t *testing.T) {
	q := quickForm{mode: "tcp", listen: "127.0.0.1:5432", backends: stringList{"127.0.0.1:5433"},
		sendProxy: "v2", acceptProxy: true, healthInterval: time.Second}
	c, err := q.config()
	if err != nil {
		t.Fatal(err)
	}
	l, pl := c.Listeners[0], c.Pools[0]
	switch {
	case l.Protocol != "tcp" || !l.AcceptProxy || l.IdleTimeout.Duration != 10*time.Minute:
		t.Errorf("listener %+v", l)
	case pl.Balancer != "leastconn" || pl.SendProxy != "v2":
		t.Errorf("pool balancer %q send_proxy %q", pl.Balancer, pl.SendProxy)
	case pl.Health.Type != "tcp" || pl.Health.Interval.Duration != time.Second:
		t.Errorf("health check %+v, want tcp every 1s", pl.Health)
	}
	q = quickForm{mode: "udp", listen: "127.0.0.1:5353", backends: stringList{"127.0.0.1:5301"}, acceptProxy: true}
	if _, err := q.config(); err == nil || !strings.Contains(err.Error(), "flags: listeners[0].accept_proxy") {
		t.Errorf("--accept-proxy with --mode udp: %v", err)
	}
}

// TestServeProxyTrust: with trusted_proxies, an accept_proxy listener (http or tcp) takes a
// PROXY header only from those peers: a loopback client that is not one of them is closed
// unanswered and counted, even with a well-formed header; a reload that trusts loopback lets
// the same request through on the sockets already open.
func TestServeProxyTrust(t *testing.T) {
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello "+r.Header.Get("X-Forwarded-For"))
	}))
	defer be.Close()
	file := filepath.Join(t.TempDir(), "ballast.yaml")
	conf := `
trusted_proxies: [%q]
listeners:
  - {name: web, address: "127.0.0.1:0", accept_proxy: true}
  - {name: raw, address: "127.0.0.1:0", protocol: tcp, accept_proxy: true}
pools:
  - {name: site, backends: [{address: %[2]q}]}
  - {name: tcp, backends: [{address: %[2]q}]}
routes: [{listener: web, pool: site}, {listener: raw, pool: tcp}]
admin: {address: "127.0.0.1:0"}
`
	backend := strings.TrimPrefix(be.URL, "http://")
	e2eWriteFile(t, file, fmt.Sprintf(conf, "192.0.2.0/24", backend))
	p := e2eStart(t, "serve", "-c", file)
	ls := e2eListeners(p)
	am, _ := p.waitLine(true, 0, e2eAdminRE)
	ask := func(addr string) string {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(e2eWait))
		io.WriteString(c, "PROXY TCP4 198.51.100.7 127.0.0.1 40000 80\r\nGET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
		b, _ := io.ReadAll(c)
		return string(b)
	}
	web, raw := ls["http"][0], ls["tcp"][0]
	for _, addr := range []string{web, raw} {
		if got := ask(addr); got != "" {
			t.Fatalf("%s: an untrusted peer's PROXY header was answered: %q", addr, got)
		}
	}
	for _, l := range []string{`listener="web",protocol="http"`, `listener="raw",protocol="tcp"`} {
		want := `ballast_listener_proxy_refused_total{` + l + `} 1`
		for deadline := time.Now().Add(e2eWait); !strings.Contains(adminBody(t, am[1]+"/metrics"), want); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("/metrics never showed %s", want)
			}
		}
	}

	e2eWriteFile(t, file, fmt.Sprintf(conf, "127.0.0.0/8", backend))
	from := p.errCount()
	p.signal(syscall.SIGHUP)
	p.waitLine(true, from, regexp.MustCompile(`msg="configuration reloaded"`))
	if got := ask(web); !strings.HasSuffix(got, "hello 198.51.100.7") {
		t.Errorf("http listener after trusting loopback: %q, want the backend's answer naming 198.51.100.7", got)
	}
	if got := ask(raw); !strings.HasSuffix(got, "\r\n\r\nhello ") { // bytes pass as they are: no X-Forwarded-For
		t.Errorf("tcp listener after trusting loopback: %q, want the backend's answer", got)
	}
}

// firstLineBackend is a TCP backend that answers each connection with the first line it
// received (a PROXY header, when one is sent) and closes it; it returns its address.
func firstLineBackend(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			line, _ := bufio.NewReader(c).ReadString('\n')
			_, _ = io.WriteString(c, line)
			_ = c.Close()
		}
	}()
	return ln.Addr().String()
}
