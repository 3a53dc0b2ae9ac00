package director

import (
	"bytes"
	"net"
	"net/netip"
	"testing"

	"github.com/vishvananda/netlink"
)

// TestNextHopMACs: the director takes next-hop MACs from the neighbour table of its interface
// (the gateway's for a routed real server), keeps a real server it cannot resolve out of the
// table, and follows changes at its next tick.
func TestNextHopMACs(t *testing.T) {
	requireBPF(t)
	inNetns(t)
	ifindex, _ := natNetns(t) // neighbours: the client and real 0; real 1 unknown
	remote := netip.MustParseAddr("10.5.0.9")
	_, remoteNet, _ := net.ParseCIDR("10.5.0.0/24")
	must0(t, netlink.RouteAdd(&netlink.Route{LinkIndex: ifindex, Dst: remoteNet, Gw: realAddrs[0].AsSlice()}))

	d, err := New(Options{Iface: "d0", Mode: DR, TableSize: 7})
	must0(t, err)
	t.Cleanup(func() { d.Close() })
	v := VIP{Addr: vipAddr, Port: 80, Proto: TCP}
	reals := []Real{{Addr: realAddrs[0], Weight: 1}, {Addr: realAddrs[1], Weight: 1}, {Addr: remote, Weight: 1}}
	must0(t, d.SetVIP(v, reals))

	macOfID := func(addr netip.Addr) net.HardwareAddr {
		var def directorRealDef
		must0(t, d.do(func() error { return d.objs.Reals.Lookup(d.st.reals[addr].id, &def) }))
		return net.HardwareAddr(def.Mac[:])
	}
	st := vipStats(t, d, v)
	if st.Reals[0].State != StateUp || st.Reals[1].State != StateUnresolved || st.Reals[1].Slots != 0 || st.Reals[2].State != StateUp {
		t.Fatalf("states %s, %s (%d slots), %s; want up, unresolved (0 slots), up", st.Reals[0].State, st.Reals[1].State, st.Reals[1].Slots, st.Reals[2].State)
	}
	if got := macOfID(remote); !bytes.Equal(got, realMACs[0]) {
		t.Errorf("routed real server: next hop MAC %s, want the gateway's %s", got, realMACs[0])
	}

	n := &netlink.Neigh{LinkIndex: ifindex, IP: realAddrs[1].AsSlice(), HardwareAddr: realMACs[1], State: netlink.NUD_PERMANENT, Family: netlink.FAMILY_V4}
	must0(t, netlink.NeighSet(n))
	n = &netlink.Neigh{LinkIndex: ifindex, IP: realAddrs[0].AsSlice(), HardwareAddr: realMACs[2], State: netlink.NUD_PERMANENT, Family: netlink.FAMILY_V4}
	must0(t, netlink.NeighSet(n))
	d.do(func() error { d.st.tick(); return nil })

	st = vipStats(t, d, v)
	if st.Reals[1].State != StateUp || st.Reals[1].Slots == 0 {
		t.Errorf("after its neighbour appeared, real 1 is %s with %d slots", st.Reals[1].State, st.Reals[1].Slots)
	}
	for addr, want := range map[netip.Addr]net.HardwareAddr{realAddrs[0]: realMACs[2], realAddrs[1]: realMACs[1], remote: realMACs[2]} {
		if got := macOfID(addr); !bytes.Equal(got, want) {
			t.Errorf("%s: next hop MAC %s, want %s", addr, got, want)
		}
	}
}
