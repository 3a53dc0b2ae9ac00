package sockio

import (
	"io"
	"net"
	"sync/atomic"
	"time"
)

// Pipe copies between a and b in both directions until both have ended or an error ends one;
// a FIN is passed on as a half-close (CloseWrite) and the other direction keeps flowing, and an
// error in either direction closes both connections. It counts the bytes moved from a to b in
// ab and from b to a in ba (either may be nil) as they move. The L4 proxy and the HTTP plane's
// Upgrade tunnel both copy with it.
//
// Between two *net.TCPConn on Linux it splices and applies idle (0 = none): the connections
// close when neither direction has moved a byte for that long, and Pipe reports true. Any other
// pair (TLS, a reader holding buffered bytes) is copied through user space without an idle
// timeout.
func Pipe(a, b net.Conn, idle time.Duration, ab, ba *atomic.Uint64) bool {
	ta, okA := a.(*net.TCPConn)
	tb, okB := b.(*net.TCPConn)
	if okA && okB {
		return pipeTCP(ta, tb, idle, ab, ba)
	}
	copyBoth(a, b, ab, ba)
	return false
}

// copyBoth is the user-space two-way copy with half-close.
func copyBoth(a, b net.Conn, ab, ba *atomic.Uint64) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		copyOne(a, b, ba)
	}()
	copyOne(b, a, ab)
	<-done
}

// copyOne copies src to dst; at src's end it half-closes dst, on an error it closes both.
func copyOne(dst, src net.Conn, n *atomic.Uint64) {
	w := io.Writer(dst)
	if n != nil {
		w = countingWriter{dst, n}
	}
	if _, err := io.Copy(w, src); err != nil {
		_ = src.Close()
		_ = dst.Close()
		return
	}
	closeWrite(dst)
}

// closeWrite half-closes c, looking through a wrapper that hides the connection's CloseWrite
// (fasthttp's hijacked connection offers UnsafeConn); without one it does nothing and the
// final Close ends both directions.
func closeWrite(c net.Conn) {
	if u, ok := c.(interface{ UnsafeConn() net.Conn }); ok {
		c = u.UnsafeConn()
	}
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
}

type countingWriter struct {
	w io.Writer
	n *atomic.Uint64
}

func (c countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n.Add(uint64(n))
	return n, err
}
