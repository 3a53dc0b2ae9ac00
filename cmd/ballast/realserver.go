package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"ballast/realserver"
)

func init() {
	register(command{name: "realserver", summary: "prepare this host as a DR or TUN real server of the XDP director, until stopped", run: runRealserver})
}

func runRealserver(args []string, stdout, stderr io.Writer) int {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	stop := ctx.Done()
	return serveRealserver(args, stdout, stderr, stop)
}

// serveRealserver prepares the host, holds it prepared until stop is closed, then undoes it.
func serveRealserver(args []string, stdout, stderr io.Writer, stop <-chan struct{}) int {
	fs := flag.NewFlagSet("ballast realserver", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o realserver.Options
	fs.Func("vip", "a VIP `address` (IPv4) this host serves; repeat for more", func(s string) error {
		a, err := netip.ParseAddr(s)
		if err != nil || !a.Is4() {
			return fmt.Errorf("%q is not an IPv4 address", s)
		}
		o.VIPs = append(o.VIPs, a)
		return nil
	})
	fs.Func("second-chance", "dr: another real server's `address` a marked segment with no connection here may be passed to (GLB's second chance, bgp.second_chance); repeat for each", func(s string) error {
		a, err := netip.ParseAddr(s)
		if err != nil || !a.Is4() {
			return fmt.Errorf("%q is not an IPv4 address", s)
		}
		o.SecondChance = append(o.SecondChance, a)
		return nil
	})
	mode := fs.String("mode", "dr", "how the director reaches this host: `dr` or tun")
	fs.StringVar(&o.Iface, "iface", "", "`interface` the director's packets arrive on (required for tun)")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "ballast realserver: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	o.Mode = realserver.Mode(*mode)
	rs, err := realserver.Setup(o)
	if err != nil {
		fmt.Fprintf(stderr, "ballast realserver: %v\n", err)
		return 1
	}
	vips := make([]string, len(o.VIPs))
	for i, v := range o.VIPs {
		vips[i] = v.String()
	}
	what := "VIPs " + strings.Join(vips, ", ") + " on lo, arp_ignore=1, arp_announce=2"
	if o.Mode == realserver.TUN {
		what += ", IPIP decapsulation on " + o.Iface + " (tcx ingress)"
	}
	if len(o.SecondChance) > 0 {
		what += fmt.Sprintf(", second chance to %d other real servers on %s (tcx ingress)", len(o.SecondChance), o.Iface)
	}
	fmt.Fprintf(stdout, "ballast realserver: ready: %s; stop with SIGTERM or SIGINT to undo\n", what)
	<-stop
	if err := rs.Close(); err != nil {
		fmt.Fprintf(stderr, "ballast realserver: undoing: %v\n", err)
		return 1
	}
	fmt.Fprintln(stdout, "ballast realserver: undone")
	return 0
}
