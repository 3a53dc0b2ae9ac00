// Package server runs a Ballast instance: it owns the pools, the health monitor, the admin
// plane, the listening sockets and a list of data planes, and moves them together through
// start, reload and shutdown.
//
// # Data planes
//
// A Plane serves some of the configured listeners with the pools the server owns: the HTTP
// plane the http listeners (plane.go: the HTTP core, package httpcore, under the event-loop
// engine, package h1, which serves HTTP/1.1 and HTTP/2 of plain, h2c and TLS listeners on its
// shards; off Linux the engine does not exist and a configuration with an http listener is
// refused at start and on reload, with the reason), the L4 plane (package l4: one TCP proxy
// per tcp listener, one UDP proxy per udp listener) the others. The server binds each
// listener's socket (a stream listener, or a *net.UDPConn for udp: Socket), gives each plane
// every configuration (Swap, first before any Serve, then on each reload) and each of its
// sockets by listener name (Serve); a plane never matches sockets to listeners by address.
// The PROXY header of accept_proxy listeners is read before a request, and before the
// handshake on a TLS one (by the engine on its shard), so the header's client is the peer
// address.
// Planes keep their per-backend state in their own upstream attachment slot and count what
// they count themselves (admin.Counters), so they never overwrite one another.
//
// The XDP director plane (xdpplane.go) serves the listeners with forwarding (config.Listener.
// IsDirector): it claims no socket, runs one director.Director per interface with one VIP per
// listener, and follows the pools' snapshots (upstream.Pool.Subscribe), so that health verdicts
// and runtime changes reach the kernel's table; the proxy planes never take those listeners.
// Shutdown detaches the directors.
//
// # Reload
//
// Reload is a transaction: load and validate the file; check that the admin plane accepts it
// (a listener other hosts can reach keeps its token); build new pools, passing the old ones so
// that backends keep their counters, connections and runtime overrides; bind new sockets;
// swap every plane. Any error undoes what was built and the old configuration keeps serving.
// Then the admin plane and the health monitor follow, the old pools close and removed
// listeners stop. A listener keeps its socket while its name and address stay the same.
//
// # Shutdown
//
// Shutdown stops accepting on every plane at once, waits for in-flight work (requests, open
// tcp connections; udp flows end at once) up to the context's deadline, then
// stops the admin listener and the health monitor (whose context the server owns) and closes
// the pools.
//
// # Concurrency
//
// Start, Reload and Shutdown are called from one goroutine (Run's signal loop); the serving
// goroutines report failures through a channel that Run watches. Addr, AdminAddr and Describe
// are safe at any time.
package server
