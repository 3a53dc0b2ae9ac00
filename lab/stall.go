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
	stalls []time.Duration
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
				p.stalls = append(p.stalls, late)
				p.mu.Unlock()
			}
			last = time.Now()
			t.Reset(stallTick)
		}
	}
}

// Snapshot returns the stalls seen so far and how long the probe has watched.
func (p *stallProbe) Snapshot() ([]time.Duration, time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.stalls), time.Since(p.begin)
}

// Stop ends the probe; it returns the stalls it saw and how long it watched.
func (p *stallProbe) Stop() ([]time.Duration, time.Duration) {
	close(p.stop)
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	p.window = time.Since(p.begin)
	return p.stalls, p.window
}

// withStalls returns j with the stalls seen over window: their rate and lengths.
func withStalls(j *sim.Jitter, stalls []time.Duration, window time.Duration) *sim.Jitter {
	c := *j
	c.StallRate, c.Stall = 0, sim.Dist{}
	if len(stalls) > 0 && window > 0 {
		c.StallRate = float64(len(stalls)) / window.Seconds()
		c.Stall = sim.DistOf(stalls, 20)
	}
	return &c
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

	once   sync.Once
	stalls []time.Duration
	window time.Duration
}

type predJob struct {
	label, group string
	sc           sim.Scenario
	alg          string
	// requests the row ran, when the model ran fewer (modelRequests): its makespans scale
	requests int
}

func newPredictions(o Options) *predictions {
	return &predictions{o: o, probe: startStallProbe(), cal: map[string][]hopSamples{}, rows: map[string]map[string]hopSamples{}}
}

// calibrated records one of a group's calibrations.
func (p *predictions) calibrated(group string, c Calibration) {
	p.cal[group] = append(p.cal[group], c.hops)
}

// measured records the delays of a traced row of the group (rows whose dispatch includes a
// backlog wait, or whose hedged copies blur the matching, are not to be recorded).
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
// its calibrations' and every other traced row's (never its own), each with the scenario's
// stalls. A model run takes one of them whole, so that delays which go together in a real
// run (the machine busier during one row than another) go together in the model too.
func (p *predictions) jitters(job predJob, stalls []time.Duration, window time.Duration) []*sim.Jitter {
	var out []*sim.Jitter
	for _, h := range p.cal[job.group] {
		out = append(out, withStalls(h.jitter(), stalls, window))
	}
	labels := make([]string, 0, len(p.rows[job.group]))
	for l := range p.rows[job.group] {
		labels = append(labels, l)
	}
	slices.Sort(labels) // the same order every time
	for _, l := range labels {
		if l != job.label {
			out = append(out, withStalls(p.rows[job.group][l].jitter(), stalls, window))
		}
	}
	return out
}

// stop ends the probe; later calls return what the first saw.
func (p *predictions) stop() ([]time.Duration, time.Duration) {
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
	for _, job := range p.jobs {
		f, err := predict(p.o, job.sc, job.alg, p.jitters(job, stalls, window))
		if err != nil {
			return "", err
		}
		runs += f.Range.Runs
		if job.requests > 0 && job.sc.Requests > 0 && job.requests != job.sc.Requests {
			k := float64(job.requests) / float64(job.sc.Requests)
			f.MakespanS *= k
			f.Range.MakespanS[0] *= k
			f.Range.MakespanS[1] *= k
		}
		for i := range r.Results {
			if r.Results[i].Algorithm == job.label {
				r.Results[i].Predicted = f
			}
		}
	}
	d := sim.DistOf(stalls, 20)
	return fmt.Sprintf("stalls: %d longer than %v seen by the lab process in %.1f s (%.2f/s; %s), drawn by every run of the model; the predictions took %d model runs in %.1f s",
		len(stalls), stallThreshold, window.Seconds(), float64(len(stalls))/window.Seconds(), d, runs, time.Since(began).Seconds()), nil
}
