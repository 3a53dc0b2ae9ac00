//go:build linux

package sockio

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"strconv"
	"syscall"
	"time"
	"unsafe"
)

// The L4 proxy's sockets are bare descriptors: accepted, connected, shut down and closed with
// raw system calls, and never registered with the runtime's network poller (the Relay waits on
// them in its own epoll sets).
//
// Why: each ordinary system call (syscall.Syscall, which every call of the net package is)
// marks the P as in a system call, and when every P was idle that wakes the runtime's monitor
// thread, which then polls every 20 µs for a millisecond or more. A short proxied connection
// made about ten of them (accept4, getsockname, setsockopt, socket, connect, getpeername and
// close, twice where there are two sockets), and between a test's connections the proxy is idle
// often: the monitor alone used about 40 µs of CPU per connection. Raw calls keep the P and
// the monitor asleep; none of these calls blocks (the sockets are non-blocking, and close
// without SO_LINGER returns at once). Registering with the runtime's poller also cost two
// epoll_ctl calls per socket that nothing used once the Relay had it.

// Acceptor accepts connections from a TCP listener with raw accept4(2) calls, as bare
// descriptors. It waits for the listener in an epoll set of its own (level-triggered), because
// the net package lends a listener's descriptor only for Control, not for waits; the accepts
// run inside Control, so a listener closed meanwhile is never accepted from under its number.
type Acceptor struct {
	ln     syscall.RawConn
	epfd   int
	ep     *os.File
	erc    syscall.RawConn
	events [1]syscall.EpollEvent
	wait   func(fd uintptr) bool // erc.Read's callback: a non-blocking epoll_pwait
}

// acceptorRecheck bounds how long Accept waits before it checks that the listener is still
// open: a closed listener leaves the epoll set without an event.
const acceptorRecheck = time.Second

// NewAcceptor prepares raw accepts from ln (a *net.TCPListener or anything that lends one
// through SyscallConn). Close it when done; it does not close ln.
func NewAcceptor(ln syscall.Conn) (*Acceptor, error) {
	rc, err := ln.SyscallConn()
	if err != nil {
		return nil, err
	}
	a := &Acceptor{ln: rc}
	if a.epfd, a.ep, a.erc, err = openEpoll("accept-epoll"); err != nil {
		return nil, err
	}
	a.wait = func(fd uintptr) bool {
		r, _, e := syscall.RawSyscall6(syscall.SYS_EPOLL_PWAIT, fd, uintptr(unsafe.Pointer(&a.events[0])), 1, 0, 0, 0)
		return (e == 0 && r > 0) || (e != 0 && e != syscall.EINTR && e != syscall.EAGAIN)
	}
	var e syscall.Errno
	err = rc.Control(func(fd uintptr) {
		// Accepted sockets inherit TCP_NODELAY from the listener: one setsockopt here instead
		// of one per connection.
		setNoDelay(int(fd))
		ev := syscall.EpollEvent{Events: syscall.EPOLLIN}
		_, _, e = syscall.RawSyscall6(syscall.SYS_EPOLL_CTL, uintptr(a.epfd), syscall.EPOLL_CTL_ADD, fd, uintptr(unsafe.Pointer(&ev)), 0, 0)
	})
	if err == nil && e != 0 {
		err = os.NewSyscallError("epoll_ctl", e)
	}
	if err != nil {
		_ = a.ep.Close()
		return nil, err
	}
	return a, nil
}

// Close releases the acceptor's epoll set; an Accept waiting in it returns.
func (a *Acceptor) Close() error { return a.ep.Close() }

// Accept waits until the listener has connections, then accepts up to max of them and hands
// each to fn as a non-blocking, close-on-exec descriptor with TCP_NODELAY set, with the peer's
// address. It returns nil after a batch; the listener's or the acceptor's error once either
// is closed; or the errno of a failed accept (EMFILE and the like: the caller should wait
// before the next call).
func (a *Acceptor) Accept(max int, fn func(fd int, peer netip.AddrPort)) error {
	for {
		n, aerr := 0, error(nil)
		err := a.ln.Control(func(lfd uintptr) {
			for n < max {
				var sa syscall.RawSockaddrAny
				l := uint32(unsafe.Sizeof(sa))
				r, _, e := syscall.RawSyscall6(syscall.SYS_ACCEPT4, lfd, uintptr(unsafe.Pointer(&sa)),
					uintptr(unsafe.Pointer(&l)), syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0, 0)
				switch e {
				case 0:
				case syscall.EINTR, syscall.ECONNABORTED:
					continue
				case syscall.EAGAIN:
					return
				default:
					aerr = e
					return
				}
				fd := int(r) // TCP_NODELAY inherited from the listener (NewAcceptor)
				n++
				fn(fd, sockaddrAddrPort(&sa))
			}
		})
		switch {
		case err != nil:
			return err
		case n > 0:
			return nil
		case aerr != nil:
			return aerr
		}
		_ = a.ep.SetReadDeadline(time.Now().Add(acceptorRecheck))
		if err := a.erc.Read(a.wait); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			return err
		}
	}
}

// Dial connects a new non-blocking TCP socket to ap within timeout (0: the kernel's own limit)
// and returns its descriptor, with TCP_NODELAY set. On loopback and other local paths the
// handshake completes inside the first connect(2) and Dial makes only raw system calls; a
// connect still in progress waits for the socket in the runtime's poller through a duplicate
// descriptor. An address with a zone is dialled through the net package (see DialName).
func Dial(ap netip.AddrPort, timeout time.Duration) (int, error) {
	if ap.Addr().Zone() != "" {
		return DialName(ap.String(), timeout)
	}
	fd, c, err := DialStart(ap)
	if c != nil {
		return c.Wait(timeout)
	}
	return fd, err
}

// Connecting is a connect in progress that DialStart could not finish without waiting.
type Connecting struct {
	fd int
	ap netip.AddrPort
	sa sockaddr
}

// DialStart is Dial without the wait: it returns the connected descriptor, or a Connecting
// to finish with Wait when the handshake has not completed inside the connect calls (a
// remote backend), or an error. It never blocks. An address with a zone is refused
// (errors.ErrUnsupported: use Dial).
func DialStart(ap netip.AddrPort) (int, *Connecting, error) {
	if ap.Addr().Zone() != "" {
		return -1, nil, errors.ErrUnsupported
	}
	a := ap.Addr().Unmap()
	family := syscall.AF_INET
	if !a.Is4() {
		family = syscall.AF_INET6
	}
	r, _, e := syscall.RawSyscall(syscall.SYS_SOCKET, uintptr(family), syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
	if e != 0 {
		return -1, nil, os.NewSyscallError("socket", e)
	}
	fd := int(r)
	setNoDelay(fd)
	var sa sockaddr // on the stack: a connect that completes at once allocates nothing
	sa.set(netip.AddrPortFrom(a, ap.Port()))
	e = sa.connect(fd)
	if e == syscall.EINPROGRESS {
		// A second connect reports the outcome: established (EISCONN), refused, or still
		// in progress (EALREADY).
		e = sa.connect(fd)
		if e == syscall.EISCONN {
			e = 0
		}
	}
	if e == syscall.EALREADY || e == syscall.EINPROGRESS {
		return -1, &Connecting{fd: fd, ap: ap, sa: sa}, nil
	}
	if e != 0 {
		Close(fd)
		return -1, nil, dialError(ap, e)
	}
	return fd, nil, nil
}

// Wait waits within timeout (0: the kernel's limit) for the connect to end and returns the
// connected descriptor, or an error (the socket is then closed).
func (c *Connecting) Wait(timeout time.Duration) (int, error) {
	if e := waitConnect(c.fd, timeout, func() syscall.Errno { return c.sa.connect(c.fd) }); e != 0 {
		Close(c.fd)
		return -1, dialError(c.ap, e)
	}
	return c.fd, nil
}

func dialError(ap netip.AddrPort, e syscall.Errno) error {
	return &net.OpError{Op: "dial", Net: "tcp", Addr: net.TCPAddrFromAddrPort(ap), Err: os.NewSyscallError("connect", e)}
}

// waitConnect waits in the runtime's poller, through a duplicate of fd, until the connect in
// progress on fd ends or timeout passes.
func waitConnect(fd int, timeout time.Duration, connect func() syscall.Errno) syscall.Errno {
	f, err := Lend(fd)
	if err != nil {
		return errnoOf(err)
	}
	defer f.Close()
	if timeout > 0 {
		_ = f.SetWriteDeadline(time.Now().Add(timeout))
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return errnoOf(err)
	}
	e := syscall.Errno(0)
	err = rc.Write(func(uintptr) bool {
		e = connect()
		switch e {
		case syscall.EALREADY, syscall.EINPROGRESS:
			return false
		case syscall.EISCONN:
			e = 0
		}
		return true
	})
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return syscall.ETIMEDOUT
		}
		return errnoOf(err)
	}
	return e
}

func errnoOf(err error) syscall.Errno {
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return syscall.EIO
}

// DialName connects to address (a host name, or an address with a zone) through the net
// package and returns a duplicate of the connection's descriptor, which the caller owns; the
// net package's connection is closed.
func DialName(address string, timeout time.Duration) (int, error) {
	d := net.Dialer{Timeout: timeout, KeepAlive: -1}
	c, err := d.Dial("tcp", address)
	if err != nil {
		return -1, err
	}
	defer c.Close()
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		return -1, err
	}
	nfd, e := -1, syscall.Errno(0)
	if err := rc.Control(func(fd uintptr) { nfd, e = dup(int(fd)) }); err != nil {
		return -1, err
	}
	if e != 0 {
		return -1, os.NewSyscallError("fcntl", e)
	}
	return nfd, nil
}

// Lend returns an *os.File on a duplicate of fd, registered with the runtime's poller, for
// reads and writes with deadlines (a PROXY header, a ClientHello); closing it leaves fd open.
// Reads through it consume fd's bytes: it is the same socket.
func Lend(fd int) (*os.File, error) {
	nfd, e := dup(fd)
	if e != 0 {
		return nil, os.NewSyscallError("fcntl", e)
	}
	// The descriptor is non-blocking, so NewFile registers it with the poller.
	return os.NewFile(uintptr(nfd), "tcp"), nil
}

// netConn returns a *net.TCPConn on a duplicate of fd (for Pipe's goroutines); closing it
// leaves fd open.
func netConn(fd int) (*net.TCPConn, error) {
	f, err := Lend(fd)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	c, err := net.FileConn(f)
	if err != nil {
		return nil, err
	}
	tc, ok := c.(*net.TCPConn)
	if !ok {
		_ = c.Close()
		return nil, errors.New("sockio: not a TCP socket")
	}
	return tc, nil
}

// Close closes fd with a raw close(2).
func Close(fd int) { _, _, _ = syscall.RawSyscall(syscall.SYS_CLOSE, uintptr(fd), 0, 0) }

// Shutdown shuts both directions of fd down: a read or write on it, anywhere, ends.
func Shutdown(fd int) {
	_, _, _ = syscall.RawSyscall(syscall.SYS_SHUTDOWN, uintptr(fd), syscall.SHUT_RDWR, 0)
}

// LocalAddr returns fd's local address (getsockname(2), raw).
func LocalAddr(fd int) netip.AddrPort {
	var sa syscall.RawSockaddrAny
	l := uint32(unsafe.Sizeof(sa))
	_, _, e := syscall.RawSyscall(syscall.SYS_GETSOCKNAME, uintptr(fd), uintptr(unsafe.Pointer(&sa)), uintptr(unsafe.Pointer(&l)))
	if e != 0 {
		return netip.AddrPort{}
	}
	return sockaddrAddrPort(&sa)
}

// Write writes p to fd with raw non-blocking writes and returns how much the socket took.
func Write(fd int, p []byte) (int, error) {
	w := 0
	for w < len(p) {
		r, _, e := syscall.RawSyscall(syscall.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&p[w])), uintptr(len(p)-w))
		switch e {
		case 0:
			w += int(r)
		case syscall.EINTR:
		case syscall.EAGAIN:
			return w, nil
		default:
			return w, e
		}
	}
	return w, nil
}

func setNoDelay(fd int) {
	one := int32(1)
	_, _, _ = syscall.RawSyscall6(syscall.SYS_SETSOCKOPT, uintptr(fd), syscall.IPPROTO_TCP, syscall.TCP_NODELAY, uintptr(unsafe.Pointer(&one)), 4, 0)
}

// dup duplicates fd (close-on-exec).
func dup(fd int) (int, syscall.Errno) {
	r, _, e := syscall.RawSyscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_DUPFD_CLOEXEC, 0)
	return int(r), e
}

// sockaddrAddrPort converts an AF_INET or AF_INET6 socket address as the net package does: an
// IPv4 peer of an IPv6 socket stays IPv4-mapped.
func sockaddrAddrPort(sa *syscall.RawSockaddrAny) netip.AddrPort {
	switch sa.Addr.Family {
	case syscall.AF_INET:
		p := (*syscall.RawSockaddrInet4)(unsafe.Pointer(sa))
		return netip.AddrPortFrom(netip.AddrFrom4(p.Addr), portOf(p.Port))
	case syscall.AF_INET6:
		p := (*syscall.RawSockaddrInet6)(unsafe.Pointer(sa))
		a := netip.AddrFrom16(p.Addr)
		if p.Scope_id != 0 {
			zone := strconv.FormatUint(uint64(p.Scope_id), 10)
			if ifi, err := net.InterfaceByIndex(int(p.Scope_id)); err == nil {
				zone = ifi.Name
			}
			a = a.WithZone(zone)
		}
		return netip.AddrPortFrom(a, portOf(p.Port))
	}
	return netip.AddrPort{}
}

// sockaddr is a socket address for connect(2), held by value: an IPv6 one, or an IPv4 one at
// the start of the same storage.
type sockaddr struct {
	raw  syscall.RawSockaddrInet6
	size uintptr
}

// set stores ap (an IPv4 address unmapped by the caller, or an IPv6 one).
func (sa *sockaddr) set(ap netip.AddrPort) {
	if a := ap.Addr(); a.Is4() {
		v4 := (*syscall.RawSockaddrInet4)(unsafe.Pointer(&sa.raw))
		*v4 = syscall.RawSockaddrInet4{Family: syscall.AF_INET, Addr: a.As4()}
		putPort(&v4.Port, ap.Port())
		sa.size = unsafe.Sizeof(*v4)
		return
	}
	sa.raw = syscall.RawSockaddrInet6{Family: syscall.AF_INET6, Addr: ap.Addr().As16()}
	putPort(&sa.raw.Port, ap.Port())
	sa.size = unsafe.Sizeof(sa.raw)
}

// connect calls connect(2) on fd with the address, again after EINTR.
func (sa *sockaddr) connect(fd int) syscall.Errno {
	for {
		_, _, e := syscall.RawSyscall(syscall.SYS_CONNECT, uintptr(fd), uintptr(unsafe.Pointer(&sa.raw)), sa.size)
		if e != syscall.EINTR {
			return e
		}
	}
}

// portOf reads a port stored in network byte order.
func portOf(p uint16) uint16 {
	b := (*[2]byte)(unsafe.Pointer(&p))
	return uint16(b[0])<<8 | uint16(b[1])
}

// putPort stores p in network byte order, as a sockaddr holds it.
func putPort(dst *uint16, p uint16) {
	b := (*[2]byte)(unsafe.Pointer(dst))
	b[0], b[1] = byte(p>>8), byte(p)
}
