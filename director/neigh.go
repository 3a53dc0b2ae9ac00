package director

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/vishvananda/netlink"
)

// resolveWait bounds how long SetVIP waits for the kernel to resolve a new real server's MAC.
const resolveWait = time.Second

var errUnresolved = errors.New("next hop not in the neighbour table")

// nextHopMAC finds the MAC of the next hop towards addr on the director's interface: the
// address itself when it is on link, else the route's gateway. With nudge, an unknown
// neighbour is made to resolve by one UDP datagram to its discard port (9), and the table is
// polled for up to resolveWait.
func (d *Director) nextHopMAC(addr netip.Addr, nudge bool) (net.HardwareAddr, error) {
	if d.ifindex == 0 {
		return nil, fmt.Errorf("real server %s: no interface to resolve its MAC on; give Real.MAC", addr)
	}
	routes, err := netlink.RouteGet(addr.AsSlice())
	if err != nil || len(routes) == 0 {
		return nil, fmt.Errorf("real server %s: no route: %v", addr, err)
	}
	if routes[0].LinkIndex != d.ifindex {
		return nil, fmt.Errorf("real server %s is routed through interface index %d, not %s", addr, routes[0].LinkIndex, d.opts.Iface)
	}
	hop := addr.AsSlice()
	if gw := routes[0].Gw; gw != nil {
		hop = gw
	}
	deadline := time.Now().Add(resolveWait)
	for sent := false; ; {
		if mac := d.neighbour(hop); mac != nil {
			return mac, nil
		}
		if !nudge {
			return nil, fmt.Errorf("real server %s: %w", addr, errUnresolved)
		}
		if !sent {
			sent = true
			if c, err := net.DialUDP("udp4", nil, &net.UDPAddr{IP: hop, Port: 9}); err == nil {
				c.Write([]byte{0})
				c.Close()
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("real server %s: %w after %v", addr, errUnresolved, resolveWait)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// neighbour returns ip's MAC from the neighbour table of the director's interface, if known.
func (d *Director) neighbour(ip net.IP) net.HardwareAddr {
	neighs, err := netlink.NeighList(d.ifindex, netlink.FAMILY_V4)
	if err != nil {
		return nil
	}
	const valid = netlink.NUD_REACHABLE | netlink.NUD_STALE | netlink.NUD_DELAY | netlink.NUD_PROBE | netlink.NUD_PERMANENT | netlink.NUD_NOARP
	for _, n := range neighs {
		if n.IP.Equal(ip) && len(n.HardwareAddr) == 6 && n.State&valid != 0 {
			return n.HardwareAddr
		}
	}
	return nil
}
