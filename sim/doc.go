// Package sim is Ballast's discrete-event simulator: it runs the real pickers of package balance
// against modelled backends and an ab-like closed-loop client in virtual time, so that every
// lab scenario has a model prediction that does not depend on the machine it runs on.
//
// # Contract
//
// A Scenario is a plain Go value (backends, connection limit, client, hedging) that the lab
// reuses. Run(sc, algorithm) builds the algorithm with balance.New over the scenario's backends
// and an Options.Load fed by the model, drives sc.Requests requests through it with
// sc.Concurrency of them outstanding at a time, and returns the makespan, the throughput, the
// split of responses per backend and the latency percentiles.
//
// The model:
//   - a backend has Workers servers (0 = unlimited) and a FIFO queue in front of them, like
//     Apache's accept queue; its Service time is fixed, taken per request index from a list
//     (seed 001's ?wait=), exponential or log-normal;
//   - Ballast allows at most MaxConns requests in flight per backend (0 = no limit); a pick that
//     returns balance.ErrBusy waits in one central FIFO backlog and is picked again, in order,
//     whenever a slot frees; a pick that returns balance.ErrNoBackend fails the request at once;
//   - Load.InFlight counts requests dispatched to a backend and not finished (queued inside it or
//     in service), Load.Full compares it with MaxConns, Load.Latency is the backend's peak EWMA
//     (balance.PeakEWMA) of observed dispatch-to-response times in virtual time; pickers that
//     implement balance.Tracker get Update after every change of a count;
//   - the client sends its next request once every event of the current instant is handled, so
//     it sees every slot and worker freed at that instant;
//   - with Hedge.Delay set, a request still unanswered Delay after the client sent it gets one
//     more copy (up to Hedge.Max) on a backend it has not tried, if a pick succeeds at once; the
//     first response wins and every other copy is cancelled: removed from its backend's queue or
//     its worker freed, and its connection slot released;
//   - algorithms that need a hash key get one per request, derived from the request index.
//
// Every request gets exactly one response (possibly a failure); Run returns an error if the
// model ever loses or duplicates one. The same scenario, seed and algorithm always give the same
// Result.
//
// # Concurrency
//
// Run is single-threaded and uses no wall clock: time is an int64 count of virtual nanoseconds
// advanced by a heap of events ordered by (time, sequence). Separate Runs share nothing and may
// run in parallel. Scenario values are not modified by Run.
package sim
