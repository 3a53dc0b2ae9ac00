package server

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"

	"golang.org/x/net/ipv4"

	"ballast/admin"
	"ballast/config"
	"ballast/director"
	"ballast/vrrp"
)

// syncGroup is the multicast group of flow sync without unicast peers (LVS's sync daemon's).
var syncGroup = netip.AddrFrom4([4]byte{224, 0, 0, 81})

// haFlowSync runs a director.Sync for the director on ha.interface: the master sends the
// flows it places, every director installs what it receives, and a backup asks for the
// master's flows when it starts or steps down, so that it has them before it takes over.
type haFlowSync struct {
	ha    *haPlane
	iface string
	port  int
	peers []netip.Addr // unicast peers; none: syncGroup

	mu     sync.Mutex
	d      *director.Director
	s      *director.Sync
	master bool
	err    string
}

// newHAFlowSync starts the sync at once if a director runs on the interface, else when a
// reload starts one.
func newHAFlowSync(p *haPlane, h *config.HA) (*haFlowSync, error) {
	fs := &haFlowSync{ha: p, iface: h.Interface, port: h.FlowSyncPort, peers: h.HAPeers()}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs, fs.attachLocked()
}

// attachLocked starts the Sync of the director on the interface, if there is one and it has
// none yet (a reload may add director listeners, or replace the director).
func (fs *haFlowSync) attachLocked() error {
	d := fs.ha.xdp.director(fs.iface)
	if d == fs.d {
		return nil
	}
	if fs.s != nil {
		_ = fs.s.Close()
		fs.s, fs.d = nil, nil
	}
	if d == nil {
		return nil
	}
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{Port: fs.port})
	if err != nil {
		return fmt.Errorf("UDP port %d: %w", fs.port, err)
	}
	own := map[netip.Addr]bool{}
	var dsts []netip.AddrPort
	if len(fs.peers) > 0 {
		for _, a := range fs.peers {
			dsts = append(dsts, netip.AddrPortFrom(a, uint16(fs.port)))
		}
	} else {
		ifi, err := net.InterfaceByName(fs.iface)
		if err == nil {
			pc := ipv4.NewPacketConn(conn)
			err = pc.JoinGroup(ifi, &net.UDPAddr{IP: syncGroup.AsSlice()})
			if err == nil {
				err = pc.SetMulticastInterface(ifi)
			}
			if err == nil {
				err = pc.SetMulticastLoopback(false)
			}
			as, _ := ifi.Addrs()
			for _, a := range as {
				if p, err := netip.ParsePrefix(a.String()); err == nil {
					own[p.Addr()] = true
				}
			}
		}
		if err != nil {
			conn.Close()
			return fmt.Errorf("multicast group %s on %s: %w", syncGroup, fs.iface, err)
		}
		dsts = []netip.AddrPort{netip.AddrPortFrom(syncGroup, uint16(fs.port))}
	}
	accept := func(from netip.Addr) bool {
		if len(fs.peers) > 0 {
			return slices.Contains(fs.peers, from)
		}
		return !own[from]
	}
	s, err := director.NewSync(d, director.SyncOptions{Conn: conn, Peers: dsts, Accept: accept, Logger: fs.ha.logger})
	if err != nil {
		conn.Close()
		return err
	}
	fs.d, fs.s = d, s
	s.SetSending(fs.master)
	if !fs.master {
		s.RequestDump()
	}
	return nil
}

// transition follows the virtual router: the master sends its flows; a director that
// becomes a backup (at start, after a fault, or losing mastership) asks the master for its
// flows, so that it has them before it takes over again.
func (fs *haFlowSync) transition(to vrrp.State) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.master = to == vrrp.Master
	if fs.s == nil {
		return
	}
	fs.s.SetSending(fs.master)
	if to == vrrp.Backup {
		fs.s.RequestDump()
	}
}

// swap follows a reload: the director on the interface may be new.
func (fs *haFlowSync) swap() {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if err := fs.attachLocked(); err != nil {
		fs.err = err.Error()
		fs.ha.logger.Error("ha: flow sync", "error", err)
	}
}

func (fs *haFlowSync) close() {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.s != nil {
		_ = fs.s.Close()
		fs.s, fs.d = nil, nil
	}
}

// status is nil while no director runs on the interface.
func (fs *haFlowSync) status() *admin.HAFlowSync {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.s == nil && fs.err == "" {
		return nil
	}
	v := &admin.HAFlowSync{Port: fs.port, Sending: fs.master, Error: fs.err}
	if len(fs.peers) == 0 {
		v.Group = syncGroup.String()
	}
	if fs.s != nil {
		st := fs.s.Stats()
		v.Sending = fs.s.Sending()
		v.FlowsSent, v.DatagramsSent, v.FlowsDropped = st.FlowsSent, st.Datagrams, st.Dropped
		v.FlowsReceived, v.FlowsInstalled, v.UnknownVIP, v.UnknownReal = st.FlowsReceived, st.Installed, st.UnknownVIP, st.UnknownReal
		v.BadDatagrams, v.DumpsSent, v.DumpRequests = st.BadDatagrams, st.DumpsSent, st.DumpRequests
	}
	return v
}
