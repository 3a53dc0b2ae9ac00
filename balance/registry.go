package balance

import (
	"fmt"
	"sort"
	"strings"
)

// registry lists every algorithm by the name the configuration uses. One line per algorithm.
var registry = map[string]Algorithm{
	"random":     {Name: "random", Build: buildRandom, Caps: Caps{Proportional: true}, Summary: "lighttpd's \"round-robin\": uniform (or weighted) random among usable backends, O(1)"},
	"roundrobin": {Name: "roundrobin", Build: buildRoundRobin, Caps: Caps{Proportional: true}, Summary: "smooth weighted round robin from a precomputed schedule with a fixed start, O(1)"},
	"swrr":       {Name: "swrr", Build: buildSWRR, Caps: Caps{Proportional: true}, Summary: "nginx smooth WRR = Apache byrequests, the O(n) reference scan"},
	"vnswrr":     {Name: "vnswrr", Build: buildVNSWRR, Caps: Caps{Proportional: true}, Summary: "Tengine virtual-node smooth WRR: SWRR order, random start, O(1)"},
	"sqf":        {Name: "sqf", Build: buildSQF, Caps: Caps{NeedsLoad: true, Proportional: true}, Summary: "shortest queue first: fewest requests in flight per weight, O(log n)"},
	"bybusyness": {Name: "bybusyness", Build: buildByBusyness, Caps: Caps{NeedsLoad: true}, Summary: "Apache bybusyness: lowest busy, ties to the highest lbstatus, O(n)"},
	"leastconn":  {Name: "leastconn", Build: buildLeastConn, Caps: Caps{NeedsLoad: true, Proportional: true}, Summary: "HAProxy leastconn: lowest (in-flight+1)/weight, O(log n)"},
	"wlc":        {Name: "wlc", Build: buildWLC, Caps: Caps{NeedsLoad: true, Proportional: true}, Summary: "LVS weighted least-connection: lowest (active*256+inactive)/weight, O(n)"},
	"p2c":        {Name: "p2c", Build: buildP2C, Caps: Caps{NeedsLoad: true, Proportional: true}, Summary: "power of two choices on in-flight/weight, O(1)"},
	"ewma":       {Name: "ewma", Build: buildEWMA, Caps: Caps{NeedsLoad: true, Proportional: true}, Summary: "peak-EWMA latency x (in-flight+1), chosen by two random choices, O(1)"},
	"carp":       {Name: "carp", Build: buildCARP, Caps: Caps{NeedsKey: true, Proportional: true}, Summary: "CARP (draft-vinod-carp-v1-03): highest combined hash x load-factor multiplier, O(n)"},
	"maglev":     {Name: "maglev", Build: buildMaglev, Caps: Caps{NeedsKey: true, Proportional: true}, Summary: "Maglev consistent hashing: prime lookup table, O(1)"},
	"ringhash":   {Name: "ringhash", Build: buildRingHash, Caps: Caps{NeedsKey: true, Proportional: true}, Summary: "consistent hashing ring with bounded loads (hash_balance_factor), O(log R) plus a short walk"},
}

// aliases are other names the configuration accepts.
var aliases = map[string]string{
	"byrequests": "swrr",
}

// Lookup returns the algorithm registered under name or an alias.
func Lookup(name string) (Algorithm, error) {
	if canonical, ok := aliases[name]; ok {
		name = canonical
	}
	a, ok := registry[name]
	if !ok {
		return Algorithm{}, fmt.Errorf("unknown balancer %q (valid: %s)", name, strings.Join(Names(), ", "))
	}
	return a, nil
}

// Names lists the registered algorithms and aliases in order.
func Names() []string {
	names := make([]string, 0, len(registry)+len(aliases))
	for n := range registry {
		names = append(names, n)
	}
	for n := range aliases {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Algorithms returns every registered algorithm (no aliases), sorted by name.
func Algorithms() []Algorithm {
	out := make([]Algorithm, 0, len(registry))
	for _, a := range registry {
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// New builds a picker for the named algorithm.
func New(name string, bs []Backend, o Options) (Picker, error) {
	a, err := Lookup(name)
	if err != nil {
		return nil, err
	}
	return a.New(bs, o)
}
