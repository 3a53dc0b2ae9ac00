package config

import "ballast/upstream"

// ID is the backend's identity across reloads and in the API: its name, else its address.
// Loading fills Name with it; this is the rule for backends that come another way.
func (b Backend) ID() string {
	if b.Name != "" {
		return b.Name
	}
	return b.Address
}

// Spec is the backend in upstream's terms.
func (b Backend) Spec() upstream.BackendSpec {
	return upstream.BackendSpec{ID: b.ID(), Address: b.Address, Weight: b.Weight, Backup: b.Backup, Down: b.Down, MaxConns: b.MaxConns}
}

// Spec is the pool in upstream's terms: the one place a configured pool becomes an
// upstream.Spec. onRelease (may be nil) hears every finished request.
func (p Pool) Spec(onRelease upstream.ReleaseObserver) upstream.Spec {
	s := upstream.Spec{
		Name:          p.Name,
		Balancer:      p.Balancer,
		MaxConns:      p.MaxConns,
		MaxQueue:      p.MaxQueue,
		QueueTimeout:  p.QueueTimeout.Duration,
		SlowStart:     p.SlowStart.Duration,
		PanicPercent:  p.Outlier.PanicThreshold,
		MaxInit:       p.MaxInit,
		TableSize:     p.TableSize,
		BalanceFactor: p.HashBalanceFactor,
		OnRelease:     onRelease,
	}
	for _, b := range p.Backends {
		s.Backends = append(s.Backends, b.Spec())
	}
	return s
}
