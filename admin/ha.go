package admin

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// HA is what the server's HA plane shows (docs/ha.md): the virtual router's state and
// counters, read at the call. The admin plane only reads it.
type HA interface {
	HAStatus() *HAView // nil when the configuration has no ha section
}

// HAView is the virtual router as GET /api/ha and `ballast ctl ha --json` show it.
type HAView struct {
	State              string `json:"state"` // master, backup, fault (initialize while stopping)
	Priority           int    `json:"priority"`
	ConfiguredPriority int    `json:"configured_priority"`
	// Master is the current master's address: this director's when master, the last one
	// heard when backup; empty when none was heard.
	Master               string            `json:"master"`
	MasterPriority       int               `json:"master_priority"`
	Interface            string            `json:"interface"`
	VRID                 int               `json:"virtual_router_id"`
	Address              string            `json:"address"` // this director's, the adverts' source
	AdvertInterval       string            `json:"advert_interval"`
	MasterAdvertInterval string            `json:"master_advert_interval"`
	Preempt              bool              `json:"preempt"`
	Peers                []string          `json:"unicast_peers,omitempty"`
	Addresses            []string          `json:"addresses"` // what moves with mastership
	Fault                string            `json:"fault,omitempty"`
	Since                time.Time         `json:"since"`
	AdvertsSent          uint64            `json:"adverts_sent"`
	AdvertsReceived      uint64            `json:"adverts_received"`
	Transitions          uint64            `json:"transitions"`
	BecameMaster         uint64            `json:"became_master"`
	Errors               map[string]uint64 `json:"advert_errors"`
	OtherVRID            uint64            `json:"other_vrid_adverts"`
	AddrMismatch         uint64            `json:"address_mismatches"`
	ARPAnswered          uint64            `json:"arp_answered"`
	FlowSync             *HAFlowSync       `json:"flow_sync,omitempty"`
}

// HAFlowSync is the flow sync's state: where it goes and what it counted.
type HAFlowSync struct {
	Port           int    `json:"port"`
	Group          string `json:"group,omitempty"` // the multicast group, without unicast peers
	Sending        bool   `json:"sending"`
	FlowsSent      uint64 `json:"flows_sent"`
	DatagramsSent  uint64 `json:"datagrams_sent"`
	FlowsDropped   uint64 `json:"flows_dropped"`
	FlowsReceived  uint64 `json:"flows_received"`
	FlowsInstalled uint64 `json:"flows_installed"`
	UnknownVIP     uint64 `json:"unknown_vip"`
	UnknownReal    uint64 `json:"unknown_real"`
	BadDatagrams   uint64 `json:"bad_datagrams"`
	DumpsSent      uint64 `json:"dumps_sent"`
	DumpRequests   uint64 `json:"dump_requests_received"`
	Error          string `json:"error,omitempty"`
}

// ShowHA makes the API, the page and the metrics show h; call it before Install.
func (p *Plane) ShowHA(h HA) { p.ha.Store(&h) }

func (p *Plane) haView() *HAView {
	if h := p.ha.Load(); h != nil {
		return (*h).HAStatus()
	}
	return nil
}

// getHA serves GET /api/ha.
func (p *Plane) getHA(w http.ResponseWriter, _ *http.Request) {
	v := p.haView()
	if v == nil {
		writeError(w, http.StatusNotFound, "this instance has no ha section")
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// WriteHA prints v as `ballast ctl ha` does.
func WriteHA(out io.Writer, v *HAView) {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "state\t%s", v.State)
	if v.Fault != "" {
		fmt.Fprintf(tw, " (%s)", v.Fault)
	}
	fmt.Fprintf(tw, " since %s\n", v.Since.Format(time.RFC3339))
	fmt.Fprintf(tw, "priority\t%d (configured %d)\n", v.Priority, v.ConfiguredPriority)
	master := v.Master
	if master == "" {
		master = "none heard"
	}
	fmt.Fprintf(tw, "master\t%s (priority %d, interval %s)\n", master, v.MasterPriority, v.MasterAdvertInterval)
	fmt.Fprintf(tw, "router\tVRID %d on %s from %s, advert interval %s, preempt %v\n", v.VRID, v.Interface, v.Address, v.AdvertInterval, v.Preempt)
	if len(v.Peers) > 0 {
		fmt.Fprintf(tw, "peers\t%s\n", strings.Join(v.Peers, ", "))
	} else {
		fmt.Fprintf(tw, "peers\tmulticast 224.0.0.18\n")
	}
	fmt.Fprintf(tw, "addresses\t%s\n", strings.Join(v.Addresses, ", "))
	fmt.Fprintf(tw, "adverts\t%d sent, %d received, %d of other routers\n", v.AdvertsSent, v.AdvertsReceived, v.OtherVRID)
	fmt.Fprintf(tw, "transitions\t%d (master %d times)\n", v.Transitions, v.BecameMaster)
	var errs []string
	for _, k := range sortedKeys(v.Errors) {
		if n := v.Errors[k]; n > 0 {
			errs = append(errs, fmt.Sprintf("%s %d", k, n))
		}
	}
	if len(errs) == 0 {
		errs = []string{"none"}
	}
	fmt.Fprintf(tw, "advert errors\t%s\n", strings.Join(errs, ", "))
	fmt.Fprintf(tw, "ARP answered\t%d\n", v.ARPAnswered)
	if fs := v.FlowSync; fs != nil {
		to := fmt.Sprintf("port %d", fs.Port)
		if fs.Group != "" {
			to = fmt.Sprintf("%s:%d", fs.Group, fs.Port)
		}
		fmt.Fprintf(tw, "flow sync\t%s, sending %v: %d flows sent in %d datagrams, %d dropped; %d received, %d installed (%d unknown VIP, %d unknown real); %d dumps sent\n",
			to, fs.Sending, fs.FlowsSent, fs.DatagramsSent, fs.FlowsDropped, fs.FlowsReceived, fs.FlowsInstalled, fs.UnknownVIP, fs.UnknownReal, fs.DumpsSent)
		if fs.Error != "" {
			fmt.Fprintf(tw, "flow sync error\t%s\n", fs.Error)
		}
	}
	tw.Flush()
}

func sortedKeys(m map[string]uint64) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

var (
	haStates = []string{"master", "backup", "fault", "initialize"}

	dHAState        = prometheus.NewDesc("ballast_ha_state", "1 for the virtual router's current state (master, backup, fault, initialize), 0 for the others.", []string{"state"}, nil)
	dHAPriority     = prometheus.NewDesc("ballast_ha_priority", "The priority this director advertises (0 in fault).", nil, nil)
	dHAMasterPrio   = prometheus.NewDesc("ballast_ha_master_priority", "The priority the current master advertises.", nil, nil)
	dHASent         = prometheus.NewDesc("ballast_ha_adverts_sent_total", "VRRP adverts sent.", nil, nil)
	dHAReceived     = prometheus.NewDesc("ballast_ha_adverts_received_total", "Valid VRRP adverts of this virtual router received.", nil, nil)
	dHAErrors       = prometheus.NewDesc("ballast_ha_advert_errors_total", "Received VRRP packets discarded, by reason; send: adverts not sent.", []string{"reason"}, nil)
	dHATransitions  = prometheus.NewDesc("ballast_ha_transitions_total", "State changes of the virtual router.", nil, nil)
	dHAMasters      = prometheus.NewDesc("ballast_ha_became_master_total", "Times this director became master.", nil, nil)
	dHAARP          = prometheus.NewDesc("ballast_ha_arp_answered_total", "ARP requests for the moving addresses answered by this director.", nil, nil)
	dHAFlowsSent    = prometheus.NewDesc("ballast_ha_flow_sync_sent_total", "Director flows sent to the other directors.", nil, nil)
	dHAFlowsDropped = prometheus.NewDesc("ballast_ha_flow_sync_dropped_total", "Director flows not sent (the queue was full, or the send failed).", nil, nil)
	dHAFlowsRecv    = prometheus.NewDesc("ballast_ha_flow_sync_received_total", "Director flows received from the other directors.", nil, nil)
	dHAFlowsInst    = prometheus.NewDesc("ballast_ha_flow_sync_installed_total", "Received director flows installed in the connection table.", nil, nil)
)

func (c *liveCollector) collectHA(ch chan<- prometheus.Metric) {
	v := c.p.haView()
	if v == nil {
		return
	}
	gauge := func(d *prometheus.Desc, x float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, x, l...)
	}
	counter := func(d *prometheus.Desc, x uint64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(x), l...)
	}
	for _, s := range haStates {
		x := 0.0
		if s == v.State {
			x = 1
		}
		gauge(dHAState, x, s)
	}
	gauge(dHAPriority, float64(v.Priority))
	gauge(dHAMasterPrio, float64(v.MasterPriority))
	counter(dHASent, v.AdvertsSent)
	counter(dHAReceived, v.AdvertsReceived)
	for _, k := range sortedKeys(v.Errors) {
		counter(dHAErrors, v.Errors[k], k)
	}
	counter(dHATransitions, v.Transitions)
	counter(dHAMasters, v.BecameMaster)
	counter(dHAARP, v.ARPAnswered)
	if fs := v.FlowSync; fs != nil {
		counter(dHAFlowsSent, fs.FlowsSent)
		counter(dHAFlowsDropped, fs.FlowsDropped)
		counter(dHAFlowsRecv, fs.FlowsReceived)
		counter(dHAFlowsInst, fs.FlowsInstalled)
	}
}

// HA reads GET /api/ha: the virtual router's state.
func (c *Client) HA(ctx context.Context) (*HAView, error) {
	var out HAView
	if err := c.do(ctx, http.MethodGet, "/api/ha", nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
