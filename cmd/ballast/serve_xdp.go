package main

import (
	"flag"
	"fmt"

	"ballast/config"
)

// directorFlags are the quick form's flags for the XDP director (--mode dr|tun|nat).
type directorFlags struct {
	iface string
	udp   bool
}

func (f *directorFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.iface, "iface", "", "quick form with --mode dr|tun|nat: the `interface` the XDP director attaches to")
	fs.BoolVar(&f.udp, "udp", false, "quick form with --mode dr|tun|nat: balance UDP flows to the VIP instead of TCP")
}

// isDirectorMode reports whether --mode names a forwarding mode of the XDP director.
func isDirectorMode(mode string) bool {
	switch mode {
	case config.ForwardingDR, config.ForwardingTUN, config.ForwardingNAT:
		return true
	}
	return false
}

// directorConfig is the quick form for the XDP director: --listen is the VIP, each --backend
// a real server; the pool is checked by the same rules as a file's director listener.
func (q *quickForm) directorConfig() (*config.Config, error) {
	if q.director.iface == "" {
		return nil, fmt.Errorf("flags: --mode %s needs --iface, the interface the director attaches to (e.g. --iface eth0)", q.mode)
	}
	proto := config.ProtocolTCP
	if q.director.udp {
		proto = config.ProtocolUDP
	}
	c := &config.Config{
		Listeners: []config.Listener{{Address: q.listen, Protocol: proto, Forwarding: q.mode, Interface: q.director.iface}},
		Pools:     []config.Pool{{Name: "default", Balancer: q.balancer, MaxConns: q.maxConns, MaxQueue: q.maxQueue}},
	}
	c.Admin.Address = q.admin
	hc := config.HealthCheck{Type: "tcp", Interval: config.Duration{Duration: q.healthInterval}}
	if q.healthPath != "" {
		hc.Type, hc.Path = "http", q.healthPath
	}
	if hc.Interval.Duration == 0 {
		hc.Interval.Duration = config.DefaultHealthInterval
	}
	c.Pools[0].Health = hc
	for _, b := range q.backends {
		c.Pools[0].Backends = append(c.Pools[0].Backends, config.Backend{Address: b, Weight: 1})
	}
	q.ha.apply(c)
	if err := config.Check("flags", c); err != nil {
		return nil, err
	}
	return c, nil
}
