//lint:file-ignore SA1019 issue 11 builds the HTTP/2 plane on golang.org/x/net/http2, deprecated since v0.62 in favour of net/http's own HTTP/2 (http.Server.Protocols, HTTP2Config); moving is a follow-up.

package h2proxy

import (
	"bufio"
	"context"
	cryptotls "crypto/tls"
	"errors"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"

	"ballast/config"
	"ballast/httpcore"
)

// Proxy is the HTTP/2 engine. Build it with New over the instance's httpcore.Core (whose
// Swap installs configurations), hand it connections with ServeConn and stop it with
// Shutdown.
type Proxy struct {
	core   *httpcore.Core
	bridge httpcore.Bridge // the HTTP/1 engine's backend connections; nil: http.Transport only
	logger *slog.Logger

	mu      sync.Mutex // guards servers and closed; taken per connection, never per stream
	servers map[string]*listenerServer
	closed  bool
	conns   sync.WaitGroup
}

// listenerServer is the HTTP/2 server of one listener: its limits are the listener's options
// when it first served a connection, like the HTTP/1 plane's.
type listenerServer struct {
	hs  *http.Server // never serves; Shutdown uses it to send GOAWAY on every connection
	h2s *http2.Server
}

// New builds the HTTP/2 engine over core: every backend of every pool the core's tables use
// gets a transport for its pool's protocol and tls (from the next Swap on; a tls that cannot be
// built refuses the configuration). bridge, when not nil, carries requests without a body to
// http1 pools over the HTTP/1 engine's keep-alive connections. A nil logger discards its logs.
func New(core *httpcore.Core, bridge httpcore.Bridge, logger *slog.Logger) *Proxy {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	p := &Proxy{core: core, bridge: bridge, logger: logger, servers: map[string]*listenerServer{}}
	core.Attach(attachTransports)
	return p
}

// server returns the listener's HTTP/2 server, building it on first use, and counts one
// connection in p.conns (under the mutex, so that Shutdown's Wait never races an Add).
func (p *Proxy) server(l *config.Listener) (*listenerServer, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, errors.New("h2proxy: shut down")
	}
	if s := p.servers[l.Name]; s != nil {
		p.conns.Add(1)
		return s, nil
	}
	maxHdr := l.MaxHeaderBytes
	if maxHdr <= 0 {
		maxHdr = config.DefaultMaxHeaderBytes
	}
	idle := l.IdleTimeout.Duration
	if idle <= 0 {
		idle = config.DefaultIdleTimeout
	}
	hs := &http.Server{
		MaxHeaderBytes: maxHdr, // the header list size limit (SETTINGS_MAX_HEADER_LIST_SIZE)
		ErrorLog:       log.New(debugWriter{p.logger}, "", 0),
	}
	h2s := &http2.Server{
		MaxConcurrentStreams:         MaxConcurrentStreams,
		MaxDecoderHeaderTableSize:    4096,
		MaxEncoderHeaderTableSize:    4096,
		MaxReadFrameSize:             MaxReadFrameSize, // the protocol's default: peers that ignore SETTINGS stay right
		IdleTimeout:                  idle,
		MaxUploadBufferPerConnection: ConnWindow,
		MaxUploadBufferPerStream:     StreamWindow,
		ReadIdleTimeout:              PingAfter,
		PingTimeout:                  PingTimeout,
	}
	if err := http2.ConfigureServer(hs, h2s); err != nil {
		return nil, err
	}
	s := &listenerServer{hs: hs, h2s: h2s}
	p.servers[l.Name] = s
	p.conns.Add(1)
	return s, nil
}

// ServeConn serves one HTTP/2 connection (TLS after ALPN h2, or cleartext after the client's
// preface, which must still be unread) as the named listener's, until it closes. tls tells
// X-Forwarded-Proto.
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
	srv, err := p.server(l)
	if err != nil {
		_ = c.Close()
		return
	}
	defer p.conns.Done()
	wc := &watchConn{Conn: c, r: c}
	if _, ok := c.(*cryptotls.Conn); !ok {
		// x/net/http2 reads each frame as two exact reads (header, payload): without a buffer
		// that is two system calls per frame. crypto/tls buffers whole records already.
		wc.r = bufio.NewReaderSize(c, clientReadBuffer)
	}
	wc.r = newSettingsFilter(wc.r) // repeated SETTINGS parameters, which x/net refuses (settings.go)
	cs := &connState{proxy: p, listener: listener, conn: wc, tls: tls, client: httpcore.ClientAddr(c.RemoteAddr()), local: c.LocalAddr()}
	cs.clientStr = c.RemoteAddr().String()
	var served net.Conn = newBatchConn(wc)
	if tc, ok := c.(*cryptotls.Conn); ok {
		served = tlsStateConn{served, tc} // x/net checks the TLS version and cipher of h2 (RFC 9113 §9.2)
	}
	srv.h2s.ServeConn(served, &http2.ServeConnOpts{BaseConfig: srv.hs, Handler: cs})
}

// Shutdown sends GOAWAY on every connection and waits until their streams finish or ctx ends.
func (p *Proxy) Shutdown(ctx context.Context) error {
	p.mu.Lock()
	p.closed = true
	servers := p.servers
	p.mu.Unlock()
	for _, s := range servers {
		_ = s.hs.Shutdown(ctx) // serves no listener: returns at once, after starting GOAWAY
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
	conn      *watchConn
	tls       bool
	client    netip.Addr
	local     net.Addr
	clientStr string

	resetSec atomic.Int64 // the unix second resets counts
	resets   atomic.Int64
	killed   atomic.Bool
}

// clientReset notes one stream the client cancelled before its response was complete, and
// closes the connection when there were more than MaxClientResetsPerSecond this second.
func (cs *connState) clientReset() {
	if cs.conn.gone.Load() {
		return // the whole connection ended: its streams were not reset one by one
	}
	now := time.Now().Unix()
	if s := cs.resetSec.Load(); s != now && cs.resetSec.CompareAndSwap(s, now) {
		cs.resets.Store(0)
	}
	if cs.resets.Add(1) > MaxClientResetsPerSecond && cs.killed.CompareAndSwap(false, true) {
		cs.proxy.logger.Warn("closing an HTTP/2 connection that resets streams too fast (rapid reset)", "listener", cs.listener, "client", cs.clientStr, "limit_per_second", MaxClientResetsPerSecond)
		_ = cs.conn.Close()
	}
}

// watchConn notes when reading from the client failed (it closed or vanished), so that the
// streams cancelled by a connection's end are not counted as resets.
type watchConn struct {
	net.Conn
	r    io.Reader // Conn, or a buffer in front of it
	gone atomic.Bool
}

// clientReadBuffer is the read buffer of a cleartext client connection: room for the frames
// of many requests, read with one system call.
const clientReadBuffer = 4 << 10

func (c *watchConn) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if err != nil {
		c.gone.Store(true)
	}
	return n, err
}

// tlsStateConn is a wrapped TLS connection that still shows its TLS state to x/net/http2.
type tlsStateConn struct {
	net.Conn
	tc *cryptotls.Conn
}

func (c tlsStateConn) ConnectionState() cryptotls.ConnectionState { return c.tc.ConnectionState() }

// debugWriter sends the http2 server's log lines (single connections' protocol errors) to
// the error log at debug level.
type debugWriter struct{ l *slog.Logger }

func (w debugWriter) Write(b []byte) (int, error) {
	w.l.Debug(string(b), "component", "h2proxy")
	return len(b), nil
}
