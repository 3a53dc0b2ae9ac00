package config

// The udp listener's flood limits: how many new flows it starts per second and at once.
// (max_flows and idle_timeout are in l4.go; the process-wide descriptor budget has no key,
// see docs/l4.md.)

// udpDefaults fills new_flow_rate and new_flow_burst (the rate's worth of flows at once).
func (d *decoder) udpDefaults(l *Listener, p string) {
	setInt(d, p+".new_flow_rate", &l.NewFlowRate, DefaultNewFlowRate)
	setInt(d, p+".new_flow_burst", &l.NewFlowBurst, l.NewFlowRate)
}

// validateUDPOnly checks the flood limits: udp listeners only, at least 1 (0 would read as
// "no limit" but mean the default).
func validateUDPOnly(l Listener, p string, fail func(path, format string, args ...any)) {
	for _, k := range []struct {
		key string
		v   int
	}{{"new_flow_rate", l.NewFlowRate}, {"new_flow_burst", l.NewFlowBurst}} {
		switch {
		case l.Protocol != ProtocolUDP && k.v != 0:
			fail(p+"."+k.key, "%s bounds new udp flows; this listener is %s", k.key, l.Protocol)
		case l.Protocol == ProtocolUDP && k.v < 1:
			fail(p+"."+k.key, "must be at least 1 (flows per second; a large value such as 1000000 is as good as no limit), got %d", k.v)
		}
	}
}
