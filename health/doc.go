// Package health decides which backends are fit to take traffic, actively and passively.
//
// Active checks probe every backend of a pool that has health_check.interval set: an HTTP
// request (method, path, Host, expected status ranges, optional body substring), a TCP
// connect, or a gRPC call to grpc.health.v1.Health/Check for health_check.service over the
// pool's protocol (h2 with the pool's tls, or h2c) that must answer SERVING (grpc.go), each
// on a fresh connection and bounded by health_check.timeout. A backend goes down after fall consecutive
// failures and comes back after rise consecutive successes (HAProxy's rise/fall), and is
// probed every interval while up and every down_interval while down. The first probe of each
// backend is at a random point of its first interval, so that many Ballasts (or many pools)
// do not probe in lockstep. Verdicts reach the pool through upstream.Pool.SetHealthy.
//
// Passive checks (outlier ejection, Envoy's outlier detection) watch each backend's request
// outcomes: outlier.consecutive_failures failed requests with no success between them, or, with
// outlier.failure_percentage, a share of failed requests of at least threshold percent over an
// outlier.interval with at least request_volume requests (when minimum_hosts backends had that
// many), eject the backend for base_ejection × the number of times it was ejected (at most 10×;
// the count decays by one for every base_ejection it stays in). What counts as failed is
// decided by the proxy when it releases the request (connect errors, resets, timeouts, and 5xx
// with include_5xx). Ejections are refused when they would put more than max_ejection_percent of the
// pool out at once (at least one backend may always be ejected while the percentage is above
// 0), or when they would leave fewer than panic_threshold_percent of the pool usable: below that
// share the pool panics and balances over every backend anyway (upstream.Pool.Panicking), so
// such an ejection would change nothing but the status page.
//
// Consecutive failures are counted per response on the request path, with atomics in the
// upstream.Backend (FailureStreak; a success resets it): every Options.OutlierTick (100 ms by
// default) the checker takes the longest streak since its previous look
// (TakeFailureStreakPeak), so a streak is never lost to the success that ended it, and an
// ejection resets the streak. failure_percentage compares the backend's failed and finished
// counters at the start and end of each interval.
//
// Every transition is logged with slog and passed to Options.OnEvent (the metrics count
// them); the last probe result of every backend is kept for the status page.
//
// # Concurrency
//
// A Monitor runs one scheduler goroutine per pool for active checks (each probe in a short
// goroutine of its own, at most one per backend at a time) and one ticker goroutine per pool for
// outlier ejection. All of them stop when the context given to New is cancelled or Close is
// called; Close waits for them. Update, Kick, Last and Ejections are safe for concurrent use.
// Backends added or removed at run time are picked up at the next scheduler wake-up (Kick
// wakes the schedulers at once).
package health
