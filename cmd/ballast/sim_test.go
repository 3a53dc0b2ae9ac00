package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestSimJSON(t *testing.T) {
	tests := []struct {
		args     []string
		scenario string
		want     map[string]float64 // algorithm -> makespan_s
		split    map[string]map[string]int
	}{
		{[]string{"sim", "slow-backend", "--algorithms", "byrequests,bybusyness", "--json"}, "slow-backend",
			map[string]float64{"byrequests": 25, "bybusyness": 5},
			map[string]map[string]int{"byrequests": {"A": 25, "B": 25}, "bybusyness": {"A": 45, "B": 5}}},
		{[]string{"sim", "--json", "--algorithms=swrr", "variable-cost"}, "variable-cost",
			map[string]float64{"swrr": 15}, nil},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(tt.args, &stdout, &stderr); code != 0 {
				t.Fatalf("exit %d, stderr %q", code, stderr.String())
			}
			// Decode strictly: the document must have exactly the agreed fields.
			dec := json.NewDecoder(&stdout)
			dec.DisallowUnknownFields()
			var doc struct {
				Scenario string `json:"scenario"`
				Results  []struct {
					Algorithm     string         `json:"algorithm"`
					MakespanS     float64        `json:"makespan_s"`
					ThroughputRPS float64        `json:"throughput_rps"`
					Split         map[string]int `json:"split"`
				} `json:"results"`
			}
			if err := dec.Decode(&doc); err != nil {
				t.Fatalf("decode: %v", err)
			}
			if doc.Scenario != tt.scenario || len(doc.Results) != len(tt.want) {
				t.Fatalf("scenario %q with %d results, want %q with %d", doc.Scenario, len(doc.Results), tt.scenario, len(tt.want))
			}
			for _, r := range doc.Results {
				want, ok := tt.want[r.Algorithm]
				if !ok || r.MakespanS != want {
					t.Errorf("%s: makespan %g s, want %g", r.Algorithm, r.MakespanS, want)
				}
				if r.ThroughputRPS != 50/want {
					t.Errorf("%s: throughput %g, want %g", r.Algorithm, r.ThroughputRPS, 50/want)
				}
				for id, n := range tt.split[r.Algorithm] {
					if r.Split[id] != n {
						t.Errorf("%s: split %v, want %v", r.Algorithm, r.Split, tt.split[r.Algorithm])
					}
				}
			}
		})
	}
}

func TestSimTable(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"sim", "slow-backend", "--algorithms", "swrr,bybusyness"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{"algorithm", "makespan", "req/s", "split", "p50", "p99", "swrr", "25.000s", "bybusyness", "5.000s", "A 45 (90.0%)"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestSimErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string // in stderr
	}{
		{[]string{"sim"}, "scenarios: heterogeneous"},
		{[]string{"sim", "nope"}, "valid: heterogeneous"},
		{[]string{"sim", "slow-backend", "--algorithms", "nope"}, "valid:"},
		{[]string{"sim", "slow-backend", "--bogus"}, "flag provided but not defined"},
		{[]string{"sim", "slow-backend", "extra"}, "usage: ballast sim"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(tt.args, &stdout, &stderr); code != 2 {
				t.Fatalf("exit %d, want 2", code)
			}
			if !strings.Contains(stderr.String(), tt.want) {
				t.Fatalf("stderr %q lacks %q", stderr.String(), tt.want)
			}
		})
	}
}

// TestSimRuns: with --runs the model draws the lab's measured jitter, and seed 001's
// byrequests no longer always lines its expensive requests up on one backend: its range
// reaches below the ideal machine's 15 s, and the JSON gives each figure's range.
func TestSimRuns(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"sim", "variable-cost", "--runs", "40", "--algorithms", "byrequests", "--json"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	var doc struct {
		Results []struct {
			Algorithm string  `json:"algorithm"`
			MakespanS float64 `json:"makespan_s"`
			Range     struct {
				MakespanS     [2]float64 `json:"makespan_s"`
				ThroughputRPS [2]float64 `json:"throughput_rps"`
			} `json:"range"`
		} `json:"results"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &doc); err != nil || len(doc.Results) != 1 {
		t.Fatalf("%v: %s", err, stdout.String())
	}
	r := doc.Results[0]
	if r.Range.MakespanS[0] >= 15 || r.Range.MakespanS[0] < 8 || r.Range.MakespanS[1] > 16 || r.MakespanS < r.Range.MakespanS[0] || r.MakespanS > r.Range.MakespanS[1] {
		t.Errorf("byrequests %v s in %v: want a range reaching below 15 s, within the client's bound", r.MakespanS, r.Range.MakespanS)
	}
	stdout.Reset()
	if code := run([]string{"sim", "variable-cost", "--runs", "5"}, &stdout, &stderr); code != 0 || !strings.Contains(stdout.String(), "5 runs per algorithm") || !strings.Contains(stdout.String(), "[") {
		t.Errorf("table: exit %d\n%s", code, stdout.String())
	}
	if code := run([]string{"sim", "variable-cost", "--runs", "-1"}, &stdout, &stderr); code != 2 {
		t.Errorf("--runs -1: exit %d", code)
	}
}
