package lab

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"ballast/advise"
	"ballast/evloop"
	"ballast/lab/backend"
	"ballast/lab/loadgen"
	"ballast/sim"
)

// The jitter calibration: before a scenario's rows, a short load of the same shape runs
// through Ballast with every request timed at each hop it crosses, and the model draws its
// delays from what was measured (sim.Jitter). Three clocks are read, all on this machine:
//   - the load generator's (Options.Trace): when a request's index was taken, when it was
//     written (connecting first for a fresh connection), when its response was read;
//   - the emulated backends' (backend.Server.StartTrace): when it arrived, on a connection
//     Ballast opened for it or a pooled one, when its service began and ended;
//   - Ballast's own, from its admin API (GET /api/pools/lab/observed?releases=1): when it
//     released the backend's slot and how long before that it had dispatched the request,
//     i.e. when the balancer picked.
//
// Ballast's releases carry no request index, so they are matched to the backends' arrivals
// backend by backend in order (the n-th dispatch to a backend with the n-th arrival at it).

// Calibration is one measured jitter and the figures it was drawn from.
type Calibration struct {
	Jitter *sim.Jitter
	// Samples is how many requests were matched on all three clocks; Inversions how many
	// requests the balancer picked before one sent earlier (adjacent pairs, in pick order).
	Samples, Inversions int
	// Slowest describes the request that took longest beyond its service time, hop by hop
	// (or as the client saw it, when the other clocks did not match it).
	Slowest string
	// Ahead counts the responses a client had read before Ballast had released as many slots
	// of their backend (aheadOfReleases); -1 when Ballast's ring did not hold the whole run.
	Ahead int

	hops hopSamples
	res  *loadgen.Result // the load's own figures (a second run of a row: spread.go)
}

// hopSamples are the delays measured at each hop, one per matched request (overshoot only
// for requests that slept; fresh only for requests on a connection Ballast opened for them).
type hopSamples struct {
	send, toPick, forward, fresh, overshoot, ret, deliver []time.Duration
	// handoff: for requests that waited in Ballast's backlog, from the release that freed
	// their slot to their dispatch (their to-pick, which holds the wait, is left out).
	handoff   []time.Duration
	oneSender bool
	// first holds the same for the first requests of the run (one per client connection),
	// while Ballast is fresh from its start; recovery the hops of the others that began
	// within recoveryFor after a flow stall's end (sim.Jitter.Recovery); the main fields hold
	// the rest.
	first, recovery *hopSamples
	// stalls are the run's flow stalls (flowStallsDrained, since begin) over its span; drain the
	// gaps between the outputs of what they held, after their ends (flowStallsDrained).
	stalls []stallAt
	drain  []time.Duration
	begin  time.Time
	span   time.Duration
}

// jitter turns the samples into the model's distributions.
func (h hopSamples) jitter() *sim.Jitter {
	// A fresh backend connection costs what a pooled one does plus the connect.
	forward := h.forward
	var connect []time.Duration
	if len(forward) > 0 {
		base := sim.DistOf(forward, 2).Q[1]
		for _, f := range h.fresh {
			connect = append(connect, max(f-base, 0))
		}
	} else {
		forward = h.fresh
	}
	// Kept at sim.TailP: the hops' tails (a request in a thousand delayed by milliseconds in
	// Ballast's process, which the lab's stall probe cannot see) stay as rare as measured.
	at := func(xs []time.Duration) sim.Dist { return sim.DistAt(xs, sim.TailP) }
	j := &sim.Jitter{
		Send: at(h.send), ToPick: at(h.toPick), Forward: at(forward),
		Connect: at(connect), Overshoot: at(h.overshoot), Return: at(h.ret),
		Deliver: at(h.deliver), Handoff: at(h.handoff), OneSender: h.oneSender,
		// Ballast's hedge timer is its shard wheel's: it fires at the first tick boundary at or
		// after its deadline, so up to a tick after the delay.
		TimerTick: 1 << evloop.TickShift,
	}
	if r := h.recovery; r != nil && len(h.stalls) > 0 {
		or := func(xs, steady []time.Duration) sim.Dist {
			if len(xs) == 0 {
				return at(steady)
			}
			return at(xs)
		}
		j.Recovery = &sim.Hops{Send: or(r.send, h.send), ToPick: or(r.toPick, h.toPick), Forward: or(r.forward, forward),
			Return: or(r.ret, h.ret), Deliver: or(r.deliver, h.deliver)}
		j.RecoveryFor = recoveryFor
		j.RecoveryOvershoot = or(r.overshoot, h.overshoot)
	}
	if f := h.first; f != nil && len(f.send) > 0 {
		ff := f.forward
		if len(ff) == 0 {
			ff = f.fresh // the connect is drawn on top of the forward: take the pooled ones' when any
		}
		j.First = &sim.Hops{Send: at(f.send), ToPick: at(f.toPick), Forward: at(ff), Return: at(f.ret), Deliver: at(f.deliver)}
		if len(f.forward) == 0 {
			j.First.Forward = j.Forward
		}
	}
	return j
}

// String summarises the calibration for a report's notes.
func (c Calibration) String() string {
	s := fmt.Sprintf("%d requests timed at every hop, %d adjacent pairs picked out of the order they were sent in; %s",
		c.Samples, c.Inversions, c.Jitter)
	if n := len(c.hops.handoff); n > 0 {
		s += fmt.Sprintf(" (hand-off: %d requests that waited in the backlog)", n)
	}
	if h := c.hops; h.span > 0 {
		s += fmt.Sprintf("; flow stalls: %d in %.1f s (%s)", len(h.stalls), h.span.Seconds(), sim.DistAt(lengths(h.stalls), sim.TailP))
	}
	if c.Ahead >= 0 {
		s += fmt.Sprintf("; %d responses read by their client before Ballast released their slot", c.Ahead)
	}
	if c.Slowest != "" {
		s += "; slowest: " + c.Slowest
	}
	return s
}

// calibrate runs load through Ballast over fresh backends built from cfgs and measures the
// jitter.
func calibrate(ctx context.Context, o Options, spec PoolSpec, cfgs []backend.Config, load loadgen.Options) (Calibration, error) {
	srvs, ts, closeAll, err := localBackends(cfgs...)
	if err != nil {
		return Calibration{}, err
	}
	defer closeAll()
	spec.Backends = ts
	var c Calibration
	// A run whose clocks could not be matched for most requests (a stall of the machine past
	// maxMatchSlack on a few hops of a short run) is run again, up to calibrationAttempts
	// times in all, and the last one's figures are kept.
	for attempt := 1; ; attempt++ {
		var res *loadgen.Result
		res, _, c, err = tracedRun(ctx, o, spec, srvs, load)
		c.res = res
		if err == nil && (c.Samples < minCalibration || float64(c.Samples) < 0.8*float64(load.N)) {
			err = fmt.Errorf("lab: jitter calibration matched only %d of %d requests", c.Samples, load.N)
			if attempt < calibrationAttempts && ctx.Err() == nil {
				o.logf("%v (attempt %d of %d); again", err, attempt, calibrationAttempts)
				continue
			}
		}
		return c, err
	}
}

// calibrationAttempts bounds the runs of a calibration whose requests could not be matched.
const calibrationAttempts = 3

// tracedRun starts Ballast for spec (over srvs, which it traces) with an admin listener,
// applies load with every request traced, and returns the load's figures, Ballast's CPU time
// and the jitter measured on the way.
func tracedRun(ctx context.Context, o Options, spec PoolSpec, srvs []*backend.Server, load loadgen.Options) (*loadgen.Result, time.Duration, Calibration, error) {
	res, cpus, cals, err := tracedLoads(ctx, o, spec, srvs, []loadgen.Options{load})
	if err != nil {
		return nil, 0, Calibration{}, err
	}
	return res[0], cpus[0], cals[0], nil
}

// tracedLoads is tracedRun for several loads one after the other on one Ballast. Ballast's
// ring keeps the last 4096 releases, so a longer load is matched on its end.
func tracedLoads(ctx context.Context, o Options, spec PoolSpec, srvs []*backend.Server, loads []loadgen.Options) ([]*loadgen.Result, []time.Duration, []Calibration, error) {
	p, err := startWithAdmin(ctx, o, spec)
	if err != nil {
		return nil, nil, nil, err
	}
	defer p.Close()
	spec.Admin = p.admin
	var ress []*loadgen.Result
	var cpus []time.Duration
	var cals []Calibration
	for _, load := range loads {
		for _, s := range srvs {
			s.StartTrace()
		}
		load.Trace = true
		res, cpu, err := measure(ctx, o, p, load)
		if err != nil {
			return nil, nil, nil, err
		}
		obs, err := fetchObserved(ctx, spec.Admin)
		if err != nil {
			return nil, nil, nil, err
		}
		var arr []backend.Arrival
		for _, s := range srvs {
			arr = append(arr, s.Trace()...)
		}
		c, err := measureJitter(res, arr, obs.Releases, len(load.URLSuffixes) > 1, queues(spec))
		if err != nil {
			return nil, nil, nil, err
		}
		c.Jitter.Source = fmt.Sprintf("%s, -c %d -n %d%s, %s; load average %s", time.Now().UTC().Format("2006-01-02 15:04 UTC"),
			load.C, load.N, map[bool]string{true: " -k", false: " (a new connection per request)"}[load.KeepAlive], spec.Balancer, loadAvg())
		ress, cpus, cals = append(ress, res), append(cpus, cpu), append(cals, c)
	}
	for _, s := range srvs {
		s.StopTrace()
	}
	return ress, cpus, cals, nil
}

// adminProxy is a started Ballast with the address of its admin listener.
type adminProxy struct {
	Proxy
	admin string
}

// adminAttempts bounds the starts of a Ballast whose admin port, free when picked, was taken
// by another process of the machine before Ballast bound it.
const adminAttempts = 3

// startWithAdmin starts Ballast for spec with an admin listener on a free loopback port, on
// another port when the one picked was taken in between (up to adminAttempts starts).
func startWithAdmin(ctx context.Context, o Options, spec PoolSpec) (*adminProxy, error) {
	for attempt := 1; ; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		spec.Admin = "127.0.0.1:" + strconv.Itoa(port)
		p, err := StartBallast(ctx, o.Ballast, spec, 60*time.Second)
		if err == nil {
			return &adminProxy{p, spec.Admin}, nil
		}
		if attempt >= adminAttempts || !strings.Contains(err.Error(), "address already in use") || ctx.Err() != nil {
			return nil, err
		}
		o.logf("%v (attempt %d of %d); again on another port", err, attempt, adminAttempts)
	}
}

// fetchObserved reads the lab pool's observation with its releases from Ballast's admin API.
func fetchObserved(ctx context.Context, admin string) (advise.Observation, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+admin+"/api/pools/lab/observed?releases=1", nil)
	if err != nil {
		return advise.Observation{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return advise.Observation{}, fmt.Errorf("lab: reading Ballast's observations: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return advise.Observation{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return advise.Observation{}, fmt.Errorf("lab: GET observed: %s: %s", resp.Status, body)
	}
	var o advise.Observation
	if err := json.Unmarshal(body, &o); err != nil {
		return advise.Observation{}, fmt.Errorf("lab: observed: %w", err)
	}
	return o, nil
}

// queues reports whether spec's pool has a backlog: max_conns with max_queue (without a queue,
// a request that finds every backend full is refused, not queued).
func queues(spec PoolSpec) bool { return spec.MaxConns > 0 && spec.MaxQueue > 0 }

// measureJitter matches the three clocks' records and returns the delays between them. In a
// pool with a backlog (backlog), the requests that waited in it have a to-pick that holds the
// wait, not a hop, and a hand-off (backlogWaits).
func measureJitter(res *loadgen.Result, arrivals []backend.Arrival, rels []advise.Release, oneSender, backlog bool) (Calibration, error) {
	begin, beginUnix := res.Begin, res.Begin.UnixNano()
	rel := func(t time.Time) int64 { return int64(t.Sub(begin)) }
	// Match each backend's arrivals with Ballast's dispatches to it: Ballast's interval, from
	// its dispatch to its release, holds the backend's, from arrival to the end of service.
	byBackend := map[string][]backend.Arrival{}
	for _, a := range arrivals {
		if a.Seq >= 0 {
			byBackend[a.Backend] = append(byBackend[a.Backend], a)
		}
	}
	relsBy := map[string][]advise.Release{}
	for _, r := range rels {
		relsBy[r.Backend] = append(relsBy[r.Backend], r)
	}
	bySeq := map[int64]matched{}
	for name, as := range byBackend {
		slices.SortFunc(as, func(x, y backend.Arrival) int { return x.Arrived.Compare(y.Arrived) })
		for _, m := range matchReleases(as, relsBy[name], func(a backend.Arrival) (int64, int64) {
			return beginUnix + rel(a.Arrived), beginUnix + rel(a.Done)
		}) {
			bySeq[as[m[0]].Seq] = matched{as[m[0]], relsBy[name][m[1]]}
		}
	}
	h := hopSamples{oneSender: oneSender, first: &hopSamples{}, recovery: &hopSamples{}}
	type pick struct {
		seq int64
		at  int64
	}
	var picks []pick
	waited, handoffs := backlogWaits(res, bySeq, rels, backlog)
	h.handoff = handoffs
	h.stalls, h.drain = flowStallsDrained(res, arrivals, flowStallMin)
	h.begin, h.span = res.Begin, time.Duration(res.Seconds*float64(time.Second))
	for _, e := range res.Trace {
		m, ok := bySeq[e.Index]
		if !ok || !e.OK {
			continue
		}
		t1 := m.r.Dispatched() - beginUnix
		t2 := rel(m.a.Arrived)
		t3 := rel(m.a.Done)
		t4 := m.r.AtNs - beginUnix
		// Each hop goes with the samples of the phase it began in (the model draws a hop when
		// it begins): the start-up, the recovery from a flow stall, or the steady state.
		g := func(began int64) *hopSamples {
			switch {
			case e.Index < int64(res.Options.C):
				return h.first
			case recovering(h.stalls, began):
				return h.recovery
			}
			return &h
		}
		gs := g(e.Start) // the model draws send and to-pick when the client takes the request
		gs.send = append(gs.send, outside(h.stalls, e.Start, e.Sent))
		if !waited[e.Index] {
			gs.toPick = append(gs.toPick, outside(h.stalls, e.Sent, t1))
		}
		if m.a.FreshConn {
			h.fresh = append(h.fresh, outside(h.stalls, t1, t2)) // connects: all of them, start-up or not
		} else {
			gf := g(t1)
			gf.forward = append(gf.forward, outside(h.stalls, t1, t2))
		}
		if m.a.Service > 0 {
			due := rel(m.a.Started) + int64(m.a.Service)
			g := &h
			if e.Index >= int64(res.Options.C) && recovering(h.stalls, due) {
				g = h.recovery
			}
			g.overshoot = append(g.overshoot, outside(h.stalls, due, t3))
		}
		gr := g(t3)
		gr.ret = append(gr.ret, outside(h.stalls, t3, t4))
		gd := g(t4)
		gd.deliver = append(gd.deliver, outside(h.stalls, t4, e.Done))
		picks = append(picks, pick{e.Index, t1})
	}
	slowest := slowestRequest(res, bySeq, beginUnix)
	if len(picks) == 0 {
		return Calibration{}, fmt.Errorf("lab: jitter calibration matched no request of %d (backends saw %d, Ballast released %d)",
			len(res.Trace), len(arrivals), len(rels))
	}
	slices.SortFunc(picks, func(x, y pick) int { return cmp.Compare(x.at, y.at) })
	inv := 0
	for i := 1; i < len(picks); i++ {
		if picks[i].seq < picks[i-1].seq {
			inv++
		}
	}
	return Calibration{Jitter: h.jitter(), Samples: len(picks), Inversions: inv, Slowest: slowest,
		Ahead: aheadOfReleases(res, rels), hops: h}, nil
}

// aheadOfReleases counts the responses the clients read from a backend while they had read
// more of its responses than Ballast had released slots of it since the load began: each a
// response that reached its client before its slot was released, whichever release was
// whose (a lower bound). The model releases a slot and then delivers the response; so does
// Ballast, which releases a response read whole before writing its last bytes to the client
// (h1's releaseRead), and the count is 0. Released after that write (before 2026-12-02 15:00
// UTC), some 4.5 % of the fast backend's responses in slow-backend's bybusyness row reached
// their client first, and the client's next request could be picked with that backend
// counted one busier than it was. -1 when the releases do not cover the load (Ballast's ring
// keeps the last 4096).
func aheadOfReleases(res *loadgen.Result, rels []advise.Release) int {
	ok := 0
	for _, e := range res.Trace {
		if e.OK && e.Backend != "" {
			ok++
		}
	}
	type mark struct {
		at      int64
		backend string
		read    bool
	}
	begin := res.Begin.UnixNano()
	var ms []mark
	for _, r := range rels {
		if r.AtNs >= begin { // an earlier load's on the same Ballast are not this one's
			ms = append(ms, mark{r.AtNs, r.Backend, false})
		}
	}
	if ok == 0 || len(ms) < ok {
		return -1
	}
	for _, e := range res.Trace {
		if e.OK && e.Backend != "" {
			ms = append(ms, mark{begin + e.Done, e.Backend, true})
		}
	}
	// At the same instant a release comes first: only a read strictly before it is ahead.
	slices.SortStableFunc(ms, func(x, y mark) int {
		if c := cmp.Compare(x.at, y.at); c != 0 {
			return c
		}
		return cmp.Compare(boolInt(x.read), boolInt(y.read))
	})
	lead := map[string]int{}
	ahead := 0
	for _, m := range ms {
		if !m.read {
			lead[m.backend]--
			continue
		}
		lead[m.backend]++
		if lead[m.backend] > 0 {
			ahead++
		}
	}
	return ahead
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// recoveryFor is how long after a flow stall's end a hop counts as the recovery's: on this
// machine (2026-12-02, a traced ewma run without keep-alive, load 1) backend A idled 182 ms
// of its workers' time, 89 ms inside the run's 90 flow stalls and 71 ms within 1 ms after
// their ends (84 ms within 2 ms): the requests a stall held reach the clients one by one,
// which connect again and are forwarded by a Ballast catching up, slower than in the
// steady state.
const recoveryFor = 2 * time.Millisecond

// recovering reports whether t (since the run's begin) lies within recoveryFor after the end
// of one of stalls (in order, not overlapping) and inside none.
func recovering(stalls []stallAt, t int64) bool {
	k, _ := slices.BinarySearchFunc(stalls, time.Duration(t), func(s stallAt, t time.Duration) int { return cmp.Compare(s.at, t+1) })
	if k == 0 { // no stall began at or before t
		return false
	}
	s := stalls[k-1]
	end := s.at + s.d
	return time.Duration(t) >= end && time.Duration(t)-end < recoveryFor
}

// minBacklogWait is how long after its send a release must come for the request to count as
// one that waited in the backlog for it: well past the to-pick of a request that found a slot
// (under 2 ms at the 99th percentile on this machine, start-up included), so that a request
// still on its way to Ballast when a slot freed is not taken for one that waited. A shorter
// wait stays in the request's to-pick.
const minBacklogWait = 2 * time.Millisecond

// backlogWaits finds the matched requests that waited in Ballast's backlog: those dispatched
// after a release that came minBacklogWait or more after their send (whether a request waits
// is the picker's answer, busy, which no record shows: byrequests waits for the backend it
// wants while another has a free slot). It returns them by index, and the hand-off of each:
// from the release that freed its slot to its dispatch. A release hands one slot, so each is
// used once: the waiters, in the order they were dispatched, take the latest unused release
// before their dispatch (when two slots free together the two hand-offs may swap; their sum
// stays).
func backlogWaits(res *loadgen.Result, by map[int64]matched, rels []advise.Release, backlog bool) (map[int64]bool, []time.Duration) {
	if !backlog {
		return nil, nil
	}
	beginUnix := res.Begin.UnixNano()
	type waiter struct {
		idx, sent, disp int64
	}
	var ws []waiter
	for _, e := range res.Trace {
		if m, ok := by[e.Index]; ok && e.OK {
			ws = append(ws, waiter{e.Index, beginUnix + e.Sent, m.r.Dispatched()})
		}
	}
	slices.SortFunc(ws, func(x, y waiter) int { return cmp.Compare(x.disp, y.disp) })
	order := slices.Clone(rels)
	slices.SortFunc(order, func(x, y advise.Release) int { return cmp.Compare(x.AtNs, y.AtNs) })
	used := make([]bool, len(order))
	waited := map[int64]bool{}
	var out []time.Duration
	for _, w := range ws {
		k, _ := slices.BinarySearchFunc(order, w.disp+1, func(r advise.Release, t int64) int { return cmp.Compare(r.AtNs, t) })
		for k--; k >= 0; k-- {
			r := order[k]
			if r.AtNs-w.sent < int64(minBacklogWait) || w.disp-r.AtNs > int64(maxMatchSlack) {
				break
			}
			waited[w.idx] = true
			if !used[k] {
				used[k] = true
				out = append(out, time.Duration(w.disp-r.AtNs))
				break
			}
		}
	}
	return waited, out
}

// matched is a request's records on the backend's and Ballast's clocks.
type matched struct {
	a backend.Arrival
	r advise.Release
}

// slowestRequest describes the matched request that spent longest outside its backend (from
// the client's start to its response, less its time inside the backend), and counts the
// requests the other clocks did not match; then the matched request answered last, which ends
// a makespan row, hop by hop as well.
func slowestRequest(res *loadgen.Result, by map[int64]matched, beginUnix int64) string {
	var worst, last *loadgen.Event
	var extra int64
	unmatched := 0
	for i := range res.Trace {
		e := &res.Trace[i]
		m, ok := by[e.Index]
		if !ok {
			unmatched++
			continue
		}
		if x := e.Done - e.Start - int64(m.a.Done.Sub(m.a.Arrived)); worst == nil || x > extra {
			worst, extra = e, x
		}
		if last == nil || e.Done > last.Done {
			last = e
		}
	}
	if worst == nil {
		return ""
	}
	ms := func(ns int64) float64 { return float64(ns) / 1e6 }
	begin := res.Begin
	hops := func(e *loadgen.Event) string {
		m := by[e.Index]
		return fmt.Sprintf("taken %.1f ms, written %.1f, picked %.1f, at the backend %.1f, served %.1f-%.1f, released %.1f, answered %.1f",
			ms(e.Start), ms(e.Sent), ms(m.r.Dispatched()-beginUnix), ms(int64(m.a.Arrived.Sub(begin))),
			ms(int64(m.a.Started.Sub(begin))), ms(int64(m.a.Done.Sub(begin))), ms(m.r.AtNs-beginUnix), ms(e.Done))
	}
	return fmt.Sprintf("request %d, %.1f ms outside its backend: %s (%d requests unmatched); answered last: request %d, at %s: %s",
		worst.Index, ms(extra), hops(worst), unmatched, last.Index, by[last.Index].a.Backend, hops(last))
}

// minCalibration is the fewest matched requests a calibration accepts (and at least 80 % of
// its requests).
const minCalibration = 20

// pos is a delay measured across two clocks, never negative: a worker descheduled between
// writing and reading its clock can read it after the next hop already has.
func pos(ns int64) time.Duration { return time.Duration(max(ns, 0)) }

// outside is the part of the hop from a to b (since the run's begin) that lies in no stall
// of stalls (in order, not overlapping): the model draws the stalls as delays shared by every
// request in flight (sim.Jitter.Stall), so a hop sample that kept the time a stall held it
// would draw that time twice.
func outside(stalls []stallAt, a, b int64) time.Duration {
	d := pos(b - a)
	// The first stall that ends after a.
	k, _ := slices.BinarySearchFunc(stalls, time.Duration(a), func(s stallAt, t time.Duration) int { return cmp.Compare(s.at+s.d, t+1) })
	for ; k < len(stalls) && int64(stalls[k].at) < b; k++ {
		from, to := max(a, int64(stalls[k].at)), min(b, int64(stalls[k].at+stalls[k].d))
		d -= pos(to - from)
	}
	return max(d, 0)
}

// calSetup is one calibration: a run of a scenario's own load over its own backends, with a
// balancer of its own rows, whose requests are timed at every hop and not reported as a row.
type calSetup struct {
	profile string // the sim profile it measures
	spec    PoolSpec
	cfgs    []backend.Config
	load    loadgen.Options
}

// heteroCfgs are the heterogeneous scenario's backends (seed 000).
var heteroCfgs = []backend.Config{{Name: "A", Workers: 2, Service: 706 * time.Microsecond}, {Name: "B", Workers: 1, Service: 800 * time.Microsecond}}

// heteroCalibrations measure the heterogeneous scenario's two loads (kept-alive connections,
// then a new one per request) for 3000 and 1000 requests: its rows run for 100000 and 20000,
// in the same steady state.
func heteroCalibrations() []calSetup {
	spec := PoolSpec{Balancer: "sqf", MaxConns: 32}
	return []calSetup{
		{sim.ProfileKeepAlive, spec, heteroCfgs, loadgen.Options{N: 3000, C: 16, KeepAlive: true}},
		{sim.ProfileFresh + " (heterogeneous)", spec, heteroCfgs, loadgen.Options{N: 1000, C: 16}},
	}
}

// slowCalibration is the slow-backend scenario's load with roundrobin: 25 of its 50 requests
// sleep on B, so the timer overshoot of its sleeps is measured as well.
func slowCalibration(o Options) calSetup {
	return calSetup{sim.ProfileFresh, PoolSpec{Balancer: "roundrobin"},
		[]backend.Config{{Name: "A", Workers: 1000}, {Name: "B", Workers: 5, Service: scaled(o, 5*time.Second)}},
		loadgen.Options{N: 50, C: 10}}
}

// variableCalibration is the variable-cost scenario's load (its ?wait= list, one request
// written at a time) with roundrobin.
func variableCalibration(o Options) calSetup {
	return calSetup{sim.ProfileFreshOrdered, PoolSpec{Balancer: "roundrobin"},
		[]backend.Config{{Name: "A", Workers: 4}, {Name: "B", Workers: 4}},
		loadgen.Options{N: 50, C: 10, URLSuffixes: waitSuffixes(o)}}
}

// backlogCalibrations are the variable-cost load through Ballast's central backlog
// (max_conns 4, as its backlog rows), with each backlog row's balancer: ten clients for eight
// slots, so that requests wait and are handed slots. They give the hand-off alone (the other
// hops of a run whose dispatches hold backlog waits are not a profile's), pooled into
// ProfileFreshOrdered's Handoff.
func backlogCalibrations(o Options) []calSetup {
	var out []calSetup
	for _, alg := range []string{"byrequests", "sqf"} {
		c := variableCalibration(o)
		c.profile = sim.ProfileFreshOrdered + " (backlog, " + alg + ")"
		c.spec = PoolSpec{Balancer: alg, MaxConns: 4, MaxQueue: 100}
		out = append(out, c)
	}
	return out
}

// run measures the setup.
func (c calSetup) run(ctx context.Context, o Options) (Calibration, error) {
	cal, err := calibrate(ctx, o, c.spec, c.cfgs, c.load)
	if err != nil {
		return Calibration{}, fmt.Errorf("jitter calibration (%s): %w", c.profile, err)
	}
	o.logf("jitter calibration, %s: %s", c.profile, cal)
	return cal, nil
}

// runJitter measures every calibration of the seed scenarios on its own: one row per hop of
// each, with its median and 99th percentile in the p50 and p99 columns, and the profile as
// sim/profiles.go holds it in the notes. The backlog calibrations come first and give only
// their hand-offs, which the fresh-ordered profile (the variable-cost load's) draws.
func runJitter(ctx context.Context, o Options, r *Report) error {
	r.Metric = Makespan
	r.Ideal = "none: these are the delays the model draws"
	probe := startStallProbe()
	defer func() {
		stalls, window := probe.Stop()
		r.Notes = append(r.Notes, fmt.Sprintf("stalls: %d longer than %v in %.1f s (%s): StallRate %.3f", len(stalls), stallThreshold,
			window.Seconds(), sim.DistAt(lengths(stalls), sim.TailP), float64(len(stalls))/window.Seconds()))
	}()
	hopRow := func(name string, d sim.Dist) {
		r.Results = append(r.Results, Result{Algorithm: name,
			P50Ms: float64(d.Quantile(.5)) / 1e6, P99Ms: float64(d.Quantile(.99)) / 1e6, Split: map[string]int64{}})
	}
	var handoffs []time.Duration
	for _, s := range backlogCalibrations(o) {
		cal, err := s.run(ctx, o)
		if err != nil {
			return err
		}
		if len(cal.hops.handoff) == 0 {
			return fmt.Errorf("jitter calibration (%s): no request waited in the backlog", s.profile)
		}
		handoffs = append(handoffs, cal.hops.handoff...)
		hopRow(s.profile+": hand-off", cal.Jitter.Handoff)
		r.Notes = append(r.Notes, fmt.Sprintf("%s: %d requests waited in the backlog, hand-off %s", s.profile, len(cal.hops.handoff), cal.Jitter.Handoff))
	}
	for _, s := range append(heteroCalibrations(), slowCalibration(o), variableCalibration(o)) {
		cal, err := s.run(ctx, o)
		if err != nil {
			return err
		}
		j := cal.Jitter
		if s.profile == sim.ProfileFreshOrdered {
			j.Handoff = sim.DistAt(handoffs, sim.TailP)
			j.Source += fmt.Sprintf("; hand-off of %d requests that waited in the backlog (max_conns 4, byrequests and sqf)", len(handoffs))
		}
		for _, h := range []struct {
			name string
			d    sim.Dist
		}{{"send", j.Send}, {"to pick", j.ToPick}, {"forward", j.Forward}, {"connect", j.Connect},
			{"overshoot", j.Overshoot}, {"return", j.Return}, {"deliver", j.Deliver}} {
			hopRow(s.profile+": "+h.name, h.d)
		}
		r.Notes = append(r.Notes, s.profile+": "+cal.String(), s.profile+" as Go: "+profileGo(j))
	}
	return nil
}

// profileGo prints j as the Go literal sim/profiles_data.go holds.
func profileGo(j *sim.Jitter) string {
	d := func(x sim.Dist) string {
		s := "us("
		for i, q := range x.Q {
			if i > 0 {
				s += ", "
			}
			s += strconv.FormatFloat(float64(q)/1e3, 'f', 1, 64)
		}
		return s + ")"
	}
	first := "nil"
	if h := j.First; h != nil {
		first = fmt.Sprintf("&Hops{Send: %s, ToPick: %s, Forward: %s, Return: %s, Deliver: %s}", d(h.Send), d(h.ToPick), d(h.Forward), d(h.Return), d(h.Deliver))
	}
	handoff := ""
	if !j.Handoff.IsZero() {
		handoff = ", Handoff: " + d(j.Handoff)
	}
	return fmt.Sprintf("&Jitter{Send: %s, ToPick: %s, Forward: %s, Connect: %s, Overshoot: %s, Return: %s, Deliver: %s%s, First: %s, OneSender: %v, Source: %q}",
		d(j.Send), d(j.ToPick), d(j.Forward), d(j.Connect), d(j.Overshoot), d(j.Return), d(j.Deliver), handoff, first, j.OneSender, j.Source)
}

// matchTolerance is how far the two processes' clocks may disagree when one interval must
// hold another.
const matchTolerance = 50 * time.Microsecond

// maxMatchSlack bounds the hops a match may imply (Ballast's dispatch before the backend's
// arrival plus its release after the backend's done): beyond it the pair is not one request.
const maxMatchSlack = 50 * time.Millisecond

// matchReleases pairs arrivals with releases of the same backend: taken in the order their
// service ended, each arrival gets the unmatched release that came soonest after its done and
// whose dispatch came before its arrival (within matchTolerance), if the two hops this implies
// stay within maxMatchSlack. A response reaches Ballast a fraction of a millisecond after the
// backend is done with it, so the release right after the done is the request's own, where
// the dispatches of requests sent together are not told apart. span gives an arrival's
// interval in Unix nanoseconds. It returns index pairs.
func matchReleases[A any](as []A, rs []advise.Release, span func(A) (int64, int64)) [][2]int {
	byDone := make([]int, len(as))
	for i := range byDone {
		byDone[i] = i
	}
	slices.SortStableFunc(byDone, func(x, y int) int {
		_, dx := span(as[x])
		_, dy := span(as[y])
		return cmp.Compare(dx, dy)
	})
	order := make([]int, len(rs))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(x, y int) int { return cmp.Compare(rs[x].AtNs, rs[y].AtNs) })
	used := make([]bool, len(rs))
	tol, maxSlack := int64(matchTolerance), int64(maxMatchSlack)
	var out [][2]int
	for _, i := range byDone {
		t2, t3 := span(as[i])
		k, _ := slices.BinarySearchFunc(order, t3-tol, func(j int, t int64) int { return cmp.Compare(rs[j].AtNs, t) })
		for ; k < len(order); k++ {
			j := order[k]
			r := rs[j]
			if r.AtNs-t3 > maxSlack {
				break
			}
			if d := r.Dispatched(); used[j] || d > t2+tol || (r.AtNs-t3)+(t2-d) > maxSlack {
				continue
			}
			used[j] = true
			out = append(out, [2]int{i, j})
			break
		}
	}
	slices.SortFunc(out, func(x, y [2]int) int { return cmp.Compare(x[0], y[0]) })
	return out
}
