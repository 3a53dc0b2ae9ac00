// Package balancetest is the conformance suite that every algorithm registered in package
// balance must pass, and the fake Load that tests and benchmarks of load-aware pickers share.
//
// # Contract
//
// Run(t, a) checks the promises of package balance's contract for one algorithm: eligibility
// (never Down, Weight 0, tried or Full), the backup and ErrBusy rules, weight shares within a
// stated tolerance, key stability and minimal disruption for hash algorithms, and clean
// concurrent picks.
//
// # Concurrency
//
// Load is safe for concurrent use: its counters are atomics and the attached Tracker is
// published atomically. Run's own subtests run sequentially; the concurrency check starts its
// own goroutines and waits for them.
//
// # Use
//
// balancetest imports balance, so only external tests (package balance_test) can use it;
// a test file in package balance itself would make an import cycle.
package balancetest
