package httpproxy

import (
	"ballast/sockio"
	"bufio"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// bodyProgress is the part of a request body that must arrive within the body timeout
// (listener.idle_timeout): the timeout restarts only after this much more has arrived. It
// equals maxBufferedBody, so a body read whole before forwarding (at most that size) and a
// streamed one, chunked or not, obey the same rule; a body trickling in below bodyProgress
// per timeout cannot hold a backend slot for longer than the timeout.
const bodyProgress = maxBufferedBody

// upload relays a streamed request body from the client to the backend. The client side's
// read deadline, armed for the body timeout when the headers arrived (headerReceived), moves
// on only after each bodyProgress bytes, so the timeout bounds a trickle and not just
// silence; the backend side's write deadline moves on while data flows, so it bounds
// inactivity, not the transfer.
//
// The body is sent by its own goroutine (send) while the attempt waits for the response; join
// ends it. Fields other than stopped belong to that goroutine until join returns.
type upload struct {
	r        io.Reader
	ctx      *fasthttp.RequestCtx
	conn     net.Conn      // the backend connection being written
	bw       *bufio.Writer // its writer, flushed after every piece of body (see WriteTo)
	n        int64
	err      error // the client side failed (not set once stopped)
	armed    time.Time
	progress int64         // bytes since the client deadline was last moved on
	deadline time.Time     // the client read deadline the body timeout set last
	idle     time.Duration // the body timeout (listener.idle_timeout)
	rt       time.Duration // backend inactivity limit

	stopped     atomic.Bool // the response came first: read no more of the body
	interrupted bool        // stopping cut a client read short: the body cannot be drained
}

// errUploadStopped ends the body of a request the backend answered before reading it all.
var errUploadStopped = errors.New("backend answered before the request body was sent")

func (u *upload) Read(p []byte) (int, error) {
	if u.stopped.Load() {
		return 0, errUploadStopped
	}
	n, err := u.r.Read(p)
	u.n += int64(n)
	u.progress += int64(n)
	if err != nil && err != io.EOF {
		if u.stopped.Load() {
			u.interrupted = true // join's deadline woke this read
		} else {
			u.err = err
		}
	}
	now := time.Now()
	if u.progress >= bodyProgress && u.idle > 0 {
		u.progress = 0
		u.deadline = now.Add(u.idle)
		_ = u.ctx.SetReadDeadline(u.deadline)
	}
	if u.conn != nil && now.Sub(u.armed) >= deadlineRefresh {
		// Both ways: the wait for response headers, too, counts from the last body byte.
		u.armed = now
		_ = u.conn.SetDeadline(now.Add(u.rt))
	}
	return n, err
}

// send writes req, whose body is u, through bw from a new goroutine and reports the result
// on the returned channel. A client that fails or stalls past the body timeout also ends the
// attempt's wait for response headers, which the backend will not send for half a body.
func (u *upload) send(req *fasthttp.Request, bw *bufio.Writer) chan error {
	u.bw = bw
	u.stopped.Store(false) // a retry sends the untouched body again
	done := make(chan error, 1)
	go func() {
		err := req.Write(bw)
		if err == nil {
			err = bw.Flush()
		}
		if err != nil && u.err != nil {
			_ = u.conn.SetReadDeadline(time.Now())
		}
		done <- err
	}()
	return done
}

// join waits for send's goroutine and returns its error. When the goroutine is still
// sending (the response headers came first, or waiting for them failed) it is stopped: its
// backend write and its client read are woken by deadlines in the past. cut reports that
// case. If a client read was cut short, the rest of the body cannot be drained: the read
// failed the server's request stream, so fasthttp closes the client connection after the
// response. Otherwise the client deadline is put back and the server drains the rest of the
// body before the next request (or closes the connection if too much is left).
func (u *upload) join(sending chan error) (err error, cut bool) {
	select {
	case err = <-sending:
		return err, false
	default:
	}
	u.stopped.Store(true)
	now := time.Now()
	_ = u.conn.SetWriteDeadline(now)
	if rc, ok := u.ctx.Conn().(*sockio.Conn); !ok || !rc.Pending() {
		// The goroutine may be waiting for body bytes the client is not sending. (With
		// bytes waiting, its read returns and its next write to the backend fails.)
		_ = u.ctx.SetReadDeadline(now)
	}
	err = <-sending
	if !u.interrupted {
		_ = u.ctx.SetReadDeadline(u.deadline)
	}
	return err, true
}

// SupportsBodyWriteTo tells fasthttp that WriteTo may stand in for Read (it reads through it).
func (u *upload) SupportsBodyWriteTo() bool { return true }

// WriteTo sends the body as it comes from the client. fasthttp would gather it in the
// connection's writer until that is full, so the request headers and the first bytes could
// wait there for more body indefinitely while the backend, which might refuse the request at
// once, never sees them. WriteTo flushes the headers first and then every piece it relays.
func (u *upload) WriteTo(w io.Writer) (int64, error) {
	if err := u.bw.Flush(); err != nil {
		return 0, err
	}
	bp := relayBufPool.Get().(*[]byte)
	defer relayBufPool.Put(bp)
	var total int64
	for {
		n, err := u.Read(*bp)
		if n > 0 {
			if _, werr := w.Write((*bp)[:n]); werr != nil {
				return total, werr
			}
			total += int64(n)
			if werr := u.bw.Flush(); werr != nil {
				return total, werr
			}
		}
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}
