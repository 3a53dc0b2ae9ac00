// Package discovery keeps a pool's discovered backends current: a source (DNS, a watched file,
// or the fleet's etcd prefix through package fleet) gives sets of backends, and a Syncer
// applies each new set to the pool in force through upstream's runtime changes, so that the
// data planes, which follow the pools' snapshots, need no change.
//
// # Rules
//
// A backend that appears is added (Pool.Add: it ramps with slow_start). One that leaves is
// drained (Pool.Drain: no new requests, in-flight ones finish) and removed once it has nothing
// in flight and has drained for at least MinDrain. One that comes back while it drains is
// enabled again. A changed weight is a weight override (Pool.SetWeight); a changed backup flag,
// connection limit or address replaces the backend. Backends the configuration lists, or that
// the runtime API added, are never touched. A failed or empty answer keeps the last good set:
// the Syncer's Status says it is stale and since when.
//
// Every set is bounded (max_backends): a DNS answer is cut (counted as truncated), a file or
// fleet set with more is refused (counted). A DNS source reads at most one message per query
// (64 KiB), queries at most max_backends SRV targets, and a file source reads at most
// MaxFileBytes.
//
// # Reloads
//
// A reload builds new pools, which keep only the backends their spec lists: the server passes
// each pool's spec through Syncer.Extend, which appends the discovered and draining backends,
// so that they keep their Backend objects (counters, connections, drain state), then gives the
// Syncer the new pool (SetPool).
//
// # Concurrency
//
// A Syncer's methods are safe for concurrent use; one mutex serialises them, and it is taken
// before the pool's writer mutex, never under it. Sources run on their own goroutine (Poll) and
// never on a request path.
package discovery
