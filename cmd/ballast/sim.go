package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

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
}

func runSim(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("ballast sim", stderr)
	algorithms := fs.String("algorithms", "", "comma-separated algorithms to run (default: every algorithm that needs no hash key)")
	asJSON := fs.Bool("json", false, "print the results as JSON")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: ballast sim SCENARIO [--algorithms a,b,...] [--json]\n\nscenarios: %s\n\nflags:\n",
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
