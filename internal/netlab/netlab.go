// Package netlab builds the XDP director's topology in network namespaces for end-to-end tests
// and the labs: a client, one director (or two, for HA) and real servers, each in a namespace
// of its own with an eth0 on one bridge (in a namespace of its own). The VIP is in another subnet, which the
// client routes via the director. Nothing outside the namespaces it creates is touched, and
// Close removes them.
//
// Processes started with Start inherit the namespace of the thread that forks them, so a
// command runs in a node's namespace without `ip netns exec` (and without the /sys remount
// that comes with it).
//
// # Concurrency
//
// A Lab is not safe for concurrent use except Dialer and Listen's results, which may be used
// from any goroutine. In locks the calling goroutine's thread while f runs.
package netlab

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// The addresses of the topology.
var (
	ClientIP   = netip.MustParseAddr("10.77.0.1")
	DirectorIP = netip.MustParseAddr("10.77.0.2")
	VIP        = netip.MustParseAddr("10.77.1.100")
	// With Options.Router: the router's address on the segment and on the client's link, and
	// the client's address behind it (its own subnet, 10.77.2.0/24).
	RouterIP       = netip.MustParseAddr("10.77.0.254")
	RouterClientIP = netip.MustParseAddr("10.77.2.254")
	RoutedClientIP = netip.MustParseAddr("10.77.2.1")
	ClientNet      = netip.MustParsePrefix("10.77.2.0/24")
)

// RealIP is the address of real server i.
func RealIP(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 77, 0, byte(11 + i)}) }

// DirectorIPs returns the address of director i: DirectorIP for the first, then 10.77.0.3...
func DirectorIPs(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 77, 0, byte(2 + i)}) }

// Node is one host of the topology.
type Node struct {
	Name string
	NS   netns.NsHandle
	IP   netip.Addr
}

// Lab is a built topology.
type Lab struct {
	orig   netns.NsHandle
	sw     netns.NsHandle
	Client *Node
	// Router is the router between the client and the segment (Options.Router), else nil.
	Router   *Node
	Director *Node // Directors[0]
	// Directors are the directors: one unless Options.Directors says more.
	Directors []*Node
	Reals     []*Node
	closers   []func()
	cuts      map[*Node][]link.Link // Partition's drop programs
}

// Options size the topology.
type Options struct {
	Reals int
	// Directors is how many directors there are (DirectorIPs); 0 means 1.
	Directors int
	// MTU of the director's and real servers' links and the bridge; the client keeps 1500
	// (TUN needs room for 20 more bytes on the tunnel path).
	MTU int
	// Router puts the client behind a router (router.go): the client is RoutedClientIP on a
	// link of its own to the router, which is RouterIP on the segment and forwards with a
	// 5-tuple ECMP hash; the other nodes route ClientNet via the router, and the VIP has no
	// route until one is installed in the router (by BGP, say).
	Router bool
}

// New builds the topology. It needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN).
func New(o Options) (_ *Lab, err error) {
	if o.MTU == 0 {
		o.MTU = 1500
	}
	l := &Lab{}
	if l.orig, err = netns.Get(); err != nil {
		return nil, fmt.Errorf("netlab: current namespace: %w", err)
	}
	defer func() {
		if err != nil {
			l.Close()
		}
	}()
	if l.sw, err = l.newNS(); err != nil {
		return nil, err
	}
	err = l.In(l.sw, func() error {
		br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br0", MTU: o.MTU}}
		if err := netlink.LinkAdd(br); err != nil {
			return err
		}
		return netlink.LinkSetUp(br)
	})
	if err == nil {
		err = l.In(l.sw, plainSwitch)
	}
	if err != nil {
		return nil, fmt.Errorf("netlab: bridge: %w", err)
	}
	if o.Router {
		if err := l.addRouter(); err != nil {
			return nil, err
		}
	} else if l.Client, err = l.addNode("client", ClientIP, 1500); err != nil {
		return nil, err
	}
	for i := range max(o.Directors, 1) {
		name := "director"
		if i > 0 {
			name = fmt.Sprintf("director%d", i)
		}
		n, err := l.addNode(name, DirectorIPs(i), o.MTU)
		if err != nil {
			return nil, err
		}
		l.Directors = append(l.Directors, n)
	}
	l.Director = l.Directors[0]
	for i := range o.Reals {
		n, err := l.addNode(fmt.Sprintf("real%d", i), RealIP(i), o.MTU)
		if err != nil {
			return nil, err
		}
		l.Reals = append(l.Reals, n)
	}
	if o.Router {
		return l, l.routeClientNet()
	}
	err = l.In(l.Client.NS, func() error { return route(VIP, DirectorIP) })
	if err != nil {
		return nil, fmt.Errorf("netlab: client route to the VIP: %w", err)
	}
	return l, nil
}

// plainSwitch keeps the bridge a switch: where the host has the br_netfilter module loaded
// (container hosts do), a new namespace's bridge passes every frame it forwards through the
// IP firewall hooks (bridge-nf-call-*=1), which a switch between the hosts of a real network
// does not do and which costs the topology's two-hop paths (client → director → real server)
// twice what it costs the direct path. Without the module the files do not exist and there is
// nothing to turn off.
func plainSwitch() error {
	for _, name := range []string{"bridge-nf-call-iptables", "bridge-nf-call-ip6tables", "bridge-nf-call-arptables"} {
		err := os.WriteFile("/proc/sys/net/bridge/"+name, []byte("0"), 0o644)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("netlab: %s: %w", name, err)
		}
	}
	return nil
}

// Close runs the cleanups in reverse order and closes the namespaces (the kernel removes a
// namespace, with its links, when nothing holds it any more).
func (l *Lab) Close() {
	for i := len(l.closers) - 1; i >= 0; i-- {
		l.closers[i]()
	}
	l.closers = nil
	l.orig.Close()
}

// OnClose adds a cleanup that Close runs (last added, first run).
func (l *Lab) OnClose(f func()) { l.closers = append(l.closers, f) }

func (l *Lab) newNS() (netns.NsHandle, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	ns, err := netns.New()
	if err != nil {
		return 0, fmt.Errorf("netlab: new network namespace: %w", err)
	}
	if err := netns.Set(l.orig); err != nil {
		ns.Close()
		return 0, err
	}
	l.OnClose(func() { ns.Close() })
	return ns, nil
}

// In runs f with the calling goroutine's thread in ns, and returns to where it was.
func (l *Lab) In(ns netns.NsHandle, f func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return err
	}
	defer orig.Close()
	if err := netns.Set(ns); err != nil {
		return err
	}
	defer netns.Set(orig)
	return f()
}

func (l *Lab) addNode(name string, ip netip.Addr, mtu int) (*Node, error) {
	ns, err := l.newNS()
	if err != nil {
		return nil, err
	}
	n := &Node{Name: name, NS: ns, IP: ip}
	err = l.In(l.sw, func() error {
		la := netlink.NewLinkAttrs()
		la.Name, la.MTU = "v-"+name, mtu
		if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: "eth0", PeerMTU: uint32(mtu)}); err != nil {
			return err
		}
		sw, err1 := netlink.LinkByName("v-" + name)
		peer, err2 := netlink.LinkByName("eth0")
		br, err3 := netlink.LinkByName("br0")
		if err := errors.Join(err1, err2, err3); err != nil {
			return err
		}
		if err := netlink.LinkSetMaster(sw, br); err != nil {
			return err
		}
		if err := netlink.LinkSetUp(sw); err != nil {
			return err
		}
		return netlink.LinkSetNsFd(peer, int(ns))
	})
	if err != nil {
		return nil, fmt.Errorf("netlab: %s: %w", name, err)
	}
	err = l.In(ns, func() error {
		eth0, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		a, _ := netlink.ParseAddr(ip.String() + "/24")
		if err := netlink.AddrAdd(eth0, a); err != nil {
			return err
		}
		if err := netlink.LinkSetUp(eth0); err != nil {
			return err
		}
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		return netlink.LinkSetUp(lo)
	})
	if err != nil {
		return nil, fmt.Errorf("netlab: %s: %w", name, err)
	}
	return n, nil
}

// Sysctl writes /proc/sys/path in ns.
func (l *Lab) Sysctl(ns netns.NsHandle, path, value string) error {
	return l.In(ns, func() error { return os.WriteFile("/proc/sys/"+path, []byte(value), 0o644) })
}

// RouteVia adds, in ns, a host route to dst via gw on eth0 (NAT real servers reach the client
// through the director).
func (l *Lab) RouteVia(ns netns.NsHandle, dst, gw netip.Addr) error {
	return l.In(ns, func() error { return route(dst, gw) })
}

func route(dst, gw netip.Addr) error {
	eth0, err := netlink.LinkByName("eth0")
	if err != nil {
		return err
	}
	_, n, _ := net.ParseCIDR(dst.String() + "/32")
	return netlink.RouteAdd(&netlink.Route{LinkIndex: eth0.Attrs().Index, Dst: n, Gw: gw.AsSlice()})
}

// Dialer dials from inside ns: the socket is created by the calling, locked thread.
func (l *Lab) Dialer(ns netns.NsHandle) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		var c net.Conn
		err := l.In(ns, func() error {
			var err error
			c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
			return err
		})
		return c, err
	}
}

// Listen opens a listening socket in ns; it stays in ns wherever it is used.
func (l *Lab) Listen(ns netns.NsHandle, network, addr string) (net.Listener, error) {
	var ln net.Listener
	err := l.In(ns, func() error {
		var err error
		ln, err = net.Listen(network, addr)
		return err
	})
	return ln, err
}

// Start starts cmd in ns (the child inherits the forking thread's namespace).
func (l *Lab) Start(ns netns.NsHandle, cmd *exec.Cmd) error {
	return l.In(ns, cmd.Start)
}

// Traffic is what eth0 of ns has received and sent so far, in bytes.
func (l *Lab) Traffic(ns netns.NsHandle) (rx, tx uint64, err error) {
	err = l.In(ns, func() error {
		eth0, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		rx, tx = eth0.Attrs().Statistics.RxBytes, eth0.Attrs().Statistics.TxBytes
		return nil
	})
	return rx, tx, err
}

// XDPProgram is the ID of the XDP program attached to eth0 of ns, or 0.
func (l *Lab) XDPProgram(ns netns.NsHandle) (uint32, error) {
	var id uint32
	err := l.In(ns, func() error {
		eth0, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		if x := eth0.Attrs().Xdp; x != nil && x.Attached {
			id = x.ProgId
		}
		return nil
	})
	return id, err
}

// RouteMultipath adds, in ns, one host route to dst over several gateways on eth0 (equal-cost
// multipath: which gateway a packet takes is the kernel's hash of its flow, per the namespace's
// net.ipv4.fib_multipath_hash_policy). RouteDel with an invalid gw removes it.
func (l *Lab) RouteMultipath(ns netns.NsHandle, dst netip.Addr, gws ...netip.Addr) error {
	return l.In(ns, func() error {
		eth0, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		_, n, _ := net.ParseCIDR(dst.String() + "/32")
		r := &netlink.Route{Dst: n}
		for _, gw := range gws {
			r.MultiPath = append(r.MultiPath, &netlink.NexthopInfo{LinkIndex: eth0.Attrs().Index, Gw: gw.AsSlice()})
		}
		return netlink.RouteAdd(r)
	})
}

// RouteDel removes, in ns, the host route to dst that RouteVia added (via gw), or the first
// route to dst when gw is the zero Addr.
func (l *Lab) RouteDel(ns netns.NsHandle, dst, gw netip.Addr) error {
	return l.In(ns, func() error {
		eth0, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		_, n, _ := net.ParseCIDR(dst.String() + "/32")
		return netlink.RouteDel(&netlink.Route{LinkIndex: eth0.Attrs().Index, Dst: n, Gw: gw.AsSlice()})
	})
}

// Switch is the namespace of the bridge, where each node's link ends as v-NAME.
func (l *Lab) Switch() netns.NsHandle { return l.sw }

// SetLink brings eth0 of node n up or down, from the node's side (a machine that loses its
// link, or gets it back).
func (l *Lab) SetLink(n *Node, up bool) error {
	return l.In(n.NS, func() error {
		eth0, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		if up {
			return netlink.LinkSetUp(eth0)
		}
		return netlink.LinkSetDown(eth0)
	})
}

// SetSwitchPort brings the switch's end of node n's link up or down: the node keeps its link
// but is cut off the segment (a partition, or a machine lost as the others see it).
func (l *Lab) SetSwitchPort(n *Node, up bool) error {
	return l.In(l.sw, func() error {
		port, err := netlink.LinkByName("v-" + n.Name)
		if err != nil {
			return err
		}
		if up {
			return netlink.LinkSetUp(port)
		}
		return netlink.LinkSetDown(port)
	})
}

// Partition cuts node n off the segment (on) or puts it back, keeping its link up: tc
// programs on the switch's end of its link drop every frame both ways, so that the node sees
// no carrier change, as across a failed switch between two halves of a network.
func (l *Lab) Partition(n *Node, on bool) error { return l.cut(n, 0, on) }

// DropProto drops (on) the IPv4 packets of protocol proto to and from node n at the switch,
// or stops dropping them; the rest still passes: with 112, the node and the others stop
// hearing each other's VRRP adverts while every host still reaches every other.
func (l *Lab) DropProto(n *Node, proto uint8, on bool) error { return l.cut(n, proto, on) }

// cut installs (on) or removes the drop programs of n's switch port: every frame with proto 0,
// else IPv4 packets of that protocol.
func (l *Lab) cut(n *Node, proto uint8, on bool) error {
	if !on {
		for _, lk := range l.cuts[n] {
			lk.Close()
		}
		delete(l.cuts, n)
		return nil
	}
	if l.cuts[n] != nil {
		return nil
	}
	insns := asm.Instructions{asm.Mov.Imm(asm.R0, 2), asm.Return()} // TC_ACT_SHOT
	if proto != 0 {
		insns = asm.Instructions{
			asm.LoadMem(asm.R2, asm.R1, 76, asm.Word), // skb->data
			asm.LoadMem(asm.R3, asm.R1, 80, asm.Word), // skb->data_end
			asm.Mov.Reg(asm.R4, asm.R2),
			asm.Add.Imm(asm.R4, 24),
			asm.JGT.Reg(asm.R4, asm.R3, "pass"),
			asm.LoadMem(asm.R5, asm.R2, 12, asm.Half),
			asm.JNE.Imm(asm.R5, 0x0008, "pass"), // ETH_P_IP, as the little-endian load sees it
			asm.LoadMem(asm.R5, asm.R2, 23, asm.Byte),
			asm.JNE.Imm(asm.R5, int32(proto), "pass"),
			asm.Mov.Imm(asm.R0, 2), // TC_ACT_SHOT
			asm.Return(),
			asm.Mov.Imm(asm.R0, -1).WithSymbol("pass"), // TC_ACT_UNSPEC: pass on
			asm.Return(),
		}
	}
	drop, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.SchedCLS, License: "GPL", Instructions: insns})
	if err != nil {
		return fmt.Errorf("netlab: partition program: %w", err)
	}
	defer drop.Close() // the links hold it
	return l.In(l.sw, func() error {
		port, err := netlink.LinkByName("v-" + n.Name)
		if err != nil {
			return err
		}
		var links []link.Link
		for _, at := range []ebpf.AttachType{ebpf.AttachTCXIngress, ebpf.AttachTCXEgress} {
			lk, err := link.AttachTCX(link.TCXOptions{Program: drop, Attach: at, Interface: port.Attrs().Index})
			if err != nil {
				for _, x := range links {
					x.Close()
				}
				return fmt.Errorf("netlab: partition of %s: %w", n.Name, err)
			}
			links = append(links, lk)
		}
		if l.cuts == nil {
			l.cuts = map[*Node][]link.Link{}
			l.OnClose(func() {
				for _, ls := range l.cuts {
					for _, lk := range ls {
						lk.Close()
					}
				}
			})
		}
		l.cuts[n] = links
		return nil
	})
}
