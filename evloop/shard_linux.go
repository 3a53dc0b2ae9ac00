//go:build linux

package evloop

import (
	"errors"
	"io"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// Events is what a shard reports about a descriptor: readiness that changed since the last
// report (edge-triggered).
type Events uint32

const (
	// Readable: bytes, the end of the stream or an error wait to be read.
	Readable Events = 1 << iota
	// Writable: the socket takes bytes again (or a connect finished, or failed).
	Writable
	// Hangup: the peer closed its side or the connection failed; reads return what is left,
	// then the end or the error.
	Hangup
	// Deferred: the handler asked for a call (Shard.Later); nothing changed on the socket.
	Deferred
)

// Handler hears the events of the descriptors registered with it. Event runs on the shard's
// goroutine and must not block.
type Handler interface{ Event(ev Events) }

// Task is work posted to a shard from any goroutine (Shard.Post); Run runs on the shard.
type Task interface{ Run(s *Shard) }

// ErrAgain is the error of a read or write that would block; the descriptor's Ready bit is
// cleared and the next edge sets it.
var ErrAgain = errors.New("evloop: would block")

// FD is a descriptor registered with a shard. It is embedded in its handler's state; its
// methods run on the shard's goroutine only.
type FD struct {
	Fd int
	// Ready is the readiness not consumed yet: set by events, cleared by reads and writes
	// that find the socket drained or full.
	Ready Events
	id    uint32
	gen   uint32
	s     *Shard
}

// Shard returns the shard f is registered with (nil when it is not).
func (f *FD) Shard() *Shard { return f.s }

// Registered reports whether f is registered with a shard.
func (f *FD) Registered() bool { return f.s != nil }

type slabEntry struct {
	h     Handler
	f     *FD
	gen   uint32
	level bool // registered level-triggered (a listener): still ready without a new edge
}

// origin is the zero of every shard's clock (monotonic).
var origin = time.Now()

func clock() int64 { return int64(time.Since(origin)) }

// Time converts a shard clock reading to wall-clock time.
func Time(c int64) time.Time { return origin.Add(time.Duration(c)) }

// epoll flags the syscall package lacks or types as negative.
const (
	epollET        = 1 << 31
	epollExclusive = 1 << 28
	epollConn      = syscall.EPOLLIN | syscall.EPOLLOUT | syscall.EPOLLRDHUP | epollET
)

// Values of Shard.armed besides a tick.
const (
	noDeadline     = -1
	deadlinePassed = -2 // a read deadline is set and has passed: rc.Read fails at once
)

// ReadBufSize is the size of a shard's read buffer (Buf).
const ReadBufSize = 64 << 10

// maxEvents is how many events one epoll_pwait returns at most.
const maxEvents = 256

// Group is a set of shards, one per P unless told otherwise.
type Group struct {
	shards []*Shard
	wg     sync.WaitGroup
	once   sync.Once
}

// NewGroup starts n shards (n <= 0: GOMAXPROCS).
func NewGroup(n int) (*Group, error) {
	if n <= 0 {
		n = runtime.GOMAXPROCS(0)
	}
	g := &Group{}
	for i := range n {
		s, err := newShard(g, i)
		if err != nil {
			for _, s := range g.shards {
				s.closeFiles()
			}
			return nil, err
		}
		g.shards = append(g.shards, s)
	}
	for _, s := range g.shards {
		g.wg.Add(1)
		go s.run()
	}
	return g, nil
}

// Shards returns the group's shards; index i is the shard whose ID is i.
func (g *Group) Shards() []*Shard { return g.shards }

// Close stops every shard's goroutine once it has run the tasks posted before, and releases
// the epoll sets. Descriptors still registered are the handlers' to close before.
func (g *Group) Close() {
	g.once.Do(func() {
		for _, s := range g.shards {
			s.Post(stopTask{})
		}
		g.wg.Wait()
		for _, s := range g.shards {
			s.closeFiles()
		}
	})
}

type stopTask struct{}

func (stopTask) Run(s *Shard) { s.stopping = true }

// Shard is one event loop: an epoll set, its goroutine and what its handlers share.
type Shard struct {
	id     int
	g      *Group
	epfd   int
	ep     *os.File
	rc     syscall.RawConn
	efd    int // eventfd: wakes a sleeping shard for posts
	events [maxEvents]syscall.EpollEvent
	n      int
	wait   func(uintptr) bool

	slab []slabEntry
	free []uint32

	wheel  wheel
	now    int64
	armed  int64 // the tick the read deadline on ep is set for, or noDeadline, deadlinePassed
	later  []Handler
	laterB []Handler

	buf  []byte
	bufs bufPool

	mu       sync.Mutex // guards inbox, closed and the eventfd's closing
	closed   bool
	inbox    []Task
	spare    []Task
	pending  atomic.Int32 // inbox is not empty
	sleeping atomic.Int32 // the goroutine is (about to be) parked in the poller
	stopping bool

	// Wakes counts the returns from the poller and Timers the timers fired (read by tests
	// and metrics from any goroutine).
	Wakes, Fired atomic.Uint64
}

func newShard(g *Group, id int) (*Shard, error) {
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("epoll_create1", err)
	}
	if err := syscall.SetNonblock(epfd, true); err != nil {
		_ = syscall.Close(epfd)
		return nil, err
	}
	s := &Shard{id: id, g: g, epfd: epfd, armed: noDeadline, efd: -1}
	s.ep = os.NewFile(uintptr(epfd), "evloop-epoll")
	if s.rc, err = s.ep.SyscallConn(); err != nil {
		_ = s.ep.Close()
		return nil, err
	}
	r, _, e := syscall.RawSyscall(syscall.SYS_EVENTFD2, 0, syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if e != 0 {
		_ = s.ep.Close()
		return nil, os.NewSyscallError("eventfd2", e)
	}
	s.efd = int(r)
	// The eventfd is slab entry 0, whose handler drains it.
	s.slab = append(s.slab, slabEntry{})
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN | epollET}
	if err := syscall.EpollCtl(epfd, syscall.EPOLL_CTL_ADD, s.efd, &ev); err != nil {
		s.closeFiles()
		return nil, os.NewSyscallError("epoll_ctl", err)
	}
	s.buf = make([]byte, ReadBufSize)
	s.now = clock()
	s.wheel.init(s.now)
	s.wait = s.serve // one func value: a RawRead allocates nothing
	return s, nil
}

func (s *Shard) closeFiles() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.efd >= 0 {
		_ = syscall.Close(s.efd)
		s.efd = -1
	}
	_ = s.ep.Close()
}

// ID is the shard's index in its group.
func (s *Shard) ID() int { return s.id }

// Now is the shard's clock (monotonic nanoseconds), read once per wake-up.
func (s *Shard) Now() int64 { return s.now }

// Buf is the shard-wide read buffer. Its contents are valid until the next read into it on
// this shard: a handler consumes or copies what it read before it returns.
func (s *Shard) Buf() []byte { return s.buf }

// Add registers fd with the shard for h, edge-triggered for reads, writes and the peer's
// close; f records the registration. The descriptor must be non-blocking. f.Ready starts
// empty: the first events (a new socket is writable at once) fill it.
func (s *Shard) Add(f *FD, fd int, h Handler) error {
	var id uint32
	if n := len(s.free); n > 0 {
		id = s.free[n-1]
		s.free = s.free[:n-1]
	} else {
		id = uint32(len(s.slab))
		s.slab = append(s.slab, slabEntry{})
	}
	e := &s.slab[id]
	e.h, e.f = h, f
	f.Fd, f.Ready, f.id, f.gen, f.s = fd, 0, id, e.gen, s
	ev := syscall.EpollEvent{Events: epollConn}
	ev.Fd, ev.Pad = int32(id), int32(e.gen)
	if _, _, errno := syscall.RawSyscall6(syscall.SYS_EPOLL_CTL, uintptr(s.epfd), syscall.EPOLL_CTL_ADD, uintptr(fd), uintptr(unsafe.Pointer(&ev)), 0, 0); errno != 0 {
		s.forget(f)
		return os.NewSyscallError("epoll_ctl", errno)
	}
	return nil
}

// forget releases f's slot: later events for it are stale.
func (s *Shard) forget(f *FD) {
	if f.s != s {
		return
	}
	e := &s.slab[f.id]
	e.h, e.f, e.level = nil, nil, false
	e.gen++
	s.free = append(s.free, f.id)
	f.s = nil
}

// Close closes f's descriptor with a raw close(2), which takes it out of the epoll set, and
// forgets it. Closing twice does nothing.
func (f *FD) Close() {
	if f.s == nil {
		return
	}
	f.s.forget(f)
	_, _, _ = syscall.RawSyscall(syscall.SYS_CLOSE, uintptr(f.Fd), 0, 0)
	f.Fd, f.Ready = -1, 0
}

// Detach forgets f and takes its descriptor out of the epoll set without closing it, for a
// descriptor handed to another owner; the caller owns the descriptor from then on.
func (f *FD) Detach() int {
	s, fd := f.s, f.Fd
	if s == nil {
		return fd
	}
	_, _, _ = syscall.RawSyscall6(syscall.SYS_EPOLL_CTL, uintptr(s.epfd), syscall.EPOLL_CTL_DEL, uintptr(fd), 0, 0, 0)
	s.forget(f)
	f.Fd, f.Ready = -1, 0
	return fd
}

// Read reads into p with one raw recvfrom(2) (read(2) for a descriptor that is not a socket:
// recvfrom skips the file layer read goes through, which costs as much again as the
// call's own entry). It returns io.EOF at the end of the stream and
// ErrAgain when nothing is there (clearing Ready's Readable); a short read clears it too: the
// socket was drained, and bytes that arrive later raise a new edge. Unless the peer's close
// was reported (Hangup): its edge came already, and the end of the stream still waits behind
// the bytes read.
func (f *FD) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for {
		r, _, e := syscall.RawSyscall6(syscall.SYS_RECVFROM, uintptr(f.Fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)), 0, 0, 0)
		if e == syscall.ENOTSOCK {
			r, _, e = syscall.RawSyscall(syscall.SYS_READ, uintptr(f.Fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
		}
		switch e {
		case 0:
			if r == 0 {
				return 0, io.EOF
			}
			if int(r) < len(p) && f.Ready&Hangup == 0 {
				f.Ready &^= Readable
			}
			return int(r), nil
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			f.Ready &^= Readable
			return 0, ErrAgain
		}
		return 0, e
	}
}

// Write writes as much of p as the socket takes with raw sendto(2)s with MSG_NOSIGNAL (a
// closed peer is EPIPE, not a SIGPIPE to the thread; write(2) for a descriptor that is not a
// socket). A write that leaves some of p clears Ready's Writable (the socket is full; its next
// edge sets it); ErrAgain when nothing was taken.
func (f *FD) Write(p []byte) (int, error) {
	w := 0
	for w < len(p) {
		r, _, e := syscall.RawSyscall6(syscall.SYS_SENDTO, uintptr(f.Fd), uintptr(unsafe.Pointer(&p[w])), uintptr(len(p)-w), syscall.MSG_NOSIGNAL, 0, 0)
		if e == syscall.ENOTSOCK {
			r, _, e = syscall.RawSyscall(syscall.SYS_WRITE, uintptr(f.Fd), uintptr(unsafe.Pointer(&p[w])), uintptr(len(p)-w))
		}
		switch e {
		case 0:
			w += int(r)
			continue
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			f.Ready &^= Writable
			if w == 0 {
				return 0, ErrAgain
			}
			return w, nil
		}
		return w, e
	}
	return w, nil
}

// Writev writes a and then b with one writev(2) where it can, as Write does.
func (f *FD) Writev(a, b []byte) (int, error) {
	if len(a) == 0 {
		return f.Write(b)
	}
	if len(b) == 0 {
		return f.Write(a)
	}
	iov := [2]syscall.Iovec{{Base: &a[0]}, {Base: &b[0]}}
	iov[0].SetLen(len(a))
	iov[1].SetLen(len(b))
	for {
		r, _, e := syscall.RawSyscall(syscall.SYS_WRITEV, uintptr(f.Fd), uintptr(unsafe.Pointer(&iov[0])), 2)
		switch e {
		case 0:
			n := int(r)
			if n == len(a)+len(b) {
				return n, nil
			}
			// Short: the socket is full (or nearly); finish with plain writes.
			var m int
			var err error
			if n < len(a) {
				m, err = f.Write(a[n:])
				if err == nil && n+m == len(a) {
					var k int
					k, err = f.Write(b)
					m += k
				}
			} else {
				m, err = f.Write(b[n-len(a):])
			}
			if err == ErrAgain {
				err = nil
			}
			return n + m, err
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			f.Ready &^= Writable
			return 0, ErrAgain
		}
		return 0, e
	}
}

// ShutdownWrite shuts down the writing side (a FIN to the peer) with a raw shutdown(2).
func (f *FD) ShutdownWrite() {
	_, _, _ = syscall.RawSyscall(syscall.SYS_SHUTDOWN, uintptr(f.Fd), syscall.SHUT_WR, 0)
}

// PeerGone peeks, without blocking, whether the peer closed or reset the connection or sent
// bytes nobody asked for (one raw recvfrom with MSG_PEEK).
func (f *FD) PeerGone() bool {
	var b [1]byte
	for {
		_, _, e := syscall.RawSyscall6(syscall.SYS_RECVFROM, uintptr(f.Fd), uintptr(unsafe.Pointer(&b[0])), 1,
			syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
		switch e {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		return true // bytes, the end of the stream or an error
	}
}

// Later has the shard call h.Event(Deferred) after the events of the current wake-up; a
// handler uses it to continue work it stopped (a pipelined request, a resumed stream)
// without recursion. It is not deduplicated.
func (s *Shard) Later(h Handler) { s.later = append(s.later, h) }

// Arm sets t to fire at deadline at (shard clock), moving it if it is armed.
func (s *Shard) Arm(t *Timer, at int64) { s.wheel.arm(t, at) }

// Stop disarms t.
func (s *Shard) Stop(t *Timer) { s.wheel.stop(t) }

// GetBuf returns an empty buffer with capacity at least n from the shard's pool.
func (s *Shard) GetBuf(n int) []byte { return s.bufs.get(n) }

// PutBuf gives b back to the shard's pool.
func (s *Shard) PutBuf(b []byte) { s.bufs.put(b) }

// BufStats reports the buffers the shard's pool handed out and how many it had to allocate;
// on the shard's goroutine only.
func (s *Shard) BufStats() (gets, misses uint64) { return s.bufs.gets, s.bufs.misses }

// Post queues t to run on the shard; safe for concurrent use, and allocation-free once the
// inbox has grown to the posts of one wake-up. A task posted after the group closed is
// dropped.
func (s *Shard) Post(t Task) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.inbox = append(s.inbox, t)
	s.pending.Store(1)
	if s.sleeping.Load() == 1 && s.sleeping.CompareAndSwap(1, 0) {
		one := uint64(1)
		_, _, _ = syscall.RawSyscall(syscall.SYS_WRITE, uintptr(s.efd), uintptr(unsafe.Pointer(&one)), 8)
	}
}

// serve is the callback of rc.Read, and the shard's loop: it serves batches of events while
// there may be more, and reports false (park until the set is readable) once a look finds
// the set empty or a batch may have been the last. It stays in one RawRead of the epoll set
// between batches, so that the readiness the runtime's poller reports while a batch is served
// is kept (a new RawRead would reset it): after a batch the shard parks without a further
// epoll_pwait, which would mostly find nothing. That is safe because the set waits in the
// runtime's poller edge-triggered and every event added to the set after the shard's last
// epoll_pwait raises a new edge. Two cases do not: a level-triggered socket (a listener) still
// ready goes back on the set's ready list without one, and a batch that filled the events may
// have left events behind; after either the shard looks again before it parks. Before it
// parks it marks itself sleeping and serves what was posted meanwhile (Post writes the
// eventfd only to a sleeping shard). An epoll_pwait error other than EINTR and EAGAIN, and the
// stop task, end the RawRead (true).
func (s *Shard) serve(fd uintptr) bool {
	for {
		r, _, e := syscall.RawSyscall6(syscall.SYS_EPOLL_PWAIT, fd, uintptr(unsafe.Pointer(&s.events[0])), maxEvents, 0, 0, 0)
		switch {
		case e == syscall.EINTR:
			continue
		case e != 0 && e != syscall.EAGAIN:
			return true // the set is broken: let run see it
		case e == 0 && r > 0:
			s.sleeping.Store(0)
			s.n = int(r)
			s.now = clock()
			s.Wakes.Add(1)
			level := s.dispatch()
			s.turn()
			if s.stopping {
				return true
			}
			if level || s.n == maxEvents {
				continue
			}
		}
		s.sleeping.Store(1)
		if s.pending.Load() == 0 {
			return false
		}
		s.sleeping.Store(0)
		s.n = 0
		s.now = clock()
		s.turn()
		if s.stopping {
			return true
		}
	}
}

// turn runs what follows a batch of events: the deferred handlers, the posted tasks, the
// timers due, and the epoll descriptor's read deadline for the next one.
func (s *Shard) turn() {
	s.runLater()
	if s.pending.Load() != 0 {
		s.drainInbox()
		s.runLater()
	}
	if f := s.wheel.advance(s.now); f > 0 {
		s.Fired.Add(uint64(f))
		s.runLater()
	}
	s.armDeadline()
}

// run serves the shard until the stop task: rc.Read returns when serve ends it or when the
// read deadline (the next timer) passes, whose turn then runs here.
func (s *Shard) run() {
	defer s.g.wg.Done()
	for !s.stopping {
		err := s.rc.Read(s.wait)
		s.sleeping.Store(0)
		if err == nil {
			continue
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			return // the epoll set was closed
		}
		s.armed = deadlinePassed // it stays set, in the past, until armDeadline moves it
		s.n = 0
		s.now = clock()
		s.Wakes.Add(1)
		s.turn()
	}
}

// dispatch hands a batch of events to their handlers; it reports whether a level-triggered
// descriptor (a listener) was among them.
func (s *Shard) dispatch() (level bool) {
	for i := 0; i < s.n; i++ {
		ev := &s.events[i]
		id, gen := uint32(ev.Fd), uint32(ev.Pad)
		if id == 0 { // the eventfd: reset it; the inbox is drained below
			var v uint64
			_, _, _ = syscall.RawSyscall(syscall.SYS_READ, uintptr(s.efd), uintptr(unsafe.Pointer(&v)), 8)
			continue
		}
		if int(id) >= len(s.slab) {
			continue
		}
		e := &s.slab[id]
		if e.gen != gen || e.h == nil {
			continue // closed since the event was fetched
		}
		var r Events
		m := ev.Events
		if m&(syscall.EPOLLIN|syscall.EPOLLRDHUP|syscall.EPOLLHUP|syscall.EPOLLERR) != 0 {
			r |= Readable
		}
		if m&(syscall.EPOLLOUT|syscall.EPOLLHUP|syscall.EPOLLERR) != 0 {
			r |= Writable
		}
		if m&(syscall.EPOLLRDHUP|syscall.EPOLLHUP|syscall.EPOLLERR) != 0 {
			r |= Hangup
		}
		level = level || e.level
		e.f.Ready |= r
		e.h.Event(r)
	}
	return level
}

func (s *Shard) runLater() {
	for len(s.later) > 0 {
		batch := s.later
		s.later = s.laterB[:0]
		for i, h := range batch {
			batch[i] = nil
			h.Event(Deferred)
		}
		s.laterB = batch[:0]
	}
}

func (s *Shard) drainInbox() {
	s.mu.Lock()
	tasks := s.inbox
	s.inbox = s.spare[:0]
	s.pending.Store(0)
	s.mu.Unlock()
	for i, t := range tasks {
		tasks[i] = nil
		t.Run(s)
	}
	s.spare = tasks[:0]
}

// armDeadline sets the read deadline of the epoll descriptor to the next slot of the wheel
// that holds a timer, when that changed.
func (s *Shard) armDeadline() {
	next, ok := s.wheel.next()
	if !ok {
		if s.armed != noDeadline {
			_ = s.ep.SetReadDeadline(time.Time{})
			s.armed = noDeadline
		}
		return
	}
	if next == s.armed {
		return
	}
	s.armed = next
	_ = s.ep.SetReadDeadline(Time(next << TickShift))
}
