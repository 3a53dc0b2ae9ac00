package sockio

import (
	"sync/atomic"
	"syscall"
	"time"
)

// RelayFlow is one pair of connected TCP sockets for a Relay, as bare non-blocking descriptors
// (see Accept and Dial).
type RelayFlow struct {
	A, B int
	// Prefix is written to B before anything else (bytes read from A while routing, a PROXY
	// header); the relay copies it.
	Prefix []byte
	// Idle closes the pair after this long without a byte either way; 0 = never.
	Idle time.Duration
	// AB and BA count the bytes moved from A to B and from B to A (either may be nil); Prefix
	// is not counted.
	AB, BA *atomic.Uint64
	// Done runs once, after the pair ended and just before the relay closes A and B; idled says
	// the idle timeout ended it. Until Done returns, A and B are open, so an owner may shut them
	// down (Shutdown) without racing a reuse of the descriptor numbers. It runs in a goroutine of
	// the Relay's and must not block for long.
	Done func(idled bool)
	// Resets passes a failure on: when one side fails (its peer reset it, or a read or write
	// on it failed), the other side is closed with SO_LINGER 0, so that its peer sees a reset
	// (RST) rather than an orderly end it would take for a complete stream.
	Resets bool
	// Result, when set, is filled in before Done runs: how the pair ended and what it moved.
	Result *RelayResult
	// Shard, when set (a RelayListener's accept gives it), is where the pair waits: the shard
	// that accepted the client, so that one goroutine serves the connection from accept to
	// close. The zero Shard spreads pairs round robin.
	Shard RelayShard
}

// RelayShard names one of a Relay's shards (see RelayFlow.Shard); the zero value names none.
type RelayShard struct{ i int }

// RelayResult is how a pair ended.
type RelayResult struct {
	// Failed is the side (0 = A, 1 = B) whose read or write failed first, -1 for none; Errno
	// is that failure (ECONNRESET for a reset, EPIPE, ETIMEDOUT...), when known.
	Failed int
	Errno  syscall.Errno
	// FirstFIN is the side whose end of stream came first, -1 for none.
	FirstFIN int
	// Moved counts the bytes moved from A to B and from B to A (Prefix excluded).
	Moved [2]uint64
	// Idled: the idle timeout ended the pair.
	Idled bool
}
