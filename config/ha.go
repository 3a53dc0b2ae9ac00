package config

import (
	"fmt"
	"net/netip"
	"strings"
	"time"
)

// HA makes this instance one director of a VRRPv3 virtual router with others (docs/ha.md):
// the master holds the addresses that move (every director VIP, the addresses of the other
// listeners, Addresses), the backups stand by with their listeners bound.
type HA struct {
	// Interface is where adverts are sent and the addresses are announced and answered for.
	Interface string `yaml:"interface"`
	// VirtualRouterID is the VRID, 1-255, the same on every director of the group.
	VirtualRouterID int `yaml:"virtual_router_id"`
	// Priority is 1-254: the highest usable director is master.
	Priority int `yaml:"priority"`
	// AdvertInterval is VRRPv3's, in centiseconds: 10ms to 40.95s.
	AdvertInterval Duration `yaml:"advert_interval"`
	// Preempt lets a recovered higher-priority director take over again; false: it waits.
	Preempt      bool     `yaml:"preempt"`
	PreemptDelay Duration `yaml:"preempt_delay"`
	// UnicastPeers are the other directors' addresses; none: multicast 224.0.0.18.
	UnicastPeers []string `yaml:"unicast_peers,omitempty"`
	// Addresses move with mastership besides the listeners' (a NAT gateway, say): IPv4 host
	// addresses, written A.B.C.D/32 or A.B.C.D.
	Addresses []string `yaml:"addresses,omitempty"`
	// TrackPools: a director with no usable backend for a listener whose address moves, or
	// whose interface is down, steps down (fault) until it is healthy again.
	TrackPools bool `yaml:"track_pools"`
	// Checksum is the IPv4 advert checksum form: pseudo-header (keepalived's, the default)
	// or message-only.
	Checksum string `yaml:"checksum"`
	// FlowSync sends the master's new director flows to the other directors (UDP to
	// FlowSyncPort of each unicast peer, or of the multicast group 224.0.0.81), which install
	// them, so that established flows keep their real server through a failover.
	FlowSync     bool `yaml:"flow_sync"`
	FlowSyncPort int  `yaml:"flow_sync_port"`
}

// Defaults of the ha section.
const (
	DefaultAdvertInterval = time.Second
	DefaultHAChecksum     = "pseudo-header"
	DefaultFlowSyncPort   = 8848 // LVS's sync daemon's
	maxPreemptDelay       = time.Hour
)

var haChecksums = []string{"pseudo-header", "message-only"}

func (d *decoder) haDefaults(c *Config) {
	h := c.HA
	if h == nil {
		return
	}
	if !d.has("ha.advert_interval", h.AdvertInterval.Duration != 0) {
		h.AdvertInterval.Duration = DefaultAdvertInterval
	}
	if !d.has("ha.preempt", h.Preempt) {
		h.Preempt = true
	}
	if !d.has("ha.track_pools", h.TrackPools) {
		h.TrackPools = true
	}
	if h.Checksum == "" {
		h.Checksum = DefaultHAChecksum
	}
	if !d.has("ha.flow_sync", h.FlowSync) {
		h.FlowSync = true
	}
	if !d.has("ha.flow_sync_port", h.FlowSyncPort != 0) {
		h.FlowSyncPort = DefaultFlowSyncPort
	}
}

func (d *decoder) validateHA(c *Config, fail func(path, format string, args ...any)) {
	h := c.HA
	if h == nil {
		return
	}
	if h.Interface == "" {
		fail("ha.interface", "ha needs the interface adverts are sent on and addresses announced on, e.g. interface: eth0")
	}
	if h.VirtualRouterID < 1 || h.VirtualRouterID > 255 {
		fail("ha.virtual_router_id", "must be 1-255 (the same on every director of the group), got %d", h.VirtualRouterID)
	}
	if h.Priority < 1 || h.Priority > 254 {
		fail("ha.priority", "must be 1-254 (the highest usable director is master), got %d", h.Priority)
	}
	if iv := h.AdvertInterval.Duration; iv < 10*time.Millisecond || iv > 4095*10*time.Millisecond || iv%(10*time.Millisecond) != 0 {
		fail("ha.advert_interval", "must be a multiple of 10ms from 10ms to 40.95s (VRRPv3 counts centiseconds), got %v", iv)
	}
	if h.PreemptDelay.Duration > maxPreemptDelay {
		fail("ha.preempt_delay", "must be at most %v, got %v", maxPreemptDelay, h.PreemptDelay.Duration)
	}
	if h.PreemptDelay.Duration > 0 && !h.Preempt {
		fail("ha.preempt_delay", "preempt_delay delays preemption, which preempt: false turns off; set preempt: true or leave preempt_delay out")
	}
	peers := map[netip.Addr]bool{}
	for i, s := range h.UnicastPeers {
		p := fmt.Sprintf("ha.unicast_peers[%d]", i)
		a, err := netip.ParseAddr(s)
		switch {
		case err != nil || !a.Is4() || a.IsUnspecified() || a.IsMulticast() || a.IsLoopback():
			fail(p, "a unicast peer is another director's IPv4 address such as 10.0.0.3, got %q", s)
		case peers[a]:
			fail(p, "peer %s is listed twice", a)
		}
		peers[a] = true
	}
	seen := map[netip.Addr]bool{}
	for i, s := range h.Addresses {
		p := fmt.Sprintf("ha.addresses[%d]", i)
		a, err := parseHostAddr(s)
		switch {
		case err != nil:
			fail(p, "%v", err)
		case seen[a]:
			fail(p, "address %s is listed twice", a)
		}
		seen[a] = true
	}
	if !oneOf(h.Checksum, haChecksums) {
		fail("ha.checksum", "unknown checksum form %q (valid: %s)", h.Checksum, strings.Join(haChecksums, ", "))
	}
	if h.FlowSyncPort < 1 || h.FlowSyncPort > 65535 {
		fail("ha.flow_sync_port", "must be a UDP port 1-65535, got %d", h.FlowSyncPort)
	}
	for i, l := range c.Listeners {
		if l.IsDirector() && l.Interface != "" && h.Interface != "" && l.Interface != h.Interface {
			fail(fmt.Sprintf("listeners[%d].interface", i), "with ha, the VIPs are announced on ha.interface %s: a director listener attaches there too (valid: %s), got %s", h.Interface, h.Interface, l.Interface)
		}
	}
}

// parseHostAddr reads an IPv4 host address, A.B.C.D or A.B.C.D/32.
func parseHostAddr(s string) (netip.Addr, error) {
	if p, err := netip.ParsePrefix(s); err == nil {
		if !p.Addr().Is4() || p.Bits() != 32 {
			return netip.Addr{}, fmt.Errorf("an address that moves is an IPv4 host address such as 10.0.0.100/32, got %q", s)
		}
		return p.Addr(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil || !a.Is4() || a.IsUnspecified() || a.IsLoopback() || a.IsMulticast() {
		return netip.Addr{}, fmt.Errorf("an address that moves is an IPv4 host address such as 10.0.0.100/32, got %q", s)
	}
	return a, nil
}

// HAAddresses are what moves with mastership: Local addresses are the listeners' (every
// listener bound to a specific IPv4 address other than loopback, http, tcp or udp) and
// ha.addresses, which the master holds; Answer addresses are the director VIPs, which the
// master only answers ARP for (the XDP director takes their packets). Nil without ha.
func (c *Config) HAAddresses() (local, answer []netip.Addr) {
	if c.HA == nil {
		return nil, nil
	}
	add := func(list []netip.Addr, a netip.Addr) []netip.Addr {
		for _, x := range list {
			if x == a {
				return list
			}
		}
		return append(list, a)
	}
	for _, l := range c.Listeners {
		ap, err := netip.ParseAddrPort(l.Address)
		if err != nil || !ap.Addr().Is4() || ap.Addr().IsUnspecified() || ap.Addr().IsLoopback() {
			continue
		}
		if l.IsDirector() {
			answer = add(answer, ap.Addr())
		} else {
			local = add(local, ap.Addr())
		}
	}
	for _, s := range c.HA.Addresses {
		if a, err := parseHostAddr(s); err == nil {
			local = add(local, a)
		}
	}
	return local, answer
}

// HAPeers are ha.unicast_peers as addresses.
func (h *HA) HAPeers() []netip.Addr {
	var out []netip.Addr
	for _, s := range h.UnicastPeers {
		if a, err := netip.ParseAddr(s); err == nil {
			out = append(out, a)
		}
	}
	return out
}
