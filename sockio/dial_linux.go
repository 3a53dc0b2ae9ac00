//go:build linux

package sockio

import (
	"net/netip"
	"syscall"
	"unsafe"
)

// ConnectFirst is a net.Dialer Control function: it starts the TCP connect to address itself,
// with a raw non-blocking connect(2), before the dialer's own.
//
// Why: on loopback and other local paths, connect(2) runs the whole handshake inside the call
// (the SYN, the SYN-ACK and the ACK are processed before it returns), which makes it the
// longest system call of a short proxied connection. The dialer's connect is an ordinary
// system call, so the runtime's monitor hands the P to another thread while it runs and stays
// awake to do so again (see IO). Made raw, the call keeps its P. The dialer's own connect
// that follows then finds the connection established (it returns at once, and the dialer
// skips its wait for writability), still in progress (EALREADY: it waits as usual) or failed
// (it reports the socket's error); a connect this one could not start (an unusual address, an
// immediate error) is left entirely to the dialer.
func ConnectFirst(network, address string, c syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil || ap.Addr().Zone() != "" {
		return nil
	}
	// The dialer made an AF_INET socket for an IPv4 address and AF_INET6 otherwise; a
	// mismatch fails at once and leaves the connect to the dialer.
	var sa4 syscall.RawSockaddrInet4
	var sa6 syscall.RawSockaddrInet6
	var sa unsafe.Pointer
	var size uintptr
	if a := ap.Addr(); a.Is4() {
		sa4 = syscall.RawSockaddrInet4{Family: syscall.AF_INET, Addr: a.As4()}
		putPort(&sa4.Port, ap.Port())
		sa, size = unsafe.Pointer(&sa4), unsafe.Sizeof(sa4)
	} else {
		sa6 = syscall.RawSockaddrInet6{Family: syscall.AF_INET6, Addr: a.As16()}
		putPort(&sa6.Port, ap.Port())
		sa, size = unsafe.Pointer(&sa6), unsafe.Sizeof(sa6)
	}
	return c.Control(func(fd uintptr) {
		_, _, _ = syscall.RawSyscall(syscall.SYS_CONNECT, fd, uintptr(sa), size)
	})
}

// putPort stores p in network byte order, as a sockaddr holds it.
func putPort(dst *uint16, p uint16) {
	b := (*[2]byte)(unsafe.Pointer(dst))
	b[0], b[1] = byte(p>>8), byte(p)
}
