package admin

import (
	"math"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"ballast/health"
	"ballast/upstream"
)

// latencyBuckets span 0.5 ms to 30 s, the range of response times worth telling apart.
var latencyBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

// metrics is the Prometheus side of the plane: a custom registry holding a collector that
// reads the live counters at scrape time, plus the histograms and counters fed by events.
type metrics struct {
	p           *Plane
	reg         *prometheus.Registry
	latency     *prometheus.Desc // the backends' latency histograms (latHist), read at scrape time
	transitions *prometheus.CounterVec
	probes      *prometheus.CounterVec
	hist        sync.Map // *upstream.Backend -> *histEntry
	// series holds the histograms by pool and backend ID: two Backend records with the same
	// labels (a discovered backend that left and came back) share one series, as they did
	// under client_golang's HistogramVec; a scrape renders each series once.
	series sync.Map // pool + "\x00" + backend ID -> *histEntry
}

type histEntry struct {
	m    *metrics
	pool string
	id   string
	h    latHist
}

// latHist is one backend's latency histogram: a count per bucket of latencyBuckets (the
// last one +Inf) and the sum in nanoseconds, in three cache lines of the backend's own
// record, so that an observation on the request path is two atomic adds on memory nothing
// else shares (client_golang's histogram is three structures, each a cache miss when 2000
// backends take turns: 0.5 µs per request). Scrapes render it as a constant histogram.
type latHist struct {
	buckets [16]atomic.Uint64
	sumNs   atomic.Int64
}

func (h *latHist) observe(d time.Duration) {
	s := d.Seconds()
	i := 0
	for i < len(latencyBuckets) && s > latencyBuckets[i] {
		i++
	}
	h.buckets[i].Add(1)
	h.sumNs.Add(int64(d))
}

// metric renders h with its labels.
func (h *latHist) metric(d *prometheus.Desc, pool, backend string) prometheus.Metric {
	cum := make(map[float64]uint64, len(latencyBuckets))
	var n uint64
	for i, le := range latencyBuckets {
		n += h.buckets[i].Load()
		cum[le] = n
	}
	n += h.buckets[len(latencyBuckets)].Load()
	return prometheus.MustNewConstHistogram(d, n, float64(h.sumNs.Load())/1e9, cum, pool, backend)
}

// histSlot keeps each backend's histEntry on the backend itself, so that the release path
// reads it with one load instead of a sync.Map lookup (a hash-trie whose depth grows with the
// backends: at 2000 of them the lookup cost 0.3 µs per request). It holds the entry of the
// plane that saw the backend first; another plane in the same process (tests) uses its map.
var histSlot = upstream.NewSlot()

func newMetrics(p *Plane) *metrics {
	m := &metrics{p: p, reg: prometheus.NewRegistry()}
	m.latency = prometheus.NewDesc("ballast_backend_latency_seconds", "Time to response headers of requests released on the backend.",
		[]string{"pool", "backend"}, nil)
	m.transitions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ballast_health_transitions_total", Help: "Health transitions: down, up (active checks), ejected, ejection_refused (outlier detection).",
	}, []string{"pool", "backend", "kind"})
	m.probes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ballast_health_checks_total", Help: "Active health probes by result.",
	}, []string{"pool", "backend", "result"})
	m.reg.MustRegister((*histCollector)(m), m.transitions, m.probes, (*liveCollector)(m),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// release is the upstream release observer: one map lookup and one histogram observation.
func (m *metrics) release(p *upstream.Pool, b *upstream.Backend, latency time.Duration, _ bool) {
	if e, _ := b.Attachment(histSlot).(*histEntry); e != nil && e.m == m && e.pool == p.Name {
		e.h.observe(latency)
		return
	}
	v, ok := m.hist.Load(b)
	if !ok || v.(*histEntry).pool != p.Name {
		v, _ = m.series.LoadOrStore(p.Name+"\x00"+b.ID, &histEntry{m: m, pool: p.Name, id: b.ID})
		m.hist.Store(b, v)
	}
	e := v.(*histEntry)
	if cur, _ := b.Attachment(histSlot).(*histEntry); cur == nil || cur.m == m {
		b.SetAttachment(histSlot, e)
	}
	e.h.observe(latency)
}

// histCollector renders every backend's latency histogram at scrape time.
type histCollector metrics

func (c *histCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.latency }

func (c *histCollector) Collect(ch chan<- prometheus.Metric) {
	c.series.Range(func(_, v any) bool {
		e := v.(*histEntry)
		ch <- e.h.metric(c.latency, e.pool, e.id)
		return true
	})
}

func (m *metrics) event(e health.Event) {
	m.transitions.WithLabelValues(e.Pool, e.Backend, string(e.Kind)).Inc()
}

func (m *metrics) probe(pool, backend string, r health.Result) {
	res := "ok"
	if !r.OK {
		res = "fail"
	}
	m.probes.WithLabelValues(pool, backend, res).Inc()
}

// p99 estimates the 99th percentile latency of b since start, in milliseconds, from the
// histogram buckets (linear inside the bucket, as Prometheus' histogram_quantile does).
func (m *metrics) p99(pool string, b *upstream.Backend) (float64, bool) {
	v, ok := m.hist.Load(b)
	if !ok || v.(*histEntry).pool != pool {
		return 0, false
	}
	e := v.(*histEntry)
	var d dto.Metric
	if err := e.h.metric(m.latency, e.pool, e.id).Write(&d); err != nil || d.Histogram == nil {
		return 0, false
	}
	q := quantile(0.99, d.Histogram)
	if math.IsNaN(q) {
		return 0, false
	}
	return q * 1000, true
}

// quantile is histogram_quantile over one cumulative histogram.
func quantile(q float64, h *dto.Histogram) float64 {
	total := float64(h.GetSampleCount())
	if total == 0 {
		return math.NaN()
	}
	rank := q * total
	prevBound, prevCount := 0.0, 0.0
	for _, b := range h.GetBucket() {
		c := float64(b.GetCumulativeCount())
		if c >= rank {
			if c == prevCount {
				return b.GetUpperBound()
			}
			return prevBound + (b.GetUpperBound()-prevBound)*(rank-prevCount)/(c-prevCount)
		}
		prevBound, prevCount = b.GetUpperBound(), c
	}
	return prevBound // in the +Inf bucket: the highest finite bound is all we know
}

// liveCollector reads pools and backends at scrape time.
type liveCollector metrics

var (
	labelsB = []string{"pool", "backend"}
	labelsP = []string{"pool"}

	dInFlight  = prometheus.NewDesc("ballast_backend_in_flight", "Requests dispatched to the backend and not yet released.", labelsB, nil)
	dRequests  = prometheus.NewDesc("ballast_backend_requests_total", "Requests dispatched to the backend.", labelsB, nil)
	dResponses = prometheus.NewDesc("ballast_backend_responses_total", "Responses from the backend by status class (none = no valid response).", append(labelsB, "class"), nil)
	dErrors    = prometheus.NewDesc("ballast_backend_errors_total", "Errors by kind: request (released as failed: connect error, reset, timeout, 5xx with include_5xx), health_check (failed probe).", append(labelsB, "kind"), nil)
	dWeight    = prometheus.NewDesc("ballast_backend_weight", "Weight in force (runtime override, else configured).", labelsB, nil)
	dEffWeight = prometheus.NewDesc("ballast_backend_effective_weight", "Weight after slow start.", labelsB, nil)
	dState     = prometheus.NewDesc("ballast_backend_state", "1 for the backend's current state.", append(labelsB, "state"), nil)
	dHealthy   = prometheus.NewDesc("ballast_backend_healthy", "1 when the active health check last found the backend up.", labelsB, nil)
	dEjections = prometheus.NewDesc("ballast_backend_ejections_total", "Outlier ejections of the backend.", labelsB, nil)
	dEWMA      = prometheus.NewDesc("ballast_backend_latency_ewma_seconds", "Decayed peak-EWMA of response times.", labelsB, nil)
	dLBStatus  = prometheus.NewDesc("ballast_backend_lbstatus", "The balancer's credit for the backend (byrequests, bybusyness).", labelsB, nil)
	dQueueLen  = prometheus.NewDesc("ballast_pool_queue_length", "Requests waiting in the pool's backlog.", labelsP, nil)
	dQueueMax  = prometheus.NewDesc("ballast_pool_queue_max", "The backlog bound (max_queue).", labelsP, nil)
	dQueued    = prometheus.NewDesc("ballast_pool_queued_total", "Requests that entered the backlog.", labelsP, nil)
	dQTimeout  = prometheus.NewDesc("ballast_pool_queue_timeouts_total", "Requests that waited queue_timeout and got 503.", labelsP, nil)
	dQRejected = prometheus.NewDesc("ballast_pool_queue_rejected_total", "Requests turned away because the backlog was full.", labelsP, nil)
	dNoBackend = prometheus.NewDesc("ballast_pool_no_backend_total", "Requests that found no usable backend (503).", labelsP, nil)
	dRetries   = prometheus.NewDesc("ballast_pool_retries_total", "Requests sent again to another backend after a failed try.", labelsP, nil)
	dHedges    = prometheus.NewDesc("ballast_pool_hedges_total", "Hedged copies sent for slow requests.", labelsP, nil)
	dQWait     = prometheus.NewDesc("ballast_pool_queue_wait_seconds", "Time spent in the backlog by requests that left it (dispatched or timed out).", labelsP, nil)
	dBackends  = prometheus.NewDesc("ballast_pool_backends", "Backends in the pool by state.", append(labelsP, "state"), nil)

	labelsL     = []string{"listener", "protocol"}
	dConns      = prometheus.NewDesc("ballast_backend_connections_total", "TCP connections established to the backend (tcp pools).", labelsB, nil)
	dConnBytes  = prometheus.NewDesc("ballast_backend_bytes_total", "Bytes moved through the backend's TCP connections: in = client to backend, out = backend to client.", append(labelsB, "direction"), nil)
	dConnFail   = prometheus.NewDesc("ballast_backend_connect_failures_total", "Connects to the backend that failed or timed out (tcp pools).", labelsB, nil)
	dLAccepted  = prometheus.NewDesc("ballast_listener_accepted_total", "TCP connections accepted on the listener.", labelsL, nil)
	dLActive    = prometheus.NewDesc("ballast_listener_active", "Open connections (tcp) or live flows (udp) of the listener.", labelsL, nil)
	dLRefused   = prometheus.NewDesc("ballast_listener_proxy_refused_total", "Connections closed for a missing or malformed PROXY protocol header (accept_proxy).", labelsL, nil)
	dLNoRoute   = prometheus.NewDesc("ballast_listener_no_route_total", "TCP connections no route took (no SNI match).", labelsL, nil)
	dLNoBackend = prometheus.NewDesc("ballast_listener_no_backend_total", "TCP connections closed because no backend could be had.", labelsL, nil)
	dLIdle      = prometheus.NewDesc("ballast_listener_idle_closed_total", "TCP connections closed by idle_timeout.", labelsL, nil)
	dLRetries   = prometheus.NewDesc("ballast_listener_retries_total", "TCP connects after the first, UDP flows moved after a refusal.", labelsL, nil)
	dLFlows     = prometheus.NewDesc("ballast_listener_flows_total", "UDP flows started.", labelsL, nil)
	dLExpired   = prometheus.NewDesc("ballast_listener_flows_expired_total", "UDP flows ended by idle_timeout.", labelsL, nil)
	dLDropped   = prometheus.NewDesc("ballast_listener_dropped_total", "UDP datagrams dropped: max_flows (a new flow would exceed it), descriptors (the process's descriptor budget for flows is spent), new_flow_rate (a new flow would pass it), no_backend (no backend had a free slot), send (the backend socket did not take it), overflow (the listener socket's receive buffer was full: the kernel dropped it unread, SO_RXQ_OVFL), reply (a backend's reply the listener socket could not send).", append(labelsL, "reason"), nil)
	dLDatagrams = prometheus.NewDesc("ballast_listener_datagrams_total", "UDP datagrams read from clients; each is forwarded or dropped for one reason of ballast_listener_dropped_total other than overflow and reply.", labelsL, nil)
	dLTerms     = prometheus.NewDesc("ballast_listener_terminations_total", "Ended tcp connections by termination state, as HAProxy's (docs/l4.md): -- normal, SD backend reset mid-stream, CD client reset, cD idle timeout, KD shut down, CR/cR client left or stalled before routing, PR refused, SC/sC no backend or connects refused/timed out, SQ/sQ queue full/timed out, RC no descriptor.", append(labelsL, "state"), nil)
	dLMaxFlows  = prometheus.NewDesc("ballast_listener_max_flows", "The udp listener's flow cap in force: max_flows, or the process's descriptor budget for flows when that is lower.", labelsL, nil)
	dLBytes     = prometheus.NewDesc("ballast_listener_bytes_total", "Datagram payload bytes moved through a udp listener: in = from clients, out = to clients (tcp bytes are counted per backend).", append(labelsL, "direction"), nil)
)

var allStates = []upstream.State{upstream.StateUp, upstream.StateSlowStart, upstream.StateDraining, upstream.StateDisabled, upstream.StateDown, upstream.StateEjected}

func (c *liveCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{dInFlight, dRequests, dResponses, dErrors, dWeight, dEffWeight, dState, dHealthy,
		dEjections, dEWMA, dLBStatus, dQueueLen, dQueueMax, dQueued, dQTimeout, dQRejected, dNoBackend, dRetries, dHedges, dQWait, dBackends,
		dConns, dConnBytes, dConnFail, dLAccepted, dLActive, dLRefused, dLNoRoute, dLNoBackend, dLIdle, dLRetries, dLFlows, dLExpired, dLDropped, dLDatagrams, dLMaxFlows, dLTerms, dLBytes} {
		ch <- d
	}
	for _, d := range directorDescs {
		ch <- d
	}
	for _, d := range bgpDescs {
		ch <- d
	}
	ch <- dH2Streams
	ch <- dH2Events
	for _, d := range http1Descs {
		ch <- d
	}
	for _, d := range h2bDescs {
		ch <- d
	}
	for _, d := range []*prometheus.Desc{dHAState, dHAPriority, dHAMasterPrio, dHASent, dHAReceived, dHAErrors, dHATransitions, dHAMasters, dHAARP, dHAFlowsSent, dHAFlowsDropped, dHAFlowsRecv, dHAFlowsInst} {
		ch <- d
	}
}

func (c *liveCollector) Collect(ch chan<- prometheus.Metric) {
	c.p.collectDirectors(ch)
	c.collectHA(ch)
	c.collectBGP(ch)
	c.collectHTTP2(ch)
	c.collectHTTP1(ch)
	c.collectHTTP2Backends(ch)
	st := c.p.cur.Load()
	if st == nil {
		return
	}
	gauge := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, l...)
	}
	counter := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, l...)
	}
	for _, name := range st.order {
		pl := st.pools[name]
		if pl == nil {
			continue
		}
		l4 := st.l4Pool(name)
		counts := map[upstream.State]int{}
		for _, b := range pl.Backends() {
			id := b.ID
			s := b.State()
			counts[s]++
			gauge(dInFlight, float64(b.InFlight()), name, id)
			counter(dRequests, float64(b.Requests()), name, id)
			for i, n := range c.p.responses(b) {
				counter(dResponses, float64(n), name, id, classNames[i])
			}
			counter(dErrors, float64(b.Failures()), name, id, "request")
			counter(dErrors, float64(c.p.Health.ProbeFailures(name, id)), name, id, "health_check")
			gauge(dWeight, float64(b.Weight()), name, id)
			gauge(dEffWeight, b.EffectiveWeight(), name, id)
			for _, x := range allStates {
				v := 0.0
				if x == s {
					v = 1
				}
				gauge(dState, v, name, id, x.String())
			}
			h := 0.0
			if b.Healthy() {
				h = 1
			}
			gauge(dHealthy, h, name, id)
			counter(dEjections, float64(c.p.Health.Ejections(name, id)), name, id)
			gauge(dEWMA, b.LatencyEWMA().Seconds(), name, id)
			if v, ok := pl.LBStatus(b); ok {
				gauge(dLBStatus, float64(v), name, id)
			}
			if l4 {
				cs := c.p.connStats(b)
				counter(dConns, float64(cs.Conns), name, id)
				counter(dConnBytes, float64(cs.BytesIn), name, id, "in")
				counter(dConnBytes, float64(cs.BytesOut), name, id, "out")
				counter(dConnFail, float64(cs.ConnectFailures), name, id)
			}
		}
		for _, x := range allStates {
			gauge(dBackends, float64(counts[x]), name, x.String())
		}
		qs := pl.QueueStats()
		gauge(dQueueLen, float64(pl.Queue()), name)
		gauge(dQueueMax, float64(pl.MaxQueue()), name)
		counter(dQueued, float64(qs.Queued), name)
		counter(dQTimeout, float64(qs.TimedOut), name)
		counter(dQRejected, float64(qs.Rejected), name)
		counter(dNoBackend, float64(qs.NoBackend), name)
		retries, hedges := c.p.poolCounters(name)
		counter(dRetries, float64(retries), name)
		counter(dHedges, float64(hedges), name)
		buckets := make(map[float64]uint64, len(upstream.QueueWaitBounds))
		var cum uint64
		for k, bound := range upstream.QueueWaitBounds {
			cum += qs.WaitBuckets[k]
			buckets[bound.Seconds()] = cum
		}
		ch <- prometheus.MustNewConstHistogram(dQWait, qs.Dispatched+qs.TimedOut, qs.Wait.Seconds(), buckets, name)
	}
	for _, l := range c.p.listenerStats() {
		ln, pr := l.Listener, l.Protocol
		counter(dLRefused, float64(l.ProxyRefused), ln, pr)
		switch pr {
		case "tcp":
			counter(dLAccepted, float64(l.Accepted), ln, pr)
			gauge(dLActive, float64(l.Active), ln, pr)
			counter(dLNoRoute, float64(l.NoRoute), ln, pr)
			counter(dLNoBackend, float64(l.NoBackend), ln, pr)
			counter(dLIdle, float64(l.IdleClosed), ln, pr)
			counter(dLRetries, float64(l.Retries), ln, pr)
			for st, n := range l.Terminations { // the states seen so far
				counter(dLTerms, float64(n), ln, pr, st)
			}
		case "udp":
			gauge(dLActive, float64(l.Active), ln, pr)
			counter(dLRetries, float64(l.Retries), ln, pr)
			counter(dLFlows, float64(l.Flows), ln, pr)
			counter(dLExpired, float64(l.FlowsExpired), ln, pr)
			counter(dLDropped, float64(l.DroppedMaxFlows), ln, pr, "max_flows")
			counter(dLDropped, float64(l.DroppedNoBackend), ln, pr, "no_backend")
			counter(dLDropped, float64(l.DroppedDescriptors), ln, pr, "descriptors")
			counter(dLDropped, float64(l.DroppedRate), ln, pr, "new_flow_rate")
			counter(dLDropped, float64(l.DroppedSend), ln, pr, "send")
			counter(dLDropped, float64(l.DroppedOverflow), ln, pr, "overflow")
			counter(dLDropped, float64(l.RepliesDropped), ln, pr, "reply")
			counter(dLDatagrams, float64(l.Datagrams), ln, pr)
			gauge(dLMaxFlows, float64(l.MaxFlows), ln, pr)
			counter(dLBytes, float64(l.BytesIn), ln, pr, "in")
			counter(dLBytes, float64(l.BytesOut), ln, pr, "out")
		}
	}
}
