// Package l4 is Ballast's layer-4 data plane: a TCP proxy (optionally routing TLS passthrough by
// the ClientHello's SNI) and a UDP proxy, both balancing over the same upstream.Pool as the L7
// proxy, so max_conns, the backlog queue, health checks, outlier ejection, slow start, the
// runtime API and the metrics apply unchanged. In flight means open connections (TCP) or live
// flows (UDP).
//
// # TCP
//
// TCP.Serve accepts connections on a listener that lends its descriptor. Sockets are bare
// descriptors from accept to close (sockio.Relay.Listen, or sockio.Acceptor without relay
// shards; sockio.Dial; the relay), made with raw system calls that never wake the runtime's
// monitor thread (see sockio). A connection that needs no handshake, no queue and no wait for
// its connect goes from accept to the relay inside the relay shard that accepted it, and stays
// there (TCP.inline); any other gets a goroutine for what may wait. Per connection: the PROXY protocol header when
// TCPOptions.AcceptProxy is set (package proxyproto; missing or malformed → closed and
// counted), the TLS ClientHello's server name when some route matches on SNI (read into a
// bounded buffer and forwarded unchanged), the route, the pick (Pool.Acquire with the flow
// hash as key, which may wait in the backlog), the connect within ConnectTimeout, and on a
// failed connect a Release as failure and another pick that excludes the backends tried (safe:
// nothing has reached a backend yet). Then the optional PROXY header to the backend, the bytes already read
// from the client, and the process's sockio.Relay forwards both ways: the two sockets wait in
// one of its epoll sets (one goroutine per P for all listeners) holding no goroutine, buffer or
// pipe, short bursts move with raw non-blocking reads and writes, and a bulk transfer or a
// blocked write hands the connection to sockio.Pipe's two goroutines (splice(2) of exactly the
// queued bytes). A FIN in one direction is passed on with a half-close and the other direction
// keeps flowing; the connection ends when
// both directions have ended, on an error in either, or after IdleTimeout without a byte either
// way. The backend's slot is released when the connection ends, with the connect time as the
// latency. Source-IP persistence (Route.Persistence, LVS -p) remembers the backend a client
// address last used and prefers it while it is usable, or while it drains (its grace).
//
// The route table is an immutable Table behind an atomic pointer; Swap installs a new one and
// established connections finish on the pool they started with. Shutdown stops accepting and
// waits for established connections until its context ends, then shuts their sockets down.
//
// # UDP
//
// UDP.Serve reads datagrams from a *net.UDPConn into one buffer. Each client address and port
// is a flow with its own connected backend socket (a bare descriptor), which waits in the
// process's sockio.PacketPoller: a flow costs its socket, a struct and map entries, no
// goroutine and no buffer. The poller's goroutines relay replies with a raw sendto on a
// duplicate of the listener's descriptor, so they return to the right client. A flow holds one
// in-flight slot from its first datagram (TryAcquire: the read loop never waits; a full pool
// drops the datagram and counts it) until it has been idle for UDPOptions.IdleTimeout, which a
// periodic sweep detects from per-flow last-activity atomics. A new flow must pass, cheapest
// first, MaxFlows, the listener's new-flow token bucket (NewFlowRate, NewFlowBurst) and the
// process-wide descriptor budget (RLIMIT_NOFILE less a reserve, udplimits.go); every drop is
// counted by reason, and the kernel's drops at the listener socket come from SO_RXQ_OVFL.
// Descriptors are reference-counted, so one is closed only when no goroutine uses it.
//
// # Terminations
//
// A TCP connection ends with a termination state, as HAProxy's (term.go), counted in
// Stats.Terminations and written, when the access log is on (SetAccessLog), as one line per
// connection. A reset of either side reaches the other as a reset (sockio.RelayFlow.Resets).
//
// # Concurrency
//
// All exported methods are safe for concurrent use. The per-connection and per-datagram paths
// take no global lock: the route table and the pool are read through atomic pointers, counters
// are atomics, the persistence and flow tables are sharded with a mutex per shard. The
// per-datagram path of an existing flow allocates nothing.
package l4
