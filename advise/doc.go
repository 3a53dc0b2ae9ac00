// Package advise is the simulator as an operator's tool: it takes what a running pool was
// seen to do (or a lab scenario), replays it through package sim for every balancer that fits
// the pool and a small grid of settings, and ranks the choices for an objective.
//
// # Contract
//
// An Observation is a pool's settings (balancer, hash key, max_conns, max_queue, hedging) and
// what was observed of it over a window: per backend its service-time distribution, the
// workers it serves at once (estimated), its error rate and counters; and the load (closed:
// clients that wait for their answers, or open: a rate and its burstiness). Observe fills one
// from Ballast's release records (admin's GET /api/pools/{pool}/observed serves the result;
// a JSON file of the same shape serves as well).
//
// Advise (an observation) and AdviseScenario (a sim catalogue scenario, whose Baseline is the
// current choice) replay every balancer that fits (the hash-based ones only when the pool
// hashes a key) with the current settings, then the three best and the current balancer over
// a grid: max_conns off, as set, and at the backends' workers (with a backlog); hedging off,
// as set, and at a delay worth trying. Each choice runs Options.Runs times with different
// seeds; every figure is the median of the runs with its [min, max]. The choices are ranked
// by fewer failed requests, then the objective's median, then fewer changes, then its worst
// run. The best is the top choice only if it beats the current one: better in the median by
// more than 1 %, and worse by more than that in at most one replay in twenty (replay k of
// every choice has the same seed and draws the same jitter, so they compare in pairs);
// otherwise the current choice is the best and comes first: advise recommends a change only
// when the model is sure of it.
//
// What is modelled and what is not is docs/advise.md's subject: in short, the backends as
// FIFO queues in front of their workers with the observed service times, Ballast's limits,
// backlog and hedging, and the load; not retries, outlier ejection, health checks, slow start
// or the proxy's own CPU.
//
// # Concurrency
//
// Advise and AdviseScenario run the replays on up to GOMAXPROCS goroutines (sim.RunRange) and
// stop between choices when the context ends. Separate calls share nothing.
package advise
