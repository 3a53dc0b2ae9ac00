package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"ballast/admin"
	"ballast/advise"
	"ballast/sim"
)

func init() {
	register(command{name: "advise", summary: "replay a pool's observed traffic in the simulator and recommend a balancer and settings", run: runAdvise})
}

const adviseUsage = `usage: ballast advise (--admin URL [--pool NAME] | --file F | --scenario NAME) [--objective p99|throughput|makespan] [--json]

Replays what a pool was seen to do through the simulator for every balancer that fits it and
a small grid of settings (max_conns, max_queue, hedge delay), and prints one row per choice:
predicted throughput, makespan, p50, p99, queue time and share per backend, each as the
median of the runs [min, max]; the best for the objective first, the current choice marked.
It recommends a change only when the choice beats the current one in every run.

  --admin URL     a running ballast's admin API (reads GET /api/pools/{pool}/observed)
  --file F        an observation as that endpoint returns it (JSON)
  --scenario NAME a lab scenario (%s); its current choice is the seed's method

See docs/advise.md.
`

func runAdvise(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("advise", stderr)
	addr := fs.String("admin", "", "admin `URL` or host:port of the running ballast")
	pool := fs.String("pool", "", "the pool to advise on (default: the only one)")
	file := fs.String("file", "", "an observation `file` (JSON)")
	scenario := fs.String("scenario", "", "a lab scenario `name`")
	objective := fs.String("objective", "", "p99, throughput or makespan (default: p99; a scenario's own metric)")
	asJSON := fs.Bool("json", false, "print the advice as JSON")
	runs := fs.Int("runs", 0, "replays per choice, each with its own seed (default 10)")
	token := fs.String("token", os.Getenv("BALLAST_TOKEN"), "bearer `token` for the admin API, if it asks for one")
	timeout := fs.Duration("timeout", 2*time.Minute, "give up after this long")
	fs.Usage = func() {
		fmt.Fprintf(stderr, adviseUsage+"\nflags:\n", strings.Join(sim.ScenarioNames(), ", "))
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "ballast advise: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	sources := 0
	for _, s := range []string{*addr, *file, *scenario} {
		if s != "" {
			sources++
		}
	}
	if sources != 1 {
		fmt.Fprintln(stderr, "ballast advise: give exactly one of --admin, --file and --scenario")
		return 2
	}
	if *pool != "" && *addr == "" {
		fmt.Fprintln(stderr, "ballast advise: --pool goes with --admin")
		return 2
	}
	obj, err := advise.ParseObjective(*objective)
	if err != nil {
		fmt.Fprintf(stderr, "ballast advise: %v\n", err)
		return 2
	}
	if *runs < 0 || *runs > 1000 {
		fmt.Fprintln(stderr, "ballast advise: --runs must be within 0..1000")
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	opt := advise.Options{Objective: obj, Runs: *runs}
	var adv advise.Advice
	switch {
	case *scenario != "":
		sc, err := sim.Lookup(*scenario)
		if err != nil {
			fmt.Fprintf(stderr, "ballast advise: %v\n", err)
			return 2
		}
		adv, err = advise.AdviseScenario(ctx, sc, opt)
		if err != nil {
			fmt.Fprintf(stderr, "ballast advise: %v\n", err)
			return 1
		}
	default:
		var o advise.Observation
		if *file != "" {
			o, err = readObservation(*file)
		} else {
			o, err = fetchObservation(ctx, admin.NewClient(*addr, *token), *pool)
		}
		if err != nil {
			fmt.Fprintf(stderr, "ballast advise: %v\n", err)
			return 1
		}
		adv, err = advise.Advise(ctx, o, opt)
		if err != nil {
			fmt.Fprintf(stderr, "ballast advise: %v\n", err)
			return 1
		}
		if *addr != "" {
			adv.Source = "observed at " + *addr
		} else {
			adv.Source = "file " + *file
		}
	}
	if *asJSON {
		_, err = stdout.Write(adv.JSON())
	} else {
		err = adv.WriteTable(stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "ballast advise: %v\n", err)
		return 1
	}
	return 0
}

// maxObservationFile bounds --file.
const maxObservationFile = 64 << 20

func readObservation(path string) (advise.Observation, error) {
	f, err := os.Open(path)
	if err != nil {
		return advise.Observation{}, err
	}
	defer f.Close()
	dec := json.NewDecoder(io.LimitReader(f, maxObservationFile))
	dec.DisallowUnknownFields()
	var o advise.Observation
	if err := dec.Decode(&o); err != nil {
		return advise.Observation{}, fmt.Errorf("%s: %w", path, err)
	}
	return o, nil
}

// fetchObservation reads the named pool's observation, or the only pool's.
func fetchObservation(ctx context.Context, c *admin.Client, pool string) (advise.Observation, error) {
	if pool == "" {
		r, err := c.Pools(ctx)
		if err != nil {
			return advise.Observation{}, err
		}
		var names []string
		for _, p := range r.Pools {
			if p.Protocol != "l4" {
				names = append(names, p.Name)
			}
		}
		switch len(names) {
		case 0:
			return advise.Observation{}, errors.New("the admin API lists no HTTP pool")
		case 1:
			pool = names[0]
		default:
			return advise.Observation{}, fmt.Errorf("name a pool with --pool: %s", strings.Join(names, ", "))
		}
	}
	return c.Observed(ctx, pool, false)
}
