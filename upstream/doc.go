// Package upstream owns backends, their live counters, the pool snapshot that the request path
// reads, and the backlog queue.
//
// A Pool publishes an immutable snapshot (backends eligible now + a balance.Picker built over
// them) through an atomic pointer; state changes (health, drain, weight, slow-start steps,
// runtime API) build a new snapshot off the request path and swap it in. Counters are atomics
// on the Backend, which keeps its identity across reloads. The snapshot implements balance.Load.
//
// Concurrency: every exported method is safe for concurrent use. Acquire/Release take no
// pool-wide lock unless a request has to wait in the backlog queue.
package upstream
