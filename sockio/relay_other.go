//go:build !linux

package sockio

import (
	"errors"
	"net/netip"
	"syscall"
)

// Relay is Linux-only: off Linux there are no bare descriptors to relay (see Accept).
type Relay struct{}

func NewRelay() *Relay { return &Relay{} }

// Forward ends the pair at once off Linux.
func (r *Relay) Forward(f RelayFlow) { go f.Done(false) }

// RelayListener is Linux-only (see Relay).
type RelayListener struct{}

// Listen is unsupported off Linux: the caller accepts with an Acceptor.
func (r *Relay) Listen(ln syscall.Conn, fn func(fd int, peer netip.AddrPort, shard RelayShard)) (*RelayListener, error) {
	return nil, errors.ErrUnsupported
}

func (l *RelayListener) Done() <-chan struct{} { return nil }
func (l *RelayListener) Close()                {}
