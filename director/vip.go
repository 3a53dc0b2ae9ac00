package director

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/cilium/ebpf"

	"ballast/balance"
)

// Proto is a VIP's transport protocol.
type Proto uint8

// The protocols a VIP can balance.
const (
	TCP Proto = 6
	UDP Proto = 17
)

func (p Proto) String() string {
	switch p {
	case TCP:
		return "tcp"
	case UDP:
		return "udp"
	}
	return fmt.Sprintf("proto(%d)", uint8(p))
}

// Schedulers of a VIP.
const (
	Maglev = "maglev" // the table follows the configured weights (the default)
	WLC    = "wlc"    // the table is re-weighted from active flow counts every Options.Interval
)

// VIP is a virtual service: IPv4 address, port and protocol, and how it places new flows.
type VIP struct {
	Addr      netip.Addr
	Port      uint16
	Proto     Proto
	Scheduler string // Maglev (or "") or WLC
	// SourceHash places new flows by client address alone (balance.SourceHash), so that one
	// client's connections all reach the same real server.
	SourceHash bool
}

func (v VIP) String() string {
	return fmt.Sprintf("%s/%s", netip.AddrPortFrom(v.Addr, v.Port), v.Proto)
}

// Real is one real server of a VIP. Real servers serve the VIP's port.
type Real struct {
	Addr   netip.Addr
	Weight int  // 0 drains: no new flows, established ones stay
	Down   bool // administratively down: no new flows, established ones stay
	// MAC is the next hop towards the real server (DR, TUN); empty resolves it from the
	// neighbour table of the director's interface.
	MAC net.HardwareAddr
}

type vipKey struct {
	addr  netip.Addr
	port  uint16
	proto Proto
}

func (v VIP) key() vipKey { return vipKey{v.Addr, v.Port, v.Proto} }

func (k vipKey) bpf() directorVipKey {
	return directorVipKey{Addr: be32(k.addr), Port: htons(k.port), Proto: uint8(k.proto)}
}

type vipState struct {
	vip      VIP
	id       uint32
	reals    []Real
	table    []uint32       // real IDs the ring holds for this VIP (nil: all zero)
	second   []uint32       // second chance: the real ID each slot held before its last change
	weights  map[uint32]int // weights the table was built from, by real ID
	ringSize uint32         // 0: no usable real server
	active   map[uint32]int // active flows by real ID at the last count
}

type realState struct {
	addr    netip.Addr
	id      uint32
	mac     net.HardwareAddr
	static  bool // mac was given, not resolved
	healthy bool
	written directorRealDef
	stopHC  func()
}

// state is everything the worker goroutine owns.
type state struct {
	d      *Director
	vips   map[vipKey]*vipState
	vipIDs []bool // in use, by VIP ID
	reals  map[netip.Addr]*realState
	byID   map[uint32]*realState
	freeID []uint32
	nextID uint32
	guard  map[guardRule]bool // NAT guard rules in force (guard.go)
}

func (s *state) init(d *Director) {
	s.d = d
	s.vips = map[vipKey]*vipState{}
	s.vipIDs = make([]bool, d.opts.MaxVIPs)
	s.reals = map[netip.Addr]*realState{}
	s.byID = map[uint32]*realState{}
	s.nextID = 1 // 0 means "no real server" to the BPF program
}

func (v VIP) validate() error {
	switch {
	case !v.Addr.Is4():
		return fmt.Errorf("director: VIP %s: only IPv4 addresses are supported", v.Addr)
	case v.Port == 0:
		return fmt.Errorf("director: VIP %s: port 0", v)
	case v.Proto != TCP && v.Proto != UDP:
		return fmt.Errorf("director: VIP %s: protocol must be tcp or udp", v)
	case v.Scheduler != "" && v.Scheduler != Maglev && v.Scheduler != WLC:
		return fmt.Errorf("director: VIP %s: scheduler %q (want maglev or wlc)", v, v.Scheduler)
	}
	return nil
}

// SetVIP adds a VIP or replaces its real servers. Only the table slots that change are
// written; established flows keep their real server.
func (d *Director) SetVIP(v VIP, reals []Real) error {
	if err := v.validate(); err != nil {
		return err
	}
	seen := map[netip.Addr]bool{}
	for _, r := range reals {
		switch {
		case !r.Addr.Is4():
			return fmt.Errorf("director: VIP %s: real server %s: only IPv4 is supported", v, r.Addr)
		case r.Weight < 0:
			return fmt.Errorf("director: VIP %s: real server %s: weight %d (want ≥ 0)", v, r.Addr, r.Weight)
		case seen[r.Addr]:
			return fmt.Errorf("director: VIP %s: real server %s listed twice", v, r.Addr)
		case len(r.MAC) != 0 && len(r.MAC) != 6:
			return fmt.Errorf("director: VIP %s: real server %s: MAC %s is not Ethernet", v, r.Addr, r.MAC)
		}
		seen[r.Addr] = true
	}
	reals = slices.Clone(reals)
	return d.do(func() error {
		err := d.st.setVIP(v, reals)
		d.st.syncGuard()
		return err
	})
}

// RemoveVIP stops balancing v; its packets pass to the kernel from then on.
func (d *Director) RemoveVIP(v VIP) error {
	return d.do(func() error {
		vs := d.st.vips[v.key()]
		if vs == nil {
			return fmt.Errorf("director: no VIP %s", v)
		}
		k := v.key().bpf()
		if err := d.objs.Vips.Delete(&k); err != nil {
			return fmt.Errorf("director: removing VIP %s: %w", v, err)
		}
		delete(d.st.vips, v.key())
		d.st.vipIDs[vs.id] = false
		d.st.syncGuard()
		return nil
	})
}

func (s *state) setVIP(v VIP, reals []Real) error {
	vs := s.vips[v.key()]
	fresh := vs == nil
	if fresh {
		id := slices.Index(s.vipIDs, false)
		if id < 0 {
			return fmt.Errorf("director: VIP %s: all %d VIP slots in use (Options.MaxVIPs)", v, len(s.vipIDs))
		}
		zero := make([]directorTraffic, ebpf.MustPossibleCPU())
		if err := s.d.objs.VipStats.Put(uint32(id), zero); err != nil {
			return fmt.Errorf("director: VIP %s: %w", v, err)
		}
		vs = &vipState{id: uint32(id)}
	}
	for _, r := range reals {
		if _, err := s.ensureReal(r, v.Port); err != nil {
			return fmt.Errorf("director: VIP %s: %w", v, err)
		}
	}
	if fresh {
		s.vipIDs[vs.id] = true
		s.vips[v.key()] = vs
	}
	vs.vip, vs.reals = v, reals
	return s.rebuild(vs)
}

// ensureReal gives r's address its stable ID and map entry, resolving its next hop.
func (s *state) ensureReal(r Real, port uint16) (*realState, error) {
	rs := s.reals[r.Addr]
	if rs == nil {
		var id uint32
		if n := len(s.freeID); n > 0 {
			id, s.freeID = s.freeID[n-1], s.freeID[:n-1]
		} else {
			if int(s.nextID) > s.d.opts.MaxReals {
				return nil, fmt.Errorf("real server %s: all %d real server IDs in use (Options.MaxReals)", r.Addr, s.d.opts.MaxReals)
			}
			id = s.nextID
			s.nextID++
		}
		rs = &realState{addr: r.Addr, id: id, healthy: true}
		s.reals[r.Addr], s.byID[id] = rs, rs
		zero := make([]directorTraffic, ebpf.MustPossibleCPU())
		if err := s.d.objs.RealStats.Put(id, zero); err != nil {
			return nil, err
		}
		s.startHealth(rs, port)
	}
	if len(r.MAC) == 6 {
		rs.mac, rs.static = slices.Clone(r.MAC), true
	} else if rs.static {
		rs.mac, rs.static = nil, false
	}
	if s.d.opts.Mode != NAT && !rs.static && rs.mac == nil {
		mac, err := s.d.nextHopMAC(r.Addr, true)
		if err != nil {
			s.d.opts.Logger.Warn("director: real server next hop unresolved", "real", r.Addr, "err", err)
		}
		rs.mac = mac
	}
	return rs, s.writeReal(rs)
}

func (s *state) writeReal(rs *realState) error {
	def := directorRealDef{Addr: be32(rs.addr)}
	copy(def.Mac[:], rs.mac)
	if !rs.healthy {
		def.Flags = realFlagDown
	}
	if def == rs.written {
		return nil
	}
	if err := s.d.objs.Reals.Put(rs.id, def); err != nil {
		return fmt.Errorf("real server %s: %w", rs.addr, err)
	}
	rs.written = def
	return nil
}

const (
	realFlagDown        = 1 // REAL_F_DOWN
	vipFlagDownMove     = 1 // VIP_F_DOWN_MOVE
	vipFlagSourceHash   = 2 // VIP_F_SOURCE_HASH
	connFlagClosing     = 1 // CONN_F_CLOSING
	cfgFlagFlowEvents   = 1 // CFG_F_FLOW_EVENTS
	cfgFlagOwnMAC       = 2 // CFG_F_OWN_MAC
	cfgFlagSecondChance = 4 // CFG_F_SECOND_CHANCE
)

// usable says whether r may take new flows of a VIP.
func (s *state) usable(r Real) bool {
	rs := s.reals[r.Addr]
	return r.Weight > 0 && !r.Down && rs.healthy && (s.d.opts.Mode == NAT || rs.mac != nil)
}

// weight is r's weight in vs's table: the configured one, or for wlc the effective one.
func (s *state) weight(vs *vipState, r Real) int {
	if vs.vip.Scheduler != WLC {
		return r.Weight
	}
	return wlcWeight(r.Weight, vs.active[s.reals[r.Addr].id])
}

// rebuild computes vs's table from its usable real servers and writes what changed.
func (s *state) rebuild(vs *vipState) error {
	var ids []string
	var weights []int
	var realIDs []uint32
	used := map[uint32]int{}
	for _, r := range vs.reals {
		if !s.usable(r) {
			continue
		}
		rs := s.reals[r.Addr]
		w := s.weight(vs, r)
		ids = append(ids, tableKey(s.d.opts.Seed, r.Addr))
		weights = append(weights, w)
		realIDs = append(realIDs, rs.id)
		used[rs.id] = w
	}
	size := uint32(0)
	if len(ids) > 0 {
		pos, err := balance.MaglevTable(ids, weights, s.d.opts.TableSize)
		if err != nil {
			return fmt.Errorf("director: VIP %s: %w", vs.vip, err)
		}
		table := make([]uint32, len(pos))
		for i, p := range pos {
			table[i] = realIDs[p]
		}
		if err := s.writeTable(vs, table); err != nil {
			return err
		}
		size = uint32(len(table))
	}
	meta := directorVipMeta{Id: vs.id, RingBase: vs.id * uint32(s.d.opts.TableSize), RingSize: size, Mode: uint8(s.d.opts.Mode)}
	if s.d.opts.MoveDownFlows {
		meta.Flags |= vipFlagDownMove
	}
	if vs.vip.SourceHash {
		meta.Flags |= vipFlagSourceHash
	}
	k := vs.vip.key().bpf()
	if err := s.d.objs.Vips.Put(&k, &meta); err != nil {
		return fmt.Errorf("director: VIP %s: %w", vs.vip, err)
	}
	if size == 0 && vs.ringSize != 0 {
		s.d.opts.Logger.Warn("director: VIP has no usable real server; its packets are dropped", "vip", vs.vip.String())
	}
	vs.ringSize, vs.weights = size, used
	return nil
}

// writeTable writes only the slots of table that differ from what the ring holds.
func (s *state) writeTable(vs *vipState, table []uint32) error {
	base := vs.id * uint32(s.d.opts.TableSize)
	var keys, vals []uint32
	for i, id := range table {
		if vs.table == nil || vs.table[i] != id {
			keys = append(keys, base+uint32(i))
			vals = append(vals, id)
		}
	}
	if err := s.writeSecond(vs, table); err != nil {
		return err
	}
	if len(keys) > 0 {
		n, err := s.d.objs.Ring.BatchUpdate(keys, vals, nil)
		if errors.Is(err, ebpf.ErrNotSupported) {
			for i := range keys {
				if err = s.d.objs.Ring.Put(keys[i], vals[i]); err != nil {
					break
				}
			}
			n = len(keys)
		}
		if err != nil {
			// The ring now holds an unknown mix: write everything next time.
			vs.table = nil
			return fmt.Errorf("director: VIP %s: writing table: %w", vs.vip, err)
		}
		s.d.tableWrites.Add(uint64(n))
	}
	vs.table = table
	return nil
}

// writeSecond keeps, for every slot whose real server changes from one to another, the one
// it had (GLB's second chance: the previous owner may hold the slot's established flows),
// and writes the secondaries that changed. A slot that gets its secondary back as primary,
// or whose table is built for the first time, has none.
func (s *state) writeSecond(vs *vipState, table []uint32) error {
	if vs.second == nil {
		vs.second = make([]uint32, len(table))
	}
	base := vs.id * uint32(s.d.opts.TableSize)
	var keys, vals []uint32
	for i, id := range table {
		sec := vs.second[i]
		if vs.table != nil && vs.table[i] != 0 && vs.table[i] != id {
			sec = vs.table[i]
		}
		if sec == id {
			sec = 0
		}
		if sec != vs.second[i] {
			keys, vals = append(keys, base+uint32(i)), append(vals, sec)
			vs.second[i] = sec
		}
	}
	if len(keys) == 0 {
		return nil
	}
	if _, err := s.d.objs.RingSecond.BatchUpdate(keys, vals, nil); err != nil {
		for i := range keys {
			if err := s.d.objs.RingSecond.Put(keys[i], vals[i]); err != nil {
				return fmt.Errorf("director: VIP %s: writing second-chance table: %w", vs.vip, err)
			}
		}
	}
	return nil
}

// rebuildWith rebuilds every VIP that lists addr.
func (s *state) rebuildWith(addr netip.Addr) {
	for _, vs := range s.vips {
		if slices.ContainsFunc(vs.reals, func(r Real) bool { return r.Addr == addr }) {
			if err := s.rebuild(vs); err != nil {
				s.d.opts.Logger.Error("director: rebuilding table", "vip", vs.vip.String(), "err", err)
			}
		}
	}
}
