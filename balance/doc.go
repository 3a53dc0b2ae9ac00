// Package balance holds Ballast's balancing algorithms as pure code: no I/O, no clock, no
// goroutines. Everything else in Ballast that balances (the HTTP and L4 proxies through package
// upstream, and the simulator) calls the same pickers; the XDP director's kernel table is
// MaglevTable's, looked up with FlowHash, the same hash the L4 proxy picks with.
//
// # Contract
//
// A Picker is built by an Algorithm from an immutable list of backends ([]Backend) and Options.
// It is rebuilt only when membership, state or weights change, never per request. Pick maps a
// 64-bit request key (used only by hash algorithms) to the index of a backend in that list.
// Backends that are Down or have Weight 0 are never returned. Backends marked Backup are returned
// only when no primary is usable (down, weight 0, or already tried by this request); when every
// usable backend is merely at its connection limit (Load.Full), Pick returns ErrBusy so that the
// caller can queue the request instead of spilling it onto backups. When nothing at all is usable
// Pick returns ErrNoBackend.
//
// Live load reaches a picker through the Load interface, a read-only view of counters that
// another package (upstream) owns. Pickers that keep their own index by load (sqf, leastconn)
// also implement Tracker and must be told each time a backend's in-flight count changes.
//
// # Concurrency
//
// Pick and Update are safe for concurrent use. Pickers with an O(1) method never lock; pickers
// that keep an ordered index by load (sqf, leastconn) and the stateful O(n) references (swrr,
// bybusyness) hold a per-picker mutex, never a global one. Pick allocates nothing.
//
// # Adding an algorithm
//
// Write <name>.go with a builder of type BuildFunc, its test, and one line in registry.go.
// The conformance suite in package balancetest runs against every registered algorithm.
package balance
