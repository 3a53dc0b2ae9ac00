//go:build linux

package sockio

import (
	"net"
	"os"
	"sync"
	"syscall"
	"time"
)

// Poller holds idle connections without a goroutine each: one epoll instance and one
// goroutine wait for all of them, and a connection gets a goroutine again (wake) only when
// its socket becomes readable or its peer closes it. The epoll descriptor itself is waited
// for by the runtime's network poller, so no thread blocks in epoll_wait.
//
// Why: a goroutine parked in Read keeps its stack (8 KiB or more once a request path has
// grown it) and whatever buffers its caller holds; for thousands of idle keep-alive clients
// that is most of the process's memory. A parked connection costs its socket and a map entry.
//
// The epoll set is level-triggered and one-shot: a connection that already has bytes waiting
// when it is parked is woken at once, and each parking reports at most one wake.
type Poller struct {
	epfd int
	ep   *os.File // epfd in the runtime's network poller: run waits without a thread
	wake func(net.Conn)

	mu     sync.Mutex // guards conns, next and closed; taken per park and per wake, never per request
	conns  map[uint64]parked
	next   uint64
	closed bool
}

type parked struct {
	c        net.Conn
	fd       int
	deadline time.Time // closed when it passes; zero = never
}

// pollEvery bounds how late a parked connection's deadline is enforced and how long the
// goroutine takes to notice Close.
const pollEvery = 100 * time.Millisecond

// NewPoller starts a poller whose wake runs for each parked connection that becomes readable
// (or whose peer closed it); wake owns the connection from then on. wake runs in the poller's
// goroutine and must hand the connection on without blocking.
func NewPoller(wake func(net.Conn)) (*Poller, error) {
	epfd, ep, rc, err := openEpoll("epoll")
	if err != nil {
		return nil, err
	}
	p := &Poller{epfd: epfd, ep: ep, wake: wake, conns: make(map[uint64]parked)}
	go p.run(rc)
	return p, nil
}

// Park hands c, whose socket is rc, to the poller until it becomes readable or deadline passes
// (then the poller closes it). It reports false, and the caller keeps c, when the poller is
// closed or the socket cannot be watched. c must have nothing buffered above the socket.
func (p *Poller) Park(c net.Conn, rc syscall.RawConn, deadline time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	id := p.next
	p.next++
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLRDHUP | syscall.EPOLLONESHOT}
	ev.Fd, ev.Pad = int32(uint32(id)), int32(uint32(id>>32))
	fd, errno := -1, error(nil)
	if err := rc.Control(func(s uintptr) {
		fd = int(s)
		errno = syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_ADD, fd, &ev)
	}); err != nil || errno != nil {
		return false
	}
	p.conns[id] = parked{c: c, fd: fd, deadline: deadline}
	return true
}

// Len is the number of connections parked now.
func (p *Poller) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// Close closes every parked connection; Park refuses from now on. The goroutine ends within
// pollEvery.
func (p *Poller) Close() {
	p.mu.Lock()
	p.closed = true
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	for _, pc := range conns {
		_ = pc.c.Close()
	}
}

func (p *Poller) run(rc syscall.RawConn) {
	events := make([]syscall.EpollEvent, 128)
	var woken, expired []net.Conn
	lastSweep := time.Now()
	n := 0
	wait := func(fd uintptr) bool {
		var err error
		n, err = syscall.EpollWait(int(fd), events, 0)
		return n > 0 || (err != nil && err != syscall.EINTR)
	}
	for {
		_ = p.ep.SetReadDeadline(time.Now().Add(pollEvery))
		n = 0
		_ = rc.Read(wait)
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = p.ep.Close()
			return
		}
		woken, expired = woken[:0], expired[:0]
		for _, ev := range events[:max(n, 0)] {
			id := uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32
			pc, ok := p.conns[id]
			if !ok {
				continue
			}
			delete(p.conns, id)
			// Out of the set before anyone may park it again: the socket stays open, so the
			// descriptor cannot have been reused.
			_ = syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_DEL, pc.fd, nil)
			woken = append(woken, pc.c)
		}
		if now := time.Now(); now.Sub(lastSweep) >= pollEvery {
			lastSweep = now
			for id, pc := range p.conns {
				if !pc.deadline.IsZero() && !now.Before(pc.deadline) {
					delete(p.conns, id)
					expired = append(expired, pc.c) // closing the socket takes it out of the set
				}
			}
		}
		p.mu.Unlock()
		for _, c := range woken {
			p.wake(c)
		}
		for _, c := range expired {
			_ = c.Close()
		}
		clear(woken)
		clear(expired)
	}
}

// openEpoll creates an epoll set for a goroutine to wait on. Non-blocking, its descriptor is
// waited for by the runtime's own poller (rc), which reports it readable when one of its
// sockets is: no thread sits in epoll_wait.
func openEpoll(name string) (epfd int, ep *os.File, rc syscall.RawConn, err error) {
	epfd, err = syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return 0, nil, nil, err
	}
	if err := syscall.SetNonblock(epfd, true); err != nil {
		_ = syscall.Close(epfd)
		return 0, nil, nil, err
	}
	ep = os.NewFile(uintptr(epfd), name)
	if rc, err = ep.SyscallConn(); err != nil {
		_ = ep.Close()
		return 0, nil, nil, err
	}
	return epfd, ep, rc, nil
}
