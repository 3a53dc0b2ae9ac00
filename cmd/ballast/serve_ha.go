package main

import (
	"flag"
	"time"

	"ballast/config"
)

// haFlags are the quick form's flags for HA (docs/ha.md): --ha-iface turns it on.
type haFlags struct {
	iface     string
	vrid      int
	priority  int
	advert    time.Duration
	peers     stringList
	addresses stringList
}

func (f *haFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.iface, "ha-iface", "", "quick form: be one director of a VRRP virtual router, adverts and addresses on this `interface`")
	fs.IntVar(&f.vrid, "ha-vrid", 0, "quick form with --ha-iface: the virtual router ID, 1-255, the same on every director")
	fs.IntVar(&f.priority, "ha-priority", 0, "quick form with --ha-iface: this director's priority, 1-254 (the highest is master)")
	fs.Var(durationFlag{&f.advert}, "ha-advert", "quick form with --ha-iface: the advert interval (default 1s; 10ms to 40.95s)")
	fs.Var(&f.peers, "ha-peer", "quick form with --ha-iface: a unicast peer's `IP` (repeat; default multicast 224.0.0.18)")
	fs.Var(&f.addresses, "ha-address", "quick form with --ha-iface: one more `CIDR` that moves with mastership, e.g. a NAT gateway 10.0.0.1/32 (repeat)")
}

// apply adds the ha section the flags describe to c; nothing without --ha-iface (the other
// --ha-* flags then fail validation's "ha needs the interface").
func (f *haFlags) apply(c *config.Config) {
	if f.iface == "" && f.vrid == 0 && f.priority == 0 && f.advert == 0 && len(f.peers) == 0 && len(f.addresses) == 0 {
		return
	}
	c.HA = &config.HA{
		Interface: f.iface, VirtualRouterID: f.vrid, Priority: f.priority,
		AdvertInterval: config.Duration{Duration: f.advert}, UnicastPeers: f.peers, Addresses: f.addresses,
	}
}
