package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"

	"ballast/admin"
)

// ctlHA is `ballast ctl ha [--json]`: the virtual router's state (docs/ha.md).
func ctlHA(ctx context.Context, c *admin.Client, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("ctl ha", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print the API's JSON")
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "usage: ballast ctl ha [--json]")
		return 2
	}
	v, err := c.HA(ctx)
	if err != nil {
		return ctlFail(stderr, err)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(v)
		return 0
	}
	admin.WriteHA(stdout, v)
	return 0
}
