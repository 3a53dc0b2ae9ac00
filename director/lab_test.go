package director

import (
	"os/exec"

	"bufio"
	"context"
	"fmt"
	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"ballast/realserver"
)

// The lab: a client, a director and real servers, each in its own network namespace, on a
// bridge in a fifth. The VIP is in another subnet; the client routes it via the director.
var (
	labClient   = netip.MustParseAddr("10.77.0.1")
	labDirector = netip.MustParseAddr("10.77.0.2")
	labVIP      = netip.MustParseAddr("10.77.1.100")
)

func labReal(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 77, 0, byte(11 + i)}) }

type node struct {
	name string
	ns   netns.NsHandle
	ip   netip.Addr
	srv  *http.Server
}

type lab struct {
	t        *testing.T
	orig     netns.NsHandle
	sw       netns.NsHandle
	client   *node
	director *node
	reals    []*node
	http     *http.Client
}

// newLab builds the topology; the test goroutine stays locked to its thread until cleanup.
func newLab(t *testing.T, nReals, mtu int) *lab {
	t.Helper()
	requireBPF(t)
	runtime.LockOSThread()
	l := &lab{t: t}
	var err error
	if l.orig, err = netns.Get(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		netns.Set(l.orig)
		runtime.UnlockOSThread()
	})
	l.sw = l.newNS()
	l.in(l.sw, func() {
		br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br0", MTU: mtu}}
		must0(t, netlink.LinkAdd(br))
		must0(t, netlink.LinkSetUp(br))
	})
	l.client = l.addNode("client", labClient, 1500)
	l.director = l.addNode("director", labDirector, mtu)
	for i := range nReals {
		l.reals = append(l.reals, l.addNode(fmt.Sprintf("real%d", i), labReal(i), mtu))
	}
	l.in(l.client.ns, func() {
		eth0, _ := netlink.LinkByName("eth0")
		_, vipNet, _ := net.ParseCIDR(labVIP.String() + "/32")
		must0(t, netlink.RouteAdd(&netlink.Route{LinkIndex: eth0.Attrs().Index, Dst: vipNet, Gw: labDirector.AsSlice()}))
	})
	l.http = &http.Client{
		Timeout: 5 * time.Second,
		Transport: &http.Transport{
			DisableKeepAlives: true,
			Proxy:             nil,
			DialContext:       l.dialer(l.client.ns),
		},
	}
	return l
}

func must0(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func (l *lab) newNS() netns.NsHandle {
	ns, err := netns.New()
	if err != nil {
		l.t.Fatalf("new network namespace: %v", err)
	}
	netns.Set(l.orig)
	l.t.Cleanup(func() { ns.Close() })
	return ns
}

// in runs f with the test's thread in ns.
func (l *lab) in(ns netns.NsHandle, f func()) {
	l.t.Helper()
	must0(l.t, netns.Set(ns))
	defer netns.Set(l.orig)
	f()
}

func (l *lab) addNode(name string, ip netip.Addr, mtu int) *node {
	t := l.t
	n := &node{name: name, ns: l.newNS(), ip: ip}
	l.in(l.sw, func() {
		la := netlink.NewLinkAttrs()
		la.Name, la.MTU = "v-"+name, mtu
		must0(t, netlink.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: "eth0", PeerMTU: uint32(mtu)}))
		sw, _ := netlink.LinkByName("v-" + name)
		peer, _ := netlink.LinkByName("eth0")
		br, _ := netlink.LinkByName("br0")
		must0(t, netlink.LinkSetMaster(sw, br))
		must0(t, netlink.LinkSetUp(sw))
		must0(t, netlink.LinkSetNsFd(peer, int(n.ns)))
	})
	l.in(n.ns, func() {
		eth0, err := netlink.LinkByName("eth0")
		must0(t, err)
		a, _ := netlink.ParseAddr(ip.String() + "/24")
		must0(t, netlink.AddrAdd(eth0, a))
		must0(t, netlink.LinkSetUp(eth0))
		lo, _ := netlink.LinkByName("lo")
		must0(t, netlink.LinkSetUp(lo))
	})
	return n
}

func (l *lab) sysctl(ns netns.NsHandle, path, value string) {
	l.in(ns, func() {
		must0(l.t, os.WriteFile("/proc/sys/"+path, []byte(value), 0o644))
	})
}

// dialer dials from inside ns: the socket is created by the calling, locked thread.
func (l *lab) dialer(ns netns.NsHandle) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		orig, err := netns.Get()
		if err != nil {
			return nil, err
		}
		defer orig.Close()
		if err := netns.Set(ns); err != nil {
			return nil, err
		}
		defer netns.Set(orig)
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
}

// serve starts an HTTP server on port 80 of every address of the real server: "/" answers
// "NAME CLIENT-IP", "/bytes?n=N" answers N bytes, POST "/" answers the length it read.
func (l *lab) serve(n *node) {
	var ln net.Listener
	l.in(n.ns, func() {
		var err error
		ln, err = net.Listen("tcp4", ":80")
		must0(l.t, err)
	})
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		if r.Method == http.MethodPost {
			got, _ := io.Copy(io.Discard, r.Body)
			fmt.Fprintf(w, "%s %s %d", n.name, host, got)
			return
		}
		fmt.Fprintf(w, "%s %s", n.name, host)
	})
	mux.HandleFunc("/bytes", func(w http.ResponseWriter, r *http.Request) {
		size, _ := strconv.Atoi(r.URL.Query().Get("n"))
		w.Write(make([]byte, size))
	})
	n.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go n.srv.Serve(ln)
	l.t.Cleanup(func() { n.srv.Close() })
}

// realServer prepares real server n with package realserver, undone at cleanup.
func (l *lab) realServer(n *node, mode realserver.Mode) {
	l.in(n.ns, func() {
		rs, err := realserver.Setup(realserver.Options{VIPs: []netip.Addr{labVIP}, Mode: mode, Iface: "eth0"})
		must0(l.t, err)
		l.t.Cleanup(func() { rs.Close() })
	})
}

// newDirector attaches a director (generic XDP) in the director's namespace.
func (l *lab) newDirector(o Options) *Director {
	o.Iface = "eth0"
	var d *Director
	l.in(l.director.ns, func() {
		var err error
		d, err = New(o)
		must0(l.t, err)
	})
	l.t.Cleanup(func() { d.Close() })
	return d
}

func (l *lab) realsOf(idx ...int) []Real {
	var rs []Real
	for _, i := range idx {
		rs = append(rs, Real{Addr: l.reals[i].ip, Weight: 1})
	}
	return rs
}

// get fetches http://VIP/path from the client and returns the body.
func (l *lab) get(path string) (string, error) {
	resp, err := l.http.Get("http://" + labVIP.String() + path)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		return "", fmt.Errorf("status %d", resp.StatusCode)
	}
	return string(b), err
}

// spread makes n requests and returns how many each real server answered; every answer
// must name the client's own address.
func (l *lab) spread(n int) map[string]int {
	l.t.Helper()
	seen := map[string]int{}
	for i := range n {
		body, err := l.get("/")
		if err != nil {
			l.t.Fatalf("request %d through the VIP: %v", i, err)
		}
		name, client, _ := strings.Cut(body, " ")
		if client != labClient.String() {
			l.t.Errorf("real server %s saw the client as %q, want %s", name, client, labClient)
		}
		seen[name]++
	}
	return seen
}

// persistent is a keep-alive connection from the client to the VIP.
type persistent struct {
	c net.Conn
	r *bufio.Reader
}

func (l *lab) open() *persistent {
	c, err := l.dialer(l.client.ns)(context.Background(), "tcp4", netip.AddrPortFrom(labVIP, 80).String())
	if err != nil {
		l.t.Fatalf("connecting to the VIP: %v", err)
	}
	l.t.Cleanup(func() { c.Close() })
	return &persistent{c: c, r: bufio.NewReader(c)}
}

// ask sends one request on p and returns the name of the real server that answered.
func (p *persistent) ask() (string, error) {
	p.c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(p.c, "GET / HTTP/1.1\r\nHost: vip\r\n\r\n"); err != nil {
		return "", err
	}
	resp, err := http.ReadResponse(p.r, nil)
	if err != nil {
		return "", err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	name, _, _ := strings.Cut(string(b), " ")
	return name, err
}

// rxBytes is what the director's eth0 has received.
func (l *lab) rxBytes() uint64 {
	var n uint64
	l.in(l.director.ns, func() {
		eth0, err := netlink.LinkByName("eth0")
		must0(l.t, err)
		n = eth0.Attrs().Statistics.RxBytes
	})
	return n
}

// routeVia adds a host route to dst via gw on eth0 in the current namespace.
func routeVia(t *testing.T, dst, gw netip.Addr) {
	eth0, err := netlink.LinkByName("eth0")
	must0(t, err)
	_, n, _ := net.ParseCIDR(dst.String() + "/32")
	must0(t, netlink.RouteAdd(&netlink.Route{LinkIndex: eth0.Attrs().Index, Dst: n, Gw: gw.AsSlice()}))
}

// serveUDP answers every datagram to VIP:port with "NAME CLIENT-IP" from the VIP itself.
func (l *lab) serveUDP(n *node, port int) {
	var c *net.UDPConn
	l.in(n.ns, func() {
		var err error
		c, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(labVIP, uint16(port))))
		must0(l.t, err)
	})
	l.t.Cleanup(func() { c.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			_, from, err := c.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			c.WriteToUDPAddrPort([]byte(n.name+" "+from.Addr().String()), from)
		}
	}()
}

// askUDP sends one datagram to VIP:port from the client and returns the answering server.
func (l *lab) askUDP(port int, msg string) (string, error) {
	c, err := l.dialer(l.client.ns)(context.Background(), "udp4", netip.AddrPortFrom(labVIP, uint16(port)).String())
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := io.WriteString(c, msg); err != nil {
		return "", err
	}
	buf := make([]byte, 1500)
	k, err := c.Read(buf)
	if err != nil {
		return "", err
	}
	name, client, _ := strings.Cut(string(buf[:k]), " ")
	if client != labClient.String() {
		return "", fmt.Errorf("%s saw the client as %q", name, client)
	}
	return name, nil
}

// natSysctls makes the director a router that sends no redirects (NAT mode).
func (l *lab) natSysctls() {
	l.sysctl(l.director.ns, "net/ipv4/ip_forward", "1")
	l.sysctl(l.director.ns, "net/ipv4/conf/all/send_redirects", "0")
	l.sysctl(l.director.ns, "net/ipv4/conf/eth0/send_redirects", "0")
}

// ethtool runs `ethtool -K eth0 ARGS` in ns; it skips the test without ethtool.
func (l *lab) ethtool(ns netns.NsHandle, args ...string) {
	l.t.Helper()
	bin, err := exec.LookPath("ethtool")
	if err != nil {
		l.t.Skip("skipping: ethtool is not installed (needed to change offloads)")
	}
	l.in(ns, func() {
		if out, err := exec.Command(bin, append([]string{"-K", "eth0"}, args...)...).CombinedOutput(); err != nil {
			l.t.Fatalf("ethtool -K eth0 %s: %v: %s", strings.Join(args, " "), err, out)
		}
	})
}

// xdpPassOnPeer attaches an XDP_PASS program in native mode to the switch's end of a veth
// (native XDP_TX on veth lands in the peer's XDP queue, dropped without a program there); it
// skips the test if native mode is refused.
func (l *lab) xdpPassOnPeer(name string) {
	l.t.Helper()
	pass, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type: ebpf.XDP, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, xdpPass), asm.Return()},
	})
	must0(l.t, err)
	l.t.Cleanup(func() { pass.Close() })
	l.in(l.sw, func() {
		peer, err := netlink.LinkByName(name)
		must0(l.t, err)
		lk, err := link.AttachXDP(link.XDPOptions{Program: pass, Interface: peer.Attrs().Index, Flags: link.XDPDriverMode})
		if err != nil {
			l.t.Skipf("skipping: native XDP on veth refused: %v", err)
		}
		l.t.Cleanup(func() { lk.Close() })
	})
}

// tcpInCsumErrors is the TCP InCsumErrors counter of /proc/net/snmp in ns.
func (l *lab) tcpInCsumErrors(ns netns.NsHandle) uint64 {
	l.t.Helper()
	var b []byte
	l.in(ns, func() {
		var err error
		b, err = os.ReadFile("/proc/net/snmp")
		must0(l.t, err)
	})
	var names []string
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != "Tcp:" {
			continue
		}
		if names == nil {
			names = f
			continue
		}
		for i, n := range names {
			if n == "InCsumErrors" && i < len(f) {
				v, _ := strconv.ParseUint(f[i], 10, 64)
				return v
			}
		}
	}
	l.t.Fatal("no Tcp InCsumErrors in /proc/net/snmp")
	return 0
}

// download fetches /bytes?n=size from the VIP and returns how many body bytes arrived.
func (l *lab) download(size int, timeout time.Duration) (int64, error) {
	c := &http.Client{Timeout: timeout, Transport: &http.Transport{DisableKeepAlives: true, DialContext: l.dialer(l.client.ns)}}
	resp, err := c.Get(fmt.Sprintf("http://%s/bytes?n=%d", labVIP, size))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	return io.Copy(io.Discard, resp.Body)
}

// labDirectorB is the second director of the failover tests.
var labDirectorB = netip.MustParseAddr("10.77.0.3")

// udpIn opens a UDP socket on addr (port chosen) in ns.
func (l *lab) udpIn(ns netns.NsHandle, addr netip.Addr) *net.UDPConn {
	var c *net.UDPConn
	l.in(ns, func() {
		var err error
		c, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(addr, 0)))
		must0(l.t, err)
	})
	return c
}

// replaceRoute points the host route to dst at gw (in the current namespace).
func replaceRoute(t *testing.T, dst, gw netip.Addr) {
	eth0, err := netlink.LinkByName("eth0")
	must0(t, err)
	_, n, _ := net.ParseCIDR(dst.String() + "/32")
	must0(t, netlink.RouteReplace(&netlink.Route{LinkIndex: eth0.Attrs().Index, Dst: n, Gw: gw.AsSlice()}))
}

// guardRules counts the NAT guard's rules in the director's namespace.
func (l *lab) guardRules() int {
	n := 0
	l.in(l.director.ns, func() {
		rules, err := netlink.RuleList(netlink.FAMILY_V4)
		must0(l.t, err)
		for _, r := range rules {
			if r.Protocol == guardProtocol && r.Priority == guardPriority {
				n++
			}
		}
	})
	return n
}
