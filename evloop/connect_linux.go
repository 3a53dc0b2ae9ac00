//go:build linux

package evloop

import (
	"net/netip"

	"ballast/sockio"
)

// Connect starts a non-blocking connect to ap and registers the new socket with the shard for
// h in f. done reports that it is established already; otherwise h hears Writable (or
// Hangup) when the handshake ends and reads the outcome with ConnectResult. Only raw system
// calls are made; nothing waits.
func (s *Shard) Connect(f *FD, ap netip.AddrPort, h Handler) (done bool, err error) {
	fd, done, err := sockio.ConnectStart(ap)
	if err != nil {
		return false, err
	}
	if err := s.Add(f, fd, h); err != nil {
		sockio.Close(fd)
		return false, err
	}
	return done, nil
}

// ConnectResult is the outcome of the connect Connect left in progress, once f is writable.
func (f *FD) ConnectResult() error { return sockio.ConnectResult(f.Fd) }
