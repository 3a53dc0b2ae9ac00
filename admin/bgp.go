package admin

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"ballast/bgp"
)

// BGP is what the server's BGP plane shows (docs/scale-out.md): the sessions with the routers
// and what is announced, read at the call. The admin plane only reads it.
type BGP interface {
	BGPStatus() *BGPView // nil when the configuration has no bgp section
}

// BGPView is the BGP speaker as GET /api/bgp and `ballast ctl bgp --json` show it: the
// sessions (state, uptime, prefixes sent, BFD), every VIP prefix with whether it is announced
// and why, and the flow sync between the directors.
type BGPView struct {
	bgp.Status
	// Draining: the director is stopping; its routes are withdrawn and it forwards what still
	// reaches it for WithdrawWait.
	Draining     bool        `json:"draining"`
	WithdrawWait string      `json:"withdraw_wait"`
	BFDTimers    string      `json:"bfd_timers"` // "100ms × 3"
	ClusterSeed  uint32      `json:"cluster_seed"`
	FlowSync     *HAFlowSync `json:"flow_sync,omitempty"`
	Error        string      `json:"error,omitempty"` // the last failure to announce or withdraw
}

// ShowBGP makes the API, the page and the metrics show b; call it before Install.
func (p *Plane) ShowBGP(b BGP) { p.bgp.Store(&b) }

func (p *Plane) bgpView() *BGPView {
	if b := p.bgp.Load(); b != nil {
		return (*b).BGPStatus()
	}
	return nil
}

// getBGP serves GET /api/bgp.
func (p *Plane) getBGP(w http.ResponseWriter, _ *http.Request) {
	v := p.bgpView()
	if v == nil {
		writeError(w, http.StatusNotFound, "this instance has no bgp section")
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// WriteBGP prints v as `ballast ctl bgp` does: the speaker, one line per session, one per
// prefix with its reason.
func WriteBGP(out io.Writer, v *BGPView) {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	state := "announcing"
	if v.Draining {
		state = "draining (routes withdrawn, forwarding for " + v.WithdrawWait + ")"
	}
	fmt.Fprintf(tw, "speaker\tAS %d, router ID %s, %s; BFD %s; cluster seed %d\n", v.ASN, v.RouterID, state, v.BFDTimers, v.ClusterSeed)
	fmt.Fprintf(tw, "routes\t%d announced; %d announcements, %d withdrawals so far\n", v.Announced, v.Announces, v.Withdrawals)
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "PEER\tASN\tSTATE\tUPTIME\tSENT\tRECEIVED\tUPDATES OUT/IN\tFLAPS\tBFD")
	for _, s := range v.Sessions {
		up := s.Uptime
		if up == "" {
			up = "-"
		}
		bfd := s.BFD
		if bfd == "" {
			bfd = "off"
		} else {
			bfd = fmt.Sprintf("%s (%d sent, %d received, %d failures)", bfd, s.BFDSent, s.BFDReceived, s.BFDFailures)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\t%d\t%d/%d\t%d\t%s\n", s.Peer, s.ASN, s.State, up, s.PrefixesSent, s.PrefixesReceived, s.UpdatesSent, s.UpdatesReceived, s.Flops, bfd)
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "PREFIX\tANNOUNCED\tWHY")
	for _, r := range v.Routes {
		fmt.Fprintf(tw, "%s\t%v\t%s\n", r.Prefix, r.Announce, r.Reason)
	}
	if fs := v.FlowSync; fs != nil {
		fmt.Fprintln(tw)
		fmt.Fprintf(tw, "flow sync\tport %d: %d flows sent in %d datagrams, %d dropped; %d received, %d installed (%d unknown VIP, %d unknown real); %d dumps sent\n",
			fs.Port, fs.FlowsSent, fs.DatagramsSent, fs.FlowsDropped, fs.FlowsReceived, fs.FlowsInstalled, fs.UnknownVIP, fs.UnknownReal, fs.DumpsSent)
		if fs.Error != "" {
			fmt.Fprintf(tw, "flow sync error\t%s\n", fs.Error)
		}
	}
	if v.Error != "" {
		fmt.Fprintf(tw, "error\t%s\n", v.Error)
	}
	tw.Flush()
}

var (
	labelsPeer = []string{"peer"}

	dBGPEstablished = prometheus.NewDesc("ballast_bgp_session_established", "1 while the BGP session with the router is established.", labelsPeer, nil)
	dBGPUptime      = prometheus.NewDesc("ballast_bgp_session_uptime_seconds", "How long the established BGP session has been up (0 when it is not).", labelsPeer, nil)
	dBGPSent        = prometheus.NewDesc("ballast_bgp_prefixes_sent", "Prefixes advertised to the router on the session.", labelsPeer, nil)
	dBGPUpdOut      = prometheus.NewDesc("ballast_bgp_updates_sent_total", "BGP UPDATE messages sent to the router.", labelsPeer, nil)
	dBGPUpdIn       = prometheus.NewDesc("ballast_bgp_updates_received_total", "BGP UPDATE messages received from the router.", labelsPeer, nil)
	dBGPFlaps       = prometheus.NewDesc("ballast_bgp_session_flaps_total", "Times the session left established.", labelsPeer, nil)
	dBGPBFDUp       = prometheus.NewDesc("ballast_bgp_bfd_up", "1 while the BFD session with the router is up (peers with bfd only).", labelsPeer, nil)
	dBGPBFDFail     = prometheus.NewDesc("ballast_bgp_bfd_failures_total", "Times the BFD session with the router went down.", labelsPeer, nil)
	dBGPRoute       = prometheus.NewDesc("ballast_bgp_route_announced", "1 while the prefix is announced, 0 while it is withdrawn.", []string{"prefix"}, nil)
	dBGPAnnounces   = prometheus.NewDesc("ballast_bgp_announcements_total", "Routes originated (a prefix announced after being withdrawn, or at start).", nil, nil)
	dBGPWithdrawals = prometheus.NewDesc("ballast_bgp_withdrawals_total", "Routes withdrawn.", nil, nil)
	dBGPDraining    = prometheus.NewDesc("ballast_bgp_draining", "1 while the director is stopping with its routes withdrawn.", nil, nil)
	dBGPFlowsSent   = prometheus.NewDesc("ballast_bgp_flow_sync_sent_total", "Director flows sent to the other directors of the cluster.", nil, nil)
	dBGPFlowsDrop   = prometheus.NewDesc("ballast_bgp_flow_sync_dropped_total", "Director flows not sent (the queue was full, or the send failed).", nil, nil)
	dBGPFlowsRecv   = prometheus.NewDesc("ballast_bgp_flow_sync_received_total", "Director flows received from the other directors.", nil, nil)
	dBGPFlowsInst   = prometheus.NewDesc("ballast_bgp_flow_sync_installed_total", "Received director flows installed in the connection table.", nil, nil)

	bgpDescs = []*prometheus.Desc{dBGPEstablished, dBGPUptime, dBGPSent, dBGPUpdOut, dBGPUpdIn, dBGPFlaps, dBGPBFDUp, dBGPBFDFail,
		dBGPRoute, dBGPAnnounces, dBGPWithdrawals, dBGPDraining, dBGPFlowsSent, dBGPFlowsDrop, dBGPFlowsRecv, dBGPFlowsInst}
)

func (c *liveCollector) collectBGP(ch chan<- prometheus.Metric) {
	v := c.p.bgpView()
	if v == nil {
		return
	}
	gauge := func(d *prometheus.Desc, x float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, x, l...)
	}
	counter := func(d *prometheus.Desc, x uint64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(x), l...)
	}
	b2f := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	for _, s := range v.Sessions {
		gauge(dBGPEstablished, b2f(s.State == "established"), s.Peer)
		up := 0.0
		if !s.Since.IsZero() {
			up = time.Since(s.Since).Seconds()
		}
		gauge(dBGPUptime, up, s.Peer)
		gauge(dBGPSent, float64(s.PrefixesSent), s.Peer)
		counter(dBGPUpdOut, s.UpdatesSent, s.Peer)
		counter(dBGPUpdIn, s.UpdatesReceived, s.Peer)
		counter(dBGPFlaps, uint64(s.Flops), s.Peer)
		if s.BFD != "" {
			gauge(dBGPBFDUp, b2f(s.BFD == "up"), s.Peer)
			counter(dBGPBFDFail, s.BFDFailures, s.Peer)
		}
	}
	for _, r := range v.Routes {
		gauge(dBGPRoute, b2f(r.Announce), r.Prefix.String())
	}
	counter(dBGPAnnounces, v.Announces)
	counter(dBGPWithdrawals, v.Withdrawals)
	gauge(dBGPDraining, b2f(v.Draining))
	if fs := v.FlowSync; fs != nil {
		counter(dBGPFlowsSent, fs.FlowsSent)
		counter(dBGPFlowsDrop, fs.FlowsDropped)
		counter(dBGPFlowsRecv, fs.FlowsReceived)
		counter(dBGPFlowsInst, fs.FlowsInstalled)
	}
}

// BGP reads GET /api/bgp: the sessions and the announced routes.
func (c *Client) BGP(ctx context.Context) (*BGPView, error) {
	var out BGPView
	if err := c.do(ctx, http.MethodGet, "/api/bgp", nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
