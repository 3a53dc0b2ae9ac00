package admin

import (
	"github.com/prometheus/client_golang/prometheus"

	"ballast/h1"
)

// CountHTTP2Backends gives the plane the event-loop engine's HTTP/2 backend counters
// (h1.H2BackendStats: pools with protocol h2c and h2, summed over the shards), read at each
// scrape of /metrics. nil: no engine (off Linux).
func (p *Plane) CountHTTP2Backends(stats func() h1.H2BackendStats) {
	if stats != nil {
		p.h2b.Store(&stats)
	}
}

var (
	dH2BConns    = prometheus.NewDesc("ballast_http2_backend_connections", "HTTP/2 connections the engine has open to backends of pools with protocol h2c or h2 (connecting, in use or idle; at most 8 per backend per shard).", nil, nil)
	dH2BConnects = prometheus.NewDesc("ballast_http2_backend_connects_total", "HTTP/2 backend connections the engine dialled.", nil, nil)
	dH2BStreams  = prometheus.NewDesc("ballast_http2_backend_streams_total", "Streams the engine opened on HTTP/2 backend connections (requests sent, retries included).", nil, nil)
	dH2BWaiting  = prometheus.NewDesc("ballast_http2_backend_waiting", "Requests waiting now for a stream slot on an HTTP/2 backend connection (at most 256 per backend per shard).", nil, nil)
	dH2BEvents   = prometheus.NewDesc("ballast_http2_backend_events_total", "What happened on the engine's HTTP/2 backend connections, by event: waited (a request waited for a stream slot: every connection full), wait_overflow (a request answered 502 at once: 256 were waiting for the backend on its shard), goaway (GOAWAY frames from backends), refused (streams the backend refused, by REFUSED_STREAM or above a GOAWAY's last stream: sent again), connect_failure (connections that could not be made: refused, timed out, TLS), tls_failure (of which TLS handshakes that failed, timed out or did not negotiate h2), peer_reset (RST_STREAM from a backend), stream_error (streams reset for a backend's protocol error), malformed_response (of which responses that break RFC 9113 §8), stall_reset (streams reset with no window for the stall timeout), conn_error (connections ended by a connection error, all causes), ping_timeout (of which no answer to a PING after silence), goaway_refused (of which streams above a GOAWAY's last stream), field_dropped (request fields left out: connection-specific or invalid).", []string{"event"}, nil)
	h2bDescs     = []*prometheus.Desc{dH2BConns, dH2BConnects, dH2BStreams, dH2BWaiting, dH2BEvents}
)

func (c *liveCollector) collectHTTP2Backends(ch chan<- prometheus.Metric) {
	f := c.p.h2b.Load()
	if f == nil {
		return
	}
	s := (*f)()
	ch <- prometheus.MustNewConstMetric(dH2BConns, prometheus.GaugeValue, float64(s.Conns))
	ch <- prometheus.MustNewConstMetric(dH2BWaiting, prometheus.GaugeValue, float64(s.Waiting))
	ch <- prometheus.MustNewConstMetric(dH2BConnects, prometheus.CounterValue, float64(s.Connects))
	ch <- prometheus.MustNewConstMetric(dH2BStreams, prometheus.CounterValue, float64(s.Streams))
	for _, e := range []struct {
		name string
		n    float64
	}{
		{"waited", float64(s.Waits)},
		{"wait_overflow", float64(s.Overflows)},
		{"goaway", float64(s.GoAways)},
		{"refused", float64(s.Refused)},
		{"connect_failure", float64(s.ConnectFailures)},
		{"tls_failure", float64(s.TLSFailures)},
		{"peer_reset", float64(s.Mux.PeerResets)},
		{"stream_error", float64(s.Mux.StreamErrors)},
		{"malformed_response", float64(s.Mux.MalformedResponses)},
		{"stall_reset", float64(s.Mux.StallResets)},
		{"conn_error", float64(s.Mux.ConnErrors)},
		{"ping_timeout", float64(s.Mux.PingTimeouts)},
		{"goaway_refused", float64(s.Mux.RefusedStreams)},
		{"field_dropped", float64(s.Mux.FieldsDropped)},
	} {
		ch <- prometheus.MustNewConstMetric(dH2BEvents, prometheus.CounterValue, e.n, e.name)
	}
}
