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
	return ctlShow(ctx, "ha", args, c.HA, admin.WriteHA, stdout, stderr)
}

// ctlBGP is `ballast ctl bgp [--json]`: the sessions with the routers and what is announced,
// and why (docs/scale-out.md).
func ctlBGP(ctx context.Context, c *admin.Client, args []string, stdout, stderr io.Writer) int {
	return ctlShow(ctx, "bgp", args, c.BGP, admin.WriteBGP, stdout, stderr)
}

// ctlShow is `ballast ctl NAME [--json]` for a read of the admin API: get's value as text
// (write) or as the API's JSON.
func ctlShow[T any](ctx context.Context, name string, args []string, get func(context.Context) (T, error), write func(io.Writer, T), stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("ctl "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print the API's JSON")
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 {
		fmt.Fprintf(stderr, "usage: ballast ctl %s [--json]\n", name)
		return 2
	}
	v, err := get(ctx)
	if err != nil {
		return ctlFail(stderr, err)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(v)
		return 0
	}
	write(stdout, v)
	return 0
}
