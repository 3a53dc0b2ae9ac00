package sim

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"ballast/balance"
)

// Report is one scenario run with several algorithms.
type Report struct {
	Scenario Scenario
	Results  []Result
}

// DefaultAlgorithms is what a scenario runs when the caller names none: its own list, or else
// every registered algorithm that needs no hash key, by name.
func DefaultAlgorithms(sc Scenario) []string {
	if sc.Algorithms != nil {
		return slices.Clone(sc.Algorithms)
	}
	var names []string
	for _, a := range balance.Algorithms() {
		if !a.Caps.NeedsKey {
			names = append(names, a.Name)
		}
	}
	return names
}

// RunScenario runs sc with each named algorithm in order. With no names it runs
// DefaultAlgorithms and skips (rather than fails on) algorithms that refuse to build; named
// algorithms must all run.
func RunScenario(sc Scenario, algorithms []string) (Report, error) {
	rep := Report{Scenario: sc}
	explicit := len(algorithms) > 0
	if !explicit {
		algorithms = DefaultAlgorithms(sc)
	}
	for _, name := range algorithms {
		if _, err := balance.Lookup(name); err != nil {
			return Report{}, err
		}
	}
	for _, name := range algorithms {
		r, err := Run(sc, name)
		if err != nil {
			return Report{}, err
		}
		rep.Results = append(rep.Results, r)
	}
	return rep, nil
}

// WriteTable prints the report as an aligned table: algorithm, makespan, req/s, split, p50, p99.
func WriteTable(w io.Writer, rep Report) error {
	sc := rep.Scenario
	fmt.Fprintf(w, "scenario %s: %s\n", sc.Name, sc.Summary)
	if sc.Source != "" {
		fmt.Fprintf(w, "  (%s)\n", sc.Source)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "algorithm\tmakespan\treq/s\tsplit\tp50\tp99\t")
	for _, r := range rep.Results {
		fmt.Fprintf(tw, "%s\t%s\t%.1f\t%s\t%s\t%s\t\n", r.Algorithm, fmtDur(r.Makespan), r.Throughput,
			formatSplit(sc, r.Split), fmtDur(r.Latency.P50), fmtDur(r.Latency.P99))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range rep.Results {
		if r.Hedges > 0 || r.Failed > 0 {
			fmt.Fprintf(w, "  %s: %d hedges sent, %d won, %d copies cancelled, %d failed\n",
				r.Algorithm, r.Hedges, r.HedgeWins, r.Cancelled, r.Failed)
		}
	}
	_, err := fmt.Fprintln(w)
	return err
}

// fmtDur prints virtual durations with a precision that suits their size.
func fmtDur(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.3fs", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.3fms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.1fµs", float64(d)/float64(time.Microsecond))
	}
}

// formatSplit lists counts and shares for small pools and the spread for large ones.
func formatSplit(sc Scenario, split map[string]int) string {
	total := 0
	for _, n := range split {
		total += n
	}
	if len(sc.Backends) <= 4 {
		parts := make([]string, 0, len(sc.Backends))
		for _, b := range sc.Backends {
			n := split[b.ID]
			share := 0.0
			if total > 0 {
				share = 100 * float64(n) / float64(total)
			}
			parts = append(parts, fmt.Sprintf("%s %d (%.1f%%)", b.ID, n, share))
		}
		return strings.Join(parts, " / ")
	}
	lo, hi, used := -1, 0, 0
	for _, b := range sc.Backends {
		n := split[b.ID]
		if lo < 0 || n < lo {
			lo = n
		}
		hi = max(hi, n)
		if n > 0 {
			used++
		}
	}
	return fmt.Sprintf("%d..%d per backend, %d/%d used", lo, hi, used, len(sc.Backends))
}
