//go:build linux

package sockio

import (
	"net"
	"syscall"
	"unsafe"
)

// IO reads and writes a non-blocking socket with raw system calls, inside the callbacks
// of syscall.RawConn, instead of through net.Conn's Read and Write.
//
// Why: a Go program that spends most of its time in short socket system calls pays for them
// twice. Each ordinary system call marks its P as "in syscall"; under load such a call often
// spans two ticks of the runtime's monitor thread (sysmon), which then hands the P to another
// thread and keeps itself waking every 20µs. On the proxy's request path that monitor alone
// cost about 15% of the process's CPU. A non-blocking socket call never blocks, so it can run
// as a raw call that keeps the P: the monitor sees nothing to retake and backs off to its 10ms
// sleep, and the thread hand-offs and wake-ups go away.
//
// Correctness is the standard library's: RawConn.Read and RawConn.Write hold the descriptor's
// lock (so a concurrent Close cannot reuse the descriptor under the call), clear the poller's
// readiness before the callback runs, and park the goroutine, honouring deadlines and Close,
// when the callback reports EAGAIN. Reads and writes keep separate state, so one goroutine may
// read while another writes, as net.Conn allows; two concurrent readers (or writers) are not
// supported, which neither fasthttp nor the tunnel does.
type IO struct {
	RC syscall.RawConn // nil: not a socket with a descriptor; use the embedded conn

	rbuf []byte
	rn   int
	rerr error
	rfn  func(fd uintptr) bool

	wbuf []byte
	wn   int
	werr error
	wfn  func(fd uintptr) bool

	peeked int // set by peekCallback: peekNothing, peekData or peekGone
	pfn    func(fd uintptr)
}

// init prepares x for c; the callbacks are method values made once per connection, so a
// read or a write allocates nothing.
func (x *IO) Init(c net.Conn) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return
	}
	x.RC = rc
	x.rfn = x.readCallback
	x.wfn = x.writeCallback
	x.pfn = x.peekCallback
}

// peerGone reports, without blocking, whether the peer has closed or reset the connection or
// sent bytes nobody asked for: either way an idle keep-alive connection is unusable. It costs
// one non-blocking peek, so callers use it only where sending on a dead connection would be
// unsafe to undo (a non-idempotent request).
func (x *IO) PeerGone() bool { return x.peek() != peekNothing }

// pending reports, without blocking, whether bytes from the peer wait to be read.
func (x *IO) Pending() bool { return x.peek() == peekData }

// What a non-blocking peek found.
const (
	peekNothing = iota // nothing pending: the connection is open and quiet
	peekData           // bytes wait to be read
	peekGone           // the end of the stream or an error
)

// peek runs under RawConn.Control, not Read: Control does not take the descriptor's read lock,
// so a peek does not wait behind a reader parked on the same connection. Concurrent peeks
// are not supported.
func (x *IO) peek() int {
	if x.RC == nil {
		return peekNothing
	}
	if err := x.RC.Control(x.pfn); err != nil {
		return peekGone
	}
	return x.peeked
}

// peekCallback peeks one byte without waiting (the socket is non-blocking).
func (x *IO) peekCallback(fd uintptr) {
	var b [1]byte
	for {
		n, _, e := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&b[0])), 1,
			syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
		switch {
		case e == syscall.EINTR:
			continue
		case e == syscall.EAGAIN:
			x.peeked = peekNothing
		case e == 0 && n > 0:
			x.peeked = peekData
		default:
			x.peeked = peekGone
		}
		return
	}
}

func (x *IO) Read(c net.Conn, p []byte) (int, error) {
	if x.RC == nil {
		return c.Read(p)
	}
	if len(p) == 0 {
		return 0, nil
	}
	x.rbuf, x.rn, x.rerr = p, 0, nil
	err := x.RC.Read(x.rfn)
	n, rerr := x.rn, x.rerr
	x.rbuf, x.rerr = nil, nil
	if err != nil {
		return n, err
	}
	if rerr != nil {
		return n, opError("read", c, rerr)
	}
	return n, nil
}

// readCallback makes one read; false (EAGAIN) asks RawConn.Read to wait for readability.
func (x *IO) readCallback(fd uintptr) bool {
	for {
		n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&x.rbuf[0])), uintptr(len(x.rbuf)))
		switch {
		case e == syscall.EINTR:
			continue
		case e == syscall.EAGAIN:
			return false
		case e != 0:
			x.rerr = e
		case n == 0:
			x.rerr = eofMarker
		default:
			x.rn = int(n)
		}
		return true
	}
}

func (x *IO) Write(c net.Conn, p []byte) (int, error) {
	if x.RC == nil {
		return c.Write(p)
	}
	if len(p) == 0 {
		return 0, nil
	}
	x.wbuf, x.wn, x.werr = p, 0, nil
	err := x.RC.Write(x.wfn)
	n, werr := x.wn, x.werr
	x.wbuf, x.werr = nil, nil
	if err != nil {
		return n, err
	}
	if werr != nil {
		return n, opError("write", c, werr)
	}
	return n, nil
}

// writeCallback writes as much as the socket takes; false (EAGAIN) asks RawConn.Write to wait
// until the socket is writable and call it again for the rest.
func (x *IO) writeCallback(fd uintptr) bool {
	for x.wn < len(x.wbuf) {
		rest := x.wbuf[x.wn:]
		n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&rest[0])), uintptr(len(rest)))
		switch {
		case e == syscall.EINTR:
			continue
		case e == syscall.EAGAIN:
			return false
		case e != 0:
			x.werr = e
			return true
		}
		x.wn += int(n)
	}
	return true
}
