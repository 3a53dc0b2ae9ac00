//go:build linux

package sockio

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// This file is the UDP side of sockio: connected datagram sockets as bare descriptors
// (DialUDP, Recv, Send), a PacketPoller that waits for many of them in one epoll set per
// shard, and the listener socket's options (receive buffer, SO_RXQ_OVFL).

// DialUDP returns a non-blocking UDP socket connected to ap, as a bare descriptor: a flow's
// backend socket. Its replies come only from ap, and an ICMP error from ap (port unreachable)
// is reported by the next Recv as ECONNREFUSED.
func DialUDP(ap netip.AddrPort) (int, error) {
	a := ap.Addr().Unmap()
	family := syscall.AF_INET
	if !a.Is4() {
		family = syscall.AF_INET6
	}
	r, _, e := syscall.RawSyscall(syscall.SYS_SOCKET, uintptr(family), syscall.SOCK_DGRAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
	if e != 0 {
		return -1, os.NewSyscallError("socket", e)
	}
	fd := int(r)
	var sa sockaddr
	sa.set(netip.AddrPortFrom(a, ap.Port()))
	if e = sa.connect(fd); e != 0 {
		Close(fd)
		return -1, &net.OpError{Op: "dial", Net: "udp", Addr: net.UDPAddrFromAddrPort(ap), Err: os.NewSyscallError("connect", e)}
	}
	return fd, nil
}

// OutOfDescriptors reports whether err says the process or the system has no descriptor or
// socket memory left (EMFILE, ENFILE, ENOBUFS, ENOMEM): the proxy's own limit, never a
// backend's fault.
func OutOfDescriptors(err error) bool {
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return false
	}
	return errno == syscall.EMFILE || errno == syscall.ENFILE || errno == syscall.ENOBUFS || errno == syscall.ENOMEM
}

// Recv reads one datagram from the non-blocking socket fd into p with a raw read(2); EAGAIN
// when none is queued. A datagram longer than p is truncated.
func Recv(fd int, p []byte) (int, syscall.Errno) {
	for {
		r, _, e := syscall.RawSyscall(syscall.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
		if e != syscall.EINTR {
			return int(r), e
		}
	}
}

// Send writes p as one datagram to the connected non-blocking socket fd with a raw write(2);
// EAGAIN when its send buffer is full (the datagram is not sent).
func Send(fd int, p []byte) syscall.Errno {
	var ptr uintptr
	if len(p) > 0 {
		ptr = uintptr(unsafe.Pointer(&p[0]))
	}
	for {
		_, _, e := syscall.RawSyscall(syscall.SYS_WRITE, uintptr(fd), ptr, uintptr(len(p)))
		if e != syscall.EINTR {
			return e
		}
	}
}

// DescriptorLimit is the process's soft RLIMIT_NOFILE (the Go runtime raises it to the hard
// limit at start), or 0 when it cannot be read.
func DescriptorLimit() int {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Cur == 0 {
		return 0
	}
	if rl.Cur > 1<<30 {
		return 1 << 30
	}
	return int(rl.Cur)
}

// ListenUDPOptions prepares a listener's socket for many flows: a receive buffer of size
// bytes (the kernel caps it at net.core.rmem_max; 0 leaves the default) and SO_RXQ_OVFL, so
// that every datagram read reports how many the socket dropped for want of buffer space
// (RxqOverflow reads it from the control message).
func ListenUDPOptions(c syscall.Conn, size int) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	err = rc.Control(func(fd uintptr) {
		if size > 0 {
			_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, size)
		}
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RXQ_OVFL, 1)
	})
	if err != nil {
		return err
	}
	return serr
}

// RxqOverflowSpace is the control-message space one SO_RXQ_OVFL value needs.
var RxqOverflowSpace = syscall.CmsgSpace(4)

// RxqOverflow finds the SO_RXQ_OVFL value (the datagrams the socket has dropped since the
// option was set, modulo 2³²) in a control message read with the datagram. It does not
// allocate.
func RxqOverflow(oob []byte) (uint32, bool) {
	const hdr = syscall.SizeofCmsghdr
	for len(oob) >= hdr {
		h := (*syscall.Cmsghdr)(unsafe.Pointer(&oob[0]))
		l := int(h.Len)
		if l < hdr || l > len(oob) {
			return 0, false
		}
		if h.Level == syscall.SOL_SOCKET && h.Type == syscall.SO_RXQ_OVFL && l >= hdr+4 {
			return *(*uint32)(unsafe.Pointer(&oob[hdr])), true
		}
		next := syscall.CmsgSpace(l - hdr)
		if next > len(oob) {
			return 0, false
		}
		oob = oob[next:]
	}
	return 0, false
}

// PacketReader is a datagram socket watched by a PacketPoller: Readable runs in the poller's
// goroutine each time the socket has datagrams (or an error) to read, with a buffer it may use
// until it returns. It must read without blocking (Recv) and must not wait for long.
type PacketReader interface {
	Readable(buf []byte)
}

// PacketKey names a socket added to a PacketPoller.
type PacketKey uint64

// PacketPoller waits for many datagram sockets without a goroutine or a buffer each: a few
// shards, each one level-triggered epoll set and one goroutine with one read buffer of the
// largest datagram, call the PacketReader of every readable socket in turn. The epoll
// descriptors are waited for by the runtime's network poller, so no thread sits in
// epoll_wait. A watched socket costs its descriptor and a map entry.
//
// Add and Remove are safe for concurrent use. The poller never closes a socket: its owner
// does, after Remove (closing removes it from the epoll set; events already collected for it
// are dropped by the key).
type PacketPoller struct {
	shards []*packetShard
	next   atomic.Uint32
}

type packetShard struct {
	epfd int
	ep   *os.File
	rc   syscall.RawConn

	mu   sync.Mutex // guards m and seq; taken per Add, Remove and epoll_wait batch
	m    map[uint64]PacketReader
	seq  uint64
	size atomic.Int64
}

// maxDatagram is the largest UDP payload (65,535 − 8 − 20).
const maxDatagram = 65507

// NewPacketPoller starts a poller with one shard per P.
func NewPacketPoller() (*PacketPoller, error) {
	p := &PacketPoller{}
	for range runtime.GOMAXPROCS(0) {
		epfd, ep, rc, err := openEpoll("packet-epoll")
		if err != nil {
			for _, s := range p.shards {
				_ = s.ep.Close()
			}
			return nil, err
		}
		p.shards = append(p.shards, &packetShard{epfd: epfd, ep: ep, rc: rc, m: make(map[uint64]PacketReader)})
	}
	for _, s := range p.shards {
		go s.run()
	}
	return p, nil
}

// Len is the number of watched sockets.
func (p *PacketPoller) Len() int {
	n := int64(0)
	for _, s := range p.shards {
		n += s.size.Load()
	}
	return int(n)
}

// shardBits is how many low bits of a PacketKey name its shard.
const shardBits = 8

// Add watches fd for r.
func (p *PacketPoller) Add(fd int, r PacketReader) (PacketKey, error) {
	i := int(p.next.Add(1)) % len(p.shards)
	s := p.shards[i]
	s.mu.Lock()
	s.seq++
	id := s.seq
	s.m[id] = r
	s.mu.Unlock()
	key := id<<shardBits | uint64(i)
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN}
	ev.Fd, ev.Pad = int32(uint32(id)), int32(uint32(id>>32))
	_, _, e := syscall.RawSyscall6(syscall.SYS_EPOLL_CTL, uintptr(s.epfd), syscall.EPOLL_CTL_ADD, uintptr(fd), uintptr(unsafe.Pointer(&ev)), 0, 0)
	if e != 0 {
		s.mu.Lock()
		delete(s.m, id)
		s.mu.Unlock()
		return 0, os.NewSyscallError("epoll_ctl", e)
	}
	s.size.Add(1)
	return PacketKey(key), nil
}

// Remove stops calling the reader added under k; a Readable already running finishes.
func (p *PacketPoller) Remove(k PacketKey) {
	s := p.shards[int(uint64(k)&(1<<shardBits-1))]
	id := uint64(k) >> shardBits
	s.mu.Lock()
	if _, ok := s.m[id]; ok {
		delete(s.m, id)
		s.size.Add(-1)
	}
	s.mu.Unlock()
}

func (s *packetShard) run() {
	events := make([]syscall.EpollEvent, 256)
	ready := make([]PacketReader, 0, 256)
	buf := make([]byte, maxDatagram)
	n := 0
	wait := func(fd uintptr) bool {
		r, _, e := syscall.RawSyscall6(syscall.SYS_EPOLL_PWAIT, fd, uintptr(unsafe.Pointer(&events[0])), uintptr(len(events)), 0, 0, 0)
		n = int(r)
		return (e == 0 && n > 0) || (e != 0 && e != syscall.EINTR && e != syscall.EAGAIN)
	}
	for {
		n = 0
		if err := s.rc.Read(wait); err != nil {
			time.Sleep(time.Millisecond) // cannot happen: no deadline is ever set on ep
			continue
		}
		ready = ready[:0]
		s.mu.Lock()
		for _, ev := range events[:max(n, 0)] {
			id := uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32
			if r := s.m[id]; r != nil {
				ready = append(ready, r)
			}
		}
		s.mu.Unlock()
		for _, r := range ready {
			r.Readable(buf)
		}
		clear(ready)
	}
}

// Sockaddr is a socket address ready for SendTo, built once per peer so that sending
// allocates nothing.
type Sockaddr struct {
	raw syscall.RawSockaddrInet6 // or a RawSockaddrInet4 in its first bytes
	len uintptr
}

// MakeSockaddr builds ap's address for a socket of the given family (syscall.AF_INET, or
// AF_INET6, where an IPv4 peer is written IPv4-mapped).
func MakeSockaddr(ap netip.AddrPort, family int) Sockaddr {
	var s Sockaddr
	if family == syscall.AF_INET {
		sa := (*syscall.RawSockaddrInet4)(unsafe.Pointer(&s.raw))
		sa.Family = syscall.AF_INET
		sa.Addr = ap.Addr().Unmap().As4()
		putPort(&sa.Port, ap.Port())
		s.len = unsafe.Sizeof(*sa)
		return s
	}
	s.raw.Family = syscall.AF_INET6
	s.raw.Addr = ap.Addr().As16()
	putPort(&s.raw.Port, ap.Port())
	s.len = unsafe.Sizeof(s.raw)
	return s
}

// SendTo writes p as one datagram to sa from the non-blocking socket fd with a raw
// sendto(2); EAGAIN when its send buffer is full (the datagram is not sent).
func SendTo(fd int, p []byte, sa *Sockaddr) syscall.Errno {
	var ptr uintptr
	if len(p) > 0 {
		ptr = uintptr(unsafe.Pointer(&p[0]))
	}
	for {
		_, _, e := syscall.RawSyscall6(syscall.SYS_SENDTO, uintptr(fd), ptr, uintptr(len(p)), 0, uintptr(unsafe.Pointer(&sa.raw)), sa.len)
		if e != syscall.EINTR {
			return e
		}
	}
}

// DupUDP duplicates the descriptor of a UDP socket (close-on-exec, non-blocking like the
// original), for sending from it with SendTo while the original stays with its owner; family
// is the socket's address family. Close the duplicate with Close.
func DupUDP(c syscall.Conn) (fd, family int, err error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return -1, 0, err
	}
	var e syscall.Errno
	fd = -1
	if err := rc.Control(func(s uintptr) { fd, e = dup(int(s)) }); err != nil {
		return -1, 0, err
	}
	if e != 0 {
		return -1, 0, os.NewSyscallError("fcntl", e)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		Close(fd)
		return -1, 0, err
	}
	family = syscall.AF_INET6
	if _, ok := sa.(*syscall.SockaddrInet4); ok {
		family = syscall.AF_INET
	}
	return fd, family, nil
}
