package sockio

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
)

// eofMarker stands for a read of zero bytes until opError turns it into io.EOF.
var eofMarker = &os.SyscallError{Syscall: "read", Err: io.EOF}

// opError wraps a failed raw call like net.Conn does, so callers' errors.Is checks on errno
// values and io.EOF keep working.
func opError(op string, c net.Conn, err error) error {
	if err == eofMarker {
		return io.EOF
	}
	return &net.OpError{Op: op, Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: os.NewSyscallError(op, err)}
}

// Conn is a client connection whose reads and writes go through IO and whose read
// deadline is armed lazily.
//
// fasthttp moves the read deadline twice per request (idle limit, then header limit), and
// each move is a runtime timer update. Conn arms the socket only when the wanted deadline
// is earlier than the armed one; a later wanted deadline keeps the earlier armed one, and
// when that one fires Read sees the timeout, finds the wanted deadline still ahead, re-arms
// it and reads again. So a deadline never fires late, at worst it fires early once and is
// pushed on: a few timer updates per connection per header timeout instead of two per request.
type Conn struct {
	net.Conn
	raw IO

	mu    sync.Mutex // guards want and armed: deadlines may be set from other goroutines
	want  time.Time  // read deadline the caller asked for; zero = none
	armed time.Time  // read deadline set on the socket; zero = none
}

func NewConn(c net.Conn) net.Conn {
	rc := &Conn{Conn: c}
	rc.raw.Init(c)
	if rc.raw.RC == nil {
		return c
	}
	return rc
}

func (c *Conn) Read(p []byte) (int, error) {
	for {
		n, err := c.raw.Read(c.Conn, p)
		if err == nil || !errors.Is(err, os.ErrDeadlineExceeded) || !c.rearm() {
			return n, err
		}
	}
}

// rearm handles a fired read deadline: if the wanted deadline is still ahead (or none), it
// arms the socket with it and reports true, so Read tries again.
func (c *Conn) rearm() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.want.IsZero() && !time.Now().Before(c.want) {
		return false
	}
	c.armed = c.want
	return c.Conn.SetReadDeadline(c.want) == nil
}

// SetReadDeadline records t and arms the socket only when t is earlier than the armed
// deadline (or none is armed).
func (c *Conn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.want = t
	if t.IsZero() || (!c.armed.IsZero() && !t.Before(c.armed)) {
		return nil // the armed deadline fires first, or none is wanted: Read re-arms then
	}
	c.armed = t
	return c.Conn.SetReadDeadline(t)
}

// SetDeadline sets both deadlines; the read one is armed as asked.
func (c *Conn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.want, c.armed = t, t
	return c.Conn.SetDeadline(t)
}

func (c *Conn) Write(p []byte) (int, error) { return c.raw.Write(c.Conn, p) }

// CloseWrite half-closes the connection, which the tunnel relies on.
func (c *Conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// Listener hands out Conns.
type Listener struct{ net.Listener }

func (l Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return NewConn(c), nil
}

// Pending reports, without blocking, whether bytes from the peer wait to be read (always false
// off Linux).
func (c *Conn) Pending() bool { return c.raw.Pending() }

// RawConn is the socket under c, for a Poller.
func (c *Conn) RawConn() syscall.RawConn { return c.raw.RC }
