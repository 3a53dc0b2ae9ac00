//go:build linux

package sockio

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// chunk is the most one ReadFrom moves before the copy loop records activity and renews the
// deadlines; it also bounds the bytes a splice holds in its pipe.
const chunk = 256 << 10

var errIdle = errors.New("idle timeout")

// pipeTCP is Pipe between two TCP connections: splice(2) for bulk, a pooled buffer for short
// exchanges, and the idle timeout.
//
// Idle detection under splice: each direction renews its read deadline before every ReadFrom
// of at most chunk bytes, so a direction waiting to read returns at least once per idle period,
// with the bytes it moved. A direction whose period passed without a byte marks itself quiet;
// if the other direction's last recorded byte is also older than the timeout, it interrupts
// the other (read deadline now) so that the other reports what it moved meanwhile; the
// connection closes when both are quiet and neither moved a byte within the timeout. No write
// deadline is ever set, because a write timing out inside splice would drop the bytes held in
// its pipe; a direction stuck writing to a receiver that does not read does not answer the
// interruption, and when it has not returned a whole period after it, the connection closes
// as idle too (nothing was delivered for the timeout).
func pipeTCP(a, b *net.TCPConn, idle time.Duration, ab, ba *atomic.Uint64) bool {
	return (&pipeState{c: [2]*net.TCPConn{a, b}, idle: idle, fd: [2]int{-1, -1}, failed: -1, firstFIN: -1}).run(ab, ba)
}

// run copies the directions that have not ended, b → a in a second goroutine, and reports
// whether the connection closed as idle.
func (s *pipeState) run(ab, ba *atomic.Uint64) bool {
	now := time.Now().UnixNano()
	s.last[0].Store(now)
	s.last[1].Store(now)
	var errc chan error
	if !s.ended[1] {
		errc = make(chan error, 1)
		go func() { // b → a
			err := s.copy(1, ba)
			if err != nil {
				s.abort()
			}
			errc <- err
		}()
	} else {
		s.quiet[1].Store(true)
	}
	if err := s.copy(0, ab); err != nil { // a → b
		s.abort()
	}
	if errc != nil {
		<-errc
	}
	return s.idled.Load()
}

type pipeState struct {
	c     [2]*net.TCPConn // direction d copies c[d] → c[1-d]
	idle  time.Duration
	last  [2]atomic.Int64 // unix nanoseconds of the last ReadFrom that moved bytes
	quiet [2]atomic.Bool  // the direction's last period moved nothing, or it has ended
	// rounds counts each direction's returns from ReadFrom; poked is the other direction's
	// rounds when this one last interrupted it, +1 (0 = no interruption pending).
	rounds [2]atomic.Uint64
	poked  [2]uint64 // owned by the direction's goroutine
	idled  atomic.Bool
	// ended and pending are how a Relay hands a flow over: a direction that has already
	// passed its FIN on, and bytes read that its destination has yet to take. prefix is
	// written before pending and not counted (RelayFlow.Prefix).
	ended   [2]bool
	prefix  [2][]byte
	pending [2][]byte
	// For a Relay's RelayResult: the pair's raw descriptors (-1 when unknown), the side that
	// failed first and how, the side whose FIN came first (under mu), and the bytes each
	// direction moved (moved[d] is written by direction d's goroutine only).
	fd       [2]int
	mu       sync.Mutex
	failed   int
	errno    syscall.Errno
	firstFIN int
	moved    [2]uint64
}

// fail records that side d failed with err, unless a side already did.
func (s *pipeState) fail(d int, err error) {
	s.mu.Lock()
	if s.failed < 0 {
		s.failed, s.errno = d, errnoOf(err)
	}
	s.mu.Unlock()
}

func (s *pipeState) fin(d int) {
	s.mu.Lock()
	if s.firstFIN < 0 {
		s.firstFIN = d
	}
	s.mu.Unlock()
}

// spliceSide tells which side of direction d's splice failed: the source when the kernel has
// closed it (a reset), else the destination.
func (s *pipeState) spliceSide(d int) int {
	if fd := s.fd[d]; fd >= 0 {
		if st, err := unix.GetsockoptTCPInfo(fd, unix.IPPROTO_TCP, unix.TCP_INFO); err == nil && st.State == 7 { // TCP_CLOSE
			return d
		}
	}
	return 1 - d
}

// abort closes both connections, which ends the other direction's copy at once.
func (s *pipeState) abort() {
	_ = s.c[0].Close()
	_ = s.c[1].Close()
}

// copy runs direction d to its end: nil after EOF (passed on as a FIN), an error otherwise.
//
// Between bursts a direction waits for its source to become readable holding neither a pipe
// nor a buffer (syscall.RawConn.Read), so an idle connection costs two sockets and two parked
// goroutines. A wake-up reads up to bufSize bytes into a pooled buffer and writes them on
// (short exchanges: one read, one write); a read that fills the buffer means a bulk transfer,
// and the next rounds splice(2) exactly the bytes the socket holds (FIONREAD, at most chunk),
// so that a splice never waits for data with a pipe in hand.
func (s *pipeState) copy(d int, bytes *atomic.Uint64) error {
	src, dst, o := s.c[d], s.c[1-d], 1-d
	rc, err := src.SyscallConn()
	if err != nil {
		return err
	}
	lr := io.LimitedReader{R: src}
	defer s.quiet[d].Store(true)
	if s.ended[d] {
		return nil
	}
	if p := s.prefix[d]; len(p) > 0 {
		s.prefix[d] = nil
		if _, err := dst.Write(p); err != nil {
			s.fail(o, err)
			return err
		}
		s.last[d].Store(time.Now().UnixNano())
	}
	if p := s.pending[d]; len(p) > 0 {
		s.pending[d] = nil
		n, err := dst.Write(p)
		if n > 0 && bytes != nil {
			bytes.Add(uint64(n))
		}
		s.moved[d] += uint64(max(n, 0))
		s.last[d].Store(time.Now().UnixNano())
		if err != nil {
			s.fail(o, err)
			return err
		}
	}
	var (
		bulk  bool    // the last read filled the buffer: splice what is queued next
		queue int     // bytes queued on the socket (bulk rounds)
		bufp  *[]byte // the round's buffer (buffered rounds)
		got   int
		rerr  error
	)
	wake := func(fd uintptr) bool {
		if bulk {
			queue, rerr = unix.IoctlGetInt(int(fd), unix.SIOCINQ)
			if rerr == nil && queue > 0 {
				return true
			}
			bulk = false // nothing queued: read, which tells EOF from "wait"
		}
		bufp = bufPool.Get().(*[]byte)
		for {
			got, rerr = syscall.Read(int(fd), *bufp)
			if rerr != syscall.EINTR {
				break
			}
		}
		if rerr == syscall.EAGAIN {
			bufPool.Put(bufp)
			bufp = nil
			return false // wait for readability, within the read deadline
		}
		return true
	}
	for {
		var deadline time.Time // none without an idle timeout
		if s.idle > 0 {
			deadline = time.Now().Add(s.idle)
		}
		_ = src.SetReadDeadline(deadline)
		bufp, got = nil, 0
		err := rc.Read(wake)
		var n int64
		eof := false
		side := -1 // the side an error came from
		switch {
		case err != nil: // the deadline, or the connection closed
		case rerr != nil:
			err, side = rerr, d
		case bufp != nil:
			eof = got == 0
			if got > 0 {
				var w int
				w, err = dst.Write((*bufp)[:got])
				n = int64(w)
				bulk = got == len(*bufp)
				side = o
			}
		default:
			lr.N = int64(min(queue, chunk))
			n, err = dst.ReadFrom(&lr) // *net.TCPConn ← LimitedReader{*net.TCPConn}: splice(2)
			if err != nil {
				side = s.spliceSide(d)
			}
		}
		if bufp != nil {
			bufPool.Put(bufp)
		}
		s.rounds[d].Add(1)
		now := time.Now().UnixNano()
		if n > 0 {
			if bytes != nil {
				bytes.Add(uint64(n))
			}
			s.moved[d] += uint64(n)
			s.last[d].Store(now)
			s.quiet[d].Store(false)
		}
		switch {
		case eof: // end of stream: pass the FIN on
			s.fin(d)
			_ = dst.CloseWrite()
			return nil
		case err == nil:
		case !errors.Is(err, os.ErrDeadlineExceeded):
			if side >= 0 && !errors.Is(err, net.ErrClosed) {
				s.fail(side, err)
			}
			return err
		case n > 0:
		case s.idled.Load():
			return errIdle
		default:
			s.quiet[d].Store(true)
			idleSince := now - int64(s.idle)
			if s.last[o].Load() > idleSince || s.last[d].Load() > idleSince {
				continue
			}
			if s.quiet[o].Load() || s.poked[d] == s.rounds[o].Load()+1 {
				s.idled.Store(true) // both quiet, or the other is stuck writing
				return errIdle
			}
			// Ask the other direction to report what it moved since its deadline.
			s.poked[d] = s.rounds[o].Load() + 1
			_ = s.c[o].SetReadDeadline(time.Now())
		}
	}
}

// bufSize is the buffer of a short exchange (HAProxy's default bufsize); a read that fills it
// switches the direction to splice.
const bufSize = 16 << 10

var bufPool = sync.Pool{New: func() any { b := make([]byte, bufSize); return &b }}
