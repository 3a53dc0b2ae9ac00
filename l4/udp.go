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

	"ballast/balance"
	"ballast/upstream"
)

const (
	flowShards = 64
	// maxDatagram is the largest UDP payload (65,535 − 8 − 20).
	maxDatagram = 65507
)

// UDPStats are the UDP proxy's counters.
type UDPStats struct {
	// Flows is the number of live flows; Created counts every flow since the start.
	Flows   int64
	Created uint64
	// Expired counts flows ended by the idle timeout.
	Expired uint64
	// DroppedCap counts datagrams dropped because a new flow would exceed MaxFlows.
	DroppedCap uint64
	// DroppedNoBackend counts datagrams dropped because the pool had no usable backend with a
	// free slot, or the backend socket could not be made.
	DroppedNoBackend uint64
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
	opts UDPOptions
	pool atomic.Pointer[upstream.Pool]

	shards [flowShards]flowShard
	nflows atomic.Int64

	created, expired, droppedCap, droppedNoBackend, backendErrors, retries atomic.Uint64
	packetsIn, bytesIn, packetsOut, bytesOut                               atomic.Uint64

	mu     sync.Mutex
	conns  map[*net.UDPConn]struct{}
	closed bool
	wg     sync.WaitGroup // flow readers and sweepers
}

type flowShard struct {
	mu sync.RWMutex
	m  map[netip.AddrPort]*flow
}

// flow is one client address and port with its own connected backend socket.
type flow struct {
	client  netip.AddrPort
	front   *net.UDPConn // the listener socket replies leave from
	back    *net.UDPConn
	pool    *upstream.Pool
	backend *upstream.Backend
	start   time.Time
	last    atomic.Int64 // unix nanoseconds of the last datagram either way
	ended   atomic.Bool
	// rtt is the time from the flow's start to the backend's first reply, the latency the
	// pool hears at the end (the flow's lifetime would mislead ewma); 0 until a reply.
	rtt atomic.Int64

	// Until the backend first answers, the flow keeps the datagram that started it, so that
	// a backend refusing it (ICMP port unreachable) costs the client nothing: the relay sends
	// it again on a new flow to another backend. local and key and tried serve that new pick.
	first   []byte
	local   netip.AddrPort
	key     uint64
	tried   balance.Tried
	replied bool // only the relay goroutine touches first, tried and replied
}

// NewUDP builds a UDP proxy balancing over pool.
func NewUDP(opts UDPOptions, pool *upstream.Pool) *UDP {
	p := &UDP{opts: opts.withDefaults(), conns: make(map[*net.UDPConn]struct{})}
	for i := range p.shards {
		p.shards[i].m = make(map[netip.AddrPort]*flow)
	}
	p.pool.Store(pool)
	return p
}

// SetPool installs the pool new flows use (a reload); live flows keep theirs.
func (p *UDP) SetPool(pool *upstream.Pool) { p.pool.Store(pool) }

// Flows is the number of live flows.
func (p *UDP) Flows() int64 { return p.nflows.Load() }

// Stats returns the counters.
func (p *UDP) Stats() UDPStats {
	return UDPStats{
		Flows: p.nflows.Load(), Created: p.created.Load(), Expired: p.expired.Load(),
		DroppedCap: p.droppedCap.Load(), DroppedNoBackend: p.droppedNoBackend.Load(),
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

// Serve relays datagrams arriving on c until c is closed or Shutdown is called.
func (p *UDP) Serve(c *net.UDPConn) error {
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
	for {
		n, client, err := c.ReadFromUDPAddrPort(buf)
		if err != nil {
			p.mu.Lock()
			closed := p.closed
			p.mu.Unlock()
			if closed || errors.Is(err, net.ErrClosed) {
				return ErrClosed
			}
			continue // e.g. an ICMP error for an earlier reply
		}
		p.forward(c, local, client, buf[:n])
	}
}

// forward sends one datagram from client to its flow's backend, creating the flow if needed.
func (p *UDP) forward(front *net.UDPConn, local, client netip.AddrPort, b []byte) {
	now := time.Now().UnixNano()
	s := p.shard(client)
	s.mu.RLock()
	f := s.m[client]
	s.mu.RUnlock()
	if f == nil {
		if f = p.newFlow(front, local, client, s, now, balance.Tried{}, b); f == nil {
			return
		}
	}
	f.last.Store(now)
	if _, err := f.back.Write(b); err != nil {
		p.end(f, true)
		return
	}
	p.packetsIn.Add(1)
	p.bytesIn.Add(uint64(len(b)))
}

// newFlow makes the flow for client, whose first datagram is first, on a backend outside
// tried, or counts the drop and returns nil.
func (p *UDP) newFlow(front *net.UDPConn, local, client netip.AddrPort, s *flowShard, now int64, tried balance.Tried, first []byte) *flow {
	if n := p.nflows.Add(1); n > int64(p.opts.MaxFlows) {
		p.nflows.Add(-1)
		p.droppedCap.Add(1)
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
	b, err := pool.TryAcquire(key, tried)
	if err != nil {
		p.nflows.Add(-1)
		p.droppedNoBackend.Add(1)
		return nil
	}
	start := time.Now()
	raddr, err := net.ResolveUDPAddr("udp", b.Address)
	var back *net.UDPConn
	if err == nil {
		back, err = net.DialUDP("udp", nil, raddr)
	}
	if err != nil {
		pool.Release(b, time.Since(start), true)
		p.nflows.Add(-1)
		p.droppedNoBackend.Add(1)
		return nil
	}
	f := &flow{client: client, front: front, back: back, pool: pool, backend: b, start: start,
		local: local, key: key, tried: tried}
	if len(first) <= maxKeptDatagram {
		f.first = append([]byte(nil), first...)
	}
	f.last.Store(now)
	s.mu.Lock()
	if old := s.m[client]; old != nil { // a concurrent Serve on another socket won the race
		s.mu.Unlock()
		_ = back.Close()
		pool.Release(b, 0, false)
		p.nflows.Add(-1)
		return old
	}
	s.m[client] = f
	s.mu.Unlock()
	p.created.Add(1)
	p.wg.Add(1)
	go p.relay(f)
	return f
}

// relay copies the backend's replies to the flow's client until the flow ends. A backend that
// refuses the flow before answering is replaced (see flow.first), at most maxUDPAttempts times.
func (p *UDP) relay(f *flow) {
	defer p.wg.Done()
	buf := make([]byte, maxDatagram)
	for {
		n, err := f.back.Read(buf)
		if err != nil {
			if f.ended.Load() {
				return // the sweep or Shutdown ended it
			}
			p.end(f, true)
			if !f.replied && errors.Is(err, syscall.ECONNREFUSED) {
				p.retry(f)
			}
			return
		}
		if !f.replied {
			f.replied, f.first = true, nil
			f.rtt.Store(int64(time.Since(f.start)))
		}
		f.last.Store(time.Now().UnixNano())
		if _, err := f.front.WriteToUDPAddrPort(buf[:n], f.client); err == nil {
			p.packetsOut.Add(1)
			p.bytesOut.Add(uint64(n))
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
	if _, err := nf.back.Write(f.first); err != nil {
		p.end(nf, true)
	}
}

// end removes f, closes its backend socket and releases its slot, once.
func (p *UDP) end(f *flow, failed bool) {
	if f.ended.Swap(true) {
		return
	}
	s := p.shard(f.client)
	s.mu.Lock()
	if s.m[f.client] == f {
		delete(s.m, f.client)
	}
	s.mu.Unlock()
	_ = f.back.Close()
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

// Shutdown stops reading on every socket Serve was given, ends all flows and waits for their
// readers, or until ctx ends.
func (p *UDP) Shutdown(ctx context.Context) error {
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
