// Package backend is Ballast's emulated backend: an HTTP server that behaves like a pool of K
// workers with a FIFO in front, so that the lab can build backends of known capacity
// (K / service time) and check the balancers against a model.
//
// # Contract
//
// A backend serves at most Config.Workers requests at once; the others wait in strict arrival
// order. Each request's service time is fixed, drawn from a distribution whose mean is
// Config.Service, or taken from the request (?wait=SECONDS or ?ms=MILLISECONDS). Service is
// scheduled in virtual time: a request that finds a worker free starts on arrival; one that
// had to queue starts at the moment the earliest worker became free in virtual time (not
// before its arrival, at most 1 s in the past), whichever worker's timer fired first; either ends at that start plus its service time, an absolute deadline, and the
// response is written as soon as the real clock passes it. Timer overshoot (about 1 ms for
// Go's sleeps) and scheduling stalls therefore delay single responses but never accumulate:
// a saturated backend completes exactly K requests per service time.
//
// Every response carries the backend's name in X-Ballast-Backend and X-Backend-Name and a body
// of Config.Body bytes. With Config.ErrorRate a fraction of requests is answered with 500 after
// service: request n (in arrival order) fails when Fails(Seed, ErrorRate, n), a hash rather
// than a draw, so the failing requests are known in advance. With Config.ResetRate a fraction
// is answered by closing the connection (RST) without a response. Connections are kept alive.
//
// ListenPorts serves a range of ports from one process, one backend per port named NAME-PORT,
// for the many-backends scenario.
//
// # Concurrency
//
// A Server is safe for concurrent use; Stats may be called at any time. Each backend keeps its
// FIFO under its own mutex; the random source is shared by one backend's requests under a
// second mutex. Close stops accepting, wakes every request in service (they are answered at
// once) and closes the connections; it is idempotent.
package backend
