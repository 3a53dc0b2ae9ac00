//go:build !linux

package sockio

import (
	"errors"
	"net/netip"
	"os"
	"syscall"
	"time"
)

// Off Linux the L4 proxy's bare-descriptor sockets are not available: Accept and Dial fail.

type Acceptor struct{}

func NewAcceptor(ln syscall.Conn) (*Acceptor, error) { return nil, errors.ErrUnsupported }
func (a *Acceptor) Close() error                     { return nil }
func (a *Acceptor) Accept(max int, fn func(fd int, peer netip.AddrPort)) error {
	return errors.ErrUnsupported
}

func Dial(ap netip.AddrPort, timeout time.Duration) (int, error) { return -1, errors.ErrUnsupported }

// Connecting is a connect in progress (Linux only).
type Connecting struct{}

func DialStart(ap netip.AddrPort) (int, *Connecting, error)   { return -1, nil, errors.ErrUnsupported }
func (c *Connecting) Wait(timeout time.Duration) (int, error) { return -1, errors.ErrUnsupported }

func DialName(address string, timeout time.Duration) (int, error) {
	return -1, errors.ErrUnsupported
}

func Lend(fd int) (*os.File, error)       { return nil, errors.ErrUnsupported }
func Close(fd int)                        {}
func Shutdown(fd int)                     {}
func LocalAddr(fd int) netip.AddrPort     { return netip.AddrPort{} }
func Write(fd int, p []byte) (int, error) { return 0, errors.ErrUnsupported }
