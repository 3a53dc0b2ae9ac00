//go:build linux

package h1

import (
	"ballast/evloop"
	"ballast/httpcore"
)

// earlyResponse reads what the backend of the exchange's attempt sent before its connection
// stopped taking the request body (a write failed): a response head there is passed on as
// any early response is (the client's connection then closes: the rest of its body is
// unread). It reports whether the attempt was dealt with (answered, or failed by the read);
// false when nothing of a response was there, for the caller to fail the attempt.
func (ex *exchange) earlyResponse() bool {
	a := ex.a
	bc := a.bc
	if bc == nil {
		return false
	}
	gen, xgen := bc.gen, ex.gen
	bc.Ready |= evloop.Readable // a read tells: it clears the flag on EAGAIN
	a.readResponse()
	// Still the same attempt on the same connection with no response: nothing was there.
	return !(ex.gen == xgen && ex.a == a && a.bc == bc && bc.gen == gen && !ex.resp.started && bc.Ready&evloop.Readable == 0)
}

// maxEarlyDrain bounds what is left of a body answered early that the engine reads and drops
// after the answer to keep the client's connection; with more left it closes after the
// answer.
const maxEarlyDrain = 1 << 20

// mayDrain reports whether the rest of a request body the backend answered before it was all
// read may be read and dropped after the answer, keeping the client's connection for its next
// request (the fasthttp plane drains it too): an HTTP/1 client's Content-Length body with at
// most maxEarlyDrain bytes still to come.
func (ex *exchange) mayDrain() bool {
	_, h1 := ex.c.(*clientConn)
	return h1 && ex.bodyLen > 0 && ex.remain <= maxEarlyDrain
}

// draining reports that the response went out whole before the body it answered: the rest of
// the body is being read and dropped (drainBody).
func (ex *exchange) draining() bool { return ex.resp.started && ex.a == nil && !ex.bodyRead() }

// drainBody reads and drops the rest of the body of an exchange whose response went out
// before it (mayDrain), then finishes the exchange, the connection kept. While the client has
// nothing it waits under the body timer (every bodyMark within idle_timeout, else the
// connection closes). It reads into a pooled buffer, not the shard's: this runs at the end of
// a response, whose bytes may still be there.
func (ex *exchange) drainBody() {
	c, sh := ex.c, ex.sh
	for !ex.bodyRead() {
		if in := c.pending(); len(in) > 0 {
			k := int(min(int64(len(in)), ex.remain))
			c.consume(k)
			ex.got(int64(k))
			continue
		}
		if !c.readable() {
			ex.waitBody()
			return
		}
		buf := sh.s.GetBuf(evloop.ReadBufSize)
		n, err := c.read(buf[:min(int64(cap(buf)), ex.remain)])
		sh.s.PutBuf(buf)
		if err == evloop.ErrAgain {
			ex.waitBody()
			return
		}
		if err != nil {
			ex.failClient(httpcore.ClientFailed)
			return
		}
		ex.got(int64(n))
	}
	c.disarm()
	ex.finish(c.closing())
}
