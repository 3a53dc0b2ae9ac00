package h2proxy

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"sync"

	"ballast/config"
	"ballast/h2mux"
	"ballast/httpcore"
)

// Proxy is the HTTP/2 engine. Build it with New over the instance's httpcore.Core (whose
// Swap installs configurations), hand it connections with ServeConn and stop it with
// Shutdown.
type Proxy struct {
	core     *httpcore.Core
	bridge   httpcore.Bridge // the HTTP/1 engine's backend connections; nil: http.Transport only
	logger   *slog.Logger
	counters h2mux.Counters // every client connection's abuse counters

	mu     sync.Mutex // guards live and closed; taken per connection, never per stream
	live   map[*h2conn]struct{}
	closed bool
	conns  sync.WaitGroup
}

// New builds the HTTP/2 engine over core: every backend of every pool the core's tables use
// gets a transport for its pool's protocol and tls (from the next Swap on; a tls that cannot be
// built refuses the configuration). bridge, when not nil, carries requests without a body to
// http1 pools over the HTTP/1 engine's keep-alive connections. A nil logger discards its logs.
func New(core *httpcore.Core, bridge httpcore.Bridge, logger *slog.Logger) *Proxy {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	p := &Proxy{core: core, bridge: bridge, logger: logger, live: map[*h2conn]struct{}{}}
	core.Attach(attachTransports)
	return p
}

// Counters returns the client connections' HTTP/2 abuse counters (h2mux.Counters), summed
// over every connection the engine served.
func (p *Proxy) Counters() *h2mux.Counters { return &p.counters }

// MuxConfig is the h2mux configuration of a connection of listener l: the engine's limits
// (limits.go), the listener's header size and idle timeout, and the engine's counters. The
// event-loop engine (package h1) serves h2c connections with it too.
func (p *Proxy) MuxConfig(l *config.Listener) h2mux.Config {
	maxHdr := l.MaxHeaderBytes
	if maxHdr <= 0 {
		maxHdr = config.DefaultMaxHeaderBytes
	}
	idle := l.IdleTimeout.Duration
	if idle <= 0 {
		idle = config.DefaultIdleTimeout
	}
	return h2mux.Config{
		MaxConcurrentStreams: MaxConcurrentStreams,
		StreamWindow:         StreamWindow,
		ConnWindow:           ConnWindow,
		MaxHeaderListSize:    maxHdr,
		ResetBurst:           MaxClientResetsPerSecond,
		IdleTimeout:          idle,
		PingAfter:            PingAfter,
		PingTimeout:          PingTimeout,
		Counters:             &p.counters,
		Buffers:              muxBuffers{},
	}
}

// ServeConn serves one HTTP/2 connection (TLS after ALPN h2, or cleartext after the client's
// preface, which must still be unread) as the named listener's, until it closes and its
// streams are done. tls tells X-Forwarded-Proto.
func (p *Proxy) ServeConn(listener string, c net.Conn, tls bool) {
	var l *config.Listener
	if t := p.core.Table(); t != nil {
		if hl := t.Listener(listener); hl != nil {
			l = hl.Conf
		}
	}
	if l == nil {
		_ = c.Close()
		return
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		_ = c.Close()
		return
	}
	p.conns.Add(1) // under the mutex, so that Shutdown's Wait never races an Add
	p.mu.Unlock()
	defer p.conns.Done()
	cs := &connState{proxy: p, listener: listener, tls: tls, client: httpcore.ClientAddr(c.RemoteAddr()), local: c.LocalAddr()}
	cs.clientStr = c.RemoteAddr().String()
	cs.serveMux(c, p.MuxConfig(l))
}

// Shutdown sends GOAWAY on every connection and waits until their streams finish or ctx ends.
func (p *Proxy) Shutdown(ctx context.Context) error {
	p.mu.Lock()
	p.closed = true
	live := make([]*h2conn, 0, len(p.live))
	for h := range p.live {
		live = append(live, h)
	}
	p.mu.Unlock()
	for _, h := range live {
		h.shutdown()
	}
	done := make(chan struct{})
	go func() { p.conns.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// connState is one client connection: the handler of its streams.
type connState struct {
	proxy     *Proxy
	listener  string
	tls       bool
	client    netip.Addr
	local     net.Addr
	clientStr string
}

// muxBuffers lends the Conns their input and output buffers, so that an idle connection
// holds none.
type muxBuffers struct{}

var muxPool = sync.Pool{New: func() any { b := make([]byte, 0, 16<<10); return &b }}

// holders keeps the pointers muxPool's buffers travel in while a Conn has the buffer, so that
// handing buffers back and forth allocates nothing.
var holders = sync.Pool{New: func() any { return new([]byte) }}

func (muxBuffers) Get() []byte {
	bp := muxPool.Get().(*[]byte)
	b := *bp
	*bp = nil
	holders.Put(bp)
	return b[:0]
}

func (muxBuffers) Put(b []byte) {
	if cap(b) > 256<<10 {
		return // a rare large batch: not kept
	}
	bp := holders.Get().(*[]byte)
	*bp = b[:0]
	muxPool.Put(bp)
}
