package upstream

import (
	"sync/atomic"
	"time"
)

// This file holds what the operations side (health, admin, metrics) reads from a pool beyond
// the request-path API: the balancer's own per-backend status and a Release observer.

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
// be fast and must not block.
type ReleaseObserver func(p *Pool, b *Backend, latency time.Duration, failed bool)

// releaseObserver is process-wide: the metrics registry is too, and pools are rebuilt on
// reloads, so a per-pool hook would have to be re-attached at every reload.
var releaseObserver atomic.Pointer[ReleaseObserver]

// SetReleaseObserver installs f as the observer of every Release (nil removes it). The
// metrics use it for latency histograms.
func SetReleaseObserver(f ReleaseObserver) {
	if f == nil {
		releaseObserver.Store(nil)
		return
	}
	releaseObserver.Store(&f)
}

// NotifyRelease passes one finished request to the installed observer, if any. Release calls
// it; it is exported so that a request path outside this package (tests, other proxies) can
// report the same way.
func NotifyRelease(p *Pool, b *Backend, latency time.Duration, failed bool) {
	if f := releaseObserver.Load(); f != nil {
		(*f)(p, b, latency, failed)
	}
}
