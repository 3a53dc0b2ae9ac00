package admin

import (
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"ballast/discovery"
)

// Discoveries reports the pools' discovery sources (the server's discovery plane).
type Discoveries interface {
	Discovery() []discovery.Status
}

// DiscoveryView is one discovered pool's source state in GET /api/pools.
type DiscoveryView = discovery.Status

// discoveryState holds what ShowDiscovery and ShowFleet gave the plane.
type discoveryState struct {
	disc  atomic.Pointer[Discoveries]
	fleet atomic.Pointer[Fleet]
	reg   sync.Once // the collector of both, registered once
}

// ShowDiscovery makes the API, the page, the metrics and `ctl status` show d's sources.
func (p *Plane) ShowDiscovery(d Discoveries) {
	p.ds.disc.Store(&d)
	p.ds.reg.Do(func() { p.metrics.reg.MustRegister((*discoveryCollector)(p)) })
}

func (p *Plane) discoveryViews() []DiscoveryView {
	if d := p.ds.disc.Load(); d != nil {
		return (*d).Discovery()
	}
	return nil
}

// hasDiscovery reports whether the pool has a discovery source: its backends beyond the
// configured ones are the source's, not runtime additions.
func (p *Plane) hasDiscovery(pool string) bool {
	for _, v := range p.discoveryViews() {
		if v.Pool == pool {
			return true
		}
	}
	return false
}

var (
	labelsD      = []string{"pool", "source"}
	dDBackends   = prometheus.NewDesc("ballast_discovery_backends", "Backends in the last good set of the pool's discovery source.", labelsD, nil)
	dDStale      = prometheus.NewDesc("ballast_discovery_stale", "1 while the source's answers fail or are empty and the last good set is kept.", labelsD, nil)
	dDStaleSince = prometheus.NewDesc("ballast_discovery_stale_since_seconds", "Unix time since when the set is stale; 0 when it is current.", labelsD, nil)
	dDUpdated    = prometheus.NewDesc("ballast_discovery_last_update_seconds", "Unix time of the last good answer; 0 before the first.", labelsD, nil)
	dDDraining   = prometheus.NewDesc("ballast_discovery_draining", "Backends that left the source and drain until their in-flight work ends.", labelsD, nil)
	dDEvents     = prometheus.NewDesc("ballast_discovery_events_total", "Discovery events: answer (good), failure (failed, empty or refused), change (applied a difference), added, drained, removed, returned (back during its drain), truncated (records cut by max_backends), refused (sets over max_backends), conflict (shadowed by a configured or API-added backend).", append(labelsD, "event"), nil)
)

type discoveryCollector Plane

func (c *discoveryCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{dDBackends, dDStale, dDStaleSince, dDUpdated, dDDraining, dDEvents} {
		ch <- d
	}
	for _, d := range fleetDescs {
		ch <- d
	}
}

func unix(t time.Time) float64 {
	if t.IsZero() {
		return 0
	}
	return float64(t.UnixNano()) / 1e9
}

func (c *discoveryCollector) Collect(ch chan<- prometheus.Metric) {
	p := (*Plane)(c)
	for _, s := range p.discoveryViews() {
		l := []string{s.Pool, s.Source}
		stale := 0.0
		if s.Stale {
			stale = 1
		}
		ch <- prometheus.MustNewConstMetric(dDBackends, prometheus.GaugeValue, float64(s.Backends), l...)
		ch <- prometheus.MustNewConstMetric(dDStale, prometheus.GaugeValue, stale, l...)
		ch <- prometheus.MustNewConstMetric(dDStaleSince, prometheus.GaugeValue, unix(s.StaleSince), l...)
		ch <- prometheus.MustNewConstMetric(dDUpdated, prometheus.GaugeValue, unix(s.Updated), l...)
		ch <- prometheus.MustNewConstMetric(dDDraining, prometheus.GaugeValue, float64(s.Draining), l...)
		for _, e := range []struct {
			name string
			n    uint64
		}{{"answer", s.Answers}, {"failure", s.Failures}, {"change", s.Changes}, {"added", s.Added}, {"drained", s.Drained},
			{"removed", s.Removed}, {"returned", s.Returned}, {"truncated", s.Truncated}, {"refused", s.Refused}, {"conflict", s.Conflicts}} {
			ch <- prometheus.MustNewConstMetric(dDEvents, prometheus.CounterValue, float64(e.n), append(l, e.name)...)
		}
	}
	p.collectFleet(ch)
}

// writeDiscovery prints the discovery sources and the fleet for `ballast ctl status`.
func writeDiscovery(w io.Writer, r *PoolsResponse) {
	for _, s := range r.Discovery {
		state := "current"
		if s.Stale {
			state = fmt.Sprintf("STALE since %s (%s ago): %s", s.StaleSince.Format(time.RFC3339), time.Since(s.StaleSince).Round(time.Second), s.LastError)
		}
		updated := "never"
		if !s.Updated.IsZero() {
			updated = s.Updated.Format(time.RFC3339)
		}
		fmt.Fprintf(w, "\ndiscovery of pool %s: %s, %d backends (%d draining), last good answer %s, %s\t\n", s.Pool, s.Source, s.Backends, s.Draining, updated, state)
	}
	if f := r.Fleet; f != nil {
		fmt.Fprintf(w, "\n%s\t\n", f.Line())
	}
}
