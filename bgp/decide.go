package bgp

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// VIP is one director listener as Decide sees it.
type VIP struct {
	Addr     netip.Addr
	Listener string
	Pool     string
	// Usable is how many of the VIP's real servers may take new flows on this director
	// (up, weight > 0, next hop resolved): the director's own table, not the pool's view.
	Usable int
	// Attached says the director serves the VIP (its program attached, the VIP in its maps).
	Attached bool
}

// Route is one prefix and whether it is announced, with the reason.
type Route struct {
	Prefix   netip.Prefix `json:"prefix"`
	Announce bool         `json:"announced"`
	Reason   string       `json:"reason"`
}

// Decide says, for each VIP address, whether to announce it: while the director is not
// draining and at least one listener at the address is attached with a usable real server
// (a router that sends a flow here must find a real server for it). A prefix whose listeners
// have none is withdrawn, so that the routers send its flows to the directors that have some.
// Routes come out sorted by prefix.
func Decide(vips []VIP, draining bool) []Route {
	byAddr := map[netip.Addr][]VIP{}
	for _, v := range vips {
		byAddr[v.Addr] = append(byAddr[v.Addr], v)
	}
	out := make([]Route, 0, len(byAddr))
	for a, vs := range byAddr {
		r := Route{Prefix: netip.PrefixFrom(a, a.BitLen())}
		var good, bad []string
		for _, v := range vs {
			switch {
			case !v.Attached:
				bad = append(bad, fmt.Sprintf("listener %s is not served by a director", v.Listener))
			case v.Usable == 0:
				bad = append(bad, fmt.Sprintf("listener %s: pool %s has no usable real server", v.Listener, v.Pool))
			default:
				good = append(good, fmt.Sprintf("listener %s: pool %s has %d usable real %s", v.Listener, v.Pool, v.Usable, plural(v.Usable, "server", "servers")))
			}
		}
		switch {
		case draining:
			r.Reason = "withdrawn: the director is stopping"
		case len(good) > 0:
			r.Announce = true
			r.Reason = strings.Join(good, "; ")
			if len(bad) > 0 {
				r.Reason += " (" + strings.Join(bad, "; ") + ")"
			}
		default:
			r.Reason = "withdrawn: " + strings.Join(bad, "; ")
		}
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b Route) int { return a.Prefix.Addr().Compare(b.Prefix.Addr()) })
	return out
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
