package httpproxy

import (
	"ballast/sockio"
	"bufio"
	"net"
	"time"

	"github.com/valyala/fasthttp"
)

// deadlineConn remembers the read deadline it last set, so that a keep-alive connection
// re-arms its response timeout at most about once a second instead of on every request
// (each re-arm is a runtime timer update).
//
// It also lets a request be written and its response awaited without the read that would
// return EAGAIN: see writeAndWait.
type deadlineConn struct {
	net.Conn
	until time.Time

	raw   sockio.IO             // reads and writes without entering the runtime's syscall state
	wait  func(fd uintptr) bool // writeThenPark as a method value, made once per connection
	req   *fasthttp.Request     // the request writeAndWait is writing
	bw    *bufio.Writer
	wrote bool
	werr  error

	served int   // requests sent on this connection, for keepalive.max_requests
	sent   int64 // bytes written since roundTrip last reset it: was anything of the request sent?
}

func newDeadlineConn(c net.Conn) *deadlineConn {
	dc := &deadlineConn{Conn: c}
	dc.raw.Init(c)
	dc.wait = dc.writeThenPark
	return dc
}

// Read reads through sockio.IO (see there).
func (dc *deadlineConn) Read(p []byte) (int, error) { return dc.raw.Read(dc.Conn, p) }

// Write writes through sockio.IO (see there) and counts what the socket accepted.
func (dc *deadlineConn) Write(p []byte) (int, error) {
	n, err := dc.raw.Write(dc.Conn, p)
	dc.sent += int64(n)
	return n, err
}

// writeAndWait writes req through bw and returns once the connection is readable (or the
// read deadline passed, or the connection was closed). A plain Write then Read would first
// read, get EAGAIN and only then park in the poller: one wasted syscall per request. Parking
// directly after the write is safe only because the poller's readiness flag is cleared
// before the write (RawConn.Read resets it, then calls writeThenPark), so the response's
// readiness event, which can only follow the request, is never lost. A wake-up without data
// costs nothing worse than the EAGAIN read it replaces.
func (dc *deadlineConn) writeAndWait(req *fasthttp.Request, bw *bufio.Writer) error {
	dc.req, dc.bw, dc.wrote, dc.werr = req, bw, false, nil
	err := dc.raw.RC.Read(dc.wait)
	werr := dc.werr
	dc.req, dc.bw, dc.werr = nil, nil, nil
	if werr != nil {
		return werr
	}
	return err
}

// writeThenPark is the RawConn.Read callback of writeAndWait: the first call writes the
// request and asks to wait for readability, the second reports the connection readable.
func (dc *deadlineConn) writeThenPark(uintptr) bool {
	if dc.wrote {
		return true
	}
	dc.wrote = true
	dc.werr = dc.req.Write(dc.bw)
	if dc.werr == nil {
		dc.werr = dc.bw.Flush()
	}
	return dc.werr != nil
}

// armReadDeadline makes the read deadline of c at most rt and at least rt minus a small slack
// (rt/8, at most one second) after now.
func armReadDeadline(c net.Conn, now time.Time, rt time.Duration) error {
	dc, ok := c.(*deadlineConn)
	if !ok {
		return c.SetReadDeadline(now.Add(rt))
	}
	slack := min(rt/8, time.Second)
	if !dc.until.IsZero() && dc.until.Sub(now) >= rt-slack && dc.until.Sub(now) <= rt {
		return nil
	}
	dc.until = now.Add(rt)
	return dc.Conn.SetReadDeadline(dc.until)
}

// armWatchDeadline makes the read deadline of c a wake-up between watchSlice/4 and
// 2×watchSlice after now (never past the response timeout rt), for an attempt whose client is
// watched while the response is awaited: the client is checked when it fires, and the
// response timeout is judged on the time elapsed, so the deadline need not be exact and a
// pooled connection re-arms it about as rarely as with the whole timeout.
func armWatchDeadline(c net.Conn, now time.Time, rt time.Duration) error {
	d := min(2*watchSlice, rt)
	dc, ok := c.(*deadlineConn)
	if !ok {
		return c.SetReadDeadline(now.Add(d))
	}
	if left := dc.until.Sub(now); !dc.until.IsZero() && left >= watchSlice/4 && left <= d {
		return nil
	}
	dc.until = now.Add(d)
	return dc.Conn.SetReadDeadline(dc.until)
}

// SetReadDeadline records an explicit deadline so armReadDeadline knows the current one.
func (dc *deadlineConn) SetReadDeadline(t time.Time) error {
	dc.until = t
	return dc.Conn.SetReadDeadline(t)
}

// SetDeadline records the read part like SetReadDeadline.
func (dc *deadlineConn) SetDeadline(t time.Time) error {
	dc.until = t
	return dc.Conn.SetDeadline(t)
}
