//go:build linux

package sockio

import (
	"net/netip"
	"os"
	"syscall"
	"unsafe"
)

// The helpers below lend the bare-descriptor code of this file's package to event loops
// (package evloop), which accept and connect on their own goroutines and must never wait.

// PeerAddrPort converts a socket address filled by accept4(2) as the net package would (an
// IPv4 peer of an IPv6 socket stays IPv4-mapped).
func PeerAddrPort(sa *syscall.RawSockaddrAny) netip.AddrPort { return sockaddrAddrPort(sa) }

// SetNoDelay sets TCP_NODELAY on fd (raw setsockopt).
func SetNoDelay(fd int) { setNoDelay(fd) }

// ConnectStart opens a non-blocking TCP socket (TCP_NODELAY, close-on-exec) and starts a
// connect to ap without waiting: done reports that the handshake already completed (loopback
// often does); otherwise the caller waits until fd is writable and reads the outcome with
// ConnectResult. Only raw system calls are made. An address with a zone is refused
// (syscall.EINVAL): DialName handles those, off the caller's loop.
func ConnectStart(ap netip.AddrPort) (fd int, done bool, err error) {
	if ap.Addr().Zone() != "" {
		return -1, false, syscall.EINVAL
	}
	a := ap.Addr().Unmap()
	family := syscall.AF_INET
	if !a.Is4() {
		family = syscall.AF_INET6
	}
	r, _, e := syscall.RawSyscall(syscall.SYS_SOCKET, uintptr(family), syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
	if e != 0 {
		return -1, false, os.NewSyscallError("socket", e)
	}
	fd = int(r)
	setNoDelay(fd)
	var sa sockaddr // on the stack, as DialStart's
	sa.set(netip.AddrPortFrom(a, ap.Port()))
	switch e = sa.connect(fd); e {
	case 0:
		return fd, true, nil
	case syscall.EINPROGRESS, syscall.EALREADY:
		return fd, false, nil
	}
	Close(fd)
	return -1, false, os.NewSyscallError("connect", e)
}

// ConnectResult reads the outcome of a connect ConnectStart left in progress, once fd is
// writable (getsockopt SO_ERROR): nil when established.
func ConnectResult(fd int) error {
	var v int32
	l := uint32(4)
	_, _, e := syscall.RawSyscall6(syscall.SYS_GETSOCKOPT, uintptr(fd), syscall.SOL_SOCKET, syscall.SO_ERROR,
		uintptr(unsafe.Pointer(&v)), uintptr(unsafe.Pointer(&l)), 0)
	if e != 0 {
		return os.NewSyscallError("getsockopt", e)
	}
	if v != 0 {
		return os.NewSyscallError("connect", syscall.Errno(v))
	}
	return nil
}
