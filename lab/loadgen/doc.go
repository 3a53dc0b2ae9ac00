// Package loadgen is Ballast's load generator, an ab-like closed-loop HTTP/1.1 client: C
// workers, each with its own connection, send N requests (or run for a Duration) as fast as
// the server answers, and report counts, throughput, latency and time-to-first-byte quantiles
// and the split per backend (from the X-Ballast-Backend response header).
//
// # Contract
//
// Request i (counted from 0 across all workers) carries URLSuffixes[i mod len] appended to the
// URL (JoinSuffix explains how), so with C = 1 the suffixes reach the server in file order.
// Requests are serialised once before the run; the loop itself allocates nothing, so that the
// generator is never the bottleneck. With KeepAlive each worker reuses its connection until the
// server closes it; without, it dials a new connection per request and asks the server to close
// it. With KeepAlive the workers connect before the clock starts (as wrk does); without, each
// request's connection time is part of its latency (as with ab). A request that gets no complete response (refused, reset, closed early, malformed) counts
// as failed and its worker dials again; a response with a status outside 2xx counts as
// non-2xx. Requests counts every finished attempt, failed ones included, as ab's "Complete
// requests" does. Requests cut off by the end of a Duration or by cancellation are not counted.
// Latency runs from the first byte written to the last byte read; TTFB to the first byte read.
//
// # Concurrency
//
// Run is safe to call concurrently; each run owns its workers. Workers share only the next
// request index and a stop flag, both atomic; each keeps its own progress count, histograms
// and split, merged into the Result after the run.
package loadgen
