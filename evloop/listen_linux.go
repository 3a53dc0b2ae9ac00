//go:build linux

package evloop

import (
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"ballast/sockio"
)

// AcceptFunc takes a connection a shard accepted: fd is non-blocking, close-on-exec, with
// TCP_NODELAY, and now the shard's to register (Add) or close. It runs on s's goroutine.
type AcceptFunc func(s *Shard, fd int, peer netip.AddrPort)

// Listener is a listening socket served by every shard of a group: each shard waits for it in
// its own epoll set (level-triggered, EPOLLEXCLUSIVE, so one connection wakes one shard) and
// accepts with raw accept4(2) inside the socket's RawConn.Control, so a socket closed by its
// owner is never accepted from under its number.
type Listener struct {
	rc   syscall.RawConn
	accs []*acceptor
	once sync.Once
	// Accepted counts connections accepted; Failed accepts that failed for want of
	// descriptors or memory (EMFILE, ENFILE, ENOBUFS, ENOMEM), after each of which the shard
	// stops accepting for acceptPause.
	Accepted, Failed atomic.Uint64
}

type acceptor struct {
	FD
	l      *Listener
	s      *Shard
	fn     AcceptFunc
	ctl    func(fd uintptr) // acceptOne, run under rc.Control
	paused bool
	gone   bool // the listener was closed: nothing more to accept
	err    syscall.Errno
	timer  Timer
}

// A shard accepts one connection per report of the listening socket rather than looping
// until accept4 finds the queue empty: that empty accept4 costs more than a look at the set
// (the kernel allocates the new socket before it looks), and the socket is level-triggered,
// so the shard's next look, which follows at once (Shard.serve), reports it again while
// connections wait. Connections already open are served between accepts, so a flood of new
// ones does not starve them.

// acceptPause is how long a shard stops accepting after accept4 failed for want of
// descriptors or memory (the listener would otherwise be reported ready at once, again).
const acceptPause = 100 * time.Millisecond

// Listen serves ln (a *net.TCPListener, or anything that lends one through SyscallConn) on
// every shard: each accepted connection goes to fn on the shard that accepted it. Close the
// Listener to stop; it does not close ln.
func (g *Group) Listen(ln syscall.Conn, fn AcceptFunc) (*Listener, error) {
	rc, err := ln.SyscallConn()
	if err != nil {
		return nil, err
	}
	l := &Listener{rc: rc}
	errs := make(chan error, len(g.shards))
	for _, s := range g.shards {
		a := &acceptor{l: l, s: s, fn: fn}
		a.ctl = a.acceptOne
		a.timer.Init(a)
		l.accs = append(l.accs, a)
		s.Post(taskFunc(func(s *Shard) { errs <- a.register() }))
	}
	for range g.shards {
		if e := <-errs; e != nil && err == nil {
			err = e
		}
	}
	if err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// taskFunc runs a function as a Task (setup and teardown only: it allocates).
type taskFunc func(s *Shard)

func (f taskFunc) Run(s *Shard) { f(s) }

// register takes a slot of the shard and adds the listening socket to its set.
func (a *acceptor) register() error {
	s := a.s
	var id uint32
	if n := len(s.free); n > 0 {
		id = s.free[n-1]
		s.free = s.free[:n-1]
	} else {
		id = uint32(len(s.slab))
		s.slab = append(s.slab, slabEntry{})
	}
	e := &s.slab[id]
	e.h, e.f, e.level = a, &a.FD, true
	a.id, a.gen, a.FD.s = id, e.gen, s
	if err := a.ctlListener(syscall.EPOLL_CTL_ADD); err != nil {
		s.forget(&a.FD)
		return err
	}
	return nil
}

// ctlListener adds the listening socket to the shard's set or deletes it, under Control.
func (a *acceptor) ctlListener(op int) error {
	var e syscall.Errno
	err := a.l.rc.Control(func(fd uintptr) {
		a.Fd = int(fd)
		ev := syscall.EpollEvent{Events: syscall.EPOLLIN}
		if op == syscall.EPOLL_CTL_ADD {
			ev.Events |= epollExclusive
		}
		ev.Fd, ev.Pad = int32(a.id), int32(a.gen)
		_, _, e = syscall.RawSyscall6(syscall.SYS_EPOLL_CTL, uintptr(a.s.epfd), uintptr(op), fd, uintptr(unsafe.Pointer(&ev)), 0, 0)
	})
	if err == nil && e != 0 {
		err = os.NewSyscallError("epoll_ctl", e)
	}
	return err
}

// Event accepts a connection.
func (a *acceptor) Event(Events) {
	if a.paused || a.gone {
		return
	}
	a.err = 0
	if err := a.l.rc.Control(a.ctl); err != nil {
		a.gone = true // closed by its owner: its registration went with it
		return
	}
	switch a.err {
	case syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM:
		a.l.Failed.Add(1)
		if a.ctlListener(syscall.EPOLL_CTL_DEL) == nil {
			a.paused = true
			a.s.Arm(&a.timer, a.s.now+int64(acceptPause))
		}
	}
}

// acceptOne accepts one connection, if one waits.
func (a *acceptor) acceptOne(lfd uintptr) {
	for {
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
			a.err = e
			return
		}
		fd := int(r)
		sockio.SetNoDelay(fd)
		a.l.Accepted.Add(1)
		a.fn(a.s, fd, sockio.PeerAddrPort(&sa))
		return
	}
}

// Expire ends a pause: the socket goes back into the set.
func (a *acceptor) Expire(int64) {
	if !a.paused || a.gone {
		return
	}
	if err := a.ctlListener(syscall.EPOLL_CTL_ADD); err != nil {
		a.gone = true
		return
	}
	a.paused = false
}

// Closed reports whether ln's owner has closed the listening socket.
func (l *Listener) Closed() bool { return l.rc.Control(func(uintptr) {}) != nil }

// Close stops every shard accepting from the socket and waits until they have; it does not
// close the socket. Connections already accepted are untouched.
func (l *Listener) Close() {
	l.once.Do(func() {
		var wg sync.WaitGroup
		for _, a := range l.accs {
			wg.Add(1)
			a.s.Post(taskFunc(func(s *Shard) {
				defer wg.Done()
				if a.FD.s == nil {
					return
				}
				if !a.paused && !a.gone {
					_ = a.ctlListener(syscall.EPOLL_CTL_DEL)
				}
				s.Stop(&a.timer)
				a.gone = true
				s.forget(&a.FD)
			}))
		}
		wg.Wait()
	})
}
