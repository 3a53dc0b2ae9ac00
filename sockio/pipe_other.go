//go:build !linux

package sockio

import (
	"net"
	"sync/atomic"
	"time"
)

// pipeTCP is copyBoth off Linux: no splice, no idle timeout.
func pipeTCP(a, b *net.TCPConn, _ time.Duration, ab, ba *atomic.Uint64) bool {
	copyBoth(a, b, ab, ba)
	return false
}
