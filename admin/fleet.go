package admin

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"ballast/config"
	"ballast/upstream"
)

// FleetView is the node's fleet state in GET /api/pools (package fleet fills it).
type FleetView struct {
	Node      string   `json:"node"`
	Endpoints []string `json:"endpoints"`
	Prefix    string   `json:"prefix"`
	// Connected: the node's watch on the prefix is live. While it is not, the node serves the
	// last view it had (Revision) and says so since Since.
	Connected bool      `json:"connected"`
	Since     time.Time `json:"since"`
	LastError string    `json:"last_error,omitempty"`
	// Revision is the etcd revision of the last change applied.
	Revision    int64  `json:"revision"`
	Keys        int    `json:"keys"`
	Applied     uint64 `json:"applied"`      // changes applied from the prefix
	KeysRefused uint64 `json:"keys_refused"` // keys ignored: max_keys, a bad key or value
	Resyncs     uint64 `json:"resyncs"`      // full reads after a compaction or at start
	Reconnects  uint64 `json:"reconnects"`
}

// Line is the fleet's state as `ballast ctl status` prints it.
func (f *FleetView) Line() string {
	state := fmt.Sprintf("connected since %s", f.Since.Format(time.RFC3339))
	if !f.Connected {
		state = fmt.Sprintf("DISCONNECTED since %s (%s ago), serving its last view: %s", f.Since.Format(time.RFC3339), time.Since(f.Since).Round(time.Second), f.LastError)
	}
	return fmt.Sprintf("fleet %s on etcd %s (node %s): %s; revision %d, %d keys, %d changes applied, %d keys refused",
		f.Prefix, strings.Join(f.Endpoints, ","), f.Node, state, f.Revision, f.Keys, f.Applied, f.KeysRefused)
}

// FleetChange is one runtime change written to the fleet instead of applied here.
type FleetChange struct {
	Pool    string
	Backend string
	// Action is drain, disable, enable, weight (Weight nil resets it), add or remove (pools
	// discovered from the fleet).
	Action string
	Weight *int
	Add    *config.Backend
}

// Fleet is the node's fleet (package fleet): its state, and the way to change every node.
type Fleet interface {
	FleetStatus() FleetView
	// Change writes c under the fleet's prefix and returns the etcd revision it made.
	Change(ctx context.Context, c FleetChange) (int64, error)
}

// ShowFleet gives the plane the node's fleet (nil: none): its state is shown and changes with
// ?fleet=1 go to it.
func (p *Plane) ShowFleet(f Fleet) {
	if f == nil {
		p.ds.fleet.Store(nil)
		return
	}
	p.ds.fleet.Store(&f)
	p.ds.reg.Do(func() { p.metrics.reg.MustRegister((*discoveryCollector)(p)) })
}

func (p *Plane) fleet() Fleet {
	if f := p.ds.fleet.Load(); f != nil {
		return *f
	}
	return nil
}

func (p *Plane) fleetView() *FleetView {
	if f := p.fleet(); f != nil {
		v := f.FleetStatus()
		return &v
	}
	return nil
}

// fleetRequested reports whether a change asks to go to the whole fleet (?fleet=1).
func fleetRequested(r *http.Request) bool {
	v := r.URL.Query().Get("fleet")
	return v == "1" || v == "true"
}

// fleetChange writes a runtime change to the fleet; every node (this one too) applies it when
// its watch sees it. The backend must be known here, so that a typo is not written.
func (p *Plane) fleetChange(w http.ResponseWriter, r *http.Request, pool string, pl *upstream.Pool) {
	f := p.fleet()
	if f == nil {
		writeError(w, http.StatusBadRequest, "this node has no fleet (configure fleet.etcd); leave out ?fleet=1 to change this node only")
		return
	}
	c := FleetChange{Pool: pool, Backend: r.PathValue("backend"), Action: r.PathValue("action")}
	switch {
	case r.Method == http.MethodPost && c.Backend == "":
		var req AddRequest
		if err := readJSON(r, &req); err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		bc := config.Backend{Address: req.Address, Name: req.Name, Weight: 1, MaxConns: req.MaxConns, Backup: req.Backup}
		if req.Weight != nil {
			bc.Weight = *req.Weight
		}
		if err := config.CheckBackend(bc); err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		bc.Name = bc.ID()
		c.Action, c.Backend, c.Add = "add", bc.Name, &bc
	case r.Method == http.MethodDelete:
		c.Action = "remove"
	case c.Action == "remove":
	default:
		if pl.Backend(c.Backend) == nil {
			writeError(w, http.StatusNotFound, fmt.Sprintf("pool %q: %v %q on this node", pool, upstream.ErrUnknownBackend, c.Backend))
			return
		}
		switch c.Action {
		case "drain", "disable", "enable":
		case "weight":
			var req WeightRequest
			if err := readJSON(r, &req); err != nil {
				writeError(w, http.StatusBadRequest, err.Error())
				return
			}
			if req.Weight != nil {
				if err := config.CheckWeight(*req.Weight); err != nil {
					writeError(w, http.StatusBadRequest, "weight "+err.Error())
					return
				}
			}
			c.Weight = req.Weight
		default:
			writeError(w, http.StatusBadRequest, fmt.Sprintf("unknown action %q for the fleet (valid: disable, drain, enable, remove, weight)", c.Action))
			return
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	rev, err := f.Change(ctx, c)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, "fleet: "+err.Error())
		return
	}
	what := fmt.Sprintf("fleet %s %s", c.Action, c.Backend)
	if c.Action == "weight" {
		if c.Weight == nil {
			what = "fleet reset weight of " + c.Backend
		} else {
			what = fmt.Sprintf("fleet weight %s %d", c.Backend, *c.Weight)
		}
	}
	p.log.Info("fleet change written", "pool", pool, "change", what, "revision", rev, "remote", r.RemoteAddr)
	writeJSON(w, http.StatusOK, map[string]any{"ok": true, "change": what, "revision": rev})
}

var (
	labelsF      = []string{"prefix"}
	dFConnected  = prometheus.NewDesc("ballast_fleet_connected", "1 while the node's watch on the fleet's etcd prefix is live; 0 while it serves its last view.", labelsF, nil)
	dFSince      = prometheus.NewDesc("ballast_fleet_state_since_seconds", "Unix time since when the node is connected (or disconnected).", labelsF, nil)
	dFRevision   = prometheus.NewDesc("ballast_fleet_revision", "etcd revision of the last change the node applied.", labelsF, nil)
	dFKeys       = prometheus.NewDesc("ballast_fleet_keys", "Keys of the prefix the node holds.", labelsF, nil)
	dFApplied    = prometheus.NewDesc("ballast_fleet_changes_applied_total", "Changes from the prefix the node applied.", labelsF, nil)
	dFRefused    = prometheus.NewDesc("ballast_fleet_keys_refused_total", "Keys ignored: over max_keys, or a key or value that does not parse.", labelsF, nil)
	dFResyncs    = prometheus.NewDesc("ballast_fleet_resyncs_total", "Full reads of the prefix (at start, and after a compaction passed the node's revision).", labelsF, nil)
	dFReconnects = prometheus.NewDesc("ballast_fleet_reconnects_total", "Times the node caught up with etcd after losing it.", labelsF, nil)
	fleetDescs   = []*prometheus.Desc{dFConnected, dFSince, dFRevision, dFKeys, dFApplied, dFRefused, dFResyncs, dFReconnects}
)

func (p *Plane) collectFleet(ch chan<- prometheus.Metric) {
	f := p.fleetView()
	if f == nil {
		return
	}
	c := 0.0
	if f.Connected {
		c = 1
	}
	g := func(d *prometheus.Desc, t prometheus.ValueType, v float64) {
		ch <- prometheus.MustNewConstMetric(d, t, v, f.Prefix)
	}
	g(dFConnected, prometheus.GaugeValue, c)
	g(dFSince, prometheus.GaugeValue, unix(f.Since))
	g(dFRevision, prometheus.GaugeValue, float64(f.Revision))
	g(dFKeys, prometheus.GaugeValue, float64(f.Keys))
	g(dFApplied, prometheus.CounterValue, float64(f.Applied))
	g(dFRefused, prometheus.CounterValue, float64(f.KeysRefused))
	g(dFResyncs, prometheus.CounterValue, float64(f.Resyncs))
	g(dFReconnects, prometheus.CounterValue, float64(f.Reconnects))
}
