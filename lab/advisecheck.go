package lab

import (
	"context"
	"fmt"
	"time"

	"ballast/advise"
	"ballast/balance"
	"ballast/sim"
)

// The advise check (issue 24): on each seed scenario, `ballast advise --scenario` is asked
// for its best choice with the jitter this run measured; the lab measures that choice (as an
// extra row when none of the scenario's rows is it) and says whether it meets the scenario's
// goal, and whether what advise predicts for the current choice (the seed's own method)
// holds the measured figure of that row.

// AdviseCheck is the outcome.
type AdviseCheck struct {
	Verdict string // advise's
	// Best is advise's best choice, BestRow the row that measured it, BestMet whether it
	// meets the scenario's goal (BestGoal says how).
	Best, BestRow string
	BestMet       bool
	BestGoal      string
	// Current is the scenario's current choice, CurrentRange advise's range for it in the
	// scenario's metric, CurrentMeasured that row's measured figure, CurrentInside whether
	// the range holds it.
	Current         string
	CurrentRange    [2]float64
	CurrentMeasured float64
	CurrentInside   bool
	// Choices, Runs and Seconds: how many choices advise replayed, each how many times, and
	// how long it took.
	Choices, Runs int
	Seconds       float64
}

// String is the check as a report note.
func (c AdviseCheck) String() string {
	met := map[bool]string{true: "meets", false: "misses"}[c.BestMet]
	in := map[bool]string{true: "inside", false: "outside"}[c.CurrentInside]
	return fmt.Sprintf("advise (%d choices x %d runs in %.1f s): best %s, measured as row %q, %s the goal (%s); its prediction for the current %s is [%.6g, %.6g], measured %.6g: %s (verdict: %s)",
		c.Choices, c.Runs, c.Seconds, c.Best, c.BestRow, met, c.BestGoal, c.Current, c.CurrentRange[0], c.CurrentRange[1], c.CurrentMeasured, in, c.Verdict)
}

// choiceName is how a report names an advise choice.
func choiceName(b advise.Best) string {
	s := b.Balancer
	if b.Settings != (advise.Settings{}) {
		s += " (" + b.Settings.String() + ")"
	}
	return s
}

// sameAlgorithm compares balancer names through their aliases.
func sameAlgorithm(a, b string) bool {
	x, err1 := balance.Lookup(a)
	y, err2 := balance.Lookup(b)
	return err1 == nil && err2 == nil && x.Name == y.Name
}

// rowFor returns the label of the row whose balancer and settings are the choice's.
func (p *predictions) rowFor(alg string, s advise.Settings) string {
	for _, j := range p.jobs {
		if sameAlgorithm(j.alg, alg) && advise.SettingsOf(j.sc) == s {
			return j.label
		}
	}
	return ""
}

// advise asks for the best choice on sc (the current choice applied) with the jitters measured
// so far in the group (and the stalls seen so far).
func (p *predictions) advise(ctx context.Context, sc sim.Scenario, group string) (advise.Advice, error) {
	stalls, window := p.probe.Snapshot()
	js := p.jitters(predJob{group: group}, stalls, window)
	runs := p.o.runsFor(sc)
	if runs == 0 { // as many as the rows' ranges have
		runs = sim.RunsFor(min(sc.Requests, advise.MaxRequests))
	}
	return advise.AdviseScenario(ctx, sc, advise.Options{Runs: runs, Jitters: js})
}

// extraRow measures a choice the scenario's rows do not have; it returns the row's label and
// registers its prediction.
type extraRow func(label string, alg string, s advise.Settings) error

// goalOf says whether a row, measured with settings s, meets the scenario's goal, and how.
type goalOf func(row Result, s advise.Settings) (bool, string)

// checkAdvice runs the advise check on a scenario whose rows are measured (predictions not yet
// resolved): it asks advise, measures its best choice if needed, and returns a function to
// call once the predictions are resolved, which fills the check.
func (p *predictions) checkAdvice(ctx context.Context, sc sim.Scenario, group, currentLabel string, run extraRow) (func(r *Report, goal goalOf) AdviseCheck, error) {
	began := time.Now()
	adv, err := p.advise(ctx, sc, group)
	if err != nil {
		return nil, fmt.Errorf("advise: %w", err)
	}
	took := time.Since(began).Seconds()
	label := p.rowFor(adv.Best.Balancer, adv.Best.Settings)
	if label == "" {
		label = adv.Best.Balancer + " (advise)"
		if cur := advise.SettingsOf(sc); adv.Best.Settings != cur {
			label = adv.Best.Balancer + " (advise: " + adv.Best.Settings.String() + ")"
		}
		if err := run(label, adv.Best.Balancer, adv.Best.Settings); err != nil {
			return nil, fmt.Errorf("advise's best %s: %w", choiceName(adv.Best), err)
		}
	}
	var cur advise.Choice
	for _, c := range adv.Choices {
		if c.Current {
			cur = c
		}
	}
	return func(r *Report, goal goalOf) AdviseCheck {
		c := AdviseCheck{Verdict: adv.Verdict, Best: choiceName(adv.Best), BestRow: label, Current: cur.Balancer,
			Choices: len(adv.Choices), Runs: adv.Runs, Seconds: took}
		for _, row := range r.Results {
			if row.Algorithm == label {
				c.BestMet, c.BestGoal = goal(row, adv.Best.Settings)
			}
			if row.Algorithm == currentLabel {
				c.CurrentRange, c.CurrentMeasured = cur.Range.ThroughputRPS, row.ThroughputRPS
				if r.Metric == Makespan {
					c.CurrentRange, c.CurrentMeasured = cur.Range.MakespanS, row.MakespanS
				}
				c.CurrentInside = c.CurrentMeasured >= c.CurrentRange[0] && c.CurrentMeasured <= c.CurrentRange[1]
			}
		}
		r.Advise = &c
		r.Notes = append(r.Notes, c.String())
		return c
	}, nil
}
