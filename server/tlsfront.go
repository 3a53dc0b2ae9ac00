package server

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"ballast/config"
	"ballast/h2proxy"
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
func (f *fronts) front(listener string, h2 *h2proxy.Proxy) *front {
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
		timeout:  config.Or(l.ReadHeaderTimeout.Duration, config.DefaultReadHeaderTimeout),
	}
}

// front serves one socket.
type front struct {
	busy     *busyCount // the fronts' (see fronts.busy)
	listener string
	tls      *tlsconf.Server // nil on an h2c listener
	h2       *h2proxy.Proxy
	timeout  time.Duration // for the TLS handshake or the preface
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
			f.busy.add(1)
			go f.dispatch(sockio.NewConn(c), h1) // the fast path fasthttp's listeners have
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
	prefix, h2, err := sniffPreface(c)
	if err != nil {
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
// "PR…" but PRI, which HTTP/1 servers refuse). err is set only when nothing could be read;
// a connection that ends inside the preface is HTTP/1 (it gets its 400).
func sniffPreface(c io.Reader) (prefix []byte, h2 bool, err error) {
	buf := make([]byte, len(http2Preface))
	n := 0
	for n < len(buf) {
		m, err := c.Read(buf[n:])
		n += m
		if !bytes.Equal(buf[:n], http2Preface[:n]) {
			return buf[:n], false, nil
		}
		if err != nil {
			if n == 0 {
				return nil, false, err
			}
			return buf[:n], false, nil
		}
	}
	return buf, true, nil
}

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

// TLSTerminated tells httpproxy that connections arrive with TLS already terminated.
func (l *chanListener) TLSTerminated() {}

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
