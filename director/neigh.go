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
// address itself when it is on link, else the route's gateway. An unknown neighbour is made to
// resolve by one UDP datagram to its discard port (9); with wait, the table is then polled for
// up to resolveWait, else the next call will find it.
func (d *Director) nextHopMAC(addr netip.Addr, wait bool) (net.HardwareAddr, error) {
	if d.ifindex == 0 {
		return nil, fmt.Errorf("real server %s: no interface to resolve its MAC on; give Real.MAC", addr)
	}
	hop, err := d.nextHop(addr)
	if err != nil {
		return nil, err
	}
	if mac := d.neighbours()[hop]; mac != nil {
		return mac, nil
	}
	if c, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(hop, 9))); err == nil {
		c.Write([]byte{0})
		c.Close()
	}
	for deadline := time.Now().Add(resolveWait); wait && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		if mac := d.neighbours()[hop]; mac != nil {
			return mac, nil
		}
	}
	return nil, fmt.Errorf("real server %s: %w", addr, errUnresolved)
}

// nextHop is addr itself when it is on link, else the gateway of its route.
func (d *Director) nextHop(addr netip.Addr) (netip.Addr, error) {
	routes, err := netlink.RouteGet(addr.AsSlice())
	if err != nil || len(routes) == 0 {
		return netip.Addr{}, fmt.Errorf("real server %s: no route: %v", addr, err)
	}
	if routes[0].LinkIndex != d.ifindex {
		return netip.Addr{}, fmt.Errorf("real server %s is routed through interface index %d, not %s", addr, routes[0].LinkIndex, d.opts.Iface)
	}
	if gw, ok := netip.AddrFromSlice(routes[0].Gw.To4()); ok {
		return gw, nil
	}
	return addr, nil
}

// neighbours is the director interface's IPv4 neighbour table: address -> MAC, for entries
// whose MAC is usable.
func (d *Director) neighbours() map[netip.Addr]net.HardwareAddr {
	neighs, err := netlink.NeighList(d.ifindex, netlink.FAMILY_V4)
	if err != nil {
		return nil
	}
	const valid = netlink.NUD_REACHABLE | netlink.NUD_STALE | netlink.NUD_DELAY | netlink.NUD_PROBE | netlink.NUD_PERMANENT | netlink.NUD_NOARP
	out := make(map[netip.Addr]net.HardwareAddr, len(neighs))
	for _, n := range neighs {
		ip, ok := netip.AddrFromSlice(n.IP.To4())
		if ok && len(n.HardwareAddr) == 6 && n.State&valid != 0 {
			out[ip] = n.HardwareAddr
		}
	}
	return out
}
