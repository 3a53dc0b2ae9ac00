package l4

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"ballast/accesslog"
	"ballast/balance"
	"ballast/sockio"
	"ballast/upstream"
)

const (
	flowShards = 64
	// maxDatagram is the largest UDP payload (65,535 − 8 − 20).
	maxDatagram = 65507
	// listenerRcvBuf is the receive buffer a listener socket asks for (the kernel caps it at
	// net.core.rmem_max): room for a burst while the read loop makes new flows.
	listenerRcvBuf = 4 << 20
	// readsPerWake bounds the replies one flow's wake-up relays before the poller serves the
	// next flow (the socket is level-triggered: the rest comes at the next wait).
	readsPerWake = 16
)

// UDPStats are the UDP proxy's counters. Every datagram read from clients (Datagrams) is
// forwarded (PacketsIn) or dropped for exactly one of the Dropped* reasons but DroppedOverflow,
// which counts datagrams the kernel dropped before they could be read.
type UDPStats struct {
	// Flows is the number of live flows; Created counts every flow since the start.
	Flows   int64
	Created uint64
	// Expired counts flows ended by the idle timeout.
	Expired uint64
	// Datagrams counts datagrams read from clients.
	Datagrams uint64
	// DroppedCap counts datagrams dropped because a new flow would exceed MaxFlows.
	DroppedCap uint64
	// DroppedDescriptors counts datagrams dropped because a new flow would pass the process's
	// descriptor budget for flows (see descriptorBudget), or the system refused a socket.
	DroppedDescriptors uint64
	// DroppedRate counts datagrams dropped because they would have started a flow faster than
	// NewFlowRate allows.
	DroppedRate uint64
	// DroppedNoBackend counts datagrams dropped because the pool had no usable backend with a
	// free slot.
	DroppedNoBackend uint64
	// DroppedSend counts datagrams from clients the backend socket did not take (its send
	// buffer full, or an error that ended the flow).
	DroppedSend uint64
	// DroppedOverflow counts datagrams the listener socket dropped because its receive buffer
	// was full (the kernel's SO_RXQ_OVFL count, read with the next datagram).
	DroppedOverflow uint64
	// RepliesDropped counts backend replies the listener socket could not send to the client.
	RepliesDropped uint64
	// BackendErrors counts flows ended because their backend socket failed (e.g. refused).
	BackendErrors uint64
	// Retries counts flows moved to another backend after theirs refused the first datagram.
	Retries uint64
	// PacketsIn, BytesIn count datagrams from clients forwarded to backends; PacketsOut,
	// BytesOut replies relayed to clients.
	PacketsIn, BytesIn, PacketsOut, BytesOut uint64
}

// UDP is a layer-4 UDP proxy for one listener and one pool.
type UDP struct {
	opts   UDPOptions
	pool   atomic.Pointer[upstream.Pool]
	poller *sockio.PacketPoller
	budget *fdBudget
	rate   flowRate
	// persist remembers each client address's backend while Persistence lasts (LVS -p).
	persist *persistTable
	closing atomic.Bool
	access  accessSwitch // a line per flow when on (SetAccessLog)

	shards [flowShards]flowShard
	nflows atomic.Int64

	created, expired, datagrams                                        atomic.Uint64
	droppedCap, droppedFDs, droppedRate, droppedNoBackend, droppedSend atomic.Uint64
	droppedOverflow, repliesDropped, backendErrors, retries            atomic.Uint64
	packetsIn, bytesIn, packetsOut, bytesOut                           atomic.Uint64

	mu     sync.Mutex
	conns  map[*net.UDPConn]struct{}
	closed bool
	wg     sync.WaitGroup // sweepers
}

type flowShard struct {
	mu sync.RWMutex
	m  map[netip.AddrPort]*flow
}

// front is a listener socket as the flows reply from it: a duplicate of its descriptor,
// closed when Serve has ended and no flow uses it any more (ref), so that a reply never goes
// out of a descriptor number closed and reused meanwhile.
type front struct {
	fd     int
	family int
	ref    ref
}

// flow is one client address and port with its own connected backend socket, watched by the
// shared poller: it costs a descriptor, this struct and a map entry, no goroutine and no
// buffer.
type flow struct {
	p       *UDP
	client  netip.AddrPort
	to      sockio.Sockaddr // client, for sendto on front
	front   *front
	fd      int // the backend socket; closed by ref's last holder after end
	ref     ref
	key     sockio.PacketKey
	pool    *upstream.Pool
	backend *upstream.Backend
	start   time.Time
	last    atomic.Int64 // unix nanoseconds of the last datagram either way
	ended   atomic.Bool
	// in and out count the payload bytes each way, for the flow's access-log line.
	in, out atomic.Uint64
	// rtt is the time from the flow's start to the backend's first reply, the latency the
	// pool hears at the end (the flow's lifetime would mislead ewma); 0 until a reply.
	rtt atomic.Int64

	// Until the backend first answers, the flow keeps the datagram that started it, so that
	// a backend refusing it (ICMP port unreachable) costs the client nothing: the poller sends
	// it again on a new flow to another backend. local and hkey and tried serve that new pick.
	first   []byte
	local   netip.AddrPort
	hkey    uint64
	tried   balance.Tried
	replied bool // only the poller goroutine (Readable) touches first, tried and replied
}

// ref counts the users of a descriptor and closes it when it has ended and the last user
// left: bit 0 says ended, the rest counts users.
type ref struct{ n atomic.Int32 }

// acquire takes a use of the descriptor; false once it has ended.
func (r *ref) acquire() bool {
	for {
		v := r.n.Load()
		if v&1 != 0 {
			return false
		}
		if r.n.CompareAndSwap(v, v+2) {
			return true
		}
	}
}

// release gives a use back and closes fd if it was the last use of an ended descriptor.
func (r *ref) release(fd int) {
	if r.n.Add(-2) == 1 {
		sockio.Close(fd)
	}
}

// end marks the descriptor ended and closes it unless someone uses it (the last user will).
// It reports false when it had already ended.
func (r *ref) end(fd int) bool {
	v := r.n.Or(1)
	if v&1 != 0 {
		return false
	}
	if v == 0 {
		sockio.Close(fd)
	}
	return true
}

// sharedPoller waits for the backend sockets of every UDP proxy in the process: one epoll set
// and goroutine per P.
var sharedPoller = sync.OnceValues(sockio.NewPacketPoller)

// NewUDP builds a UDP proxy balancing over pool.
func NewUDP(opts UDPOptions, pool *upstream.Pool) *UDP {
	p := &UDP{opts: opts.withDefaults(), conns: make(map[*net.UDPConn]struct{}), budget: processBudget()}
	for i := range p.shards {
		p.shards[i].m = make(map[netip.AddrPort]*flow)
	}
	p.rate.init(p.opts.NewFlowRate, p.opts.NewFlowBurst)
	if p.opts.Persistence > 0 {
		p.persist = newPersistTable(DefaultMaxPersist)
	}
	p.poller, _ = sharedPoller()
	p.pool.Store(pool)
	return p
}

// SetAccessLog makes the proxy write a line per flow, when it ends, to the log s holds (none
// while it holds none): idle expiry is cD, a backend's failure SD, a shutdown KD.
func (p *UDP) SetAccessLog(s *accesslog.Switch) { p.access.Store(s) }

// SetPool installs the pool new flows use (a reload); live flows keep theirs.
func (p *UDP) SetPool(pool *upstream.Pool) { p.pool.Store(pool) }

// Flows is the number of live flows.
func (p *UDP) Flows() int64 { return p.nflows.Load() }

// MaxFlows is the flow cap in force: MaxFlows, or less when the process's descriptor budget
// is smaller.
func (p *UDP) MaxFlows() int { return int(min(int64(p.opts.MaxFlows), p.budget.limit)) }

// Stats returns the counters.
func (p *UDP) Stats() UDPStats {
	return UDPStats{
		Flows: p.nflows.Load(), Created: p.created.Load(), Expired: p.expired.Load(),
		Datagrams:  p.datagrams.Load(),
		DroppedCap: p.droppedCap.Load(), DroppedDescriptors: p.droppedFDs.Load(), DroppedRate: p.droppedRate.Load(),
		DroppedNoBackend: p.droppedNoBackend.Load(), DroppedSend: p.droppedSend.Load(),
		DroppedOverflow: p.droppedOverflow.Load(), RepliesDropped: p.repliesDropped.Load(),
		BackendErrors: p.backendErrors.Load(), Retries: p.retries.Load(),
		PacketsIn: p.packetsIn.Load(), BytesIn: p.bytesIn.Load(),
		PacketsOut: p.packetsOut.Load(), BytesOut: p.bytesOut.Load(),
	}
}

func (p *UDP) shard(a netip.AddrPort) *flowShard {
	b := a.Addr().As16()
	h := uint64(a.Port())
	h ^= binary.LittleEndian.Uint64(b[:8]) * 0x9E3779B97F4A7C15
	h ^= binary.LittleEndian.Uint64(b[8:]) * 0xC2B2AE3D27D4EB4F
	h ^= h >> 29
	return &p.shards[h%flowShards]
}

// Serve relays datagrams arriving on c until c is closed or Shutdown is called. It reads
// every datagram into one buffer, with the socket's drop count (SO_RXQ_OVFL) beside it.
func (p *UDP) Serve(c *net.UDPConn) error {
	if p.poller == nil {
		return errors.New("l4: no poller for udp flows on this system")
	}
	fd, family, err := sockio.DupUDP(c)
	if err != nil {
		return err
	}
	fr := &front{fd: fd, family: family}
	fr.ref.acquire() // Serve's own use, given back when it returns
	defer func() {
		fr.ref.end(fr.fd)
		fr.ref.release(fr.fd)
	}()
	_ = sockio.ListenUDPOptions(c, listenerRcvBuf) // without them: a default buffer, drops uncounted
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return ErrClosed
	}
	p.conns[c] = struct{}{}
	p.wg.Add(1)
	p.mu.Unlock()
	stop := make(chan struct{})
	defer close(stop)
	go p.sweep(stop)

	local := addrPort(c.LocalAddr())
	buf := make([]byte, maxDatagram)
	oob := make([]byte, max(sockio.RxqOverflowSpace, 64))
	var drops uint32 // the socket's drop count at the last datagram
	for {
		n, oobn, _, client, err := c.ReadMsgUDPAddrPort(buf, oob)
		if err != nil {
			p.mu.Lock()
			closed := p.closed
			p.mu.Unlock()
			if closed || errors.Is(err, net.ErrClosed) {
				return ErrClosed
			}
			continue // e.g. an ICMP error for an earlier reply
		}
		if v, ok := sockio.RxqOverflow(oob[:oobn]); ok && v != drops {
			p.droppedOverflow.Add(uint64(v - drops))
			drops = v
		}
		p.datagrams.Add(1)
		p.forward(fr, local, client, buf[:n])
	}
}

// forward sends one datagram from client to its flow's backend, creating the flow if needed.
func (p *UDP) forward(fr *front, local, client netip.AddrPort, b []byte) {
	now := time.Now().UnixNano()
	s := p.shard(client)
	s.mu.RLock()
	f := s.m[client]
	s.mu.RUnlock()
	if f == nil {
		if f = p.newFlow(fr, local, client, s, now, balance.Tried{}, b); f == nil {
			return
		}
	}
	f.last.Store(now)
	if !f.ref.acquire() {
		p.droppedSend.Add(1) // ended under us (idle sweep): the next datagram starts anew
		return
	}
	e := sockio.Send(f.fd, b)
	f.ref.release(f.fd)
	switch e {
	case 0:
		p.packetsIn.Add(1)
		p.bytesIn.Add(uint64(len(b)))
		f.in.Add(uint64(len(b)))
	case syscall.EAGAIN, syscall.ENOBUFS:
		p.droppedSend.Add(1) // the backend socket's buffer is full: UDP drops
	default:
		p.droppedSend.Add(1)
		p.end(f, true)
	}
}

// newFlow makes the flow for client, whose first datagram is first, on a backend outside
// tried, or counts the drop and returns nil. The checks run cheapest first, so a flood of
// new clients costs little more than its reads: the flow cap, the rate, the descriptor
// budget, the pick, the socket.
func (p *UDP) newFlow(fr *front, local, client netip.AddrPort, s *flowShard, now int64, tried balance.Tried, first []byte) *flow {
	if p.closing.Load() {
		return nil // Shutdown has ended the flows; the socket closes under the read loop
	}
	if n := p.nflows.Add(1); n > int64(p.opts.MaxFlows) {
		p.nflows.Add(-1)
		p.droppedCap.Add(1)
		return nil
	}
	if !p.rate.allow(now) {
		p.nflows.Add(-1)
		p.droppedRate.Add(1)
		return nil
	}
	if !p.budget.take() {
		p.nflows.Add(-1)
		p.droppedFDs.Add(1)
		return nil
	}
	undo := func(counter *atomic.Uint64) *flow {
		p.budget.give()
		p.nflows.Add(-1)
		counter.Add(1)
		return nil
	}
	pool := p.pool.Load()
	var key uint64
	if p.opts.Key == KeyFlow {
		key = uint64(balance.FlowHash(client.Addr(), local.Addr(), client.Port(), local.Port(), 17))
	} else {
		key = uint64(balance.SourceHash(client.Addr()))
	}
	// The read loop serves every flow, so it never waits in the backlog queue.
	b, err := p.acquire(pool, client.Addr(), key, tried)
	if err != nil {
		return undo(&p.droppedNoBackend)
	}
	start := time.Now()
	ap, ok := b.AddrPort()
	if !ok {
		ap, err = resolveUDP(b.Address)
	}
	var fd int
	if err == nil {
		fd, err = sockio.DialUDP(ap)
	}
	if err != nil {
		if sockio.OutOfDescriptors(err) {
			pool.Cancel(b) // the proxy's own limit, never the backend's fault
			return undo(&p.droppedFDs)
		}
		pool.Release(b, time.Since(start), true)
		return undo(&p.droppedNoBackend)
	}
	f := &flow{p: p, client: client, to: sockio.MakeSockaddr(client, fr.family), front: fr, fd: fd,
		pool: pool, backend: b, start: start, local: local, hkey: key, tried: tried}
	if len(first) <= maxKeptDatagram {
		f.first = append([]byte(nil), first...)
	}
	f.last.Store(now)
	if !fr.ref.acquire() { // Serve has ended: the listener is gone
		sockio.Close(fd)
		pool.Cancel(b)
		return undo(&p.droppedSend)
	}
	// Watched before it is published: whoever finds the flow in the table (and may end it)
	// sees its key.
	if f.key, err = p.poller.Add(fd, f); err != nil {
		sockio.Close(fd)
		fr.ref.release(fr.fd)
		pool.Cancel(b)
		return undo(&p.droppedFDs)
	}
	s.mu.Lock()
	if old := s.m[client]; old != nil { // a concurrent Serve on another socket won the race
		s.mu.Unlock()
		p.poller.Remove(f.key)
		f.ref.end(fd) // closes it, or Readable's release will
		fr.ref.release(fr.fd)
		pool.Cancel(b)
		p.budget.give()
		p.nflows.Add(-1)
		return old
	}
	s.m[client] = f
	s.mu.Unlock()
	p.created.Add(1)
	if r := p.opts.Persistence; r > 0 {
		p.persist.put(pool.Name, client.Addr(), b.ID, now+int64(r), now)
	}
	return f
}

// acquire picks the flow's backend without waiting: the one the client's address last used
// while persistence remembers it (a draining backend keeps it), else the balancer's choice.
func (p *UDP) acquire(pool *upstream.Pool, src netip.Addr, key uint64, tried balance.Tried) (*upstream.Backend, error) {
	if p.opts.Persistence > 0 && tried.Len() == 0 {
		if id, ok := p.persist.get(pool.Name, src, time.Now().UnixNano()); ok {
			if b := pool.AcquireBackend(id); b != nil {
				return b, nil
			}
		}
	}
	return pool.TryAcquire(key, tried)
}

func resolveUDP(address string) (netip.AddrPort, error) {
	ra, err := net.ResolveUDPAddr("udp", address)
	if err != nil {
		return netip.AddrPort{}, err
	}
	return ra.AddrPort(), nil
}

// Readable relays the backend's replies to the flow's client (sockio.PacketReader; it runs in
// the poller's goroutine). A backend that refuses the flow before answering is replaced (see
// flow.first), at most maxUDPAttempts times.
func (f *flow) Readable(buf []byte) {
	p := f.p
	if !f.ref.acquire() {
		return
	}
	defer f.ref.release(f.fd)
	for range readsPerWake {
		n, e := sockio.Recv(f.fd, buf)
		if e == syscall.EAGAIN {
			return
		}
		if e != 0 {
			if f.ended.Load() {
				return // the sweep or Shutdown ended it
			}
			p.end(f, true)
			if !f.replied && e == syscall.ECONNREFUSED {
				p.retry(f)
			}
			return
		}
		if !f.replied {
			f.replied, f.first = true, nil
			f.rtt.Store(int64(time.Since(f.start)))
		}
		f.last.Store(time.Now().UnixNano())
		fr := f.front
		if !fr.ref.acquire() {
			p.repliesDropped.Add(1)
			continue
		}
		e = sockio.SendTo(fr.fd, buf[:n], &f.to)
		fr.ref.release(fr.fd)
		if e == 0 {
			p.packetsOut.Add(1)
			p.bytesOut.Add(uint64(n))
			f.out.Add(uint64(n))
		} else {
			p.repliesDropped.Add(1)
		}
	}
}

// maxKeptDatagram bounds the first datagram a flow keeps for a retry (one Ethernet MTU of
// payload), so that MaxFlows flows waiting for a first answer hold bounded memory.
const maxKeptDatagram = 1472

// maxUDPAttempts bounds the backends one flow's first datagram is offered to.
const maxUDPAttempts = 3

// retry sends the first datagram of a refused flow again, on a new flow to a backend the
// client has not tried; nothing has reached a service, so this is safe.
func (p *UDP) retry(f *flow) {
	tried := f.tried
	if f.first == nil {
		return
	}
	if i := f.backend.Index(); i < 0 || !tried.Add(i) || tried.Len() >= maxUDPAttempts {
		return
	}
	s := p.shard(f.client)
	s.mu.RLock()
	cur := s.m[f.client]
	s.mu.RUnlock()
	if cur != nil {
		return // the client's next datagram has already started a new flow
	}
	nf := p.newFlow(f.front, f.local, f.client, s, time.Now().UnixNano(), tried, f.first)
	if nf == nil {
		return
	}
	p.retries.Add(1)
	if nf.ref.acquire() {
		e := sockio.Send(nf.fd, f.first)
		nf.ref.release(nf.fd)
		if e != 0 && e != syscall.EAGAIN {
			p.end(nf, true)
		}
	}
}

// end removes f, closes its backend socket (once no one uses it) and releases its slot, once.
func (p *UDP) end(f *flow, failed bool) {
	if f.ended.Swap(true) {
		return
	}
	if l := p.access.Load(); l != nil {
		t := termIdle // a flow's normal end: idle_timeout
		switch {
		case failed:
			t = termServerData
		case p.closing.Load():
			t = termKilled
		}
		e := accesslog.Entry{
			Transport: "udp", Listener: p.opts.Name, Client: f.client.Addr(), ClientPort: f.client.Port(),
			Pool: f.pool.Name, Backend: f.backend.ID, BackendAddress: f.backend.Address,
			BytesIn: int64(f.in.Load()), BytesOut: int64(f.out.Load()), Duration: time.Since(f.start),
			Upstream: time.Duration(f.rtt.Load()), Termination: t.String(),
		}
		l.Write(&e)
	}
	s := p.shard(f.client)
	s.mu.Lock()
	if s.m[f.client] == f {
		delete(s.m, f.client)
	}
	s.mu.Unlock()
	p.poller.Remove(f.key)
	f.ref.end(f.fd)
	f.front.ref.release(f.front.fd)
	p.budget.give()
	if failed {
		p.backendErrors.Add(1)
		f.pool.Unreachable(f.backend)
	}
	lat := time.Duration(f.rtt.Load())
	if lat == 0 {
		lat = time.Since(f.start) // no reply: as long as the flow waited
	}
	f.pool.Release(f.backend, lat, failed)
	p.nflows.Add(-1)
}

// sweep ends idle flows every quarter of the idle timeout, so a flow lives at most 1.25 times
// the timeout past its last datagram.
func (p *UDP) sweep(stop <-chan struct{}) {
	defer p.wg.Done()
	tick := time.NewTicker(max(p.opts.IdleTimeout/4, 10*time.Millisecond))
	defer tick.Stop()
	var idle []*flow
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		cut := time.Now().Add(-p.opts.IdleTimeout).UnixNano()
		for i := range p.shards {
			s := &p.shards[i]
			s.mu.RLock()
			for _, f := range s.m {
				if f.last.Load() <= cut {
					idle = append(idle, f)
				}
			}
			s.mu.RUnlock()
		}
		for k, f := range idle {
			if f.last.Load() <= cut && !f.ended.Load() {
				p.expired.Add(1)
				p.end(f, false)
			}
			idle[k] = nil
		}
		idle = idle[:0]
	}
}

// Shutdown stops reading on every socket Serve was given, ends all flows and waits for the
// sweepers, or until ctx ends.
func (p *UDP) Shutdown(ctx context.Context) error {
	p.closing.Store(true)
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	for i := range p.shards {
		s := &p.shards[i]
		s.mu.RLock()
		fs := make([]*flow, 0, len(s.m))
		for _, f := range s.m {
			fs = append(fs, f)
		}
		s.mu.RUnlock()
		for _, f := range fs {
			p.end(f, false)
		}
	}
	done := make(chan struct{})
	go func() {
		p.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
