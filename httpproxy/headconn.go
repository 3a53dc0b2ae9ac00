package httpproxy

import (
	"bytes"
	"errors"
	"net"
	"sync/atomic"
)

// fasthttp takes lines that end in a bare LF but wants the head itself to end in CRLF CRLF: a
// head that ends in "\n\n" (or a bare LF line then CRLF) never completes, and the client waits
// for read_header_timeout and a 408. RFC 9112 §2.2 lets a server refuse bare LFs; headConn
// refuses such a head at once. It watches the bytes read between a response and the end of
// the next request head (a 100 Continue does not count as a response), and when a head ends
// with a bare LF its Read fails, which fasthttp answers 400 and closes the connection.
// Watching costs one search for LF per read of a head; bodies are not looked at (a request
// whose response came before its body was read, and whose leftover body is drained, may look
// like a head: it gets the 400 and the connection closes, which loses nothing).
type headConn struct {
	net.Conn
	inHead  bool // the bytes read are (still) a request head
	sawLine bool // a non-empty line of this head was read (leading empty lines are skipped)
	prevLF  bool // the last line of the head ended in a bare LF
	lastCR  bool // the last byte read was CR
	lineLen int  // bytes of the current line read so far
	off     atomic.Bool
}

// errBareLF fails the read of a head that ends with a bare LF.
var errBareLF = errors.New("request head ends with a bare LF")

// headListener hands out headConns.
type headListener struct{ net.Listener }

func (l headListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &headConn{Conn: c, inHead: true}, nil
}

func (c *headConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && c.inHead && !c.off.Load() && !c.scan(p[:n]) {
		return 0, errBareLF
	}
	return n, err
}

func (c *headConn) Write(p []byte) (int, error) {
	if !bytes.HasPrefix(p, continue100) {
		c.inHead, c.sawLine, c.prevLF, c.lastCR, c.lineLen = true, false, false, false, 0
	}
	return c.Conn.Write(p)
}

var continue100 = []byte("HTTP/1.1 100 ")

// CloseWrite half-closes the connection, which the tunnel relies on.
func (c *headConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// stop ends the watching for good: the connection becomes a tunnel.
func (c *headConn) stop() { c.off.Store(true) }

// scan follows the head through p and reports false when it ends with a bare LF.
func (c *headConn) scan(p []byte) bool {
	for i := 0; i < len(p); {
		j := bytes.IndexByte(p[i:], '\n')
		if j < 0 {
			c.lineLen += len(p) - i
			c.lastCR = p[len(p)-1] == '\r'
			return true
		}
		j += i
		n := c.lineLen + j - i // the line's bytes before its LF
		cr := j > i && p[j-1] == '\r' || j == i && c.lastCR
		switch {
		case n == 0 || n == 1 && cr:
			// An empty line: the end of the head, unless no line came before it.
			if c.sawLine {
				if !cr || c.prevLF {
					return false
				}
				c.inHead = false
				return true
			}
		default:
			c.sawLine = true
			c.prevLF = !cr
		}
		c.lineLen, c.lastCR = 0, false
		i = j + 1
	}
	return true
}

// headConnOf finds the headConn under a client connection's wrappers, nil when there is none.
func headConnOf(c net.Conn) *headConn {
	for range 4 {
		switch x := c.(type) {
		case *headConn:
			return x
		case *keepConn:
			c = x.Conn
		case *countedConn:
			c = x.Conn
		default:
			return nil
		}
	}
	return nil
}
