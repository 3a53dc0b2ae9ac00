package sockio

import (
	"sync/atomic"
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
}
