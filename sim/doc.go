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
//   - algorithms that need a hash key get one per request, derived from the request index;
//   - MaxQueue bounds the backlog and QueueTimeout fails a request that waited that long in it;
//     NoBacklog fails a request that finds every backend full at once (Ballast without
//     max_queue); a backend's ErrorRate makes that share of its responses errors;
//   - with Arrivals set the client is open: requests arrive at a rate, their gaps drawn from a
//     gamma distribution of the given coefficient of variation, whatever the responses do;
//   - with Jitter set, the real machine's delays are drawn for every request (jitter.go):
//     the client's send (one request at a time with OneSender), to the balancer's pick, to the
//     backend (plus a connect when the balancer has no idle connection to it), the backend's
//     timer overshoot, back to the balancer (which frees the slot then) and to the client;
//     a request the backlog hands a freed slot to leaves Handoff after the release (its
//     goroutine waking up in Ballast), before its forward; the first Concurrency requests draw start-up hops of their own; machine stalls at a rate
//     hold every event but a service's end until they are over, then let them out one after
//     another (Drain), and the hops that begin just after one draw slower delays of their own
//     (Recovery, RecoveryOvershoot, for RecoveryFor). Distributions are empirical
//     (Dist: quantiles, TailP's in the tail). The zero Jitter is the ideal machine and gives
//     exactly the figures without one.
//
// Every request gets exactly one response (possibly a failure); Run returns an error if the
// model ever loses or duplicates one. The same scenario, seed and algorithm always give the same
// Result.
//
// RunRange runs a scenario with n seeds (RunsFor chooses n by its size) and summarises each
// figure as min, median and max (a Range); RunRangeOf lets each run have its own jitter (the
// lab gives run k the delays of its k-th measured run). The profiles (profiles.go,
// profiles_data.go) are the jitter the lab measured on its machine, by the load's shape.
//
// # Concurrency
//
// Run is single-threaded and uses no wall clock: time is an int64 count of virtual nanoseconds
// advanced by a heap of events ordered by (time, sequence). Separate Runs share nothing and may
// run in parallel; RunRange runs its seeds on up to GOMAXPROCS goroutines. Scenario values
// (and the Jitter they point to) are not modified by Run.
package sim
