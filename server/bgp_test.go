package server

import (
	"testing"
	"time"

	"ballast/config"
)

// TestBGPFixedChanged: what a reload may change in bgp (withdraw_wait) and what needs a
// restart, each named.
func TestBGPFixedChanged(t *testing.T) {
	base := func() *config.BGP {
		return &config.BGP{ASN: 65010, RouterID: "10.0.0.2", ListenPort: -1,
			Peers:    []config.BGPPeer{{Address: "10.0.0.1", ASN: 65000, BFD: true}},
			HoldTime: config.Duration{Duration: 9 * time.Second}, BFDInterval: config.Duration{Duration: 100 * time.Millisecond}, BFDMultiplier: 3,
			Communities: []string{"65010:100"}, ClusterSeed: 7, FlowSync: &config.BGPFlowSync{Peers: []string{"10.0.0.3"}, Port: 8848},
			WithdrawWait: config.Duration{Duration: 2 * time.Second}}
	}
	cases := []struct {
		name   string
		change func(b *config.BGP)
		want   string
	}{
		{"nothing", func(*config.BGP) {}, ""},
		{"withdraw_wait", func(b *config.BGP) { b.WithdrawWait.Duration = 5 * time.Second }, ""},
		{"asn", func(b *config.BGP) { b.ASN = 65011 }, "bgp.asn, router_id or listen_port"},
		{"router_id", func(b *config.BGP) { b.RouterID = "10.0.0.9" }, "bgp.asn, router_id or listen_port"},
		{"a peer's bfd", func(b *config.BGP) { b.Peers[0].BFD = false }, "bgp.peers"},
		{"another peer", func(b *config.BGP) { b.Peers = append(b.Peers, config.BGPPeer{Address: "10.0.0.254", ASN: 65000}) }, "bgp.peers"},
		{"bfd timers", func(b *config.BGP) { b.BFDMultiplier = 5 }, "bgp.hold_time or the BFD timers"},
		{"med", func(b *config.BGP) { b.MED = 10 }, "bgp.communities or med"},
		{"cluster seed", func(b *config.BGP) { b.ClusterSeed = 8 }, "bgp.cluster_seed or second_chance"},
		{"second chance", func(b *config.BGP) { b.SecondChance = true }, "bgp.cluster_seed or second_chance"},
		{"flow sync peers", func(b *config.BGP) { b.FlowSync.Peers = []string{"10.0.0.4"} }, "bgp.flow_sync"},
		{"flow sync off", func(b *config.BGP) { b.FlowSync = nil }, "bgp.flow_sync"},
	}
	for _, c := range cases {
		b := base()
		c.change(b)
		if got := bgpFixedChanged(base(), b); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
