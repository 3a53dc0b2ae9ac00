// Package vrrp is Ballast's VRRPv3 speaker (RFC 9568, which obsoletes RFC 5798) for IPv4: the
// election of one master among the directors of a virtual router, and the addresses that move
// with mastership.
//
// Machine is the protocol's state machine with no I/O and no clock of its own: fed events
// (an advert received, a timer due, a priority change, a fault, shutdown) with the time they
// happened, it returns actions (send an advert, claim or release the addresses, announce them
// with gratuitous ARPs) for the caller to carry out. Packet, Marshal and Parse are the wire
// format, with both IPv4 checksum forms in use (Checksum). Speaker is the I/O side on Linux:
// adverts over raw IP protocol 112 (multicast 224.0.0.18 or unicast peers) with
// golang.org/x/net/ipv4, timers, and an Owner that claims the addresses (Addresses: netlink,
// an ARP responder in a tc program whose link dies with the process, and gratuitous ARPs with
// github.com/mdlayher/arp).
//
// VRRPv3 has no authentication: anything on the segment can send adverts. Run it only on a
// segment that only trusted hosts reach.
//
// # Concurrency
//
// A Machine is not safe for concurrent use. A Speaker runs the machine on one goroutine of its
// own; its exported methods are safe for concurrent use.
package vrrp
