package admin

import (
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"net/http"
	"slices"
	"time"

	"ballast/config"
	"ballast/upstream"
)

//go:embed ui
var uiFS embed.FS

var indexTmpl = template.Must(template.ParseFS(uiFS, "ui/index.html"))

// PoolView is one pool as GET /api/pools shows it.
type PoolView struct {
	Name string `json:"name"`
	// Protocol is what the pool balances: http requests, or l4 connections and flows (its
	// backends' in_flight are then open connections or live flows).
	Protocol   string    `json:"protocol"`
	Balancer   string    `json:"balancer"`
	Queue      int       `json:"queue"`
	MaxQueue   int       `json:"max_queue"`
	QueueStats QueueView `json:"queue_stats"`
	// Panic: too few backends are fit, so the pool balances over all of them regardless of
	// health (outlier.panic_threshold_percent).
	Panic    bool          `json:"panic"`
	Backends []BackendView `json:"backends"`
	// Overrides lists the runtime API's changes in force: weights, drains, disables, and
	// backends added or removed since the configuration was loaded.
	Overrides Overrides `json:"overrides"`
}

// QueueView is a pool's cumulative backlog counters.
type QueueView struct {
	Queued      uint64  `json:"queued"`
	Dispatched  uint64  `json:"dispatched"`
	TimedOut    uint64  `json:"timed_out"`
	Rejected    uint64  `json:"rejected"`
	WaitSeconds float64 `json:"wait_seconds"`
}

// Overrides are the runtime changes a pool carries on top of its configuration.
type Overrides struct {
	Backends []upstream.Override `json:"backends,omitempty"`
	Added    []string            `json:"added,omitempty"`
	Removed  []string            `json:"removed,omitempty"`
}

// BackendView is one backend's live state.
type BackendView struct {
	ID               string            `json:"id"`
	Address          string            `json:"address"`
	State            string            `json:"state"`
	Weight           int               `json:"weight"`
	ConfigWeight     int               `json:"config_weight"`
	WeightOverridden bool              `json:"weight_overridden"`
	EffectiveWeight  float64           `json:"effective_weight"`
	Backup           bool              `json:"backup"`
	MaxConns         int               `json:"max_conns"`
	InFlight         int64             `json:"in_flight"`
	Requests         uint64            `json:"requests"`
	Failures         uint64            `json:"failures"`
	Responses        map[string]uint64 `json:"responses"`
	LatencyEWMAMs    float64           `json:"latency_ewma_ms"`
	LatencyP99Ms     *float64          `json:"latency_p99_ms,omitempty"`
	LBStatus         *int64            `json:"lbstatus,omitempty"`
	Health           *HealthView       `json:"health,omitempty"`
	Ejections        uint64            `json:"ejections"`
	EjectedUntil     *time.Time        `json:"ejected_until,omitempty"`
	// DrainUntil is when a drain's grace ends (POST .../drain {"grace": ...}): pinned
	// clients move then.
	DrainUntil *time.Time `json:"drain_until,omitempty"`
	// Conns are the L4 planes' counters (pools behind tcp or udp listeners; udp flows count
	// in in_flight and requests only).
	Conns *ConnStats `json:"conns,omitempty"`
}

// HealthView is the last active check of a backend.
type HealthView struct {
	At     time.Time `json:"at"`
	OK     bool      `json:"ok"`
	Detail string    `json:"detail"`
	TookMs float64   `json:"took_ms"`
}

var classNames = [6]string{"none", "1xx", "2xx", "3xx", "4xx", "5xx"}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func (p *Plane) poolView(name string, pl *upstream.Pool, pc config.Pool) PoolView {
	qs := pl.QueueStats()
	proto, l4 := config.ProtocolHTTP, p.cur.Load().l4Pool(name)
	if l4 {
		proto = "l4"
	}
	v := PoolView{Name: name, Protocol: proto, Balancer: pl.Balancer(), Queue: pl.Queue(), MaxQueue: pl.MaxQueue(), Panic: pl.Panicking(), QueueStats: QueueView{
		Queued: qs.Queued, Dispatched: qs.Dispatched, TimedOut: qs.TimedOut, Rejected: qs.Rejected, WaitSeconds: qs.Wait.Seconds(),
	}}
	inConf := map[string]bool{}
	for _, bc := range pc.Backends {
		inConf[bc.ID()] = true
	}
	present := map[string]bool{}
	discovered := p.hasDiscovery(name) // its extra backends are its source's, not runtime adds
	for _, b := range pl.Backends() {
		present[b.ID] = true
		if !inConf[b.ID] && !discovered {
			v.Overrides.Added = append(v.Overrides.Added, b.ID)
		}
		v.Backends = append(v.Backends, p.backendView(name, pl, b, l4))
	}
	for _, bc := range pc.Backends {
		if id := bc.ID(); !present[id] {
			v.Overrides.Removed = append(v.Overrides.Removed, id)
		}
	}
	v.Overrides.Backends = pl.Overrides()
	return v
}

func (p *Plane) backendView(pool string, pl *upstream.Pool, b *upstream.Backend, l4 bool) BackendView {
	v := BackendView{
		ID: b.ID, Address: b.Address, State: b.State().String(),
		Weight: b.Weight(), ConfigWeight: b.ConfigWeight(), WeightOverridden: b.WeightOverridden(),
		EffectiveWeight: b.EffectiveWeight(), Backup: b.Backup(), MaxConns: b.MaxConns(),
		InFlight: b.InFlight(), Requests: b.Requests(), Failures: b.Failures(),
		Responses:     map[string]uint64{},
		LatencyEWMAMs: ms(b.LatencyEWMA()),
		Ejections:     p.Health.Ejections(pool, b.ID),
	}
	for i, n := range p.responses(b) {
		if n > 0 {
			v.Responses[classNames[i]] = n
		}
	}
	if q, ok := p.metrics.p99(pool, b); ok {
		v.LatencyP99Ms = &q
	}
	if s, ok := pl.LBStatus(b); ok {
		v.LBStatus = &s
	}
	if r, ok := p.Health.Last(pool, b.ID); ok {
		v.Health = &HealthView{At: r.At, OK: r.OK, Detail: r.Detail, TookMs: ms(r.Took)}
	}
	if u := b.EjectedUntil(); !u.IsZero() && time.Now().Before(u) {
		v.EjectedUntil = &u
	}
	if u := b.DrainUntil(); !u.IsZero() {
		v.DrainUntil = &u
	}
	if l4 {
		c := p.connStats(b)
		v.Conns = &c
	}
	return v
}

// Handler serves the API, the page and the metrics.
func (p *Plane) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", p.index)
	sub, _ := fs.Sub(uiFS, "ui")
	mux.Handle("GET /ui/", http.StripPrefix("/ui/", http.FileServerFS(sub)))
	mux.Handle("GET /api/pools", p.read(http.HandlerFunc(p.listPools)))
	mux.Handle("GET /api/pools/{pool}", p.read(http.HandlerFunc(p.getPool)))
	mux.Handle("GET /api/ha", p.read(http.HandlerFunc(p.getHA)))
	mux.Handle("GET /api/bgp", p.read(http.HandlerFunc(p.getBGP)))
	mux.HandleFunc("POST /api/pools/{pool}/backends", p.change(p.add))
	mux.HandleFunc("DELETE /api/pools/{pool}/backends/{backend}", p.change(p.remove))
	mux.HandleFunc("POST /api/pools/{pool}/backends/{backend}/{action}", p.change(p.action))
	mux.Handle("GET /metrics", p.read(p.metrics.handler()))
	p.adviseRoutes(mux) // observe.go
	return securityHeaders(mux)
}

func securityHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("X-Frame-Options", "DENY")
		w.Header().Set("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'")
		w.Header().Set("Referrer-Policy", "no-referrer")
		h.ServeHTTP(w, r)
	})
}

func (p *Plane) index(w http.ResponseWriter, r *http.Request) {
	sess := p.session(w, r)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_ = indexTmpl.Execute(w, map[string]any{"Nonce": p.nonce(sess), "TokenRequired": p.currentToken() != "", "ReadsNeedToken": p.readsNeedToken()})
}

// PoolsResponse is the body of GET /api/pools.
type PoolsResponse struct {
	Time  time.Time  `json:"time"`
	Pools []PoolView `json:"pools"`
	// Directors are the XDP directors (admin/director.go), when any listener has forwarding.
	Directors []DirectorView `json:"directors,omitempty"`
	// HA is the virtual router (admin/ha.go), when the configuration has an ha section.
	HA *HAView `json:"ha,omitempty"`
	// BGP is the BGP speaker (admin/bgp.go), when the configuration has a bgp section.
	BGP *BGPView `json:"bgp,omitempty"`
	// Listeners are the counters the data planes keep per listener (tcp and udp listeners,
	// and http ones with accept_proxy).
	Listeners []ListenerStats `json:"listeners"`
	// Discovery is each discovered pool's source (admin/discovery.go); Fleet the node's fleet
	// on etcd (admin/fleet.go), when configured.
	Discovery []DiscoveryView `json:"discovery,omitempty"`
	Fleet     *FleetView      `json:"fleet,omitempty"`
}

func (p *Plane) listPools(w http.ResponseWriter, _ *http.Request) {
	st := p.cur.Load()
	out := PoolsResponse{Time: time.Now(), Pools: []PoolView{}, Listeners: p.listenerStats()}
	if st != nil {
		for _, name := range st.order {
			if pl := st.pools[name]; pl != nil {
				out.Pools = append(out.Pools, p.poolView(name, pl, st.conf[name]))
			}
		}
	}
	out.Directors = p.directorViews()
	out.Discovery, out.Fleet = p.discoveryViews(), p.fleetView()
	out.HA = p.haView()
	out.BGP = p.bgpView()
	writeJSON(w, http.StatusOK, out)
}

func (p *Plane) getPool(w http.ResponseWriter, r *http.Request) {
	st := p.cur.Load()
	name := r.PathValue("pool")
	pl := st.pool(name)
	if pl == nil {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no pool %q", name))
		return
	}
	writeJSON(w, http.StatusOK, p.poolView(name, pl, st.conf[name]))
}

// change wraps a mutating handler with authorisation, the pool lookup and a bounded body.
func (p *Plane) change(f func(w http.ResponseWriter, r *http.Request, pl *upstream.Pool) (string, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if ae := p.authorize(r); ae != nil {
			p.log.Warn("admin change refused", "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr, "reason", ae.msg)
			writeError(w, ae.status, ae.msg)
			return
		}
		name := r.PathValue("pool")
		pl := p.cur.Load().pool(name)
		if pl == nil {
			writeError(w, http.StatusNotFound, fmt.Sprintf("no pool %q", name))
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
		if fleetRequested(r) { // ?fleet=1: every node applies it (admin/fleet.go)
			p.fleetChange(w, r, name, pl)
			return
		}
		what, err := f(w, r, pl)
		if err != nil {
			status := http.StatusBadRequest
			switch {
			case errors.Is(err, upstream.ErrUnknownBackend):
				status = http.StatusNotFound
			case errors.Is(err, upstream.ErrDuplicateBackend):
				status = http.StatusConflict
			}
			writeError(w, status, err.Error())
			return
		}
		p.log.Info("runtime change", "pool", name, "change", what, "remote", r.RemoteAddr)
		if p.Health != nil {
			p.Health.Kick()
		}
		writeJSON(w, http.StatusOK, map[string]any{"ok": true, "change": what, "pool": p.poolView(name, pl, p.cur.Load().conf[name])})
	}
}

// readJSON decodes an optional JSON body into v; an empty body leaves v unchanged. The body
// must be one JSON object and nothing after it but white space: a second value would be
// silently ignored otherwise.
func readJSON(r *http.Request, v any) error {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) {
			return nil
		}
		return fmt.Errorf("bad JSON body: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("bad JSON body: one JSON object only, with nothing after it")
	}
	return nil
}

// AddRequest is the body of POST /api/pools/{pool}/backends.
type AddRequest struct {
	Address  string `json:"address"`
	Name     string `json:"name,omitempty"`
	Weight   *int   `json:"weight,omitempty"`
	MaxConns int    `json:"max_conns,omitempty"`
	Backup   bool   `json:"backup,omitempty"`
}

func (p *Plane) add(_ http.ResponseWriter, r *http.Request, pl *upstream.Pool) (string, error) {
	var req AddRequest
	if err := readJSON(r, &req); err != nil {
		return "", err
	}
	bc := config.Backend{Address: req.Address, Name: req.Name, Weight: 1, MaxConns: req.MaxConns, Backup: req.Backup}
	if req.Weight != nil {
		bc.Weight = *req.Weight
	}
	if err := config.CheckBackend(bc); err != nil { // the file's rules, so the API admits nothing a file could not
		return "", err
	}
	if err := p.selfTarget(bc.Address); err != nil {
		return "", err
	}
	b, err := pl.Add(bc.Spec())
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("add %s (%s, weight %d)", b.ID, b.Address, bc.Weight), nil
}

func (p *Plane) remove(_ http.ResponseWriter, r *http.Request, pl *upstream.Pool) (string, error) {
	id := r.PathValue("backend")
	return "remove " + id, pl.Remove(id)
}

// DrainRequest is the optional body of POST .../drain: without a grace the backend keeps
// its pinned clients (sticky cookies, L4 persistence) as long as they come back; with one,
// they move when it ends.
type DrainRequest struct {
	Grace string `json:"grace,omitempty"`
}

// WeightRequest is the body of POST .../weight; a null weight drops the override.
type WeightRequest struct {
	Weight *int `json:"weight"`
}

func (p *Plane) action(w http.ResponseWriter, r *http.Request, pl *upstream.Pool) (string, error) {
	id := r.PathValue("backend")
	switch act := r.PathValue("action"); act {
	case "drain":
		var req DrainRequest
		if err := readJSON(r, &req); err != nil {
			return "", err
		}
		if req.Grace == "" {
			return "drain " + id, pl.Drain(id)
		}
		g, err := time.ParseDuration(req.Grace)
		if err != nil || g <= 0 {
			return "", fmt.Errorf("grace %q: want a duration such as 10m", req.Grace)
		}
		return fmt.Sprintf("drain %s (pinned clients for at most %s)", id, g), pl.DrainFor(id, g)
	case "disable":
		return "disable " + id, pl.Disable(id)
	case "enable":
		return "enable " + id, pl.Enable(id)
	case "remove":
		return p.remove(w, r, pl)
	case "weight":
		var req WeightRequest
		if err := readJSON(r, &req); err != nil {
			return "", err
		}
		if req.Weight == nil {
			return "reset weight of " + id, pl.ResetWeight(id)
		}
		if err := config.CheckWeight(*req.Weight); err != nil {
			return "", fmt.Errorf("weight %v", err)
		}
		return fmt.Sprintf("weight %s %d", id, *req.Weight), pl.SetWeight(id, *req.Weight)
	default:
		valid := []string{"weight", "drain", "disable", "enable", "remove"}
		slices.Sort(valid)
		return "", fmt.Errorf("unknown action %q (valid: %v)", act, valid)
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]any{"ok": false, "error": msg})
}
