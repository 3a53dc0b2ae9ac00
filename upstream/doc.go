// Package upstream owns backends, their live counters, the pool snapshot that the request path
// reads, and the backlog queue.
//
// # Snapshots
//
// A Pool publishes an immutable snapshot through an atomic pointer: every backend in
// configuration order (so an index names the same backend across state changes) and a
// balance.Picker built over them, in which disabled, draining, health-down, ejected and
// configured-down backends are marked Down. State changes (health, drain, weight, slow-start
// steps, ejection ends, runtime API) build a new snapshot off the request path and swap it in.
// The snapshot is the picker's balance.Load; pickers that keep a load index (balance.Tracker)
// hear every in-flight change, routed to the snapshot in force of the pool that owns the backend.
//
// # Request path
//
// Acquire picks, then reserves a slot with a CAS on the backend's in-flight counter so that
// max_conns is never exceeded; losing the last slot to a concurrent request means picking again
// (a bounded number of times). When every usable backend is full the request waits in the
// pool's FIFO backlog (lighttpd's backlog, HAProxy's maxqueue and timeout queue): at most
// max_queue requests (ErrQueueFull beyond, or at once when max_queue is 0) for at most
// queue_timeout (ErrQueueTimeout). While requests wait, newcomers queue behind them. Every
// Release, and every change that may add capacity, runs the balancer for the waiters in order
// under the queue's mutex and hands each the slot it reserved; a waiter whose timer fires as a
// slot is handed over keeps the slot. Release also feeds the latency peak-EWMA and the counters.
//
// AcquireBackend reserves a slot on one named backend if it can take the request now (sticky
// sessions, L4 persistence); it never queues, and on nil the caller balances as usual. A
// draining backend still takes these pinned requests (HAProxy's DRAIN) until its grace ends
// (DrainFor); a disabled one does not.
//
// # Identity and reloads
//
// A Backend keeps its identity (BackendSpec.ID) and with it its counters, its attachments
// and its runtime state (weight override, disabled, draining, health, ejection) across a reload:
// NewPool with the previous pool reuses the Backend objects whose ID and address persist, and
// a new pool with the previous one's name keeps its backlog counters (QueueStats).
// Runtime additions and removals are not carried over; the configuration decides membership.
// A pool that is built but never installed must be Closed, which hands reused backends back.
//
// # Specs, attachments and observers
//
// A pool is built from a Spec, upstream's own description (config.Pool.Spec makes one from a
// file); upstream knows no configuration format and nothing of HTTP. Data planes keep their
// per-backend state (a connection pool, status counters) in an attachment slot of their own
// (NewSlot, Pool.Attach, Backend.Attachment) and count what they count themselves. Spec.OnRelease
// hears every Release of that pool; Pool.Subscribe hears every new snapshot, for planes that
// mirror the backend set elsewhere (a kernel map). Backend.AddrPort is the address as an IP and
// port when it is an IP literal; host names stay strings, resolved by whoever dials.
//
// # Panic
//
// With outlier.panic_threshold_percent set, a pool whose health checks and ejections leave fewer
// than that share of its in-rotation primaries fit balances over all of them as if healthy
// (Envoy's panic threshold): the survivors alone would be overloaded. Disabled, draining and
// configured-down backends stay out.
//
// # Slow start
//
// With slow_start set, a backend that becomes usable (enabled, healthy again, added, back from
// an ejection, new in a reload) ramps from 10 % to its full weight (balance.SlowStartWeight);
// while anything ramps, all weights are scaled by 10 for resolution. One pool-owned timer
// rebuilds the snapshot in ten steps per window and at ejection ends, and is idle otherwise.
//
// # Concurrency
//
// Every exported method is safe for concurrent use. Acquire and Release take no pool-wide lock
// and allocate nothing unless a request has to wait in the backlog queue (or there are waiters
// to dispatch). Writers (runtime changes, timer steps, Close) serialise on a pool mutex that
// readers never take; lock order is writer mutex, then queue mutex, then the picker's own.
package upstream
