package director

import (
	"fmt"
	"net/netip"
	"slices"
)

// counterNames name the BPF program's enum counter, in its order.
var counterNames = []string{
	"pass_not_ipv4",   // not IPv4 (ARP, IPv6, VLAN-tagged)
	"pass_truncated",  // a header shorter than it must be, or longer than the frame
	"pass_ip_options", // IPv4 options (IHL > 5)
	"pass_fragment",   // a fragment (MF set or offset > 0)
	"pass_not_l4",     // neither TCP nor UDP
	"pass_ttl",        // TTL ≤ 1
	"pass_not_vip",    // not to a VIP's address, port and protocol (nor a NAT reply)
	"drop_no_real",    // to a VIP with no usable real server
	"drop_encap",      // TUN encapsulation failed (no headroom)
	"pass_no_neigh",   // NAT: next hop MAC unknown; passed on unchanged to the tc program
	"pass_no_route",   // NAT: no route to the real server or client
	"nat_reply",       // NAT: a real server's reply rewritten back to the VIP
	"pass_too_big",    // NAT: larger than the egress MTU (GSO, GRO); passed on unchanged to the tc program
	"tc_nat",          // NAT: rewritten and sent by the tc program (the two above)
	"tc_drop_too_big", // NAT: larger than the egress MTU and not a GSO packet; dropped by the tc program
	"flow_event_lost", // flow sync: a new flow not reported (the event ring was full)
	"pass_other_host", // Options.OwnMACOnly: a VIP's frame sent to another host's MAC (flooded by a switch)
	"second_chance",   // Options.SecondChance: a DR frame sent with its second-chance real server's address
}

// Counters returns the program's packet counters by name (see counterNames in stats.go and
// docs/xdp.md): why packets were passed to the kernel or dropped, summed over CPUs.
func (d *Director) Counters() (map[string]uint64, error) {
	out := make(map[string]uint64, len(counterNames))
	for i, name := range counterNames {
		var per []uint64
		if err := d.objs.Counters.Lookup(uint32(i), &per); err != nil {
			return nil, fmt.Errorf("director: counters: %w", err)
		}
		var sum uint64
		for _, v := range per {
			sum += v
		}
		out[name] = sum
	}
	return out, nil
}

// Real server states in Stats.
const (
	StateUp         = "up"
	StateDown       = "down"       // failing health checks
	StateDisabled   = "disabled"   // Real.Down
	StateDrain      = "drain"      // weight 0
	StateUnresolved = "unresolved" // next-hop MAC unknown (DR, TUN)
)

// Traffic is what the program counted for a VIP or a real server. For a real server it is
// summed over every VIP it serves; replies rewritten in NAT mode are not counted.
type Traffic struct {
	Packets  uint64
	Bytes    uint64
	NewFlows uint64
	Drops    uint64 // packets to the VIP dropped because no real server was usable
}

// VIPStats describes one VIP.
type VIPStats struct {
	VIP VIP
	Traffic
	ActiveFlows int // flows seen within Options.ActiveTimeout and not closed
	Reals       []RealStats
}

// RealStats describes one real server of a VIP.
type RealStats struct {
	Addr   netip.Addr
	ID     uint32 // the stable ID the BPF maps know it by
	State  string
	Weight int // as configured
	// EffectiveWeight is the weight its table share was built from (wlc: re-weighted by
	// active flows); 0 when it takes no new flows.
	EffectiveWeight int
	Slots           int // Maglev table slots it holds
	Traffic
	ActiveFlows int
}

// Stats returns every VIP's counters and real servers, sorted by VIP. Active flows are
// counted from the connection table at the call.
func (d *Director) Stats() ([]VIPStats, error) {
	var out []VIPStats
	err := d.do(func() error {
		active, _ := d.countFlows()
		s := &d.st
		for k, vs := range s.vips {
			t, err := d.traffic(d.objs.VipStats, vs.id)
			if err != nil {
				return err
			}
			st := VIPStats{VIP: vs.vip, Traffic: t}
			slots := map[uint32]int{}
			if vs.ringSize > 0 {
				for _, id := range vs.table {
					slots[id]++
				}
			}
			for _, r := range vs.reals {
				rs := s.reals[r.Addr]
				rt, err := d.traffic(d.objs.RealStats, rs.id)
				if err != nil {
					return err
				}
				rst := RealStats{
					Addr: r.Addr, ID: rs.id, State: s.stateOf(r), Weight: r.Weight,
					EffectiveWeight: vs.weights[rs.id], Slots: slots[rs.id],
					Traffic: rt, ActiveFlows: active[k][rs.id],
				}
				st.ActiveFlows += rst.ActiveFlows
				st.Reals = append(st.Reals, rst)
			}
			out = append(out, st)
		}
		return nil
	})
	slices.SortFunc(out, func(a, b VIPStats) int {
		if c := a.VIP.Addr.Compare(b.VIP.Addr); c != 0 {
			return c
		}
		if a.VIP.Port != b.VIP.Port {
			return int(a.VIP.Port) - int(b.VIP.Port)
		}
		return int(a.VIP.Proto) - int(b.VIP.Proto)
	})
	return out, err
}

func (s *state) stateOf(r Real) string {
	rs := s.reals[r.Addr]
	switch {
	case !rs.healthy:
		return StateDown
	case r.Down:
		return StateDisabled
	case r.Weight == 0:
		return StateDrain
	case s.d.opts.Mode != NAT && rs.mac == nil:
		return StateUnresolved
	}
	return StateUp
}

func (d *Director) traffic(m interface {
	Lookup(key, valueOut any) error
}, id uint32) (Traffic, error) {
	var per []directorTraffic
	if err := m.Lookup(id, &per); err != nil {
		return Traffic{}, fmt.Errorf("director: stats: %w", err)
	}
	var t Traffic
	for _, c := range per {
		t.Packets += c.Packets
		t.Bytes += c.Bytes
		t.NewFlows += c.NewFlows
		t.Drops += c.Drops
	}
	return t, nil
}
