package l4

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"ballast/balance"
	"ballast/config"
	"ballast/proxyproto"
	"ballast/sockio"
	"ballast/upstream"
)

// Table is an immutable route table: the first route whose SNI matches takes the connection.
type Table struct {
	routes  []Route
	needSNI bool
}

// NewTable checks routes and builds a table from them.
func NewTable(routes []Route) (*Table, error) {
	t := &Table{routes: append([]Route(nil), routes...)}
	if len(t.routes) == 0 {
		return nil, errors.New("l4: a listener needs at least one route")
	}
	for i, r := range t.routes {
		if r.Pool == nil {
			return nil, errors.New("l4: a route has no pool")
		}
		if r.SendProxy > proxyproto.V2 {
			return nil, errors.New("l4: send_proxy must be v1 or v2")
		}
		names := make([]string, len(r.SNI))
		for k, p := range r.SNI {
			names[k] = lower(p)
			t.needSNI = true
		}
		t.routes[i].SNI = names
	}
	return t, nil
}

func lower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// route returns the first route for the server name ("" when the client sent none), or nil.
func (t *Table) route(name string) *Route {
	for i := range t.routes {
		r := &t.routes[i]
		if len(r.SNI) == 0 {
			return r
		}
		for _, p := range r.SNI {
			if name != "" && matchSNI(p, name) {
				return r
			}
		}
	}
	return nil
}

// BackendStats are the TCP proxy's own counters for one backend.
type BackendStats struct {
	// BytesIn counts bytes from clients to the backend, BytesOut from the backend to clients
	// (PROXY headers excluded).
	BytesIn, BytesOut uint64
	// Conns counts connections established to the backend; Active those open now.
	Conns  uint64
	Active int64
	// ConnectFailures counts connects that failed or timed out.
	ConnectFailures uint64
}

type backendCounters struct {
	bytesIn, bytesOut, conns, connectFailures atomic.Uint64
	active                                    atomic.Int64
}

// Stats are the TCP proxy's listener-wide counters.
type Stats struct {
	// Accepted counts accepted connections; Active those open now (waiting or forwarding).
	Accepted uint64
	Active   int64
	// ProxyRefused counts connections closed for a missing or malformed PROXY header.
	ProxyRefused uint64
	// NoRoute counts connections no route took (no SNI match and no default route).
	NoRoute uint64
	// NoBackend counts connections closed because the pool gave no backend (none usable, queue
	// full or timed out) or every connect attempt failed.
	NoBackend uint64
	// IdleClosed counts connections closed by the idle timeout.
	IdleClosed uint64
	// Retries counts connect attempts after the first (a refused or timed-out backend).
	Retries uint64
	// OutOfDescriptors counts connections closed because the proxy had no descriptor for the
	// backend socket (also counted in NoBackend; never held against the backend).
	OutOfDescriptors uint64
	// Terminations counts ended connections by termination state (term.go: "--", "SD"...).
	Terminations map[string]uint64
}

// TCP is a layer-4 TCP proxy for one listener's routes.
type TCP struct {
	opts    TCPOptions
	table   atomic.Pointer[Table]
	persist *persistTable
	relay   *sockio.Relay

	counters sync.Map // *upstream.Backend → *backendCounters

	accepted, proxyRefused, noRoute, noBackend, idleClosed, retries atomic.Uint64
	outOfFDs                                                        atomic.Uint64
	terms                                                           terms
	access                                                          accessSwitch
	proxyFrom                                                       atomic.Pointer[proxyproto.Trust]
	active                                                          atomic.Int64

	// mu guards listeners; it is taken by Serve and Shutdown only.
	mu        sync.Mutex
	listeners map[net.Listener]func() // each one's stop: closes its Acceptor or RelayListener
	// The drain registry: open client connections, sharded so that accepting and closing
	// connections take no listener-wide lock. open counts them; drained is closed when open
	// reaches 0 after Shutdown began.
	closing  atomic.Bool
	open     atomic.Int64
	seq      atomic.Uint64
	registry [connShards]connShard
	drained  chan struct{}
	drainOne sync.Once
}

const connShards = 32

// sharedRelay forwards the established connections of every TCP proxy in the process: its
// shards (one per P) serve all listeners, as one event loop per thread would.
var sharedRelay = sync.OnceValue(sockio.NewRelay)

type connShard struct {
	mu sync.Mutex
	m  map[uint64]*tcpConn
}

// tcpConn is a client connection in the drain registry, with its backend connection once
// there is one. Its descriptors are closed only after it left the registry, so kill never
// shuts down a descriptor number that was closed and reused.
type tcpConn struct {
	fd     int
	bfd    atomic.Int64 // the backend's descriptor; -1 = none yet
	killed atomic.Bool

	// For the termination state and the access-log line, written by the connection's own
	// goroutine, then by the relay (res) before Done.
	peer  netip.AddrPort
	start time.Time
	pool  string
	// tried and attempted are the backends and connects an inline attempt used (inline).
	shard     sockio.RelayShard // the relay shard that accepted it, if one did
	tried     balance.Tried
	attempted int
	failed    term // why the last connect failed
	backend   *upstream.Backend
	connect   time.Duration
	retries   int
	res       sockio.RelayResult

	// What the relay's Done needs, set by relayUp; relayDone is tc.done as a func value, made
	// once per tcpConn (connections reuse tcpConns: a short connection allocates none).
	p         *TCP
	id        uint64
	route     *Route
	bcnt      *backendCounters
	relayDone func(idled bool)
}

// tcpConns holds the tcpConns of ended connections for reuse.
var tcpConns sync.Pool

// newTCPConn returns a tcpConn for the client connection fd, as new.
func newTCPConn(fd int) *tcpConn {
	tc, _ := tcpConns.Get().(*tcpConn)
	if tc == nil {
		tc = new(tcpConn)
		tc.relayDone = tc.done
	}
	tc.fd = fd
	tc.bfd.Store(-1)
	return tc
}

// free gives tc back for reuse once the connection has ended: it has left the registry (no
// kill can reach it) and nothing of the connection refers to it any more.
func (tc *tcpConn) free() {
	tc.fd = -1
	tc.killed.Store(false)
	tc.peer, tc.start, tc.pool, tc.shard = netip.AddrPort{}, time.Time{}, "", sockio.RelayShard{}
	tc.tried, tc.attempted, tc.failed = balance.Tried{}, 0, 0
	tc.backend, tc.connect, tc.retries, tc.res = nil, 0, 0, sockio.RelayResult{}
	tc.p, tc.id, tc.route, tc.bcnt = nil, 0, nil, nil
	tcpConns.Put(tc)
}

// done ends a relayed connection's accounting: the relay's Done.
func (tc *tcpConn) done(idled bool) {
	p := tc.p
	if idled {
		p.idleClosed.Add(1)
	}
	t := relayTerm(&tc.res, tc.killed.Load())
	p.terms[t].Add(1)
	p.logLine(tc, t)
	tc.route.Pool.Release(tc.backend, tc.connect, false)
	tc.bcnt.active.Add(-1)
	p.untrack(tc.id) // before the relay closes the descriptors
	p.active.Add(-1)
	tc.free()
}

// kill ends the connection for Shutdown: it shuts both sockets down, which ends a read or a
// write in any phase (the handshake, the relay, Pipe's goroutines) without closing a
// descriptor under its owner. A connection still connecting sees killed once connected.
func (tc *tcpConn) kill() {
	tc.killed.Store(true)
	sockio.Shutdown(tc.fd)
	if b := tc.bfd.Load(); b >= 0 {
		sockio.Shutdown(int(b))
	}
}

// acceptBatch bounds the connections one Accept takes before Serve checks for shutdown.
const acceptBatch = 64

// NewTCP builds a TCP proxy over t.
func NewTCP(opts TCPOptions, t *Table) *TCP {
	p := &TCP{
		opts:      opts.withDefaults(),
		listeners: make(map[net.Listener]func()),
		drained:   make(chan struct{}),
	}
	for i := range p.registry {
		p.registry[i].m = make(map[uint64]*tcpConn)
	}
	p.persist = newPersistTable(p.opts.MaxPersist)
	p.relay = sharedRelay()
	p.table.Store(t)
	return p
}

// Swap installs a new route table for new connections and returns the old one; established
// connections finish on the pools they started with.
func (p *TCP) Swap(t *Table) *Table { return p.table.Swap(t) }

// SetProxyTrust says which peers may send the PROXY header AcceptProxy requires (nil or empty:
// every peer); a connection from another peer is closed and counted in ProxyRefused.
func (p *TCP) SetProxyTrust(t proxyproto.Trust) { p.proxyFrom.Store(&t) }

// ErrClosed is returned by Serve after Shutdown.
var ErrClosed = errors.New("l4: proxy shut down")

// Serve accepts connections on ln until ln fails or Shutdown is called. ln must lend its
// descriptor (syscall.Conn, as *net.TCPListener does): connections are accepted, forwarded and
// closed as bare descriptors (sockio.Acceptor, sockio.Dial), never entering the net package.
func (p *TCP) Serve(ln net.Listener) error {
	sc, ok := ln.(syscall.Conn)
	if !ok {
		return errors.New("l4: the listener lends no descriptor")
	}
	if rl, err := p.relay.Listen(sc, p.acceptOn); err == nil {
		return p.serveInRelay(ln, sc, rl)
	}
	acc, err := sockio.NewAcceptor(sc)
	if err != nil {
		return err
	}
	defer acc.Close()
	if !p.register(ln, func() { _ = acc.Close() }) {
		return ErrClosed
	}
	defer p.unregister(ln)
	var backoff time.Duration
	for {
		err := acc.Accept(acceptBatch, p.accept)
		if err == nil {
			backoff = 0
			continue
		}
		if p.closing.Load() {
			return ErrClosed
		}
		var errno syscall.Errno
		if errors.As(err, &errno) && (errno == syscall.EMFILE || errno == syscall.ENFILE || errno == syscall.ENOBUFS || errno == syscall.ENOMEM) {
			// Out of descriptors or memory: wait a little instead of spinning.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			time.Sleep(backoff)
			continue
		}
		return err
	}
}

// serveInRelay waits while the relay's shards accept ln's connections themselves (see
// sockio.RelayListener: no acceptor goroutine wakes per connection), until Shutdown, or ln is
// found closed (checked every second: a closed socket leaves the epoll sets without an
// event).
func (p *TCP) serveInRelay(ln net.Listener, sc syscall.Conn, rl *sockio.RelayListener) error {
	defer rl.Close()
	if !p.register(ln, rl.Close) {
		return ErrClosed
	}
	defer p.unregister(ln)
	rc, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-rl.Done():
			if p.closing.Load() {
				return ErrClosed
			}
			return net.ErrClosed
		case <-tick.C:
			if err := rc.Control(func(uintptr) {}); err != nil {
				if p.closing.Load() {
					return ErrClosed
				}
				return err
			}
		}
	}
}

// register records a listener's stop for Shutdown; false once shutting down.
func (p *TCP) register(ln net.Listener, stop func()) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closing.Load() {
		return false
	}
	p.listeners[ln] = stop
	return true
}

func (p *TCP) unregister(ln net.Listener) {
	p.mu.Lock()
	delete(p.listeners, ln)
	p.mu.Unlock()
}

// accept takes an accepted client connection into the registry and serves it.
func (p *TCP) accept(fd int, peer netip.AddrPort) { p.acceptOn(fd, peer, sockio.RelayShard{}) }

// acceptOn is accept for a connection a relay shard accepted: its pair waits in that shard.
func (p *TCP) acceptOn(fd int, peer netip.AddrPort, shard sockio.RelayShard) {
	tc, id, ok := p.track(fd)
	if !ok {
		sockio.Close(fd)
		return
	}
	tc.peer, tc.start, tc.shard = peer, time.Now(), shard
	p.accepted.Add(1)
	p.active.Add(1)
	if !p.inline(tc, id) {
		go p.handle(tc, id)
	}
}

// inline takes a connection to the relay from the acceptor's goroutine, without one of its
// own, when nothing on the way can wait: no handshake to read, a route without persistence,
// PROXY header or 5-tuple key, a free slot (TryAcquire), an IP backend whose connect completes
// inside the connect calls (loopback and local networks). Sparing the goroutine spares the
// scheduler's wake-ups, most of what a short connection cost in user space. It reports false,
// having changed nothing, when handle must serve the connection instead; a connect still in
// progress is finished by a goroutine (finishConnect).
func (p *TCP) inline(tc *tcpConn, id uint64) bool {
	t := p.table.Load()
	if p.opts.AcceptProxy || t.needSNI {
		return false
	}
	r := t.route("")
	if r == nil || r.Persistence > 0 || r.SendProxy != 0 || r.Key == KeyFlow {
		return false
	}
	b, err := r.Pool.TryAcquire(uint64(balance.SourceHash(tc.peer.Addr())), balance.Tried{})
	if err != nil {
		return false // busy (the queue) or none usable: handle decides and counts
	}
	ap, ok := b.AddrPort()
	if !ok {
		r.Pool.Cancel(b) // a host name: handle dials through the resolver
		return false
	}
	tc.pool = r.Pool.Name
	start := time.Now()
	fd, c, err := sockio.DialStart(ap)
	switch {
	case c != nil:
		go p.finishConnect(tc, id, r, b, c, start)
	case err == nil:
		if why, ok := p.relayUp(tc, id, r, b, fd, time.Since(start), netip.AddrPort{}, netip.AddrPort{}, nil); !ok {
			p.closeEarly(tc, id, why)
		}
	case sockio.OutOfDescriptors(err):
		r.Pool.Cancel(b)
		p.outOfFDs.Add(1)
		p.noBackend.Add(1)
		p.closeEarly(tc, id, termResource)
	default:
		p.connectFailed(tc, r, b, time.Since(start), err)
		go p.handle(tc, id) // the other attempts
	}
	return true
}

// finishConnect waits for an inline connect in progress, then relays, or tries the other
// attempts as handle does.
func (p *TCP) finishConnect(tc *tcpConn, id uint64, r *Route, b *upstream.Backend, c *sockio.Connecting, start time.Time) {
	timeout := p.opts.ConnectTimeout
	if r.ConnectTimeout > 0 {
		timeout = r.ConnectTimeout
	}
	fd, err := c.Wait(timeout)
	if err != nil {
		p.connectFailed(tc, r, b, time.Since(start), err)
		p.handle(tc, id)
		return
	}
	if why, ok := p.relayUp(tc, id, r, b, fd, time.Since(start), netip.AddrPort{}, netip.AddrPort{}, nil); !ok {
		p.closeEarly(tc, id, why)
	}
}

// connectFailed accounts a failed connect to b (a failure for outlier detection, held out
// for a second) and keeps it out of the connection's next attempts.
func (p *TCP) connectFailed(tc *tcpConn, r *Route, b *upstream.Backend, d time.Duration, err error) {
	tc.failed = connectTerm(err)
	p.countersFor(b).connectFailures.Add(1)
	r.Pool.Release(b, d, true)
	r.Pool.Unreachable(b)
	if i := b.Index(); i >= 0 {
		tc.tried.Add(i)
	}
	tc.attempted++
}

// track registers a client connection for Shutdown; false once shutting down. The counter is
// raised before closing is read and Shutdown sets closing before it reads the counter, so one
// of the two always sees the other.
func (p *TCP) track(fd int) (*tcpConn, uint64, bool) {
	p.open.Add(1)
	id := p.seq.Add(1)
	if p.closing.Load() {
		p.untrack(id)
		return nil, 0, false
	}
	tc := newTCPConn(fd)
	s := &p.registry[id%connShards]
	s.mu.Lock()
	s.m[id] = tc
	s.mu.Unlock()
	return tc, id, true
}

func (p *TCP) untrack(id uint64) {
	s := &p.registry[id%connShards]
	s.mu.Lock()
	delete(s.m, id)
	s.mu.Unlock()
	if p.open.Add(-1) == 0 && p.closing.Load() {
		p.drainOne.Do(func() { close(p.drained) })
	}
}

// Shutdown stops accepting, then waits for established connections to finish until ctx ends,
// when it shuts down those still open and returns ctx's error once their goroutines have ended
// (a connection waiting in the backlog queue or connecting ends within queue_timeout or
// ConnectTimeout).
func (p *TCP) Shutdown(ctx context.Context) error {
	p.closing.Store(true)
	p.mu.Lock()
	for ln, stop := range p.listeners {
		_ = ln.Close()
		stop()
	}
	p.mu.Unlock()
	if p.open.Load() == 0 {
		p.drainOne.Do(func() { close(p.drained) })
	}
	select {
	case <-p.drained:
		return nil
	case <-ctx.Done():
	}
	for i := range p.registry {
		s := &p.registry[i]
		s.mu.Lock()
		for _, tc := range s.m {
			tc.kill()
		}
		s.mu.Unlock()
	}
	<-p.drained
	return ctx.Err()
}

// Stats returns the listener-wide counters.
func (p *TCP) Stats() Stats {
	return Stats{
		Accepted:     p.accepted.Load(),
		Active:       p.active.Load(),
		ProxyRefused: p.proxyRefused.Load(),
		NoRoute:      p.noRoute.Load(),
		NoBackend:    p.noBackend.Load(),
		IdleClosed:   p.idleClosed.Load(),
		Retries:      p.retries.Load(),

		OutOfDescriptors: p.outOfFDs.Load(),
		Terminations:     p.terms.snapshot(),
	}
}

// BackendStats returns this proxy's counters for b (zero if it never connected to b).
func (p *TCP) BackendStats(b *upstream.Backend) BackendStats {
	v, ok := p.counters.Load(b)
	if !ok {
		return BackendStats{}
	}
	c := v.(*backendCounters)
	return BackendStats{
		BytesIn: c.bytesIn.Load(), BytesOut: c.bytesOut.Load(), Conns: c.conns.Load(),
		Active: c.active.Load(), ConnectFailures: c.connectFailures.Load(),
	}
}

func (p *TCP) countersFor(b *upstream.Backend) *backendCounters {
	if v, ok := p.counters.Load(b); ok {
		return v.(*backendCounters)
	}
	v, _ := p.counters.LoadOrStore(b, new(backendCounters))
	return v.(*backendCounters)
}

// handle serves one client connection: it reads what routing needs, connects, and hands
// both connections to the relay, whose Done ends the connection's accounting.
func (p *TCP) handle(tc *tcpConn, id uint64) {
	if t, ok := p.forward(tc, id, tc.peer); !ok {
		p.closeEarly(tc, id, t)
	}
}

// closeEarly ends a connection that never reached the relay.
func (p *TCP) closeEarly(tc *tcpConn, id uint64, t term) {
	p.terms[t].Add(1)
	p.logLine(tc, t)
	p.untrack(id) // first: Shutdown's kill no longer reaches the descriptors
	sockio.Close(tc.fd)
	if b := tc.bfd.Load(); b >= 0 {
		sockio.Close(int(b))
	}
	p.active.Add(-1)
	tc.free()
}

// forward takes the connection up to the relay; false, with the termination state, when it
// ended before (handle closes its descriptors).
func (p *TCP) forward(tc *tcpConn, id uint64, src netip.AddrPort) (term, bool) {
	var dst netip.AddrPort // the listener's address, read when needed
	var prefix []byte      // client bytes read before forwarding starts
	t := p.table.Load()
	name := ""
	if p.opts.AcceptProxy || t.needSNI {
		var why term
		var ok bool
		if src, dst, prefix, name, why, ok = p.handshake(tc, t, src); !ok {
			return why, false
		}
		tc.peer = src
	}
	r := t.route(name)
	if r == nil {
		p.noRoute.Add(1)
		return termProxyRefused, false
	}
	tc.pool = r.Pool.Name
	if !dst.IsValid() && (r.Key == KeyFlow || r.SendProxy != 0) {
		dst = sockio.LocalAddr(tc.fd)
	}
	b, bfd, connectTime, why := p.connect(tc, r, src, dst)
	if bfd < 0 {
		p.noBackend.Add(1)
		return why, false
	}
	return p.relayUp(tc, id, r, b, bfd, connectTime, src, dst, prefix)
}

// relayUp hands a connected pair to the relay, with the PROXY header and the bytes read while
// routing (prefix) to send first; false, with the termination state, when it ended before.
func (p *TCP) relayUp(tc *tcpConn, id uint64, r *Route, b *upstream.Backend, bfd int, connectTime time.Duration, src, dst netip.AddrPort, prefix []byte) (term, bool) {
	tc.backend, tc.connect = b, connectTime
	// Stored before killed is read, as kill stores killed before it reads bfd: a Shutdown
	// racing with this connect either sees bfd or is seen here.
	tc.bfd.Store(int64(bfd))
	bcnt := p.countersFor(b)
	bcnt.conns.Add(1)
	if tc.killed.Load() {
		r.Pool.Release(b, connectTime, false)
		return termKilled, false
	}
	bcnt.active.Add(1)
	tc.p, tc.id, tc.route, tc.bcnt = p, id, r, bcnt
	var out []byte
	if r.SendProxy != 0 || len(prefix) > 0 {
		if r.SendProxy != 0 {
			out = proxyproto.Header{Version: r.SendProxy, Transport: proxyproto.TCP, Src: src, Dst: dst}.Append(make([]byte, 0, 64+len(prefix)))
		}
		out = append(out, prefix...)
		bcnt.bytesIn.Add(uint64(len(prefix)))
	}
	p.relay.Forward(sockio.RelayFlow{A: tc.fd, B: bfd, Prefix: out, Idle: p.opts.IdleTimeout, AB: &bcnt.bytesIn, BA: &bcnt.bytesOut, Done: tc.relayDone,
		Resets: true, Result: &tc.res, Shard: tc.shard})
	return termNormal, true
}

// handshake reads what routing needs before a backend is chosen: the PROXY header (which
// replaces the addresses) and the TLS ClientHello's server name, within HandshakeTimeout. The
// reads wait in the runtime's poller through a lent duplicate of the client's descriptor.
// prefix is what was read beyond the PROXY header, to forward unchanged.
func (p *TCP) handshake(tc *tcpConn, t *Table, src netip.AddrPort) (_, dst netip.AddrPort, prefix []byte, name string, why term, ok bool) {
	if p.opts.AcceptProxy && !p.proxyFrom.Load().Allows(src.Addr()) {
		p.proxyRefused.Add(1) // an untrusted peer could claim any client address
		return src, dst, nil, "", termProxyRefused, false
	}
	c, err := sockio.Lend(tc.fd)
	if err != nil {
		p.noRoute.Add(1)
		return src, dst, nil, "", termResource, false
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(p.opts.HandshakeTimeout))
	if p.opts.AcceptProxy {
		h, rest, err := proxyproto.Read(c, make([]byte, 0, 512))
		if err != nil {
			p.proxyRefused.Add(1)
			return src, dst, nil, "", readTerm(err), false
		}
		if h.HasAddrs() {
			src, dst = h.Src, h.Dst
		}
		prefix = rest
	}
	if t.needSNI {
		prefix, name, err = readHello(c, prefix)
		switch {
		case err == nil, err == errNotHello:
		case len(prefix) == 0 && errors.Is(err, os.ErrDeadlineExceeded):
			// Silent: perhaps a protocol where the server speaks first. Only a route
			// without SNI can take it.
		default:
			p.noRoute.Add(1) // the client went away, or stalled inside its ClientHello
			return src, dst, nil, "", readTerm(err), false
		}
	}
	return src, dst, prefix, name, termNormal, true
}

// readTerm is the state of a connection whose PROXY header or ClientHello could not be read.
func readTerm(err error) term {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return termClientWait
	}
	return termClientRead
}

// connect picks a backend and connects to it, trying other backends after a failed connect.
// It returns the backend, the connected descriptor (-1 when none could be had) and the
// connect time.
func (p *TCP) connect(tc *tcpConn, r *Route, src, dst netip.AddrPort) (*upstream.Backend, int, time.Duration, term) {
	var key uint64
	if r.Key == KeyFlow {
		key = uint64(balance.FlowHash(src.Addr(), dst.Addr(), src.Port(), dst.Port(), 6))
	} else {
		key = uint64(balance.SourceHash(src.Addr()))
	}
	timeout, attempts := p.opts.ConnectTimeout, p.opts.ConnectAttempts
	if r.ConnectTimeout > 0 {
		timeout = r.ConnectTimeout
	}
	if r.ConnectAttempts > 0 {
		attempts = min(r.ConnectAttempts, config.MaxAttempts) // balance.Tried holds 7 backends
	}
	why := termNoBackend
	if tc.attempted > 0 {
		why = tc.failed // an inline attempt's
	}
	for attempt := tc.attempted; attempt < attempts; attempt++ {
		if attempt > 0 {
			p.retries.Add(1)
			tc.retries++
		}
		var b *upstream.Backend
		var err error
		if attempt == 0 && r.Persistence > 0 {
			b, err = p.acquirePersistent(r, src.Addr(), key)
		} else {
			b, err = r.Pool.Acquire(key, tc.tried)
		}
		if err != nil {
			return nil, -1, 0, acquireTerm(err)
		}
		start := time.Now()
		var fd int
		if ap, ok := b.AddrPort(); ok {
			fd, err = sockio.Dial(ap, timeout)
		} else {
			fd, err = sockio.DialName(b.Address, timeout)
		}
		d := time.Since(start)
		if err != nil && sockio.OutOfDescriptors(err) {
			// The proxy's own limit: not the backend's fault, and no other backend would do
			// better.
			r.Pool.Cancel(b)
			p.outOfFDs.Add(1)
			return nil, -1, 0, termResource
		}
		if err == nil {
			if r.Persistence > 0 {
				now := time.Now().UnixNano()
				p.persist.put(r.Pool.Name, src.Addr(), b.ID, now+int64(r.Persistence), now)
			}
			return b, fd, d, termNormal
		}
		p.connectFailed(tc, r, b, d, err)
		why = tc.failed
	}
	return nil, -1, 0, why
}

// acquirePersistent acquires the backend src used last in r's pool while it is usable, by a
// pick that excludes every other backend (it may wait in the backlog queue); while it drains,
// without waiting (Pool.AcquireBackend: a draining backend keeps its persistent clients until
// the drain's grace ends); otherwise, a normal pick. The exclusion set holds seven backends,
// so in pools of more than eight the balancer may still choose another.
func (p *TCP) acquirePersistent(r *Route, src netip.Addr, key uint64) (*upstream.Backend, error) {
	if id, ok := p.persist.get(r.Pool.Name, src, time.Now().UnixNano()); ok {
		b := r.Pool.Backend(id)
		if b != nil && b.State() == upstream.StateDraining {
			if got := r.Pool.AcquireBackend(id); got != nil {
				return got, nil
			}
		}
		if b != nil && usable(b) {
			var others balance.Tried
			for i := 0; i <= 7 && others.Len() < 7; i++ {
				if i != b.Index() {
					others.Add(i)
				}
			}
			if got, err := r.Pool.Acquire(key, others); err == nil {
				return got, nil
			}
		}
	}
	return r.Pool.Acquire(key, balance.Tried{})
}

func usable(b *upstream.Backend) bool {
	s := b.State()
	return s == upstream.StateUp || s == upstream.StateSlowStart
}

func addrPort(a net.Addr) netip.AddrPort {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.AddrPort()
	}
	if ua, ok := a.(*net.UDPAddr); ok {
		return ua.AddrPort()
	}
	ap, _ := netip.ParseAddrPort(a.String())
	return ap
}
