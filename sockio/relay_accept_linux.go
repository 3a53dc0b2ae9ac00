//go:build linux

package sockio

import (
	"errors"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// RelayListener is a TCP listener whose connections the Relay's shards accept themselves:
// the listening socket waits in every shard's epoll set (EPOLLEXCLUSIVE: one shard wakes per
// connection), and the shard that wakes accepts up to relayAcceptBatch connections and hands
// each to the listener's function, in the shard's goroutine, before it serves the ready
// pairs. A short connection then costs no wake-up of an acceptor goroutine of its own.
//
// The function runs in a shard and must not block: it may Forward (to that shard, with
// RelayFlow.Shard, which keeps the connection on one goroutine, or another) or start a
// goroutine. Accepts run inside the listener's Control, so a listener closed meanwhile is
// never accepted from under its number.
type RelayListener struct {
	r    *Relay
	ln   syscall.RawConn
	fn   func(fd int, peer netip.AddrPort, shard RelayShard)
	keys []uint64 // the listener's id in each shard

	mu      sync.Mutex
	closed  bool
	paused  bool          // out of the epoll sets after EMFILE and the like (resume re-adds)
	backoff time.Duration // the current pause
	done    chan struct{} // closed by Close
}

// relayAcceptBatch bounds the connections one wake-up of a shard accepts.
const relayAcceptBatch = 64

// Listen makes the relay's shards accept ln's connections and call fn for each, with a
// non-blocking, close-on-exec descriptor (TCP_NODELAY inherited from ln, set here), the
// peer's address and the shard that accepted it (for RelayFlow.Shard). It fails with errors.ErrUnsupported when the relay has no shards (the
// caller accepts with an Acceptor instead). Close stops it; it does not close ln.
func (r *Relay) Listen(ln syscall.Conn, fn func(fd int, peer netip.AddrPort, shard RelayShard)) (*RelayListener, error) {
	if len(r.shards) == 0 {
		return nil, errors.ErrUnsupported
	}
	rc, err := ln.SyscallConn()
	if err != nil {
		return nil, err
	}
	l := &RelayListener{r: r, ln: rc, fn: fn, keys: make([]uint64, len(r.shards)), done: make(chan struct{})}
	if err := rc.Control(func(fd uintptr) { setNoDelay(int(fd)) }); err != nil {
		return nil, err
	}
	for i, s := range r.shards {
		s.mu.Lock()
		l.keys[i] = s.next
		s.next++
		if s.listeners == nil {
			s.listeners = make(map[uint64]*RelayListener)
		}
		s.listeners[l.keys[i]] = l
		s.mu.Unlock()
	}
	if err := l.watch(syscall.EPOLL_CTL_ADD); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// watch adds the listening socket to every shard's set, or deletes it.
func (l *RelayListener) watch(op int) error {
	var werr error
	err := l.ln.Control(func(fd uintptr) {
		for i, s := range l.r.shards {
			key := l.keys[i] << 1
			ev := syscall.EpollEvent{Events: syscall.EPOLLIN | epollExclusive}
			ev.Fd, ev.Pad = int32(uint32(key)), int32(uint32(key>>32))
			_, _, e := syscall.RawSyscall6(syscall.SYS_EPOLL_CTL, uintptr(s.epfd), uintptr(op), fd, uintptr(unsafe.Pointer(&ev)), 0, 0)
			if e != 0 && werr == nil {
				werr = os.NewSyscallError("epoll_ctl", e)
			}
		}
	})
	if err != nil {
		return err
	}
	return werr
}

// epollExclusive is EPOLLEXCLUSIVE (Linux 4.5), which the syscall package does not name.
const epollExclusive = 1 << 28

// Done is closed when the listener stops (Close).
func (l *RelayListener) Done() <-chan struct{} { return l.done }

// Close stops accepting: the socket leaves every shard's set. An accept batch running in a
// shard finishes.
func (l *RelayListener) Close() {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.closed = true
	paused := l.paused
	close(l.done)
	l.mu.Unlock()
	if !paused {
		_ = l.watch(syscall.EPOLL_CTL_DEL) // fails harmlessly once ln is closed: closing left the sets
	}
	for i, s := range l.r.shards {
		s.mu.Lock()
		delete(s.listeners, l.keys[i])
		s.mu.Unlock()
	}
}

// accept takes a batch of connections in the shard with index si. Their pairs stay in that
// shard unless it holds many more than the least busy one (the kernel may wake the same
// shard for every connection): then they spread round robin.
func (l *RelayListener) accept(si int) {
	sh := RelayShard{si + 1}
	least := l.r.shards[si].open.Load()
	for _, s := range l.r.shards {
		least = min(least, s.open.Load())
	}
	if l.r.shards[si].open.Load() > 2*least+64 {
		sh = RelayShard{}
	}
	var aerr syscall.Errno
	n := 0
	err := l.ln.Control(func(lfd uintptr) {
		for n < relayAcceptBatch {
			var sa syscall.RawSockaddrAny
			size := uint32(unsafe.Sizeof(sa))
			r, _, e := syscall.RawSyscall6(syscall.SYS_ACCEPT4, lfd, uintptr(unsafe.Pointer(&sa)),
				uintptr(unsafe.Pointer(&size)), syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0, 0)
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
			n++
			l.fn(int(r), sockaddrAddrPort(&sa), sh)
		}
	})
	switch {
	case err != nil: // the listener was closed
		l.Close()
	case aerr != 0:
		l.pause() // out of descriptors or memory: a level-triggered socket would spin the shard
	case n > 0:
		l.mu.Lock()
		l.backoff = 0
		l.mu.Unlock()
	}
}

// pause takes the socket out of the sets for a while (5 ms, doubling to 1 s while accepts keep
// failing), as Serve's loop sleeps after EMFILE with an Acceptor.
func (l *RelayListener) pause() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || l.paused {
		return
	}
	l.paused = true
	l.backoff = min(max(2*l.backoff, 5*time.Millisecond), time.Second)
	_ = l.watch(syscall.EPOLL_CTL_DEL)
	time.AfterFunc(l.backoff, func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.closed {
			return
		}
		l.paused = false
		if err := l.watch(syscall.EPOLL_CTL_ADD); err != nil {
			l.closed = true // the listener is gone
			close(l.done)
		}
	})
}
