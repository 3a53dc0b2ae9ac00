package lab

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"ballast/sim"
)

// The stall probe: a goroutine of the lab process that sleeps stallTick over and over and
// notes every wake-up later than stallThreshold. On this shared machine the whole lab (load
// generator, emulated backends, and the Ballast child on the same two CPUs) stops now and
// then for a few to tens of milliseconds: other engineers' builds, a runtime pause. Such a
// stall delays every request in flight at once, so the model draws stalls as events of their
// own (sim.Jitter.StallRate, Stall) rather than as a tail of each hop's delay.

const (
	stallTick = time.Millisecond
	// stallThreshold separates a stall from a timer's ordinary lateness (well under 1 ms
	// on this machine when nothing else runs).
	stallThreshold = 3 * time.Millisecond
)

// stallProbe watches for stalls until stop; its zero value is not usable (startStallProbe).
type stallProbe struct {
	stop, done chan struct{}
	begin      time.Time

	mu     sync.Mutex
	stalls []stallAt // since begin
	window time.Duration
}

func startStallProbe() *stallProbe {
	p := &stallProbe{stop: make(chan struct{}), done: make(chan struct{}), begin: time.Now()}
	go p.loop()
	return p
}

func (p *stallProbe) loop() {
	defer close(p.done)
	t := time.NewTimer(stallTick)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-p.stop:
			return
		case now := <-t.C:
			if late := now.Sub(last) - stallTick; late > stallThreshold {
				p.mu.Lock()
				p.stalls = append(p.stalls, stallAt{now.Sub(p.begin) - late, late})
				p.mu.Unlock()
			}
			last = time.Now()
			t.Reset(stallTick)
		}
	}
}

// Snapshot returns the stalls seen so far (since the probe's begin) and how long it has watched.
func (p *stallProbe) Snapshot() ([]stallAt, time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.stalls), time.Since(p.begin)
}

// Stop ends the probe; it returns the stalls it saw and how long it watched.
func (p *stallProbe) Stop() ([]stallAt, time.Duration) {
	close(p.stop)
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	p.window = time.Since(p.begin)
	return p.stalls, p.window
}

// lengths returns the stalls' lengths.
func lengths(ss []stallAt) []time.Duration {
	out := make([]time.Duration, len(ss))
	for i, x := range ss {
		out[i] = x.d
	}
	return out
}

// withStalls returns j with the stalls a model run draws: those seen by the lab's probe over
// window (probe), which no traced run's flow stalls cover (they would be counted twice), and
// the flow stalls of the measured run j was drawn from (h, over its span). The rate is the two
// rates' sum, the lengths those of both, kept at sim.TailP: one stall of a hundred milliseconds
// among hundreds of a millisecond or two stays that rare.
func withStalls(j *sim.Jitter, h hopSamples, probe []stallAt, window time.Duration) *sim.Jitter {
	c := *j
	c.StallRate, c.Stall = 0, sim.Dist{}
	all := lengths(probe)
	if len(probe) > 0 && window > 0 {
		c.StallRate = float64(len(probe)) / window.Seconds()
	}
	if len(h.stalls) > 0 && h.span > 0 {
		c.StallRate += float64(len(h.stalls)) / h.span.Seconds()
		all = append(all, lengths(h.stalls)...)
	}
	if c.StallRate > 0 {
		c.Stall = sim.DistAt(all, sim.TailP)
		c.Drain = sim.DistAt(h.drain, sim.TailP)
	}
	return &c
}

// probeOutside returns the probe's stalls (since its begin) that overlap no flow stall of the
// measured runs.
func (p *predictions) probeOutside(stalls []stallAt) []stallAt {
	type window struct{ from, to time.Time }
	var flows []window
	add := func(h hopSamples) {
		for _, s := range h.stalls {
			from := h.begin.Add(s.at)
			flows = append(flows, window{from, from.Add(s.d)})
		}
	}
	for _, hs := range p.cal {
		for _, h := range hs {
			add(h)
		}
	}
	for _, rows := range p.rows {
		for _, h := range rows {
			add(h)
		}
	}
	var out []stallAt
	for _, s := range stalls {
		from := p.probe.begin.Add(s.at)
		to := from.Add(s.d)
		if !slices.ContainsFunc(flows, func(w window) bool { return from.Before(w.to) && w.from.Before(to) }) {
			out = append(out, s)
		}
	}
	return out
}

// predictions defers a scenario's model runs to its end, when the stall probe has watched
// the calibration and every row: the rows' predictions then draw the stalls of the whole
// scenario, and each row the per-hop delays its calibration measured.
type predictions struct {
	o     Options
	probe *stallProbe
	jobs  []predJob
	// measured delays by group: the calibrations', then each traced row's by label
	cal  map[string][]hopSamples
	rows map[string]map[string]hopSamples
	// the backlog hand-offs of the group's rows with a backlog, by label
	handoffs map[string]map[string][]time.Duration

	once   sync.Once
	stalls []stallAt
	window time.Duration
	// nearest: a traced row's range draws only the measured runs nearest its own in
	// flow-stall share (nearestRuns), not every one of its group.
	nearest bool
}

type predJob struct {
	label, group string
	sc           sim.Scenario
	alg          string
	// requests the row ran, when the model ran fewer (modelRequests): its makespans scale
	requests int
}

func newPredictions(o Options) *predictions {
	return &predictions{o: o, probe: startStallProbe(), cal: map[string][]hopSamples{}, rows: map[string]map[string]hopSamples{},
		handoffs: map[string]map[string][]time.Duration{}}
}

// calibrated records one of a group's calibrations.
func (p *predictions) calibrated(group string, c Calibration) {
	p.cal[group] = append(p.cal[group], c.hops)
}

// measured records the delays of a traced row of the group (rows whose dispatch includes a
// backlog wait, or whose hedged copies blur the matching, are not to be recorded: a backlog
// row gives its hand-offs, handedOff).
func (p *predictions) measured(group, label string, c Calibration) {
	if p.rows[group] == nil {
		p.rows[group] = map[string]hopSamples{}
	}
	p.rows[group][label] = c.hops
}

// add asks for the prediction of the row labelled label, from the delays of its group.
func (p *predictions) add(label, group string, sc sim.Scenario, alg string) {
	p.jobs = append(p.jobs, predJob{label: label, group: group, sc: sc, alg: alg})
}

// addScaled is add for a row that ran requests while the model runs fewer (a throughput row's
// steady state): the predicted makespans are scaled to the row's requests.
func (p *predictions) addScaled(label, group string, sc sim.Scenario, alg string, requests int) {
	p.jobs = append(p.jobs, predJob{label: label, group: group, sc: sc, alg: alg, requests: requests})
}

// jitters are what the row labelled label draws: one jitter per measured run of its group,
// its calibrations' and every other traced row's (never its own), each with the stalls the lab
// probe saw over window (stalls, which no run's flow stalls cover) and the flow stalls of that
// run. A model run takes one of them whole, so that delays which go together in a real run
// (the machine busier during one row than another) go together in the model too; only the
// backlog hand-offs are pooled, those of the group's backlog rows but the job's own, since
// only those rows measure one (a model run without a backlog never draws it).
func (p *predictions) jitters(job predJob, stalls []stallAt, window time.Duration) []*sim.Jitter {
	var out []*sim.Jitter
	handoffs := p.handoffsFor(job)
	stalls = p.probeOutside(stalls)
	for _, h := range p.drawnRuns(job) {
		out = append(out, withHandoff(withStalls(h.jitter(), h, stalls, window), handoffs))
	}
	return out
}

// drawnRuns are the measured runs the job's range draws from: its group's calibrations and
// other traced rows, in a fixed order; with nearest, of those only the ones nearestRuns picks
// for the job's own run's flow-stall share (all of them for a row with no run of its own).
func (p *predictions) drawnRuns(job predJob) []hopSamples {
	runs := slices.Clone(p.cal[job.group])
	labels := make([]string, 0, len(p.rows[job.group]))
	for l := range p.rows[job.group] {
		labels = append(labels, l)
	}
	slices.Sort(labels) // the same order every time
	for _, l := range labels {
		if l != job.label {
			runs = append(runs, p.rows[job.group][l])
		}
	}
	own, ok := p.rows[job.group][job.label]
	if !p.nearest || !ok || own.span <= 0 {
		return runs
	}
	shares := make([]float64, len(runs))
	for i, h := range runs {
		shares[i] = stallShare(h)
	}
	var out []hopSamples
	for _, i := range nearestRuns(shares, stallShare(own), nearestCount(len(runs))) {
		out = append(out, runs[i])
	}
	return out
}

// nearestCount is how many of m measured runs a range drawn by flow-stall share takes: half,
// and at least three (all when there are fewer).
func nearestCount(m int) int { return min(m, max(3, (m+1)/2)) }

// nearestRuns returns the indexes (in order) of the k runs whose flow-stall shares are
// nearest own: first the nearest at or below it and the nearest at or above it, so that the
// range spans the row's own condition whenever a measured run was as calm and one as
// disturbed, then the nearest others (ties to the lower index).
func nearestRuns(shares []float64, own float64, k int) []int {
	k = min(k, len(shares))
	picked := make([]bool, len(shares))
	below, above := -1, -1
	for i, x := range shares {
		if x <= own && (below < 0 || x > shares[below]) {
			below = i
		}
		if x >= own && (above < 0 || x < shares[above]) {
			above = i
		}
	}
	n := 0
	for _, i := range []int{below, above} {
		if i >= 0 && !picked[i] && n < k {
			picked[i] = true
			n++
		}
	}
	for ; n < k; n++ {
		best := -1
		for i, x := range shares {
			if !picked[i] && (best < 0 || abs(x-own) < abs(shares[best]-own)) {
				best = i
			}
		}
		picked[best] = true
	}
	var out []int
	for i, ok := range picked {
		if ok {
			out = append(out, i)
		}
	}
	return out
}

// handedOff records the backlog hand-offs of a traced row of the group that had a backlog
// (only them: its other hops are a run's with a backlog, which rows without one do not have).
func (p *predictions) handedOff(group, label string, c Calibration) {
	if len(c.hops.handoff) == 0 {
		return
	}
	if p.handoffs[group] == nil {
		p.handoffs[group] = map[string][]time.Duration{}
	}
	p.handoffs[group][label] = c.hops.handoff
}

// handoffsFor pools the hand-offs the group's backlog rows measured, but the job's own.
func (p *predictions) handoffsFor(job predJob) []time.Duration {
	labels := make([]string, 0, len(p.handoffs[job.group]))
	for l := range p.handoffs[job.group] {
		labels = append(labels, l)
	}
	slices.Sort(labels)
	var out []time.Duration
	for _, l := range labels {
		if l != job.label {
			out = append(out, p.handoffs[job.group][l]...)
		}
	}
	return out
}

// withHandoff returns j drawing its backlog hand-offs from sample.
func withHandoff(j *sim.Jitter, sample []time.Duration) *sim.Jitter {
	j.Handoff = sim.DistAt(sample, sim.TailP)
	return j
}

// stop ends the probe; later calls return what the first saw.
func (p *predictions) stop() ([]stallAt, time.Duration) {
	p.once.Do(func() { p.stalls, p.window = p.probe.Stop() })
	return p.stalls, p.window
}

// stopOnce ends the probe if finish did not (a scenario that failed half way).
func (p *predictions) stopOnce() { p.stop() }

// finish resolves the predictions, judges every row against its range and adds the notes.
func (p *predictions) finish(r *Report) error {
	note, err := p.resolve(r)
	if err != nil {
		return err
	}
	r.Notes = append(r.Notes, note, rangeNote(r))
	return nil
}

// resolve runs the model for every row asked for and sets its Predicted figures; it returns
// the note on the stalls.
func (p *predictions) resolve(r *Report) (string, error) {
	stalls, window := p.stop()
	began := time.Now()
	runs := 0
	outside := p.probeOutside(stalls)
	for _, job := range p.jobs {
		f, err := predict(p.o, job.sc, job.alg, p.jitters(job, stalls, window))
		if err != nil {
			return "", err
		}
		runs += f.Range.Runs
		scale := func(f *Figures) {
			if job.requests > 0 && job.sc.Requests > 0 && job.requests != job.sc.Requests {
				k := float64(job.requests) / float64(job.sc.Requests)
				f.MakespanS *= k
				f.Range.MakespanS[0] *= k
				f.Range.MakespanS[1] *= k
			}
		}
		scale(&f)
		// The check of the model: the same runs drawing the row's own run alone.
		var ownRange *FigureRange
		if own, ok := p.rows[job.group][job.label]; ok && own.span > 0 {
			j := withHandoff(withStalls(own.jitter(), own, outside, window), p.handoffsFor(job))
			fo, err := predict(p.o, job.sc, job.alg, []*sim.Jitter{j})
			if err != nil {
				return "", err
			}
			runs += fo.Range.Runs
			scale(&fo)
			ownRange = fo.Range
		}
		for i := range r.Results {
			if r.Results[i].Algorithm == job.label {
				r.Results[i].Detail.OwnRange = ownRange
				r.Results[i].Predicted = f
				r.Results[i].Detail.Disturbed = p.disturbed(job)
				r.Results[i].Detail.DrewFrom = p.drewFrom(job)
			}
		}
	}
	d := sim.DistAt(lengths(stalls), sim.TailP)
	return fmt.Sprintf("stalls: %d longer than %v seen by the lab process in %.1f s (%.2f/s; %s), %d of them outside the measured runs' flow stalls, drawn by every run of the model; %s; the predictions took %d model runs in %.1f s",
		len(stalls), stallThreshold, window.Seconds(), float64(len(stalls))/window.Seconds(), d, len(p.probeOutside(stalls)), p.flowNote(), runs, time.Since(began).Seconds()), nil
}

// stallShare is the share of a measured run's time its flow stalls took.
func stallShare(h hopSamples) float64 {
	if h.span <= 0 {
		return 0
	}
	var sum time.Duration
	for _, s := range h.stalls {
		sum += s.d
	}
	return float64(sum) / float64(h.span)
}

// disturbed says how the job's own run was disturbed beyond every measured run its prediction
// draws from ("" when it was not, or when the row has no run of its own on record): its flow
// stalls took a larger share of its time than in any of them.
func (p *predictions) disturbed(job predJob) string {
	own, ok := p.rows[job.group][job.label]
	if !ok || own.span <= 0 {
		return ""
	}
	most := 0.0
	for _, h := range p.drawnRuns(job) {
		most = max(most, stallShare(h))
	}
	if x := stallShare(own); x > most {
		return fmt.Sprintf("flow stalls %.2f%% of its run, more than in every run its range drew from (at most %.2f%%)", 100*x, 100*most)
	}
	return ""
}

// drewFrom says which measured runs the job's range drew from, by flow-stall share.
func (p *predictions) drewFrom(job predJob) string {
	runs := p.drawnRuns(job)
	if len(runs) == 0 {
		return ""
	}
	lo, hi := stallShare(runs[0]), stallShare(runs[0])
	for _, h := range runs {
		lo, hi = min(lo, stallShare(h)), max(hi, stallShare(h))
	}
	s := fmt.Sprintf("%d measured runs, flow stalls %.2f-%.2f%% of their time", len(runs), 100*lo, 100*hi)
	if own, ok := p.rows[job.group][job.label]; ok && own.span > 0 {
		s += fmt.Sprintf(" (its own run %.2f%%", 100*stallShare(own))
		if p.nearest {
			s += fmt.Sprintf("; the nearest to it of %d", len(p.cal[job.group])+len(p.rows[job.group])-1)
		}
		s += ")"
	}
	return s
}

// flowNote summarises the flow stalls of the measured runs.
func (p *predictions) flowNote() string {
	var all []time.Duration
	lo, hi, n := 0.0, 0.0, 0
	add := func(h hopSamples) {
		if h.span <= 0 {
			return
		}
		r := float64(len(h.stalls)) / h.span.Seconds()
		if n == 0 || r < lo {
			lo = r
		}
		hi = max(hi, r)
		n++
		all = append(all, lengths(h.stalls)...)
	}
	for _, hs := range p.cal {
		for _, h := range hs {
			add(h)
		}
	}
	for _, rows := range p.rows {
		for _, h := range rows {
			add(h)
		}
	}
	return fmt.Sprintf("flow stalls of at least %v (nothing came out of Ballast while it held two or more requests or responses, or nothing happened in the lab while two or more backend responses were overdue) in the %d measured runs: %.2f to %.2f/s (%s), each model run drawing those of the measured run it takes",
		flowStallMin, n, lo, hi, sim.DistAt(all, sim.TailP))
}
