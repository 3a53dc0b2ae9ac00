// Package director is Ballast's XDP director: an L4 load balancer for IPv4 TCP and UDP VIPs
// that runs as an XDP program (bpf/director.c, compiled by bpf2go) and is configured from Go.
//
// A Director loads the program, attaches it to one interface (generic XDP unless
// Options.Native) and balances each VIP's flows over its real servers in one of three modes:
// DR (rewrite the destination MAC), TUN (IPIP-encapsulate) or NAT (rewrite the destination,
// and the replies' source back to the VIP). New flows are placed by the VIP's Maglev table,
// built by balance.MaglevTable from the real servers' addresses and weights and indexed by
// balance.FlowHash (balance.SourceHash with VIP.SourceHash), exactly as the BPF program looks
// it up. Established flows stay on their real server through an LRU connection table, so adding,
// removing or draining (weight 0) a real server moves no existing connection.
//
// Real servers are known to the BPF maps by a stable ID assigned once per address: a change of
// VIP configuration, weight or health computes the new table and writes only the slots that
// differ. A real server that is down (Real.Down or failing health checks), has weight 0 or
// whose next-hop MAC cannot be resolved (DR, TUN) gets no new flows at once; its established
// flows stay with it unless Options.MoveDownFlows, which re-places them by the table.
//
// The "wlc" scheduler approximates LVS's weighted least-connection: every Options.Interval the
// director counts active flows per real server in its connection table and rebuilds the table
// with effective weights proportional to weight/(active+1).
//
// Flows are shared between directors (HA failover now, several active directors later) by
// three pieces that know nothing of VRRP: FlowEvents reports each flow the program places
// (through a BPF ring buffer, only while a reader is open), InstallFlows puts flows another
// director placed into the connection table (and, in NAT, the reply table) by real server
// address, and Sync carries them over UDP in batches with bounded queues, as LVS's sync daemon
// does, answering a starting peer's dump request with the table's active flows. A packet of an
// established flow the director does not know is placed by the table like a new flow, never
// dropped for being unknown.
//
// # Concurrency
//
// Every change of state (SetVIP, RemoveVIP, health verdicts, the periodic tick) runs on one
// goroutine owned by the Director, locked to the network namespace New was called in, so that
// netlink look-ups and health probes happen where the program is attached. The exported
// methods are safe for concurrent use; they hand their work to that goroutine and wait for it.
// Close detaches the program, stops every goroutine and frees the maps.
package director
