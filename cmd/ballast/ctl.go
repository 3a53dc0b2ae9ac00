package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"ballast/admin"
)

func init() {
	register(command{name: "ctl", summary: "query and change a running ballast through its admin API (status, drain, weight, ...)", run: runCtl})
}

const ctlUsage = `usage: ballast ctl [--admin URL] [--token T] [--fleet] COMMAND

commands:
  status [--json]                  pools, backends and XDP directors with live state
  ha [--json]                      the HA virtual router: state, priority, master, adverts
  bgp [--json]                     BGP sessions (state, uptime, prefixes sent, BFD), what is announced and why
  drain   POOL BACKEND             no new requests; in-flight ones finish
  disable POOL BACKEND             out of rotation (maintenance)
  enable  POOL BACKEND             undo drain/disable (slow start applies)
  weight  POOL BACKEND N           override the weight (0 = no new traffic, at most 10000)
  add     POOL ADDRESS [--weight N] [--name NAME]
  remove  POOL BACKEND

Changes apply at once and are runtime overrides. The token defaults to $BALLAST_TOKEN.
With --fleet, drain, disable, enable and weight (and add and remove in pools discovered from
the fleet) are written to the fleet's etcd prefix and every node applies them.
`

func runCtl(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("ctl", stderr)
	addr := fs.String("admin", admin.DefaultAddress, "admin `URL` or host:port of the running ballast")
	token := fs.String("token", os.Getenv("BALLAST_TOKEN"), "bearer `token` for changes (admin.token) and for reads when admin.reads is token (admin.token or admin.read_token)")
	timeout := fs.Duration("timeout", 10*time.Second, "give up after this long")
	fleet := fs.Bool("fleet", false, "send the change to every node of the fleet (fleet.etcd), not this node only")
	fs.Usage = func() {
		fmt.Fprint(stderr, ctlUsage+"\nflags:\n")
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	rest := fs.Args()
	if len(rest) == 0 {
		fs.Usage()
		return 2
	}
	c := admin.NewClient(*addr, *token)
	c.Fleet = *fleet
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	cmd, rest := rest[0], rest[1:]
	var msg string
	var err error
	switch cmd {
	case "status":
		sf := flag.NewFlagSet("ctl status", flag.ContinueOnError)
		sf.SetOutput(stderr)
		asJSON := sf.Bool("json", false, "print the API's JSON")
		if err := sf.Parse(rest); err != nil || sf.NArg() > 0 {
			fmt.Fprintln(stderr, "usage: ballast ctl status [--json]")
			return 2
		}
		r, err := c.Pools(ctx)
		if err != nil {
			return ctlFail(stderr, err)
		}
		if *asJSON {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			_ = enc.Encode(r)
			return 0
		}
		_ = admin.WriteStatus(stdout, r)
		return 0
	case "ha":
		return ctlHA(ctx, c, rest, stdout, stderr)
	case "bgp":
		return ctlBGP(ctx, c, rest, stdout, stderr)
	case "drain", "disable", "enable", "remove":
		if len(rest) != 2 {
			fmt.Fprintf(stderr, "usage: ballast ctl %s POOL BACKEND\n", cmd)
			return 2
		}
		msg, err = c.Action(ctx, rest[0], rest[1], cmd)
	case "weight":
		if len(rest) != 3 {
			fmt.Fprintln(stderr, "usage: ballast ctl weight POOL BACKEND N")
			return 2
		}
		n, convErr := strconv.Atoi(rest[2])
		if convErr != nil || n < 0 {
			fmt.Fprintf(stderr, "ballast ctl: weight must be a whole number ≥ 0, got %q\n", rest[2])
			return 2
		}
		msg, err = c.SetWeight(ctx, rest[0], rest[1], n)
	case "add":
		af := flag.NewFlagSet("ctl add", flag.ContinueOnError)
		af.SetOutput(stderr)
		w := af.Int("weight", 1, "weight of the new backend")
		name := af.String("name", "", "name (identity) of the new backend; default its address")
		// Flags may come after the positional arguments: ctl add POOL ADDRESS --weight 3.
		var pos []string
		for len(rest) > 0 {
			if err := af.Parse(rest); err != nil {
				return 2
			}
			if af.NArg() == 0 {
				break
			}
			pos = append(pos, af.Arg(0))
			rest = af.Args()[1:]
		}
		if len(pos) != 2 {
			fmt.Fprintln(stderr, "usage: ballast ctl add POOL ADDRESS [--weight N] [--name NAME]")
			return 2
		}
		msg, err = c.Add(ctx, pos[0], admin.AddRequest{Address: pos[1], Name: *name, Weight: w})
	default:
		fmt.Fprintf(stderr, "ballast ctl: unknown command %q\n\n", cmd)
		fs.Usage()
		return 2
	}
	if err != nil {
		return ctlFail(stderr, err)
	}
	fmt.Fprintln(stdout, "ok:", msg)
	return 0
}

func ctlFail(stderr io.Writer, err error) int {
	fmt.Fprintln(stderr, "ballast ctl:", err)
	var ae *admin.APIError
	if errors.As(err, &ae) && (ae.Status == 401 || ae.Status == 403) {
		fmt.Fprintln(stderr, "  (changes need --token or $BALLAST_TOKEN when the admin listener has a token)")
	}
	return 1
}
