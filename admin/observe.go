package admin

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"ballast/advise"
	"ballast/config"
	"ballast/upstream"
)

// What `ballast advise` reads: every pool keeps its last obsRing releases (backend, time,
// latency, outcome) in a ring written on the request path without locks; GET
// /api/pools/{pool}/observed turns them into an advise.Observation, and GET
// /api/pools/{pool}/advice replays it through the simulator (one at a time, cached).

// obsRing is how many releases a pool remembers: enough for the in-flight and latency
// figures of a busy pool, 128 KiB per pool.
const obsRing = 4096

// maxObsBackends bounds the backends one pool's ring numbers; past it (backends added and
// removed at runtime for long) the ring starts afresh.
const maxObsBackends = 1 << 16

// obsSlot is one release; seq is written last (0 while writing) so that a reader can tell a
// slot it read whole from one being rewritten. A writer preempted for a whole lap of the ring
// may leave an older record in a newer one's slot: the reader skips it (a release lost, never
// a torn one).
type obsSlot struct {
	seq  atomic.Uint64
	at   atomic.Int64 // release, Unix ns
	lat  atomic.Int64 // ns
	meta atomic.Uint64
}

type poolObs struct {
	name string
	next atomic.Uint64
	ring [obsRing]obsSlot

	mu  sync.Mutex
	ids []string // backend number -> ID
}

type obsEntry struct {
	o   *observer
	po  *poolObs
	num uint64
}

// obsEntrySlot keeps each backend's obsEntry on the backend (one load on the release path, as
// histSlot does for the metrics), for the observer that saw it first.
var obsEntrySlot = upstream.NewSlot()

// observer holds the rings; its zero value is ready.
type observer struct {
	mu      sync.Mutex // slow path: a backend seen for the first time
	pools   sync.Map   // pool name -> *poolObs
	entries sync.Map   // *upstream.Backend -> *obsEntry
	resets  atomic.Uint64

	adviceMu    sync.Mutex // one advice computation at a time
	adviceCache sync.Map   // pool+"\x00"+objective -> *cachedAdvice
}

type cachedAdvice struct {
	at  time.Time
	out []byte
}

// release records one release; it is the plane's release observer's second half.
func (o *observer) release(pl *upstream.Pool, b *upstream.Backend, latency time.Duration, failed bool) {
	e, _ := b.Attachment(obsEntrySlot).(*obsEntry)
	if e == nil || e.o != o || e.po.name != pl.Name {
		v, ok := o.entries.Load(b)
		if !ok || v.(*obsEntry).po.name != pl.Name {
			v = o.entry(pl.Name, b)
		}
		e = v.(*obsEntry)
		if cur, _ := b.Attachment(obsEntrySlot).(*obsEntry); cur == nil || cur.o == o {
			b.SetAttachment(obsEntrySlot, e)
		}
	}
	meta := e.num << 1
	if failed {
		meta |= 1
	}
	i := e.po.next.Add(1)
	s := &e.po.ring[(i-1)%obsRing]
	s.seq.Store(0)
	s.at.Store(time.Now().UnixNano())
	s.lat.Store(int64(latency))
	s.meta.Store(meta)
	s.seq.Store(i)
}

func (o *observer) entry(pool string, b *upstream.Backend) *obsEntry {
	o.mu.Lock()
	defer o.mu.Unlock()
	if v, ok := o.entries.Load(b); ok && v.(*obsEntry).po.name == pool {
		return v.(*obsEntry)
	}
	v, _ := o.pools.LoadOrStore(pool, &poolObs{name: pool})
	po := v.(*poolObs)
	po.mu.Lock()
	if len(po.ids) >= maxObsBackends {
		po.mu.Unlock()
		po = &poolObs{name: pool}
		o.pools.Store(pool, po)
		o.resets.Add(1)
		po.mu.Lock()
	}
	e := &obsEntry{o: o, po: po, num: uint64(len(po.ids))}
	po.ids = append(po.ids, b.ID)
	po.mu.Unlock()
	o.entries.Store(b, e)
	return e
}

// releases returns the pool's remembered releases, oldest first.
func (o *observer) releases(pool string) []advise.Release {
	v, ok := o.pools.Load(pool)
	if !ok {
		return nil
	}
	po := v.(*poolObs)
	po.mu.Lock()
	ids := slices.Clone(po.ids)
	po.mu.Unlock()
	last := po.next.Load()
	first := uint64(1)
	if last > obsRing {
		first = last - obsRing + 1
	}
	out := make([]advise.Release, 0, last-first+1)
	for i := first; i <= last; i++ {
		s := &po.ring[(i-1)%obsRing]
		if s.seq.Load() != i {
			continue
		}
		at, lat, meta := s.at.Load(), s.lat.Load(), s.meta.Load()
		if s.seq.Load() != i {
			continue // rewritten while read
		}
		num := meta >> 1
		if num >= uint64(len(ids)) {
			continue
		}
		out = append(out, advise.Release{Backend: ids[num], AtNs: at, LatencyNs: lat, Failed: meta&1 != 0})
	}
	slices.SortFunc(out, func(a, b advise.Release) int { return cmp.Compare(a.AtNs, b.AtNs) })
	return out
}

// observation builds the pool's Observation from its settings, its backends' counters and
// the ring.
func (p *Plane) observation(name string, pl *upstream.Pool, pc config.Pool, withReleases bool) (advise.Observation, error) {
	o := advise.Observation{
		Pool: name, Balancer: pl.Balancer(), HashKey: pc.HashKey.Source,
		MaxConns: pc.MaxConns, MaxQueue: pl.MaxQueue(),
		Hedge: advise.Hedge{DelayMs: ms(pc.Hedge.Delay.Duration), Max: pc.Hedge.MaxHedges},
	}
	if pl.MaxQueue() > 0 {
		o.QueueTimeoutMs = ms(pl.QueueTimeout())
	}
	for _, b := range pl.Backends() {
		o.Backends = append(o.Backends, advise.BackendObs{
			ID: b.ID, Weight: b.Weight(), MaxConns: b.MaxConns(), State: b.State().String(),
			InFlight: b.InFlight(), Requests: b.Requests(), Errors: b.Failures(),
		})
	}
	rs := p.obs.releases(name)
	if withReleases {
		o.Releases = rs
	}
	err := advise.Observe(&o, rs)
	return o, err
}

func (p *Plane) getObserved(w http.ResponseWriter, r *http.Request) {
	st := p.cur.Load()
	name := r.PathValue("pool")
	pl := st.pool(name)
	if pl == nil {
		writeError(w, http.StatusNotFound, "no pool "+strconv.Quote(name))
		return
	}
	o, err := p.observation(name, pl, st.conf[name], r.URL.Query().Get("releases") == "1")
	if err != nil && !errors.Is(err, advise.ErrTooFew) {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, o) // with too few samples the figures stay empty
}

// adviceTTL is how long one pool's advice is served from the cache.
const adviceTTL = 10 * time.Second

// adviceBudget bounds one advice computation (it runs the simulator in this process), and
// maxAdviceRuns the runs per choice a request may ask for (?runs=).
const (
	adviceBudget  = 20 * time.Second
	maxAdviceRuns = 20
)

func (p *Plane) getAdvice(w http.ResponseWriter, r *http.Request) {
	st := p.cur.Load()
	name := r.PathValue("pool")
	pl := st.pool(name)
	if pl == nil {
		writeError(w, http.StatusNotFound, "no pool "+strconv.Quote(name))
		return
	}
	obj, err := advise.ParseObjective(r.URL.Query().Get("objective"))
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	runs := 0
	if v := r.URL.Query().Get("runs"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxAdviceRuns {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("runs %q: want 1..%d", v, maxAdviceRuns))
			return
		}
		runs = n
	}
	key := name + "\x00" + string(obj) + "\x00" + strconv.Itoa(runs)
	if v, ok := p.obs.adviceCache.Load(key); ok && time.Since(v.(*cachedAdvice).at) < adviceTTL {
		writeRaw(w, v.(*cachedAdvice).out)
		return
	}
	if !p.obs.adviceMu.TryLock() {
		// One computation at a time: a flood of page loads cannot take the proxy's CPU.
		w.Header().Set("Retry-After", "2")
		writeError(w, http.StatusServiceUnavailable, "advice is being computed; try again in a moment")
		return
	}
	defer p.obs.adviceMu.Unlock()
	o, err := p.observation(name, pl, st.conf[name], false)
	if err != nil {
		status := http.StatusInternalServerError
		if errors.Is(err, advise.ErrTooFew) {
			status = http.StatusConflict
		}
		writeError(w, status, err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), adviceBudget)
	defer cancel()
	adv, err := advise.Advise(ctx, o, advise.Options{Objective: obj, Runs: runs})
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	out, err := json.MarshalIndent(adv, "", "  ")
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	out = append(out, '\n')
	p.obs.adviceCache.Store(key, &cachedAdvice{at: time.Now(), out: out})
	writeRaw(w, out)
}

func writeRaw(w http.ResponseWriter, b []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(b)
}

// adviseRoutes adds the observation and advice endpoints to mux.
func (p *Plane) adviseRoutes(mux *http.ServeMux) {
	mux.Handle("GET /api/pools/{pool}/observed", p.read(http.HandlerFunc(p.getObserved)))
	mux.Handle("GET /api/pools/{pool}/advice", p.read(http.HandlerFunc(p.getAdvice)))
}

// Observed fetches a pool's observation (GET /api/pools/{pool}/observed), with its raw
// releases when asked.
func (c *Client) Observed(ctx context.Context, pool string, releases bool) (advise.Observation, error) {
	var o advise.Observation
	path := "/api/pools/" + url.PathEscape(pool) + "/observed"
	if releases {
		path += "?releases=1"
	}
	err := c.do(ctx, http.MethodGet, path, nil, &o)
	return o, err
}
