// Package realserver prepares a Linux host to be a real server of Ballast's XDP director in DR
// or TUN mode, and undoes it.
//
// Setup puts every VIP on lo (as a /32, so the host accepts packets to it), sets
// net.ipv4.conf.{all,IFACE}.arp_ignore=1 and arp_announce=2 (so the host neither answers ARP
// for the VIPs nor uses them as ARP source: only the director may own them on the wire), and in
// TUN mode attaches a tcx ingress program (bpf/decap.c) to the interface the tunnel arrives on
// that strips the outer IPv4 header of IPIP packets to one of the VIPs. The kernel needs no ipip
// module for this. Close restores every sysctl to its old value, removes the addresses it
// added and detaches the program.
//
// # Concurrency
//
// A RealServer is not safe for concurrent use. Setup works in the calling thread's network
// namespace; Close returns to that namespace to undo.
package realserver
