package main

import (
	"errors"
	"fmt"
	"io"

	"ballast/config"
)

func init() {
	register(command{name: "check", summary: "validate a configuration file and print it with every default filled", run: runCheck})
}

// runCheck prints the normalised configuration (exit 0) or every problem in it (exit 1).
func runCheck(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("check", stderr)
	file := fs.String("c", "ballast.yaml", "configuration `file` to check")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: ballast check [-c FILE]\n\nPrints the configuration with every default written out, or every error in it.")
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "ballast check: unexpected argument %q (the file goes after -c)\n", fs.Arg(0))
		return 2
	}
	cfg, err := config.Load(*file)
	if err != nil {
		fmt.Fprintln(stderr, err)
		var es config.Errors
		if errors.As(err, &es) && len(es) > 1 {
			fmt.Fprintf(stderr, "%d problems in %s\n", len(es), *file)
		}
		return 1
	}
	_, _ = stdout.Write(cfg.Normalised())
	return 0
}
