// Package bgp announces a director's VIPs to routers with BGP, so that several active
// directors share the VIPs' flows by ECMP (docs/scale-out.md). It embeds GoBGP
// (github.com/osrg/gobgp/v4): a Speaker peers with the configured routers (eBGP or iBGP, each
// optionally with BFD, GoBGP's own RFC 5880/5881 single-hop implementation) and originates the
// host routes it is given, with the configured communities and MED; the routers see this
// director's own address as their next hop.
//
// What to announce is decided apart from any I/O: Decide takes the state of each VIP (usable
// real servers, whether the director serves it) and whether the director is draining, and
// returns every prefix with the decision and its reason, so that the server, `ballast ctl bgp`
// and the tests read the same rule. A Speaker then makes the routes it originates follow that
// list (Set), adding and withdrawing only what changed.
//
// # Concurrency
//
// A Speaker's methods are safe for concurrent use; GoBGP runs its sessions on goroutines of
// its own, which Close stops (the routers see a BGP Cease and drop every route at once).
package bgp
