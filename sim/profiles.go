package sim

import "time"

// The jitter profiles: what the lab's real runs on this machine have between its load
// generator, Ballast and the emulated backends, by the shape of the load. Each was measured
// with `ballast lab jitter` (lab/jitter.go: the load generator's, the backends' and Ballast's
// own timestamps of every request, matched); the lab measures them again before each
// scenario and predicts with its own measurement, so these figures serve `ballast sim --runs`
// and `ballast advise --scenario`.
const (
	// ProfileKeepAlive: -c 16 on kept-alive connections, backends busy (heterogeneous).
	ProfileKeepAlive = "keepalive"
	// ProfileFresh: -c 10, a new connection per request, workers sending at will (slow-backend).
	ProfileFresh = "fresh"
	// ProfileFreshOrdered: -c 10, a new connection per request, one request written at a time
	// in index order (variable-cost's ?wait= list, as ab).
	ProfileFreshOrdered = "fresh-ordered"
)

// us builds a Dist from quantiles in microseconds: at TailP when there are as many, else
// evenly spaced.
func us(q ...float64) Dist {
	d := Dist{Q: make([]time.Duration, len(q))}
	for i, x := range q {
		d.Q[i] = time.Duration(x * float64(time.Microsecond))
	}
	if len(q) == len(TailP) {
		d.P = TailP
	}
	return d
}

// profiles are filled from measurements (see profiles_data.go).
var profiles = map[string]*Jitter{}

// Profile returns a copy of the named jitter profile, or nil for "" or an unknown name.
func Profile(name string) *Jitter {
	j, ok := profiles[name]
	if !ok {
		return nil
	}
	c := *j
	return &c
}

// ProfileNames lists the profiles.
func ProfileNames() []string { return []string{ProfileKeepAlive, ProfileFresh, ProfileFreshOrdered} }
