package lab

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
)

// Metric says which figure a scenario is judged by.
type Metric string

// The two metrics: requests per second for saturating loads, the time to finish a fixed batch
// of requests for seed 001's experiments.
const (
	Throughput Metric = "throughput"
	Makespan   Metric = "makespan"
)

// Figures is a set of reference figures (the seed's, or the model's); zero fields are absent.
type Figures struct {
	ThroughputRPS float64 `json:"throughput_rps,omitempty"`
	MakespanS     float64 `json:"makespan_s,omitempty"`
	// SplitPct is each backend's share of the responses, in percent.
	SplitPct map[string]float64 `json:"split_pct,omitempty"`
	P50Ms    float64            `json:"p50_ms,omitempty"`
	P99Ms    float64            `json:"p99_ms,omitempty"`
	// PickCPUPct is the pick function's share of the proxy's CPU (seed 002's profile).
	PickCPUPct float64 `json:"pick_cpu_pct,omitempty"`
	// Source says where a seed figure comes from when the row is not the seed's own setup.
	Source string `json:"source,omitempty"`
	// Range is the prediction as a range (predicted figures only): the interval the model's
	// runs with different seeds give (FigureRange), each drawing the jitter measured on this
	// machine; the figures above are then the runs' medians.
	Range *FigureRange `json:"range,omitempty"`
}

// FigureRange is a prediction's interval per figure from Runs runs: the makespan's and the
// throughput's as sim.Interval gives them (the runs' extremes, widened where they say too
// little: a quantized makespan's top quantum, a few runs of a continuous figure), the split's
// the runs' smallest and largest share.
type FigureRange struct {
	MakespanS     [2]float64            `json:"makespan_s"`
	ThroughputRPS [2]float64            `json:"throughput_rps"`
	SplitPct      map[string][2]float64 `json:"split_pct,omitempty"`
	Runs          int                   `json:"runs"`

	// extremes are the runs' own smallest and largest makespan and throughput, values every
	// run's (in seed order): details.json's model_extremes and model_runs.
	extremes [2][2]float64
	values   [2][]float64
}

// Result is one row: one algorithm (or proxy) under one variant of the load.
type Result struct {
	Algorithm     string           `json:"algorithm"`
	ThroughputRPS float64          `json:"throughput_rps"`
	MakespanS     float64          `json:"makespan_s"`
	Split         map[string]int64 `json:"split"`
	P50Ms         float64          `json:"p50_ms"`
	P99Ms         float64          `json:"p99_ms"`
	IdealRatio    float64          `json:"ideal_ratio"`
	Predicted     Figures          `json:"predicted"`
	Seed          Figures          `json:"seed"`

	Detail Detail `json:"-"`
}

// Detail is what a row keeps beyond the JSON contract: raw counts and the proxy's CPU.
type Detail struct {
	Algorithm string  `json:"algorithm"`
	Requests  int64   `json:"requests"`
	Failed    int64   `json:"failed"`
	Non2xx    int64   `json:"non2xx"`
	Seconds   float64 `json:"seconds"`
	P90Ms     float64 `json:"p90_ms"`
	MaxMs     float64 `json:"max_ms"`
	// CPUUsPerReq is the proxy's utime+stime per request in microseconds; 0 when unknown.
	CPUUsPerReq float64 `json:"cpu_us_per_req"`
	// CPUVsBase is CPUUsPerReq relative to the same algorithm's with 2 backends
	// (many-backends, backend-count): how much of a throughput loss is Ballast's own cost.
	CPUVsBase float64 `json:"cpu_vs_base,omitempty"`
	// BackendCPUUsPerReq is the backend processes' CPU per request (many-backends' fleets) and
	// LabCPUUsPerReq the lab process's (the load generator, and backends served in-process):
	// what else the same cores spent on each request.
	BackendCPUUsPerReq float64 `json:"backend_cpu_us_per_req,omitempty"`
	LabCPUUsPerReq     float64 `json:"lab_cpu_us_per_req,omitempty"`
	// PickNs is the algorithm's pick time over this pool, measured in the lab process with the
	// same balance code; PickCPUPct is PickNs as a share of the proxy's CPU per request, an
	// estimate of seed 002's profile figure (many-backends only).
	PickNs     float64 `json:"pick_ns,omitempty"`
	PickCPUPct float64 `json:"pick_cpu_pct,omitempty"`
	// Runs holds the figure of each repetition when a row is the median of several.
	Runs []float64 `json:"runs,omitempty"`
	// TTFBP50Ms is the median time to the response's first byte (lvs-modes).
	TTFBP50Ms float64 `json:"ttfb_p50_ms,omitempty"`
	// The XDP director's figures per request (lvs-modes): packets and bytes its program sent
	// to the real servers, response bytes that crossed it (what it received beyond what the
	// client sent), and the program's nanoseconds per packet (kernel.bpf_stats_enabled).
	DirectorPacketsPerReq float64 `json:"director_packets_per_req,omitempty"`
	DirectorBytesPerReq   float64 `json:"director_bytes_per_req,omitempty"`
	ResponseBytesPerReq   float64 `json:"response_bytes_through_director_per_req,omitempty"`
	ProgNsPerPacket       float64 `json:"prog_ns_per_packet,omitempty"`
	// RangeGoal says whether the measured figure lies inside the predicted range, and the
	// range's width (rows with a range only); InRange is the verdict alone.
	RangeGoal string `json:"range_goal,omitempty"`
	InRange   *bool  `json:"in_range,omitempty"`
	// Disturbed, when set, says how the row's own run was disturbed beyond every measured run
	// its prediction drew from (its flow stalls took a larger share of its time than in any of
	// them): a miss of such a row is stated as disturbed, and still counted as a miss.
	Disturbed string `json:"disturbed,omitempty"`
	// OwnRange is the model's range with every run drawing the row's own measured run alone
	// (its hops, flow stalls, drain and recovery): not a prediction (the row's own
	// measurement feeds it) but a check of the model. When it holds the measured figure and
	// the prediction does not, the row ran unlike every run its range drew from; when it
	// misses too, the model misses something of that run.
	OwnRange *FigureRange `json:"own_range,omitempty"`
	// Spread is the lab's repeatability for the row, in its unit (spread.go): how far two
	// measured runs of the same row lie apart, measured in this run (SpreadFrom says how); 0
	// when not measured. WithinSpread says the row missed the model's range by no more than
	// that (the range with each end moved out by Spread holds it): reported so, never as
	// inside (InRange stays false).
	Spread       float64 `json:"spread,omitempty"`
	SpreadFrom   string  `json:"spread_from,omitempty"`
	WithinSpread *bool   `json:"within_spread,omitempty"`
	// DrewFrom says which measured runs the row's range drew from (how many, their flow-stall
	// shares, and the row's own).
	DrewFrom string `json:"drew_from,omitempty"`
	// ModelExtremes are the smallest and largest figure (the scenario's metric) of the runs
	// the row's range comes from, and ModelRuns every run's, in seed order: how the interval
	// (Predicted's range) stands against the runs' extremes, and how the extremes move with
	// the number of runs (the first n of them are the range of n runs).
	ModelExtremes *[2]float64 `json:"model_extremes,omitempty"`
	ModelRuns     []float64   `json:"model_runs,omitempty"`
	// Jitter is the delays measured on this row's own requests (seed 001's rows), to hold
	// against the calibration the prediction drew from.
	Jitter string `json:"jitter,omitempty"`
}

// Report is one scenario's results.
type Report struct {
	Scenario string   `json:"scenario"`
	Results  []Result `json:"results"`

	// Metric is the figure the scenario is judged by; Ideal describes its ideal in words.
	Metric Metric   `json:"-"`
	Ideal  string   `json:"-"`
	Notes  []string `json:"-"`
	// IdealValue is the ideal in the metric's unit when it is one number for every row
	// (drawn as a line on the chart); 0 when the ideal is relative.
	IdealValue float64 `json:"-"`
	// Advise is the advise check of a seed scenario (advisecheck.go).
	Advise *AdviseCheck `json:"-"`
	// charts, when set, draws the scenario's own charts instead of the generic ones.
	charts func(r *Report, dir string) error
	// Failover holds the failover scenario's rows (failover.go); empty for the others.
	Failover []FailoverRow `json:"failover,omitempty"`
	// ScaleOut holds the scale-out scenario's rows (scaleout.go); empty for the others.
	ScaleOut []ScaleOutRow `json:"scale_out,omitempty"`
	// table, when set, prints the scenario's own table instead of the generic one.
	table func(r *Report, w io.Writer) error
}

// JSON returns the report in the contract's exact shape.
func (r *Report) JSON() []byte {
	for i := range r.Results {
		if r.Results[i].Split == nil {
			r.Results[i].Split = map[string]int64{}
		}
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		panic(err) // numbers, strings and maps of them only
	}
	return b
}

// WriteFiles writes results.json, details.json and the charts into dir, creating it.
func (r *Report) WriteFiles(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), append(r.JSON(), '\n'), 0o644); err != nil {
		return err
	}
	details := struct {
		Scenario string   `json:"scenario"`
		Ideal    string   `json:"ideal"`
		Notes    []string `json:"notes"`
		Rows     []Detail `json:"rows"`
	}{r.Scenario, r.Ideal, r.Notes, nil}
	for _, res := range r.Results {
		d := res.Detail
		d.Algorithm = res.Algorithm
		details.Rows = append(details.Rows, d)
	}
	b, err := json.MarshalIndent(details, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "details.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	return r.WriteCharts(dir)
}

// WriteTable prints the report as one aligned table: algorithm | seed | predicted | measured |
// % of ideal | proxy CPU per request | split, then the notes.
func (r *Report) WriteTable(w io.Writer) error {
	if r.table != nil {
		return r.table(r, w)
	}
	fmt.Fprintf(w, "scenario %s (%s; ideal: %s)\n", r.Scenario, r.Metric, r.Ideal)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	ranged := slices.ContainsFunc(r.Results, func(x Result) bool { return x.Predicted.Range != nil })
	goalCol := ""
	if ranged {
		goalCol = "\tin range"
	}
	fmt.Fprintln(tw, "algorithm\tseed\tpredicted\tmeasured"+goalCol+"\t% of ideal\tcpu/req\tp50\tp99\tsplit")
	for _, res := range r.Results {
		cpu := "-"
		if res.Detail.CPUUsPerReq > 0 {
			cpu = fmt.Sprintf("%.1fµs", res.Detail.CPUUsPerReq)
		}
		if res.Detail.CPUVsBase > 0 {
			cpu += fmt.Sprintf(" (%.0f%% of n=2)", 100*res.Detail.CPUVsBase)
		}
		if d := res.Detail; d.BackendCPUUsPerReq > 0 || d.LabCPUUsPerReq > 0 {
			cpu += fmt.Sprintf(", backends %.1fµs, lab %.1fµs", d.BackendCPUUsPerReq, d.LabCPUUsPerReq)
		}
		ratio := "-"
		if res.IdealRatio > 0 {
			ratio = fmt.Sprintf("%.1f%%", 100*res.IdealRatio)
		}
		measured := r.format(res.ThroughputRPS, res.MakespanS)
		if res.Detail.PickCPUPct > 0 {
			measured += fmt.Sprintf(", pick %.2f%% CPU", res.Detail.PickCPUPct)
		}
		if res.Detail.Failed > 0 || res.Detail.Non2xx > 0 {
			measured += fmt.Sprintf(" (%d failed, %d non-2xx)", res.Detail.Failed, res.Detail.Non2xx)
		}
		if ranged {
			g := res.Detail.RangeGoal
			if g == "" {
				g = "-"
			}
			measured += "\t" + g
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%.2fms\t%.2fms\t%s\n", res.Algorithm,
			r.figures(res.Seed), r.figures(res.Predicted), measured, ratio, cpu,
			res.P50Ms, res.P99Ms, formatSplit(res.Split))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "  note: %s\n", n)
	}
	_, err := fmt.Fprintln(w)
	return err
}

// format prints the scenario's metric.
func (r *Report) format(rps, makespan float64) string {
	if r.Metric == Makespan {
		if makespan == 0 {
			return "-"
		}
		return fmt.Sprintf("%.3f s", makespan)
	}
	if rps == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f req/s", rps)
}

// figures prints a reference's metric (and its range) and split, or the pick's CPU share for
// seed 002.
func (r *Report) figures(f Figures) string {
	var parts []string
	if s := r.format(f.ThroughputRPS, f.MakespanS); s != "-" {
		if g := f.Range; g != nil {
			lo, hi := g.ThroughputRPS[0], g.ThroughputRPS[1]
			if r.Metric == Makespan {
				s = strings.TrimSuffix(s, " s")
				s += fmt.Sprintf(" [%.3f, %.3f] s", g.MakespanS[0], g.MakespanS[1])
			} else {
				s = strings.TrimSuffix(s, " req/s")
				s += fmt.Sprintf(" [%.0f, %.0f] req/s", lo, hi)
			}
		}
		parts = append(parts, s)
	}
	if f.PickCPUPct > 0 {
		parts = append(parts, fmt.Sprintf("pick %.2f%% CPU", f.PickCPUPct))
	}
	if len(f.SplitPct) > 0 && len(f.SplitPct) <= 5 {
		names := sortedKeys(f.SplitPct)
		var sp []string
		for _, n := range names {
			sp = append(sp, fmt.Sprintf("%.0f", f.SplitPct[n]))
		}
		parts = append(parts, strings.Join(sp, "/"))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}

// formatSplit lists shares for small pools and the spread for large ones.
func formatSplit(split map[string]int64) string {
	if len(split) == 0 {
		return "-"
	}
	var total int64
	for _, n := range split {
		total += n
	}
	names := sortedKeys(split)
	if len(names) <= 5 {
		parts := make([]string, len(names))
		for i, n := range names {
			parts[i] = fmt.Sprintf("%s %.1f%%", n, pct(split[n], total))
		}
		return strings.Join(parts, " / ")
	}
	lo, hi := split[names[0]], split[names[0]]
	for _, n := range names {
		lo, hi = min(lo, split[n]), max(hi, split[n])
	}
	return fmt.Sprintf("%d groups, %d..%d each", len(names), lo, hi)
}

func pct(n, total int64) float64 {
	if total == 0 {
		return 0
	}
	return 100 * float64(n) / float64(total)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// judgeRange sets row's range goal: the scenario's figure measured inside the predicted range,
// and the range's width. It reports whether the row met it; rows without a range are not
// judged (false, false).
func judgeRange(m Metric, row *Result) (inside, judged bool) {
	g := row.Predicted.Range
	if g == nil {
		return false, false
	}
	x, rg, unit, f := row.ThroughputRPS, g.ThroughputRPS, "req/s", "%.0f"
	med := row.Predicted.ThroughputRPS
	if m == Makespan {
		x, rg, unit, f = row.MakespanS, g.MakespanS, "s", "%.3f"
		med = row.Predicted.MakespanS
	}
	width := rg[1] - rg[0]
	rel := 0.0
	if med > 0 {
		rel = 100 * width / med
	}
	w := fmt.Sprintf("width "+f+" %s (%.1f%%)", width, unit, rel)
	ext, vals := g.extremes[1], g.values[1]
	if m == Makespan {
		ext, vals = g.extremes[0], g.values[0]
	}
	if len(vals) > 0 {
		row.Detail.ModelExtremes, row.Detail.ModelRuns = &ext, vals
		if ext != rg {
			w += fmt.Sprintf(", the %d runs' extremes ["+f+", "+f+"]", g.Runs, ext[0], ext[1])
		}
	}
	sp := ""
	spread := row.Detail.Spread
	fs := f // a makespan's spread may be a fraction of a millisecond
	if m == Makespan {
		fs = "%.4f"
	}
	if spread > 0 {
		sp = fmt.Sprintf("; repeatability "+fs+" %s", spread, unit)
	}
	band := spreadBand(rg, spread)
	within := false
	switch {
	case x >= rg[0] && x <= rg[1]:
		row.Detail.RangeGoal = "yes, " + w + sp
		inside = true
	case spread > 0 && x >= band[0] && x <= band[1]:
		within = true
		side, d := "below", rg[0]-x
		if x > rg[1] {
			side, d = "above", x-rg[1]
		}
		row.Detail.RangeGoal = fmt.Sprintf("no, but within the lab's repeatability: "+f+" %s %s the model's range, its spread "+fs+" %s; %s", d, unit, side, spread, unit, w)
	case x < rg[0]:
		row.Detail.RangeGoal = fmt.Sprintf("no: "+f+" %s below; %s", rg[0]-x, unit, w) + sp
	default:
		row.Detail.RangeGoal = fmt.Sprintf("no: "+f+" %s above; %s", x-rg[1], unit, w) + sp
	}
	row.Detail.WithinSpread = nil
	if spread > 0 {
		row.Detail.WithinSpread = &within
	}
	if !inside && row.Detail.Disturbed != "" {
		row.Detail.RangeGoal += "; disturbed: " + row.Detail.Disturbed
	}
	if own := row.Detail.OwnRange; !inside && own != nil {
		org := own.ThroughputRPS
		if m == Makespan {
			org = own.MakespanS
		}
		verdict := "holds it: a run unlike those its range drew from"
		if x < org[0] || x > org[1] {
			verdict = "misses it too"
		}
		row.Detail.RangeGoal += fmt.Sprintf("; its own run in the model ["+f+", "+f+"] %s", org[0], org[1], verdict)
	}
	row.Detail.InRange = &inside
	return inside, true
}
