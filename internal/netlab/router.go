package netlab

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// addRouter adds the router on the segment (eth0, RouterIP) and the client behind it on a link
// of its own (client eth0 RoutedClientIP, router eth1 RouterClientIP). The router forwards
// with a true 5-tuple ECMP hash (fib_multipath_hash_policy 3 with fields 0x0037: source and
// destination address, protocol, source and destination port): on veth, policy 1 would reuse
// the sending socket's own hash, random per connection and drawn again on a TCP timeout.
func (l *Lab) addRouter() error {
	r, err := l.addNode("router", RouterIP, 1500)
	if err != nil {
		return err
	}
	l.Router = r
	for path, v := range map[string]string{
		"net/ipv4/ip_forward":                  "1",
		"net/ipv4/fib_multipath_hash_policy":   "3",
		"net/ipv4/fib_multipath_hash_fields":   "0x0037",
		"net/ipv4/conf/all/send_redirects":     "0", // directors are next hops on the same segment
		"net/ipv4/conf/default/send_redirects": "0",
		"net/ipv4/conf/eth0/send_redirects":    "0",
	} {
		if err := l.Sysctl(r.NS, path, v); err != nil {
			return fmt.Errorf("netlab: router: %w", err)
		}
	}
	ns, err := l.newNS()
	if err != nil {
		return err
	}
	c := &Node{Name: "client", NS: ns, IP: RoutedClientIP}
	err = l.In(r.NS, func() error {
		la := netlink.NewLinkAttrs()
		la.Name = "eth1"
		if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: "c-eth0"}); err != nil {
			return err
		}
		eth1, err1 := netlink.LinkByName("eth1")
		peer, err2 := netlink.LinkByName("c-eth0")
		if err := errors.Join(err1, err2); err != nil {
			return err
		}
		a, _ := netlink.ParseAddr(RouterClientIP.String() + "/24")
		if err := netlink.AddrAdd(eth1, a); err != nil {
			return err
		}
		if err := netlink.LinkSetUp(eth1); err != nil {
			return err
		}
		if err := l.Sysctl(r.NS, "net/ipv4/conf/eth1/send_redirects", "0"); err != nil {
			return err
		}
		return netlink.LinkSetNsFd(peer, int(ns))
	})
	if err != nil {
		return fmt.Errorf("netlab: router's client link: %w", err)
	}
	err = l.In(ns, func() error {
		eth0, err := netlink.LinkByName("c-eth0")
		if err != nil {
			return err
		}
		if err := netlink.LinkSetName(eth0, "eth0"); err != nil {
			return err
		}
		a, _ := netlink.ParseAddr(RoutedClientIP.String() + "/24")
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
		if err := netlink.LinkSetUp(lo); err != nil {
			return err
		}
		return netlink.RouteAdd(&netlink.Route{LinkIndex: eth0.Attrs().Index, Gw: RouterClientIP.AsSlice()})
	})
	if err != nil {
		return fmt.Errorf("netlab: client: %w", err)
	}
	l.Client = c
	return nil
}

// routeClientNet routes ClientNet via the router on every node of the segment.
func (l *Lab) routeClientNet() error {
	nodes := append(slices.Clone(l.Directors), l.Reals...)
	for _, n := range nodes {
		err := l.In(n.NS, func() error {
			eth0, err := netlink.LinkByName("eth0")
			if err != nil {
				return err
			}
			_, dst, _ := net.ParseCIDR(ClientNet.String())
			return netlink.RouteAdd(&netlink.Route{LinkIndex: eth0.Attrs().Index, Dst: dst, Gw: RouterIP.AsSlice()})
		})
		if err != nil {
			return fmt.Errorf("netlab: %s: route to the client via the router: %w", n.Name, err)
		}
	}
	return nil
}

// AddNode adds one more host on the segment (a real server added during a run, say), with
// the route to ClientNet via the router when there is one. Its name must be new.
func (l *Lab) AddNode(name string, ip netip.Addr, mtu int) (*Node, error) {
	if mtu == 0 {
		mtu = 1500
	}
	n, err := l.addNode(name, ip, mtu)
	if err != nil || l.Router == nil {
		return n, err
	}
	err = l.In(n.NS, func() error {
		eth0, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		_, dst, _ := net.ParseCIDR(ClientNet.String())
		return netlink.RouteAdd(&netlink.Route{LinkIndex: eth0.Attrs().Index, Dst: dst, Gw: RouterIP.AsSlice()})
	})
	return n, err
}

// Nexthops are the gateways of ns's route to dst/32 (one, several for a multipath route, or
// none when there is no such route).
func (l *Lab) Nexthops(ns netns.NsHandle, dst netip.Addr) ([]netip.Addr, error) {
	var out []netip.Addr
	err := l.In(ns, func() error {
		_, n, _ := net.ParseCIDR(dst.String() + "/32")
		rs, err := netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Dst: n, Table: 254}, netlink.RT_FILTER_DST|netlink.RT_FILTER_TABLE)
		if err != nil {
			return err
		}
		for _, r := range rs {
			if a, ok := netip.AddrFromSlice(r.Gw); ok {
				out = append(out, a.Unmap())
			}
			for _, nh := range r.MultiPath {
				if a, ok := netip.AddrFromSlice(nh.Gw); ok {
					out = append(out, a.Unmap())
				}
			}
		}
		return nil
	})
	slices.SortFunc(out, netip.Addr.Compare)
	return out, err
}
