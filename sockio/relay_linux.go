//go:build linux

package sockio

import (
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// Relay forwards between pairs of TCP connections without a goroutine per pair: a few shards,
// each one epoll set and one goroutine, move short exchanges with raw non-blocking reads and
// writes, and hand a pair over to Pipe's goroutines once it turns out to need them.
//
// Why: Pipe costs two goroutines per pair, each parking in the runtime's poller between
// bursts (a wake-up, a deadline update and often a read that finds nothing, per burst), and
// their stacks stay while the pair is idle. For short connections that scheduling was most of
// the proxy's own CPU. A shard serves every ready socket of one epoll_wait in turn, and an
// idle pair costs its two sockets and a map entry. The pairs' sockets are edge-triggered: a
// read shorter than the buffer took all the socket held (a TCP read copies its whole receive
// queue), so the next bytes or the end bring a new event; an event that reports the end
// (EPOLLRDHUP, EPOLLHUP, EPOLLERR) is read until the end itself. A socket whose end was passed
// on thus stays in the set without being reported again, and costs no epoll_ctl to leave it.
//
// A shard reads at most bufSize bytes at a time and writes them on at once, and reads again
// while reads fill the buffer, up to relayBurst reads (a response of a few tens of kilobytes
// stays in the shard). A source that still has bytes after that (a bulk transfer: splice does
// it better) or a write the destination cannot take whole (a slow receiver: the pair must
// wait, which a shard must not) hands the pair, with the bytes not yet written, to Pipe's
// goroutines for the rest of its life. Pipe's semantics hold
// throughout: a FIN is passed on as a half-close and the other direction keeps flowing, an
// error in either direction ends the pair, and the idle timeout closes a pair that moved no
// byte either way for that long (a sweep each pollEvery: at most that late).
type Relay struct {
	shards []*relayShard
	next   atomic.Uint32 // round robin over shards
	homes  atomic.Uint32 // round robin of the listeners' home shards (Listen)
}

type relayShard struct {
	epfd int
	ep   *os.File // epfd in the runtime's network poller
	rc   syscall.RawConn

	mu        sync.Mutex // guards flows, listeners, next, swept and free; taken per Forward and once per epoll_pwait
	flows     map[uint64]*relayFlow
	listeners map[uint64]*RelayListener // sockets the shard accepts from (Listen)
	next      uint64
	swept     bool // a sweep deadline is armed on ep (some flow has an idle timeout)

	// free holds flows the shard ended, for Forward to reuse (under mu); ended collects those
	// of the running batch, freed once the batch is over (its events may still name them).
	free  []*relayFlow
	ended []*relayFlow

	handedOver atomic.Uint64 // pairs given to Pipe's goroutines (tests read it)
	index      int           // in the Relay's shards
	open       atomic.Int64  // pairs waiting in the shard
}

type relayFlow struct {
	RelayFlow
	id    uint64
	fd    [2]int          // A's and B's descriptors: open until the flow ends (Forward's contract)
	ended [2]bool         // direction d (reading side d) has passed its FIN on
	last  int64           // unix nanoseconds of the last byte moved either way
	over  bool            // ended or handed over: later events in the same batch are stale
	conns [2]*net.TCPConn // Pipe's duplicates of A and B, once handed over
	res   RelayResult     // written by whoever runs the pair (a shard, then Pipe's goroutines)
}

// NewRelay starts a Relay with one shard per P. If the system refuses an epoll set, the Relay
// runs every pair in Pipe's goroutines instead.
func NewRelay() *Relay { return newRelay(runtime.GOMAXPROCS(0)) }

// newRelay starts a Relay with n shards (tests choose n).
func newRelay(n int) *Relay {
	r := &Relay{}
	for range n {
		s, err := newRelayShard()
		if err != nil {
			break
		}
		r.shards = append(r.shards, s)
	}
	for i, s := range r.shards {
		s.index = i
		go s.run()
	}
	return r
}

func newRelayShard() (*relayShard, error) {
	epfd, ep, rc, err := openEpoll("relay-epoll")
	if err != nil {
		return nil, err
	}
	return &relayShard{epfd: epfd, ep: ep, rc: rc, flows: make(map[uint64]*relayFlow)}, nil
}

// Forward hands f.A and f.B to the relay, which owns them from now on: nobody else may read,
// write or close them (Shutdown is allowed: the relay sees it as the end of both directions)
// until Done has run, after which the relay closes them.
func (r *Relay) Forward(f RelayFlow) {
	if len(r.shards) == 0 {
		go newRelayFlow(f).pipeAll(f.Prefix, 0, nil)
		return
	}
	var s *relayShard
	if i := f.Shard.i; i > 0 && i <= len(r.shards) {
		s = r.shards[i-1]
	} else {
		s = r.shards[r.next.Add(1)%uint32(len(r.shards))]
	}
	var fl *relayFlow
	if len(f.Prefix) > 0 {
		fl = newRelayFlow(f)
		w, err := Write(f.B, f.Prefix)
		if err != nil {
			fl.fail(1, errnoOf(err))
			go fl.finish(false)
			return
		}
		if w < len(f.Prefix) { // the backend cannot take it all yet: Pipe waits
			go fl.pipeAll(f.Prefix[w:], 0, nil)
			return
		}
	}
	// The client has mostly sent its first bytes by now (a request right after its connect,
	// before the accept and the connect to the backend): move them before the pair joins the
	// set. Added later, the readable socket would put itself on the set's ready list, raise an
	// edge in the runtime's poller and cost the shard another round and a wake-up. A client
	// that has sent nothing (a protocol where the server speaks first) costs one read that
	// finds EAGAIN.
	var early [earlyRead]byte
	moved, endA := 0, false
	r0, _, e := syscall.RawSyscall(syscall.SYS_READ, uintptr(f.A), uintptr(unsafe.Pointer(&early[0])), earlyRead)
	switch {
	case e == syscall.EAGAIN || e == syscall.EINTR:
	case e != 0: // reset, or the like: the pair ends
		if fl == nil {
			fl = newRelayFlow(f)
		}
		fl.fail(0, e)
		go fl.finish(false)
		return
	case r0 == 0:
		endA = true
		_, _, _ = syscall.RawSyscall(syscall.SYS_SHUTDOWN, uintptr(f.B), syscall.SHUT_WR, 0)
	default:
		got := int(r0)
		w, err := Write(f.B, early[:got])
		if w > 0 && f.AB != nil {
			f.AB.Add(uint64(w))
		}
		if err != nil || w < got {
			if fl == nil {
				fl = newRelayFlow(f)
			}
			fl.res.Moved[0] += uint64(w)
			if err != nil {
				fl.fail(1, errnoOf(err))
				go fl.finish(false)
			} else { // the backend cannot take it all yet: Pipe waits
				go fl.pipeAll(nil, 0, append([]byte(nil), early[w:got]...))
			}
			return
		}
		moved = got
	}
	s.mu.Lock()
	if fl == nil {
		if k := len(s.free); k > 0 {
			fl = s.free[k-1]
			s.free[k-1] = nil
			s.free = s.free[:k-1]
			fl.init(f)
		} else {
			fl = newRelayFlow(f)
		}
	}
	fl.res.Moved[0] += uint64(moved)
	if endA {
		fl.ended[0] = true
		fl.res.FirstFIN = 0
	}
	fl.id = s.next
	s.next++
	s.flows[fl.id] = fl
	s.open.Add(1)
	if f.Idle > 0 && !s.swept { // the shard sleeps without a sweep: arm one
		s.swept = true
		_ = s.ep.SetReadDeadline(time.Now().Add(pollEvery))
	}
	// Both sides join the set under mu: the shard finds the flow by its events only under mu,
	// so it cannot serve (and end, and reuse) the flow before its second side is in.
	for d := range 2 {
		if err := s.ctl(syscall.EPOLL_CTL_ADD, fl, d); err != nil {
			delete(s.flows, fl.id)
			s.open.Add(-1)
			if d == 1 {
				_ = s.ctl(syscall.EPOLL_CTL_DEL, fl, 0)
			}
			s.mu.Unlock()
			go fl.finish(false)
			return
		}
	}
	s.mu.Unlock()
}

func newRelayFlow(f RelayFlow) *relayFlow {
	fl := new(relayFlow)
	fl.init(f)
	return fl
}

// init makes fl f's flow, as new.
func (fl *relayFlow) init(f RelayFlow) {
	*fl = relayFlow{RelayFlow: f, fd: [2]int{f.A, f.B}, last: time.Now().UnixNano(), res: RelayResult{Failed: -1, FirstFIN: -1}}
}

// earlyRead bounds the client bytes Forward moves before the pair joins a shard's set (on the
// caller's stack; what does not fit follows through the set).
const earlyRead = 2048

// relayFree bounds the ended flows a shard keeps for reuse.
const relayFree = 256

// release keeps the flows ended since the last release for reuse (the shard's goroutine calls
// it once no event of the batch that ended them can name them any more).
func (s *relayShard) release() {
	if len(s.ended) == 0 {
		return
	}
	for _, fl := range s.ended {
		*fl = relayFlow{} // drop what it pointed to
	}
	s.mu.Lock()
	n := min(len(s.ended), relayFree-len(s.free))
	s.free = append(s.free, s.ended[:max(n, 0)]...)
	s.mu.Unlock()
	clear(s.ended)
	s.ended = s.ended[:0]
}

// epollET is EPOLLET as the uint32 an EpollEvent holds (the syscall package's is negative).
const epollET = 1 << 31

// ctl adds side d of fl to the shard's set, or deletes it. The event's data is the flow's id
// and the side.
func (s *relayShard) ctl(op int, fl *relayFlow, d int) error {
	key := fl.id<<1 | uint64(d)
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLRDHUP | epollET}
	ev.Fd, ev.Pad = int32(uint32(key)), int32(uint32(key>>32))
	_, _, e := syscall.RawSyscall6(syscall.SYS_EPOLL_CTL, uintptr(s.epfd), uintptr(op), uintptr(fl.fd[d]), uintptr(unsafe.Pointer(&ev)), 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

// run serves the shard's events until the process ends. It stays in one RawRead of the epoll
// set between sweeps, so that the readiness the runtime's poller reports while a batch is
// served is kept (a new RawRead would reset it): after a batch the shard parks without a
// further epoll_pwait, which would mostly find nothing. That is safe because the set waits in
// the runtime's poller edge-triggered and every event added to the set after the shard's last
// epoll_pwait raises a new edge. Two cases do not: a level-triggered socket (a listener) that
// is still ready goes back on the set's ready list without one, and a batch that filled the
// events may have left events behind; after either the shard looks again before it parks.
func (s *relayShard) run() {
	l := &shardLoop{s: s, events: make([]syscall.EpollEvent, 128), buf: make([]byte, bufSize)}
	l.ready = make([]*relayFlow, 0, len(l.events))
	l.sides = make([]int, 0, len(l.events))
	l.masks = make([]uint32, 0, len(l.events))
	wait := l.wait // one func value: a RawRead allocates nothing
	for {
		if err := s.rc.Read(wait); err != nil {
			s.sweep() // the sweep deadline passed
		}
	}
}

// shardLoop is a shard's goroutine's state: the epoll_pwait results and the buffer every
// pair's bytes pass through.
type shardLoop struct {
	s       *relayShard
	events  []syscall.EpollEvent
	ready   []*relayFlow
	sides   []int
	masks   []uint32
	accepts []*RelayListener
	buf     []byte
	round   uint64 // epoll_pwait calls, for the listeners' streaks
}

// wait is the shard's RawRead function: it serves batches while there may be more, and
// reports false (park until the set is readable) once the set is found empty or a batch may
// be the last. An epoll_pwait error other than EINTR and EAGAIN ends the RawRead (true).
func (l *shardLoop) wait(fd uintptr) bool {
	for {
		r, _, e := syscall.RawSyscall6(syscall.SYS_EPOLL_PWAIT, fd, uintptr(unsafe.Pointer(&l.events[0])), uintptr(len(l.events)), 0, 0, 0)
		l.round++
		switch {
		case e == syscall.EINTR:
			continue
		case e == syscall.EAGAIN:
			return false
		case e != 0:
			return true
		case r == 0:
			return false
		}
		n := int(r)
		level := l.serve(n)
		if !level && n < len(l.events) {
			return false
		}
	}
}

// serve serves a batch of n events: the listeners' first, then the pairs'. It reports whether
// a listener was among them (level-triggered: it may still be ready).
func (l *shardLoop) serve(n int) bool {
	s := l.s
	l.ready, l.sides, l.masks, l.accepts = l.ready[:0], l.sides[:0], l.masks[:0], l.accepts[:0]
	s.mu.Lock()
	for _, ev := range l.events[:n] {
		key := uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32
		if fl := s.flows[key>>1]; fl != nil {
			l.ready = append(l.ready, fl)
			l.sides = append(l.sides, int(key&1))
			l.masks = append(l.masks, ev.Events)
		} else if ln := s.listeners[key>>1]; ln != nil {
			l.accepts = append(l.accepts, ln)
		}
	}
	s.mu.Unlock()
	level := len(l.accepts) > 0
	for _, ln := range l.accepts {
		ln.accept(s.index, l.round)
	}
	clear(l.accepts)
	now := time.Now().UnixNano() // the activity stamp of every pair served in this batch
	for i, fl := range l.ready {
		if !fl.over {
			s.serve(fl, l.sides[i], l.masks[i], l.buf, now)
		}
	}
	clear(l.ready)
	s.release()
	return level
}

// relayBurst bounds the buffer-filling reads one wake-up of a pair may take in the shard
// (4 × bufSize = 64 KiB) before the pair counts as a bulk transfer.
const relayBurst = 4

// serve moves what side d of fl has to the other side; ev is the side's event.
func (s *relayShard) serve(fl *relayFlow, d int, ev uint32, buf []byte, now int64) {
	if fl.ended[d] {
		return // its end was passed on (a reset after it shows in the other direction's writes)
	}
	toEnd := ev&(syscall.EPOLLRDHUP|syscall.EPOLLHUP|syscall.EPOLLERR) != 0
	for range relayBurst {
		if !s.serveOnce(fl, d, buf, toEnd, now) {
			return
		}
	}
	s.handOver(fl, d, nil) // still more: a bulk transfer
}

// serveOnce moves up to one buffer from side d of fl to the other side; true when the other
// side took it all and there may be more: the read filled the buffer, or toEnd says the end
// follows the bytes read.
func (s *relayShard) serveOnce(fl *relayFlow, d int, buf []byte, toEnd bool, now int64) bool {
	src, dst := fl.fd[d], fl.fd[1-d]
	var r uintptr
	var e syscall.Errno
	for {
		r, _, e = syscall.RawSyscall(syscall.SYS_READ, uintptr(src), uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)))
		if e != syscall.EINTR {
			break
		}
	}
	switch {
	case e == syscall.EAGAIN:
		return false
	case e != 0: // reset, or the like: the pair ends
		fl.fail(d, e)
		s.end(fl, false)
		return false
	case r == 0: // end of stream: pass the FIN on, keep the other direction
		if fl.res.FirstFIN < 0 {
			fl.res.FirstFIN = d
		}
		fl.ended[d] = true
		if fl.ended[1-d] {
			// Both streams have ended and both sockets have nothing left to read: the close
			// that follows (raw, like every call here) sends dst's FIN itself.
			s.end(fl, false) // closing takes both sockets out of the set
			return false
		}
		_, _, _ = syscall.RawSyscall(syscall.SYS_SHUTDOWN, uintptr(dst), syscall.SHUT_WR, 0)
		return false
	}
	got := int(r)
	w := 0
	for w < got {
		r, _, e = syscall.RawSyscall(syscall.SYS_WRITE, uintptr(dst), uintptr(unsafe.Pointer(&buf[w])), uintptr(got-w))
		if e == syscall.EINTR {
			continue
		}
		if e != 0 {
			break
		}
		w += int(r)
	}
	if w > 0 {
		fl.last = now
		fl.res.Moved[d] += uint64(w)
		if c := fl.counter(d); c != nil {
			c.Add(uint64(w))
		}
	}
	switch {
	case e != 0 && e != syscall.EAGAIN:
		fl.fail(1-d, e)
		s.end(fl, false)
	case w < got:
		s.handOver(fl, d, buf[w:got])
	default:
		return got == len(buf) || toEnd
	}
	return false
}

func (fl *relayFlow) counter(d int) *atomic.Uint64 {
	if d == 0 {
		return fl.AB
	}
	return fl.BA
}

// forget takes fl out of the shard; its later events are stale.
func (s *relayShard) forget(fl *relayFlow) {
	fl.over = true
	s.mu.Lock()
	delete(s.flows, fl.id)
	s.mu.Unlock()
	s.open.Add(-1)
}

// end closes the pair and runs Done; closing the sockets takes them out of the epoll set.
// The flow is reused once the shard releases it.
func (s *relayShard) end(fl *relayFlow, idled bool) {
	s.forget(fl)
	fl.finish(idled)
	s.ended = append(s.ended, fl)
}

// fail records that side d failed with e, unless a side already did.
func (fl *relayFlow) fail(d int, e syscall.Errno) {
	if fl.res.Failed < 0 {
		fl.res.Failed, fl.res.Errno = d, e
	}
}

func (fl *relayFlow) finish(idled bool) {
	fl.res.Idled = idled
	if fl.Result != nil {
		*fl.Result = fl.res
	}
	if fl.Resets && fl.res.Failed >= 0 {
		// The failed side is gone; its peer learns it from a reset of the other side.
		lingerZero(fl.fd[1-fl.res.Failed])
	}
	fl.Done(idled)
	for _, c := range fl.conns {
		if c != nil {
			_ = c.Close()
		}
	}
	Close(fl.A)
	Close(fl.B)
}

// handOver gives fl to Pipe's goroutines, with pending (the bytes read from side d that its
// destination has not taken) to write first.
func (s *relayShard) handOver(fl *relayFlow, d int, pending []byte) {
	s.handedOver.Add(1)
	s.forget(fl)
	for side := range 2 {
		_ = s.ctl(syscall.EPOLL_CTL_DEL, fl, side)
	}
	go fl.pipeAll(nil, d, append([]byte(nil), pending...))
}

// pipeAll runs fl in Pipe's goroutines until it ends, writing prefix to B and pending (read
// from side d) to the other side first. Pipe waits in the runtime's poller, so it works on
// duplicates of the descriptors.
func (fl *relayFlow) pipeAll(prefix []byte, d int, pending []byte) {
	for side := range 2 {
		c, err := netConn(fl.fd[side])
		if err != nil {
			fl.finish(false)
			return
		}
		fl.conns[side] = c
	}
	ps := &pipeState{c: fl.conns, idle: fl.Idle, ended: fl.ended, fd: fl.fd, failed: -1}
	ps.prefix[0] = prefix
	ps.pending[d] = pending
	idled := ps.run(fl.AB, fl.BA)
	fl.res.Moved[0] += ps.moved[0]
	fl.res.Moved[1] += ps.moved[1]
	if ps.failed >= 0 {
		fl.fail(ps.failed, ps.errno)
	}
	if fl.res.FirstFIN < 0 {
		fl.res.FirstFIN = ps.firstFIN
	}
	fl.finish(idled)
}

// lingerZero makes the next close of fd send a reset (SO_LINGER on, 0 seconds).
func lingerZero(fd int) {
	l := syscall.Linger{Onoff: 1, Linger: 0}
	_, _, _ = syscall.RawSyscall6(syscall.SYS_SETSOCKOPT, uintptr(fd), syscall.SOL_SOCKET, syscall.SO_LINGER, uintptr(unsafe.Pointer(&l)), unsafe.Sizeof(l), 0)
}

// sweep ends the flows idle for their timeout and arms the next sweep while any flow has a
// timeout.
func (s *relayShard) sweep() {
	now := time.Now().UnixNano()
	var idle []*relayFlow
	timed := false
	s.mu.Lock()
	for _, fl := range s.flows {
		if fl.Idle <= 0 {
			continue
		}
		if now-fl.last >= int64(fl.Idle) {
			idle = append(idle, fl)
		} else {
			timed = true
		}
	}
	s.swept = timed
	if timed {
		_ = s.ep.SetReadDeadline(time.Now().Add(pollEvery))
	} else {
		_ = s.ep.SetReadDeadline(time.Time{})
	}
	s.mu.Unlock()
	for _, fl := range idle {
		s.end(fl, true)
	}
	s.release()
}
