package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"ballast/sim"
)

func init() {
	register(command{name: "sim", summary: "run a lab scenario in the discrete-event simulator", run: runSim})
}

// simJSON is the --json document; its fields are exactly those the lab and the issue fix.
type simJSON struct {
	Scenario string          `json:"scenario"`
	Results  []simJSONResult `json:"results"`
}

type simJSONResult struct {
	Algorithm     string         `json:"algorithm"`
	MakespanS     float64        `json:"makespan_s"`
	ThroughputRPS float64        `json:"throughput_rps"`
	Split         map[string]int `json:"split"`
	// Range is the interval a fresh run is predicted in (sim.Range.Predicted, as the lab's
	// rows state it), with --runs only (the figures above are then the
	// runs' medians and the split the median run's).
	Range *simJSONRange `json:"range,omitempty"`
}

type simJSONRange struct {
	MakespanS     [2]float64 `json:"makespan_s"`
	ThroughputRPS [2]float64 `json:"throughput_rps"`
}

func runSim(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("ballast sim", stderr)
	algorithms := fs.String("algorithms", "", "comma-separated algorithms to run (default: every algorithm that needs no hash key)")
	asJSON := fs.Bool("json", false, "print the results as JSON")
	runs := fs.Int("runs", 0, "run each algorithm `N` times with different seeds, drawing the jitter the lab measured on this machine (sim/profiles.go), and print ranges")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: ballast sim SCENARIO [--algorithms a,b,...] [--runs N] [--json]\n\nscenarios: %s\n\nflags:\n",
			strings.Join(sim.ScenarioNames(), ", "))
		fs.PrintDefaults()
	}
	// The scenario name may come before or after the flags.
	var name string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name, args = args[0], args[1:]
	}
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if name == "" && fs.NArg() > 0 {
		name = fs.Arg(0)
		if err := fs.Parse(fs.Args()[1:]); err != nil {
			return 2
		}
	}
	if name == "" || fs.NArg() > 0 {
		fs.Usage()
		return 2
	}
	sc, err := sim.Lookup(name)
	if err != nil {
		fmt.Fprintf(stderr, "ballast sim: %v\n", err)
		return 2
	}
	var names []string
	if *algorithms != "" {
		for _, a := range strings.Split(*algorithms, ",") {
			if a = strings.TrimSpace(a); a != "" {
				names = append(names, a)
			}
		}
	}
	if *runs < 0 || *runs > 1000 {
		fmt.Fprintln(stderr, "ballast sim: --runs must be within 0..1000")
		return 2
	}
	if *runs > 0 {
		return simRanges(sc, names, *runs, *asJSON, stdout, stderr)
	}
	rep, err := sim.RunScenario(sc, names)
	if err != nil {
		fmt.Fprintf(stderr, "ballast sim: %v\n", err)
		return 2
	}
	if *asJSON {
		doc := simJSON{Scenario: sc.Name, Results: make([]simJSONResult, 0, len(rep.Results))}
		for _, r := range rep.Results {
			doc.Results = append(doc.Results, simJSONResult{
				Algorithm: r.Algorithm, MakespanS: r.Makespan.Seconds(), ThroughputRPS: r.Throughput, Split: r.Split,
			})
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(doc); err != nil {
			fmt.Fprintf(stderr, "ballast sim: %v\n", err)
			return 1
		}
		return 0
	}
	if err := sim.WriteTable(stdout, rep); err != nil {
		fmt.Fprintf(stderr, "ballast sim: %v\n", err)
		return 1
	}
	return 0
}

// simRanges runs each algorithm n times with the scenario's jitter profile and prints ranges.
func simRanges(sc sim.Scenario, names []string, n int, asJSON bool, stdout, stderr io.Writer) int {
	if sc.Jitter == nil {
		sc.Jitter = sim.Profile(sc.Profile)
	}
	if len(names) == 0 {
		names = sim.DefaultAlgorithms(sc)
	}
	doc := simJSON{Scenario: sc.Name, Results: []simJSONResult{}}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	if !asJSON {
		fmt.Fprintf(stdout, "scenario %s: %s\n  (%d runs per algorithm; jitter: %s)\n", sc.Name, sc.Summary, n, sc.Jitter)
		fmt.Fprintln(tw, "algorithm\tmakespan s\treq/s\tsplit %")
	}
	for _, name := range names {
		rg, err := sim.RunRange(sc, name, n)
		if err != nil {
			fmt.Fprintf(stderr, "ballast sim: %v\n", err)
			return 2
		}
		med := rg.Results[0]
		for _, r := range rg.Results {
			if r.Makespan.Seconds() == rg.MakespanS.Median {
				med = r
			}
		}
		makespan, rate := rg.Predicted(sc)
		doc.Results = append(doc.Results, simJSONResult{Algorithm: name, MakespanS: rg.MakespanS.Median, ThroughputRPS: rg.ThroughputRPS.Median,
			Split: med.Split, Range: &simJSONRange{MakespanS: makespan, ThroughputRPS: rate}})
		if !asJSON {
			var split []string
			for _, b := range sc.Backends[:min(len(sc.Backends), 4)] {
				sp := rg.SplitPct[b.ID]
				split = append(split, fmt.Sprintf("%s %.0f [%.0f, %.0f]", b.ID, sp.Median, sp.Min, sp.Max))
			}
			fmt.Fprintf(tw, "%s\t%.3f [%.3f, %.3f]\t%.1f [%.1f, %.1f]\t%s\n", name, rg.MakespanS.Median, makespan[0], makespan[1],
				rg.ThroughputRPS.Median, rate[0], rate[1], strings.Join(split, " / "))
		}
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(doc); err != nil {
			fmt.Fprintf(stderr, "ballast sim: %v\n", err)
			return 1
		}
		return 0
	}
	if err := tw.Flush(); err != nil {
		return 1
	}
	return 0
}
