package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"

	"golang.org/x/term"

	"ballast/lab/loadgen"
)

func init() {
	register(command{name: "bench", summary: "load generator, ab-compatible flags (-n -c -k -t -R)", run: runBench})
}

func runBench(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("ballast bench", stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: ballast bench [flags] http://host[:port]/path")
		fs.PrintDefaults()
	}
	var (
		o       loadgen.Options
		headers stringList
	)
	n := fs.Int64("n", 0, "`requests` to perform (default 1 without -t or -d)")
	fs.IntVar(&o.C, "c", 1, "`concurrency`: workers, one connection each")
	fs.BoolVar(&o.KeepAlive, "k", false, "keep-alive: reuse connections (default: one connection per request)")
	seconds := fs.Float64("t", 0, "time limit in `seconds` (without -n: run until then)")
	dur := fs.Duration("d", 0, "time limit as a `duration` such as 10s (like -t)")
	suffixFile := fs.String("R", "", "`file` of URL suffixes: request i appends line i mod lines (?wait=1, wait=1 or /path)")
	fs.StringVar(&o.Method, "m", "GET", "HTTP `method`")
	fs.Var(&headers, "H", "extra request `header` \"Name: value\" (repeatable)")
	bodyFile := fs.String("b", "", "`file` sent as the request body")
	asJSON := fs.Bool("json", false, "print exactly one JSON object instead of the report")
	var rest []string
	for {
		if code, ok := parseFlags(fs, args); !ok {
			return code
		}
		if fs.NArg() == 0 {
			break
		}
		rest = append(rest, fs.Arg(0)) // allow flags after the URL too
		args = fs.Args()[1:]
	}
	if len(rest) != 1 {
		fs.Usage()
		return 2
	}
	o.URL = rest[0]
	o.Headers = headers
	o.N = *n
	if *seconds > 0 {
		o.Duration = time.Duration(*seconds * float64(time.Second))
	}
	if *dur > 0 {
		o.Duration = *dur
	}
	if o.N == 0 && o.Duration == 0 {
		o.N = 1
	}
	if *suffixFile != "" {
		f, err := os.Open(*suffixFile)
		if err != nil {
			fmt.Fprintf(stderr, "ballast bench: %v\n", err)
			return 1
		}
		o.URLSuffixes, err = loadgen.ReadSuffixes(f)
		f.Close()
		if err != nil {
			fmt.Fprintf(stderr, "ballast bench: %s: %v\n", *suffixFile, err)
			return 1
		}
	}
	if *bodyFile != "" {
		b, err := os.ReadFile(*bodyFile)
		if err != nil {
			fmt.Fprintf(stderr, "ballast bench: %v\n", err)
			return 1
		}
		o.Body = b
	}
	if f, ok := stderr.(*os.File); ok && !*asJSON && term.IsTerminal(int(f.Fd())) {
		o.Progress = loadgen.Bar(stderr, o.N, o.Duration)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	res, err := loadgen.Run(ctx, o)
	if o.Progress != nil {
		fmt.Fprintln(stderr)
	}
	if err != nil {
		fmt.Fprintf(stderr, "ballast bench: %v\n", err)
		return 1
	}
	if *asJSON {
		fmt.Fprintf(stdout, "%s\n", res.JSON())
		return 0
	}
	res.WriteText(stdout)
	return 0
}
