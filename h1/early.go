//go:build linux

package h1

import "ballast/evloop"

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
