package admin

import (
	"github.com/prometheus/client_golang/prometheus"

	"ballast/h1"
)

// CountHTTP1 gives the plane the event-loop HTTP/1 engine's counters (h1.Stats, summed over
// its shards), read at each scrape of /metrics. nil: no engine (off Linux).
func (p *Plane) CountHTTP1(stats func() h1.Stats) {
	if stats != nil {
		p.h1.Store(&stats)
	}
}

var (
	dH1Conns    = prometheus.NewDesc("ballast_http1_connections", "Client connections the event-loop HTTP/1 engine has open (HTTP/1.1, and the h2c and TLS h2 ones it serves on its shards).", nil, nil)
	dH1Accepted = prometheus.NewDesc("ballast_http1_accepted_total", "Client connections the engine accepted and admitted (max_conns_per_client).", nil, nil)
	dH1Requests = prometheus.NewDesc("ballast_http1_requests_total", "Requests the engine read: HTTP/1.1 request heads and HTTP/2 streams on its shards.", nil, nil)
	dH1Active   = prometheus.NewDesc("ballast_http1_active_requests", "Requests in flight on the engine (from the head to the response's end).", nil, nil)
	dH1Tunnels  = prometheus.NewDesc("ballast_http1_tunnels", "Upgrade tunnels open on the engine.", nil, nil)
	dH1Backends = prometheus.NewDesc("ballast_http1_backend_connections", "Backend connections the engine has open (in use or idle).", nil, nil)
	dH1Connects = prometheus.NewDesc("ballast_http1_backend_connects_total", "Backend connections the engine opened.", nil, nil)
	dH1BackTLS  = prometheus.NewDesc("ballast_http1_backend_tls_handshakes_total", "TLS handshakes with backends (pools with tls) the engine completed.", nil, nil)
	dH1Resumed  = prometheus.NewDesc("ballast_http1_backend_tls_resumed_total", "Of the engine's completed backend TLS handshakes, those that resumed a session the backend had given.", nil, nil)
	dH1Zipped   = prometheus.NewDesc("ballast_http1_compressed_total", "Responses the engine compressed (routes' compress).", nil, nil)
	dH1Encoders = prometheus.NewDesc("ballast_http1_encoders", "Compression encoders in use on the engine (responses being compressed).", nil, nil)
	dH1Queued   = prometheus.NewDesc("ballast_http1_queued_total", "Requests that waited in a pool's backlog on the engine.", nil, nil)
	dH1Events   = prometheus.NewDesc("ballast_http1_events_total", "What the engine refused or ended, by event: refused_head (a head its checks answered 4xx/5xx), conns_per_client (a connection closed at accept for max_conns_per_client), header_timeout (read_header_timeout), idle_timeout (a kept-alive connection), body_timeout (408), write_timeout (a client that took nothing of its response for idle_timeout), tls_failure (a handshake that failed or timed out), tls_refused (closed at accept: 4096 handshakes in progress), connect_failure (a backend connect), backend_tls_failure (a backend handshake that failed verification or timed out), backend_tls_refused (a backend connection failed: 1024 backend handshakes in progress), compress_declined (a response sent uncompressed: 32 encoders in use on its shard), accept_failure (no descriptor), log_dropped (access-log lines lost to a writer that fell behind). PROXY headers refused: ballast_listener_proxy_refused_total.", []string{"event"}, nil)
	http1Descs  = []*prometheus.Desc{dH1Conns, dH1Accepted, dH1Requests, dH1Active, dH1Tunnels, dH1Backends, dH1Connects, dH1BackTLS, dH1Resumed, dH1Zipped, dH1Encoders, dH1Queued, dH1Events}
)

func (c *liveCollector) collectHTTP1(ch chan<- prometheus.Metric) {
	f := c.p.h1.Load()
	if f == nil {
		return
	}
	s := (*f)()
	gauge := func(d *prometheus.Desc, v int64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v))
	}
	counter := func(d *prometheus.Desc, v int64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), l...)
	}
	gauge(dH1Conns, s.Conns)
	gauge(dH1Active, s.Active)
	gauge(dH1Tunnels, s.Tunnels)
	gauge(dH1Backends, s.BackendConns)
	gauge(dH1Encoders, s.Encoders)
	counter(dH1Accepted, s.Accepted)
	counter(dH1Requests, s.Requests)
	counter(dH1Connects, s.Connects)
	counter(dH1Queued, s.Queued)
	counter(dH1BackTLS, s.BackendTLS)
	counter(dH1Resumed, s.BackendTLSResumed)
	counter(dH1Zipped, s.Compressed)
	for _, e := range []struct {
		name string
		n    int64
	}{
		{"refused_head", s.Refused},
		{"conns_per_client", s.ConnsRefused},
		{"header_timeout", s.HeaderTimeouts},
		{"idle_timeout", s.IdleTimeouts},
		{"body_timeout", s.BodyTimeouts},
		{"write_timeout", s.WriteTimeouts},
		{"tls_failure", s.TLSFailures},
		{"tls_refused", s.TLSRefused},
		{"connect_failure", s.ConnectFailures},
		{"backend_tls_failure", s.BackendTLSFailures},
		{"backend_tls_refused", s.BackendTLSRefused},
		{"compress_declined", s.CompressDeclined},
		{"accept_failure", s.AcceptFailures},
		{"log_dropped", s.LogDropped},
	} {
		counter(dH1Events, e.n, e.name)
	}
}
