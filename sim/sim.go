package sim

import (
	"container/heap"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"ballast/balance"
)

// Result is one algorithm's outcome on one scenario.
type Result struct {
	Algorithm string
	// Makespan is the virtual time at which the last response reached the client.
	Makespan time.Duration
	// Throughput is responses per virtual second; 0 when the makespan is 0.
	Throughput float64
	// Split counts the responses each backend delivered (hedge losers are not counted),
	// keyed by backend ID; every backend appears.
	Split map[string]int
	// Latency is the client's view: from sending a request to its response.
	Latency Percentiles
	// Responses is the number of requests answered (always Requests); Failed of them got
	// balance.ErrNoBackend instead of a backend's response.
	Responses, Failed int
	// Hedges is the number of extra copies sent, HedgeWins how many of them answered first,
	// Cancelled how many copies (originals or hedges) were cancelled as losers.
	Hedges, HedgeWins, Cancelled int
	// MaxBacklog is the longest the central backlog queue grew.
	MaxBacklog int
	// Queue is the time answered requests waited before their service began: in the central
	// backlog and then in their backend's own queue (the winning copy's).
	Queue Percentiles
	// QueueMean is the mean of those waits.
	QueueMean time.Duration
	// Errors counts responses that were backend errors (Backend.ErrorRate); Rejected the
	// requests that failed because the backlog was full, off or timed out (in Failed too).
	Errors, Rejected int
}

// Percentiles summarises a latency sample by nearest rank.
type Percentiles struct {
	P50, P90, P99, Max time.Duration
}

// Run simulates sc with the named algorithm (any name or alias balance.Lookup accepts).
func Run(sc Scenario, algorithm string) (Result, error) {
	if err := sc.Validate(); err != nil {
		return Result{}, fmt.Errorf("scenario %s: %w", sc.Name, err)
	}
	alg, err := balance.Lookup(algorithm)
	if err != nil {
		return Result{}, err
	}
	e := newEngine(sc)
	e.needsKey = alg.Caps.NeedsKey
	bs := make([]balance.Backend, len(sc.Backends))
	for i, b := range sc.Backends {
		w := b.Weight
		if w == 0 {
			w = 1
		}
		bs[i] = balance.Backend{ID: b.ID, Weight: w}
	}
	p, err := alg.New(bs, balance.Options{
		Load: modelLoad{e},
		Rand: rand.New(rand.NewPCG(sc.RandSeed, 0x9e3779b97f4a7c15)),
	})
	if err != nil {
		return Result{}, err
	}
	e.picker = p
	e.tracker, _ = p.(balance.Tracker)
	return e.run(algorithm)
}

type eventKind uint8

const (
	evDone    eventKind = iota // a copy's service ends
	evHedge                    // a request's hedge timer fires
	evPick                     // a request reaches the balancer (Jitter)
	evArrive                   // a copy reaches its backend (Jitter)
	evRelease                  // a copy's response reaches the balancer (Jitter)
	evDeliver                  // a response reaches the client (Jitter)
	evOpen                     // the open client's next request arrives
	evTimeout                  // a request waiting in the backlog times out
)

type event struct {
	at   time.Duration
	seq  uint64
	kind eventKind
	a    *attempt
	r    *request
}

// eventHeap orders events by time, then by the order they were scheduled, so that a run is
// deterministic even when many events share an instant (zero service times).
type eventHeap []event

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}
func (h eventHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(event)) }
func (h *eventHeap) Pop() any {
	old := *h
	ev := old[len(old)-1]
	*h = old[:len(old)-1]
	return ev
}

type request struct {
	idx      int
	key      uint64
	sent     time.Duration
	picked   time.Duration // reached the balancer
	waited   time.Duration // in the backlog
	tried    balance.Tried
	attempts []*attempt
	hedges   int
	queued   bool // in the backlog
	done     bool
	failed   bool
}

type attemptState uint8

const (
	queued attemptState = iota
	serving
	finished
	cancelled
	forwarding // on its way to the backend (Jitter)
	returning  // its response on its way to the balancer (Jitter)
)

// attempt is one copy of a request on one backend.
type attempt struct {
	r          *request
	backend    int
	dispatched time.Duration
	arrived    time.Duration // reached the backend
	started    time.Duration // service began
	service    time.Duration
	hedge      bool
	state      attemptState
}

// fifo is a slice-backed queue that reclaims its consumed prefix.
type fifo[T any] struct {
	items []T
	head  int
}

func (q *fifo[T]) len() int { return len(q.items) - q.head }
func (q *fifo[T]) push(x T) { q.items = append(q.items, x) }
func (q *fifo[T]) peek() T  { return q.items[q.head] }
func (q *fifo[T]) pop() T {
	var zero T
	x := q.items[q.head]
	q.items[q.head] = zero
	q.head++
	if q.head > 64 && q.head*2 > len(q.items) {
		n := copy(q.items, q.items[q.head:])
		clear(q.items[n:])
		q.items = q.items[:n]
		q.head = 0
	}
	return x
}

type backendState struct {
	inflight int64
	busy     int
	idle     int // the balancer's idle connections to it (Jitter)
	queue    fifo[*attempt]
	ewma     balance.PeakEWMA // Tau set once by newEngine
}

type engine struct {
	sc       Scenario
	now      time.Duration
	seq      uint64
	events   eventHeap
	picker   balance.Picker
	tracker  balance.Tracker
	needsKey bool
	svcRand  *rand.Rand
	bes      []backendState
	backlog  fifo[*request]

	jit        *Jitter // nil when zero
	jitRand    *rand.Rand
	senderFree time.Duration // Jitter.OneSender: when the client's writer is free
	openRand   *rand.Rand
	errRand    *rand.Rand
	stall      *stalls       // Jitter.Stalls
	tickPhase  time.Duration // Jitter.TimerTick: the balancer's first tick boundary, drawn per run
	queueWaits []time.Duration

	issued, answered, wantIssue int
	lastResponse                time.Duration
	latencies                   []time.Duration
	served                      []int
	res                         Result
	err                         error
}

func newEngine(sc Scenario) *engine {
	e := &engine{
		sc:        sc,
		svcRand:   rand.New(rand.NewPCG(sc.RandSeed, 0xda942042e4dd58b5)),
		bes:       make([]backendState, len(sc.Backends)),
		served:    make([]int, len(sc.Backends)),
		latencies: make([]time.Duration, 0, sc.Requests),
	}
	for i := range e.bes {
		e.bes[i].ewma.Tau = sc.EWMADecay
	}
	if !sc.Jitter.IsZero() {
		e.jit = sc.Jitter
		e.jitRand = rand.New(rand.NewPCG(sc.RandSeed, 0x2545f4914f6cdd1d))
		if t := sc.Jitter.TimerTick; t > 0 {
			e.tickPhase = time.Duration(rand.New(rand.NewPCG(sc.RandSeed, 0x6a09e667f3bcc909)).Int64N(int64(t)))
		}
		if j := sc.Jitter; j.StallRate > 0 && !j.Stall.IsZero() {
			r := rand.New(rand.NewPCG(sc.RandSeed, 0x94d049bb133111eb))
			e.stall = &stalls{rate: j.StallRate, length: j.Stall, drain: j.Drain, r: r,
				next: time.Duration(r.ExpFloat64() / j.StallRate * float64(time.Second))}
		}
	}
	if sc.Arrivals.Open() {
		e.openRand = rand.New(rand.NewPCG(sc.RandSeed, 0x8bb84b93962eacc9))
	}
	for _, b := range sc.Backends {
		if b.ErrorRate > 0 {
			e.errRand = rand.New(rand.NewPCG(sc.RandSeed, 0x3c6ef372fe94f82b))
			break
		}
	}
	return e
}

// hops returns the delays request idx draws for a hop that begins now: the recovery's
// within Jitter.RecoveryFor after a stall's end.
func (e *engine) hops(idx int) Hops {
	j := e.jit
	rec := j.Recovery != nil && e.stall != nil && e.stall.recovering(e.now, j.RecoveryFor)
	return j.hops(idx, e.sc.Concurrency, rec)
}

// postpone returns t, or the end of the machine stall it falls in (Jitter.Stalls).
func (e *engine) postpone(t time.Duration) time.Duration {
	if e.stall == nil {
		return t
	}
	return e.stall.after(t)
}

// schedule queues ev; every event but a service's end waits out a machine stall.
func (e *engine) schedule(ev event) {
	if ev.kind != evDone {
		ev.at = e.postpone(ev.at)
	}
	ev.seq = e.seq
	e.seq++
	heap.Push(&e.events, ev)
}

func (e *engine) run(algorithm string) (Result, error) {
	if e.sc.Arrivals.Open() {
		if e.sc.Requests > 0 {
			e.schedule(event{at: 0, kind: evOpen})
		}
	} else {
		e.wantIssue = min(e.sc.Concurrency, e.sc.Requests)
		e.issueWanted()
	}
	for e.err == nil && e.events.Len() > 0 {
		ev := heap.Pop(&e.events).(event)
		e.now = ev.at
		switch ev.kind {
		case evDone:
			e.finish(ev.a)
		case evHedge:
			e.hedge(ev.r)
		case evPick:
			e.admit(ev.r)
		case evArrive:
			if ev.a.state == forwarding {
				e.reach(ev.a)
			}
		case evRelease:
			if ev.a.state == returning {
				e.release(ev.a)
			}
		case evDeliver:
			e.deliver(ev.r)
		case evOpen:
			e.issue()
			if e.issued < e.sc.Requests {
				e.schedule(event{at: e.now + e.gap(), kind: evOpen})
			}
		case evTimeout:
			e.timeout(ev.r)
		}
		if e.events.Len() == 0 || e.events[0].at > e.now {
			e.issueWanted()
		}
	}
	if e.err != nil {
		return Result{}, e.err
	}
	if e.answered != e.sc.Requests {
		return Result{}, fmt.Errorf("sim %s/%s: %d of %d requests answered, %d stuck in the backlog: a response was lost",
			e.sc.Name, algorithm, e.answered, e.sc.Requests, e.backlog.len())
	}
	total := e.res.Failed
	for _, n := range e.served {
		total += n
	}
	for i := range e.bes {
		be := &e.bes[i]
		if be.inflight != 0 || be.busy != 0 {
			return Result{}, fmt.Errorf("sim %s/%s: backend %s ends with %d in flight and %d workers busy",
				e.sc.Name, algorithm, e.sc.Backends[i].ID, be.inflight, be.busy)
		}
		for be.queue.len() > 0 {
			if a := be.queue.pop(); a.state != cancelled {
				return Result{}, fmt.Errorf("sim %s/%s: backend %s ends with a request still queued",
					e.sc.Name, algorithm, e.sc.Backends[i].ID)
			}
		}
	}
	if total != e.sc.Requests {
		return Result{}, fmt.Errorf("sim %s/%s: backends answered %d responses for %d requests", e.sc.Name, algorithm, total, e.sc.Requests)
	}
	r := e.res
	r.Algorithm = algorithm
	r.Responses = e.answered
	r.Makespan = e.lastResponse
	if r.Makespan > 0 {
		r.Throughput = float64(e.answered) / r.Makespan.Seconds()
	}
	r.Split = make(map[string]int, len(e.served))
	for i, n := range e.served {
		r.Split[e.sc.Backends[i].ID] = n
	}
	r.Latency = percentiles(e.latencies)
	if len(e.queueWaits) > 0 {
		var sum time.Duration
		for _, w := range e.queueWaits {
			sum += w
		}
		r.QueueMean = sum / time.Duration(len(e.queueWaits))
	}
	r.Queue = percentiles(e.queueWaits)
	return r, nil
}

// gap draws the open client's time to its next request.
func (e *engine) gap() time.Duration {
	a := e.sc.Arrivals
	mean := float64(time.Second) / a.Rate
	cv := a.CV
	if cv == 0 {
		cv = 1
	}
	var d float64
	if cv == 1 {
		d = e.openRand.ExpFloat64() * mean
	} else {
		shape := 1 / (cv * cv)
		d = gamma(e.openRand, shape, mean/shape)
	}
	return time.Duration(min(d, float64(maxService)))
}

// issueWanted lets the client send the requests that responses have made room for. It runs
// once every event of the current instant has been handled, never inside one: the client reacts
// an infinitesimal moment after a response, so it sees every slot and worker freed at that
// instant (which is what reproduces ../shared/SCENARIOS.md's model figures), the backlog is
// served before new requests, and a chain of failures cannot recurse.
func (e *engine) issueWanted() {
	for e.err == nil && e.wantIssue > 0 && e.issued < e.sc.Requests {
		e.wantIssue--
		e.issue()
	}
	if e.issued >= e.sc.Requests {
		e.wantIssue = 0
	}
}

// issue is the client taking its next request: with jitter it reaches the balancer after the
// client's Send (behind the previous request's with OneSender) and ToPick.
func (e *engine) issue() {
	r := &request{idx: e.issued, sent: e.now}
	e.issued++
	if e.needsKey {
		r.key = splitmix64(uint64(r.idx))
	}
	if j := e.jit; j != nil {
		h := e.hops(r.idx)
		at := e.now
		if j.OneSender {
			at = max(at, e.senderFree)
		}
		at += h.Send.draw(e.jitRand)
		if j.OneSender {
			e.senderFree = at
		}
		at = e.postpone(at + h.ToPick.draw(e.jitRand))
		if at > e.now {
			e.schedule(event{at: at, kind: evPick, r: r})
			return
		}
	}
	e.admit(r)
}

// admit is r reaching the balancer: its hedge timer starts, and it is picked a backend or
// joins the backlog.
func (e *engine) admit(r *request) {
	r.picked = e.now
	if e.sc.Hedge.Delay > 0 {
		e.schedule(event{at: e.timerAt(e.now + e.sc.Hedge.Delay), kind: evHedge, r: r})
	}
	if e.backlog.len() > 0 {
		// Earlier requests are waiting for a slot: this one queues behind them (FIFO).
		e.enqueue(r)
		return
	}
	b, err := e.picker.Pick(r.key, r.tried)
	switch {
	case err == nil:
		e.dispatch(r, b, false)
	case errors.Is(err, balance.ErrBusy):
		e.enqueue(r)
	case errors.Is(err, balance.ErrNoBackend):
		e.fail(r)
	default:
		e.err = fmt.Errorf("sim %s: pick: %w", e.sc.Name, err)
	}
}

func (e *engine) enqueue(r *request) {
	if e.sc.NoBacklog || e.sc.MaxQueue > 0 && e.backlog.len() >= e.sc.MaxQueue {
		e.res.Rejected++
		e.fail(r)
		return
	}
	r.queued = true
	e.backlog.push(r)
	e.res.MaxBacklog = max(e.res.MaxBacklog, e.backlog.len())
	if e.sc.QueueTimeout > 0 {
		e.schedule(event{at: e.now + e.sc.QueueTimeout, kind: evTimeout, r: r})
	}
}

// timeout fails r if it is still waiting in the backlog; drain skips it from then on.
func (e *engine) timeout(r *request) {
	if !r.queued || r.done {
		return
	}
	r.queued = false
	e.res.Rejected++
	e.fail(r)
}

// drain re-runs the balancer for the backlog's head while it finds a free slot.
func (e *engine) drain() {
	for e.err == nil && e.backlog.len() > 0 {
		r := e.backlog.peek()
		if !r.queued { // timed out
			e.backlog.pop()
			continue
		}
		b, err := e.picker.Pick(r.key, r.tried)
		switch {
		case err == nil:
			e.backlog.pop()
			r.queued = false
			r.waited = e.now - r.picked
			e.dispatchFrom(r, b, false, true)
		case errors.Is(err, balance.ErrBusy):
			return
		case errors.Is(err, balance.ErrNoBackend):
			e.backlog.pop()
			r.queued = false
			e.fail(r)
		default:
			e.err = fmt.Errorf("sim %s: pick: %w", e.sc.Name, err)
		}
	}
}

func (e *engine) dispatch(r *request, b int, hedge bool) { e.dispatchFrom(r, b, hedge, false) }

// dispatchFrom sends a copy of r to backend b, whose slot it holds from now on; a request the
// backlog hands a slot to (handed) leaves Jitter.Handoff later, when its wait in Ballast ends.
func (e *engine) dispatchFrom(r *request, b int, hedge, handed bool) {
	if b < 0 || b >= len(e.bes) {
		e.err = fmt.Errorf("sim %s: picker returned backend %d of %d", e.sc.Name, b, len(e.bes))
		return
	}
	if r.tried.Has(b) {
		e.err = fmt.Errorf("sim %s: picker returned backend %d that request %d already tried", e.sc.Name, b, r.idx)
		return
	}
	r.tried.Add(b)
	a := &attempt{r: r, backend: b, dispatched: e.now, hedge: hedge,
		service: e.sc.Backends[b].Service.draw(r.idx, e.svcRand)}
	r.attempts = append(r.attempts, a)
	be := &e.bes[b]
	be.inflight++
	e.update(b)
	var f time.Duration
	if j := e.jit; j != nil {
		if handed {
			f = j.Handoff.draw(e.jitRand)
			a.dispatched += f // Ballast times a request from its dispatch
			r.waited += f     // and counts the hand-off in its backlog wait
		}
		f += e.hops(r.idx).Forward.draw(e.jitRand)
		if be.idle > 0 {
			be.idle--
		} else {
			f += j.Connect.draw(e.jitRand)
		}
	}
	if at := e.postpone(e.now + f); at > e.now {
		a.state = forwarding
		e.schedule(event{at: at, kind: evArrive, a: a})
		return
	}
	e.reach(a)
}

// reach is a copy arriving at its backend: served by a free worker, or queued inside it.
func (e *engine) reach(a *attempt) {
	a.arrived = e.now
	be := &e.bes[a.backend]
	if w := e.sc.Backends[a.backend].Workers; w == 0 || be.busy < w {
		e.start(a)
		return
	}
	a.state = queued
	be.queue.push(a)
}

func (e *engine) start(a *attempt) {
	a.state = serving
	a.started = e.now
	e.bes[a.backend].busy++
	e.schedule(event{at: e.now + a.service, kind: evDone, a: a})
}

// startNext gives backend b's free workers to the oldest copies still queued inside it.
func (e *engine) startNext(b int) {
	w := e.sc.Backends[b].Workers
	be := &e.bes[b]
	for (w == 0 || be.busy < w) && be.queue.len() > 0 {
		if a := be.queue.pop(); a.state == queued {
			e.start(a)
		}
	}
}

func (e *engine) update(b int) {
	if e.tracker != nil {
		e.tracker.Update(b, e.bes[b].inflight)
	}
}

// finish is a copy's service ending: its worker takes the next copy queued inside the
// backend, and its response leaves for the balancer (late by Overshoot, then Return).
func (e *engine) finish(a *attempt) {
	if a.state != serving {
		return // a cancelled copy's stale completion
	}
	a.state = finished
	be := &e.bes[a.backend]
	be.busy--
	e.startNext(a.backend)
	if e.jit != nil {
		var d time.Duration
		if a.service > 0 {
			over := e.jit.Overshoot
			if j := e.jit; !j.RecoveryOvershoot.IsZero() && e.stall != nil && e.stall.recovering(e.now, j.RecoveryFor) {
				over = j.RecoveryOvershoot
			}
			d = over.draw(e.jitRand)
		}
		d += e.hops(a.r.idx).Return.draw(e.jitRand)
		if at := e.postpone(e.now + d); at > e.now {
			a.state = returning
			e.schedule(event{at: at, kind: evRelease, a: a})
			return
		}
	}
	e.release(a)
}

// release is a copy's response reaching the balancer: the backend's slot is freed, the
// response answers its request, and the backlog gets the slot.
func (e *engine) release(a *attempt) {
	a.state = finished
	be := &e.bes[a.backend]
	be.idle++ // its connection goes back to the pool
	be.inflight--
	e.update(a.backend)
	be.ewma.Observe(e.now-a.dispatched, e.now)
	e.respond(a)
	e.drain()
}

func (e *engine) respond(a *attempt) {
	r := a.r
	if r.done {
		e.err = fmt.Errorf("sim %s: request %d answered twice", e.sc.Name, r.idx)
		return
	}
	r.done = true
	e.served[a.backend]++
	if a.hedge {
		e.res.HedgeWins++
	}
	if p := e.sc.Backends[a.backend].ErrorRate; p > 0 && e.errRand.Float64() < p {
		e.res.Errors++
	}
	e.queueWaits = append(e.queueWaits, r.waited+a.started-a.arrived)
	for _, o := range r.attempts {
		if o != a {
			e.cancel(o)
		}
	}
	e.answer(r)
}

func (e *engine) fail(r *request) {
	if r.done {
		e.err = fmt.Errorf("sim %s: request %d answered twice", e.sc.Name, r.idx)
		return
	}
	r.done = true
	r.failed = true
	e.res.Failed++
	e.answer(r)
}

// answer sends r's one response to the client (Deliver later, with jitter).
func (e *engine) answer(r *request) {
	var d time.Duration
	if j := e.jit; j != nil {
		d = e.hops(r.idx).Deliver.draw(e.jitRand)
	}
	if at := e.postpone(e.now + d); at > e.now {
		e.schedule(event{at: at, kind: evDeliver, r: r})
		return
	}
	e.deliver(r)
}

// deliver is the client having r's response; a closed client will send its next request.
func (e *engine) deliver(r *request) {
	e.answered++
	e.lastResponse = e.now
	e.latencies = append(e.latencies, e.now-r.sent)
	if !e.sc.Arrivals.Open() {
		e.wantIssue++
	}
}

// cancel withdraws a losing copy: out of its backend's queue or off its worker (or stopped on
// its way there or back), and its connection slot freed.
func (e *engine) cancel(a *attempt) {
	switch a.state {
	case serving:
		a.state = cancelled
		e.bes[a.backend].busy--
		e.startNext(a.backend)
	case queued, forwarding, returning:
		a.state = cancelled // startNext and the pending events skip it
	default:
		return
	}
	e.bes[a.backend].inflight--
	e.update(a.backend)
	e.res.Cancelled++
}

// hedge sends one more copy of r if it is still unanswered and a backend it has not tried has
// a free slot now; a request still waiting in the backlog is not hedged.
func (e *engine) hedge(r *request) {
	limit := e.sc.Hedge.Max
	if limit == 0 {
		limit = 1
	}
	if r.done || r.queued || len(r.attempts) == 0 || r.hedges >= limit {
		return
	}
	b, err := e.picker.Pick(r.key, r.tried)
	if err != nil {
		return
	}
	r.hedges++
	e.res.Hedges++
	e.dispatch(r, b, true)
	if r.hedges < limit {
		e.schedule(event{at: e.timerAt(e.now + e.sc.Hedge.Delay), kind: evHedge, r: r})
	}
}

// timerAt is when a timer of the balancer's with deadline at fires: at it, or with
// Jitter.TimerTick at the first of the balancer's tick boundaries at or after at (and after
// now, as evloop's wheel never fires in the tick it last ran), late by an Overshoot draw.
func (e *engine) timerAt(at time.Duration) time.Duration {
	if e.jit == nil || e.jit.TimerTick <= 0 {
		return at
	}
	t, ph := e.jit.TimerTick, e.tickPhase // the boundaries are ph + k*t, k >= 0
	atOrAfter := func(x time.Duration) time.Duration {
		if x <= ph {
			return 0
		}
		return (x - ph + t - 1) / t
	}
	after := func(x time.Duration) time.Duration {
		if x < ph {
			return 0
		}
		return (x-ph)/t + 1
	}
	k := max(atOrAfter(at), after(e.now))
	return ph + k*t + e.jit.Overshoot.draw(e.jitRand)
}

// modelLoad is the balance.Load the pickers see, read straight from the model's state.
type modelLoad struct{ e *engine }

func (l modelLoad) InFlight(i int) int64 { return l.e.bes[i].inflight }

func (l modelLoad) Full(i int) bool {
	m := l.e.sc.MaxConns
	return m > 0 && l.e.bes[i].inflight >= int64(m)
}

func (l modelLoad) Latency(i int) float64 { return l.e.bes[i].ewma.Value(l.e.now) }

// splitmix64 spreads request indexes over the key space for hash algorithms.
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}
