package config

import (
	"fmt"
	"time"

	"ballast/balance"
)

// The defaults, documented key by key in docs/config.md.
const (
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultIdleTimeout       = 60 * time.Second
	DefaultMaxHeaderBytes    = 8192
	DefaultBalancer          = "roundrobin"
	DefaultAttempts          = 3
	DefaultBudget            = 0.2
	DefaultConnectTimeout    = 2 * time.Second
	DefaultResponseTimeout   = 60 * time.Second
	DefaultBackendIdle       = 60 * time.Second
	DefaultMaxIdle           = 1024
	DefaultQueueTimeout      = 30 * time.Second
	DefaultMaxHedges         = 1
	DefaultHealthInterval    = 2 * time.Second
	DefaultHealthTimeout     = 1 * time.Second
	DefaultRise              = 2
	DefaultFall              = 3
	DefaultExpectStatus      = "200-399"
	DefaultBaseEjection      = 30 * time.Second
	DefaultMaxEjectionPct    = 50
	DefaultTableSize         = balance.MaglevDefaultSize
	DefaultL4Balancer        = "leastconn"
	DefaultTCPIdleTimeout    = 10 * time.Minute // nginx stream's proxy_timeout
	DefaultUDPIdleTimeout    = 30 * time.Second
	DefaultMaxFlows          = 65536
	DefaultNewFlowRate       = 10000 // udp flows started per second per listener
)

// The failure_percentage defaults are Envoy's, except minimum_hosts (Envoy's is 5): a pool of
// two or three backends should be protected too, and max_ejection_percent already guards it.
const (
	DefaultOutlierInterval = 10 * time.Second
	DefaultFailurePct      = 85
	DefaultFailureVolume   = 50
	DefaultFailureMinHosts = 1
)

// Limits a proxy also clamps to, so that a Config built in code (not loaded) stays in bounds.
const (
	MaxAttempts = 7 // balance.Tried holds 7 backends
	MaxHedges   = 6
)

// defaults fills every field the file left out. A field written with a zero value keeps it
// (weight: 0 stays 0, interval: 0s turns health checks off); validation then judges it.
func (d *decoder) defaults(c *Config) {
	for i := range c.Listeners {
		l := &c.Listeners[i]
		p := fmt.Sprintf("listeners[%d]", i)
		if l.Name == "" {
			l.Name = l.Address
		}
		d.listenerDefaults(l, p)
	}
	if len(c.Routes) == 0 && len(c.Pools) == 1 && !d.has("routes", false) {
		// The common case, one pool, needs no routing section: everything goes to it.
		c.Routes = []Route{{Pool: c.Pools[0].Name}}
	}
	for i := range c.Pools {
		p := fmt.Sprintf("pools[%d]", i)
		if c.DirectorPool(c.Pools[i].Name) {
			d.directorPoolDefaults(&c.Pools[i], p)
		} else if c.L4Pool(c.Pools[i].Name) {
			d.l4PoolDefaults(&c.Pools[i], p)
		}
		d.poolDefaults(&c.Pools[i], p)
	}
	d.tlsDefaults(c)
	d.discoveryDefaults(c)
	d.haDefaults(c)
	d.adminDefaults(&c.Admin)
	d.bgpDefaults(c)
	if c.Logging.Level == "" {
		c.Logging.Level = "info"
	}
	if c.Logging.Format == "" {
		c.Logging.Format = "text"
	}
	d.policyDefaults(c)
}

func (d *decoder) poolDefaults(pl *Pool, p string) {
	if pl.Balancer == "" {
		pl.Balancer = DefaultBalancer
	}
	if a, err := balance.Lookup(pl.Balancer); err == nil && a.Name == "maglev" {
		setInt(d, p+".table_size", &pl.TableSize, DefaultTableSize)
	}
	for j := range pl.Backends {
		b := &pl.Backends[j]
		bp := fmt.Sprintf("%s.backends[%d]", p, j)
		b.Name = b.ID()
		setInt(d, bp+".weight", &b.Weight, 1)
	}
	if pl.MaxQueue > 0 {
		setDur(d, p+".queue_timeout", &pl.QueueTimeout, DefaultQueueTimeout)
	}
	setInt(d, p+".retries.attempts", &pl.Retries.Attempts, DefaultAttempts)
	if !d.has(p+".retries.budget", pl.Retries.Budget != 0) {
		pl.Retries.Budget = DefaultBudget
	}
	if pl.Hedge.Delay.Duration > 0 {
		setInt(d, p+".hedge.max_hedges", &pl.Hedge.MaxHedges, DefaultMaxHedges)
	}
	setDur(d, p+".timeouts.connect", &pl.Timeouts.Connect, DefaultConnectTimeout)
	setDur(d, p+".timeouts.response", &pl.Timeouts.Response, DefaultResponseTimeout)
	setDur(d, p+".timeouts.idle", &pl.Timeouts.Idle, DefaultBackendIdle)
	setInt(d, p+".keepalive.max_idle", &pl.KeepAlive.MaxIdle, DefaultMaxIdle)

	h := &pl.Health
	hp := p + ".health_check"
	// Writing a health_check section turns active checks on; without one they stay off.
	if d.has(hp, *h != HealthCheck{}) {
		setDur(d, hp+".interval", &h.Interval, DefaultHealthInterval)
	}
	if h.Type == "" {
		h.Type = "http"
	}
	if h.Type == "http" {
		if h.Method == "" {
			h.Method = "GET"
		}
		if h.Path == "" {
			h.Path = "/"
		}
		if h.ExpectStatus == "" {
			h.ExpectStatus = DefaultExpectStatus
		}
	}
	if !d.has(hp+".down_interval", h.DownInterval.Duration != 0) {
		h.DownInterval = h.Interval
	}
	setDur(d, hp+".timeout", &h.Timeout, DefaultHealthTimeout)
	setInt(d, hp+".rise", &h.Rise, DefaultRise)
	setInt(d, hp+".fall", &h.Fall, DefaultFall)

	o := &pl.Outlier
	op := p + ".outlier"
	setDur(d, op+".base_ejection", &o.BaseEjection, DefaultBaseEjection)
	setInt(d, op+".max_ejection_percent", &o.MaxEjectionPercent, DefaultMaxEjectionPct)
	setDur(d, op+".interval", &o.Interval, DefaultOutlierInterval)
	fp := &o.FailurePercentage
	fpp := op + ".failure_percentage"
	// Writing a failure_percentage section turns it on, as a health_check section does.
	if d.has(fpp, *fp != FailurePercentage{}) {
		setInt(d, fpp+".threshold", &fp.Threshold, DefaultFailurePct)
	}
	setInt(d, fpp+".request_volume", &fp.RequestVolume, DefaultFailureVolume)
	setInt(d, fpp+".minimum_hosts", &fp.MinimumHosts, DefaultFailureMinHosts)
}

func setDur(d *decoder, path string, v *Duration, def time.Duration) {
	if !d.has(path, v.Duration != 0) {
		v.Duration = def
	}
}

func setInt(d *decoder, path string, v *int, def int) {
	if !d.has(path, *v != 0) {
		*v = def
	}
}
