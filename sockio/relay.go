package sockio

import (
	"net"
	"sync/atomic"
	"time"
)

// RelayFlow is one pair of connections for a Relay.
type RelayFlow struct {
	A, B *net.TCPConn
	// Idle closes the pair after this long without a byte either way; 0 = never.
	Idle time.Duration
	// AB and BA count the bytes moved from A to B and from B to A (either may be nil).
	AB, BA *atomic.Uint64
	// Done runs once, after the pair ended and A and B were closed; idled says the idle
	// timeout ended it. It runs in a goroutine of the Relay's and must not block for long.
	Done func(idled bool)
}

// pipe runs the whole pair through Pipe and ends it.
func (f *RelayFlow) pipe() {
	idled := pipeTCP(f.A, f.B, f.Idle, f.AB, f.BA)
	_ = f.A.Close()
	_ = f.B.Close()
	f.Done(idled)
}
