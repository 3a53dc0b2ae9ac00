package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"

	"ballast/admin"
)

// ctlBGP is `ballast ctl bgp [--json]`: the sessions with the routers and what is announced, and why (docs/scale-out.md).
func ctlBGP(ctx context.Context, c *admin.Client, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("ctl bgp", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print the API's JSON")
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "usage: ballast ctl bgp [--json]")
		return 2
	}
	v, err := c.BGP(ctx)
	if err != nil {
		return ctlFail(stderr, err)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(v)
		return 0
	}
	admin.WriteBGP(stdout, v)
	return 0
}
