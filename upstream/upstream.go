package upstream

import (
	"errors"
	"time"

	"ballast/balance"
	"ballast/config"
)

// Errors Acquire returns; the proxy maps them to responses.
var (
	// ErrNoBackend: nothing in the pool is usable (all down, disabled, draining, ejected). → 503
	ErrNoBackend = balance.ErrNoBackend
	// ErrQueueFull: every usable backend is at max_conns and the backlog queue is full (or
	// max_queue is 0). → 503 with Retry-After
	ErrQueueFull = errors.New("backlog queue full")
	// ErrQueueTimeout: the request waited queue_timeout in the backlog without a free slot. → 503
	ErrQueueTimeout = errors.New("timed out in the backlog queue")
)

// Backend is one server of a pool with its live counters. A Backend keeps its identity (ID)
// across reloads and runtime changes, and with it its counters and its Transport.
type Backend struct {
	// ID is the stable identity: the configured name, or the address.
	ID string
	// Address is host:port.
	Address string
	// Transport is the proxy's per-backend client (e.g. a *fasthttp.HostClient). The proxy sets it
	// once, before the pool is published; it is read-only afterwards and survives reloads.
	Transport any

	// the rest (weights, states, atomics) is unexported; see backend.go
}

// Pool is a named set of backends balanced by one algorithm. The request path reads one
// immutable snapshot through an atomic pointer and never takes a pool-wide lock, except the
// queue's mutex when a request must wait.
type Pool struct {
	Name string
}

// NewPool builds a pool from its configuration. Backends of prev (may be nil) whose ID appears
// again are reused with their counters and Transport, so a reload keeps them.
func NewPool(cfg config.Pool, prev *Pool) (*Pool, error) {
	return nil, errors.New("upstream: not implemented yet")
}

// Acquire picks a backend for one request and counts it in flight. key is the hash key;
// tried lists backends this request already used. When every usable backend is at its limit it
// waits in the pool's FIFO backlog (bounded by max_queue and queue_timeout) and is dispatched the
// moment a slot frees, running the balancer again. The caller must call Release exactly once.
func (p *Pool) Acquire(key uint64, tried balance.Tried) (*Backend, error) {
	return nil, errors.New("upstream: not implemented yet")
}

// Release ends a request on b: it decrements in-flight, records the latency (feeding ewma) and
// the outcome (feeding outlier detection), and hands the freed slot to the head of the queue.
func (p *Pool) Release(b *Backend, latency time.Duration, failed bool) {}

// Backends returns the pool's backends (every state), in configuration order.
func (p *Pool) Backends() []*Backend { return nil }

// Close stops the pool's timers (slow-start ramps). In-flight requests are unaffected.
func (p *Pool) Close() {}
