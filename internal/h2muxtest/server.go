// Package h2muxtest puts an h2mux connection on a net.Conn and answers every request itself
// with a fixed page: the harness that h2spec, curl and h2load run against in h2mux's tests,
// and the server that scripts/h2floor measures as the floor of Ballast's own HTTP/2. It is
// not Ballast's server: one goroutine per connection reads, feeds the Conn, and writes what
// it framed, as a shard of the event-loop engine will do for many connections at once.
//
// Concurrency: Serve and ServeConn may be called from any goroutine; each connection is
// driven by the goroutine that ServeConn runs on.
package h2muxtest

import (
	"crypto/tls"
	"errors"
	"net"
	"strconv"
	"sync"
	"time"

	"ballast/h2mux"

	"golang.org/x/net/http2/hpack"
)

// Server answers every request with 200, Page and ContentType (HEAD: no body), once the
// request is complete; request bodies are consumed and dropped.
type Server struct {
	Page        []byte
	ContentType string
	Config      h2mux.Config // Counters and Now are filled in when nil
	// Counters are all connections' (Config.Counters when set).
	Counters h2mux.Counters

	once   sync.Once
	origin time.Time
	length string
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

func (srv *Server) init() {
	srv.once.Do(func() {
		srv.origin = time.Now()
		srv.length = strconv.Itoa(len(srv.Page))
		srv.conns = map[net.Conn]struct{}{}
		if srv.Config.Counters == nil {
			srv.Config.Counters = &srv.Counters
		}
		if srv.Config.Now == nil {
			origin := srv.origin
			srv.Config.Now = func() int64 { return int64(time.Since(origin)) }
		}
		if srv.ContentType == "" {
			srv.ContentType = "text/html"
		}
	})
}

// Serve accepts connections from ln until it fails and serves each on its own goroutine.
// TLS listeners must offer ALPN "h2"; connections that negotiate anything else are closed.
func (srv *Server) Serve(ln net.Listener) error {
	srv.init()
	for {
		nc, err := ln.Accept()
		if err != nil {
			return err
		}
		go srv.ServeConn(nc)
	}
}

// Close closes every connection being served.
func (srv *Server) Close() {
	srv.init()
	srv.mu.Lock()
	defer srv.mu.Unlock()
	srv.closed = true
	for nc := range srv.conns {
		nc.Close()
	}
}

// ServeConn serves one connection until it ends.
func (srv *Server) ServeConn(nc net.Conn) {
	srv.init()
	srv.mu.Lock()
	if srv.closed {
		srv.mu.Unlock()
		nc.Close()
		return
	}
	srv.conns[nc] = struct{}{}
	srv.mu.Unlock()
	defer func() {
		srv.mu.Lock()
		delete(srv.conns, nc)
		srv.mu.Unlock()
		nc.Close()
	}()
	if tc, ok := nc.(*tls.Conn); ok {
		tc.SetDeadline(time.Now().Add(10 * time.Second))
		if tc.Handshake() != nil || tc.ConnectionState().NegotiatedProtocol != "h2" {
			return
		}
		tc.SetDeadline(time.Time{})
	}
	h := &handler{srv: srv}
	c := h2mux.NewConn(h, srv.Config)
	h.c = c
	buf := make([]byte, 32<<10)
	var armed int64
	for {
		if !flush(nc, c) {
			c.Abort()
			return
		}
		if c.Done() {
			linger(nc)
			return
		}
		if d := c.Deadline(); d != armed {
			armed = d
			var t time.Time
			if d != 0 {
				t = srv.origin.Add(time.Duration(d))
			}
			nc.SetReadDeadline(t)
		}
		n, err := nc.Read(buf)
		if n > 0 {
			c.Feed(buf[:n]) // an error leaves GOAWAY in the output and Done true
		}
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				armed = -1 // re-arm
				c.Tick()
				continue
			}
			c.Abort()
			return
		}
	}
}

// flush writes what the connection framed; it reports false when the socket broke.
func flush(nc net.Conn, c *h2mux.Conn) bool {
	for out := c.Output(); len(out) > 0; out = c.Output() {
		nc.SetWriteDeadline(time.Now().Add(10 * time.Second))
		n, err := nc.Write(out)
		c.Advance(n)
		if err != nil {
			return false
		}
	}
	return true
}

// linger half-closes the connection after its GOAWAY and reads what the client still
// sends for a moment, so that closing does not reset the connection before the client read
// the GOAWAY.
func linger(nc net.Conn) {
	if cw, ok := nc.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
	nc.SetReadDeadline(time.Now().Add(time.Second))
	var b [4096]byte
	for {
		if _, err := nc.Read(b[:]); err != nil {
			return
		}
	}
}

// handler answers one connection's streams.
type handler struct {
	srv     *Server
	c       *h2mux.Conn
	pending map[*h2mux.Stream][]byte // response bytes the window did not take yet
}

func (h *handler) Request(s *h2mux.Stream, req *h2mux.Request, end bool) {
	if req.Method == "HEAD" {
		s.User = headMark
	}
	if end {
		h.answer(s)
	}
}

var headMark = new(int)

func (h *handler) Data(s *h2mux.Stream, p []byte, end bool) {
	h.c.Consumed(s, len(p))
	if end {
		h.answer(s)
	}
}

func (h *handler) Trailers(s *h2mux.Stream, _ []hpack.HeaderField) { h.answer(s) }

func (h *handler) Reset(s *h2mux.Stream, _ h2mux.ErrCode) { delete(h.pending, s) }

func (h *handler) Writable(s *h2mux.Stream) {
	if p, ok := h.pending[s]; ok {
		h.write(s, p)
	}
}

func (h *handler) GoAway(h2mux.ErrCode, []byte) {}

func (h *handler) answer(s *h2mux.Stream) {
	hb := h.c.Headers(s, 200)
	hb.Add("content-type", h.srv.ContentType)
	hb.Add("content-length", h.srv.length)
	head := s.User == headMark
	if err := hb.Send(head || len(h.srv.Page) == 0); err != nil || head || len(h.srv.Page) == 0 {
		return
	}
	h.write(s, h.srv.Page)
}

func (h *handler) write(s *h2mux.Stream, p []byte) {
	n, err := h.c.WriteData(s, p, true)
	if err != nil || n == len(p) {
		delete(h.pending, s)
		return
	}
	if h.pending == nil {
		h.pending = map[*h2mux.Stream][]byte{}
	}
	h.pending[s] = p[n:]
}

// Listen starts a server on 127.0.0.1:0 (addr "" ) or addr: TLS with ALPN h2 when cert is
// set, h2c (prior knowledge) otherwise. It returns the listener; the server runs until the
// listener is closed.
func Listen(srv *Server, addr string, cert *tls.Certificate) (net.Listener, error) {
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	var ln net.Listener
	var err error
	if cert != nil {
		ln, err = tls.Listen("tcp", addr, &tls.Config{Certificates: []tls.Certificate{*cert}, NextProtos: []string{"h2"}})
	} else {
		ln, err = net.Listen("tcp", addr)
	}
	if err != nil {
		return nil, err
	}
	go srv.Serve(ln)
	return ln, nil
}
