//go:build linux

package sockio

import (
	"errors"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// RelayListener is a TCP listener whose connections the Relay's shards accept themselves:
// the shard that wakes accepts up to relayAcceptBatch connections and hands each to the
// listener's function, in the shard's goroutine, before it serves the ready pairs. A short
// connection then costs no wake-up of an acceptor goroutine of its own.
//
// The listening socket waits in as few shards' epoll sets as the load needs: in its home
// shard's (listeners take the shards round robin) always, and in one more shard's each time a
// batch comes back full (relayAcceptBatch connections were waiting: the shards in the set do
// not keep up), until it is in every set; relayAcceptShrink after the last full batch the home
// shard takes it out of the others' sets again. Why: a socket in several sets wakes every one
// of them for each connection (EPOLLEXCLUSIVE, which would wake one, does not reach through
// the runtime's poller, where the shards' sets wait), so at light load every shard but one
// woke for nothing, and the pairs spread over the shards cost a wake-up of each for what one
// wake-up serves when they share a shard. Measured with scripts/l4peers.sh's rate row on two
// cores, the home shard alone took the CPU per connection from 1.13 to 0.97 × HAProxy's.
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
	// batches holds each shard's accept loop, made once so that a wake-up allocates nothing.
	batches []acceptBatch
	home    int // the shard whose set always holds the socket (while not paused)

	// lastFull is when a batch last came back full (unix nanoseconds); extra counts the shards
	// besides home whose sets hold the socket (written under mu, read by the home shard).
	lastFull atomic.Int64
	extra    atomic.Int32
	// backedOff: backoff is not 0 (a successful accept resets it).
	backedOff atomic.Bool

	mu      sync.Mutex
	in      []bool // which shards' sets hold the socket
	closed  bool
	paused  bool          // out of the epoll sets after EMFILE and the like (resume re-adds home)
	backoff time.Duration // the current pause
	done    chan struct{} // closed by Close
}

// relayAcceptBatch bounds the connections one wake-up of a shard accepts; a full batch adds a
// shard to the listener's set.
const relayAcceptBatch = 64

// relayAcceptShrink is how long after the last full batch the listener's set shrinks back to
// its home shard.
const relayAcceptShrink = time.Second

// Listen makes the relay's shards accept ln's connections and call fn for each, with a
// non-blocking, close-on-exec descriptor (TCP_NODELAY inherited from ln, set here), the
// peer's address and the shard that accepted it (for RelayFlow.Shard). It fails with
// errors.ErrUnsupported when the relay has no shards (the caller accepts with an Acceptor
// instead). Close stops it; it does not close ln.
func (r *Relay) Listen(ln syscall.Conn, fn func(fd int, peer netip.AddrPort, shard RelayShard)) (*RelayListener, error) {
	if len(r.shards) == 0 {
		return nil, errors.ErrUnsupported
	}
	rc, err := ln.SyscallConn()
	if err != nil {
		return nil, err
	}
	l := &RelayListener{r: r, ln: rc, fn: fn, keys: make([]uint64, len(r.shards)), in: make([]bool, len(r.shards)), done: make(chan struct{})}
	l.home = int(r.homes.Add(1)-1) % len(r.shards)
	l.batches = make([]acceptBatch, len(r.shards))
	for i := range l.batches {
		b := &l.batches[i]
		b.l, b.run = l, b.accept
	}
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
	l.mu.Lock()
	err = l.watch(syscall.EPOLL_CTL_ADD, l.home)
	l.mu.Unlock()
	if err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// watch adds the listening socket to shard i's set, or deletes it, and records which sets
// hold it; l.mu is held.
func (l *RelayListener) watch(op, i int) error {
	var e syscall.Errno
	err := l.ln.Control(func(fd uintptr) {
		key := l.keys[i] << 1
		ev := syscall.EpollEvent{Events: syscall.EPOLLIN | epollExclusive}
		ev.Fd, ev.Pad = int32(uint32(key)), int32(uint32(key>>32))
		_, _, e = syscall.RawSyscall6(syscall.SYS_EPOLL_CTL, uintptr(l.r.shards[i].epfd), uintptr(op), fd, uintptr(unsafe.Pointer(&ev)), 0, 0)
	})
	if err == nil && e != 0 {
		err = os.NewSyscallError("epoll_ctl", e)
	}
	if err == nil || op == syscall.EPOLL_CTL_DEL {
		// A failed delete leaves the socket out as well: it fails once ln is closed, and
		// closing took the socket out of every set.
		l.in[i] = op == syscall.EPOLL_CTL_ADD
	}
	n := int32(0)
	for k, in := range l.in {
		if in && k != l.home {
			n++
		}
	}
	l.extra.Store(n)
	return err
}

// unwatch takes the socket out of every set that holds it; l.mu is held.
func (l *RelayListener) unwatch() {
	for i, in := range l.in {
		if in {
			_ = l.watch(syscall.EPOLL_CTL_DEL, i)
		}
	}
}

// grow adds the next shard after home whose set lacks the socket (a batch came back full).
func (l *RelayListener) grow() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || l.paused {
		return
	}
	for k := 1; k < len(l.in); k++ {
		if i := (l.home + k) % len(l.in); !l.in[i] {
			_ = l.watch(syscall.EPOLL_CTL_ADD, i) // on failure the set stays as it was
			return
		}
	}
}

// shrink takes the socket out of every set but home's (no batch came back full for a while).
func (l *RelayListener) shrink() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || l.paused {
		return
	}
	for i, in := range l.in {
		if in && i != l.home {
			_ = l.watch(syscall.EPOLL_CTL_DEL, i)
		}
	}
}

// Shards reports how many shards' sets hold the listening socket now (tests read it).
func (l *RelayListener) Shards() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, in := range l.in {
		if in {
			n++
		}
	}
	return n
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
	close(l.done)
	l.unwatch()
	l.mu.Unlock()
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
	b := &l.batches[si]
	b.sh, b.n, b.aerr = sh, 0, 0
	err := l.ln.Control(b.run)
	n, aerr := b.n, b.aerr
	switch {
	case err != nil: // the listener was closed
		l.Close()
	case aerr != 0:
		l.pause() // out of descriptors or memory: a level-triggered socket would spin the shard
	case n == relayAcceptBatch: // more were waiting: the shards in the set do not keep up
		l.lastFull.Store(time.Now().UnixNano())
		l.grow()
	case si == l.home && l.extra.Load() > 0 && time.Now().UnixNano()-l.lastFull.Load() > int64(relayAcceptShrink):
		l.shrink()
	}
	if n > 0 && aerr == 0 && l.backedOff.Load() {
		l.mu.Lock()
		l.backoff = 0
		l.backedOff.Store(false)
		l.mu.Unlock()
	}
}

// acceptBatch is one shard's accept loop for a listener (RelayListener.accept runs it inside
// the listener's Control); only that shard's goroutine uses it.
type acceptBatch struct {
	l    *RelayListener
	run  func(lfd uintptr) // accept, as a func value made once
	sh   RelayShard        // the shard the batch's pairs go to
	n    int               // connections accepted
	aerr syscall.Errno     // the accept failure that ended the batch, if one did
}

// accept takes up to relayAcceptBatch connections from the listening socket lfd.
func (b *acceptBatch) accept(lfd uintptr) {
	for b.n < relayAcceptBatch {
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
			b.aerr = e
			return
		}
		b.n++
		b.l.fn(int(r), sockaddrAddrPort(&sa), b.sh)
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
	l.backedOff.Store(true)
	l.backoff = min(max(2*l.backoff, 5*time.Millisecond), time.Second)
	l.unwatch()
	time.AfterFunc(l.backoff, func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.closed {
			return
		}
		l.paused = false
		if err := l.watch(syscall.EPOLL_CTL_ADD, l.home); err != nil {
			l.closed = true // the listener is gone
			close(l.done)
		}
	})
}
