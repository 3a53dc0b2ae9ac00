//go:build linux

package h1

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"

	"ballast/config"
	"ballast/evloop"
	"ballast/h2mux"
	"ballast/httpcore"
	"ballast/proxyproto"
)

// Engine is Ballast's event-loop HTTP/1.1 plane: it serves plain-HTTP listeners from the
// shards of an evloop.Group. Build it with New, serve listeners with Serve, install reloaded
// configurations with Swap and stop it with Shutdown; all methods are safe for concurrent use.
type Engine struct {
	logger *slog.Logger
	core   *httpcore.Core
	group  *evloop.Group
	shards []*shard

	mu        sync.Mutex // guards listeners and closed; never taken on the request path
	listeners []*listener
	closed    bool
	done      chan struct{} // closed by Shutdown: Serve calls return
	stopping  atomic.Bool
	// handshakes counts the TLS handshakes in progress, bounded by maxHandshakes (tls.go).
	handshakes, maxHandshakes atomic.Int64
	trust                     atomic.Pointer[proxyproto.Trust] // who accept_proxy listeners take headers from

	// backendHandshakes counts the backend TLS handshakes in progress, bounded by
	// maxBackendHandshakes (backendtls.go).
	backendHandshakes, maxBackendHandshakes atomic.Int64
	// maxEncoders bounds the encoders each shard has in use (compress.go); tests lower it.
	maxEncoders atomic.Int32

	// HTTP/2 client connections (h2c listeners, ALPN h2 on TLS ones; h2conn.go): the Conn
	// settings of a listener's connections (muxConfig, h2config.go) and the counters every
	// Conn adds to; fixed before Serve.
	h2config   func(*config.Listener) h2mux.Config
	h2counters *h2mux.Counters
}

// SetHTTP2 replaces the Conn settings of the engine's HTTP/2 client connections (New gives
// them muxConfig's, h2config.go) and the counters they add to; tests lower limits with it.
// Called before Serve.
func (e *Engine) SetHTTP2(cfg func(*config.Listener) h2mux.Config, counters *h2mux.Counters) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.h2config, e.h2counters = cfg, counters
}

// HTTP2Counters are the counters of the engine's HTTP/2 client connections (h2mux.Counters:
// streams, and what the limits refused), summed over every connection; package admin shows
// them on /metrics (ballast_http2_*).
func (e *Engine) HTTP2Counters() *h2mux.Counters {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.h2counters
}

// SetProxyTrust replaces the peers accept_proxy listeners take PROXY headers from (the
// configuration's trusted_proxies; empty: every peer); a connection from any other peer is
// closed at accept and counted. Safe while serving (a reload).
func (e *Engine) SetProxyTrust(t proxyproto.Trust) { e.trust.Store(&t) }

// ProxyRefused returns how many connections the engine's sockets of the named listener
// refused for their PROXY header, and whether it serves such a listener.
func (e *Engine) ProxyRefused(name string) (uint64, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	var n uint64
	served := false
	for _, l := range e.listeners {
		if l.name == name && l.proxy {
			n += l.refused.Load()
			served = true
		}
	}
	return n, served
}

// listener is one served socket and the configured listener's options, fixed at Serve.
type listener struct {
	e           *Engine
	name        string
	idle        int64 // idle_timeout, ns: keep-alive idleness and the request body timeout
	readHdr     int64 // read_header_timeout, ns
	maxHdr      int
	maxRequests int
	el          *evloop.Listener
	ln          net.Listener   // closed by Shutdown: new connections are refused, not queued
	proxy       bool           // accept_proxy: every connection starts with a PROXY header
	tls         *tlsOpts       // a TLS listener's (tls.go); nil on a plain one
	h2c         bool           // HTTP/2 with prior knowledge is served besides HTTP/1.1
	h2          h2mux.Config   // the Conn settings of its HTTP/2 connections (h2c, TLS)
	refused     atomic.Uint64  // connections refused for their PROXY header (or its sender)
	views       []listenerView // by shard: the core's view of the listener, per table
}

// listenerView caches the core's Listener for one table, on one shard.
type listenerView struct {
	t *httpcore.Table
	l *httpcore.Listener
	_ [48]byte
}

// view returns the core's Listener of l under t, looked up once per table and shard.
func (l *listener) view(sh *shard, t *httpcore.Table) *httpcore.Listener {
	v := &l.views[sh.id]
	if v.t != t {
		v.t, v.l = t, t.Listener(l.name)
	}
	return v.l
}

// shard is the engine's state on one evloop shard: the scratch every request of the shard
// shares (the parsed head, the buffers writes are assembled in) and free lists of
// connection and request records, so that a request allocates nothing.
type shard struct {
	e    *Engine
	s    *evloop.Shard
	id   int
	rd   bytes.Reader
	br   *bufio.Reader
	wbuf []byte            // what one write sends: a response head and the body bytes framed after it
	now  int64             // s.Now() of the event being handled
	rx   httpcore.Exchange // the core's answers to heads refused before an exchange began

	freeEx []*exchange
	freeC  []*clientConn
	freeB  []*backendConn

	clients *clientConn // every open client connection of the shard (shutdown walks it)

	// HTTP/2 (h2conn.go): the Conns' clock and buffers, the streams queued by Handler
	// events, and free stream records.
	clock     func() int64
	muxBufs   *muxBuffers
	h2q       []*h2stream
	h2running bool
	freeS     *h2stream
	nfreeS    int

	backends *backendConn // every open backend connection of the shard
	h2b      h2bShard     // HTTP/2 backends' connections, streams and counters (h2backend.go)
	log      *shardLog    // access-log lines, written off the shard (accesslog.go)
	z        encoders     // response compression's (compress.go)
	st       shardStats
}

// shardStats are one shard's counters, written by that shard only.
type shardStats struct {
	conns, accepted, requests, refused      atomic.Int64
	connsRefused                            atomic.Int64
	headerTimeouts, idleTimeouts            atomic.Int64
	bodyTimeouts, writeTimeouts             atomic.Int64
	tlsFailures, tlsRefused                 atomic.Int64
	backendTLS, backendTLSResumed           atomic.Int64
	backendTLSFailures, backendTLSRefused   atomic.Int64
	backendConns, connects, connectFailures atomic.Int64
	active, queued, tunnels                 atomic.Int64
	_                                       [64]byte
}

// maxFree bounds each shard's free lists: records beyond go to the collector.
const maxFree = 1024

// New builds an engine serving from core, with one shard per P (BALLAST_H1_SHARDS overrides,
// for measurements). It attaches its per-backend state through core (httpcore.Attacher), so
// it must be built before core's first Swap; reloads reach it through core.
func New(core *httpcore.Core, logger *slog.Logger) (*Engine, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	n, _ := strconv.Atoi(os.Getenv("BALLAST_H1_SHARDS"))
	g, err := evloop.NewGroup(n)
	if err != nil {
		return nil, err
	}
	e := &Engine{logger: logger, core: core, group: g, done: make(chan struct{}), h2config: muxConfig, h2counters: new(h2mux.Counters)}
	e.maxHandshakes.Store(maxHandshakes)
	e.maxBackendHandshakes.Store(maxBackendHandshakes)
	e.maxEncoders.Store(maxEncoders)
	for _, s := range g.Shards() {
		sh := &shard{e: e, s: s, id: s.ID(), wbuf: make([]byte, 0, 2*evloop.ReadBufSize)}
		sh.br = bufio.NewReaderSize(&sh.rd, evloop.ReadBufSize)
		sh.log = newShardLog(sh)
		sh.clock = s.Now
		sh.muxBufs = &muxBuffers{s: s}
		e.shards = append(e.shards, sh)
	}
	core.Attach(e.attach)
	return e, nil
}

// Stats sums the shards' counters.
func (e *Engine) Stats() Stats {
	var s Stats
	for _, sh := range e.shards {
		st := &sh.st
		s.Conns += st.conns.Load()
		s.Accepted += st.accepted.Load()
		s.Requests += st.requests.Load()
		s.Refused += st.refused.Load()
		s.ConnsRefused += st.connsRefused.Load()
		s.HeaderTimeouts += st.headerTimeouts.Load()
		s.IdleTimeouts += st.idleTimeouts.Load()
		s.BodyTimeouts += st.bodyTimeouts.Load()
		s.WriteTimeouts += st.writeTimeouts.Load()
		s.TLSFailures += st.tlsFailures.Load()
		s.TLSRefused += st.tlsRefused.Load()
		s.BackendConns += st.backendConns.Load()
		s.BackendTLS += st.backendTLS.Load()
		s.BackendTLSResumed += st.backendTLSResumed.Load()
		s.BackendTLSFailures += st.backendTLSFailures.Load()
		s.BackendTLSRefused += st.backendTLSRefused.Load()
		s.Connects += st.connects.Load()
		s.ConnectFailures += st.connectFailures.Load()
		s.Active += st.active.Load()
		s.Queued += st.queued.Load()
		s.Tunnels += st.tunnels.Load()
		s.LogDropped += sh.log.dropped.Load()
		s.Compressed += sh.z.compressed.Load()
		s.CompressDeclined += sh.z.declined.Load()
		s.Encoders += sh.z.held.Load()
	}
	e.mu.Lock()
	for _, l := range e.listeners {
		if l.el != nil {
			s.AcceptFailures += int64(l.el.Failed.Load())
		}
	}
	e.mu.Unlock()
	return s
}

// Serve serves ln as the configured listener named listener until Shutdown (or until ln's
// owner closes it), then returns nil. ln must lend its descriptor (syscall.Conn): the shards
// accept from it with raw accept4(2). On an h2c listener a connection's first bytes decide:
// the HTTP/2 client preface makes it an HTTP/2 connection, a request line an HTTP/1.1 one,
// both served on the shard that accepted it.
func (e *Engine) Serve(name string, ln net.Listener) error { return e.serve(name, ln, nil) }

// ServeTLS serves ln as the TLS listener named listener: handshakes with cfg (whose
// GetConfigForClient may change the certificates while serving), then HTTP/1.1, or HTTP/2
// when the client negotiated h2 by ALPN, on the shard that accepted the connection. On an
// accept_proxy listener the PROXY header is read on the shard first, and the handshake
// follows it.
func (e *Engine) ServeTLS(name string, ln net.Listener, cfg *tls.Config) error {
	return e.serve(name, ln, &tlsOpts{cfg: cfg})
}

func (e *Engine) serve(name string, ln net.Listener, tlsOpt *tlsOpts) error {
	var lc *config.Listener
	if t := e.core.Table(); t != nil {
		if cl := t.Listener(name); cl != nil {
			lc = cl.Conf
		}
	}
	if lc == nil {
		_ = ln.Close()
		return fmt.Errorf("h1: no configured listener %q", name)
	}
	sc, ok := ln.(syscall.Conn)
	if !ok {
		return errors.New("h1: the listener does not lend its socket")
	}
	l := &listener{
		e:           e,
		name:        lc.Name,
		idle:        int64(config.Or(lc.IdleTimeout.Duration, config.DefaultIdleTimeout)),
		readHdr:     int64(config.Or(lc.ReadHeaderTimeout.Duration, config.DefaultReadHeaderTimeout)),
		maxHdr:      lc.MaxHeaderBytes,
		maxRequests: lc.MaxKeepAliveRequests,
		proxy:       lc.AcceptProxy,
		tls:         tlsOpt,
		views:       make([]listenerView, len(e.shards)),
	}
	if l.maxHdr <= 0 {
		l.maxHdr = config.DefaultMaxHeaderBytes
	}
	l.maxHdr = min(l.maxHdr, evloop.ReadBufSize)
	e.mu.Lock()
	l.h2c = lc.H2C
	if l.h2c || tlsOpt != nil {
		l.h2 = e.h2config(lc)
	}
	if e.closed {
		e.mu.Unlock()
		return errors.New("h1: engine is shut down")
	}
	el, err := e.group.Listen(sc, l.accept)
	if err != nil {
		e.mu.Unlock()
		return err
	}
	l.el, l.ln = el, ln
	e.listeners = append(e.listeners, l)
	e.mu.Unlock()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-e.done:
			return nil
		case <-tick.C:
			if el.Closed() { // a reload removed the listener: its socket is gone
				el.Close()
				return nil
			}
		}
	}
}

// accept takes a new client connection on shard s.
func (l *listener) accept(s *evloop.Shard, fd int, peer netip.AddrPort) {
	sh := l.e.shards[s.ID()]
	sh.now = s.Now()
	if l.e.stopping.Load() {
		_, _, _ = syscall.RawSyscall(syscall.SYS_CLOSE, uintptr(fd), 0, 0)
		return
	}
	if l.proxy && !l.e.trust.Load().Allows(peer.Addr()) {
		l.refused.Add(1) // a header from an untrusted peer would let it claim any address
		_, _, _ = syscall.RawSyscall(syscall.SYS_CLOSE, uintptr(fd), 0, 0)
		return
	}
	ok, counted := true, false
	if !l.proxy { // behind a PROXY header the client is counted once the header names it
		ok, counted = l.e.core.AdmitConn(l.name, peer.Addr().Unmap()) // max_conns_per_client
	}
	if !ok {
		sh.st.connsRefused.Add(1)
		_, _, _ = syscall.RawSyscall(syscall.SYS_CLOSE, uintptr(fd), 0, 0)
		return
	}
	if l.tls != nil && !l.proxy { // behind a PROXY header the handshake follows it (tls.go)
		sh.st.accepted.Add(1)
		l.startHandshake(sh, &tlsPending{fd: fd, peer: peer, counted: counted, timeout: time.Duration(l.readHdr)})
		return
	}
	c := sh.newClient()
	c.l, c.peer, c.counted, c.proxyWait = l, peer, counted, l.proxy
	if err := s.Add(&c.FD, fd, c); err != nil {
		l.dropFD(fd, peer, counted)
		sh.freeClient(c)
		return
	}
	sh.st.accepted.Add(1)
	c.start()
}

// start serves a connection just registered with its shard (counted in Stats.Accepted by
// the caller, once however many times the connection comes to the shard).
func (c *clientConn) start() {
	sh := c.sh
	sh.st.conns.Add(1)
	sh.link(c)
	c.since = sh.now
	// A new connection's request is often there already (or, over TLS, came with the
	// handshake): read at once.
	c.Ready = evloop.Readable | evloop.Writable
	c.serve()
}

// Shutdown stops accepting (and closes the listening sockets), closes idle connections, lets the requests in flight and the
// tunnels finish until ctx ends (their responses close their connections), then closes
// everything. Serve calls return nil.
func (e *Engine) Shutdown(ctx context.Context) error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	ls := e.listeners
	e.mu.Unlock()
	e.stopping.Store(true)
	for _, l := range ls {
		l.el.Close()
		_ = l.ln.Close() // as fasthttp's Shutdown does: a connect is refused, not left in the backlog
	}
	close(e.done)
	e.onShards(func(sh *shard) { sh.drain() })
	var err error
	for e.active() > 0 {
		select {
		case <-ctx.Done():
			err = ctx.Err()
		case <-time.After(5 * time.Millisecond):
			continue
		}
		break
	}
	e.onShards(func(sh *shard) { sh.closeAll() })
	e.group.Close()
	for _, sh := range e.shards {
		sh.log.close() // after the shards: their last lines are in
	}
	return err
}

func (e *Engine) active() int64 {
	var n int64
	for _, sh := range e.shards {
		n += sh.st.active.Load() + sh.st.tunnels.Load()
	}
	return n
}

// onShards runs f on every shard's goroutine and waits until all have.
func (e *Engine) onShards(f func(*shard)) {
	var wg sync.WaitGroup
	for _, sh := range e.shards {
		wg.Add(1)
		sh.s.Post(shardTask{sh: sh, f: f, wg: &wg})
	}
	wg.Wait()
}

type shardTask struct {
	sh *shard
	f  func(*shard)
	wg *sync.WaitGroup
}

func (t shardTask) Run(s *evloop.Shard) {
	t.sh.now = s.Now()
	t.f(t.sh)
	t.wg.Done()
}

// drain closes the shard's idle client connections and makes the others close after their
// response.
func (sh *shard) drain() {
	for c := sh.clients; c != nil; {
		next := c.next
		c.closeAfter = true
		if c.h2 != nil {
			c.h2.shutdown() // GOAWAY: it closes when its streams are done
		} else if c.ex == nil && len(c.out) == 0 {
			c.close()
		}
		c = next
	}
}

// closeAll closes every connection of the shard, in use or not.
func (sh *shard) closeAll() {
	for sh.clients != nil {
		sh.clients.abort()
	}
	for sh.backends != nil {
		sh.backends.close()
	}
	sh.closeH2b()
}

func (sh *shard) link(c *clientConn) {
	c.prev, c.next = nil, sh.clients
	if c.next != nil {
		c.next.prev = c
	}
	sh.clients = c
}

func (sh *shard) unlink(c *clientConn) {
	if c.prev != nil {
		c.prev.next = c.next
	} else if sh.clients == c {
		sh.clients = c.next
	}
	if c.next != nil {
		c.next.prev = c.prev
	}
	c.prev, c.next = nil, nil
}

func (sh *shard) newClient() *clientConn {
	if n := len(sh.freeC); n > 0 {
		c := sh.freeC[n-1]
		sh.freeC = sh.freeC[:n-1]
		return c
	}
	c := &clientConn{sh: sh}
	c.timer.Init(c)
	return c
}

func (sh *shard) freeClient(c *clientConn) {
	gen := c.gen + 1
	*c = clientConn{sh: sh, gen: gen, timer: c.timer}
	if len(sh.freeC) < maxFree {
		sh.freeC = append(sh.freeC, c)
	}
}

func (sh *shard) newExchange(c front) *exchange {
	var ex *exchange
	if n := len(sh.freeEx); n > 0 {
		ex = sh.freeEx[n-1]
		sh.freeEx = sh.freeEx[:n-1]
	} else {
		ex = &exchange{sh: sh, rh: new(fasthttp.RequestHeader)}
	}
	ex.c = c
	sh.st.active.Add(1)
	return ex
}

func (sh *shard) freeExchange(ex *exchange) {
	sh.st.active.Add(-1)
	dec, up := ex.dec.trailer[:0], ex.resp.dec.trailer[:0]
	cx, rh, rm, msg := ex.cx, ex.rh, ex.rm, ex.msg
	cx.Reset()
	rh.Reset()
	rm.reset(nil, nil)
	msg.reset(nil, nil, nil)
	*ex = exchange{sh: sh, cx: cx, rh: rh, msg: msg, rm: rm, gen: ex.gen + 1, ticket: ex.ticket, more: ex.more}
	ex.dec.trailer, ex.resp.dec.trailer = dec, up
	if len(sh.freeEx) < maxFree {
		sh.freeEx = append(sh.freeEx, ex)
	}
}
