package admin

import (
	"github.com/prometheus/client_golang/prometheus"

	"ballast/h2mux"
)

// CountHTTP2 gives the plane the HTTP/2 engine's counters, summed over every client
// connection (h2mux.Counters), for /metrics.
func (p *Plane) CountHTTP2(c *h2mux.Counters) { p.h2.Store(c) }

var (
	dH2Streams = prometheus.NewDesc("ballast_http2_streams_total", "HTTP/2 streams clients opened (each a request through the HTTP core).", nil, nil)
	dH2Events  = prometheus.NewDesc("ballast_http2_events_total", "What the HTTP/2 engine refused or ended, by event (docs/operations.md, the HTTP/2 limits): client_reset (RST_STREAM before the answer), stream_error (a stream reset for the client's protocol error), malformed_request, refused_stream (past MAX_CONCURRENT_STREAMS or after GOAWAY), headers_too_large (431), stall_reset (no window for the stall timeout), conn_error (connections ended by a connection error, all causes) and of those reset_flood (rapid reset, MadeYouReset), empty_frame_flood, control_flood, continuation_flood, output_stall, settings_timeout, ping_timeout; response_field_dropped (connection-specific or invalid response fields left out).", []string{"event"}, nil)
)

func (c *liveCollector) collectHTTP2(ch chan<- prometheus.Metric) {
	h := c.p.h2.Load()
	if h == nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(dH2Streams, prometheus.CounterValue, float64(h.Streams.Load()))
	for _, e := range []struct {
		name string
		n    uint64
	}{
		{"client_reset", h.ClientResets.Load()},
		{"stream_error", h.StreamErrors.Load()},
		{"malformed_request", h.MalformedRequests.Load()},
		{"refused_stream", h.RefusedStreams.Load()},
		{"headers_too_large", h.HeadersTooLarge.Load()},
		{"stall_reset", h.StallResets.Load()},
		{"linger_reset", h.LingerResets.Load()},
		{"conn_error", h.ConnErrors.Load()},
		{"reset_flood", h.ResetFloods.Load()},
		{"empty_frame_flood", h.EmptyFrameFloods.Load()},
		{"control_flood", h.ControlFloods.Load()},
		{"continuation_flood", h.ContinuationFloods.Load()},
		{"output_stall", h.OutputStalls.Load()},
		{"settings_timeout", h.SettingsTimeouts.Load()},
		{"ping_timeout", h.PingTimeouts.Load()},
		{"response_field_dropped", h.ResponseFieldsDropped.Load()},
	} {
		ch <- prometheus.MustNewConstMetric(dH2Events, prometheus.CounterValue, float64(e.n), e.name)
	}
}
