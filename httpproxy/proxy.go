package httpproxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"ballast/config"
	"ballast/httpcore"
	"ballast/sockio"
	"ballast/tlsconf"
	"ballast/upstream"
)

// Proxy is the HTTP/1 engine: it serves HTTP/1.x connections with fasthttp and runs each
// request through package httpcore (routes, policy, forwarding rules, retry decisions, the
// access log), forwarding it to a backend over this engine's own keep-alive connections.
// Build it with New over the instance's httpcore.Core, serve listeners with Serve and stop it
// with Shutdown; the core's Swap installs configurations.
type Proxy struct {
	core   *httpcore.Core
	logger *slog.Logger

	mu      sync.Mutex // guards servers, pollers and closed; never taken on the request path
	servers []*fasthttp.Server
	pollers []*sockio.Poller
	closed  bool

	stopping atomic.Bool // Shutdown began: parked connections are closed, not served again

	parkedSince  atomic.Int64 // parkings since the last memory release (idlepark.go)
	releasing    atomic.Bool  // a release is waiting or running
	releaseEarly atomic.Bool  // the next release follows releaseBurst/8 parkings, not releaseBurst
	nextRelease  atomic.Int64 // no release starts before this, Unix ns
	releases     atomic.Int64 // memory releases done

	tunnels sync.WaitGroup // upgraded connections being relayed
}

// backendSlot is the HTTP/1 engine's attachment slot on upstream backends.
var backendSlot = upstream.NewSlot()

// backendState is what the HTTP/1 engine keeps per backend: its keep-alive connections. It is
// attached to the upstream.Backend (Pool.Attach), so they survive reloads.
type backendState struct {
	hc *fasthttp.HostClient
}

// stateOf is b's HTTP/1 state; every backend of a pool the core serves has one.
func stateOf(b *upstream.Backend) *backendState {
	s, _ := b.Attachment(backendSlot).(*backendState)
	return s
}

// New builds the HTTP/1 engine over core. It attaches a keep-alive client to every backend of
// every pool the core's tables use (from the next Swap on). logger receives the error log;
// nil discards it.
func New(core *httpcore.Core, logger *slog.Logger) *Proxy {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	p := &Proxy{core: core, logger: logger}
	core.Attach(attachHostClients)
	return p
}

// attachHostClients gives every backend of pool a keep-alive client for pc (httpcore.Attacher).
func attachHostClients(pc *config.Pool, pool *upstream.Pool) error {
	pcopy := *pc
	pool.Attach(backendSlot, func(b *upstream.Backend) any { return &backendState{hc: newHostClient(&pcopy, b)} })
	return nil
}

// listenerState is what one served listener's handler needs besides the table.
type listenerState struct {
	name    string
	idle    time.Duration
	tls     bool
	proxy   *Proxy
	server  *fasthttp.Server
	maxHdrs int
	// maxRequests is max_keepalive_requests; poller holds the listener's idle keep-alive
	// connections (idlepark.go), nil for TLS listeners and off Linux.
	maxRequests int
	poller      *sockio.Poller
	wakeq       chan net.Conn                // woken connections for idle wake workers (idlepark.go)
	cached      atomic.Pointer[listenerView] // this listener in the current table
}

// listenerView is the listener in one table, cached so requests skip a map lookup.
type listenerView struct {
	t *httpcore.Table
	l *httpcore.Listener
}

// view returns the current table and this listener in it.
func (ls *listenerState) view() *listenerView {
	t := ls.proxy.core.Table()
	if v := ls.cached.Load(); v != nil && v.t == t {
		return v
	}
	v := &listenerView{t: t, l: t.Listener(ls.name)}
	if v.l == nil { // a listener a reload removed: its last connections keep its old settings
		if old := ls.cached.Load(); old != nil {
			return old
		}
	}
	ls.cached.Store(v)
	return v
}

// Serve accepts connections on ln until Shutdown, serving them as the configured listener
// named listener (its timeouts, header limit, TLS and routes). It returns nil after Shutdown.
func (p *Proxy) Serve(listener string, ln net.Listener) error {
	var lc *config.Listener
	if t := p.core.Table(); t != nil {
		if l := t.Listener(listener); l != nil {
			lc = l.Conf
		}
	}
	if lc == nil {
		_ = ln.Close()
		return fmt.Errorf("httpproxy: no configured listener %q", listener)
	}
	var err error
	ls := &listenerState{name: lc.Name, proxy: p, tls: lc.TLS != nil, wakeq: make(chan net.Conn)}
	ls.idle = config.Or(lc.IdleTimeout.Duration, config.DefaultIdleTimeout)
	ls.maxHdrs = lc.MaxHeaderBytes
	if ls.maxHdrs <= 0 {
		ls.maxHdrs = config.DefaultMaxHeaderBytes
	}
	readHdr := config.Or(lc.ReadHeaderTimeout.Duration, config.DefaultReadHeaderTimeout)
	srv := &fasthttp.Server{
		Handler:                      ls.handle,
		ErrorHandler:                 ls.errorHandler,
		HeaderReceived:               ls.headerReceived,
		ExpectHandler:                ls.expect,
		NoDefaultServerHeader:        true,
		NoDefaultDate:                true,
		NoDefaultContentType:         true,
		ReadBufferSize:               ls.maxHdrs,
		WriteBufferSize:              16 << 10,
		ReadTimeout:                  readHdr,
		IdleTimeout:                  ls.idle,
		MaxRequestsPerConn:           lc.MaxKeepAliveRequests,
		MaxRequestBodySize:           math.MaxInt32,
		StreamRequestBody:            true,
		DisablePreParseMultipartForm: true,
		CloseOnShutdown:              true,
		LazyRequestTime:              true, // the proxy never asks for ctx.Time: save a clock read
		Logger:                       slogAdapter{p.logger},
	}
	ls.server = srv
	ls.maxRequests = lc.MaxKeepAliveRequests
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		_ = ln.Close()
		return errors.New("httpproxy: proxy is shut down")
	}
	p.servers = append(p.servers, srv)
	if lc.TLS == nil { // a TLS connection keeps its goroutine: crypto/tls buffers records above the socket
		if pl, err := sockio.NewPoller(ls.wake); err == nil {
			ls.poller = pl
			p.pollers = append(p.pollers, pl)
		}
	}
	p.mu.Unlock()
	_, behindFront := ln.(fronted)     // the server's front terminated TLS and counted the connection
	ln = sockio.Listener{Listener: ln} // client sockets read and written with raw calls: see sockio.IO
	if !behindFront {
		ln = connLimitListener{Listener: ln, core: p.core, listener: ls.name} // max_conns_per_client
	}
	if lc.TLS != nil && !behindFront {
		// TLS below the head watch, which must see the plaintext: on the ciphertext it would
		// take a "\n\n" in a ClientHello for a bare-LF head and drop the connection.
		tc, terr := tlsconf.Build(lc.TLS)
		if terr != nil {
			return fmt.Errorf("httpproxy: listener %s: %w", ls.name, terr)
		}
		tc.NextProtos = []string{tlsconf.ALPNHTTP1} // this plane speaks HTTP/1 only
		ln = tls.NewListener(ln, tc)
	}
	ln = headListener{ln} // heads ended by a bare LF are refused at once (headconn.go)
	if ls.poller != nil {
		ln = parkListener{Listener: ln, ls: ls} // idle keep-alive connections without a goroutine (idlepark.go)
		srv.Handler = ls.handleAndPark
		// A goroutine that served a connection which then parked waits in fasthttp's worker
		// pool, with its stack; end it as soon as the connection would have parked, so that
		// idle connections hold no stacks there (fasthttp's default keeps it 10 s).
		srv.MaxIdleWorkerDuration = parkAfter
	}
	err = srv.Serve(ln)
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if closed {
		return nil
	}
	return err
}

// Shutdown stops accepting connections, closes idle ones and waits until in-flight requests
// and upgraded tunnels finish or ctx ends. Serve calls return nil.
func (p *Proxy) Shutdown(ctx context.Context) error {
	p.mu.Lock()
	p.closed = true
	servers, pollers := p.servers, p.pollers
	p.mu.Unlock()
	// Parked connections are idle: close them, and park no more, before the servers wait for
	// the active ones.
	p.stopping.Store(true)
	for _, pl := range pollers {
		pl.Close()
	}
	var errs []error
	for _, s := range servers {
		if err := s.ShutdownWithContext(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	done := make(chan struct{})
	go func() { p.tunnels.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		errs = append(errs, ctx.Err())
	}
	return errors.Join(errs...)
}

// slogAdapter sends fasthttp's log lines to the error log at debug level: they are about
// single connections (clients that vanished, bad requests) and already answered.
type slogAdapter struct{ l *slog.Logger }

func (a slogAdapter) Printf(format string, args ...any) {
	if a.l.Enabled(context.Background(), slog.LevelDebug) {
		a.l.Debug(fmt.Sprintf(format, args...), "component", "httpproxy")
	}
}
