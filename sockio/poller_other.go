//go:build !linux

package sockio

import (
	"errors"
	"net"
	"syscall"
	"time"
)

// Poller is not available off Linux: NewPoller fails and callers keep a goroutine per
// connection.
type Poller struct{}

func NewPoller(func(net.Conn)) (*Poller, error) {
	return nil, errors.New("sockio: no poller on this system")
}

func (p *Poller) Park(net.Conn, syscall.RawConn, time.Time) bool { return false }
func (p *Poller) Len() int                                       { return 0 }
func (p *Poller) Close()                                         {}
