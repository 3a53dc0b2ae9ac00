package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"ballast/lab"
)

func init() {
	register(command{name: "lab", summary: "reproduce the seeds' experiments: seed vs model vs measured, per algorithm", run: runLab})
}

func runLab(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("lab", stderr)
	asJSON := fs.Bool("json", false, "print the results as JSON instead of a table")
	out := fs.String("out", "", "write results.json, details.json and SVG charts into `dir` (dir/NAME for all)")
	quick := fs.Bool("quick", false, "shrink counts, durations and sleeps so that each scenario takes under 30 s")
	reps := fs.Int("reps", 0, "repetitions of the interleaved comparisons (backend-count, peers, lvs-modes' throughput rounds); 0 = 3, or 1 with --quick")
	bin := fs.String("ballast", "", "ballast `binary` to run as the proxy and as backends (default: this one)")
	runs := fs.Int("runs", 0, "model runs (seeds) per predicted range; 0 = 100, fewer for long scenarios (at least 10)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, `usage: ballast lab NAME [--json] [--out DIR] [--quick]

Runs one of the seeds' experiments end to end: emulated backends, Ballast with each algorithm
in turn (as a child process), and Ballast's load generator; prints one table with the seed's
figure, the model's prediction, the measured figure and its ratio to the ideal.

NAME: %s, or all. See docs/lab.md.

`, strings.Join(lab.Names(), ", "))
		fs.PrintDefaults()
	}
	// NAME may come before or after the flags.
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
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "ballast lab: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if name == "" {
		fmt.Fprintf(stderr, "ballast lab: name a scenario: %s, or all\n", strings.Join(lab.Names(), ", "))
		return 2
	}
	names := []string{name}
	if name == "all" {
		names = lab.Names()
	} else if !contains(lab.Names(), name) {
		fmt.Fprintf(stderr, "ballast lab: unknown scenario %q (valid: %s, all)\n", name, strings.Join(lab.Names(), ", "))
		return 2
	}
	if *bin == "" {
		exe, err := os.Executable()
		if err != nil {
			fmt.Fprintf(stderr, "ballast lab: cannot find this binary (%v); give --ballast PATH\n", err)
			return 1
		}
		*bin = exe
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	o := lab.Options{Ballast: *bin, Quick: *quick, Reps: *reps, Runs: *runs, Log: stderr}
	code := 0
	for _, n := range names {
		rep, err := lab.Run(ctx, n, o)
		if err != nil {
			// With all, one broken scenario does not hide the others' results.
			fmt.Fprintf(stderr, "ballast lab: %v\n", err)
			code = 1
			if ctx.Err() != nil {
				break
			}
			continue
		}
		if *asJSON {
			fmt.Fprintf(stdout, "%s\n", rep.JSON())
		} else if err := rep.WriteTable(stdout); err != nil {
			fmt.Fprintf(stderr, "ballast lab: %v\n", err)
			return 1
		}
		if *out != "" {
			dir := *out
			if name == "all" {
				dir = filepath.Join(dir, n)
			}
			if err := rep.WriteFiles(dir); err != nil {
				fmt.Fprintf(stderr, "ballast lab: %v\n", err)
				return 1
			}
			fmt.Fprintf(stderr, "ballast lab: wrote %s\n", dir)
		}
	}
	return code
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
