package upstream

import "time"

// This file holds what the operations side (health, admin, metrics) reads from a pool beyond
// the request-path API: the balancer's own per-backend status and the Release observer's type.

// lbStatusReporter is implemented by pickers that keep a per-backend credit, as Apache's
// balancer-manager shows it (lbstatus of byrequests and bybusyness).
type lbStatusReporter interface {
	LBStatus(i int) (int64, bool)
}

// LBStatus returns the picker's current credit for b, when the pool's algorithm keeps one
// (ok false otherwise, or when b is not in the pool's current snapshot).
func (p *Pool) LBStatus(b *Backend) (v int64, ok bool) {
	s := p.snap.Load()
	r, isReporter := s.picker.(lbStatusReporter)
	if !isReporter {
		return 0, false
	}
	i := s.indexOf(b)
	if i < 0 {
		return 0, false
	}
	return r.LBStatus(i)
}

// ReleaseObserver hears every finished request: the pool, the backend, the time to response
// headers and whether the request counted as failed. It runs on the request path, so it must
// be fast and must not block. Each pool has its own (Spec.OnRelease).
type ReleaseObserver func(p *Pool, b *Backend, latency time.Duration, failed bool)
