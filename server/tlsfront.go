package server

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"ballast/config"
	"ballast/h2proxy"
	"ballast/httpcore"
	"ballast/sockio"
	"ballast/tlsconf"
)

// A front looks at each connection of a TLS or h2c listener before a plane gets it: it
// terminates TLS and sends connections that negotiated h2 by ALPN to the HTTP/2 plane, the
// others to the HTTP/1 plane (fasthttp) through a channel-backed net.Listener; on an h2c
// listener it reads the first bytes and sends connections that open with the HTTP/2 client
// preface to the HTTP/2 plane. Plain listeners without h2c have no front: fasthttp accepts
// their sockets itself, raw I/O and all.

// fronts holds the TLS state of the http plane's listeners across reloads.
type fronts struct {
	mu   sync.Mutex
	conf map[string]config.Listener // the installed configuration's listeners
	tls  map[string]*tlsconf.Server // by listener name; kept across reloads
	// busy counts the fronts' accept loops and the connections being sniffed or handshaken,
	// so that the HTTP/2 plane drains only after every accepted connection has reached it.
	busy busyCount
}

// wait returns when no front accepts or dispatches any more (their sockets are closed by the
// HTTP/1 plane's shutdown), or when ctx ends.
func (f *fronts) wait(ctx context.Context) { f.busy.wait(ctx) }

// busyCount is a count that can be waited on until it is zero, with a deadline; unlike a
// WaitGroup it may go up from zero while someone waits.
type busyCount struct {
	mu      sync.Mutex
	n       int
	waiters []chan struct{}
}

func (b *busyCount) add(d int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.n += d
	if b.n == 0 {
		for _, w := range b.waiters {
			close(w)
		}
		b.waiters = nil
	}
}

func (b *busyCount) wait(ctx context.Context) {
	b.mu.Lock()
	if b.n == 0 {
		b.mu.Unlock()
		return
	}
	w := make(chan struct{})
	b.waiters = append(b.waiters, w)
	b.mu.Unlock()
	select {
	case <-w:
	case <-ctx.Done():
	}
}

// prepare reads the certificates of every TLS listener of cfg; commit installs them and
// cfg's listeners. A file that cannot be read refuses the configuration (the old
// certificates keep serving).
func (f *fronts) prepare(cfg *config.Config) (commit func(), err error) {
	built := map[string]*tls.Config{}
	for _, l := range cfg.Listeners {
		if l.TLS == nil || l.IsL4() {
			continue
		}
		c, err := tlsconf.Build(l.TLS)
		if err != nil {
			return nil, errors.New("listener " + l.Name + ": " + err.Error())
		}
		built[l.Name] = c
	}
	return func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.tls == nil {
			f.tls = map[string]*tlsconf.Server{}
		}
		f.conf = map[string]config.Listener{}
		for _, l := range cfg.Listeners {
			f.conf[l.Name] = l
		}
		for name, c := range built {
			if s := f.tls[name]; s != nil {
				s.Install(c)
			} else {
				f.tls[name] = tlsconf.NewServer(c)
			}
		}
	}, nil
}

// front returns the front for the named listener, or nil when it needs none.
func (f *fronts) front(listener string, h2 *h2proxy.Proxy, core *httpcore.Core) *front {
	f.mu.Lock()
	defer f.mu.Unlock()
	l, ok := f.conf[listener]
	if !ok || (l.TLS == nil && !l.H2C) {
		return nil
	}
	return &front{
		busy:     &f.busy,
		listener: listener,
		tls:      f.tls[listener],
		h2:       h2,
		core:     core,
		timeout:  config.Or(l.ReadHeaderTimeout.Duration, config.DefaultReadHeaderTimeout),
		maxLine:  max(l.MaxHeaderBytes, config.DefaultMaxHeaderBytes),
	}
}

// front serves one socket.
type front struct {
	busy     *busyCount // the fronts' (see fronts.busy)
	listener string
	tls      *tlsconf.Server // nil on an h2c listener
	h2       *h2proxy.Proxy
	core     *httpcore.Core // counts connections against max_conns_per_client
	timeout  time.Duration  // for the TLS handshake or the preface
	maxLine  int            // the longest request line an h2c listener's sniffing reads
}

// serve accepts on ln and dispatches each connection in its own goroutine; serveHTTP1 serves
// the HTTP/1 connections from the listener it is given. It returns serveHTTP1's result.
func (f *front) serve(ln net.Listener, serveHTTP1 func(net.Listener) error) error {
	h1 := newChanListener(ln.Addr())
	f.busy.add(1)
	go func() {
		defer f.busy.add(-1)
		for {
			c, err := ln.Accept()
			if err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					continue
				}
				h1.Close()
				return
			}
			// max_conns_per_client counts the connection here, before TLS and whatever HTTP
			// version it speaks: an HTTP/2 connection counts once, however many streams.
			peer := httpcore.ClientAddr(c.RemoteAddr())
			ok, counted := f.core.AdmitConn(f.listener, peer)
			if !ok {
				_ = c.Close()
				continue
			}
			c = sockio.NewConn(c) // the fast path fasthttp's listeners have
			if counted {
				c = &countedConn{Conn: c, core: f.core, listener: f.listener, peer: peer}
			}
			f.busy.add(1)
			go f.dispatch(c, h1)
		}
	}()
	err := serveHTTP1(h1)
	_ = ln.Close() // fasthttp stopped (shutdown): accept no more
	return err
}

// http2Preface is the client connection preface (RFC 9113 §3.4).
var http2Preface = []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")

// dispatch hands c to the plane that speaks its protocol; it counts in busy (taken by the
// accept loop) until then.
func (f *front) dispatch(c net.Conn, h1 *chanListener) {
	handed := sync.OnceFunc(func() { f.busy.add(-1) })
	defer handed()
	_ = c.SetReadDeadline(time.Now().Add(f.timeout))
	if f.tls != nil {
		tc := tls.Server(c, f.tls.Config())
		ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
		err := tc.HandshakeContext(ctx)
		cancel()
		if err != nil {
			_ = c.Close()
			return
		}
		_ = c.SetReadDeadline(time.Time{})
		if tc.ConnectionState().NegotiatedProtocol == tlsconf.ALPNH2 {
			handed() // the HTTP/2 plane's shutdown waits for this (fronts.wait)
			f.h2.ServeConn(f.listener, tc, true)
			return
		}
		h1.push(tc)
		return
	}
	prefix, h2, err := sniffPreface(c, f.maxLine)
	if err != nil {
		// Neither the HTTP/2 preface nor an HTTP/1 request line: an HTTP/2 client's invalid
		// preface (RFC 9113 §3.4: a connection error), closed without an answer.
		_ = c.Close()
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	pc := &prefixConn{Conn: c, prefix: prefix}
	if h2 {
		handed()
		f.h2.ServeConn(f.listener, pc, false)
		return
	}
	h1.push(pc)
}

// sniffPreface reads from c until the bytes leave the HTTP/2 client preface or complete it,
// and returns what it read. An HTTP/1 request differs within its first two bytes (no method is
// "PR…" but PRI, which HTTP/1 servers refuse). Bytes that are not the preface must then open
// an HTTP/1 request line (method, target, HTTP/d.d; read until its end, at most maxLine bytes):
// anything else is an invalid preface, an error. A connection that ends early is HTTP/1 (it
// gets its 400); err is also set when nothing could be read.
func sniffPreface(c io.Reader, maxLine int) (prefix []byte, h2 bool, err error) {
	buf := make([]byte, len(http2Preface), 512)
	n := 0
	for n < len(http2Preface) {
		m, err := c.Read(buf[n:len(http2Preface)])
		n += m
		if !bytes.Equal(buf[:n], http2Preface[:n]) {
			break
		}
		if err != nil {
			if n == 0 {
				return nil, false, err
			}
			return buf[:n], false, nil
		}
	}
	if n == len(http2Preface) && bytes.Equal(buf, http2Preface) {
		return buf, true, nil
	}
	buf = buf[:n]
	for {
		line := bytes.TrimLeft(buf, "\r\n") // RFC 9112 §2.2: empty lines before a request are skipped
		if i := bytes.IndexByte(line, '\n'); i >= 0 {
			if !requestLine(bytes.TrimSuffix(line[:i], []byte("\r"))) {
				return nil, false, errInvalidPreface
			}
			return buf, false, nil
		}
		if len(buf) >= maxLine {
			return buf, false, nil // too long to be sure: fasthttp answers it
		}
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		m, err := c.Read(buf[len(buf):min(cap(buf), maxLine)])
		buf = buf[:len(buf)+m]
		if err != nil {
			return buf, false, nil
		}
	}
}

// errInvalidPreface is a connection on an h2c listener that opens with neither the HTTP/2
// preface nor an HTTP/1 request line.
var errInvalidPreface = errors.New("neither the HTTP/2 preface nor an HTTP/1 request line")

// requestLine reports whether line looks like an HTTP/1 request line (httpcore.RequestLine).
func requestLine(line []byte) bool { return httpcore.RequestLine(line) }

// prefixConn replays bytes already read from a connection before reading on.
type prefixConn struct {
	net.Conn
	prefix []byte
}

func (c *prefixConn) Read(p []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(p, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// NetConn is the connection under c (the HTTP/1 engine finds the socket through it).
func (c *prefixConn) NetConn() net.Conn { return c.Conn }

// CloseWrite half-closes the connection, which the tunnel relies on.
func (c *prefixConn) CloseWrite() error { return closeWrite(c.Conn) }

// countedConn is a connection counted against max_conns_per_client; it gives its place back
// when closed (once).
type countedConn struct {
	net.Conn
	core     *httpcore.Core
	listener string
	peer     netip.Addr
	closed   atomic.Bool
}

func (c *countedConn) Close() error {
	if c.closed.CompareAndSwap(false, true) {
		c.core.ReleaseConn(c.listener, c.peer)
	}
	return c.Conn.Close()
}

// NetConn is the connection under c.
func (c *countedConn) NetConn() net.Conn { return c.Conn }

// CloseWrite half-closes the connection, which the tunnel relies on.
func (c *countedConn) CloseWrite() error { return closeWrite(c.Conn) }

func closeWrite(c net.Conn) error {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// chanListener is a net.Listener fed with connections by a front; its Close stops Accept.
type chanListener struct {
	addr net.Addr
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
}

func newChanListener(addr net.Addr) *chanListener {
	return &chanListener{addr: addr, ch: make(chan net.Conn), done: make(chan struct{})}
}

// Fronted tells the HTTP/1 engine that connections arrive from a front: TLS already
// terminated, counted against max_conns_per_client.
func (l *chanListener) Fronted() {}

func (l *chanListener) push(c net.Conn) {
	select {
	case l.ch <- c:
	case <-l.done:
		_ = c.Close()
	}
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *chanListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *chanListener) Addr() net.Addr { return l.addr }
