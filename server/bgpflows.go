package server

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"

	"ballast/admin"
	"ballast/config"
	"ballast/director"
)

// bgpFlowSync runs a director.Sync among all the active directors of a cluster: each sends
// the flows its program places to every other one and installs what they send, so that a flow
// the routers move to another director keeps its real server there even when that director's
// table would place it elsewhere (a real server added or removed since the flow began, with
// the tables changing on the directors one by one). A director that starts asks the others
// for their flows.
type bgpFlowSync struct {
	bgp   *bgpPlane
	port  int
	peers []netip.Addr

	mu  sync.Mutex
	d   *director.Director
	s   *director.Sync
	err string
}

func newBGPFlowSync(p *bgpPlane, c *config.BGPFlowSync) (*bgpFlowSync, error) {
	fs := &bgpFlowSync{bgp: p, port: c.Port}
	for _, s := range c.Peers {
		fs.peers = append(fs.peers, netip.MustParseAddr(s))
	}
	return fs, nil // the director is swapped in after this plane; swap attaches
}

// attachLocked starts the Sync of the director (the first one, by interface name: bgp
// clusters run one director interface), if there is one and it has none yet.
func (fs *bgpFlowSync) attachLocked() error {
	d := fs.bgp.xdp.firstDirector()
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
	var dsts []netip.AddrPort
	for _, a := range fs.peers {
		dsts = append(dsts, netip.AddrPortFrom(a, uint16(fs.port)))
	}
	accept := func(from netip.Addr) bool { return slices.Contains(fs.peers, from) }
	s, err := director.NewSync(d, director.SyncOptions{Conn: conn, Peers: dsts, Accept: accept, Logger: fs.bgp.logger})
	if err != nil {
		conn.Close()
		return err
	}
	fs.d, fs.s = d, s
	s.SetSending(true)
	s.RequestDump()
	return nil
}

// swap follows a reload (the plane's Swap calls it): the director may be new.
func (fs *bgpFlowSync) swap() {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if err := fs.attachLocked(); err != nil {
		fs.err = err.Error()
		fs.bgp.logger.Error("bgp: flow sync", "error", err)
	}
}

func (fs *bgpFlowSync) close() {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.s != nil {
		_ = fs.s.Close()
		fs.s, fs.d = nil, nil
	}
}

func (fs *bgpFlowSync) status() *admin.HAFlowSync {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.s == nil && fs.err == "" {
		return nil
	}
	v := &admin.HAFlowSync{Port: fs.port, Sending: true, Error: fs.err}
	if fs.s != nil {
		st := fs.s.Stats()
		v.FlowsSent, v.DatagramsSent, v.FlowsDropped = st.FlowsSent, st.Datagrams, st.Dropped
		v.FlowsReceived, v.FlowsInstalled, v.UnknownVIP, v.UnknownReal = st.FlowsReceived, st.Installed, st.UnknownVIP, st.UnknownReal
		v.BadDatagrams, v.DumpsSent, v.DumpRequests = st.BadDatagrams, st.DumpsSent, st.DumpRequests
	}
	return v
}

// firstDirector is the director of the first interface by name, or nil.
func (p *xdpPlane) firstDirector() *director.Director {
	p.mu.Lock()
	defer p.mu.Unlock()
	var names []string
	for iface := range p.dirs {
		names = append(names, iface)
	}
	slices.Sort(names)
	if len(names) == 0 {
		return nil
	}
	return p.dirs[names[0]].d
}
