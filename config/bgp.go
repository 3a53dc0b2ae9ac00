package config

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// BGP makes this instance one of several active directors behind routers that spread the VIPs'
// flows over them by ECMP (docs/scale-out.md): it peers with the routers and announces every
// director VIP as a host route while the VIP has a usable real server, and withdraws it
// otherwise and before it stops.
type BGP struct {
	// ASN is this director's autonomous system number.
	ASN int64 `yaml:"asn"`
	// RouterID is the BGP identifier, an IPv4 address unique among the speakers.
	RouterID string `yaml:"router_id"`
	// ListenPort is where incoming sessions are accepted; -1 (the default) accepts none: the
	// director opens its sessions itself.
	ListenPort int `yaml:"listen_port"`
	// Peers are the routers.
	Peers []BGPPeer `yaml:"peers"`
	// Announce says what is announced: vips, every director listener's address as a /32.
	Announce string `yaml:"announce"`
	// Communities are attached to every announced route, "ASN:VALUE".
	Communities []string `yaml:"communities,omitempty"`
	// MED is the multi-exit discriminator of every announced route.
	MED int64 `yaml:"med"`
	// WithdrawWait is how long a stopping director keeps forwarding after it withdrew its
	// routes, for the routers to move the flows, before the planes drain.
	WithdrawWait Duration `yaml:"withdraw_wait"`
	// HoldTime is the BGP hold time offered (keepalives every third of it); a dead director
	// without BFD is found by the routers after this long.
	HoldTime Duration `yaml:"hold_time"`
	// BFDInterval and BFDMultiplier are the BFD timers of the peers with bfd: control packets
	// every interval, a session down after multiplier intervals without one.
	BFDInterval   Duration `yaml:"bfd_interval"`
	BFDMultiplier int      `yaml:"bfd_multiplier"`
	// ClusterSeed makes this cluster's Maglev tables its own; every director of the cluster
	// must have the same seed (and the same backends) to place a flow the same way.
	ClusterSeed int64 `yaml:"cluster_seed"`
	// FlowSync shares the flows each director places with the other directors, so that a
	// flow keeps its real server on whichever director its packets reach next.
	FlowSync *BGPFlowSync `yaml:"flow_sync,omitempty"`
	// SecondChance (DR) is GLB's second chance: a flow picked up established on a table slot
	// whose real server changed is sent with the slot's previous real server named in the
	// frame, and a real server with no connection for it (`ballast realserver
	// --second-chance`) passes it there.
	SecondChance bool `yaml:"second_chance"`
}

// BGPPeer is one router.
type BGPPeer struct {
	Address string `yaml:"address"`
	ASN     int64  `yaml:"asn"`
	// BFD runs a BFD session with the router (its bfdd must have one for this director).
	BFD bool `yaml:"bfd"`
}

// BGPFlowSync names the other directors of the cluster.
type BGPFlowSync struct {
	Peers []string `yaml:"peers"`
	Port  int      `yaml:"port"`
}

// Defaults of the bgp section.
const (
	DefaultBGPListenPort    = -1
	DefaultBGPAnnounce      = "vips"
	DefaultWithdrawWait     = 2 * time.Second
	DefaultBGPHoldTime      = 9 * time.Second
	DefaultBFDInterval      = 300 * time.Millisecond
	DefaultBFDMultiplier    = 3
	maxWithdrawWait         = 5 * time.Minute
	minBGPHoldTime          = 3 * time.Second
	maxBGPHoldTime          = 65535 * time.Second
	minBFDInterval          = 10 * time.Millisecond
	maxBFDInterval          = 10 * time.Second
	maxBGPMED               = 1<<32 - 1
	bgpAnnounceValidChoices = "vips"
)

func (d *decoder) bgpDefaults(c *Config) {
	b := c.BGP
	if b == nil {
		return
	}
	if !d.has("bgp.listen_port", b.ListenPort != 0) {
		b.ListenPort = DefaultBGPListenPort
	}
	if b.Announce == "" {
		b.Announce = DefaultBGPAnnounce
	}
	if !d.has("bgp.withdraw_wait", b.WithdrawWait.Duration != 0) {
		b.WithdrawWait.Duration = DefaultWithdrawWait
	}
	if b.HoldTime.Duration == 0 {
		b.HoldTime.Duration = DefaultBGPHoldTime
	}
	if b.BFDInterval.Duration == 0 {
		b.BFDInterval.Duration = DefaultBFDInterval
	}
	if b.BFDMultiplier == 0 {
		b.BFDMultiplier = DefaultBFDMultiplier
	}
	if fs := b.FlowSync; fs != nil && fs.Port == 0 {
		fs.Port = DefaultFlowSyncPort
	}
}

func (d *decoder) validateBGP(c *Config, fail func(path, format string, args ...any)) {
	b := c.BGP
	if b == nil {
		return
	}
	if b.ASN < 1 || b.ASN > maxBGPMED {
		fail("bgp.asn", "bgp needs this director's AS number (1-4294967295), e.g. asn: 65010")
	}
	if b.ClusterSeed < 0 || b.ClusterSeed > maxBGPMED {
		fail("bgp.cluster_seed", "must be 0-4294967295 (the same on every director of the cluster), got %d", b.ClusterSeed)
	}
	if a, err := netip.ParseAddr(b.RouterID); err != nil || !a.Is4() || a.IsUnspecified() {
		fail("bgp.router_id", "the router ID is an IPv4 address unique among the BGP speakers, such as 10.0.0.2, got %q", b.RouterID)
	}
	if b.ListenPort != -1 && (b.ListenPort < 1 || b.ListenPort > 65535) {
		fail("bgp.listen_port", "must be -1 (accept no incoming session) or a TCP port 1-65535, got %d", b.ListenPort)
	}
	if len(b.Peers) == 0 {
		fail("bgp.peers", "bgp needs at least one router to peer with, e.g. peers: [{address: 10.0.0.1, asn: 65000}]")
	}
	seen := map[netip.Addr]bool{}
	for i, p := range b.Peers {
		pp := fmt.Sprintf("bgp.peers[%d]", i)
		a, err := netip.ParseAddr(p.Address)
		switch {
		case err != nil || a.IsUnspecified() || a.IsMulticast() || a.IsLoopback() || a.Zone() != "":
			fail(pp+".address", "a router's IP address such as 10.0.0.1, got %q", p.Address)
		case seen[a]:
			fail(pp+".address", "router %s is listed twice", a)
		}
		seen[a] = true
		if p.ASN < 1 || p.ASN > maxBGPMED {
			fail(pp+".asn", "the router's AS number (1-4294967295), e.g. asn: 65000")
		}
	}
	if b.Announce != "vips" {
		fail("bgp.announce", "unknown announcement %q (valid: %s)", b.Announce, bgpAnnounceValidChoices)
	}
	for i, s := range b.Communities {
		if _, err := ParseCommunity(s); err != nil {
			fail(fmt.Sprintf("bgp.communities[%d]", i), "%v", err)
		}
	}
	if b.MED < 0 || b.MED > maxBGPMED {
		fail("bgp.med", "must be 0-%d, got %d", int64(maxBGPMED), b.MED)
	}
	if w := b.WithdrawWait.Duration; w < 0 || w > maxWithdrawWait {
		fail("bgp.withdraw_wait", "must be 0 to %v, got %v", maxWithdrawWait, w)
	}
	if h := b.HoldTime.Duration; h < minBGPHoldTime || h > maxBGPHoldTime || h%time.Second != 0 {
		fail("bgp.hold_time", "must be whole seconds from %v to %v (BGP counts seconds), got %v", minBGPHoldTime, maxBGPHoldTime, h)
	}
	if iv := b.BFDInterval.Duration; iv < minBFDInterval || iv > maxBFDInterval || iv%time.Millisecond != 0 {
		fail("bgp.bfd_interval", "must be whole milliseconds from %v to %v, got %v", minBFDInterval, maxBFDInterval, iv)
	}
	if b.BFDMultiplier < 1 || b.BFDMultiplier > 255 {
		fail("bgp.bfd_multiplier", "must be 1-255, got %d", b.BFDMultiplier)
	}
	if fs := b.FlowSync; fs != nil {
		if len(fs.Peers) == 0 {
			fail("bgp.flow_sync.peers", "flow sync needs the other directors' addresses, e.g. peers: [10.0.0.3, 10.0.0.4]")
		}
		ps := map[netip.Addr]bool{}
		for i, s := range fs.Peers {
			p := fmt.Sprintf("bgp.flow_sync.peers[%d]", i)
			a, err := netip.ParseAddr(s)
			switch {
			case err != nil || !a.Is4() || a.IsUnspecified() || a.IsMulticast() || a.IsLoopback():
				fail(p, "another director's IPv4 address such as 10.0.0.3, got %q", s)
			case ps[a]:
				fail(p, "peer %s is listed twice", a)
			}
			ps[a] = true
		}
		if fs.Port < 1 || fs.Port > 65535 {
			fail("bgp.flow_sync.port", "must be a UDP port 1-65535, got %d", fs.Port)
		}
	}
	if b.SecondChance {
		for i, l := range c.Listeners {
			if l.IsDirector() && l.Forwarding != "dr" {
				fail(fmt.Sprintf("listeners[%d].forwarding", i), "bgp.second_chance names the previous real server in a DR frame: every director listener must forward dr, got %s", l.Forwarding)
			}
		}
	}
	if c.HA != nil {
		fail("bgp", "bgp (several active directors behind routers) and ha (one master holding the addresses) exclude each other: keep one")
	}
	directors := 0
	for i, l := range c.Listeners {
		if !l.IsDirector() {
			continue
		}
		directors++
		for _, r := range c.Routes {
			if r.Listener != "" && r.Listener != l.Name {
				continue
			}
			for _, pc := range c.Pools {
				if pc.Name == r.Pool && pc.Balancer == "wlc" {
					fail(fmt.Sprintf("listeners[%d]", i), "with bgp every director must place a flow the same way: pool %s's balancer wlc weighs by each director's own flow counts; use maglev", pc.Name)
				}
			}
			break
		}
	}
	if directors == 0 {
		fail("bgp", "bgp announces the director VIPs, and no listener has forwarding (dr, tun or nat)")
	}
}

// ParseCommunity reads a BGP community, "ASN:VALUE" with two 16-bit numbers.
func ParseCommunity(s string) (uint32, error) {
	a, v, ok := strings.Cut(s, ":")
	x, err1 := strconv.ParseUint(a, 10, 16)
	y, err2 := strconv.ParseUint(v, 10, 16)
	if !ok || err1 != nil || err2 != nil {
		return 0, fmt.Errorf("a community is two 16-bit numbers, ASN:VALUE such as 65010:100, got %q", s)
	}
	return uint32(x)<<16 | uint32(y), nil
}

// BGPVIPs are the addresses bgp announces: every director listener's, once, in order.
func (c *Config) BGPVIPs() []netip.Addr {
	var out []netip.Addr
	for _, l := range c.Listeners {
		ap, err := netip.ParseAddrPort(l.Address)
		if !l.IsDirector() || err != nil {
			continue
		}
		dup := false
		for _, a := range out {
			dup = dup || a == ap.Addr()
		}
		if !dup {
			out = append(out, ap.Addr())
		}
	}
	return out
}
