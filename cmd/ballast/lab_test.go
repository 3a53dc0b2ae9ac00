package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

func TestLabUsageErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no scenario", []string{"lab"}, 2, "name a scenario"},
		{"unknown scenario", []string{"lab", "nope"}, 2, "unknown scenario \"nope\""},
		{"unknown flag", []string{"lab", "heterogeneous", "--nope"}, 2, "flag provided but not defined"},
		{"extra argument", []string{"lab", "peers", "--quick", "extra"}, 2, "unexpected argument \"extra\""},
		{"help", []string{"lab", "-h"}, 0, "usage: ballast lab NAME"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			if code := run(tt.args, &out, &errb); code != tt.code {
				t.Errorf("exit %d, want %d (stderr %q)", code, tt.code, errb.String())
			}
			if !strings.Contains(errb.String(), tt.want) {
				t.Errorf("stderr %q lacks %q", errb.String(), tt.want)
			}
			if out.Len() != 0 {
				t.Errorf("stdout %q, want nothing", out.String())
			}
		})
	}
}

// TestLabQuickJSON runs `ballast lab slow-backend --quick --json --out DIR` against a freshly
// built binary (the lab runs it as `serve`) and checks the JSON contract and the files.
func TestLabQuickJSON(t *testing.T) {
	if testing.Short() {
		t.Skip("builds ballast and runs a scenario end to end")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "ballast")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building ballast: %v\n%s", err, out)
	}
	outDir := filepath.Join(dir, "out")
	var out, errb bytes.Buffer
	// NAME after the flags works as well as before them.
	code := run([]string{"lab", "--quick", "--json", "--out", outDir, "--ballast", bin, "slow-backend"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var rep struct {
		Scenario string                       `json:"scenario"`
		Results  []map[string]json.RawMessage `json:"results"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("stdout is not the JSON report: %v\n%s", err, out.String())
	}
	if rep.Scenario != "slow-backend" || len(rep.Results) == 0 {
		t.Fatalf("report %+v", rep)
	}
	want := []string{"algorithm", "ideal_ratio", "makespan_s", "p50_ms", "p99_ms", "predicted", "seed", "split", "throughput_rps"}
	for _, r := range rep.Results {
		var keys []string
		for k := range r {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		if strings.Join(keys, ",") != strings.Join(want, ",") {
			t.Errorf("row keys %v, want %v", keys, want)
		}
		var split map[string]int64
		if err := json.Unmarshal(r["split"], &split); err != nil || split["A"]+split["B"] != 50 {
			t.Errorf("split %s: want 50 responses", r["split"])
		}
	}
	saved, err := os.ReadFile(filepath.Join(outDir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(bytes.TrimSpace(saved), bytes.TrimSpace(out.Bytes())) {
		t.Error("results.json differs from the --json output")
	}
	for _, f := range []string{"details.json", "makespan.svg", "latency.svg", "split.svg"} {
		if _, err := os.Stat(filepath.Join(outDir, f)); err != nil {
			t.Errorf("missing %s: %v", f, err)
		}
	}
}
