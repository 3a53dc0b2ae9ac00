// Package lab reproduces the seeds' experiments end to end on this machine: it starts emulated
// backends (lab/backend), starts Ballast with each algorithm in turn as a child process
// (`ballast serve -c FILE`, so that its CPU can be read from /proc), drives it with Ballast's
// load generator (lab/loadgen), and reports, for every algorithm, the seed's figure, the
// simulator's prediction (package sim), the measured figure and its ratio to the ideal.
//
// # Contract
//
// Run(name, Options) runs one scenario of ../shared/SCENARIOS.md (Names lists them) and returns
// a Report whose JSON form is exactly {"scenario": NAME, "results": [{"algorithm", "throughput_rps",
// "makespan_s", "split", "p50_ms", "p99_ms", "ideal_ratio", "predicted", "seed"}, ...]}.
// Measured figures come from the load generator; "split" counts the responses per backend by
// the X-Ballast-Backend header the emulated backends send (pools over 100 backends are counted
// per block of consecutive ports, so the counts still sum to the responses). "predicted" and
// "seed" are objects holding only the figures that exist for that row. Options.Quick shrinks
// request counts, durations and sleep times (by QuickScale) so that each scenario ends within
// about 30 seconds; the predictions are computed for the same shrunken scenario.
//
// In heterogeneous, slow-backend and variable-cost "predicted" is a range: the model (package
// sim) runs the row's scenario with Options.Runs seeds, each drawing the delays measured in the
// same scenario (jitter.go: a calibration run of the scenario's load timed on the load
// generator's, the backends' and Ballast's clocks, and the other traced rows; stall.go: the
// lab process's stalls; flowstall.go: each traced run's stalls of the path through Ballast),
// and the figures are the runs' medians with "range": {"makespan_s":
// [min, max], "throughput_rps": [min, max], "split_pct": ..., "runs": n}. Each row's goal is its
// measured figure inside its range (Detail.RangeGoal states it with the width, and
// Detail.Disturbed a row whose own flow stalls exceeded those of every run its range drew from,
// Detail.OwnRange the model drawing the row's own run alone, a check of the model, and
// Detail.DrewFrom which runs the range drew: in heterogeneous those nearest the row's own in
// flow-stall share; Detail.Spread the lab's repeatability measured for the row, spread.go: a
// row outside the range by no more than it is reported within the lab's repeatability, which
// is not inside). Those scenarios
// also run the advise check (advisecheck.go, Report.Advise): advise's best choice is measured
// against the scenario's goal and its range for the seed's method against that row. `jitter`
// measures the calibrations alone (the profiles of sim/profiles_data.go).
//
// Each row also keeps, outside the JSON, the proxy's CPU time per request (utime + stime of the
// proxy's process tree from /proc, read before and after the load) and the raw counts; WriteFiles
// stores them in details.json beside results.json and the SVG charts. many-backends and
// backend-count also keep the CPU per request of what shares the cores with Ballast, read the
// same way: the backend processes' and the lab process's own (the load generator, and backends
// served in-process), and Ballast's CPU per request relative to the same algorithm's with 2
// backends, so that a throughput loss can be told apart from a growth of Ballast's own cost.
//
// The peers scenario runs HAProxy, nginx and Caddy when their binaries are on PATH and lists the
// ones it skipped in Report.Notes.
//
// # Concurrency
//
// A scenario runs its loads one after another (measurements must not overlap); Run is not
// meant to be called concurrently with another Run, since both would share the machine's CPUs
// and ports. Child processes are always stopped before Run returns, also on errors and on
// cancellation of the context.
package lab
