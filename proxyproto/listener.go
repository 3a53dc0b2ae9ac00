package proxyproto

import (
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultTimeout is how long a Listener waits for a client's header when none is configured.
const DefaultTimeout = 5 * time.Second

// Listener reads a PROXY protocol header from every connection it accepts (accept_proxy).
type Listener struct {
	net.Listener
	timeout time.Duration
	refused atomic.Uint64
	from    atomic.Pointer[Trust]
}

// Trust is the set of peer addresses a PROXY protocol header is believed from (the
// configuration's trusted_proxies). An empty Trust believes every peer.
type Trust []netip.Prefix

// Allows reports whether a header from peer is believed.
func (t *Trust) Allows(peer netip.Addr) bool {
	if t == nil || len(*t) == 0 {
		return true
	}
	peer = peer.Unmap()
	for _, p := range *t {
		if p.Contains(peer) {
			return true
		}
	}
	return false
}

// SetTrust replaces the peers whose connections are accepted (nil or empty: every peer); a
// connection from any other peer is closed at accept and counted as refused. Safe to call
// while the listener serves (a reload).
func (l *Listener) SetTrust(t Trust) { l.from.Store(&t) }

// NewListener wraps ln; each connection must send its header within timeout (0 means
// DefaultTimeout) of its first Read, RemoteAddr or LocalAddr.
func NewListener(ln net.Listener, timeout time.Duration) *Listener {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	return &Listener{Listener: ln, timeout: timeout}
}

// Accept returns the next connection without reading from it, so that a slow client cannot
// hold up the clients behind it.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if from := l.from.Load(); from != nil && !from.Allows(PeerAddr(c)) {
			l.refused.Add(1) // a header from an untrusted peer would let it claim any address
			_ = c.Close()
			continue
		}
		return &Conn{Conn: c, ln: l}, nil
	}
}

// PeerAddr is c's remote IP address (the zero Addr when it has none).
func PeerAddr(c net.Conn) netip.Addr {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		ip, _ := netip.AddrFromSlice(a.IP)
		return ip.Unmap()
	}
	return netip.Addr{}
}

// Refused counts connections closed because their header was missing, malformed or late.
func (l *Listener) Refused() uint64 { return l.refused.Load() }

// Conn is an accepted connection whose addresses come from its PROXY protocol header.
type Conn struct {
	net.Conn
	ln   *Listener
	once sync.Once
	hdr  Header
	rest []byte // stream bytes that arrived with the header, served by Read first
	err  error

	// dmu guards userRead, the read deadline the application set, which the header read
	// honours (the earlier of it and the listener's timeout) and restores afterwards.
	dmu      sync.Mutex
	userRead time.Time
}

// SetReadDeadline sets the application's read deadline.
func (c *Conn) SetReadDeadline(t time.Time) error {
	c.dmu.Lock()
	defer c.dmu.Unlock()
	c.userRead = t
	return c.Conn.SetReadDeadline(t)
}

// SetDeadline sets the application's read and write deadlines.
func (c *Conn) SetDeadline(t time.Time) error {
	c.dmu.Lock()
	defer c.dmu.Unlock()
	c.userRead = t
	return c.Conn.SetDeadline(t)
}

// Header reads the header if that has not happened yet and returns it.
func (c *Conn) Header() (Header, error) {
	c.once.Do(c.readHeader)
	return c.hdr, c.err
}

func (c *Conn) readHeader() {
	var buf [256]byte
	c.dmu.Lock()
	dl := time.Now().Add(c.ln.timeout)
	if u := c.userRead; !u.IsZero() && u.Before(dl) {
		dl = u
	}
	_ = c.Conn.SetReadDeadline(dl)
	c.dmu.Unlock()
	h, rest, err := Read(c.Conn, buf[:])
	if err == nil {
		c.dmu.Lock()
		err = c.Conn.SetReadDeadline(c.userRead)
		c.dmu.Unlock()
	}
	if err != nil {
		c.err = err
		c.ln.refused.Add(1)
		_ = c.Conn.Close()
		return
	}
	c.hdr = h
	if len(rest) > 0 {
		c.rest = append([]byte(nil), rest...)
	}
}

// Read returns the stream after the header; it fails with the header's error if there was none.
func (c *Conn) Read(b []byte) (int, error) {
	if _, err := c.Header(); err != nil {
		return 0, err
	}
	if len(c.rest) > 0 {
		n := copy(b, c.rest)
		c.rest = c.rest[n:]
		if len(c.rest) == 0 {
			c.rest = nil
		}
		return n, nil
	}
	return c.Conn.Read(b)
}

// RemoteAddr is the client named in the header, or the socket's peer for LOCAL and UNKNOWN
// headers and refused connections.
func (c *Conn) RemoteAddr() net.Addr {
	if h, err := c.Header(); err == nil && h.HasAddrs() {
		return addr(h.Transport, h.Src)
	}
	return c.Conn.RemoteAddr()
}

// LocalAddr is the address the client connected to according to the header, or the socket's.
func (c *Conn) LocalAddr() net.Addr {
	if h, err := c.Header(); err == nil && h.HasAddrs() {
		return addr(h.Transport, h.Dst)
	}
	return c.Conn.LocalAddr()
}

// CloseWrite half-closes the connection when the underlying one can (TCP), so that proxies
// that forward a FIN keep working through the wrapper.
func (c *Conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}

// NetConn is the accepted connection underneath.
func (c *Conn) NetConn() net.Conn { return c.Conn }

func addr(t Transport, ap netip.AddrPort) net.Addr {
	if t == UDP {
		return net.UDPAddrFromAddrPort(ap)
	}
	return net.TCPAddrFromAddrPort(ap)
}
