//go:build linux

package h1

import "ballast/evloop"

// A client that closes its connection (or its sending side) while its request waits for the
// response head is noticed by its end-of-stream edge (evloop.Hangup) and given watchSlice to
// be answered in (as the fasthttp plane did, checking the client once a second): a response
// that starts within it is delivered (a client that only half-closed reads it), else the
// exchange is abandoned, its backend connection closed and its slot freed (499, CH in the
// access log) instead of holding the backend for the whole response timeout. A hedged
// request's client timer is the hedge's: it is not watched.
const watchSlice = int64(1e9)

// watchGone arms the client's tGone timer when its peer has closed its side and the exchange
// waits for a response head.
func (c *clientConn) watchGone() {
	ex := c.ex
	if ex == nil || c.Ready&evloop.Hangup == 0 || !ex.reqDone || ex.resp.started || c.tphase != tNone {
		return
	}
	c.arm(tGone, c.sh.now+watchSlice)
}

// gone is tGone's expiry: the client left and no response has started.
func (c *clientConn) gone() {
	if ex := c.ex; ex != nil && !ex.resp.started {
		c.abort()
	}
}
