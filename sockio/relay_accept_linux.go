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
// the shard that wakes accepts one connection per report of the listening socket and hands it
// to the listener's function, in the shard's goroutine, before it serves the ready pairs. A
// short connection then costs no wake-up of an acceptor goroutine of its own. One accept per
// report, not a loop until EAGAIN: the socket is level-triggered, so the shard's next
// epoll_pwait (which it makes anyway, serving the pairs' events with it) reports it again while
// connections wait, and an accept that finds the queue empty is dear (the kernel allocates the
// new socket and its file before it looks: about 1.9 µs here, against 0.13 µs for an
// epoll_pwait; a loop until EAGAIN made one such accept per four connections).
//
// The listening socket waits in as few shards' epoll sets as the load needs: in its home
// shard's (listeners take the shards round robin) always, and in one more shard's each time a
// shard accepts relayAcceptStreak connections in consecutive epoll_pwait rounds (the queue was
// never found empty: the shards in the set do not keep up), until it is in every set;
// relayAcceptShrink after the last such streak the home shard takes it out of the others'
// sets again. Why: a socket in several sets wakes every one of them for each connection
// (EPOLLEXCLUSIVE, which would wake one, does not reach through the runtime's poller, where
// the shards' sets wait), so at light load every shard but one woke for nothing, and the
// pairs spread over the shards cost a wake-up of each for what one wake-up serves when they
// share a shard. Measured with scripts/l4peers.sh's rate row on two cores, the home shard
// alone took the CPU per connection from 1.13 to 0.97 × HAProxy's.
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
	// accepts holds each shard's accept, made once so that an accept allocates nothing.
	accepts []shardAccept
	home    int // the shard whose set always holds the socket (while not paused)

	// lastFull is when a streak last reached relayAcceptStreak (unix nanoseconds); extra counts the shards
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

// relayAcceptStreak connections accepted by one shard in consecutive epoll_pwait rounds add a
// shard to the listener's set.
const relayAcceptStreak = 64

// relayAcceptShrink is how long after the last streak of relayAcceptStreak the listener's set
// shrinks back to its home shard.
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
	l.accepts = make([]shardAccept, len(r.shards))
	for i := range l.accepts {
		b := &l.accepts[i]
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

// grow adds the next shard after home whose set lacks the socket (a streak reached
// relayAcceptStreak).
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

// shrink takes the socket out of every set but home's (no streak for a while).
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

// Close stops accepting: the socket leaves every shard's set. An accept running in a
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

// accept takes one connection in the shard with index si, whose epoll_pwait round (counted
// by the shard, every call) reported the listening socket. Its pair stays in that shard unless
// it holds many more than the least busy one (the kernel may wake the same shard for every
// connection): then pairs spread round robin.
func (l *RelayListener) accept(si int, round uint64) {
	sh := RelayShard{si + 1}
	least := l.r.shards[si].open.Load()
	for _, s := range l.r.shards {
		least = min(least, s.open.Load())
	}
	if l.r.shards[si].open.Load() > 2*least+64 {
		sh = RelayShard{}
	}
	b := &l.accepts[si]
	b.sh, b.n, b.aerr = sh, 0, 0
	err := l.ln.Control(b.run)
	n, aerr := b.n, b.aerr
	switch {
	case n == 0:
		b.streak = 0
	case b.round+1 == round:
		b.streak++
	default:
		b.streak = 1
	}
	b.round = round
	switch {
	case err != nil: // the listener was closed
		l.Close()
	case aerr != 0:
		l.pause() // out of descriptors or memory: a level-triggered socket would spin the shard
	case b.streak >= relayAcceptStreak: // the queue stays full: the shards in the set do not keep up
		b.streak = 0
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

// shardAccept is one shard's accept for a listener (RelayListener.accept runs it inside the
// listener's Control), and the shard's streak; only that shard's goroutine uses it.
type shardAccept struct {
	l    *RelayListener
	run  func(lfd uintptr) // accept, as a func value made once
	sh   RelayShard        // the shard the pair goes to
	n    int               // connections accepted (0 or 1)
	aerr syscall.Errno     // the accept failure, if one ended it

	round  uint64 // the shard's epoll_pwait round of the last accept
	streak int    // connections accepted in consecutive rounds
}

// accept takes one connection from the listening socket lfd, if one waits.
func (b *shardAccept) accept(lfd uintptr) {
	for {
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
		return
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
