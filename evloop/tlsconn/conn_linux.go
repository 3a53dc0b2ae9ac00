//go:build linux

package tlsconn

import (
	"crypto/tls"
	"errors"
	"net"
	"os"
	"syscall"
	"time"

	"ballast/evloop"
)

// writeChunk is the most plaintext one Write encrypts before it writes: its ciphertext (with
// the records' overhead) fits a 16 KiB buffer of the shard's pool.
const writeChunk = 15 << 10

// Conn is an established server-side TLS connection.
type Conn struct {
	tc *tls.Conn
	t  transport
	// plain is how many bytes of plaintext the pending ciphertext stands for: the next
	// Write's first plain bytes are those, counted once that ciphertext went out.
	plain int
	// scratch joins a Writev's two slices into one record.
	scratch []byte
	// more: the last Read filled its buffer, so crypto/tls may hold more decrypted bytes.
	more bool
}

// transport is crypto/tls's net.Conn: the handshake's blocking duplicate until Attach, then
// the shard's descriptor.
type transport struct {
	prefix []byte // bytes read from the descriptor before the handshake (HandshakeWith), read first
	nc     net.Conn
	f      *evloop.FD
	la, ra net.Addr
	wbuf   []byte // ciphertext collected from crypto/tls (a buffer of the shard's pool)
	sent   int    // how much of wbuf the socket has taken
	// The record boundaries of every byte read from the socket (records), so that Read
	// knows whether crypto/tls may hold a whole record the socket no longer shows.
	rec records
}

// records follows the TLS record layer of a byte stream: each record is a 5-byte header
// whose last two bytes are the length of what follows.
type records struct {
	hdr  [5]byte
	hn   int // header bytes of the current record seen
	left int // bytes of the current record's body still to come
	// ends counts the records that arrived whole since crypto/tls was last known to have
	// taken every whole record it had (an upper bound: some may be taken already).
	ends int
}

// see follows the records through p, the next bytes of the stream.
func (r *records) see(p []byte) {
	for len(p) > 0 {
		if r.left > 0 {
			k := min(r.left, len(p))
			r.left -= k
			p = p[k:]
			if r.left == 0 {
				r.ends++
			}
			continue
		}
		k := copy(r.hdr[r.hn:], p)
		r.hn += k
		p = p[k:]
		if r.hn == len(r.hdr) {
			r.hn, r.left = 0, int(r.hdr[3])<<8|int(r.hdr[4])
			if r.left == 0 {
				r.ends++
			}
		}
	}
}

// errWouldBlock is the transport's "nothing to read now": temporary, so crypto/tls keeps the
// partial record and does not latch the error.
var errWouldBlock net.Error = wouldBlock{}

type wouldBlock struct{}

func (wouldBlock) Error() string   { return "tlsconn: would block" }
func (wouldBlock) Timeout() bool   { return true }
func (wouldBlock) Temporary() bool { return true }

func (t *transport) Read(p []byte) (int, error) {
	if len(t.prefix) > 0 { // bytes that came after a PROXY header: the stream's first
		n := copy(p, t.prefix)
		if t.prefix = t.prefix[n:]; len(t.prefix) == 0 {
			t.prefix = nil
		}
		t.rec.see(p[:n])
		return n, nil
	}
	var n int
	var err error
	switch {
	case t.f != nil:
		n, err = t.f.Read(p)
		if err == evloop.ErrAgain {
			return 0, errWouldBlock
		}
	case t.nc != nil:
		n, err = t.nc.Read(p)
	default:
		return 0, net.ErrClosed
	}
	t.rec.see(p[:n])
	return n, err
}

func (t *transport) Write(p []byte) (int, error) {
	if t.f == nil {
		if t.nc == nil {
			return 0, net.ErrClosed
		}
		return t.nc.Write(p)
	}
	if t.wbuf == nil {
		t.wbuf = t.f.Shard().GetBuf(max(len(p), 16<<10))
	}
	t.wbuf = append(t.wbuf, p...)
	return len(p), nil
}

func (t *transport) Close() error {
	if t.nc != nil {
		return t.nc.Close()
	}
	return nil
}

func (t *transport) LocalAddr() net.Addr  { return t.la }
func (t *transport) RemoteAddr() net.Addr { return t.ra }

func (t *transport) SetDeadline(d time.Time) error {
	if t.nc != nil {
		return t.nc.SetDeadline(d)
	}
	return nil
}

func (t *transport) SetReadDeadline(d time.Time) error {
	if t.nc != nil {
		return t.nc.SetReadDeadline(d)
	}
	return nil
}

func (t *transport) SetWriteDeadline(d time.Time) error {
	if t.nc != nil {
		return t.nc.SetWriteDeadline(d)
	}
	return nil
}

// Handshake runs the server handshake on the connected socket fd within timeout, blocking
// its goroutine (never a shard's). fd stays the caller's: on success hand it and the Conn to
// a shard (Attach); on failure close fd.
func Handshake(fd int, cfg *tls.Config, timeout time.Duration) (*Conn, error) {
	return HandshakeWith(fd, cfg, timeout, Options{})
}

// Options are what HandshakeWith knows of a connection besides its descriptor.
type Options struct {
	// Prefix holds bytes already read from the descriptor (those after a PROXY header: the
	// ClientHello's start): crypto/tls reads them before the socket. HandshakeWith keeps it.
	Prefix []byte
	// Local and Remote, when not nil, are the addresses the connection reports (a PROXY
	// header's) instead of the socket's: crypto/tls's ClientHelloInfo.Conn reports them.
	Local, Remote net.Addr
}

// HandshakeWith is Handshake for a connection that o says more of.
func HandshakeWith(fd int, cfg *tls.Config, timeout time.Duration, o Options) (*Conn, error) {
	d, err := dupCloexec(fd)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(d), "tls")
	nc, err := net.FileConn(f) // a second duplicate, in the runtime's poller
	_ = f.Close()
	if err != nil {
		return nil, err
	}
	c := &Conn{}
	c.t.nc, c.t.la, c.t.ra, c.t.prefix = nc, nc.LocalAddr(), nc.RemoteAddr(), o.Prefix
	if o.Local != nil {
		c.t.la = o.Local
	}
	if o.Remote != nil {
		c.t.ra = o.Remote
	}
	_ = nc.SetDeadline(time.Now().Add(timeout))
	c.tc = tls.Server(&c.t, cfg)
	if err := c.tc.Handshake(); err != nil {
		_ = nc.Close()
		return nil, err
	}
	_ = nc.SetDeadline(time.Time{})
	return c, nil
}

func dupCloexec(fd int) (int, error) {
	r, _, e := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_DUPFD_CLOEXEC, 0)
	if e != 0 {
		return -1, os.NewSyscallError("fcntl", e)
	}
	return int(r), nil
}

// ConnectionState is crypto/tls's: the version, the cipher suite, the negotiated protocol.
func (c *Conn) ConnectionState() tls.ConnectionState { return c.tc.ConnectionState() }

// Attach moves the connection onto f, the shard's registration of the original descriptor;
// on the shard's goroutine. The handshake's duplicate is closed. crypto/tls may already hold
// bytes that came after the handshake (a request sent at once): the caller reads first.
func (c *Conn) Attach(f *evloop.FD) {
	if c.t.nc != nil {
		_ = c.t.nc.Close()
		c.t.nc = nil
	}
	c.t.f = f
}

// Read reads decrypted bytes into p: evloop.ErrAgain when none are there, io.EOF at the
// peer's close_notify (or its close at a record boundary), another error when the
// connection failed (a bad record, a reset).
//
// A Read that returned bytes leaves Ready's Readable set when crypto/tls may hold more than
// the socket shows: decrypted bytes (p was filled) or a whole record (more arrived whole
// than were taken since crypto/tls last asked the socket in vain); else Readable is the
// socket's, as the last read(2) left it, and crypto/tls holds at most part of a record, whose
// rest the socket will signal.
func (c *Conn) Read(p []byte) (int, error) {
	fromInput := c.more
	n, err := c.tc.Read(p)
	if len(c.t.wbuf) > c.t.sent {
		_ = c.flush() // an alert or a key update crypto/tls answered while reading
	}
	r := &c.t.rec
	if n > 0 {
		if !fromInput && r.ends > 0 {
			r.ends-- // the record the bytes came from (with those before it, not counted off)
		}
		c.more = n == len(p)
		if c.more || r.ends > 0 {
			c.t.f.Ready |= evloop.Readable // crypto/tls may hold more than the socket shows
		}
		return n, nil
	}
	if err == errWouldBlock { // crypto/tls passes the transport's on as it is
		// It asked the socket for more: every whole record it had is taken, and nothing
		// decrypted is left.
		r.ends, c.more = 0, false
		return 0, evloop.ErrAgain
	}
	if err == nil {
		return 0, evloop.ErrAgain
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return 0, evloop.ErrAgain
	}
	return 0, err
}

// Write is Writev(p, nil).
func (c *Conn) Write(p []byte) (int, error) { return c.Writev(p, nil) }

// Writev encrypts and writes a and then b, as evloop.FD.Writev does: it returns how many of
// their bytes went out whole (ErrAgain when none), and the caller offers the rest again,
// first, once the descriptor is writable.
func (c *Conn) Writev(a, b []byte) (int, error) {
	total := len(a) + len(b)
	done := 0
	if c.Pending() {
		if err := c.flush(); err != nil {
			return 0, err
		}
		done = min(c.plain, total)
	}
	c.plain = 0
	for done < total {
		n := min(total-done, writeChunk)
		if err := c.encrypt(a, b, done, n); err != nil {
			c.dropWbuf()
			return done, err
		}
		w, err := c.t.f.Write(c.t.wbuf)
		if err != nil && err != evloop.ErrAgain {
			c.dropWbuf()
			return done, err
		}
		if w == len(c.t.wbuf) {
			c.dropWbuf()
			done += n
			continue
		}
		c.t.sent, c.plain = w, n
		if done == 0 {
			return 0, evloop.ErrAgain
		}
		return done, nil
	}
	return total, nil
}

// encrypt has crypto/tls encrypt bytes [off, off+n) of a then b into t.wbuf.
func (c *Conn) encrypt(a, b []byte, off, n int) error {
	switch {
	case off+n <= len(a):
		_, err := c.tc.Write(a[off : off+n])
		return err
	case off >= len(a):
		_, err := c.tc.Write(b[off-len(a) : off-len(a)+n])
		return err
	}
	// Spanning both: one record, through a copy.
	if c.scratch == nil {
		c.scratch = c.t.f.Shard().GetBuf(writeChunk)
	}
	p := append(append(c.scratch[:0], a[off:]...), b[:off+n-len(a)]...)
	_, err := c.tc.Write(p)
	c.t.f.Shard().PutBuf(c.scratch)
	c.scratch = nil
	return err
}

// flush writes the pending ciphertext (a short Write's, or what crypto/tls wrote on its
// own: an alert, a key update, which stand for no plaintext); nil when all of it went out.
func (c *Conn) flush() error {
	n, err := c.t.f.Write(c.t.wbuf[c.t.sent:])
	c.t.sent += n
	if c.t.sent < len(c.t.wbuf) {
		if err == nil {
			err = evloop.ErrAgain
		}
		return err
	}
	c.dropWbuf()
	return nil
}

// Pending reports whether ciphertext waits for the socket (a Write reported short).
func (c *Conn) Pending() bool { return len(c.t.wbuf) > c.t.sent }

func (c *Conn) dropWbuf() {
	if c.t.wbuf != nil {
		c.t.f.Shard().PutBuf(c.t.wbuf)
		c.t.wbuf, c.t.sent = nil, 0
	}
}

// CloseWrite sends close_notify (best effort: as much as the socket takes) and shuts the
// socket's writing side.
func (c *Conn) CloseWrite() {
	_ = c.tc.CloseWrite()
	if c.Pending() {
		_ = c.flush()
	}
	c.t.f.ShutdownWrite()
}

// Release gives the Conn's buffers back to the shard; the caller closes the descriptor.
func (c *Conn) Release() {
	if c.t.f != nil {
		c.dropWbuf()
	}
	if c.t.nc != nil {
		_ = c.t.nc.Close()
		c.t.nc = nil
	}
}
