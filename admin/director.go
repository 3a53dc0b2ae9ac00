package admin

import (
	"fmt"
	"text/tabwriter"

	"github.com/prometheus/client_golang/prometheus"
)

// Directors is what the XDP director plane shows: each director (one per interface) with its
// VIPs and their real servers, read from the BPF maps at the call. The server's director
// plane implements it; the admin plane only reads it.
type Directors interface {
	Directors() []DirectorView
}

// DirectorView is one director: the interface it is attached to and its forwarding mode.
type DirectorView struct {
	Interface string    `json:"interface"`
	Mode      string    `json:"mode"`
	VIPs      []VIPView `json:"vips"`
	// Counters are the program's pass and drop reasons (docs/xdp.md), summed over CPUs.
	Counters map[string]uint64 `json:"counters,omitempty"`
	Error    string            `json:"error,omitempty"`
}

// VIPView is one VIP of a director: the listener and pool that configure it and its traffic.
type VIPView struct {
	Listener  string `json:"listener"`
	Pool      string `json:"pool"`
	VIP       string `json:"vip"` // address:port/protocol
	Scheduler string `json:"scheduler"`
	DirectorTraffic
	Reals []RealView `json:"reals"`
}

// RealView is one real server of a VIP.
type RealView struct {
	Backend string `json:"backend"` // the pool's backend ID
	Address string `json:"address"`
	// State: up; down (health check), disabled, ejected (from the pool); drain (weight 0);
	// unresolved (DR, TUN: no next-hop MAC).
	State           string `json:"state"`
	Weight          int    `json:"weight"`
	EffectiveWeight int    `json:"effective_weight"`
	Slots           int    `json:"slots"` // Maglev table slots it holds
	DirectorTraffic
}

// DirectorTraffic is what the XDP program counted: packets and bytes towards the real
// servers (NAT replies not included), new flows, active flows and drops.
type DirectorTraffic struct {
	Packets     uint64 `json:"packets"`
	Bytes       uint64 `json:"bytes"`
	NewFlows    uint64 `json:"new_flows"`
	ActiveFlows int    `json:"active_flows"`
	Drops       uint64 `json:"drops"`
}

// ShowDirectors makes the API, the page and the metrics show d; call it before Install.
func (p *Plane) ShowDirectors(d Directors) { p.directors.Store(&d) }

func (p *Plane) directorViews() []DirectorView {
	if d := p.directors.Load(); d != nil {
		return (*d).Directors()
	}
	return nil
}

var (
	labelsVIP  = []string{"interface", "vip", "listener"}
	labelsReal = []string{"interface", "vip", "listener", "pool", "backend"}

	dVIPPackets   = prometheus.NewDesc("ballast_director_vip_packets_total", "Packets the XDP director forwarded for the VIP.", labelsVIP, nil)
	dVIPBytes     = prometheus.NewDesc("ballast_director_vip_bytes_total", "Bytes the XDP director forwarded for the VIP.", labelsVIP, nil)
	dVIPNew       = prometheus.NewDesc("ballast_director_vip_new_flows_total", "New flows the XDP director placed for the VIP.", labelsVIP, nil)
	dVIPActive    = prometheus.NewDesc("ballast_director_vip_active_flows", "Flows of the VIP seen within the active timeout and not closed.", labelsVIP, nil)
	dVIPDrops     = prometheus.NewDesc("ballast_director_vip_drops_total", "Packets to the VIP dropped because no real server was usable.", labelsVIP, nil)
	dRealPackets  = prometheus.NewDesc("ballast_director_real_packets_total", "Packets the XDP director sent to the real server (all its VIPs).", labelsReal, nil)
	dRealBytes    = prometheus.NewDesc("ballast_director_real_bytes_total", "Bytes the XDP director sent to the real server (all its VIPs).", labelsReal, nil)
	dRealNew      = prometheus.NewDesc("ballast_director_real_new_flows_total", "New flows placed on the real server (all its VIPs).", labelsReal, nil)
	dRealActive   = prometheus.NewDesc("ballast_director_real_active_flows", "Active flows of the VIP on the real server.", labelsReal, nil)
	dRealWeight   = prometheus.NewDesc("ballast_director_real_weight", "The real server's weight in force.", labelsReal, nil)
	dRealUp       = prometheus.NewDesc("ballast_director_real_up", "1 when the real server takes new flows of the VIP.", labelsReal, nil)
	dDirCounters  = prometheus.NewDesc("ballast_director_packets_total", "Packets the XDP program passed to the kernel or dropped, by reason.", []string{"interface", "reason"}, nil)
	directorDescs = []*prometheus.Desc{dVIPPackets, dVIPBytes, dVIPNew, dVIPActive, dVIPDrops, dRealPackets, dRealBytes, dRealNew, dRealActive, dRealWeight, dRealUp, dDirCounters}
)

// collectDirectors exports every director's VIPs and real servers (ballast_director_...).
func (p *Plane) collectDirectors(ch chan<- prometheus.Metric) {
	for _, d := range p.directorViews() {
		for reason, n := range d.Counters {
			ch <- prometheus.MustNewConstMetric(dDirCounters, prometheus.CounterValue, float64(n), d.Interface, reason)
		}
		for _, v := range d.VIPs {
			l := []string{d.Interface, v.VIP, v.Listener}
			ch <- prometheus.MustNewConstMetric(dVIPPackets, prometheus.CounterValue, float64(v.Packets), l...)
			ch <- prometheus.MustNewConstMetric(dVIPBytes, prometheus.CounterValue, float64(v.Bytes), l...)
			ch <- prometheus.MustNewConstMetric(dVIPNew, prometheus.CounterValue, float64(v.NewFlows), l...)
			ch <- prometheus.MustNewConstMetric(dVIPActive, prometheus.GaugeValue, float64(v.ActiveFlows), l...)
			ch <- prometheus.MustNewConstMetric(dVIPDrops, prometheus.CounterValue, float64(v.Drops), l...)
			for _, r := range v.Reals {
				rl := []string{d.Interface, v.VIP, v.Listener, v.Pool, r.Backend}
				ch <- prometheus.MustNewConstMetric(dRealPackets, prometheus.CounterValue, float64(r.Packets), rl...)
				ch <- prometheus.MustNewConstMetric(dRealBytes, prometheus.CounterValue, float64(r.Bytes), rl...)
				ch <- prometheus.MustNewConstMetric(dRealNew, prometheus.CounterValue, float64(r.NewFlows), rl...)
				ch <- prometheus.MustNewConstMetric(dRealActive, prometheus.GaugeValue, float64(r.ActiveFlows), rl...)
				ch <- prometheus.MustNewConstMetric(dRealWeight, prometheus.GaugeValue, float64(r.Weight), rl...)
				up := 0.0
				if r.State == "up" {
					up = 1
				}
				ch <- prometheus.MustNewConstMetric(dRealUp, prometheus.GaugeValue, up, rl...)
			}
		}
	}
}

// writeDirectors prints the directors below the pools in `ballast ctl status`.
func writeDirectors(tw *tabwriter.Writer, ds []DirectorView) {
	for _, d := range ds {
		fmt.Fprintf(tw, "\ndirector %s (%s)", d.Interface, d.Mode)
		if d.Error != "" {
			fmt.Fprintf(tw, "  error: %s", d.Error)
		}
		fmt.Fprintln(tw, "\t")
		for _, v := range d.VIPs {
			fmt.Fprintf(tw, "vip %s  listener %s  pool %s (%s)  packets %d  bytes %d  new flows %d  active %d  drops %d\t\n",
				v.VIP, v.Listener, v.Pool, v.Scheduler, v.Packets, v.Bytes, v.NewFlows, v.ActiveFlows, v.Drops)
			fmt.Fprintln(tw, "REAL\tADDRESS\tSTATE\tWEIGHT\tSLOTS\tPACKETS\tBYTES\tNEW FLOWS\tACTIVE\t")
			for _, r := range v.Reals {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t\n",
					r.Backend, r.Address, r.State, r.Weight, r.Slots, r.Packets, r.Bytes, r.NewFlows, r.ActiveFlows)
			}
		}
	}
}
